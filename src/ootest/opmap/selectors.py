"""Torch Spyre's test selectors, decided from op map evidence (Note [Selectors]).

A selector key answers True, False or None (unknown: the op map cannot tell).
Keys of one item combine by AND, items of a list by OR, both in three-valued
logic; a variant is selected unless ``include`` is certainly false or
``exclude`` certainly true, so a variant the evidence cannot judge is kept.

=======================  =========================================================
key                      True when
=======================  =========================================================
``has_ops: true``        the op map recorded at least one op for the variant
``has_ops: false``       it recorded none, for a variant run to a pass
``has_ops: [ops]``       it calls any of them (an overload, or any of a packet's)
``ops_in_supported: b``  every recorded op is covered by ``global.supported_ops``
                         (emu's rule, as ``ootest ops missing --config``) == b
``markers: [m]``         the variant carries any of the marks
``name_patterns: [p]``   a name of the test matches any glob
=======================  =========================================================

Unknown: a variant the op map never captured, or whose ops may differ per
device (every evidence key); a partial op set (no capture ran it to a pass) for
the answers only a complete set can give (``has_ops: false``, no listed op
called, no unsupported op called). Pure functions; the plugin supplies the facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import NamedTuple

from ootest.config.model import SelectorItem, Selectors
from ootest.opmap.names import OpName, SupportSet, parse_op

Known = bool | None  # None: the evidence cannot tell


class Evidence(NamedTuple):
    """What the op map knows about one variant."""

    ops: frozenset[str]
    device_dependent: bool  # its ops may differ per device
    partial: bool  # no capture ran it to a pass: later ops may be missing


class Facts(NamedTuple):
    """What a selector reads about one variant."""

    evidence: Evidence | None  # None: not in the op map
    marks: frozenset[str]
    names: tuple[str, ...]


class Verdict(NamedTuple):
    selected: bool
    unknown: bool  # kept only because the evidence could not tell
    why: str  # for a variant left out: which list decided
    origin: str  # file:line of the deciding item


def _all(values: Iterable[Known]) -> Known:
    out: Known = True
    for v in values:
        if v is False:
            return False
        if v is None:
            out = None
    return out


def _any(values: Iterable[Known]) -> Known:
    out: Known = False
    for v in values:
        if v is True:
            return True
        if v is None:
            out = None
    return out


def _calls(op: OpName, ops: frozenset[str]) -> bool:
    if not op.is_packet:
        return str(op) in ops
    packet = op.packet
    return any(o.partition(".")[0] == packet for o in ops)


@dataclass(frozen=True)
class CompiledItem:
    item: SelectorItem
    wanted: tuple[OpName, ...]  # has_ops as a list, parsed

    @classmethod
    def of(cls, item: SelectorItem) -> CompiledItem:
        listed = item.has_ops if isinstance(item.has_ops, tuple) else ()
        return cls(item, tuple(parse_op(n) for n in listed))

    def match(self, facts: Facts, support: SupportSet) -> Known:
        s = self.item
        keys: list[Known] = []
        if s.markers is not None:
            keys.append(any(m in facts.marks for m in s.markers))
        if s.name_patterns is not None:
            keys.append(any(fnmatchcase(n, p) for p in s.name_patterns for n in facts.names))
        if s.has_ops is not None:
            keys.append(self._has_ops(facts.evidence))
        if s.ops_in_supported is not None:
            keys.append(self._in_supported(facts.evidence, support, s.ops_in_supported))
        return _all(keys)

    def _has_ops(self, ev: Evidence | None) -> Known:
        if ev is None or ev.device_dependent:
            return None
        if self.wanted:
            found = any(_calls(op, ev.ops) for op in self.wanted)
        else:
            found = bool(ev.ops)
        if found:
            return self.item.has_ops is not False
        return None if ev.partial else self.item.has_ops is False

    @staticmethod
    def _in_supported(ev: Evidence | None, support: SupportSet, want: bool) -> Known:
        if ev is None or ev.device_dependent:
            return None
        if not all(support.covers(o) for o in ev.ops):
            return not want
        return None if ev.partial else want


@dataclass(frozen=True)
class SelectorSet:
    """One ``test_selectors``/``selectors`` block, ready to decide variants."""

    block: Selectors
    include: tuple[CompiledItem, ...]
    exclude: tuple[CompiledItem, ...]
    support: SupportSet

    @classmethod
    def compile(cls, block: Selectors, support: SupportSet) -> SelectorSet:
        return cls(
            block,
            tuple(map(CompiledItem.of, block.include)),
            tuple(map(CompiledItem.of, block.exclude)),
            support,
        )

    @property
    def needs_evidence(self) -> bool:
        return any(c.item.needs_evidence for c in (*self.include, *self.exclude))

    def decide(self, facts: Facts) -> Verdict:
        """Selected unless include is certainly false or exclude certainly true."""
        inc: Known = True
        if self.include:
            hits = [c.match(facts, self.support) for c in self.include]
            inc = _any(hits)
            if inc is False:
                return Verdict(False, False, "no include item matches", self.include[0].item.origin)
        exc: Known = False
        for i, c in enumerate(self.exclude):
            hit = c.match(facts, self.support)
            if hit is True:
                return Verdict(False, False, f"exclude[{i}] matches", c.item.origin)
            if hit is None:
                exc = None
        return Verdict(True, inc is None or exc is None, "", "")

    def listed_ops(self) -> list[str]:
        """Every op named in a ``has_ops`` list (for checks against the op map)."""
        return [str(op) for c in (*self.include, *self.exclude) for op in c.wanted]
