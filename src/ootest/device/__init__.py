"""Devices ootest can run on: the reference ``emu`` and the check of a ``--device`` value."""

from __future__ import annotations

import sys


def check_device(device: str) -> None:
    """UserError unless ``device`` names an emu profile, an importable module or a
    backend torch may autoload (checked here, before any child starts; the
    children check it again when they load it). Children that load emu get
    torch's backend autoload turned off (Note [Backends as they ship])."""
    import importlib.util

    from ootest.device.activate import DeviceSpec, autoload_entry_points, keep_autoload_out
    from ootest.device.emu import read_profile
    from ootest.errors import UserError

    try:
        spec = DeviceSpec.parse(device)
    except UserError as e:
        raise UserError(str(e).replace("--ootest-device", "--device", 1)) from None
    if spec.kind == "emu":
        read_profile(spec.target)  # DeviceError (a UserError) if unknown
        keep_autoload_out(device, note)
        return
    if spec.kind == "autoload":
        if not autoload_entry_points():
            raise UserError(
                f"--device {device}: no backend named {spec.name!r} can be loaded: no package "
                "here declares a 'torch.backends' entry point (torch's autoload); name the "
                f"module that registers it: --device <module>:{spec.name}"
            )
        return
    try:
        found = importlib.util.find_spec(spec.target)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UserError(
            f"--device {device}: no module {spec.target!r} in this environment; install the "
            "backend package, or use 'emu[:profile]'"
        )


def note(text: str) -> None:
    """A note for the person running the command (stderr: never mixed into output)."""
    print(f"ootest: {text}", file=sys.stderr, flush=True)
