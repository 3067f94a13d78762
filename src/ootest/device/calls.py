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
"lo": n?, "hi": n?, "conj": true?, "neg": true?}``, ``{"dtype": name}``, ``{"device": bool}``,
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


class Unplaced(Exception):
    """The device could not take a call's inputs (copying them onto it raised):
    what a test making that call meets first (Note [Replaying calls]). ``cpu``: the
    CPU's side of what was being built; from :func:`decode_call`, ``call``: the
    CPU's (args, kwargs), as ``decode_call(spec, "cpu", seed)`` gives them (built
    once: a replay of a device without a dtype meets this in every call of it)."""

    def __init__(self, error: Exception, cpu: Any = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.cpu = cpu
        self.call: tuple[list[Any], dict[str, Any]] | None = None


def _to(t: Any, device: str, cpu: Any = None) -> Any:
    """``t`` on ``device``; ``Unplaced`` (with ``cpu``, the CPU's side) when it cannot be."""
    try:
        return t.to(device)
    except Exception as e:  # the backend's: a dtype it cannot hold, a failing copy
        raise Unplaced(e, cpu) from e


class Unencodable(Exception):
    """The call holds something an example cannot carry."""


def encode_call(args: Any, kwargs: dict[str, Any], device: str) -> str | None:
    """The call as canonical JSON text (Note [Call examples]); None when it cannot
    be written down."""
    import torch

    if too_many(args, kwargs):
        return None
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


def too_many(args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the call holds more than ``MAX_ITEMS`` arguments and list items, the
    budget ``encode_call`` spends one of per item: counted before any tensor is
    read, so ``stack`` of 1,024 slices costs no encoding of the first 256
    (Note [Capture cost] in ootest.plugin.opcapture)."""
    left = MAX_ITEMS
    todo: list[Any] = [*args, *kwargs.values()]
    while todo:
        a = todo.pop()
        left -= 1
        if left < 0:
            return True
        if isinstance(a, (list, tuple)):
            if len(a) > left:
                return True
            todo.extend(a)
    return False


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
    n = t.numel()
    # a lazy conjugate or negation (Note [Conjugate and negative views]) is how
    # the kernels see the tensor: a copy of a conj view off the device is another
    # call than a copy of its values
    if t.is_conj():
        out["conj"] = True
    if t.is_neg():
        out["neg"] = True
    if not t.is_contiguous():
        out["stride"] = list(t.stride())
    if n:  # where the view sits in its storage, when an op may reach past it
        try:
            offset = t.storage_offset()
            room = t.untyped_storage().nbytes() // max(1, t.element_size())
        except Exception:  # a backend without storages: the view alone
            offset = room = 0
        if offset:
            out["offset"] = offset
        if room > offset + _extent(list(t.shape), list(t.stride())):
            out["storage"] = room
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


def places_apart(spec: Any) -> bool:
    """Whether a call example holds tensors on the device and tensors (not 0-dim:
    torch takes a CPU scalar anywhere) on the CPU: rebuilt with that placement on
    the device, it may raise the cross-device error its test expects, which the
    CPU, holding every tensor, cannot raise (Note [Replaying calls])."""
    found: set[bool] = set()
    todo: list[Any] = [spec]
    while todo and len(found) < 2:
        a = todo.pop()
        if isinstance(a, list):
            todo.extend(a)
        elif isinstance(a, dict):
            if "T" in a:
                if a.get("dev") or a.get("shape"):
                    found.add(bool(a.get("dev")))
            else:
                todo.extend(a.values())
    return len(found) == 2


def example_key(op: str, spec: str) -> str:
    """A call example's identity across indexes and replay files."""
    import hashlib

    return hashlib.sha256(f"{op}\n{spec}".encode()).hexdigest()[:20]


# ------------------------------------------------------------------ rebuilding
def _extent(shape: list[int], stride: list[int]) -> int:
    """Storage elements a view of ``shape`` and ``stride`` spans from its offset."""
    if not shape:
        return 1
    if 0 in shape:
        return 0
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride, strict=True))


def elements(spec: Any) -> int:
    """Elements the example rebuilds or may make (to bound a replay): every tensor's
    storage, and a list of integers read as a size (a factory's, ``repeat``'s)."""
    if isinstance(spec, dict):
        if "T" in spec:
            return max(
                math.prod(int(s) for s in spec.get("shape", ())), int(spec.get("storage", 0))
            )
        return sum(elements(v) for v in spec.values())
    if isinstance(spec, list):
        if spec and all(type(v) is int for v in spec):
            return math.prod(abs(v) for v in spec)
        return sum(elements(v) for v in spec)
    return 0


def decode_call(
    spec: dict[str, Any], device: str, seed: int, *, placement: bool = False
) -> tuple[Any, Any]:
    """The call twice: ``((args, kwargs) on the CPU, (args, kwargs) on the device)``,
    with equal values (Note [Call examples]). ``Unplaced`` when the device cannot
    take an input; ``decode_call(spec, "cpu", seed)`` still gives the CPU's.
    ``placement``: only whether the device takes the inputs (Note [A refresh
    replays what can change a decision]): tensors without kept values are left
    uninitialized, not seeded."""
    import torch

    gen = None if placement else torch.Generator().manual_seed(seed)
    unplaced: list[Unplaced] = []  # the first input the device could not take

    def tensor(a: dict[str, Any]) -> tuple[Any, Any]:
        if unplaced:  # the device failed already: the CPU's side, from the same values
            return _build(a, "cpu", gen)
        try:
            return _build(a, device, gen)
        except Unplaced as u:
            unplaced.append(u)
            return u.cpu, None

    def dec(a: Any) -> tuple[Any, Any]:
        if isinstance(a, list):
            pairs = [dec(b) for b in a]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        if isinstance(a, str) and a in ("inf", "-inf", "nan"):
            return float(a), float(a)
        if not isinstance(a, dict):
            return a, a
        if "T" in a:
            return tensor(a)
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
    if unplaced:
        unplaced[0].call = ([a[0] for a in args], {k: v[0] for k, v in kwargs.items()})
        raise unplaced[0]
    return (
        ([a[0] for a in args], {k: v[0] for k, v in kwargs.items()}),
        ([a[1] for a in args], {k: v[1] for k, v in kwargs.items()}),
    )


_INT_BOUND = 1 << 62  # random integers are drawn inside int64 (hi + 1 must fit)


def _build(a: dict[str, Any], device: str, gen: Any) -> tuple[Any, Any]:
    """Note [Conjugate and negative views]: a tensor recorded with its conj or neg
    bit set is rebuilt as the same lazy view of the rebuilt values, on both sides
    (values are never kept for complex tensors: seeded ones, viewed alike)."""
    if a.get("neg") and "v" in a:  # the kept values are the view's: its base's are negated
        flip = {"inf": "-inf", "-inf": "inf", "nan": "nan"}
        a = {**a, "v": [flip[x] if isinstance(x, str) else -x for x in a["v"]]}
    try:
        cpu, dev = _build_values(a, device, gen)
    except Unplaced as u:
        u.cpu = _viewed(a, u.cpu)
        raise
    cpu = _viewed(a, cpu)
    try:
        dev = _viewed(a, dev)
    except Exception as e:  # the device cannot take the view
        raise Unplaced(e, cpu) from e
    return cpu, dev


def _viewed(a: dict[str, Any], t: Any) -> Any:
    """``t`` as the lazy neg and conj views ``a`` records (Note [Conjugate and
    negative views])."""
    for bit, view in (("neg", "_neg_view"), ("conj", "conj")):
        if a.get(bit):
            import torch

            t = getattr(torch, view)(t)
    return t


def _build_values(a: dict[str, Any], device: str, gen: Any) -> tuple[Any, Any]:
    import torch

    dtype = getattr(torch, str(a["T"]))
    shape = [int(s) for s in a["shape"]]
    n = math.prod(shape)
    stride = [int(s) for s in a["stride"]] if "stride" in a else None
    if stride is None and "offset" not in a and "storage" not in a:
        host = _values(a, dtype, shape, gen)
        return host, _to(host, device, host) if a.get("dev") else host.clone()
    # a view into a storage: the same storage on both sides, viewed with the
    # recorded strides and offset (an expanded tensor has stride 0: it can only be
    # viewed); kept values are written through the view in logical order
    if stride is None:
        stride = list(torch.empty(shape).stride()) if n else [1] * len(shape)
    offset = int(a.get("offset", 0))
    size = max(offset + _extent(shape, stride), int(a.get("storage", 0)))
    base = _values({k: v for k, v in a.items() if k != "v"}, dtype, [size], gen)
    view = base.as_strided(shape, stride, offset)
    overlaps = any(st == 0 and sz > 1 for sz, st in zip(shape, stride, strict=True))
    if "v" in a and not overlaps:
        view.copy_(_values(a, dtype, shape, gen))
    on = _to(base, device, view) if a.get("dev") else base.clone()
    return view, on.as_strided(shape, stride, offset)


def _values(a: dict[str, Any], dtype: Any, shape: list[int], gen: Any) -> Any:
    """A CPU tensor of ``shape``: the kept values, or seeded random ones (without a
    generator: uninitialized, for :func:`decode_call`'s ``placement``)."""
    import torch

    if "v" in a:
        vals = [float(x) if isinstance(x, str) else x for x in a["v"]]
        return torch.tensor(vals, dtype=dtype).reshape(shape)
    if gen is None:  # whether the device takes it: its values do not matter
        return torch.empty(shape, dtype=dtype)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=torch.complex64).to(dtype)
    lo = max(-_INT_BOUND, min(_INT_BOUND, int(a.get("lo", 0))))
    hi = max(lo, min(_INT_BOUND, int(a.get("hi", 4))))
    return torch.randint(lo, hi + 1, shape, generator=gen).to(dtype)
