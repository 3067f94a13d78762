"""The outcome of one variant: a pure function of (config, variant).

Order of precedence (documented in docs/config.md):
1. The most specific matching entry decides the mode (variant filter > Class::method >
   bare method > regex; among equals the later entry wins); no match -> the file's
   ``unlisted_test_mode``. Entries whose ``when`` does not hold are ignored.
2. ``skip`` ends there. Otherwise capability gating: an op, dtype or module the
   device does not declare (``global``), or that the entry's ``edits`` exclude,
   skips that variant with a reason naming the missing capability.
3. ``force_xfail`` (entry, op or dtype) turns ``mandatory_success`` into ``xfail``.
4. Precision: ``supported_ops[].dtypes[].precision`` > the entry's
   ``edits.dtypes.include[].precision`` > ``global.supported_dtypes[].precision``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ootest.config.load import ResolvedFile
from ootest.config.model import (
    DtypeRef,
    GlobalCaps,
    Mode,
    ModuleRef,
    OpRef,
    Precision,
    TestEntry,
)
from ootest.config.names import NamePattern, Variant
from ootest.config.when import Context, holds

__all__ = ["Context", "Decision", "decide", "declared", "holds", "match_entry"]


@dataclass(frozen=True)
class Decision:
    mode: Mode
    reason: str
    origin: str = ""
    issue: str | None = None
    bucket: str = "listed"  # listed | unlisted | capability | excluded | forced
    precision: Precision | None = None
    tags: tuple[str, ...] = field(default=())
    labels: tuple[str, ...] = field(default=())
    entry: TestEntry | None = None
    matched: tuple[NamePattern, ...] = ()  # every config name that matched the variant

    @property
    def message(self) -> str:
        text = self.reason
        if self.issue:
            text += f" [{self.issue}]"
        if self.origin:
            text += f" ({self.origin})"
        return text


def _find(refs: list[OpRef] | None, v: Variant) -> OpRef | None:
    for ref in refs or ():
        if ref.name in (v.op, v.op_name):
            return ref
    return None


def _names(refs: list[DtypeRef] | list[OpRef] | list[ModuleRef] | None) -> set[str]:
    return {r.name for r in refs or ()}


def _module_names(refs: list[ModuleRef] | None) -> set[str]:
    # ModuleInfo names are "nn.Linear"; Torch Spyre writes "torch.nn.Linear".
    return {r.name.removeprefix("torch.") for r in refs or ()}


def _dtype_ref(refs: list[DtypeRef] | None, name: str) -> DtypeRef | None:
    return next((r for r in refs or () if r.name == name), None)


def match_entry(
    rf: ResolvedFile, v: Variant, ctx: Context
) -> tuple[TestEntry | None, tuple[NamePattern, ...]]:
    """The deciding entry and every name that matched (for stale-entry reports)."""
    best: tuple[int, int] | None = None
    chosen: TestEntry | None = None
    matched: list[NamePattern] = []
    for idx, entry, p in rf.candidates(v):
        if p.matches(v):
            matched.append(p)
            if holds(entry.when, ctx):
                key = (p.specificity, idx)
                if best is None or key >= best:
                    best, chosen = key, entry
    return chosen, tuple(matched)


def decide(rf: ResolvedFile, caps: GlobalCaps, v: Variant, ctx: Context) -> Decision:
    entry, matched = match_entry(rf, v, ctx)
    tags: tuple[str, ...] = ()
    labels = tuple(rf.entry.labels)
    if entry is not None:
        mode: Mode = entry.mode
        reason = entry.reason or entry.description or f"listed as {mode}"
        origin, issue, bucket = entry._origin, entry.issue, "listed"
        tags, labels = tuple(entry.tags), (*labels, *entry.labels)
    else:
        mode = rf.entry.unlisted_test_mode
        reason = f"not listed in the config (unlisted_test_mode: {mode})"
        origin, issue, bucket = rf.entry._origin, None, "unlisted"

    def out(m: Mode, why: str, b: str, prec: Precision | None = None) -> Decision:
        return Decision(m, why, origin, issue, b, prec, tags, labels, entry, matched)

    if mode == "skip":
        return out(mode, reason, bucket)

    edits = entry.edits if entry is not None else None
    forced: list[str] = []
    if entry is not None and entry.force_xfail:
        forced.append("the entry sets force_xfail")

    # --- op axis
    opref = _find(caps.supported_ops, v)
    if v.op is not None:
        ex = _find(edits.ops.exclude if edits and edits.ops else None, v)
        if ex is not None:
            return out(
                "skip",
                f"op {v.op} excluded for this test"
                + (f": {ex.description or ex.reason}" if ex.description or ex.reason else ""),
                "excluded",
            )
        inc = _find(edits.ops.include if edits and edits.ops else None, v)
        if caps.supported_ops is not None and opref is None and inc is None:
            return out("skip", f"op {v.op} is not in global.supported_ops", "capability")
        if opref is not None and opref.force_xfail:
            forced.append(f"op {opref.name} has force_xfail")

    # --- dtype axis
    precision: Precision | None = None
    for dt in v.dtypes:
        if edits and edits.dtypes and dt in _names(edits.dtypes.exclude):
            return out("skip", f"dtype {dt} excluded for this test", "excluded")
        included = _dtype_ref(edits.dtypes.include if edits and edits.dtypes else None, dt)
        allowed: list[DtypeRef] | None = caps.supported_dtypes
        where = "global.supported_dtypes"
        if opref is not None and opref.dtypes is not None:
            allowed, where = opref.dtypes, f"supported_ops[{opref.name}].dtypes"
        ref = _dtype_ref(allowed, dt)
        if allowed is not None and ref is None and included is None:
            what = f"op {v.op} on " if where.startswith("supported_ops") else ""
            return out(
                "skip", f"dtype {dt} is not supported for {what}this device ({where})", "capability"
            )
        global_ref = _dtype_ref(caps.supported_dtypes, dt)
        for r in (ref, global_ref):
            if r is not None and r.force_xfail:
                forced.append(f"dtype {dt} has force_xfail")
                break
        for r in (ref, included, global_ref):
            if r is not None and r.precision is not None and precision is None:
                precision = r.precision

    # --- module axis
    if v.module is not None:
        mod_ex = edits.modules.exclude if edits and edits.modules else None
        if v.module in _module_names(mod_ex):
            return out("skip", f"module {v.module} excluded for this test", "excluded")
        mod_inc = edits.modules.include if edits and edits.modules else None
        mods = caps.supported_modules
        if (
            mods is not None
            and v.module not in _module_names(mods)
            and v.module not in _module_names(mod_inc)
        ):
            return out(
                "skip", f"module {v.module} is not in global.supported_modules", "capability"
            )
        mref = next((m for m in mods or () if m.name.removeprefix("torch.") == v.module), None)
        if mref is not None and mref.force_xfail:
            forced.append(f"module {v.module} has force_xfail")

    if forced and mode == "mandatory_success":
        return out("xfail", "; ".join(dict.fromkeys(forced)), "forced", precision)
    return out(mode, reason, bucket, precision)


def declared(caps: GlobalCaps, v: Variant) -> bool:
    """Whether every capability the variant needs (op, dtypes, module) is declared supported.

    For promotion reports: a test skipped by an entry although the device now
    declares all it needs may be worth running. A variant with no op, dtype or
    module axis needs no declared capability, so this is false for it.
    """
    if v.op is None and not v.dtypes and v.module is None:
        return False
    opref = _find(caps.supported_ops, v)
    if v.op is not None and opref is None:
        return False
    for dt in v.dtypes:
        allowed = opref.dtypes if opref is not None and opref.dtypes is not None else None
        if allowed is None:
            allowed = caps.supported_dtypes
        if allowed is None or _dtype_ref(allowed, dt) is None:
            return False
    return not (v.module is not None and v.module not in _module_names(caps.supported_modules))
