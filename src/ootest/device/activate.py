"""Making a privateuse1 backend the device under test: ``--ootest-device`` parsed,
the backend registered before ``torch.testing._internal`` is imported.

Used by the plugin, by the runner's fork server (which loads the device once for
every restart) and by the device probe; it imports neither.

Note [Backends as they ship]
A backend registers itself in one of three ways, and each ``--device`` form
works with each (DESIGN.md section 9):

- ``emu[:profile]``: ours, loaded by :func:`ootest.device.emu.load`;
- ``<module>:<name>``: a package that registers the backend when imported;
- ``<name>``: a backend torch itself loads at ``import torch`` through an entry
  point in the group ``torch.backends`` (autoload).

torch is always imported first: a package that declares an autoload entry point
and is imported *before* torch makes torch's autoload re-enter the
half-imported package ("Failed to load the backend extension"). The module is
imported afterwards only when the import of torch did not already load it.

Once an autoloaded backend took the privateuse1 slot, emu cannot share the
process, so emu children run with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``: the
commands that start them set it (:func:`keep_autoload_out`) and say so once;
a process that loads emu itself sets it too when torch is not imported yet.

What a broken backend raises while loading (torch's autoload ``RuntimeError``,
an ``ImportError``/``OSError`` with an undefined C++ symbol because it was
built for another torch, no device present) becomes one :class:`DeviceError`
line naming the module, the torch version and the likely fix.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ootest.errors import DeviceError

__all__ = [
    "AUTOLOAD_VAR",
    "DeviceSpec",
    "activate_device",
    "autoload_entry_points",
    "is_emu",
    "keep_autoload_out",
]

#: The prefix of the lines the device probe writes on stderr to say what it is
#: doing (Note [The probe's deadline] in ``ootest.select.scope``).
STAGE = "ootest-probe: "
_CDT = "torch.testing._internal.common_device_type"
AUTOLOAD_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_GROUP = "torch.backends"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_emu(device: str | None) -> bool:
    """Whether ``device`` names our reference device (``None``: the default, emu)."""
    return device is None or device == "emu" or device.startswith("emu:")


@dataclass
class DeviceSpec:
    kind: str  # "emu" | "module" | "autoload"
    name: str  # backend name (privateuse1 rename)
    target: str  # emu profile, module to import, or "" (autoload: torch loads it)

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        text = text.strip()
        if is_emu(text):
            return cls("emu", "emu", text.partition(":")[2] or "young")
        mod, sep, name = text.partition(":")
        if not sep and _NAME.match(text):
            return cls("autoload", text, "")
        if not sep or not _MODULE.match(mod) or not _NAME.match(name):
            raise DeviceError(
                "--ootest-device: expected 'emu', 'emu:<profile>', '<module>:<backend name>' "
                "(e.g. torch_spyre:spyre) or the name of a backend torch autoloads (e.g. spyre); "
                f"found {text!r}"
            )
        return cls("module", name, mod)

    def __str__(self) -> str:
        if self.kind == "emu":
            return f"emu:{self.target}"
        return self.name if self.kind == "autoload" else f"{self.target}:{self.name}"


def autoload_entry_points() -> list[tuple[str, str]]:
    """The ``torch.backends`` entry points installed here, as (name, value);
    reading them imports neither torch nor the backends."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=_GROUP)
    except Exception:  # a broken distribution's metadata: no entry points to fear
        return []
    return sorted({(ep.name, ep.value) for ep in found})


def keep_autoload_out(device: str | None, say: Callable[[str], None] | None = None) -> None:
    """Before starting children that load emu: turn torch's backend autoload off
    for them (Note [Backends as they ship]), saying so once when a backend would
    have been autoloaded. A device other than emu keeps autoload as it is: that
    backend may be one torch autoloads, and so may no device at all (None)."""
    if device is None or not is_emu(device) or os.environ.get(AUTOLOAD_VAR) == "0":
        return
    found = autoload_entry_points()
    if not found:
        return
    os.environ[AUTOLOAD_VAR] = "0"
    if say is not None:
        names = ", ".join(f"{n} ({v})" for n, v in found)
        say(
            f"note: emu runs with torch's backend autoload off ({AUTOLOAD_VAR}=0): the "
            f"installed backend {names} would take the privateuse1 slot emu needs"
        )


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    mod = sys.modules.get("torch")
    if mod is not None and hasattr(mod, "__version__"):
        return str(mod.__version__)
    try:
        return version("torch")
    except PackageNotFoundError:
        return "(not installed)"


_SYMBOL = re.compile(r"undefined symbol:\s*(\S+)")


def _load_error(where: str, module: str, err: BaseException) -> DeviceError:
    """One line for an exception raised while loading a backend."""
    cause: BaseException = err
    # torch's autoload wraps the backend's own error: name that one
    while cause.__cause__ is not None and isinstance(cause, RuntimeError):
        cause = cause.__cause__
    text = " ".join(str(cause).split()) or type(cause).__name__
    if len(text) > 300:
        text = text[:297] + "..."
    torch = _torch_version()
    sym = _SYMBOL.search(str(cause))
    if sym is not None:
        return DeviceError(
            f"{where}: {module!r} was built for another torch than the installed {torch} "
            f"(undefined symbol {sym.group(1)}); install a build of {module} for torch {torch}, "
            f"or install the torch it was built for"
        )
    if isinstance(cause, ModuleNotFoundError) and cause.name and module.startswith(cause.name):
        return DeviceError(
            f"{where}: cannot import {module!r} (no module named {cause.name!r}) with torch "
            f"{torch}; install the backend package in this environment"
        )
    return DeviceError(
        f"{where}: loading the backend {module!r} with torch {torch} failed: "
        f"{type(cause).__name__}: {text}; fix the backend's installation (its own import "
        f"fails the same way)"
    )


def _autoload_module(name: str) -> str:
    """The module of the entry point torch names in 'Failed to load the backend
    extension: NAME'; NAME itself when it is not installed as one."""
    for ep_name, value in autoload_entry_points():
        if ep_name == name:
            return value.partition(":")[0].strip()
    return name


def _import_torch(where: str) -> None:
    """``import torch``, which runs the autoload entry points; their failure is
    one line (Note [Backends as they ship])."""
    if "torch" in sys.modules:
        return
    try:
        import torch  # noqa: F401
    except RuntimeError as e:
        m = re.search(r"Failed to load the backend extension: ([^.\s]+)", str(e))
        if m is None:
            raise
        raise _load_error(where, _autoload_module(m.group(1)), e) from None
    except (ImportError, OSError) as e:
        raise _load_error(where, "torch", e) from None


def activate_device(spec: DeviceSpec, stage: Callable[[str], None] | None = None) -> None:
    """Register the backend before torch.testing._internal is imported; ``stage``
    is told what is being done (the probe reports it: Note [The probe's deadline])."""
    premature = _CDT in sys.modules
    where = f"--ootest-device {spec}"
    tell = stage or (lambda _: None)
    if spec.kind == "emu":
        from ootest.device import emu, note

        if "torch" not in sys.modules:
            keep_autoload_out(str(spec), note)

        tell(f"loading emu (profile {spec.target!r})")
        emu.load(spec.target)
    else:
        how = " and the backends it autoloads" if spec.kind == "autoload" else ""
        tell(f"importing torch{how}")
        _import_torch(where)
        if spec.kind == "module" and spec.target not in sys.modules:
            tell(f"importing the backend module {spec.target!r}")
            try:
                importlib.import_module(spec.target)
            except (ImportError, OSError, RuntimeError) as e:
                raise _load_error(where, spec.target, e) from None
    import torch

    actual = torch._C._get_privateuse1_backend_name()
    if actual != spec.name:
        raise DeviceError(_wrong_name(spec, actual))
    mod = getattr(torch, spec.name, None)
    if mod is None or not mod.is_available():
        raise DeviceError(
            f"{where}: device {spec.name!r} is registered but torch.{spec.name}.is_available() "
            "is not true; check that the hardware or driver is present"
        )
    if premature:
        cdt = sys.modules[_CDT]
        if cdt.PrivateUse1TestBase not in cdt.device_type_test_bases:
            raise DeviceError(
                "torch.testing._internal was imported before the device was registered "
                "(probably by a conftest.py or another plugin), so PyTorch will not instantiate "
                f"tests for {spec.name!r}. Register the backend first (pass --ootest-device and "
                "do not import torch.testing._internal at conftest import time)"
            )


def _wrong_name(spec: DeviceSpec, actual: str) -> str:
    where = f"--ootest-device {spec}"
    found = autoload_entry_points()
    if actual == "privateuseone":
        if spec.kind == "autoload":
            names = ", ".join(n for n, _ in found) or "none"
            off = (
                " (autoload is off: unset TORCH_DEVICE_BACKEND_AUTOLOAD)"
                if (os.environ.get(AUTOLOAD_VAR, "1") != "1")
                else ""
            )
            return (
                f"{where}: no backend named {spec.name!r} is registered after 'import torch'"
                f"{off}; torch autoloads these entry points: {names}. Name the module that "
                f"registers it: --device <module>:{spec.name}"
            )
        return (
            f"{where}: importing {spec.target!r} registered no privateuse1 backend; name the "
            f"module that registers {spec.name!r}"
        )
    how = f"torch autoloaded {', '.join(n for n, _ in found)}" if found else "it was imported"
    fix = f"'{spec.target}:{actual}'" if spec.kind == "module" else repr(actual)
    return (
        f"{where}: the privateuse1 backend is registered as {actual!r} ({how}), expected "
        f"{spec.name!r}; use {fix}"
    )
