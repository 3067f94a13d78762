"""One aten call written down, and built again: the op map's call examples.

Note [Call examples]
Op capture writes, per variant and per (op, dtype signature), the first call and
the largest one (by elements on the device) as a *call example*: the call's
arguments with every tensor replaced by what rebuilding it needs — dtype,
shape, strides when not contiguous, whether it was on the device, and its
values when it is small (at most ``VALUES_UP_TO`` elements; an integer tensor up
to ``RANGE_UP_TO`` elements keeps its smallest and largest value instead, so a
rebuilt index stays in range). Numbers, strings, ``None``, dtypes, devices,
layouts and memory formats are kept as they are; a call holding anything else
(a generator, a sparse or quantized tensor, a subclass) has no example.

``ootest ops replay`` rebuilds each example twice — on the CPU and on the device
under test, from the same values (seeded random values where none were kept) —
runs the op on both and compares (Note [Replaying calls]). Encoding runs in the
capture's dispatch mode (torch imported); this module imports torch lazily so
the format's readers without torch can still import it.

Format (JSON): ``{"args": [A...], "kwargs": {name: A}}`` where A is a number,
string, bool, null, a list of A, or one of
``{"T": dtype, "shape": [...], "stride": [...]?, "dev": bool, "v": [...]?,
"lo": n?, "hi": n?}``, ``{"dtype": name}``, ``{"device": bool}``,
``{"layout": name}``, ``{"memory_format": name}``.
"""

from __future__ import annotations

import json
import math
from typing import Any

VALUES_UP_TO = 64
RANGE_UP_TO = 1 << 16
MAX_ITEMS = 256  # arguments and list items in one call; more: no example
MAX_ELEMENTS = 1 << 24  # a rebuilt call larger than this is not replayed

_NAMED = ("dtype", "device", "layout", "memory_format")


class Unencodable(Exception):
    """The call holds something an example cannot carry."""


def encode_call(args: Any, kwargs: dict[str, Any], device: str) -> str | None:
    """The call as canonical JSON text (Note [Call examples]); None when it cannot
    be written down."""
    import torch

    budget = [MAX_ITEMS]

    def enc(a: Any) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise Unencodable("too many arguments")
        if isinstance(a, torch.Tensor):
            return _tensor(a, device)
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            return a if math.isfinite(a) else repr(a)  # "inf", "nan": JSON has neither
        if isinstance(a, (list, tuple)):
            return [enc(b) for b in a]
        if isinstance(a, torch.dtype):
            return {"dtype": str(a).removeprefix("torch.")}
        if isinstance(a, torch.device):
            return {"device": a.type == device}
        if isinstance(a, torch.layout):
            return {"layout": str(a).removeprefix("torch.")}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a).removeprefix("torch.")}
        raise Unencodable(type(a).__name__)

    try:
        spec = {"args": [enc(a) for a in args], "kwargs": {k: enc(v) for k, v in kwargs.items()}}
    except Unencodable:
        return None
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _tensor(t: Any, device: str) -> dict[str, Any]:
    import torch

    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        raise Unencodable("tensor subclass")
    if t.layout is not torch.strided or t.is_quantized:
        raise Unencodable("layout")
    dev = t.device.type == device
    if not dev and t.device.type != "cpu":
        raise Unencodable("another device")
    out: dict[str, Any] = {
        "T": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "dev": dev,
    }
    if not t.is_contiguous():
        out["stride"] = list(t.stride())
    n = t.numel()
    if t.is_complex() or n == 0 or n > RANGE_UP_TO:
        return out
    exact = t.is_floating_point() or t.dtype is torch.bool
    if exact and n > VALUES_UP_TO:
        return out
    try:
        host = t.detach().to("cpu") if dev else t.detach()
        if n <= VALUES_UP_TO:
            out["v"] = [_number(x) for x in host.reshape(-1).tolist()]
        else:
            lo, hi = host.aminmax()
            out["lo"], out["hi"] = int(lo.item()), int(hi.item())
    except Exception:  # a device that cannot read this back: no values
        pass
    return out


def _number(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def example_key(op: str, spec: str) -> str:
    """A call example's identity across indexes and replay files."""
    import hashlib

    return hashlib.sha256(f"{op}\n{spec}".encode()).hexdigest()[:20]


# ------------------------------------------------------------------ rebuilding
def elements(spec: Any) -> int:
    """Elements of every tensor the example rebuilds (to bound a replay)."""
    if isinstance(spec, dict):
        if "T" in spec:
            return math.prod(int(s) for s in spec.get("shape", ()))
        return sum(elements(v) for v in spec.values())
    if isinstance(spec, list):
        return sum(elements(v) for v in spec)
    return 0


def decode_call(spec: dict[str, Any], device: str, seed: int) -> tuple[Any, Any]:
    """The call twice: ``((args, kwargs) on the CPU, (args, kwargs) on the device)``,
    with equal values (Note [Call examples])."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def dec(a: Any) -> tuple[Any, Any]:
        if isinstance(a, list):
            pairs = [dec(b) for b in a]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        if isinstance(a, str) and a in ("inf", "-inf", "nan"):
            return float(a), float(a)
        if not isinstance(a, dict):
            return a, a
        if "T" in a:
            return _build(a, device, gen)
        if "dtype" in a:
            d = getattr(torch, str(a["dtype"]))
            return d, d
        if "device" in a:
            return torch.device("cpu"), torch.device(device if a["device"] else "cpu")
        if "layout" in a:
            v = getattr(torch, str(a["layout"]))
            return v, v
        if "memory_format" in a:
            v = getattr(torch, str(a["memory_format"]))
            return v, v
        raise ValueError(f"unknown argument {sorted(a)}")

    args = [dec(a) for a in spec.get("args", [])]
    kwargs = {k: dec(v) for k, v in spec.get("kwargs", {}).items()}
    return (
        ([a[0] for a in args], {k: v[0] for k, v in kwargs.items()}),
        ([a[1] for a in args], {k: v[1] for k, v in kwargs.items()}),
    )


def _build(a: dict[str, Any], device: str, gen: Any) -> tuple[Any, Any]:
    import torch

    dtype = getattr(torch, str(a["T"]))
    shape = [int(s) for s in a["shape"]]
    n = math.prod(shape)
    if "v" in a:
        vals = [float(x) if isinstance(x, str) else x for x in a["v"]]
        host = torch.tensor(vals, dtype=dtype).reshape(shape)
    elif dtype is torch.bool:
        host = torch.randint(0, 2, shape, generator=gen).bool()
    elif dtype.is_floating_point:
        host = torch.randn(shape, generator=gen).to(dtype)
    elif dtype.is_complex:
        host = torch.randn(shape, generator=gen, dtype=torch.complex64).to(dtype)
    else:
        lo = int(a.get("lo", 0))
        hi = int(a.get("hi", 4))
        host = torch.randint(lo, hi + 1, shape, generator=gen).to(dtype)
    if "stride" in a and n:
        # the same storage on both sides, viewed with the recorded strides (an
        # expanded tensor has stride 0: it cannot be copied into, only viewed)
        stride = [int(s) for s in a["stride"]]
        size = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride, strict=True))
        flat = host.reshape(-1)
        base = flat.repeat(-(-size // n))[:size] if n else flat
        view = base.as_strided(shape, stride)
        if not a.get("dev"):
            return view, base.clone().as_strided(shape, stride)
        return view, base.to(device).as_strided(shape, stride)
    if not a.get("dev"):
        return host, host.clone()
    return host, host.to(device)
