"""Declared tensors and values -> real ones on the device a test asks for.

Note [Building declared tensors]
- Where: the device the test asks for (``op.sample_inputs(device, dtype)``). A spec's
  ``device`` only says where the trace ran: the trace's main device (the one most of
  a config's tensors name, e.g. ``cuda:0``) and any other accelerator stand for the
  device under test; ``cpu`` tensors of a GPU trace stay on the CPU (a recorded
  host-to-device copy stays one). Device strings among the values follow the same rule.
- Layout: the exact shape, stride and storage offset. One flat storage of
  ``storage_size`` elements is filled, then viewed with ``as_strided``, so
  non-contiguous and even overlapping (expanded, stride 0) layouts are what the
  model saw. ``arange``/``eye`` fill the logical tensor instead.
- Values: generated on the CPU from a generator seeded with
  ``hash(input_config.seed, argument path)``, then copied to the device: the same
  inputs on every run, on every device, whatever the test order (shards, xdist),
  and independent of the global RNG.
- Bounds: a call whose tensors need more than ``OOTEST_MODEL_MAX_BYTES`` (default
  8 GiB) is skipped with that reason before anything is allocated (the schema
  already caps one tensor at 2**32 elements).
"""

from __future__ import annotations

import hashlib
import importlib
import math
import os
import re
import unittest
from dataclasses import dataclass
from typing import Any

import torch

from ootest.config.calls import (
    INITS_NOT_RUN,
    Arg,
    CallSpec,
    TensorSpec,
    dtype_name,
    py_literal,
)

MAX_BYTES_ENV = "OOTEST_MODEL_MAX_BYTES"
DEFAULT_MAX_BYTES = 8 * 2**30

# Device types a string value may name (``cuda:0``, ``spyre``): they stand for the
# device under test. Other strings ("mean", "tanh") are left alone.
_DEVICE = re.compile(r"([a-z][a-z0-9_]*)(?::\d+)?")
_DEVICE_TYPES = frozenset(
    {"cpu", "cuda", "spyre", "xpu", "mps", "hpu", "npu", "mtia", "privateuse1", "meta"}
    | {"xla", "maia", "ipu", "hip", "ve", "lazy", "vulkan", "fpga", "ort"}
)


def _is_cpu(device: str | None) -> bool:
    return device is not None and device.split(":")[0] == "cpu"


@dataclass(frozen=True)
class Target:
    """Where and how one call's inputs are built."""

    device: str  # the device the test asks for
    trace_device: str | None  # the trace's main device (stands for the device under test)
    seed: int

    def place(self, recorded: str | None) -> str:
        """Where a tensor or device argument recorded on ``recorded`` goes."""
        if _is_cpu(recorded) and not _is_cpu(self.trace_device or "cuda"):
            return "cpu"
        return self.device

    def is_device(self, text: str) -> bool:
        m = _DEVICE.fullmatch(text)
        if m is None:
            return False
        kinds = {self.device.split(":")[0], (self.trace_device or "cpu").split(":")[0]}
        return m.group(1) in _DEVICE_TYPES or m.group(1) in kinds


def torch_dtype(name: str | None) -> torch.dtype:
    dt = getattr(torch, dtype_name(name or "float32") or "float32")
    assert isinstance(dt, torch.dtype)
    return dt


def _seed(seed: int, path: str) -> int:
    digest = hashlib.sha256(f"{seed}:{path}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def max_bytes() -> int:
    raw = os.environ.get(MAX_BYTES_ENV, "")
    try:
        return int(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def call_bytes(call: CallSpec) -> int:
    return sum(t.storage * torch_dtype(t.dtype).itemsize for t in call.tensors())


def check_size(call: CallSpec, what: str = "this call") -> None:
    """Skip (before allocating) a call whose tensors exceed the memory bound."""
    need, limit = call_bytes(call), max_bytes()
    if need > limit:
        raise unittest.SkipTest(
            f"{what} needs {_size(need)} of input tensors, more than the {_size(limit)} "
            f"ootest allows (set {MAX_BYTES_ENV} to change it)"
        )


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def build_call(
    call: CallSpec, target: Target, prefix: str = ""
) -> tuple[list[Any], dict[str, Any]]:
    """(args, kwargs) of a declared call; tensors on ``target``'s device."""
    check_size(call)
    args = [build_arg(a, target, f"{prefix}args[{i}]") for i, a in enumerate(call.args)]
    kwargs = {k: build_arg(a, target, f"{prefix}kwargs.{k}", key=k) for k, a in call.kwargs.items()}
    return args, kwargs


def build_arg(arg: Arg, target: Target, path: str, key: str | None = None) -> Any:
    if arg.tensor is not None:
        return make_tensor(arg.tensor, target, path)
    if arg.tensor_list is not None:
        return [make_tensor(s, target, f"{path}[{i}]") for i, s in enumerate(arg.tensor_list)]
    if arg.py is not None:
        return py_literal(arg.py)
    return resolve_value(arg.value, target, key)


def resolve_value(value: Any, target: Target, key: str | None = None) -> Any:
    """A declared value as the call receives it (see docs/model.md, "Values")."""
    if isinstance(value, list):
        return [resolve_value(v, target) for v in value]
    if key == "device" and value is None and _is_cpu(target.trace_device or "cpu"):
        return target.device  # the default device of a CPU trace stands for the device
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("<config:") and text.endswith(">"):
        return instantiate(text[len("<config:") : -1].strip())
    if text.startswith("torch.") or key == "dtype":
        name = dtype_name(text)
        if name is not None:
            return getattr(torch, name)
        obj = getattr(torch, text.removeprefix("torch."), None)
        if isinstance(obj, torch.memory_format | torch.layout):
            return obj
    if key == "device" or target.is_device(text):
        return target.place(text)
    if text[:1] in "([" or text in _WORDS:  # Python literals written as strings
        try:
            return py_literal(text)
        except ValueError:
            pass
    return value


# Values traces write as Python words rather than YAML (``attn_mask: None``).
_WORDS = ("None", "True", "False", "Ellipsis")


def import_object(path: str) -> Any:
    """``package.module.Name`` -> the object (ImportError/AttributeError when missing)."""
    module, _, attr = path.rpartition(".")
    if not module:
        raise ImportError(f"expected a dotted path module.Name; found {path!r}")
    return getattr(importlib.import_module(module), attr)


def instantiate(path: str) -> Any:
    """``<config:module.Class>``: an instance of that class, built with its defaults."""
    try:
        cls = import_object(path)
    except (ImportError, AttributeError) as e:
        raise unittest.SkipTest(f"cannot import {path} for '<config:{path}>': {e}") from None
    return cls()


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= max(size, 1)
    return tuple(reversed(out))


def make_tensor(spec: TensorSpec, target: Target, path: str) -> torch.Tensor:
    """The declared tensor: its shape, stride, storage offset and dtype, filled as
    its ``init`` says, on the device it is placed on (Note [Building declared tensors])."""
    if spec.init in INITS_NOT_RUN:
        raise unittest.SkipTest(f"{path}: init: {spec.init} is not run by ootest")
    dtype = torch_dtype(spec.dtype)
    shape = tuple(spec.shape)
    stride = tuple(spec.stride) if spec.stride is not None else contiguous_strides(shape)
    size = spec.storage
    gen = torch.Generator().manual_seed(_seed(target.seed, path))
    if spec.init in ("arange", "eye"):
        flat = torch.zeros(size, dtype=dtype)
        logical = (
            torch.eye(shape[0], dtype=dtype)
            if spec.init == "eye"
            else torch.arange(math.prod(shape)).reshape(shape).to(dtype)
        )
        try:
            flat.as_strided(shape, stride, spec.storage_offset).copy_(logical)
        except RuntimeError as e:
            raise ValueError(f"{path}: init: {spec.init} cannot fill this layout ({e})") from e
    else:
        flat = fill(spec, dtype, size, gen)
    device = target.place(spec.device)
    storage = flat if _is_cpu(device) else flat.to(device)
    return storage.as_strided(shape, stride, spec.storage_offset)


def _random_ints(dtype: torch.dtype, low: float, high: float, n: int, gen: Any) -> torch.Tensor:
    lo, hi = int(low), int(high)
    if dtype == torch.bool:
        lo, hi = max(lo, 0), min(hi, 2)
    elif not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        lo, hi = max(lo, info.min), min(hi, info.max + 1)
    if hi <= lo:
        raise ValueError(f"randint needs low < high; found low={low}, high={high} for {dtype}")
    return torch.randint(lo, hi, (n,), generator=gen, dtype=torch.int64).to(dtype)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype random floats are drawn in (then cast; float8 has no generators)."""
    if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return dtype
    if dtype.is_complex:
        return torch.complex128 if dtype == torch.complex128 else torch.complex64
    return torch.float32


def fill(spec: TensorSpec, dtype: torch.dtype, n: int, gen: Any) -> torch.Tensor:
    """``n`` values for a flat storage, as ``spec.init`` says."""
    a = spec.init_args
    init = spec.init
    if init in ("zeros", "empty"):  # empty: zeros, so runs stay identical
        return torch.zeros(n, dtype=dtype)
    if init == "ones":
        return torch.ones(n, dtype=dtype)
    if init == "full":
        assert a is not None and a.fill_value is not None
        return torch.full((n,), a.fill_value, dtype=dtype)
    integral = not (dtype.is_floating_point or dtype.is_complex)
    if init == "randint" or integral:
        low = a.low if a is not None and a.low is not None else 0
        high = (
            a.high if a is not None and a.high is not None else (2 if dtype == torch.bool else 10)
        )
        if init in ("randn", "normal", "xavier") and a is None:
            low = -10 if dtype.is_signed else 0
        return _random_ints(dtype, low, high, n, gen)
    work = _work_dtype(dtype)
    if init == "rand":
        out = torch.rand(n, generator=gen, dtype=work)
    elif init == "randn":
        out = torch.randn(n, generator=gen, dtype=work)
    elif init == "normal":
        mean = a.mean if a is not None and a.mean is not None else 0.0
        std = a.std if a is not None and a.std is not None else 1.0
        out = torch.randn(n, generator=gen, dtype=work) * std + mean
    else:  # uniform, xavier
        if init == "xavier":
            gain = a.gain if a is not None and a.gain is not None else 1.0
            fan_in, fan_out = _fans(tuple(spec.shape))
            bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
            low, high = -bound, bound
        else:
            low = a.low if a is not None and a.low is not None else 0.0
            high = a.high if a is not None and a.high is not None else 1.0
        out = torch.rand(n, generator=gen, dtype=work) * (high - low) + low
    return out.to(dtype)


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) < 2:
        n = max(1, math.prod(shape))
        return n, n
    receptive = math.prod(shape[2:])
    return max(1, shape[1] * receptive), max(1, shape[0] * receptive)
