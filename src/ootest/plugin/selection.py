"""A config's selectors in the plugin: the facts each reads, and what they decided.

The decisions are ootest.opmap.selectors' (Note [Selectors]); this module
gathers a variant's facts (its marks and names from the collected item, its
op evidence from the index) and counts what the selectors did for the summary.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ootest.config.names import Variant
from ootest.errors import ConfigError, Problem, UserError
from ootest.opmap.selectors import Evidence, Facts, SelectorSet, Verdict
from ootest.opmap.support import from_refs

if TYPE_CHECKING:
    from ootest.config.model import Selectors, TestEntry
    from ootest.config.resolved import Config


def load_evidence(path: Path, given_by: str) -> dict[str, Evidence]:
    """Every variant's op evidence in the index at ``path`` (``given_by`` names the
    option or config key that named it, for the error line)."""
    from ootest.opmap.store import OpStore

    try:
        with OpStore.open(path) as store:
            return {vid: Evidence(ops, dep, part) for vid, ops, dep, part in store.op_sets()}
    except UserError as e:
        raise UserError(f"{given_by}: {e}") from None


def aten_marks(evidence: dict[str, Evidence]) -> dict[str, tuple[str, ...]]:
    """``aten__<op>`` marks per variant ID: the op packets the op map saw it call
    (``aten::add.Tensor`` -> ``aten__add``), so ``-m aten__mm`` selects by evidence."""
    shared: dict[frozenset[str], tuple[str, ...]] = {}
    out: dict[str, tuple[str, ...]] = {}
    for vid, ev in evidence.items():
        marks = shared.get(ev.ops)
        if marks is None:
            packets = {o.partition(".")[0].replace("::", "__") for o in ev.ops}
            marks = shared[ev.ops] = tuple(sorted(packets))
        out[vid] = marks
    return out


def _blocks(cfg: Config) -> list[tuple[str, str, Selectors, TestEntry | None]]:
    """(origin, key path, block, its entry or None) for every selectors block."""
    suite = cfg.suite
    out: list[tuple[str, str, Selectors, TestEntry | None]] = []
    if suite.test_selectors is not None:
        out.append((str(cfg.source), "test_selectors", suite.test_selectors, None))
    for i, f in enumerate(suite.files):
        for j, t in enumerate(f.tests):
            if t.selectors is not None:
                out.append((t.origin, f"files[{i}].tests[{j}].selectors", t.selectors, t))
    return out


@dataclass
class Selection:
    top: SelectorSet | None
    entries: dict[int, SelectorSet]  # id(TestEntry) -> its compiled selectors
    evidence: dict[str, Evidence] | None
    notes: list[str] = field(default_factory=list)
    left_out: int = 0  # variants test_selectors skipped
    unknown: int = 0  # variants kept only because the evidence could not tell

    @classmethod
    def create(cls, cfg: Config, evidence: dict[str, Evidence] | None) -> Selection:
        """Compile every selectors block; a key that needs op evidence when no op
        map is given is a config error (each one listed, with where it is)."""
        support, _ = from_refs(cfg.suite.global_.supported_ops, str(cfg.source))
        recorded: set[str] = set()
        for ev in (evidence or {}).values():
            recorded.update(ev.ops)
        recorded.update([o.partition(".")[0] for o in recorded])
        sel = cls(None, {}, evidence)
        problems: list[Problem] = []
        for origin, key, block, entry in _blocks(cfg):
            compiled = SelectorSet.compile(block, support)
            if entry is None:
                sel.top = compiled
            else:
                sel.entries[id(entry)] = compiled
            for (side, i, item), c in zip(
                block.items(), (*compiled.include, *compiled.exclude), strict=True
            ):
                where = item.origin or origin
                file, _, line = where.rpartition(":")
                path = f"{key}.{side}[{i}]"
                for name in ("has_ops", "ops_in_supported"):
                    if getattr(item, name) is not None and evidence is None:
                        problems.append(
                            Problem(
                                file,
                                int(line) if line.isdigit() else 0,
                                0,
                                f"{path}.{name}",
                                "needs op evidence: expected an op map index; found none. "
                                "Pass --ootest-ops DB (built by `ootest ops capture`) or set "
                                "test_suite_config.op_map",
                            )
                        )
                for op in c.wanted if evidence is not None else ():
                    if str(op) not in recorded:
                        sel.notes.append(
                            f"{where}: {path}.has_ops: the op map recorded no {op}; "
                            "it selects no variant"
                        )
        if problems:
            raise ConfigError(problems)
        return sel

    def facts(self, item: pytest.Item, v: Variant, marks: Iterable[str]) -> Facts:
        """What the selectors read about the variant of ``item``."""
        ev = self.evidence.get(v.variant_id) if self.evidence is not None else None
        names = {item.name, v.method}
        cls = getattr(item, "cls", None)
        if cls is not None:
            names |= {f"{cls.__name__}::{item.name}", f"{v.cls}::{item.name}"}
        if v.cls:
            names.add(f"{v.cls}::{v.method}")
        own = {m.name for m in item.iter_markers()}
        return Facts(ev, frozenset(own.union(marks)), tuple(sorted(names)))

    def admit(self, entry: TestEntry, facts: Facts) -> bool:
        sel = self.entries.get(id(entry))
        return sel is None or sel.decide(facts).selected

    def decide_top(self, facts: Facts) -> Verdict:
        assert self.top is not None
        verdict = self.top.decide(facts)
        if not verdict.selected:
            self.left_out += 1
        elif verdict.unknown:
            self.unknown += 1
        return verdict

    def summary(self) -> list[str]:
        out = list(self.notes)
        if self.top is not None:
            out.append(f"test_selectors left out {self.left_out} variant(s) (skipped, with why)")
            if self.unknown:
                out.append(
                    f"test_selectors kept {self.unknown} variant(s) the op map cannot judge "
                    "(not captured, ops may differ per device, or a partial op set): missing "
                    "evidence means run, never skip"
                )
        return out
