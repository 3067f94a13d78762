"""Torch's test database, dumped in a child process (this module imports torch).

Run as ``python -m ootest.memory._torchdb --out FILE [--torch] [--opdb SPEC]...
[--path DIR]...``: writes one JSON line per OpInfo / ModuleInfo entry of each
database (``{"kind": "entry", ...}``) and one ``{"kind": "db_error", ...}`` line
per database that cannot be loaded. The ``ootest`` command never imports this
module; see :mod:`ootest.memory._build`.

An entry's fingerprint is the digest of the canonical form of all its public
attributes (see Note [Stable fingerprints]): names, dtypes per device type,
the sample-input functions (their normalized AST, not their text), skips and
DecorateInfo entries. Helpers a sample-input function calls are not part of it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ootest.memory._fingerprint import TORCH_DBS
from ootest.memory._hashing import Canonizer, canon, describe, digest, qualname, source_of

_CANON = Canonizer()  # one per process: entries share decorators and functions

_SAMPLE_ATTRS = ("sample_inputs_func", "module_inputs_func")


def load_db(spec: str) -> tuple[str, list[Any]]:
    """(db name, entries) for ``module:attr`` or ``path/to/file.py:attr``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"expected 'module:attr' or 'file.py:attr', found {spec!r}")
    if target.endswith(".py"):
        path = Path(target).resolve()
        sys.path.insert(0, str(path.parent))
        target = path.stem
    module = importlib.import_module(target)
    return f"{target}:{attr}", list(getattr(module, attr))


def entry_kind(entry: Any) -> str:
    return "moduleinfo" if hasattr(entry, "module_cls") else "opinfo"


def entry_name(entry: Any) -> str:
    """The name a variant's op / module axis carries (see ootest.plugin.variant)."""
    if entry_kind(entry) == "moduleinfo":
        return str(entry.name)
    full = getattr(entry, "full_name", None)
    if full:
        return str(full)
    variant = getattr(entry, "variant_test_name", "")
    return f"{entry.name}.{variant}" if variant else str(entry.name)


def _public(entry: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(entry).items() if not k.startswith("_")}


def _dtype_names(value: Any) -> list[str]:
    return sorted(str(d).removeprefix("torch.") for d in value)


def dtypes_per_device(entry: Any) -> dict[str, Any]:
    """``dtypes``, ``dtypesIf<Device>``, ``dtypesIf`` (by device type) and the backward
    variants, as sorted dtype names."""
    out: dict[str, Any] = {}
    for k, v in sorted(_public(entry).items()):
        if "dtypes" not in k.lower() or v is None or isinstance(v, (bool, str)):
            continue
        if isinstance(v, dict):
            out[k] = {str(dev): _dtype_names(ds) for dev, ds in sorted(v.items()) if ds is not None}
        else:
            try:
                out[k] = _dtype_names(v)
            except TypeError:
                continue
    return out


def decorate_infos(entry: Any) -> list[dict[str, Any]]:
    """Each skip / DecorateInfo of an entry, with its own fingerprint."""
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for di in [*(getattr(entry, "decorators", None) or ()), *(getattr(entry, "skips", None) or ())]:
        if id(di) in seen:
            continue
        seen.add(id(di))
        decos = getattr(di, "decorators", None)
        if decos is None:  # a bare decorator, not a DecorateInfo
            out.append({"decorators": [describe(di)], "fingerprint": digest(canon(di, _CANON))})
            continue
        dtypes = getattr(di, "dtypes", None)
        out.append(
            {
                "decorators": [describe(d) for d in decos],
                "cls_name": getattr(di, "cls_name", None),
                "test_name": getattr(di, "test_name", None),
                "device_type": getattr(di, "device_type", None),
                "dtypes": _dtype_names(dtypes) if dtypes is not None else None,
                "active_if": bool(getattr(di, "active_if", True)),
                "fingerprint": digest(canon(di, _CANON)),
            }
        )
    return out


def sample_source(entry: Any) -> str:
    for attr in _SAMPLE_ATTRS:
        fn = getattr(entry, attr, None)
        if fn is not None:
            return source_of(fn) or qualname(fn)
    return ""


def describe_entry(db: str, entry: Any) -> dict[str, Any]:
    public = _public(entry)
    return {
        "kind": "entry",
        "db": db,
        "type": entry_kind(entry),
        "name": entry_name(entry),
        "base": str(getattr(entry, "name", "")),
        "variant": str(getattr(entry, "variant_test_name", "") or ""),
        "fingerprint": digest(canon(public, _CANON)),
        "dtypes": dtypes_per_device(entry),
        "sample": sample_source(entry),
        "decorators": decorate_infos(entry),
    }


def dump(specs: Sequence[str]) -> Iterator[dict[str, Any]]:
    for spec in specs:
        try:
            db, entries = load_db(spec)
        except Exception as e:
            yield {"kind": "db_error", "db": spec, "message": _error_text(e)}
            continue
        for entry in entries:
            yield describe_entry(db, entry)


def _error_text(e: BaseException) -> str:
    tail = traceback.format_exception_only(type(e), e)
    return "".join(tail).strip()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ootest.memory._torchdb")
    p.add_argument("--out", required=True)
    p.add_argument("--torch", action="store_true", help="dump the installed torch's databases")
    p.add_argument("--opdb", action="append", default=[])
    p.add_argument("--path", action="append", default=[], help="prepended to sys.path")
    args = p.parse_args(argv)
    for path in reversed(args.path):
        sys.path.insert(0, path)
    specs = [*(TORCH_DBS if args.torch else ()), *args.opdb]
    with open(args.out, "w", encoding="utf-8") as fh:
        for record in dump(specs):
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
