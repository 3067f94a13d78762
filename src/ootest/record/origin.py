"""Where a piece of evidence came from: the device (and backend) a run or a
replay ran on, and the torch it ran with.

Note [Evidence origins]
A result proves something only about the device it ran on. Every results file
says where its sessions ran: a ``session`` line carries ``device_spec`` (what
``--ootest-device`` was given, normalised: ``emu:full``, ``torch_tiny:tiny``,
``tiny``; ``null`` for a session without a device, whose device-generic tests ran
on the CPU) and ``torch`` (the version the session imported); files written
before ``device_spec`` existed say only the backend's name, on their
``collection`` lines (``device``, ``device_module``). A replay's header says
``device`` and ``torch_version``. Each variant ID says which device an
instantiation was for: the device's own and a plain test carry no device axis,
another device's carries ``device=<type>`` (``[device=cpu]``).

Readers use evidence only where its origin is the one it stands for:

- device results (``select run --results``, ``select refine``): a file whose
  sessions ran without a device, or on another device than the target (the
  ``--device`` of ``select run``, the ``device:`` of a refined config), is not
  device evidence, and a result whose ID carries a device axis is another
  device's variant, never the device's;
- a CPU reference (``select run --reference``, ``relay report --triage
  --reference``): only its CPU results count, an ID with ``device=cpu``, or a
  plain test of a session without a device; a reference with none is refused;
- a replay (``select run --replay``): used only when the device it ran on is the
  target; without a target (no ``--device``) it cannot be checked, so it is not used.

What is left out is said in one line per file. Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ootest.errors import UserError
from ootest.record.identity import reference_id
from ootest.record.results import Record, RunData

__all__ = [
    "CPU_REFERENCE_HOW",
    "Origin",
    "cpu_reference",
    "cpu_results",
    "device_axis",
    "mismatch",
    "run_origin",
    "same_device",
]

_AXIS = re.compile(r"[\[,]device=([^,\]]*)")


def device_axis(variant_id: str) -> str | None:
    """The device an instantiation was for, as its ID says (``[device=cpu]`` ->
    ``cpu``); None for the device's own variants and plain tests."""
    m = _AXIS.search(variant_id.partition("::")[2])
    return m[1] if m else None


def _norm(device: str) -> tuple[str, str | None, str | None]:
    """(backend name, its module or None, its emu profile or None) of a ``--device``
    value (Note [Backends as they ship])."""
    text = device.strip()
    if text == "emu" or text.startswith("emu:"):
        return "emu", "ootest.device.emu", text.partition(":")[2] or "young"
    mod, sep, name = text.partition(":")
    return (name, mod, None) if sep else (text, None, None)


def same_device(a: str, b: str) -> bool:
    """Whether two ``--device`` values name the same backend: the same name, the
    same module where both name one, the same emu profile (``emu`` is ``emu:young``)."""
    na, ma, pa = _norm(a)
    nb, mb, pb = _norm(b)
    return na == nb and (ma is None or mb is None or ma == mb) and pa == pb


@dataclass(frozen=True)
class Origin:
    """Where a results file's sessions ran (Note [Evidence origins])."""

    #: each device its sessions ran on (``--device`` form; None: no device, the CPU)
    devices: frozenset[str | None] = frozenset()
    #: whether the file said it (a file without session or collection lines does not)
    known: bool = False
    #: the file names only the backend's name (written before ``device_spec``):
    #: an emu profile cannot be told apart
    names_only: bool = False
    torch: frozenset[str] = frozenset()

    def text(self) -> str:
        shown = sorted("no device (the CPU)" if d is None else d for d in self.devices)
        return ", ".join(shown) or "an unknown device"


def run_origin(records: Iterable[Mapping[str, object]]) -> Origin:
    """The origin a results file's records say (Note [Evidence origins])."""
    specs: set[str | None] = set()
    names: set[str | None] = set()
    torch: set[str] = set()
    spec_seen = name_seen = False
    for rec in records:
        kind = rec.get("kind")
        if kind == "session" and "device_spec" in rec:
            spec_seen = True
            spec = rec.get("device_spec")
            specs.add(str(spec) if spec else None)
            if rec.get("torch"):
                torch.add(str(rec["torch"]))
        elif kind == "collection" and "device" in rec:
            name_seen = True
            name, module = rec.get("device"), rec.get("device_module")
            if not name:
                names.add(None)
            elif module and module != "ootest.device.emu":
                names.add(f"{module}:{name}")
            else:
                names.add(str(name))
    if spec_seen:
        return Origin(frozenset(specs), True, False, frozenset(torch))
    if name_seen:
        return Origin(frozenset(names), True, True)
    return Origin()


def mismatch(origin: Origin, target: str | None) -> str | None:
    """Why a results file of ``origin`` is not evidence of the device ``target``
    (None: it may be): it ran without a device, or on another one."""
    if not origin.known:
        return None  # an older file that did not say: its IDs still tell other devices apart
    if None in origin.devices:
        return "ran without a device (its device-generic tests ran on the CPU)"
    if target is None:
        return None
    for d in sorted(x for x in origin.devices if x is not None):
        if origin.names_only:
            if _norm(d)[0] == _norm(target)[0] and (
                _norm(d)[1] is None or _norm(target)[1] in (None, _norm(d)[1])
            ):
                continue  # the name matches; an older file names no profile
        elif same_device(d, target):
            continue
        return f"ran on {origin.text()}, not on the target device {target}"
    return None


def cpu_results(
    results: Mapping[str, Record], origin: Origin
) -> tuple[dict[str, Record], Counter[str]]:
    """The CPU results of a reference run, by the device variant they stand for
    (``reference_id``), and how many were left out, per device: an ID with a device
    axis counts when it is ``cpu``; one without (the device's own variant, a plain
    test) only when its session ran without a device and it is no device variant
    (Note [Evidence origins])."""
    kept: dict[str, Record] = {}
    left: Counter[str] = Counter()
    ran_on = sorted(d for d in origin.devices if d is not None)
    for vid, rec in results.items():
        if rec.get("phase") == "collect":
            continue
        axis = device_axis(vid)
        if axis is not None:
            if axis == "cpu":
                kept[reference_id(vid)] = rec
            else:
                left[axis] += 1
        elif rec.get("device_variant") is True:
            left[ran_on[0] if ran_on else "the device's own variants"] += 1
        elif ran_on:
            left[ran_on[0]] += 1  # a plain test of a session on a device
        else:
            kept[vid] = rec
    return kept, left


#: How to make a CPU reference, as the refusal of one without CPU results says.
CPU_REFERENCE_HOW = (
    "run the same files without --ootest-device, with the backend kept out "
    "(TORCH_DEVICE_BACKEND_AUTOLOAD=0 PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu pytest FILES "
    "--ootest-results cpu.jsonl)"
)


def cpu_reference(where: str, records: list[Record]) -> tuple[dict[str, Record], str | None]:
    """A reference file's CPU results by ``reference_id`` (``cpu_results``) and the
    line that says what was left out (None: nothing); a file with results but none
    on the CPU is refused (``where``: the flag and the file, for the message)."""
    data = RunData.from_records(records)
    kept, left = cpu_results(data.results, run_origin(records))
    said = ", ".join(f"{n} of {d}" for d, n in sorted(left.items()))
    if not kept and left:
        raise UserError(
            f"{where}: expected the results of a CPU run (variant IDs with device=cpu, or "
            f"plain tests of a run without a device); found {sum(left.values())} results, "
            f"none on the CPU ({said}); {CPU_REFERENCE_HOW}"
        )
    if not left:
        return kept, None
    return kept, f"{where}: {said} left out: only its CPU results are the CPU reference"
