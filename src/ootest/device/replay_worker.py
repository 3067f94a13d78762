"""The process that replays call examples on the device: ``python -m
ootest.device.replay_worker DEVICE TODO.jsonl OUT.jsonl START``.

Loads the backend (as the plugin does), then for each example of TODO from line
START on writes ``{"begin": i}``, replays it (Note [Replaying calls]) and writes
``{"i": i, "status": ..., ...}``, one ``write`` and flush per line, so the
supervisor (ootest.opmap.replay) sees which call a crash or a hang happened in.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

from ootest.device.calls import MAX_ELEMENTS, decode_call, elements

#: Ops whose results are not defined by their inputs (by name prefix; seeded random
#: ops are found by their tag): only shapes and dtypes compare.
_UNDEFINED = ("empty", "new_empty", "_empty", "resize", "set_")


def _op(name: str) -> Any:
    import torch

    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, overload or "default")


def _short(text: str, width: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[:width] + "..."


def _compare(cpu: Any, dev: Any, values: bool) -> str | None:
    """None when the device's result matches the CPU's; else what differs."""
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
            if not values:
                continue
            d = d.detach().to("cpu")
            try:
                torch.testing.assert_close(d, c.detach(), equal_nan=True, check_stride=False)
            except AssertionError:
                return where + ": " + _mismatch(c.detach(), d)
        elif isinstance(c, (int, float, bool, complex)) and values:
            if isinstance(c, float) and isinstance(d, float):
                if not (math.isclose(c, d, rel_tol=1.3e-6, abs_tol=1e-5) or (c != c and d != d)):
                    return f"{where}: {d!r}, expected {c!r}"
            elif c != d:
                return f"{where}: {d!r}, expected {c!r}"
    return None


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


def replay_one(rec: dict[str, Any], device: str) -> dict[str, Any]:
    """One example: ``status`` ok | failed | mismatch | unusable, and what was seen."""
    import torch

    try:
        op = _op(str(rec["op"]))
    except (AttributeError, RuntimeError) as e:
        return {"status": "unusable", "detail": f"no such op in this torch: {_short(str(e))}"}
    spec = json.loads(rec["call"])
    if elements(spec) > MAX_ELEMENTS:
        return {"status": "unusable", "detail": f"more than {MAX_ELEMENTS} elements"}
    seed = int(str(rec["key"])[:8], 16)
    try:
        (cargs, ckw), (dargs, dkw) = decode_call(spec, device, seed)
    except Exception as e:
        return {"status": "unusable", "detail": f"cannot rebuild the call: {type(e).__name__}: "
                f"{_short(str(e))}"}  # fmt: skip
    try:
        cout = op(*cargs, **ckw)
    except Exception as e:
        return {"status": "unusable", "detail": f"fails on the CPU too: {type(e).__name__}: "
                f"{_short(str(e))}"}  # fmt: skip
    start = time.perf_counter()
    try:
        dout = op(*dargs, **dkw)
    except Exception as e:
        return {"status": "failed", "error": type(e).__name__, "detail": _short(str(e))}
    took = time.perf_counter() - start
    name = str(rec["op"]).partition("::")[2].partition(".")[0]
    values = not name.startswith(_UNDEFINED) and torch.Tag.nondeterministic_seeded not in op.tags
    written = [
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and i < len(cargs)
    ]
    try:
        diff = _compare(
            (cout, [cargs[i] for i in written]), (dout, [dargs[i] for i in written]), values
        )
    except Exception as e:  # reading the result back failed on the device
        return {"status": "failed", "error": type(e).__name__, "detail": _short(str(e))}
    if diff is not None:
        return {"status": "mismatch", "detail": diff}
    return {"status": "ok", "seconds": round(took, 6)}


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
            res = replay_one(json.loads(todo[i]), spec.name)
        except Exception as e:  # never stop the replay at one example
            res = {"status": "unusable", "detail": f"{type(e).__name__}: {_short(str(e))}"}
        put({"i": i, **res})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
