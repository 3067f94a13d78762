"""Where the backend's capabilities come from, for ``select run`` and ``ops missing``.

Note [Backend capabilities]
The ops and dtypes a backend supports come, in this order of precedence, from

1. ``--supported FILE`` / ``--dtypes D,D``: what a person declares, each an
   override of the same half of what follows;
2. the backend itself (``--device <module>:<name>`` or ``--device <name>``, or
   ``--probe`` with an emu device): a child process loads it as the plugin does
   and lists every op that can reach a kernel on the device (Note [What a
   backend supports], ``ootest.plugin.probe``) and the dtypes the device module
   declares, if it declares any; ``--detected FILE`` reads a probe saved with
   ``--save-detected FILE`` (or by ``select scope``);
3. an emu profile (``--device emu:PROFILE``): its ops, per-op dtypes and dtypes.

Undeclared dtypes stay undeclared (``None``): no dtype is then taken as
unsupported, and only a replay's evidence or a run decides.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ootest.errors import UserError
from ootest.opmap.names import SupportSet

if TYPE_CHECKING:
    from ootest.select.scope import Detection

__all__ = ["Capabilities", "cannot_run", "capabilities", "support_set"]


@dataclass(frozen=True)
class Capabilities:
    ops: SupportSet | None  # None: no op is declared (every op unknown)
    dtypes: frozenset[str] | None  # None: no dtype declared
    source: str  # what the provenance header says
    notes: list[str] = field(default_factory=list)


def _dtypes(text: str) -> frozenset[str]:
    found = frozenset(d.strip() for d in text.split(",") if d.strip())
    if not found:
        raise UserError(f"--dtypes {text!r}: expected dtype names such as float32,int64")
    return found


def capabilities(
    device: str | None,
    *,
    supported: Path | None = None,
    dtypes: str | None = None,
    detected: Path | None = None,
    save_detected: Path | None = None,
    probe: bool = False,
) -> Capabilities:
    """The backend's ops and dtypes (Note [Backend capabilities])."""
    from ootest.device.activate import is_emu

    ops: SupportSet | None = None
    declared: frozenset[str] | None = None
    source = "nothing declared"
    notes: list[str] = []
    if detected is not None or (device is not None and (probe or not is_emu(device))):
        det = _detection(device, detected, save_detected)
        if det.ops is None:
            raise UserError(
                f"--detected {detected}: this detection holds no op list (saved by an older "
                "ootest); probe again with --device"
            )
        from ootest.opmap.support import from_probe

        how: dict[str, int] = {}
        for v in det.ops.values():
            how[v.partition("=")[0]] = how.get(v.partition("=")[0], 0) + 1
        counts = ", ".join(f"{n} {k}" for k, n in sorted(how.items()))
        source = f"probed {det.device} (torch {det.torch}: {counts})"
        ops = from_probe(det.ops, source)
        declared = frozenset(det.dtypes) if det.dtypes else None
    elif device is not None:
        from ootest.device.emu import read_profile
        from ootest.opmap.support import from_emu

        ops = from_emu(device)
        prof = read_profile(device.partition(":")[2] or "young")
        # a profile's empty list is every dtype (read_profile turns ["*"] into [])
        declared = frozenset(prof.dtypes) if prof.dtypes and "*" not in prof.dtypes else None
        source = f"emu:{prof.name}"
    if supported is not None:
        from ootest.opmap.support import from_file

        ops = from_file(supported)
        source = f"{supported}" if source == "nothing declared" else f"{source}; ops: {supported}"
    if dtypes is not None:
        declared = _dtypes(dtypes)
        source += f"; dtypes: {','.join(sorted(declared))}"
    return Capabilities(ops, declared, source, notes)


def _detection(device: str | None, detected: Path | None, save: Path | None) -> Detection:
    from ootest.select.scope import detect, detection_from

    if detected is not None:
        try:
            data = json.loads(detected.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"--detected {detected}: expected a JSON detection; {e}") from None
        det = detection_from(data, f"--detected {detected}")
        if device is not None and device != det.device:
            raise UserError(
                f"--detected {detected}: it was probed for {det.device}, not {device}; "
                "drop --device or probe again"
            )
    else:
        assert device is not None
        from ootest.device import check_device

        check_device(device)
        det = detect(device)
    if save is not None:
        from ootest.atomic import write_atomic

        write_atomic(save, json.dumps(asdict(det), sort_keys=True, indent=1) + "\n")
    return det


def support_set(
    device: str | None, detected: Path | None, supported: Path | None, config: Path | None
) -> tuple[SupportSet, list[str]]:
    """What ``ootest ops missing`` weighs ops against, and notes: ``supported`` (a
    list), else the backend (``device`` or ``detected``), else the config's
    ``global.supported_ops``."""
    from ootest.opmap import support

    if supported is not None:
        return support.from_file(supported), []
    if device is not None or detected is not None:
        caps = capabilities(device, detected=detected)
        assert caps.ops is not None  # a device or a detection always gives ops
        return caps.ops, caps.notes
    if config is None:
        raise UserError("ops missing: expected --supported, --device, --detected or --config")
    return support.from_config(config)


def cannot_run(device: str | None, detected: Path | None, covers: list[str]) -> str | None:
    """With ``device``/``detected``: a warning when the backend runs none of the
    recorded overloads ``covers`` names (Note [Backend capabilities])."""
    if device is None and detected is None:
        return None
    caps = capabilities(device, detected=detected)
    assert caps.ops is not None
    if not covers:
        return None
    lacking = [o for o in covers if not caps.ops.covers(o)]
    if not lacking:
        return None
    return (
        f"the backend ({caps.source}) cannot run {', '.join(lacking[:5])}"
        + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
        + ": tests enabled for it will fail until it registers a kernel"
    )
