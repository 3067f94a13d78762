"""Where a backend's declared op support comes from: a list, an emu profile, a config.

Every source becomes a :class:`~ootest.opmap.names.SupportSet`, whose names
follow emu's rule (Note [Op names in the op map]). None of them imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ootest.errors import UserError
from ootest.opmap.names import SupportSet, parse_op

if TYPE_CHECKING:
    from ootest.config.model import OpRef


def from_file(path: str | os.PathLike[str]) -> SupportSet:
    """A supported-ops list: YAML/JSON (a list of names, or a mapping with ``ops:``
    as in an emu profile) or text (one name per line, ``#`` comments)."""
    from ootest.atomic import decode_text

    p = Path(path)
    limit = 16 * 2**20
    try:
        with p.open("rb") as fh:  # at most the limit: /dev/zero was read forever
            data = fh.read(limit + 1)
    except OSError as e:
        raise UserError(
            f"{p}: expected a supported-ops list (YAML or one op per line); cannot read it: "
            f"{e.strerror or e}"
        ) from None
    if len(data) > limit:
        raise UserError(
            f"{p}: expected a supported-ops list of at most {limit:,} bytes; found more"
        )
    text = decode_text(data, str(p))
    if p.suffix in (".yaml", ".yml", ".json"):
        return _from_yaml(p, text)
    names: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if name:
            _check_name(f"{p}:{n}", name)
            names.append(name)
    return SupportSet.from_names(names, str(p))


def _from_yaml(p: Path, text: str) -> SupportSet:
    from ootest.config.smallyaml import load

    data = load(text, str(p))
    if isinstance(data, dict) and "test_suite_config" in data:
        raise UserError(
            f"{p}: expected a supported-ops list; found a test_suite_config. "
            f"Pass it with --config {p} to read its global.supported_ops"
        )
    items: Any = data.get("ops") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UserError(
            f"{p}: expected a list of op names (or a mapping with 'ops:' holding one, as an "
            f"emu profile does); found {type(data).__name__}"
        )
    names: list[str] = []
    op_dtypes: list[tuple[str, frozenset[str]]] = []
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str):
            raise UserError(f"{p}: ops[{i}]: expected an op name; found {item!r}")
        _check_name(f"{p}: ops[{i}]", name)
        names.append(name)
        dtypes = item.get("dtypes") if isinstance(item, dict) else None
        if dtypes is not None:
            if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
                raise UserError(
                    f"{p}: ops[{i}].dtypes: expected a list of dtype names such as "
                    f"[float32, bfloat16]; found {dtypes!r}"
                )
            op_dtypes.append((name, frozenset(dtypes)))
    return replace(SupportSet.from_names(names, str(p)), op_dtypes=tuple(op_dtypes))


def _check_name(where: str, name: str) -> None:
    if name.strip() == "*":
        return
    try:
        parse_op(name)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def from_emu(device: str) -> SupportSet:
    """An emu capability profile (``emu:young``, ``emu:full`` or a profile path),
    read by the device's own reader, with its native kernels always supported."""
    from ootest.device.emu import NATIVE_OPS, read_profile

    name = device.removeprefix("emu:") if device.startswith("emu:") else device
    if device == "emu" or not name:
        name = "young"  # the device's default profile
    prof = read_profile(name)
    found = SupportSet.from_names(
        prof.ops, f"emu:{prof.name}", always=[f"aten::{n}" for n in NATIVE_OPS]
    )
    return replace(
        found, op_dtypes=tuple((op, frozenset(d)) for op, d in sorted(prof.op_dtypes.items()))
    )


def from_probe(ops: Mapping[str, str], source: str) -> SupportSet:
    """The ops a probe of the backend found runnable on it (Note [What a backend
    supports]): each an exact overload, as the index records it."""
    return SupportSet(source, overloads=frozenset(ops))


def from_config(path: str | os.PathLike[str]) -> tuple[SupportSet, list[str]]:
    """A config's composed ``global.supported_ops``; also the names it holds that
    are not aten op names (OpInfo names such as ``nn.functional.relu`` match
    no recorded op), as notes for the user."""
    from ootest.config.load import load_config

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: expected a config file; found no file there")
    cfg = load_config(p, check_paths=False)
    refs = cfg.suite.global_.supported_ops
    if refs is None:
        raise UserError(
            f"{p}: expected global.supported_ops in the config or a file it extends; found "
            "none, so the config allows every op and nothing is missing. Declare the ops the "
            "backend supports under test_suite_config.global.supported_ops"
        )
    return from_refs(refs, str(p))


def from_refs(refs: Iterable[OpRef] | None, source: str) -> tuple[SupportSet, list[str]]:
    """Support rules from a config's composed ``supported_ops`` (None: the config
    declares none, so every op is allowed), and notes on names that are not aten
    op names."""
    if refs is None:
        return SupportSet(source, everything=True), []
    names: list[str] = []
    notes: list[str] = []
    for ref in refs:
        try:
            parse_op(ref.name)
        except UserError:
            where = ref.origin or source
            notes.append(f"{where}: {ref.name!r} is not an aten op name; it matches no recorded op")
            continue
        names.append(ref.name)
    return SupportSet.from_names(names, source), notes
