"""A fake backend distribution for activation and probe tests (Note [Backends as they ship]).

Each is a distribution in its own folder (a ``*.dist-info`` with a
``torch.backends`` entry point, found through PYTHONPATH only by the processes
that get it), registered in Python (rename, device module; kernels through
``torch.library`` when asked): enough for activation and for the probe.
"""

from __future__ import annotations

from pathlib import Path

# Registered like a real backend: the package imports torch at its top and its
# autoload hook renames privateuse1 and registers the device module.
BACKEND = """
import torch

_done = []


def _autoload():
    if _done:
        return
    from torch.utils.backend_registration import rename_privateuse1_backend
    import types

    rename_privateuse1_backend("{name}")
    mod = types.ModuleType("torch.{name}")
    mod.is_available = lambda: {available}
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod._is_in_bad_fork = lambda: False
    mod.manual_seed_all = lambda seed: None
    torch._register_device_module("{name}", mod)
    _done.append(True)


{tail}
"""


def fake_backend(
    where: Path,
    module: str,
    name: str,
    *,
    entry: bool = True,
    available: bool = True,
    body: str | None = None,
    tail: str = "",
) -> Path:
    """A backend distribution in its own folder; returns the folder."""
    site = where / module
    site.mkdir(parents=True)
    text = body or BACKEND.format(name=name, available=available, tail=tail)
    (site / f"{module}.py").write_text(text)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    if entry:
        (info / "entry_points.txt").write_text(f"[torch.backends]\n{name} = {module}:_autoload\n")
    return site
