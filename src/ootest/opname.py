"""Op names: how a spelled name becomes an overload or a packet (shared vocabulary:
configs, the op map, selection and reports spell ops; see Note [Op names in the op
map] in ``ootest.opmap.names`` for the spellings and the support rule).

Nothing here imports torch or any ootest package but ``errors``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ootest.errors import UserError

__all__ = ["KNOWN_NAMESPACES", "OpName", "overload_of", "parse_op"]

# Namespaces recognised in the dotted spelling (``aten.add.Tensor``) without
# consulting an index; a store adds the namespaces it holds.
KNOWN_NAMESPACES = frozenset({"aten", "prims"})


@dataclass(frozen=True, slots=True)
class OpName:
    """A parsed op name: an overload (``overload`` is a string, ``""`` for the
    default overload) or a packet (``overload`` is None)."""

    ns: str
    name: str
    overload: str | None

    @property
    def packet(self) -> str:
        return f"{self.ns}::{self.name}"

    @property
    def is_packet(self) -> bool:
        return self.overload is None

    def __str__(self) -> str:
        if self.overload:
            return f"{self.packet}.{self.overload}"
        return self.packet


class OpNameError(UserError):
    """Text that cannot be an op name (a reader adds where it was found)."""


def parse_op(text: str, namespaces: Iterable[str] = KNOWN_NAMESPACES) -> OpName:
    """Parse any spelling in Note [Op names in the op map].

    Raises :class:`OpNameError` for text that cannot be an op name.
    """
    raw = text
    s = text.strip().removeprefix("torch.ops.")
    ns = "aten"
    if "::" in s:
        ns, _, s = s.partition("::")
    else:
        head, dot, rest = s.partition(".")
        if dot and head in set(namespaces) and rest:
            ns, s = head, rest
    name, dot, overload = s.partition(".")
    if not ns or not name or (dot and not overload) or not _ident(ns) or not _ident(name):
        raise OpNameError(
            f"expected an op name such as 'aten::add.Tensor', 'aten::add' or 'add'; found {raw!r}"
        )
    if not dot:
        return OpName(ns, name, None)
    if overload == "default":
        overload = ""
    elif not _ident(overload):
        raise OpNameError(
            f"expected an op name such as 'aten::add.Tensor', 'aten::add' or 'add'; found {raw!r}"
        )
    return OpName(ns, name, overload)


def overload_of(recorded: str) -> OpName:
    """The overload a recorded name stands for (a recorded name never is a packet)."""
    op = parse_op(recorded)
    return op if op.overload is not None else OpName(op.ns, op.name, "")


def _ident(s: str) -> bool:
    return s.replace("_", "a").isalnum() and not s[0].isdigit()
