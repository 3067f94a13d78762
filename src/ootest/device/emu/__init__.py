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
from ootest.errors import DeviceError, Problem

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
    "quint8": "QUInt8",
    "qint8": "QInt8",
    "qint32": "QInt32",
    "quint4x2": "QUInt4x2",
    "quint2x4": "QUInt2x4",
}
QUANTIZED_DTYPES = ("quint8", "qint8", "qint32", "quint4x2", "quint2x4")
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
# Kernels registered natively for QuantizedPrivateUse1 when the profile allows a
# quantized dtype (see Note [emu quantized tensors] in emu.cpp).
NATIVE_QUANTIZED_OPS = frozenset(
    {
        "empty.memory_format",
        "empty_strided",
        "_empty_affine_quantized",
        "_empty_per_channel_affine_quantized",
        "empty_quantized",
        "empty_like",
        "_copy_from",
        "_copy_from_and_resize",
        "resize_",
        "set_.source_Storage_storage_offset",
        "as_strided",
        "view",
        "_reshape_alias",
        "unfold",
        "squeeze",
        "squeeze.dim",
        "squeeze.dims",
        "unsqueeze",
        "qscheme",
        "q_scale",
        "q_zero_point",
        "q_per_channel_scales",
        "q_per_channel_zero_points",
        "q_per_channel_axis",
    }
)


# Note [emu faults]
# A profile may declare faults: ops that misbehave the way a young device's
# kernels do (wrong numbers, a crash, a hang, a device error), deterministically,
# so that the selection pipeline can be tested against every kind of failure.
# They act in the C++ kernel wrapper (emu.cpp, emu_boxed_kernel), not in Python:
# a crash kills the process with a real signal and a hang blocks inside the
# kernel, exactly where a real device's would.
FAULT_KINDS = ("wrong", "crash", "hang", "error")
CRASH_SIGNALS = ("SIGSEGV", "SIGABRT")
_CONTEXT_KEYS = ("noncontiguous", "after_calls")  # faults a single call may not show
_FAULT_KEYS = {
    "wrong": ("kind", "dtypes", "min_numel", *_CONTEXT_KEYS, "rel_error"),
    "crash": ("kind", "dtypes", "min_numel", *_CONTEXT_KEYS, "signal"),
    "hang": ("kind", "dtypes", "min_numel", *_CONTEXT_KEYS),
    "error": ("kind", "dtypes", "min_numel", *_CONTEXT_KEYS, "message"),
}
_PROFILE_KEYS = ("description", "extends", "dtypes", "ops", "op_dtypes", "faults")


@dataclass(frozen=True)
class Fault:
    """One declared fault of an op (see Note [emu faults] and docs/emu.md)."""

    kind: str  # one of FAULT_KINDS
    dtypes: tuple[str, ...] = ()  # fires only when a device argument has one; empty: any
    min_numel: int = 0  # fires only when a device argument has at least this many elements
    rel_error: float = 0.0  # wrong: every floating result element is off by this, relatively
    signal: str = "SIGSEGV"  # crash: the signal that kills the process
    message: str = ""  # error: the device's words
    noncontiguous: bool = False  # fires only when a device argument is not contiguous
    after_calls: int = 0  # fires only after this many matching calls in the process
    origin: str = ""  # "file:line:col" of the entry, for messages


@dataclass
class Profile:
    name: str
    description: str = ""
    dtypes: list[str] = field(default_factory=list)  # empty: every dtype
    ops: list[str] = field(default_factory=list)  # "*": everything the CPU implements
    op_dtypes: dict[str, list[str]] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)
    path: str = ""


def profiles() -> list[str]:
    return sorted(p.stem for p in _PROFILES.glob("*.yaml"))


def _profile_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    path = Path(name_or_path)
    if not path.suffix:
        return _PROFILES / f"{name_or_path}.yaml"
    if relative_to is not None and not path.is_absolute():
        return relative_to / path
    return path


#: The largest profile read: ours are ~1 KB; every aten op with a fault is ~1 MB.
MAX_PROFILE_BYTES = 4 * 2**20


_MAX_DEPTH = 64  # levels of nesting (ours have 3)
_MAX_NODES = 200_000  # values once aliases are expanded


def _measure(node: Any, where: str) -> None:
    """DeviceError past the bounds (the limits of ``config.smallyaml``, which the
    device package may not import): too deep, or too many values once aliases are
    expanded (an alias bomb), or an alias that contains itself."""
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()

    def fail(at: Any, message: str) -> DeviceError:
        return DeviceError(f"{where}:{at.start_mark.line + 1}: {message}")

    def size(n: Any, depth: int) -> int:
        if depth > _MAX_DEPTH:
            raise fail(n, f"expected at most {_MAX_DEPTH} levels of nesting; found more")
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in active:
            raise fail(n, "expected plain data; found an alias that contains itself")
        active.add(id(n))
        total = 1
        if isinstance(n, (yaml.MappingNode, yaml.SequenceNode)):
            for child in n.value:
                for c in child if isinstance(n, yaml.MappingNode) else (child,):
                    total += size(c, depth + 1)
                if total > _MAX_NODES:
                    raise fail(
                        n,
                        f"expected at most {_MAX_NODES:,} values once YAML aliases are "
                        "expanded; found more (an alias bomb?); write the values out",
                    )
        active.discard(id(n))
        sizes[id(n)] = total
        return total

    size(node, 0)


class _Yaml:
    """A profile file's data with the position of every value (for messages)."""

    def __init__(self, path: Path) -> None:
        import yaml

        from ootest.atomic import decode_text, read_bounded

        self.path = path
        # Note [Bounded reads of named files]: a profile is a path a user names
        # (--device emu:PATH); bounded in bytes, then in depth and values before
        # anything walks it (a 10,000-deep nesting was a RecursionError, 19 MB a
        # minute and 1.7 GB of memory)
        raw = read_bounded(path, "emu: profile", limit=MAX_PROFILE_BYTES)
        text = decode_text(raw, str(path))
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            self.node = yaml.compose(text, Loader=loader)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            raise DeviceError(f"{where}: YAML syntax error: {e.problem}; fix the syntax") from None
        except (yaml.YAMLError, RecursionError) as e:
            raise DeviceError(f"{path}: YAML syntax error: {e}; fix the syntax") from None
        if self.node is None:
            self.data: Any = {}
            return
        _measure(self.node, str(path))
        constructor = yaml.SafeLoader("")
        try:
            self.data = constructor.construct_document(self.node) or {}
        except yaml.YAMLError as e:
            raise DeviceError(f"{path}: expected plain YAML data; found {e}") from None
        finally:
            constructor.dispose()

    def problem(self, keys: tuple[str | int, ...], message: str, *, key: bool = False) -> Problem:
        """A problem at ``keys`` (at the key itself when ``key``), placed at the
        deepest node of that path that exists."""
        import yaml

        node, line, col = self.node, 1, 1
        for i, k in enumerate(keys):
            if isinstance(k, int) and isinstance(node, yaml.SequenceNode) and k < len(node.value):
                node = node.value[k]
            elif isinstance(k, str) and isinstance(node, yaml.MappingNode):
                pair = next((kv for kv in node.value if kv[0].value == k), None)
                if pair is None:
                    break
                node = pair[0] if key and i == len(keys) - 1 else pair[1]
            else:
                break
            line, col = node.start_mark.line + 1, node.start_mark.column + 1
        path = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)
        return Problem(str(self.path), line, col, path.lstrip("."), message)


def _yaml_type(v: object) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return f"{names.get(type(v), type(v).__name__)} ({v!r})"


def _read_faults(doc: _Yaml, raw: object) -> tuple[dict[str, Fault], list[Problem]]:
    problems: list[Problem] = []
    out: dict[str, Fault] = {}
    kinds = ", ".join(FAULT_KINDS)
    if not isinstance(raw, dict):
        msg = f"expected a mapping of op name to fault, found {_yaml_type(raw)}"
        return out, [doc.problem(("faults",), msg)]
    for op, entry in raw.items():
        op = str(op)
        at = ("faults", op)
        if not isinstance(entry, dict):
            msg = f"expected a mapping with 'kind:' ({kinds}), found {_yaml_type(entry)}"
            problems.append(doc.problem(at, msg))
            continue
        kind = entry.get("kind")
        if kind is None:
            problems.append(doc.problem(at, f"missing 'kind:'; expected one of {kinds}"))
            continue
        if kind not in FAULT_KINDS:
            msg = f"unknown fault kind {kind!r}; expected one of {kinds}"
            problems.append(doc.problem((*at, "kind"), msg))
            continue
        allowed = _FAULT_KEYS[kind]
        bad = [k for k in entry if k not in allowed]
        for k in bad:
            msg = f"unknown key {k!r} for a {kind!r} fault; expected one of {', '.join(allowed)}"
            problems.append(doc.problem((*at, str(k)), msg, key=True))
        dtypes = entry.get("dtypes", [])
        if not isinstance(dtypes, list):
            msg = f"expected a list of dtypes, found {_yaml_type(dtypes)}"
            problems.append(doc.problem((*at, "dtypes"), msg))
            dtypes = []
        for i, d in enumerate(dtypes):
            if d not in C10_DTYPES:
                msg = f"unknown dtype {d!r}; expected one of {', '.join(C10_DTYPES)}"
                problems.append(doc.problem((*at, "dtypes", i), msg))
        min_numel = entry.get("min_numel", 0)
        if isinstance(min_numel, bool) or not isinstance(min_numel, int) or min_numel < 0:
            msg = f"expected an integer >= 0, found {min_numel!r}"
            problems.append(doc.problem((*at, "min_numel"), msg))
            min_numel = 0
        rel_error = 0.0
        if kind == "wrong":
            if "rel_error" not in entry:
                msg = (
                    "missing 'rel_error:'; a 'wrong' fault needs the relative error of "
                    "its results, e.g. rel_error: 1.0e-3"
                )
                problems.append(doc.problem(at, msg))
            else:
                v = entry["rel_error"]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                    msg = f"expected a number in (0, 1], found {v!r}"
                    problems.append(doc.problem((*at, "rel_error"), msg))
                else:
                    rel_error = float(v)
        noncontiguous = entry.get("noncontiguous", False)
        if not isinstance(noncontiguous, bool):
            msg = f"expected true or false, found {noncontiguous!r}"
            problems.append(doc.problem((*at, "noncontiguous"), msg))
            noncontiguous = False
        after_calls = entry.get("after_calls", 0)
        if isinstance(after_calls, bool) or not isinstance(after_calls, int) or after_calls < 0:
            msg = f"expected an integer >= 0, found {after_calls!r}"
            problems.append(doc.problem((*at, "after_calls"), msg))
            after_calls = 0
        sig = entry.get("signal", "SIGSEGV")
        if kind == "crash" and sig not in CRASH_SIGNALS:
            msg = f"expected one of {', '.join(CRASH_SIGNALS)}, found {sig!r}"
            problems.append(doc.problem((*at, "signal"), msg))
        origin = doc.problem(at, "", key=True)
        out[op] = Fault(
            kind=kind,
            dtypes=tuple(str(d) for d in dtypes),
            min_numel=min_numel,
            rel_error=rel_error,
            signal=str(sig),
            message=str(entry.get("message", "")),
            noncontiguous=noncontiguous,
            after_calls=after_calls,
            origin=f"{origin.file}:{origin.line}:{origin.col}",
        )
    return out, problems


def read_profile(name_or_path: str) -> Profile:
    """A profile by name (``young``: ``profiles/young.yaml``) or path, with what it
    extends merged in; :class:`DeviceError` (``file:line:col: key: message``) if invalid."""
    path = _profile_path(name_or_path)
    if not path.is_file():
        raise DeviceError(
            f"emu: unknown profile {name_or_path!r}; expected one of {', '.join(profiles())} "
            "or a path to a profile YAML file"
        )
    return _read_profile(path, ())


def _read_profile(path: Path, seen: tuple[Path, ...]) -> Profile:
    doc = _Yaml(path)
    data = doc.data
    if not isinstance(data, dict):
        # the file may be anything (extends: a symlink to /etc/passwd): never quoted
        if isinstance(data, str):
            found = f"text of {len(data):,} characters (not shown: it is not a profile)"
        else:
            found = _yaml_type(data) if data is None or isinstance(data, list) else "one value"
        msg = f"expected a mapping ({', '.join(_PROFILE_KEYS)}), found {found}"
        raise DeviceError(str(Problem(str(path), 1, 1, "", msg)))
    problems = [
        doc.problem(
            (str(k),),
            f"unknown key {k!r}; expected one of {', '.join(_PROFILE_KEYS)}",
            key=True,
        )
        for k in data
        if k not in _PROFILE_KEYS
    ]
    # Note [emu profile extends]: a profile may extend another (a name or a path
    # relative to it): its ops are added, its dtypes replace the base's when given,
    # its op_dtypes and faults are merged over the base's, op by op.
    base = Profile(name="")
    if data.get("extends") is not None:
        parent = str(data["extends"])
        parent_path = _profile_path(parent, path.parent)
        if not parent_path.is_file():
            msg = (
                f"unknown profile {parent!r}; expected one of {', '.join(profiles())} "
                "or a path to a profile YAML file (relative to this one)"
            )
            raise DeviceError(str(doc.problem(("extends",), msg)))
        chain = (*seen, path.resolve())
        if parent_path.resolve() in chain:
            names = " -> ".join(p.name for p in (*chain, parent_path.resolve()))
            msg = f"profiles extend each other in a cycle ({names}); remove one 'extends:'"
            raise DeviceError(str(doc.problem(("extends",), msg)))
        base = _read_profile(parent_path, chain)
    dtypes = [str(d) for d in data["dtypes"]] if "dtypes" in data else list(base.dtypes)
    if dtypes == ["*"]:
        dtypes = []
    own = {str(k): [str(d) for d in v] for k, v in (data.get("op_dtypes") or {}).items()}
    op_dtypes = {**base.op_dtypes, **own}
    for d in [*dtypes, *(d for v in op_dtypes.values() for d in v)]:
        if d not in C10_DTYPES:
            raise DeviceError(
                f"{path}: unknown dtype {d!r}; expected one of {', '.join(C10_DTYPES)}"
            )
    faults = dict(base.faults)
    if data.get("faults") is not None:
        own_faults, more = _read_faults(doc, data["faults"])
        problems += more
        faults.update(own_faults)
    if problems:
        problems.sort(key=lambda p: (p.line, p.col))
        raise DeviceError("\n".join(str(p) for p in problems))
    ops = [*base.ops, *(str(o) for o in data.get("ops") or [] if str(o) not in base.ops)]
    return Profile(
        name=path.stem,
        description=str(data.get("description", base.description)),
        dtypes=dtypes,
        ops=ops,
        op_dtypes=op_dtypes,
        faults=faults,
        path=str(path),
    )


# Note [emu build cache]
# ~~~~~~~~~~~~~~~~~~~~~~
# The build folder is keyed by torch version and source hash, so a finished
# build never goes stale. Loading a finished build imports the shared library
# directly: ``cpp_extension.load`` would take its ``lock`` file (a baton that a
# process killed mid-load leaves behind, making every later load wait forever)
# and rerun ninja, which recompiles whenever the source *path* differs (two
# checkouts of the same source). Building is serialised with an fcntl lock the
# kernel releases when its holder dies; whoever holds it removes a baton left
# by a dead builder, and the ``built`` marker is written only after the
# library is complete, so a half-linked file is never imported.
_MARKER = "built"


def _import_built(name: str, build_dir: Path) -> Any:
    import importlib.util

    import torch  # noqa: F401  (the extension links against torch's libraries)

    spec = importlib.util.spec_from_file_location(name, build_dir / f"{name}.so")
    if spec is None or spec.loader is None:  # pragma: no cover - the file exists
        raise DeviceError(f"emu: cannot import {build_dir / name}.so; delete {build_dir}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_location() -> tuple[str, Path]:
    """The extension's module name and build folder for this source and torch."""
    import torch

    # One build per torch build and Python ABI: two environments side by side (say
    # torch 2.13.0+cpu and 2.14.0+cu130, as bench/upgrade_delta.py runs them) each
    # get their own, and two builds of one version string (a source build, another
    # Python) never load each other's extension.
    build_id = f"{torch.__version__} {torch.version.git_version} {sys.implementation.cache_tag}"
    key = hashlib.sha256(_SOURCE.read_bytes() + build_id.encode()).hexdigest()[:16]
    return f"ootest_emu_{key}", cache_dir() / "emu" / f"torch-{torch.__version__}-{key}"


def _build() -> Any:
    import fcntl

    import torch

    name, build_dir = build_location()
    if (build_dir / _MARKER).is_file() and (build_dir / f"{name}.so").is_file():
        return _import_built(name, build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / "build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if we die
        if (build_dir / _MARKER).is_file() and (build_dir / f"{name}.so").is_file():
            return _import_built(name, build_dir)  # another process built it meanwhile
        (build_dir / "lock").unlink(missing_ok=True)  # a baton left by a dead builder
        mod = _compile(name, build_dir)
        from ootest.atomic import write_atomic

        write_atomic(build_dir / _MARKER, torch.__version__ + "\n")  # whole or absent
        return mod


def _compile(name: str, build_dir: Path) -> Any:
    import torch

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
    fresh = not (build_dir / f"{name}.so").is_file()
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


def _aten_registrations(key: str) -> list[str]:
    import torch

    return sorted(
        r.removeprefix("aten::")
        for r in torch._C._dispatch_get_registrations_for_dispatch_key(key)
        if r.startswith("aten::")
    )


def _wanted(op: str, wanted: set[str]) -> bool:
    base = op.split(".", 1)[0]
    return "*" in wanted or op in wanted or base in wanted or base.removesuffix("_") in wanted


def allows_quantized(profile: Profile) -> bool:
    """Whether the profile allows a quantized dtype (``dtypes: ["*"]`` allows all)."""
    listed = [*profile.dtypes, *(d for v in profile.op_dtypes.values() for d in v)]
    return not profile.dtypes or any(d in QUANTIZED_DTYPES for d in listed)


def _resolve_quantized_ops(profile: Profile) -> list[str]:
    """The ops emu runs on quantized tensors through the CPU fallback: those with a
    QuantizedCPU kernel that the profile enables, when it allows a quantized dtype."""
    if not allows_quantized(profile):
        return []
    wanted = set(profile.ops)
    return [
        op
        for op in _aten_registrations("QuantizedCPU")
        if op not in NATIVE_QUANTIZED_OPS and _wanted(op, wanted)
    ]


def _resolve_ops(profile: Profile) -> list[str]:
    cpu = _aten_registrations("CPU")
    wanted = set(profile.ops)
    if "*" in wanted:
        return [op for op in cpu if op not in NATIVE_OPS]
    out = [op for op in cpu if op not in NATIVE_OPS and _wanted(op, wanted)]
    unknown = sorted(
        w for w in wanted if not any(o == w or o.split(".", 1)[0] in (w, w + "_") for o in out)
    )
    if unknown:
        raise DeviceError(
            f"emu profile {profile.name!r}: no CPU kernel for {', '.join(unknown)}; "
            "expected aten op names such as 'add' or 'add.Tensor'"
        )
    return out


# What emu.cpp's set_profile takes for one fault:
# (kind, rel_error, c10 dtypes, min_numel, signal name, message, noncontiguous, after_calls).
_CFault = tuple[str, float, list[str], int, str, str, bool, int]


def _resolve_faults(profile: Profile, ops: list[str]) -> dict[str, _CFault]:
    """Each fault on every enabled overload it names ("add": add.Tensor, add_.Tensor,
    add.out, ...), keyed like the C++ side's operator names (``aten::add.Tensor``)."""
    out: dict[str, _CFault] = {}
    for name, f in profile.faults.items():
        hits = [o for o in ops if o == name or o.split(".", 1)[0] in (name, name + "_")]
        if not hits:
            raise DeviceError(
                f"{f.origin}: faults.{name}: no op enabled by profile {profile.name!r} "
                f"matches {name!r}; a fault applies to an enabled op: add it to 'ops:' "
                "or remove the fault"
            )
        c = (f.kind, f.rel_error, [C10_DTYPES[d] for d in f.dtypes], f.min_numel)
        for op in hits:  # an exact overload ("add.Tensor") wins over its op's entry
            if op == name or f"aten::{op}" not in out:
                out[f"aten::{op}"] = (*c, f.signal, f.message, f.noncontiguous, f.after_calls)
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
            from ootest.device.activate import AUTOLOAD_VAR, autoload_entry_points

            found = [n for n, _ in autoload_entry_points()]
            how = f" (torch autoloaded {', '.join(found)})" if current in found else ""
            raise DeviceError(
                f"emu: the privateuse1 slot is already taken by backend {current!r}{how}; "
                "emu cannot be loaded in the same process as another out-of-tree backend"
                + (f": set {AUTOLOAD_VAR}=0 for this process" if how else "")
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
    ext.set_profile(
        prof.name,
        ops,
        [C10_DTYPES[d] for d in prof.dtypes],
        per_op,
        _resolve_faults(prof, ops),
        allows_quantized(prof),
        _resolve_quantized_ops(prof),
    )
    _state["profile"] = prof
    module: types.ModuleType = getattr(torch, NAME)
    return module


def active_profile() -> Profile | None:
    prof: Profile | None = _state.get("profile")
    return prof
