"""Making a privateuse1 backend the device under test: ``--ootest-device`` parsed,
the backend registered before ``torch.testing._internal`` is imported.

Used by the plugin, by the runner's fork server (which loads the device once for
every restart) and by the device probe; it imports neither.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from ootest.errors import DeviceError

__all__ = ["DeviceSpec", "activate_device"]

_CDT = "torch.testing._internal.common_device_type"


@dataclass
class DeviceSpec:
    kind: str  # "emu" | "module"
    name: str  # backend name (privateuse1 rename)
    target: str  # emu profile or module to import

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        text = text.strip()
        if text == "emu" or text.startswith("emu:"):
            return cls("emu", "emu", text.partition(":")[2] or "young")
        mod, sep, name = text.partition(":")
        if not sep or not mod or not name:
            raise DeviceError(
                f"--ootest-device: expected 'emu', 'emu:<profile>' or '<module>:<backend name>' "
                f"(e.g. torch_spyre:spyre); found {text!r}"
            )
        return cls("module", name, mod)


def activate_device(spec: DeviceSpec) -> None:
    """Register the backend before torch.testing._internal is imported."""
    premature = _CDT in sys.modules
    if spec.kind == "emu":
        from ootest.device import emu

        emu.load(spec.target)
    else:
        try:
            importlib.import_module(spec.target)
        except ImportError as e:
            raise DeviceError(
                f"--ootest-device {spec.target}:{spec.name}: cannot import {spec.target!r} "
                f"({e}); install the backend package in this environment"
            ) from None
    import torch

    actual = torch._C._get_privateuse1_backend_name()
    if actual != spec.name:
        raise DeviceError(
            f"--ootest-device: importing {spec.target!r} registered the privateuse1 backend as "
            f"{actual!r}, expected {spec.name!r}; use '{spec.target}:{actual}'"
        )
    mod = getattr(torch, spec.name, None)
    if mod is None or not mod.is_available():
        raise DeviceError(
            f"device {spec.name!r} is registered but torch.{spec.name}.is_available() is not true; "
            "check that the hardware or driver is present"
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
