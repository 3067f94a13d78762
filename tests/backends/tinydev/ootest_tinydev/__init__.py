"""tiny: a privateuse1 test backend shaped like young third-party ones.

Installed as its own distribution (``ootest-tinydev``), it declares a
``torch.backends`` entry point, so ``import torch`` calls :func:`_autoload`
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` disables that). Like real backends it
imports torch at the top: importing this package *before* torch makes torch's
autoload meet it half-imported and fail ("Failed to load the backend
extension: tiny"). See README.md for its kernels and its two bugs.

The C++ source is compiled with ``torch.utils.cpp_extension`` on first load and
cached in ``$TINYDEV_CACHE_DIR`` (default ``~/.cache/ootest-tinydev``), one
build per source, torch build and Python ABI.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

import torch

NAME = "tiny"
_SOURCE = Path(__file__).resolve().parent / "csrc" / "tiny.cpp"
_MARKER = "built"

# Note [tiny kernels]: everything tiny registers for PrivateUse1 (tiny.cpp holds
# the same list). The last ten are out= kernels only.
KERNELS = (
    "empty.memory_format",
    "empty_strided",
    "_copy_from",
    "_copy_from_and_resize",
    "resize_",
    "set_.source_Storage",
    "set_.source_Storage_storage_offset",
    "_local_scalar_dense",
    "as_strided",
    "view",
    "_reshape_alias",
    "fill_.Scalar",
    "zero_",
    "eq.Tensor",
    "mm",
    "abs.out",
    "neg.out",
    "sqrt.out",
    "logical_not.out",
    "add.out",
    "sub.out",
    "mul.out",
    "div.out",
    "sum.IntList_out",
    "index_select.out",
)


def cache_dir() -> Path:
    base = os.environ.get("TINYDEV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ootest-tinydev"
    )
    return Path(base)


def build_location() -> tuple[str, Path]:
    """The extension's module name and build folder for this source, torch and Python."""
    build_id = f"{torch.__version__} {torch.version.git_version} {sys.implementation.cache_tag}"
    key = hashlib.sha256(_SOURCE.read_bytes() + build_id.encode()).hexdigest()[:16]
    return f"ootest_tinydev_{key}", cache_dir() / f"torch-{torch.__version__}-{key}"


def _import_built(name: str, build_dir: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, build_dir / f"{name}.so")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _extension() -> Any:
    """The compiled kernels: imported directly when built, else built under an
    fcntl lock (released by the kernel if the builder dies) and then marked."""
    name, build_dir = build_location()
    if (build_dir / _MARKER).is_file():
        return _import_built(name, build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (build_dir / _MARKER).is_file():
            return _import_built(name, build_dir)
        # cpp_extension's baton, left behind by a builder that died
        (build_dir / "lock").unlink(missing_ok=True)
        try:  # the PyPI ninja package may not be on PATH when the venv is not activated
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass
        from torch.utils.cpp_extension import load

        print(f"tiny: building {_SOURCE.name} in {build_dir} ...", file=sys.stderr, flush=True)
        mod = load(name=name, sources=[str(_SOURCE)], build_directory=str(build_dir),
                   extra_cflags=["-O1"], verbose=False)  # fmt: skip
        (build_dir / _MARKER).write_text(torch.__version__ + "\n")
        return mod


def _device_module() -> types.ModuleType:
    mod = types.ModuleType(f"torch.{NAME}", "The tiny test backend (ootest-tinydev).")
    gen = torch.default_generator  # random ops would run on the CPU generator

    def is_available() -> bool:
        return True

    def device_count() -> int:
        return 1

    def current_device() -> int:
        return 0

    def set_device(device: Any) -> None:
        idx = device if isinstance(device, int) else torch.device(device).index
        if idx not in (None, 0):
            raise RuntimeError(f"tiny has a single device (tiny:0); got {device}")

    def synchronize(device: Any = None) -> None:
        return None

    def is_initialized() -> bool:
        return True

    def _is_in_bad_fork() -> bool:
        return False

    def _lazy_init() -> None:
        return None

    def manual_seed(seed: int) -> None:
        gen.manual_seed(int(seed))

    def manual_seed_all(seed: int) -> None:
        gen.manual_seed(int(seed))

    def initial_seed() -> int:
        return int(gen.initial_seed())

    def get_rng_state(device: Any = NAME) -> Any:
        return gen.get_state()

    def set_rng_state(state: Any, device: Any = NAME) -> None:
        gen.set_state(state)

    for fn in (is_available, device_count, current_device, set_device, synchronize,
               is_initialized, _is_in_bad_fork, _lazy_init, manual_seed, manual_seed_all,
               initial_seed, get_rng_state, set_rng_state):  # fmt: skip
        setattr(mod, fn.__name__, fn)
    return mod


_state: dict[str, Any] = {}


def _autoload() -> None:
    """The ``torch.backends`` entry point: kernels in, privateuse1 named ``tiny``."""
    if "ext" in _state:
        return
    _state["ext"] = _extension()
    torch.utils.rename_privateuse1_backend(NAME)
    torch._register_device_module(NAME, _device_module())
    torch.utils.generate_methods_for_privateuse1_backend()
