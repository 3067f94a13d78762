"""``emu``: the reference privateuse1 backend (host memory, declared capabilities).

Opt-in only: nothing happens on ``import torch``; call :func:`load` (or pass
``--ootest-device emu[:profile]``). The C++ source is compiled once with
``torch.utils.cpp_extension`` and cached per user under
``$OOTEST_CACHE_DIR`` (default ``~/.cache/ootest``), keyed by torch version and
source hash.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.cache import cache_dir
from ootest.errors import DeviceError

NAME = "emu"
_HERE = Path(__file__).resolve().parent
_SOURCE = _HERE / "csrc" / "emu.cpp"
_PROFILES = _HERE / "profiles"

# torch dtype name -> c10::ScalarType name (what the C++ side parses).
C10_DTYPES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
    "complex32": "ComplexHalf",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
}
# Kernels registered natively in emu.cpp (storage, copies, views): never profile-gated.
NATIVE_OPS = frozenset(
    {
        "empty.memory_format",
        "empty_strided",
        "copy_",
        "_copy_from",
        "_copy_from_and_resize",
        "resize_",
        "set_.source_Storage",
        "set_.source_Storage_storage_offset",
        "set_.source_Tensor",
        "_local_scalar_dense",
        "as_strided",
        "view",
        "_reshape_alias",
        "unfold",
        "view_as_real",
        "view_as_complex",
    }
)


@dataclass
class Profile:
    name: str
    description: str = ""
    dtypes: list[str] = field(default_factory=list)  # empty: every dtype
    ops: list[str] = field(default_factory=list)  # "*": everything the CPU implements
    op_dtypes: dict[str, list[str]] = field(default_factory=dict)


def profiles() -> list[str]:
    return sorted(p.stem for p in _PROFILES.glob("*.yaml"))


def read_profile(name_or_path: str) -> Profile:
    import yaml

    path = Path(name_or_path)
    if not path.suffix:
        path = _PROFILES / f"{name_or_path}.yaml"
    if not path.is_file():
        raise DeviceError(
            f"emu: unknown profile {name_or_path!r}; expected one of {', '.join(profiles())} "
            "or a path to a profile YAML file"
        )
    data = yaml.safe_load(path.read_text()) or {}
    dtypes = [str(d) for d in data.get("dtypes", [])]
    if dtypes == ["*"]:
        dtypes = []
    op_dtypes = {str(k): [str(d) for d in v] for k, v in (data.get("op_dtypes") or {}).items()}
    for d in [*dtypes, *(d for v in op_dtypes.values() for d in v)]:
        if d not in C10_DTYPES:
            raise DeviceError(
                f"{path}: unknown dtype {d!r}; expected one of {', '.join(C10_DTYPES)}"
            )
    return Profile(
        name=path.stem,
        description=str(data.get("description", "")),
        dtypes=dtypes,
        ops=[str(o) for o in data.get("ops", [])],
        op_dtypes=op_dtypes,
    )


def _build() -> Any:
    import torch

    src = _SOURCE.read_bytes()
    key = hashlib.sha256(src + torch.__version__.encode()).hexdigest()[:16]
    name = f"ootest_emu_{key}"
    build_dir = cache_dir() / "emu" / f"torch-{torch.__version__}-{key}"
    build_dir.mkdir(parents=True, exist_ok=True)
    try:  # the PyPI ninja package may not be on PATH when the venv is not activated
        import ninja

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass
    if shutil.which("ninja") is None:
        raise DeviceError(
            "emu: building the device needs ninja, which was not found; "
            "install it with `pip install ninja` (or `pip install ootest[emu]`)"
        )
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise DeviceError(
            f"emu: building the device needs a C++ compiler ({cxx!r} not found); "
            "install one, e.g. `apt-get install g++`, or set CXX"
        )
    fresh = not any(build_dir.glob("*.so"))
    if fresh:
        print(
            f"ootest: building the emu device (first time for torch {torch.__version__}; "
            f"about a minute on 2 cores) in {build_dir} ...",
            file=sys.stderr,
            flush=True,
        )
    from torch.utils.cpp_extension import load as cpp_load

    started = time.monotonic()
    try:
        mod = cpp_load(
            name=name,
            sources=[str(_SOURCE)],
            build_directory=str(build_dir),
            extra_cflags=["-O2"],
            verbose=False,
        )
    except Exception as e:  # compiler output is in the message
        raise DeviceError(f"emu: building {_SOURCE} failed:\n{e}") from None
    if fresh:
        print(
            f"ootest: emu built in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True
        )
    return mod


def _device_module() -> types.ModuleType:
    import torch

    mod = types.ModuleType("torch.emu", "The emu reference device (ootest).")

    def is_available() -> bool:
        return True

    def device_count() -> int:
        return 1

    def current_device() -> int:
        return 0

    def set_device(device: Any) -> None:
        idx = torch.device(device).index if not isinstance(device, int) else device
        if idx not in (None, 0):
            raise RuntimeError(f"emu has a single device (emu:0); got {device}")

    def synchronize(device: Any = None) -> None:
        return None

    def is_initialized() -> bool:
        return True

    def _is_in_bad_fork() -> bool:
        return False

    # Random numbers: emu's default generator *is* the CPU one (its hooks return
    # it, and random ops run through the CPU kernels), so the RNG functions a
    # backend module is expected to have act on it. Seeding emu seeds the CPU.
    gen = torch.default_generator

    def manual_seed(seed: int) -> None:
        gen.manual_seed(int(seed))

    def manual_seed_all(seed: int) -> None:
        gen.manual_seed(int(seed))  # not torch.manual_seed: that calls back into this

    def seed() -> None:
        gen.seed()

    def seed_all() -> None:
        gen.seed()

    def initial_seed() -> int:
        return int(gen.initial_seed())

    def get_rng_state(device: Any = "emu") -> Any:
        return gen.get_state()

    def set_rng_state(new_state: Any, device: Any = "emu") -> None:
        gen.set_state(new_state)

    def get_rng_state_all() -> list[Any]:
        return [gen.get_state()]

    def set_rng_state_all(new_states: Any) -> None:
        for state in new_states:
            gen.set_state(state)

    def get_amp_supported_dtype() -> list[Any]:
        return [torch.float16, torch.bfloat16]

    for fn in (
        is_available,
        device_count,
        current_device,
        set_device,
        synchronize,
        is_initialized,
        _is_in_bad_fork,
        manual_seed,
        manual_seed_all,
        seed,
        seed_all,
        initial_seed,
        get_rng_state,
        set_rng_state,
        get_rng_state_all,
        set_rng_state_all,
        get_amp_supported_dtype,
    ):
        setattr(mod, fn.__name__, fn)
    return mod


_state: dict[str, Any] = {}


def _resolve_ops(profile: Profile) -> list[str]:
    import torch

    cpu = sorted(
        r.removeprefix("aten::")
        for r in torch._C._dispatch_get_registrations_for_dispatch_key("CPU")
        if r.startswith("aten::")
    )
    wanted = set(profile.ops)
    if "*" in wanted:
        return [op for op in cpu if op not in NATIVE_OPS]
    out = []
    for op in cpu:
        if op in NATIVE_OPS:
            continue
        base = op.split(".", 1)[0]
        if op in wanted or base in wanted or base.removesuffix("_") in wanted:
            out.append(op)
    unknown = sorted(
        w for w in wanted if not any(o == w or o.split(".", 1)[0] in (w, w + "_") for o in out)
    )
    if unknown:
        raise DeviceError(
            f"emu profile {profile.name!r}: no CPU kernel for {', '.join(unknown)}; "
            "expected aten op names such as 'add' or 'add.Tensor'"
        )
    return out


def load(profile: str = "young") -> types.ModuleType:
    """Build (cached), register and activate emu with a capability profile.

    Must run before ``torch.testing._internal`` is imported so that PyTorch's
    device-generic tests instantiate for it. Returns the ``torch.emu`` module.
    Calling it again with another profile swaps the registered kernels.
    """
    import torch

    prof = read_profile(profile)
    ext = _state.get("ext")
    if ext is None:
        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", NAME):
            raise DeviceError(
                f"emu: the privateuse1 slot is already taken by backend {current!r}; "
                "emu cannot be loaded in the same process as another out-of-tree backend"
            )
        ext = _build()
        from torch.utils.backend_registration import (
            generate_methods_for_privateuse1_backend,
            rename_privateuse1_backend,
        )

        if current != NAME:
            rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _device_module())  # type: ignore[no-untyped-call]
        generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
        _state["ext"] = ext
    ops = _resolve_ops(prof)
    per_op: dict[str, list[str]] = {}
    for op in ops:
        base = op.split(".", 1)[0]
        for key in (op, base, base.removesuffix("_")):
            if key in prof.op_dtypes:
                per_op[f"aten::{op}"] = [C10_DTYPES[d] for d in prof.op_dtypes[key]]
                break
    ext.set_profile(prof.name, ops, [C10_DTYPES[d] for d in prof.dtypes], per_op)
    _state["profile"] = prof
    module: types.ModuleType = getattr(torch, NAME)
    return module


def active_profile() -> Profile | None:
    prof: Profile | None = _state.get("profile")
    return prof
