"""Recording the calls a model run makes (runs inside the recorded script's process).

Note [Recording model calls]
``ootest model record -- python my_model.py ...`` runs the script through
``python -m ootest.model.record --out CALLS.json -- my_model.py ...`` under a
:class:`Recorder`, a ``TorchFunctionMode``. Why the function level and not a
``TorchDispatchMode`` (which the op map uses):

- the format names Python-level calls (``torch.mul``, ``torch.nn.functional.embedding``,
  ``torch.Tensor.expand``), the names OpInfos and Torch Spyre's traces use; aten
  names (``aten::addmm``) would be neither;
- the call site is the user's line: at the function level the caller's frame is the
  model's code (``y = self.fc1(x)``), at the dispatch level it is deep in torch;
- replaying a Python-level call exercises what the model exercised: the same
  decompositions, autograd wrappers and dispatch down to the device's kernels.
  (A mode's handler runs with the mode switched off, so only the outermost call is
  recorded: ``F.layer_norm``, not the ``torch.layer_norm`` it calls.)
What it cannot see: the backward pass (autograd's engine calls aten ops, not Python
functions). The op map (``--ootest-ops-capture``) covers aten-level coverage.

Each distinct call (name, every argument's shape, stride, storage offset, dtype and
device, and every literal value) is kept once with a count and its first call sites.
Tensor contents are never stored: a tensor is described by how to regenerate
similar values (``randint`` within its observed range, ``uniform`` between its
observed minimum and maximum, ``rand``, ``zeros``...), two numbers at most.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import linecache
import math
import os
import runpy
import signal
import sys
import time
import types
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ootest.atomic import write_atomic
from ootest.model.journal import SNAPSHOT_SECONDS, Journal

FORMAT = 1
MAX_LOCATIONS = 3  # call sites kept per distinct call
MAX_LITERAL = 64  # values a literal argument may hold (more is data, not a call's shape)

# Tensor methods and functions that read metadata or leave torch: not calls to test.
_METADATA = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "stride",
        "numel",
        "nelement",
        "storage_offset",
        "is_contiguous",
        "data_ptr",
        "element_size",
        "item",
        "tolist",
        "numpy",
        "untyped_storage",
        "storage",
        "get_device",
        "type",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "is_tensor",
        "is_storage",
        "is_nonzero",
        "requires_grad_",
        "retain_grad",
        "register_hook",
        "backward",
        "detach_",
        "share_memory_",
        "pin_memory",
        "is_pinned",
        "result_type",
        "can_cast",
        "promote_types",
        "broadcast_shapes",
        "get_default_dtype",
        "is_same_size",
        "is_set_to",
        "dim_order",
        "has_names",
        "refine_names",
        "rename",
        "align_to",
    }
)
# Python operators a model uses on tensors (other dunders are metadata or printing).
_OPERATORS = frozenset(
    f"__{n}__"
    for n in (
        "getitem setitem add radd iadd sub rsub isub mul rmul imul matmul rmatmul "
        "truediv rtruediv itruediv floordiv rfloordiv ifloordiv mod rmod pow rpow ipow "
        "neg pos abs invert and rand iand or ror ior xor rxor ixor lshift rshift eq ne "
        "lt le gt ge"
    ).split()
)
_NAMESPACES = (
    "torch.nn.functional",
    "torch",
    "torch.linalg",
    "torch.fft",
    "torch.special",
    "torch.Tensor",
)


def _public_names() -> dict[int, str]:
    """id(callable) -> the public dotted name it is reached by (first namespace wins)."""
    index: dict[int, str] = {}
    for prefix in _NAMESPACES:
        ns: Any = torch
        for part in prefix.split(".")[1:]:
            ns = getattr(ns, part)
        for name in dir(ns):
            if name.startswith("_") and not (prefix == "torch.Tensor" and name in _OPERATORS):
                continue
            if name in _METADATA:
                continue
            try:
                obj = getattr(ns, name)
            except Exception:  # some attributes raise on access
                continue
            if isinstance(obj, type | types.ModuleType) or not callable(obj):
                continue
            index.setdefault(id(obj), f"{prefix}.{name}")
    return index


class Unsupported(Exception):
    """An argument the format cannot describe (the call is left out and counted)."""


def _py_repr(v: Any) -> str:
    """A ``py:`` expression for tuples, slices, Ellipsis and literals."""
    if v is None or isinstance(v, bool | int | str):
        return repr(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if v is Ellipsis:
        return "Ellipsis"
    if isinstance(v, slice):
        return f"slice({_py_repr(v.start)}, {_py_repr(v.stop)}, {_py_repr(v.step)})"
    if isinstance(v, tuple):
        inner = ", ".join(_py_repr(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(_py_repr(x) for x in v) + "]"
    if isinstance(v, torch.Tensor):
        raise Unsupported("a tensor inside a tuple or list of other values")
    raise Unsupported(f"a value of type {type(v).__name__}")


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, bool | int | float | str) and not _nonfinite(v))


def _nonfinite(v: Any) -> bool:
    return isinstance(v, float) and not math.isfinite(v)


def _literal_size(v: Any) -> int:
    if isinstance(v, list | tuple):
        return sum(_literal_size(x) for x in v) + 1
    return len(v) // 16 + 1 if isinstance(v, str) else 1


def describe(v: Any, stats: bool) -> dict[str, Any]:
    """One argument as an ``Arg`` mapping (raises :class:`Unsupported`).

    Values are bounded (:data:`MAX_LITERAL`): a call given a long Python list
    (``torch.tensor(data)``) carries data, which a config never stores.
    """
    if not isinstance(v, torch.Tensor) and _literal_size(v) > MAX_LITERAL:
        raise Unsupported(f"a literal too large to write (over {MAX_LITERAL} values)")
    if isinstance(v, torch.Tensor):
        return {"tensor": tensor_spec(v, stats)}
    if isinstance(v, list | tuple) and v and all(isinstance(x, torch.Tensor) for x in v):
        return {"tensor_list": [tensor_spec(x, stats) for x in v]}
    if isinstance(v, torch.dtype | torch.device | torch.memory_format | torch.layout):
        return {"value": str(v)}
    if isinstance(v, torch.Size):
        return {"value": list(v)}
    if _scalar(v):
        return {"value": v}
    if isinstance(v, list) and all(_scalar(x) for x in v):
        return {"value": list(v)}
    return {"py": _py_repr(v)}


def tensor_spec(t: torch.Tensor, stats: bool) -> dict[str, Any]:
    if t.layout != torch.strided or t.is_quantized or t.is_nested:
        raise Unsupported(f"a {t.layout} tensor")
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise Unsupported(f"a tensor subclass ({type(t).__name__})")
    spec: dict[str, Any] = {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "storage_offset": t.storage_offset(),
        "dtype": str(t.dtype),
        "device": str(t.device),
    }
    if stats:
        spec.update(init_for(t))
    return spec


def _round(v: float) -> float:
    return float(f"{v:.4g}")


def init_for(t: torch.Tensor) -> dict[str, Any]:
    """How to regenerate values like ``t``'s: from its range, never its data."""
    if t.numel() == 0 or t.device.type == "meta":
        return {"init": "rand"} if t.dtype.is_floating_point else {"init": "zeros"}
    with torch.no_grad():
        x = t.detach()
        if t.dtype == torch.bool:
            return {"init": "randint", "init_args": {"low": 0, "high": 2}}
        if t.dtype.is_complex:
            return {"init": "randn"}
        if not t.dtype.is_floating_point:
            low, high = int(x.min()), int(x.max()) + 1
            return {"init": "randint", "init_args": {"low": low, "high": high}}
        x = x.float() if x.element_size() < 2 else x  # float8: no min/max of its own
        lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return {"init": "randn"}
    if lo == hi:
        if lo in (0.0, 1.0):
            return {"init": "zeros" if lo == 0.0 else "ones"}
        return {"init": "full", "init_args": {"fill_value": lo}}
    if lo >= 0.0 and hi <= 1.0:
        return {"init": "rand"}
    return {"init": "uniform", "init_args": {"low": _round(lo), "high": _round(hi)}}


@dataclass
class Call:
    name: str
    args: list[dict[str, Any]]
    kwargs: dict[str, dict[str, Any]]
    count: int = 0
    locations: dict[str, int] = field(default_factory=dict)


def _strip_init(d: Any) -> Any:
    """A described argument without its value statistics (the dedupe key)."""
    if isinstance(d, dict):
        return {k: _strip_init(v) for k, v in d.items() if k not in ("init", "init_args")}
    if isinstance(d, list):
        return [_strip_init(x) for x in d]
    return d


class Recorder(TorchFunctionMode):
    """Keeps each distinct call made while it is active (Note [Recording model calls])."""

    def __init__(self, root: str | None = None, journal: Journal | None = None) -> None:
        super().__init__()
        self.root = root or os.getcwd()
        self.journal = journal  # Note [Recording journal]
        self._index: dict[str, int] = {}  # call key -> its index in the journal
        self._changed: set[str] = set()  # keys whose count changed since the last snapshot
        self._snapshot_at = time.monotonic() + SNAPSHOT_SECONDS
        self.calls: dict[str, Call] = {}
        self.left_out: Counter[str] = Counter()
        self.total = 0
        self.enabled = True
        self._names: dict[int, str] | None = None
        here = os.path.dirname(os.path.abspath(__file__))
        self._internal = (
            os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
            os.path.dirname(here) + os.sep,  # ootest
            os.path.dirname(os.path.abspath(contextlib.__file__)) + os.sep + "contextlib",
            os.path.dirname(os.path.abspath(runpy.__file__)) + os.sep + "runpy",
        )

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.enabled:
            self.enabled = False  # describing a call runs torch functions too
            try:
                self.note(func, args, kwargs)
            finally:
                self.enabled = True
        return func(*args, **kwargs)

    def name_of(self, func: Any) -> str | None:
        if self._names is None:
            self._names = _public_names()
        return self._names.get(id(func))

    def note(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        name = self.name_of(func)
        if name is None:
            return  # metadata, property access, private helpers: not model calls
        self.total += 1
        try:
            shape = [describe(a, stats=False) for a in args]
            kw = {k: describe(v, stats=False) for k, v in kwargs.items()}
        except Unsupported as e:
            self.left_out[f"{name}: {e}"] += 1
            return
        key = json.dumps([name, _strip_init(shape), _strip_init(kw)], sort_keys=True)
        call = self.calls.get(key)
        if call is None:  # the first time: describe the values too
            call = self.calls[key] = Call(
                name,
                [describe(a, stats=True) for a in args],
                {k: describe(v, stats=True) for k, v in kwargs.items()},
            )
        call.count += 1
        where = self.location()
        if where in call.locations or len(call.locations) < MAX_LOCATIONS:
            call.locations[where] = call.locations.get(where, 0) + 1
        if self.journal is not None:
            self._journal(key, call, where)

    def _journal(self, key: str, call: Call, where: str) -> None:
        """Note [Recording journal]: a new call at once, counts once a second."""
        assert self.journal is not None
        if key not in self._index:
            self._index[key] = len(self._index)
            self.journal.write(
                {"kind": "call", "name": call.name, "args": call.args, "kwargs": call.kwargs,
                 "location": where}
            )  # fmt: skip
        else:
            self._changed.add(key)
        now = time.monotonic()
        if now >= self._snapshot_at:
            self._snapshot_at = now + SNAPSHOT_SECONDS
            self.snapshot()

    def snapshot(self) -> None:
        if self.journal is None or not self._changed:
            return
        changed = [(self._index[k], self.calls[k]) for k in sorted(self._changed)]
        self._changed.clear()
        self.journal.write(
            {
                "kind": "counts",
                "total": self.total,
                "counts": {str(i): c.count for i, c in changed},
                "locations": {str(i): c.locations for i, c in changed},
                "left_out": dict(self.left_out.most_common()),
            }
        )

    def location(self) -> str:
        """``file:line in function, code: <line>`` of the user code that made the call."""
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(self._internal) and not filename.startswith("<"):
                line = linecache.getline(filename, frame.f_lineno).strip()
                where = f"{self._short(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
                return where + (f", code: {line}" if line else "")
            frame = frame.f_back  # type: ignore[assignment]
        return "unknown"

    def _short(self, filename: str) -> str:
        _, sep, rest = filename.partition("site-packages" + os.sep)
        if sep:
            return "site-packages/" + rest
        try:
            rel = os.path.relpath(filename, self.root)
        except ValueError:
            return filename
        return filename if rel.startswith("..") else rel

    def data(self, command: list[str], exit_code: int) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "command": command,
            "exit_code": exit_code,
            "torch": torch.__version__,
            "total": self.total,
            "left_out": dict(self.left_out.most_common()),
            "calls": [
                {
                    "name": c.name,
                    "args": c.args,
                    "kwargs": c.kwargs,
                    "count": c.count,
                    "locations": c.locations,
                }
                for c in self.calls.values()
            ],
        }


_ACTIVE: list[Recorder] = []


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Calls made inside are not recorded (loading weights, building inputs).

    A no-op when the script does not run under ``ootest model record``.
    """
    rec = _ACTIVE[-1] if _ACTIVE else None
    if rec is None:
        yield
        return
    was, rec.enabled = rec.enabled, False
    try:
        yield
    finally:
        rec.enabled = was


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(target: list[str], out: Path, journal: Path | None = None) -> int:
    """Run ``target`` (``SCRIPT ARGS...`` or ``-m MODULE ARGS...``) as ``__main__``
    under a :class:`Recorder`; write the calls to ``out`` (and, as they come, to
    ``journal``: Note [Recording journal]); return its exit code."""
    head = {"format": FORMAT, "torch": torch.__version__, "command": target}
    rec = Recorder(journal=Journal(journal, head) if journal is not None else None)
    code = 0
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        sys.path.insert(0, os.getcwd())
    else:
        sys.argv = list(target)
        sys.path.insert(0, os.path.dirname(os.path.abspath(target[0])))
    _ACTIVE.append(rec)
    # SIGTERM (a CI job cancelled) ends the script as Ctrl-C does: the calls are written
    signal.signal(signal.SIGTERM, _terminated)
    try:
        with rec:
            if target[0] == "-m":
                runpy.run_module(target[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target[0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        _ACTIVE.remove(rec)
        write_atomic(out, json.dumps(rec.data(target, code)))
        if rec.journal is not None:
            rec.journal.close()
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ootest.model.record")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--journal", type=Path, help="append the calls here as they come")
    p.add_argument("target", nargs=argparse.REMAINDER)
    ns = p.parse_args(argv)
    target = list(ns.target)
    if target and target[0] == "--":
        target = target[1:]
    if not target or (target[0] == "-m" and len(target) < 2):
        p.error("expected SCRIPT [ARGS...] or -m MODULE [ARGS...] after --")
    return run(target, ns.out, ns.journal)


if __name__ == "__main__":
    sys.exit(main())
