"""Op names: how a spelled name becomes an overload or a packet.

Note [Op names in the op map]
The index stores overloads as ``ns::name`` (the default overload) or
``ns::name.overload``, and each overload's packet ``ns::name``. People and
tools spell ops in several ways; all of these name the same things:

==========================  ==================================
spelled                     means
==========================  ==================================
``aten::add.Tensor``        the overload ``aten::add.Tensor``
``aten.add.Tensor``         the same (``torch.ops`` spelling)
``torch.ops.aten.add.Tensor`` the same
``add.Tensor``              the same (``aten`` is implied)
``aten::add`` / ``add``     the packet ``aten::add``
``aten.add.default``        the default overload ``aten::add``
==========================  ==================================

A query (``tests-for``) names a packet or an overload exactly. A *support
rule* (a supported-ops list, an emu profile, a config's ``supported_ops``)
follows the emu device's rule instead, so that a profile means the same to
the op map as to the device: a name without overload covers its packet and
the in-place packet (``add`` covers ``aten::add.*`` and ``aten::add_.*``);
a name with an overload covers that overload only. See
``ootest.device.emu._resolve_ops``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ootest.opname import KNOWN_NAMESPACES, OpName, overload_of, parse_op

__all__ = [
    "DATA_TRANSFER",
    "KNOWN_NAMESPACES",
    "OpName",
    "SupportSet",
    "overload_of",
    "parse_op",
]

#: Note [Tensors made from Python data]: ``torch.tensor(data, device=...)`` copies
#: the data onto the device below every dispatch mode, then calls
#: ``aten::lift_fresh`` on the result, whose composite kernel returns its input.
#: The op capture records that call (its dtypes, an example) as the trace of the
#: copy: a test that makes a float64 tensor from a list meets the device's float64
#: there, before any op, and may call no other op at all (``fliplr`` of a 0-d
#: tensor raises in its composite kernel). No backend has a kernel for it, so every
#: support rule covers it; its dtypes and its replay (the copy onto the device)
#: decide.
DATA_TRANSFER = frozenset({"aten::lift_fresh"})


@dataclass(frozen=True)
class SupportSet:
    """Which recorded overloads a backend declares it supports.

    ``everything`` stands for a profile of ``ops: ["*"]``; ``always`` are
    overloads available whatever the profile says (emu's native kernels).
    """

    source: str
    overloads: frozenset[str] = frozenset()
    packets: frozenset[str] = frozenset()
    always: frozenset[str] = frozenset()
    everything: bool = False
    #: Ops declared for some dtypes only: (name as written, its dtypes).
    op_dtypes: tuple[tuple[str, frozenset[str]], ...] = ()

    @classmethod
    def from_names(
        cls, names: Iterable[str], source: str, always: Iterable[str] = ()
    ) -> SupportSet:
        """Support rules from names (Note [Op names in the op map]); ``*`` = every op."""
        overloads: set[str] = set()
        packets: set[str] = set()
        everything = False
        for n in names:
            if n.strip() == "*":
                everything = True
                continue
            op = parse_op(n)
            (packets if op.is_packet else overloads).add(str(op))
        return cls(
            source,
            frozenset(overloads),
            frozenset(packets),
            frozenset(str(overload_of(a)) for a in always),
            everything,
        )

    def covers(self, recorded: str) -> bool:
        """Whether the recorded overload ``recorded`` (``ns::name[.overload]``, as
        the index stores it) is supported (emu's rule): one of the rules
        ``matches`` it, or it needs no kernel (``DATA_TRANSFER``)."""
        return recorded in DATA_TRANSFER or self.matches(recorded)

    def matches(self, recorded: str) -> bool:
        """Whether a rule of this set names ``recorded`` (the naming rule alone)."""
        if self.everything or recorded in self.overloads or recorded in self.always:
            return True
        packet = recorded.partition(".")[0]
        return packet in self.packets or (packet.endswith("_") and packet[:-1] in self.packets)

    def dtype_rules(self) -> tuple[tuple[str, Callable[[str], bool], frozenset[str]], ...]:
        """The per-op dtype rules, each with the test of a recorded overload it
        applies to (the same naming rule as :meth:`covers`)."""
        return tuple(
            (name, SupportSet.from_names([name], self.source).matches, dtypes)
            for name, dtypes in self.op_dtypes
        )

    def with_rule(self, name: str) -> SupportSet:
        """This set plus one more rule (what enabling an op adds)."""
        op = parse_op(name)
        if op.is_packet:
            return replace(self, packets=self.packets | {str(op)})
        return replace(self, overloads=self.overloads | {str(op)})
