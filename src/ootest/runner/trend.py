"""What changed between successive runs: outcome counts per run, and the variants
whose outcome changed between the last two (``ootest report --trend A B ...``).

Runs are compared by variant ID (see Note [File keys] in ootest.record.identity),
so runs made on different machines or from different folders line up. A variant
in only one of two runs is ``added`` or ``removed``. Pure functions over
:class:`~ootest.record.results.RunData`; nothing here imports torch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ootest.record.results import BAD, OUTCOMES, PASSED, XPASSED, XPASSED_STRICT, RunData

#: Kinds of change, in report order: what broke first.
KINDS = ("regressed", "fixed", "changed", "added", "removed")
_FAILING = BAD | {XPASSED_STRICT}


@dataclass(frozen=True)
class Change:
    """Every variant that went from one outcome to another (``None``: absent)."""

    before: str | None
    after: str | None
    ids: tuple[str, ...]  # sorted

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        if self.after is None:
            return "removed"
        if self.after in _FAILING and self.before not in _FAILING:
            return "regressed"
        if self.before in _FAILING and self.after in (PASSED, XPASSED):
            return "fixed"
        return "changed"

    @property
    def label(self) -> str:
        return f"{self.before or 'added'} → {self.after or 'removed'}"


@dataclass(frozen=True)
class Run:
    label: str
    counts: Counter[str]
    total: int
    changed: int | None  # variants whose outcome differs from the previous run's


@dataclass(frozen=True)
class Trend:
    runs: tuple[Run, ...]
    changes: tuple[Change, ...]  # between the last two runs, in report order

    @property
    def before(self) -> str:
        return self.runs[-2].label

    @property
    def after(self) -> str:
        return self.runs[-1].label

    def changed(self) -> int:
        return sum(len(c.ids) for c in self.changes)

    def to_json(self, limit: int) -> dict[str, Any]:
        """A JSON-ready dict; at most ``limit`` IDs per change (0: all), ``more`` the rest."""
        return {
            "runs": [
                {
                    "label": r.label,
                    "counts": {o: r.counts[o] for o in OUTCOMES},
                    "total": r.total,
                    "changed": r.changed,
                }
                for r in self.runs
            ],
            "before": self.before,
            "after": self.after,
            "changed": self.changed(),
            "changes": [
                {
                    "kind": c.kind,
                    "from": c.before,
                    "to": c.after,
                    "count": len(c.ids),
                    "ids": list(shown(c.ids, limit)),
                    "more": len(c.ids) - len(shown(c.ids, limit)),
                }
                for c in self.changes
            ],
        }


def shown(ids: Sequence[str], limit: int) -> Sequence[str]:
    """The IDs a capped listing shows (``limit`` 0: all)."""
    return ids[:limit] if limit > 0 else ids


def compare(old: RunData, new: RunData) -> tuple[Change, ...]:
    """Variants whose outcome differs between two runs, grouped by transition:
    regressions (now failing) first, then fixes (now passing), other changes, added,
    removed; larger groups first."""
    groups: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
    a, b = old.results, new.results
    for key, rec in b.items():
        prev = a.get(key)
        before = None if prev is None else str(prev["outcome"])
        if before != rec["outcome"]:
            groups[(before, str(rec["outcome"]))].append(key)
    for key, prev in a.items():
        if key not in b:
            groups[(str(prev["outcome"]), None)].append(key)
    changes = [Change(x, y, tuple(sorted(ids))) for (x, y), ids in groups.items()]
    return tuple(sorted(changes, key=lambda c: (KINDS.index(c.kind), -len(c.ids), c.label)))


def trend(runs: Sequence[tuple[str, RunData]]) -> Trend:
    """The trend over ``runs`` (label, data), oldest first; at least two."""
    if len(runs) < 2:
        raise ValueError("a trend needs two runs or more")
    out: list[Run] = []
    last: tuple[Change, ...] = ()
    for i, (label, data) in enumerate(runs):
        changed = None
        if i:
            last = compare(runs[i - 1][1], data)
            changed = sum(len(c.ids) for c in last)
        out.append(Run(label, data.counts(), len(data.results), changed))
    return Trend(tuple(out), last)
