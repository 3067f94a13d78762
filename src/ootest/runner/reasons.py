"""Skipped and expected-to-fail results grouped by the decision behind them.

Every report (terminal, HTML, job summary) shows the same groups: a selection
decision by its reason code with the rest of the reason as the detail
(``op_unsupported 207 (aten::sort 45, aten::topk 23, ...)``), a person's entry by
its own ``reason:``, a variant nobody decided as ``not decided: unlisted``, a
variant the test skipped itself by its message (Note [Decisions people can see]).
Counts grow with the variants; the groups with the distinct codes and reasons.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ootest.record.decisions import reason_key
from ootest.record.results import SKIPPED, Record, RunData, skipped_by

__all__ = ["EXPECTED_MODES", "Group", "details_text", "expected_groups", "skip_groups"]

#: Modes whose variants run expecting to fail.
EXPECTED_MODES = ("xfail", "xfail_strict")


_NONE: Counter[str] = Counter()  # shared by groups with nothing to count (never written)


class Group:
    """Results sharing a reason: who decided (``config`` or ``test``) and the reason.

    A run may have a group per variant (tests that skip themselves, each with its own
    message): the counters are made on first use, not per group."""

    __slots__ = ("count", "details", "evidence", "ids", "key", "origins", "outcomes", "who")

    def __init__(self, who: str, key: str) -> None:
        self.who, self.key = who, key
        self.count = 0
        self.ids: list[str] = []
        self.outcomes: Counter[str] = _NONE
        self.details: Counter[str] = _NONE  # e.g. the op of op_unsupported
        self.evidence: Counter[str] = _NONE
        self.origins: Counter[str] = _NONE

    def add(self, vid: str, rec: Record, detail: str) -> None:
        self.ids.append(vid)
        self.count += 1
        if self.outcomes is _NONE:
            self.outcomes = Counter()
        self.outcomes[str(rec["outcome"])] += 1
        if detail:
            if self.details is _NONE:
                self.details = Counter()
            self.details[detail] += 1
        evidence = rec.get("evidence")
        if evidence:
            if self.evidence is _NONE:
                self.evidence = Counter()
            for line in evidence:
                self.evidence[str(line)] += 1
        if rec.get("origin") and not rec.get("code"):
            if self.origins is _NONE:
                self.origins = Counter()
            self.origins[str(rec["origin"])] += 1


def _sorted(groups: Iterable[Group]) -> list[Group]:
    return sorted(groups, key=lambda g: (-g.count, g.who, g.key))


def skip_groups(data: RunData) -> list[Group]:
    """Skipped results by who skipped them (:func:`skipped_by`) and the decision's
    reason, the largest first."""
    by: dict[tuple[str, str], Group] = {}
    for vid, r in data.results.items():
        if r["outcome"] != SKIPPED:
            continue
        who, why = skipped_by(r)
        key, detail = reason_key(r) if who == "config" else (why, "")
        g = by.get((who, key))
        if g is None:
            g = by[(who, key)] = Group(who, key)
        g.add(vid, r, detail)
    return _sorted(by.values())


def expected_groups(data: RunData) -> list[Group]:
    """Results of variants the config expects to fail (``xfail``, ``xfail_strict``)
    that ran, by the decision's reason, with what they did (xfailed, xpassed...)."""
    by: dict[str, Group] = {}
    for vid, r in data.results.items():
        if r.get("mode") not in EXPECTED_MODES or r["outcome"] == SKIPPED:
            continue
        key, detail = reason_key(r)
        g = by.get(key)
        if g is None:
            g = by[key] = Group("config", key)
        g.add(vid, r, detail)
    return _sorted(by.values())


def details_text(g: Group, top: int = 5) -> str:
    """``aten::sort 45, aten::topk 23, +3 more``; empty without details."""
    common = g.details.most_common(top)
    text = ", ".join(f"{d} {n}" for d, n in common)
    rest = len(g.details) - len(common)
    return text + (f", +{rest} more" if rest > 0 else "")
