"""Deciding one variant from its evidence: a pure function, strongest evidence first.

Note [Selection rules]
The evidence of a variant, in the order it is trusted (DESIGN.md 7.1):

1. **observed on the device** (earlier results): a crash or timeout is ``skip``
   with its signal; a failure is ``xfail_strict`` with its signature, unless the
   CPU reference fails too;
2. **the CPU reference run**: a variant that fails on the CPU as well is broken
   upstream or in the environment (``upstream_broken:<signature>``): ``xfail``,
   never mandatory;
3. **scope**: a file the scope stage left out is ``skip`` (``out_of_scope:<area>``);
4. **upstream decorators**: a variant upstream skips on this device by a decorator
   the memory saw (``@onlyCUDA``, ``@skipMeta``...) is ``skip`` (``upstream_skip``);
5. **dtypes**: a dtype the backend does not declare is ``skip``
   (``dtype_unsupported:float64``), and so is a dtype an op the variant calls is
   not declared for (an emu profile's ``op_dtypes``, a supported-ops list item
   with ``dtypes:``), when the op map is certain of the variant's ops. Where the
   op map recorded each call's dtypes (Note [Call dtypes]) those are checked,
   against the op's own rule or else the backend's dtypes; otherwise the
   variant's dtype stands for the dtype the op sees;
6. **ops** (the op map): an op the backend does not declare is ``skip``
   (``op_unsupported:aten::_scaled_mm``, every missing op listed in the evidence);
7. **replayed calls** (``ootest ops replay``, Note [Replaying calls]): an op the
   backend does not declare but whose every recorded call of the variant replayed
   as on the CPU is taken as supported (torch's device-independent kernel of
   ``detach`` runs on any backend), and so is an undeclared dtype all of whose
   recorded calls in the variant did; a call the variant makes that killed the
   replay's process or hung is ``skip`` (``replay_crashed:<op>``,
   ``replay_timeout:<op>``; ``xfail`` when its op set is uncertain); so is one
   that raised on the device where the CPU returned, or raised another exception
   (``replay_failed:<op>``; ``xfail`` when its op set is uncertain): see
   Note [A known failure is re-checked by the replay]. One that returned other
   values than on the CPU is ``xfail`` (``replay_mismatch:<op>``) whatever its op
   set: the test's own tolerance may accept the difference (the replay compares
   with ``assert_close``'s defaults; a test may pass ``atol``/``rtol`` or compare
   only part of a result), so it runs, is not required to pass, and refinement
   promotes it after clean passes like ``no_evidence``;
8. all ops declared (a support source declares ops at all) and no replayed call
   misbehaving: ``mandatory_success`` (``ops_supported``);
   a variant that calls no device op and passed on the reference device:
   ``mandatory_success`` (``no_device_ops``); one that failed on the reference
   device with every op present: ``xfail`` (``reference_fail:<signature>``);
9. nothing else: ``xfail`` (``no_evidence``): it runs, and refinement promotes it
   after clean passes.

Unknown means run it: an op set the op map marks uncertain (the test branches on
the device, or two captures disagree) or no op evidence at all never gives a
skip, whatever else is known (an undeclared dtype, a missing op, a replayed call
that crashed or hung: such a variant runs, ``xfail``); it gives ``no_evidence``
(or the replay's reason as ``xfail``). Nothing declared is no evidence either:
without a support source (``Evidence.ops_declared`` false) no op is known to be
supported, so ``ops_supported`` is never given. A replayed call without a result
(a stopped replay) is unknown: it lifts no gate and skips nothing. A model judge
may only fill the ``no_evidence`` bucket.

Evidence beats declarations both ways: an op or a dtype the backend does not
declare whose every recorded call in the variant replayed as on the CPU counts as
supported (``replay_covered``, ``replay_dtypes``), and a declared one whose call
misbehaved in the replay never makes the variant mandatory. A call that raises on
the CPU and raises on the device an exception of the same class or a subclass
(``NotImplementedError`` is a ``RuntimeError``) behaves as on the CPU: an error
path, which a test that expects the exception passes (``replay_raised``). It
proves that error path, nothing more: an undeclared op whose error path was met
only by a subclass (a missing kernel's ``NotImplementedError``) is neither
missing nor supported (``replay_error_only``: ``no_evidence``, it runs); a
call presumed to crash, never run, is no fact (``replay_presumed``: the same);
and a call holding tensors on the CPU and the device, which the CPU cannot judge,
that raised a missing kernel's error on the device shows the op has no kernel
there whatever the test expects: a declaration of it proves nothing
(``replay_no_kernel``: the same).

Note [A known failure is re-checked by the replay]
A call of a certain op set that raised on the device where the CPU returned is a
failure the test meets too (the test makes that call, and nothing catches an
exception the CPU never raised). Running it as ``xfail`` on every CI run would
re-check it at the price of the test: on a whole OpInfo file (23,523 variants on
``emu:young``) the 3,986 such variants were 61% of what the config ran, and every
one failed. So it is ``skip``, and it is re-checked where that is cheap: the
replay of the op map's calls (64 s for that file), which ``ootest select refresh
--replay`` runs again on the device at each refresh (its ``replay`` step), and
``select run --since ... --replay NEW`` reads: a variant whose calls now replay
as on the CPU (the backend gained the kernel or the dtype) is decided again and
comes back (Note [Incremental selection]). A skip never runs, so refinement
cannot promote it from passes (only an audit's passes can, as for any static
skip); the replay is what brings it back. ``refresh --no-replay`` keeps the old
replay, and then such a skip is not re-checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ootest.opmap.schema import STALE

MODES = ("mandatory_success", "xfail_strict", "xfail", "skip")


@dataclass(frozen=True)
class Result:
    """One observed result of a variant, reduced to what decisions need."""

    outcome: str
    signature: str | None = None  # code, e.g. "RuntimeError:1a2b3c4d"
    text: str | None = None  # readable signature
    at: float | None = None  # when it was recorded (the same result is counted once)


@dataclass
class Evidence:
    """Everything known about one variant (see Note [Selection rules])."""

    variant_id: str
    dtypes: tuple[str, ...] = ()
    out_of_scope: str | None = None
    upstream_skip: str | None = None  # decorator and why
    ops: tuple[str, ...] | None = None  # None: not in the op map
    ops_uncertain: str | None = None
    missing_ops: tuple[str, ...] = ()
    missing_dtypes: tuple[str, ...] = ()
    dtype_rule: str | None = None  # the per-op dtype rule that left them out, if any
    cpu: Result | None = None
    reference: Result | None = None  # how it ended in the op capture (reference device)
    observed: list[Result] = field(default_factory=list)  # oldest first
    #: replayed calls of the variant that misbehaved: (status, op, what happened),
    #: worst first (Note [Replaying calls])
    replay: tuple[tuple[str, str, str], ...] = ()
    #: ops not declared whose every recorded call of the variant replayed as on
    #: the CPU: taken as supported (Note [Replaying calls])
    replay_covered: tuple[str, ...] = ()
    #: a support source declared the backend's ops: without one no op is known to
    #: be supported or missing (``select run`` with neither --device nor --supported)
    ops_declared: bool = False
    #: dtypes not declared whose every recorded call of the variant in them replayed
    #: as on the CPU: taken as supported (Note [Replaying calls])
    replay_dtypes: tuple[str, ...] = ()
    #: of the ops and dtypes the replay lifted, those with a call that raised on the
    #: device as on the CPU (an error path: the test expects the exception)
    replay_raised: tuple[str, ...] = ()
    #: recorded calls the replay did not run, presumed to crash or hang because
    #: calls of the same op and dtypes did (``aten::sort crashed``): unknown, so
    #: they neither skip the variant nor leave it mandatory (it runs)
    replay_presumed: tuple[str, ...] = ()
    #: ops not declared whose every recorded call of the variant behaved as on the
    #: CPU, one of them by raising only an exception of a subclass of the CPU's
    #: (a missing kernel's ``NotImplementedError`` for the ``RuntimeError`` the
    #: test expects): not missing (the test may pass), not supported either
    replay_error_only: tuple[str, ...] = ()
    #: ops it calls, declared or lifted, whose recorded call held tensors on the CPU
    #: and the device and raised a missing kernel's error on the device: not judged
    #: by the CPU's (a cross-device error the test may expect), but no kernel ran, so
    #: a declaration of the op is no evidence it works: never mandatory, it runs
    replay_no_kernel: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    variant_id: str
    mode: str
    reason: str  # reason code
    evidence: tuple[str, ...] = ()
    source: str = "rules"  # rules | model | refine | person


#: Outcomes that are failures on the device (an expected failure is a failure all
#: the same) and outcomes that are passes: a strict xfail that passed
#: (``xpassed_strict``) passed, whatever the run it was in counts it as
#: (``select audit`` counts it as the pass it is).
FAILURES = ("failed", "error", "crashed", "timeout", "xfailed")
PASSES = ("passed", "xpassed", "xpassed_strict")
_BAD, _GOOD = FAILURES, PASSES


def decide(ev: Evidence) -> Decision:
    """The decision for one variant (Note [Selection rules])."""
    vid = ev.variant_id
    last = ev.observed[-1] if ev.observed else None
    cpu_broken = ev.cpu is not None and ev.cpu.outcome in _BAD
    if last is not None and last.outcome in ("crashed", "timeout"):
        return Decision(
            vid, "skip", f"observed_{last.outcome}:{last.signature}", (f"device: {last.text}",)
        )
    if cpu_broken:
        assert ev.cpu is not None
        return Decision(
            vid, "xfail", f"upstream_broken:{ev.cpu.signature}", (f"cpu reference: {ev.cpu.text}",)
        )
    if last is not None and last.outcome in _BAD:
        return Decision(
            vid, "xfail_strict", f"observed_fail:{last.signature}", (f"device: {last.text}",)
        )
    ref = ev.reference
    if ref is not None and ref.outcome in _BAD and not ev.missing_ops and not ev.missing_dtypes:
        # it failed on the reference device although every op was there
        return Decision(
            vid, "xfail", f"reference_fail:{ref.signature}", (f"reference device: {ref.text}",)
        )
    if ev.out_of_scope:
        return Decision(vid, "skip", f"out_of_scope:{ev.out_of_scope}")
    if ev.upstream_skip:
        return Decision(vid, "skip", "upstream_skip", (ev.upstream_skip,))
    # only a certain op set may skip on what the backend declares: a test that
    # branches on the device (or was never captured) may call other ops and dtypes
    certain = ev.ops is not None and ev.ops_uncertain is None
    if certain and ev.missing_dtypes:
        return Decision(
            vid,
            "skip",
            f"dtype_unsupported:{ev.missing_dtypes[0]}",
            (
                f"dtypes not declared: {', '.join(ev.missing_dtypes)}"
                + (f" ({ev.dtype_rule})" if ev.dtype_rule else ""),
            ),
        )
    if certain and ev.ops_declared and ev.missing_ops:
        assert ev.ops is not None
        return Decision(
            vid,
            "skip",
            f"op_unsupported:{ev.missing_ops[0]}",
            (f"calls {len(ev.ops)} ops; not declared: {', '.join(ev.missing_ops)}",),
        )
    if ev.replay:
        return _replayed(ev, certain)
    if ev.replay_presumed or ev.replay_error_only or ev.replay_no_kernel:
        # a presumption is no fact, and an error path met by a missing kernel
        # proves the test's expectation only: not a skip, no positive evidence
        return Decision(vid, "xfail", "no_evidence", (_unknown(ev),))
    if certain and ev.ops_declared:
        assert ev.ops is not None
        passes = sum(1 for r in ev.observed if r.outcome in _GOOD)
        note = f"; passed {passes}x on the device" if passes else ""
        if ev.ops:
            return Decision(
                vid,
                "mandatory_success",
                "ops_supported",
                (f"all {len(ev.ops)} ops it calls are declared{_covered(ev)}{note}",),
            )
    if certain and not ev.ops and ref is not None and ref.outcome in _GOOD:
        # no op on the device: what the backend declares does not matter
        passes = sum(1 for r in ev.observed if r.outcome in _GOOD)
        note = f"; passed {passes}x on the device" if passes else ""
        return Decision(
            vid,
            "mandatory_success",
            "no_device_ops",
            ("calls no op on the device and passed on the reference device" + note,),
        )
    return Decision(vid, "xfail", "no_evidence", (_unknown(ev),))


def _unknown(ev: Evidence) -> str:
    """Why nothing decides the variant, and what is known but did not decide it."""
    if ev.ops is None:
        why = "not in the op map"
    elif ev.ops_uncertain and ev.ops_uncertain.startswith(STALE):
        why = "op evidence " + ev.ops_uncertain  # Note [Evidence of which code]
    elif ev.ops_uncertain:
        why = "op set may differ per device: " + ev.ops_uncertain
    elif not ev.ops:
        why = "calls no op on the device; no reference outcome"
    elif ev.ops_declared:
        why = f"calls {len(ev.ops)} ops, none missing"
    else:
        why = f"calls {len(ev.ops)} ops, but the backend declares none (nothing declared)"
    if ev.missing_dtypes:
        dts = ", ".join(ev.missing_dtypes)
        why += f"; dtypes not declared: {dts} (no skip without a certain op set)"
    if ev.missing_ops and ev.ops_declared:
        why += f"; not declared: {', '.join(ev.missing_ops)}"
    if ev.replay_error_only:
        why += (
            f"; error path only: {', '.join(ev.replay_error_only)} raised on the device another "
            "exception class than on the CPU (a missing kernel's?), which this test accepts; "
            "its support is not shown"
        )
    if ev.replay_no_kernel:
        why += (
            f"; no kernel ran: {', '.join(ev.replay_no_kernel)} raised a missing kernel's "
            "error on the device in a replayed call with tensors on the CPU and the device "
            "(a cross-device error this test may expect); its declaration is not shown"
        )
    if ev.replay_presumed:
        why += (
            f"; replayed calls not run, presumed from others of the same op and dtypes: "
            f"{', '.join(ev.replay_presumed[:3])}"
        )
    return why


#: reasons refinement may promote to mandatory after clean passes, as the xfail
#: they are for a variant whose op set is uncertain (a certain one's crash, hang
#: or failed call is a skip: Note [A known failure is re-checked by the replay])
PROMOTABLE = (
    "no_evidence",
    "replay_failed:",
    "replay_mismatch:",
    "replay_crashed:",
    "replay_timeout:",
)


def promotable(d: Decision) -> bool:
    """Whether clean passes promote ``d`` as the run it is (no override to name):
    a skip of these reasons never ran, so passes (an audit's) override it."""
    return d.mode != "skip" and d.reason.startswith(PROMOTABLE)


#: replayed faults that skip a variant certain to make the call: it crashed, hung,
#: or raised where the CPU did not (Note [A known failure is re-checked by the
#: replay]); other values than the CPU's (``mismatch``) never do
SKIPPING = ("crashed", "timeout", "failed")


def _replayed(ev: Evidence, certain: bool) -> Decision:
    status, op, _ = ev.replay[0]
    skipping = status in SKIPPING
    # a fault skips only a variant certain to make that call
    mode = "skip" if skipping and certain else "xfail"
    notes = [f"replayed call of {o} {s}: {_cut(what)}" for s, o, what in ev.replay[:3]]
    if len(ev.replay) > 3:
        notes.append(f"and {len(ev.replay) - 3} more replayed calls misbehaved")
    if skipping and not certain:
        notes.append(f"runs all the same: {_unknown(ev)}")
    elif status == "failed":
        notes.append(_RECHECKED)
    return Decision(ev.variant_id, mode, f"replay_{status}:{op}", tuple(notes))


_RECHECKED = (
    "not run: the replay re-checks it (select refresh --replay); it comes back when its "
    "calls replay as on the CPU"
)


def _cut(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _covered(ev: Evidence) -> str:
    out = ""
    if ev.replay_covered:
        out = f" or replayed as on the CPU ({', '.join(ev.replay_covered)})"
    if ev.replay_dtypes:
        out += (
            f"; dtypes not declared but every call in them replayed as on the CPU: "
            f"{', '.join(ev.replay_dtypes)}"
        )
    if ev.replay_raised:
        out += f"; error path: raises on the device as on the CPU ({', '.join(ev.replay_raised)})"
    return out
