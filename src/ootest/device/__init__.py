"""Devices ootest can run on: the reference ``emu`` and the check of a ``--device`` value."""

from __future__ import annotations


def check_device(device: str) -> None:
    """UserError unless ``device`` names an emu profile or an importable module (checked
    here, before any child starts; the children check it again when they load it)."""
    import importlib.util

    from ootest.device.emu import read_profile
    from ootest.errors import UserError

    text = device.strip()
    if text == "emu" or text.startswith("emu:"):
        read_profile(text.partition(":")[2] or "young")  # DeviceError (a UserError) if unknown
        return
    mod, sep, name = text.partition(":")
    if not sep or not mod or not name:
        raise UserError(
            f"--device: expected 'emu', 'emu:<profile>' or '<module>:<backend name>' "
            f"(e.g. torch_spyre:spyre); found {device!r}"
        )
    try:
        found = importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UserError(
            f"--device {device}: no module {mod!r} in this environment; install the backend "
            "package, or use 'emu[:profile]'"
        )
