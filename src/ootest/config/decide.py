"""The outcome of one variant: a pure function of (config, variant).

Order of precedence (documented in docs/config.md):
1. The most specific matching entry decides the mode (variant filter > Class::method >
   bare method > regex; among equals the later entry wins); no match -> the file's
   ``unlisted_test_mode``. Entries whose ``when`` does not hold, and entries whose
   ``selectors`` do not select the variant, are ignored.
2. ``skip`` ends there. Otherwise capability gating: an op, dtype or module the
   device does not declare (``global``), or that the entry's ``edits`` exclude,
   skips that variant with a reason naming the missing capability.
3. ``force_xfail`` (entry, op or dtype) turns ``mandatory_success`` into ``xfail``.
4. Precision: ``supported_ops[].dtypes[].precision`` > the entry's
   ``edits.dtypes.include[].precision`` > ``global.supported_dtypes[].precision``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ootest.config.names import NamePattern, Variant, reason_message
from ootest.config.resolved import ResolvedFile
from ootest.config.when import Context, holds
from ootest.memo import IdentityMemo

if TYPE_CHECKING:  # read, never built here: decide imports neither pydantic nor PyYAML
    from ootest.config.model import (
        DtypeRef,
        GlobalCaps,
        Mode,
        ModuleRef,
        OpRef,
        Precision,
        TestEntry,
    )

__all__ = ["Context", "Decision", "decide", "declared", "holds", "match_entry"]


class Decision(NamedTuple):
    """What the config decides for one variant, as plain data: ``decide`` returns it,
    the plugin applies it (marks, precision) and reports it, and the plan cache
    stores it as it is (Note [Plan cache]).

    ``matched`` holds the config names that matched the variant: the
    :class:`~ootest.config.names.NamePattern` objects as ``decide`` returns them,
    their ids in the compiled plan (``Plan.patterns``) once the plugin keeps them.
    """

    mode: Mode
    reason: str
    origin: str = ""
    issue: str | None = None
    bucket: str = "listed"  # listed | unlisted | capability | excluded | forced | selector
    atol: float | None = None
    rtol: float | None = None
    matched: tuple[Any, ...] = ()
    capable: bool = False  # skipped by an entry although the device declares what it needs
    tags: tuple[str, ...] = ()  # the deciding entry's
    labels: tuple[str, ...] = ()  # the file's and the deciding entry's
    # the selection decision behind it, from the evidence sidecar (Note [Decisions
    # people can see]): its reason code ("" otherwise) and its evidence lines
    code: str = ""
    evidence: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return reason_message(self.reason, self.issue, self.origin)


_Ref = TypeVar("_Ref", "DtypeRef", "OpRef", "ModuleRef")
Admit = Callable[["TestEntry"], bool]
"""Whether an entry's ``selectors`` select the variant being decided (the plugin knows
its marks and op evidence; the config does not)."""


def _by_name(refs: Sequence[_Ref] | None, strip: str = "") -> dict[str, tuple[int, _Ref]] | None:
    """name -> (position, ref); the first of equal names wins, as in a list scan."""
    if refs is None:
        return None
    out: dict[str, tuple[int, _Ref]] = {}
    for i, r in enumerate(refs):
        out.setdefault(r.name.removeprefix(strip) if strip else r.name, (i, r))
    return out


@dataclass
class _Lookup:
    """Name indexes over one capability list or one entry's edits: a long
    ``supported_ops`` list costs a dict lookup per variant, not a scan."""

    ops: dict[str, tuple[int, OpRef]] | None
    dtypes: dict[str, tuple[int, DtypeRef]] | None
    # ModuleInfo names are "nn.Linear"; Torch Spyre writes "torch.nn.Linear".
    modules: dict[str, tuple[int, ModuleRef]] | None

    def op(self, v: Variant) -> OpRef | None:
        if not self.ops:
            return None
        # by full name or by the OpInfo family (Note [Exact op filters]: the family
        # is Torch Spyre's meaning here, as it is not in a variant filter)
        hits = [h for h in (self.ops.get(v.op or ""), self.ops.get(v.op_name or "")) if h]
        return min(hits, key=lambda h: h[0])[1] if hits else None

    def dtype(self, name: str) -> DtypeRef | None:
        hit = self.dtypes.get(name) if self.dtypes else None
        return hit[1] if hit else None


@dataclass
class _EntryLookup:
    include: _Lookup
    exclude: _Lookup


def _caps(caps: GlobalCaps) -> _Lookup:
    return _Lookup(
        _by_name(caps.supported_ops),
        _by_name(caps.supported_dtypes),
        _by_name(caps.supported_modules, "torch."),
    )


def _entry_edits(entry: TestEntry) -> _EntryLookup | None:
    if entry.edits is None:
        return None
    ops, dts, mods = entry.edits.ops, entry.edits.dtypes, entry.edits.modules
    return _EntryLookup(
        _Lookup(
            _by_name(ops.include if ops else None),
            _by_name(dts.include if dts else None),
            _by_name(mods.include if mods else None, "torch."),
        ),
        _Lookup(
            _by_name(ops.exclude if ops else None),
            _by_name(dts.exclude if dts else None),
            _by_name(mods.exclude if mods else None, "torch."),
        ),
    )


def _op_dtypes(ref: OpRef) -> _Lookup:
    return _Lookup(None, _by_name(ref.dtypes), None)


@dataclass
class _Memo:
    """The indexes built for one resolved file (kept in ``ResolvedFile.memo``, so they
    go when the config goes): per capability block, entry and op, by identity."""

    caps: IdentityMemo[GlobalCaps, _Lookup] = field(default_factory=lambda: IdentityMemo(_caps))
    edits: IdentityMemo[TestEntry, _EntryLookup | None] = field(
        default_factory=lambda: IdentityMemo(_entry_edits)
    )
    op_dtypes: IdentityMemo[OpRef, _Lookup] = field(
        default_factory=lambda: IdentityMemo(_op_dtypes)
    )


def _memo(rf: ResolvedFile | None) -> _Memo:
    if rf is None:
        return _Memo()
    memo: _Memo | None = rf.memo.get(_Memo)
    if memo is None:
        memo = rf.memo[_Memo] = _Memo()
    return memo


def match_entry(
    rf: ResolvedFile, v: Variant, ctx: Context, admit: Admit | None = None
) -> tuple[TestEntry | None, tuple[NamePattern, ...]]:
    """The deciding entry and every name that matched (for stale-entry reports).

    An entry with ``selectors`` decides only the variants ``admit`` says they
    select (Note [Selectors]); its names still count as matched."""
    best: tuple[int, int] | None = None
    chosen: TestEntry | None = None
    matched: list[NamePattern] = []
    for idx, p in rf.candidates(v):
        if p.matches(v):
            matched.append(p)
            entry = rf.patterns[idx][0]
            if holds(entry.when, ctx) and (
                entry.selectors is None or admit is None or admit(entry)
            ):
                key = (p.specificity, idx)
                if best is None or key >= best:
                    best, chosen = key, entry
    return chosen, tuple(matched)


def decide(
    rf: ResolvedFile, caps: GlobalCaps, v: Variant, ctx: Context, admit: Admit | None = None
) -> Decision:
    entry, matched = match_entry(rf, v, ctx, admit)
    tags: tuple[str, ...] = ()
    labels = tuple(rf.entry.labels)
    if entry is not None:
        mode: Mode = entry.mode
        reason = entry.reason or entry.description or f"listed as {mode}"
        origin, issue, bucket = entry.origin, entry.issue, "listed"
        tags, labels = tuple(entry.tags), (*labels, *entry.labels)
    else:
        mode = rf.entry.unlisted_test_mode
        reason = f"not listed in the config (unlisted_test_mode: {mode})"
        origin, issue, bucket = rf.entry.origin, None, "unlisted"

    def out(m: Mode, why: str, b: str, prec: Precision | None = None) -> Decision:
        tol = (prec.atol, prec.rtol) if prec is not None else (None, None)
        return Decision(m, why, origin, issue, b, *tol, matched, False, tags, labels)

    if mode == "skip":
        return out(mode, reason, bucket)

    memo = _memo(rf)
    edits = memo.edits(entry) if entry is not None else None
    cl = memo.caps(caps)
    forced: list[str] = []
    if entry is not None and entry.force_xfail:
        forced.append("the entry sets force_xfail")

    # --- op axis
    opref = cl.op(v)
    if v.op is not None:
        ex = edits.exclude.op(v) if edits else None
        if ex is not None:
            return out(
                "skip",
                f"op {v.op} excluded for this test"
                + (f": {ex.description or ex.reason}" if ex.description or ex.reason else ""),
                "excluded",
            )
        inc = edits.include.op(v) if edits else None
        if cl.ops is not None and opref is None and inc is None:
            return out("skip", f"op {v.op} is not in global.supported_ops", "capability")
        if opref is not None and opref.force_xfail:
            forced.append(f"op {opref.name} has force_xfail")

    # --- dtype axis
    precision: Precision | None = None
    for dt in v.dtypes:
        if edits and edits.exclude.dtype(dt) is not None:
            return out("skip", f"dtype {dt} excluded for this test", "excluded")
        included = edits.include.dtype(dt) if edits else None
        allowed, where = cl, "global.supported_dtypes"
        if opref is not None and opref.dtypes is not None:
            allowed, where = memo.op_dtypes(opref), f"supported_ops[{opref.name}].dtypes"
        ref = allowed.dtype(dt)
        if allowed.dtypes is not None and ref is None and included is None:
            what = f"op {v.op} on " if where.startswith("supported_ops") else ""
            return out(
                "skip", f"dtype {dt} is not supported for {what}this device ({where})", "capability"
            )
        global_ref = cl.dtype(dt)
        for r in (ref, global_ref):
            if r is not None and r.force_xfail:
                forced.append(f"dtype {dt} has force_xfail")
                break
        for r in (ref, included, global_ref):
            if r is not None and r.precision is not None and precision is None:
                precision = r.precision

    # --- module axis
    if v.module is not None:
        if edits and edits.exclude.modules and v.module in edits.exclude.modules:
            return out("skip", f"module {v.module} excluded for this test", "excluded")
        mods = cl.modules
        included_mod = bool(edits and edits.include.modules and v.module in edits.include.modules)
        if mods is not None and v.module not in mods and not included_mod:
            return out(
                "skip", f"module {v.module} is not in global.supported_modules", "capability"
            )
        mhit = mods.get(v.module) if mods else None
        if mhit is not None and mhit[1].force_xfail:
            forced.append(f"module {v.module} has force_xfail")

    if forced and mode == "mandatory_success":
        return out("xfail", "; ".join(dict.fromkeys(forced)), "forced", precision)
    return out(mode, reason, bucket, precision)


def declared(caps: GlobalCaps, v: Variant, rf: ResolvedFile | None = None) -> bool:
    """Whether every capability the variant needs (op, dtypes, module) is declared supported.

    For promotion reports: a test skipped by an entry although the device now
    declares all it needs may be worth running. A variant with no op, dtype or
    module axis needs no declared capability, so this is false for it.
    """
    if v.op is None and not v.dtypes and v.module is None:
        return False
    memo = _memo(rf)  # ``rf``: the file whose indexes to reuse
    cl = memo.caps(caps)
    opref = cl.op(v)
    if v.op is not None and opref is None:
        return False
    for dt in v.dtypes:
        allowed = memo.op_dtypes(opref) if opref is not None and opref.dtypes is not None else cl
        if allowed.dtypes is None or allowed.dtype(dt) is None:
            return False
    return not (v.module is not None and v.module not in (cl.modules or {}))
