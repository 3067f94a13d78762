"""Which ops block which variants, and which to enable first.

Decisions are made per *rule*: the name one adds to a support list, so that
the answer is something a person can act on. ``aten::cumsum``,
``aten::cumsum.out`` and ``aten::cumsum_`` are all enabled by the rule
``cumsum`` (emu's rule, Note [Op names in the op map]), so ranking them apart
would understate what enabling ``cumsum`` unblocks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter

from ootest.opmap.names import SupportSet, overload_of
from ootest.opmap.store import OpStore


def rule_of(recorded: str) -> str:
    """The support rule that enables a recorded overload: its packet, without the
    in-place ``_`` (emu covers ``add_`` by ``add``) and without ``aten::``."""
    op = overload_of(recorded)
    name = op.name
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name if op.ns == "aten" else f"{op.ns}::{name}"


@dataclass(frozen=True)
class OpNeed:
    """One rule the index says is needed and not supported."""

    rule: str
    overloads: tuple[str, ...]  # the unsupported recorded overloads it covers
    variants: int  # variants calling any of them
    alone: int  # variants it is the only missing rule of
    alone_uncertain: int  # of those, variants whose ops may differ per device


@dataclass(frozen=True)
class PlanStep:
    rule: str
    unblocks: int  # variants this step unblocks
    cumulative: int  # variants unblocked by this step and the ones before


@dataclass(frozen=True)
class MissingReport:
    source: str
    total: int  # variants in the index
    blocked: int  # variants calling at least one unsupported op
    needs: list[OpNeed]  # ranked: alone, then variants, then name
    plan: list[PlanStep]


@dataclass(frozen=True)
class Blocked:
    """The unsupported ops of the index under one support set."""

    rule_ops: dict[str, list[tuple[int, str]]]  # rule -> (op id, overload)
    rule_variants: dict[str, frozenset[int]]  # rule -> variants calling any of its ops
    missing_count: Counter[int]  # blocked variant -> how many rules it misses

    @property
    def variants(self) -> int:
        return len(self.missing_count)

    def sets(
        self, max_rules: int | None = None, only: set[int] | None = None
    ) -> dict[int, set[str]]:
        """The missing rules of every blocked variant (of the ``only`` ones), or of
        those missing at most ``max_rules``."""
        counts = self.missing_count
        pool = counts.keys() if only is None else only.intersection(counts)
        near = {v for v in pool if max_rules is None or counts[v] <= max_rules}
        out: dict[int, set[str]] = {v: set() for v in near}
        for r, vs in self.rule_variants.items():
            for v in near.intersection(vs):
                out[v].add(r)
        return out


def blocked(store: OpStore, support: SupportSet) -> Blocked:
    """Every variant calling an unsupported op, with how many rules it misses.

    Works on posting lists (Note [Op map schema]): per rule a set union, then
    one C-level count over all of them; no loop per edge in Python.
    """
    rule_ops: dict[str, list[tuple[int, str]]] = {}
    for i, name in store.all_ops():
        if not support.covers(name):
            rule_ops.setdefault(rule_of(name), []).append((i, name))
    posting = store.postings(i for ops in rule_ops.values() for i, _ in ops)
    rule_variants = {
        r: frozenset(posting[ops[0][0]]).union(*(posting[i] for i, _ in ops[1:]))
        for r, ops in rule_ops.items()
    }
    # A rule of one overload counts its posting list (an array: faster to walk
    # than the set); a rule of several counts each variant once.
    count = Counter(
        chain.from_iterable(
            posting[ops[0][0]] if len(ops) == 1 else rule_variants[r] for r, ops in rule_ops.items()
        )
    )
    return Blocked(rule_ops, rule_variants, count)


def missing(store: OpStore, support: SupportSet, top: int = 10) -> MissingReport:
    """Rank the unsupported rules and plan which ``top`` to enable first."""
    b = blocked(store, support)
    by_count = _by_count(b.missing_count, max(top, 1))
    alone_set = by_count[1]
    uncertain = set(store.uncertain_variants())
    needs = []
    for r, vs in b.rule_variants.items():
        if not vs:
            continue
        alone = alone_set.intersection(vs)
        needs.append(
            OpNeed(
                r,
                tuple(sorted(n for _, n in b.rule_ops[r])),
                len(vs),
                len(alone),
                len(alone & uncertain),
            )
        )
    needs.sort(key=lambda n: (-n.alone, -n.variants, n.rule))
    return MissingReport(
        support.source,
        store.variant_count(),
        b.variants,
        needs,
        greedy_plan(b.rule_variants, by_count, top),
    )


def _by_count(count: Counter[int], k: int) -> list[set[int]]:
    """Variants by how many rules they miss: ``[j]`` holds those missing ``j``
    (j <= k; sorted and grouped in C rather than looped over in Python)."""
    out: list[set[int]] = [set() for _ in range(k + 2)]
    for n, group in groupby(sorted(count.items(), key=itemgetter(1)), key=itemgetter(1)):
        if n > k:
            break
        out[n] = set(map(itemgetter(0), group))
    return out


def greedy_plan(
    rule_variants: dict[str, frozenset[int]], by_count: list[set[int]], k: int
) -> list[PlanStep]:
    """Pick ``k`` rules, each the one that unblocks the most variants given the
    rules picked before; ties, and steps where no single rule unblocks anything,
    go to the rule most often missing among variants still within reach, then
    to the name.

    ``by_count[j]`` holds the variants missing ``j`` rules. Only a variant
    missing at most the steps left can still be unblocked; the others drop out.
    Picking a rule moves the variants that miss it from ``exact[j]`` to
    ``exact[j - 1]``; the counts per rule follow by set intersections (in C),
    so no step loops over variants in Python. The tie-break is counted only
    for the rules that tie.
    """
    exact = [set(s) for s in by_count[: k + 1]]
    live = {r: vs for r, vs in rule_variants.items() if vs}
    single = {r: len(vs.intersection(exact[1])) for r, vs in live.items()} if k else {}
    steps: list[PlanStep] = []
    done = 0
    for step in range(k):
        left = k - step
        if left + 1 < len(exact):
            exact[left + 1] = set()  # out of reach from now on
        if not live or not any(exact[1 : left + 1]):
            break
        best = max(single[r] for r in live)
        tied = [r for r in live if single[r] == best]
        rule = tied[0]
        if len(tied) > 1:
            reach: set[int] = set().union(*exact[1 : left + 1])
            anywhere = {r: len(live[r].intersection(reach)) for r in tied}
            rule = min(tied, key=lambda r: (-anywhere[r], r))
            if anywhere[rule] == 0:
                break  # no rule is missing from any variant still within reach
        vs = live.pop(rule)
        del single[rule]
        moved = [vs.intersection(exact[j]) for j in range(left + 1)]
        for j in range(1, left + 1):
            if moved[j]:
                exact[j] -= moved[j]
                exact[j - 1] |= moved[j]
        # The unblocked ones missed no other live rule, so only the variants now
        # missing one rule change the other rules' counts.
        promoted = moved[2] if left >= 2 else set()
        if promoted:
            for r, other in live.items():
                single[r] += len(other.intersection(promoted))
        exact[0] = set()
        done += len(moved[1])
        steps.append(PlanStep(rule, len(moved[1]), done))
    return steps
