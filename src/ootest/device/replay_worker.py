"""The process that replays call examples on the device: ``python -m
ootest.device.replay_worker DEVICE TODO.jsonl OUT.jsonl START``.

Loads the backend (as the plugin does), then for each example of TODO from line
START on writes ``{"begin": i}``, rebuilds it and runs it on the CPU, writes
``{"device": i}``, runs it on the device (Note [Replaying calls]) and writes
``{"i": i, "status": ..., ...}``, one ``write`` and flush per line, so the
supervisor (ootest.opmap.replay) sees which call, and which side of it, a crash
or a hang happened in.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from ootest.device.calls import MAX_ELEMENTS, Unplaced, decode_call, elements, places_apart

#: Ops whose results are not defined by their inputs (by name prefix; seeded random
#: ops are found by their tag): only shapes and dtypes compare.
_UNDEFINED = ("empty", "new_empty", "_empty", "resize", "set_")
#: Ops whose values a correct device may choose otherwise (exact names): which index
#: of equal elements, the signs of a decomposition, which of duplicate indices
#: writes last (rebuilt integer tensors are small: ties and duplicates are the rule).
#: Only shapes and dtypes compare.
_CHOICE = frozenset(
    "argsort argmax argmin linalg_eig linalg_eigh _linalg_eigh linalg_svd _linalg_svd svd "
    "linalg_qr geqrf index_put index_put_ _index_put_impl_ scatter scatter_ put put_ "
    "index_copy index_copy_".split()
)
#: Ops with a result named ``indices`` that ties make a choice of: that result is
#: not compared, the values are.
_TIES = frozenset("sort topk kthvalue mode median nanmedian max min cummax cummin".split())
#: Ops that sum many products or elements: a device may add in another order (or
#: more precisely): tolerances 10x torch.testing's defaults.
_SUMS = frozenset(
    "mm bmm addmm addbmm baddbmm addmv mv dot vdot matmul linear convolution _convolution "
    "sum mean prod cumsum cumprod norm linalg_vector_norm var std var_mean std_mean "
    "logsumexp _softmax _log_softmax native_layer_norm native_batch_norm native_group_norm "
    "_native_batch_norm_legit".split()
)


def _op(name: str) -> Any:
    import torch

    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def _short(text: str, width: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[:width] + "..."


def _compare(
    cpu: Any, dev: Any, values: bool, skip: frozenset[int] = frozenset(), scale: float = 1.0
) -> str | None:
    """None when the device's result matches the CPU's; else what differs. ``skip``:
    results whose values are not compared; ``scale``: of the default tolerances."""
    import torch
    from torch.utils._pytree import tree_leaves

    a, b = tree_leaves(cpu), tree_leaves(dev)
    if len(a) != len(b):
        return f"{len(b)} results, expected {len(a)}"
    for n, (c, d) in enumerate(zip(a, b, strict=True)):
        where = f"result {n}" if len(a) > 1 else "result"
        if isinstance(c, torch.Tensor):
            if not isinstance(d, torch.Tensor):
                return f"{where}: {type(d).__name__}, expected a tensor"
            if c.shape != d.shape or c.dtype != d.dtype:
                return (
                    f"{where}: {str(d.dtype)[6:]}{list(d.shape)}, "
                    f"expected {str(c.dtype)[6:]}{list(c.shape)}"
                )
            if not values or n in skip:
                continue
            d = d.detach().to("cpu")
            rtol: float | None = None
            atol: float | None = None
            if scale != 1.0 and (c.is_floating_point() or c.is_complex()):
                rtol, atol = (x * scale for x in _default_tolerance(c.dtype))
            try:
                torch.testing.assert_close(
                    d, c.detach(), rtol=rtol, atol=atol, equal_nan=True, check_stride=False
                )
            except AssertionError:
                return where + ": " + _mismatch(c.detach(), d)
        elif isinstance(c, (int, float, bool, complex)) and values:
            if isinstance(c, float) and isinstance(d, float):
                if not (math.isclose(c, d, rel_tol=1.3e-6, abs_tol=1e-5) or (c != c and d != d)):
                    return f"{where}: {d!r}, expected {c!r}"
            elif c != d:
                return f"{where}: {d!r}, expected {c!r}"
    return None


#: torch.testing.assert_close's default (rtol, atol) per dtype, as documented.
_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def _default_tolerance(dtype: Any) -> tuple[float, float]:
    return _TOLERANCES.get(str(dtype).removeprefix("torch."), (1.3e-6, 1e-5))


def _mismatch(c: Any, d: Any) -> str:
    import torch

    if not (c.is_floating_point() or c.is_complex()):
        wrong = int((c != d).sum())
        return f"{wrong} of {c.numel()} elements differ"
    c64, d64 = c.to(torch.complex128 if c.is_complex() else torch.float64), d.to(c.dtype)
    d64 = d64.to(c64.dtype)
    diff = (d64 - c64).abs()
    finite = torch.isfinite(diff)
    if not bool(finite.all()):
        return "non-finite values differ"
    rel = diff / c64.abs().clamp_min(1e-30)
    return f"greatest absolute difference {float(diff.max()):.3g}, relative {float(rel.max()):.3g}"


def replay_one(
    rec: dict[str, Any], device: str, on_device: Callable[[], None] | None = None
) -> dict[str, Any]:
    """One example: ``status`` ok | failed | mismatch | unusable, and what was seen.
    ``on_device`` is called right before the op runs on the device (after the call
    was rebuilt and run on the CPU): a crash or hang from there on is the device's.
    A call that raises on the CPU is an error path: ``ok`` (``error_path``) when the
    device raises alike, ``failed`` when it raises something else, ``mismatch``
    when it returns; both exceptions are recorded (``_error_path``)."""
    import torch

    try:
        op = _op(str(rec["op"]))
    except (AttributeError, RuntimeError) as e:
        return {"status": "unusable", "detail": f"no such op in this torch: {_short(str(e))}"}
    spec = json.loads(rec["call"])
    if elements(spec) > MAX_ELEMENTS:
        return {"status": "unusable", "detail": f"more than {MAX_ELEMENTS} elements"}
    seed = int(str(rec["key"])[:8], 16)
    was = rec.get("unplaced")
    if isinstance(was, dict):  # Note [A refresh replays what can change a decision]
        still = _still_unplaced(spec, device, seed, was)
        if still is not None:
            return still
    try:
        (cargs, ckw), (dargs, dkw) = decode_call(spec, device, seed)
    except Unplaced as u:
        if on_device is not None:
            on_device()
        return _unplaced(op, spec, seed, u.error, device, u.call)
    except Exception as e:
        return {"status": "unusable", "detail": f"cannot rebuild the call: {type(e).__name__}: "
                f"{_short(str(e))}"}  # fmt: skip
    cpu_error: Exception | None = None
    try:
        cout = op(*cargs, **ckw)
    except Exception as e:  # an error path: the device must raise alike (below)
        cpu_error = e
    if on_device is not None:
        on_device()
    start = time.perf_counter()
    try:
        dout = op(*dargs, **dkw)
    except Exception as e:
        if cpu_error is not None:
            return _error_path(cpu_error, e, device)
        if places_apart(spec):  # the CPU's call is not this one: nothing to compare
            out = {"status": "unusable", "error": type(e).__name__,
                   "detail": "tensors on the CPU and the device: the device raised "
                   f"{_what(e)}, which the CPU, holding them all, cannot say it should "
                   "not (a cross-device error a test expects?)"}  # fmt: skip
            kernel = _missing_kernel(e)
            if kernel is not None:  # whatever the test expects, no kernel ran
                out["no_kernel"] = kernel
            return out
        return {"status": "failed", "error": type(e).__name__, "detail": _short(str(e))}
    took = time.perf_counter() - start
    if cpu_error is not None:
        return {"status": "mismatch", "cpu_error": _what(cpu_error),
                "detail": f"the CPU raised {_what(cpu_error)}; the device returned"}  # fmt: skip
    name = str(rec["op"]).partition("::")[2].partition(".")[0]
    values = not (
        name.startswith(_UNDEFINED)
        or name in _CHOICE
        or torch.Tag.nondeterministic_seeded in op.tags
    )
    returns = [r.name for r in op._schema.returns]
    skip = frozenset(
        n for n, r in enumerate(returns) if name in _TIES and r in ("indices", "index")
    )
    written = [
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and i < len(cargs)
    ]
    try:
        diff = _compare(
            (cout, [cargs[i] for i in written]),
            (dout, [dargs[i] for i in written]),
            values,
            skip,
            10.0 if name in _SUMS else 1.0,
        )
    except Exception as e:  # reading the result back failed on the device
        return {"status": "failed", "error": type(e).__name__, "detail": _short(str(e))}
    if diff is not None:
        return {"status": "mismatch", "detail": diff}
    return {"status": "ok", "seconds": round(took, 6)}


#: how a call the device could not take inputs of is recorded (``_unplaced``)
UNPLACED = "its inputs cannot be put on the device"


def _still_unplaced(
    spec: Any, device: str, seed: int, was: dict[str, Any]
) -> dict[str, Any] | None:
    """A call an earlier replay recorded ``failed`` because the device could not take
    its inputs (``was``: that row's ``error`` and ``detail``; the CPU ran it):
    inputs of the same dtypes, shapes and strides put on the device again (left
    uninitialized: a dtype the device cannot hold does not depend on values). The
    same error: the same row, without running the op on either side; anything
    else (the device takes them now, or fails otherwise): None, replay it whole."""
    try:
        decode_call(spec, device, seed, placement=True)
    except Unplaced as u:
        row = {"status": "failed", "error": type(u.error).__name__,
               "detail": f"{UNPLACED}: {_short(str(u.error))}"}  # fmt: skip
        if (row["error"], row["detail"]) == (was.get("error"), was.get("detail")):
            return row
    except Exception:
        return None
    return None


def _unplaced(
    op: Any,
    spec: Any,
    seed: int,
    error: Exception,
    device: str,
    call: tuple[list[Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The device could not take the call's inputs: a test making the call could
    not either. ``failed`` when the CPU runs the call; ``unusable`` when it raises
    there: the op never ran on the device, so whether it raises there as on the
    CPU is not known (an error of putting a tensor on the device is no error path
    of the op: issue 36)."""
    where = UNPLACED
    if call is not None:  # the CPU's side, built with the device's (Unplaced.call)
        cargs, ckw = call
    else:
        try:
            (cargs, ckw), _ = decode_call(spec, "cpu", seed)
        except Exception as e:
            return {"status": "unusable", "detail": f"cannot rebuild the call: {_what(e)}"}
    try:
        op(*cargs, **ckw)
    except Exception as cpu_error:
        return {"status": "unusable",
                "detail": f"{where} ({_what(error)}) and it raises on the CPU "
                f"({_what(cpu_error)}): the op never ran on the device"}  # fmt: skip
    return {"status": "failed", "error": type(error).__name__,
            "detail": f"{where}: {_short(str(error))}"}  # fmt: skip


_NO_KERNEL = re.compile(r"Could not run '([\w:.]+)' with arguments from the '[^']+' backend")


def _missing_kernel(e: BaseException) -> str | None:
    """The op a dispatcher's missing-kernel error names (``NotImplementedError``:
    "Could not run 'aten::x' with arguments from the 'B' backend"), else None."""
    if not isinstance(e, NotImplementedError):
        return None
    m = _NO_KERNEL.search(str(e)[:2000])
    return m[1] if m else None


def _what(e: BaseException) -> str:
    return f"{type(e).__name__}: {_short(str(e))}"


def _error_path(cpu: Exception, dev: Exception, device: str) -> dict[str, Any]:
    """A call that raised on both sides (Note [Replaying calls]): alike when the
    device's exception is of the CPU's class or a subclass of it (by the MRO:
    ``NotImplementedError``, a missing kernel's, is a ``RuntimeError``), which is
    what a test expecting the CPU's exception accepts. Whether the messages are
    alike too (``same_message``: the first lines, the device's name read as the
    CPU's) is recorded: a test that matches the message (``assertRaisesRegex``)
    fails on a missing kernel's "Could not run ..." (ootest.select.gather)."""
    both = {"cpu_error": _what(cpu), "error": type(dev).__name__, "device_error": _what(dev)}
    if isinstance(dev, type(cpu)):
        sides = f"{type(cpu).__name__} on the CPU, {type(dev).__name__} on the device"
        same = _first_line(str(dev), device) == _first_line(str(cpu), "cpu")
        if not same:
            sides += ", another message"
        detail = f"error path: raises on the device as on the CPU ({sides})"
        return {"status": "ok", "error_path": True, "same_message": same, **both,
                "detail": detail}  # fmt: skip
    detail = f"{_short(str(dev))} (the CPU raised {_what(cpu)}, which {type(dev).__name__} is not)"
    return {"status": "failed", **both, "detail": detail}


def _first_line(text: str, device: str) -> str:
    """A message's first line with the device's name (``emu:0``, ``emu``) read as
    a placeholder, so "found cpu and emu:0" and "found cpu and cpu" compare."""
    line = text.strip().partition("\n")[0]
    name = device.partition(":")[0]
    return re.sub(rf"\b(?:{re.escape(name)}|cpu)(?::\d+)?\b", "<device>", line, flags=re.I)


def main(argv: list[str]) -> int:
    from ootest.device.activate import DeviceSpec, activate_device

    spec = DeviceSpec.parse(argv[0])
    todo = open(argv[1], encoding="utf-8").read().splitlines()
    out = open(argv[2], "a", encoding="utf-8", buffering=1)
    start = int(argv[3])
    activate_device(spec)
    import torch

    def put(rec: dict[str, Any]) -> None:
        out.write(json.dumps(rec, sort_keys=True) + "\n")
        out.flush()

    put({"hello": str(torch.__version__)})
    for i in range(start, len(todo)):
        put({"begin": i})
        try:
            res = replay_one(json.loads(todo[i]), spec.name, functools.partial(put, {"device": i}))
        except Exception as e:  # never stop the replay at one example
            res = {"status": "unusable", "detail": f"{type(e).__name__}: {_short(str(e))}"}
        put({"i": i, **res})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
