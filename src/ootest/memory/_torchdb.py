"""Torch's test database, dumped in a child process (this module imports torch).

Run as ``python -m ootest.memory._torchdb --out FILE [--torch] [--opdb SPEC]...
[--path DIR]... [--backend NAME]``: writes one JSON line per OpInfo / ModuleInfo entry of each
database (``{"kind": "entry", ...}``) and one ``{"kind": "db_error", ...}`` line
per database that cannot be loaded. The ``ootest`` command never imports this
module; see :mod:`ootest.memory._build`.

Note [Device-limited entry fingerprints]
An entry's ``fingerprint`` (the one its variants inherit) is the digest of the
canonical form (Note [Stable fingerprints]) of what the indexed device can see:
every public attribute (names, the generic ``dtypes``/``backward_dtypes``, the
sample-input functions as normalized AST, flags), *without* the dtype lists of
named device types (``dtypesIf``, ``dtypesIfCUDA``, ``backward_dtypesIfXPU``,
...) and the skips/DecorateInfo of other device types, *plus* the dtypes
``supported_dtypes``/``supported_backward_dtypes`` return for the device: for a
privateuse1 backend named ``emu``, ``dtypesIf["emu"]`` or else ``dtypes``, and
``backward_dtypes`` (torch's own methods decide, called in this child with the
backend renamed). So torch 2.14 adding ``backward_dtypesIfXPU`` to every OpInfo,
or a CUDA-only dtype edit, changes no variant on a privateuse1 device. Without
a backend (an index built with no ``--device``) the variants are those torch
instantiates for its built-in device types, and the fingerprint counts every
device type's lists. ``full_fingerprint`` always counts every public attribute.
Helpers a sample-input function calls are part of neither.

Note [Test-limited entry fingerprints]
A skip or DecorateInfo reaches only the variants whose generic class, template
test, device type and dtype it names (torch's ``DecorateInfo.is_active``): a
skip added for ``TestMeta::test_meta_inplace`` changes nothing that
``test_unary_ufuncs.py`` runs, yet it changes the entry's fingerprint and so
every variant of the op in every file (a real 2.13 -> 2.14 upgrade: 2,718
variants of ``test_unary_ufuncs.py`` "modified", none of them by a change that
reaches it). So each entry also has ``test_base``: the fingerprint of the same
view without its skips and DecorateInfos (entries reached from it, a
PythonRefInfo's ``torch_opinfo``, without theirs too: a PythonRefInfo does not
inherit them), and each skip / DecorateInfo its own fingerprint with the names it
is limited to (``decorators``). ``index diff`` compares a variant whose only
changed component is its entry by ``test_base`` plus the decorators that can
reach it (Note [Entry changes that do not reach a variant] in
``ootest.memory._diff``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ootest.memory._fingerprint import TORCH_DBS
from ootest.memory._hashing import Canonizer, canon, describe, digest, qualname, source_of

_CANON = Canonizer()  # one per process: entries share decorators and functions
_DEVICE_CANONS: dict[str, Canonizer] = {}  # the same, per backend (device_view)

_SAMPLE_ATTRS = ("sample_inputs_func", "module_inputs_func")
#: Attributes holding the dtypes of one named device type (``dtypesIf`` maps names to them).
_DEVICE_DTYPES = re.compile(r"^(backward_)?dtypesIf")
_DECORATOR_LISTS = ("decorators", "skips")


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


def _for_device(di: Any, device_types: tuple[str, ...]) -> bool:
    """Whether a skip/DecorateInfo can apply on one of ``device_types``."""
    dt = getattr(di, "device_type", None)
    if dt is None:
        return True
    names = (dt,) if isinstance(dt, str) else tuple(dt)
    return any(n in device_types for n in names)


def _supported(entry: Any, method: str) -> list[str] | None:
    fn = getattr(entry, method, None)
    if fn is None:
        return None
    try:
        return _dtype_names(fn("privateuse1") or ())
    except Exception as e:  # an entry whose method cannot answer: say so in the digest
        return [f"error: {type(e).__name__}"]


def device_view(entry: Any, backend: str | None) -> dict[str, Any]:
    """What a privateuse1 backend named ``backend`` sees of an entry
    (Note [Device-limited entry fingerprints]); every public attribute without one."""
    public = _public(entry)
    if backend is None:
        return public
    device_types = ("privateuse1", backend)
    view = {k: v for k, v in public.items() if not _DEVICE_DTYPES.match(k)}
    for k in _DECORATOR_LISTS:
        if isinstance(view.get(k), (list, tuple)):
            view[k] = [di for di in view[k] if _for_device(di, device_types)]
    view["supported_dtypes(privateuse1)"] = _supported(entry, "supported_dtypes")
    view["supported_backward_dtypes(privateuse1)"] = _supported(entry, "supported_backward_dtypes")
    return view


def test_view(entry: Any, backend: str | None) -> dict[str, Any]:
    """The device's view of an entry without its skips and DecorateInfos (Note
    [Test-limited entry fingerprints]): what every variant of the entry sees."""
    view = device_view(entry, backend)
    for k in _DECORATOR_LISTS:
        view.pop(k, None)
    return view


def _is_entry(obj: Any) -> bool:
    return hasattr(obj, "supported_dtypes") and hasattr(obj, "dtypes")


def _device_canon(backend: str | None) -> Canonizer:
    """The canonizer of ``backend``'s view: entries reached from an entry (a
    PythonRefInfo's ``torch_opinfo``) are described as the device sees them too."""
    if backend is None:
        return _CANON
    found = _DEVICE_CANONS.get(backend)
    if found is None:
        found = _DEVICE_CANONS[backend] = Canonizer(
            lambda obj: device_view(obj, backend) if _is_entry(obj) else None
        )
    return found


def _test_canon(backend: str | None) -> Canonizer:
    """The canonizer of :func:`test_view`: entries reached from an entry are
    described without their skips and DecorateInfos too."""
    key = f"test:{backend}"
    found = _DEVICE_CANONS.get(key)
    if found is None:
        found = _DEVICE_CANONS[key] = Canonizer(
            lambda obj: test_view(obj, backend) if _is_entry(obj) else None
        )
    return found


def describe_entry(db: str, entry: Any, backend: str | None = None) -> dict[str, Any]:
    public = _public(entry)
    return {
        "kind": "entry",
        "db": db,
        "type": entry_kind(entry),
        "name": entry_name(entry),
        "base": str(getattr(entry, "name", "")),
        "variant": str(getattr(entry, "variant_test_name", "") or ""),
        "fingerprint": digest(canon(device_view(entry, backend), _device_canon(backend))),
        "full_fingerprint": digest(canon(public, _CANON)),
        "test_base": digest(canon(test_view(entry, backend), _test_canon(backend))),
        "dtypes": dtypes_per_device(entry),
        "sample": sample_source(entry),
        "decorators": decorate_infos(entry),
    }


def use_backend(name: str) -> None:
    """Name the privateuse1 backend ``name`` in this process, so torch's own
    ``supported_dtypes("privateuse1")`` resolves ``dtypesIf[name]`` as it will on
    the device (this child never loads the backend itself)."""
    import torch
    from torch.utils.backend_registration import rename_privateuse1_backend

    current = torch._C._get_privateuse1_backend_name()
    if current == "privateuseone" and name != current:  # torch's name for it until renamed
        rename_privateuse1_backend(name)
    elif current != name:
        raise ValueError(f"the privateuse1 backend is already named {current!r}, not {name!r}")


def dump(specs: Sequence[str], backend: str | None = None) -> Iterator[dict[str, Any]]:
    for spec in specs:
        try:
            db, entries = load_db(spec)
        except Exception as e:
            yield {"kind": "db_error", "db": spec, "message": _error_text(e)}
            continue
        for entry in entries:
            yield describe_entry(db, entry, backend)


def _error_text(e: BaseException) -> str:
    tail = traceback.format_exception_only(type(e), e)
    return "".join(tail).strip()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ootest.memory._torchdb")
    p.add_argument("--out", required=True)
    p.add_argument("--torch", action="store_true", help="dump the installed torch's databases")
    p.add_argument("--opdb", action="append", default=[])
    p.add_argument("--path", action="append", default=[], help="prepended to sys.path")
    p.add_argument("--backend", help="the privateuse1 backend the index is built for")
    args = p.parse_args(argv)
    from ootest.record.crash import die_with_parent

    die_with_parent()  # a killed build takes this child along
    for path in reversed(args.path):
        sys.path.insert(0, path)
    if args.backend:
        use_backend(args.backend)
    specs = [*(TORCH_DBS if args.torch else ()), *args.opdb]
    with open(args.out, "w", encoding="utf-8") as fh:
        for record in dump(specs, args.backend or None):
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
