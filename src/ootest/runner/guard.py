"""Collection guard: a run must not silently run fewer tests than it should.

For every file of the config, the number of variants instantiated for the
device is compared with what it should be: the file's ``expect:`` count, else
the same file in a baseline run (by default the previous run's results). A
drop beyond the threshold trips the guard (exit 3), and so does a configured
file with no device variant at all, whatever the baseline. Nothing here
imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ootest.record.results import Record, RunData, headline

HINT_ZERO = (
    "check the test class's only_for=/except_for= and @onlyCUDA-style decorators "
    "(set 'device_restrictions: bypass' on the file), that the backend name matches, and "
    "that the backend is registered before torch.testing._internal is imported"
)
HINT_DROP = (
    "likely causes: upstream narrowed the file (only_for=, skip decorators, a removed "
    "OpInfo), the backend declares fewer ops or dtypes to op_db, or the backend failed "
    "to register before the file was imported"
)


@dataclass(frozen=True)
class GuardFile:
    """A file the config names: its file key (Note [File keys]) and ``expect:`` count."""

    key: str
    expect: int | None


@dataclass(frozen=True)
class Trip:
    file: str
    message: str


def _count(rec: Record, device: bool) -> int:
    return int(rec.get("device_variants" if device else "collected", 0))


def check(
    files: list[GuardFile],
    run: RunData,
    baseline: RunData | None,
    *,
    device: bool,
    threshold: float = 0.05,
) -> list[Trip]:
    """Every way this run's collection falls short; empty when it is sound."""
    now = run.collection
    before: dict[str, Record] = baseline.collection if baseline is not None else {}
    errors = {
        str(r.get("file")): str(r.get("message") or "")
        for r in run.results.values()
        if r.get("phase") == "collect"
    }
    what = "device variants" if device else "tests"
    trips: list[Trip] = []
    for f in files:
        rec = now.get(f.key)
        shown = f.key
        n = _count(rec, device) if rec is not None else 0
        cause = errors.get(f.key)
        if cause is not None or rec is None:
            if cause is not None and cause.startswith("module skipped"):
                detail = f" ({headline(cause)})"
            else:
                detail = f" (collection failed: {headline(cause)})" if cause else ""
            trips.append(Trip(shown, f"{shown}: collected nothing{detail}"))
            continue
        if n == 0:
            hint = HINT_ZERO if device else "check the path and the file's test names"
            trips.append(
                Trip(
                    shown,
                    f"{shown}: instantiated 0 {what} ({rec.get('collected', 0)} tests "
                    f"collected in all); {hint}",
                )
            )
            continue
        want, source = None, ""
        if f.expect is not None:
            want, source = f.expect, "the config's expect:"
        elif f.key in before:
            want, source = _count(before[f.key], device), "the baseline run"
        if want is not None and n < want * (1 - threshold):
            drop = 100.0 * (want - n) / want if want else 0.0
            trips.append(
                Trip(
                    shown,
                    f"{shown}: {n} {what}, {source} had {want} ({drop:.0f}% fewer, more than "
                    f"the {threshold * 100:.0f}% allowed); {HINT_DROP}",
                )
            )
    return trips
