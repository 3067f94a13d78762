"""Collecting the evidence of every variant in scope (Note [Selection rules]).

Sources, each optional except a candidate set: the repository memory (the
variants that exist, their fingerprints, the decorators of their tests), the
op map (the ops each variant calls, how it ended on the reference device,
whether its op set may differ per device), the backend's declared ops and
dtypes, a CPU reference run and earlier device runs (JSONL results). Nothing
here imports torch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Container, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ootest.errors import UserError
from ootest.memory._ids import has_device_axis
from ootest.record.messages import MESSAGE_CHECKS
from ootest.record.results import RunData, read_records
from ootest.record.signature import signature
from ootest.select.gates import gated
from ootest.select.rules import FAILURES, Evidence, Result

if TYPE_CHECKING:
    from ootest.memory import IndexDiff


@dataclass
class Candidate:
    variant_id: str
    dtypes: tuple[str, ...] = ()
    fingerprint: str = ""
    decorators: tuple[str, ...] = ()
    #: its test matches exception messages (``MESSAGE_CHECKS``)
    checks_messages: bool = False


@dataclass
class Support:
    """What the backend declares: an op rule set and dtypes (None: not declared)."""

    covers: object = None  # callable(op) -> bool, or None: ops not declared
    dtypes: frozenset[str] | None = None
    source: str = ""
    #: Ops declared for some dtypes only: (rule name, callable(op) -> bool, dtypes).
    op_dtypes: tuple[tuple[str, object, frozenset[str]], ...] = ()
    #: the backend's device name (``spyre``), for the gates that name devices
    #: (``@onlyOn("spyre")`` runs on it); "" when no backend is named
    name: str = ""


@dataclass
class Sources:
    memory: Path | None = None
    ops: Path | None = None
    reference: list[Path] = field(default_factory=list)  # CPU reference results
    results: list[Path] = field(default_factory=list)  # device results, oldest first
    replay: Path | None = None  # ``ootest ops replay`` of the op map's calls
    #: the device the decisions are for (``--device``; None: not known), against
    #: which the results' origins are checked (Note [Evidence origins])
    target: str | None = None
    #: what reading the sources left out, one line each (filled by ``gather``)
    notes: list[str] = field(default_factory=list)
    #: variants whose code changed since the op map may have been captured (an
    #: upgrade's added and modified): a record of unknown origin is stale for them
    #: (Note [Evidence of which code])
    changed: frozenset[str] = frozenset()


def _memory(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise UserError(f"--memory {path}: no such index; build it with 'ootest index build'")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


@contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection]:
    """The memory at ``path``, read-only; a broken file is one UserError."""
    con = _memory(path)
    try:
        yield con
    except sqlite3.Error as e:
        raise UserError(
            f"--memory {path}: expected an ootest memory index; reading it failed: {e}"
        ) from None
    finally:
        con.close()


# Note [Selectable variants]
# A config decides every variant a run on the device collects that ootest can
# name: the device's own (``device_variant``: a device-generic class instantiated
# for privateuse1) and the plain tests (a ``TestCase`` class no device generates,
# a pytest function) that run beside them, on the host, in every run of the
# suite. Only instantiations for other devices (``TestFoo::test_x[device=cpu]``,
# in a memory built without --device) are not the backend's to decide. A test
# whose class stops, or starts, being device-generic keeps its ID: it is
# modified (``device``), never removed and added, so its decision follows it.
#: SQL: the variant is selectable (the ``[device=`` test of ``has_device_axis``)
SELECTABLE = "(device_variant OR (instr(id, '[device=') = 0 AND instr(id, ',device=') = 0))"


def selectable(vid: str, device_variant: bool) -> bool:
    """Whether a config decides this variant (Note [Selectable variants])."""
    return device_variant or not has_device_axis(vid)


@dataclass(frozen=True)
class DeviceDelta:
    """How the selectable variants of two memories differ (Note [Selectable
    variants]; by ID and, for moves, by content)."""

    total: int  # selectable variants in the new memory
    entered: list[str]  # selectable now, not before (added, or an instantiation for it now)
    left: list[str]  # selectable before, not now (removed, or no longer for it)
    #: (old ID, new ID, reasons) of the moves both of whose ends are selectable
    moved: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)


def device_delta(new: Path, diff: IndexDiff) -> DeviceDelta:
    """Which selectable variants entered, left and moved between two memories, from
    their diff (the device flags of the variants it found added, removed, moved and
    flipped, read in its passes over the tables); the new memory counts its
    selectable variants."""
    with _reading(new) as con:
        total = int(con.execute(f"SELECT count(*) FROM variants WHERE {SELECTABLE}").fetchone()[0])
    entered = [v for v in diff.added if selectable(v, diff.device[v])]
    left = [v for v in diff.removed if selectable(v, diff.device[v])]
    for vid, now in diff.flipped:  # an ID with a device axis: selectable only as the device's
        if selectable(vid, now) != selectable(vid, not now):
            (entered if now else left).append(vid)
    moved = []
    for m in diff.moved:
        was, now = selectable(m.old, diff.device[m.old]), selectable(m.new, diff.device[m.new])
        if was and now:
            moved.append((m.old, m.new, m.reasons))
        elif now:
            entered.append(m.new)
        elif was:
            left.append(m.old)
    return DeviceDelta(total, sorted(entered), sorted(left), moved)


def device_ids(path: Path, files: Collection[str]) -> dict[str, list[str]]:
    """The IDs of the selectable variants of each file key in ``files``."""
    out: dict[str, list[str]] = {}
    with _reading(path) as con:
        for f in sorted(files):
            # IDs start with the file key and '::'; ':' + 1 is ';'
            out[f] = [
                r[0]
                for r in con.execute(
                    f"SELECT id FROM variants WHERE {SELECTABLE} AND id >= ? AND id < ? "
                    "ORDER BY id",
                    (f + "::", f + ":;"),
                )
            ]
        return out


def from_memory(path: Path, only: Collection[str] | None = None) -> list[Candidate]:
    """The selectable variants the memory knows (Note [Selectable variants]), with
    their tests' decorators (``only``: just these variant IDs, as an incremental
    selection asks)."""
    rows = "SELECT id, dtypes, device_variant, fingerprint FROM variants"
    with _reading(path) as con:
        if only is None:
            found = con.execute(f"{rows} ORDER BY id").fetchall()
            tests = con.execute("SELECT key, decorators FROM tests").fetchall()
        else:
            found, tests = [], []
            ids = sorted(only)
            for k in range(0, len(ids), 900):
                part = ids[k : k + 900]
                marks = ",".join("?" * len(part))
                found += con.execute(f"{rows} WHERE id IN ({marks})", part).fetchall()
            keys = sorted({str(r[0]).partition("[")[0] for r in found})
            for k in range(0, len(keys), 900):
                part = keys[k : k + 900]
                marks = ",".join("?" * len(part))
                tests += con.execute(
                    f"SELECT key, decorators FROM tests WHERE key IN ({marks})", part
                ).fetchall()
            found.sort()
        decos: dict[str, tuple[str, ...]] = {}
        for key, text in tests:
            decos[str(key)] = tuple(d for d in str(text).splitlines() if d)
        marks = ",".join("?" * len(MESSAGE_CHECKS))
        strict = {
            str(k)
            for (k,) in con.execute(
                "SELECT DISTINCT tests.key FROM refs JOIN tests ON tests.id = refs.test "
                f"WHERE refs.name IN ({marks})",
                [f"self.{n}" for n in MESSAGE_CHECKS],
            )
        }
        out = []
        for vid, dtypes, device_variant, fp in found:
            vid = str(vid)
            if not selectable(vid, bool(device_variant)):
                continue
            out.append(
                Candidate(
                    vid,
                    tuple(d for d in str(dtypes or "").split(",") if d),
                    str(fp or ""),
                    decos.get(vid.partition("[")[0], ()),
                    vid.partition("[")[0] in strict,
                )
            )
        return out


def _results(
    paths: Iterable[Path], target: str | None, notes: list[str], *, cpu: bool = False
) -> dict[str, list[Result]]:
    """Per variant, its results in ``paths``: device results of the ``target``
    device, or (``cpu``) a reference's CPU results by the device variant they stand
    for; a file or a result of another origin is left out, and said (Note
    [Evidence origins])."""
    from ootest.record.origin import cpu_reference, device_axis, mismatch, run_origin

    out: dict[str, list[Result]] = {}
    for p in paths:
        recs = read_records(p, missing_ok=False)
        if cpu:
            found, note = cpu_reference(f"--reference {p}", recs)
            if note is not None:
                notes.append(f"ootest: {note}")
        else:
            results = RunData.from_records(recs).results
            why = mismatch(run_origin(recs), target)
            if why is not None:
                notes.append(f"ootest: --results {p}: {why}: not evidence of the device, not used")
                continue
            found = {
                k: r
                for k, r in results.items()
                if device_axis(str(r.get("variant_id") or "")) is None
            }
            if len(found) < len(results):
                notes.append(
                    f"ootest: --results {p}: {len(results) - len(found)} results of "
                    "another device's variants (an ID with device=...) left out"
                )
        for key, rec in found.items():
            if rec.get("phase") == "collect" or "outcome" not in rec:
                continue
            vid = key if cpu else str(rec.get("variant_id") or "")
            outcome = str(rec["outcome"])
            res = Result(outcome, at=rec.get("time"))
            if outcome in FAILURES:
                sig = signature(rec)
                res = Result(outcome, sig.code, str(sig), rec.get("time"))
            out.setdefault(vid, []).append(res)
    return out


def gather(
    candidates: list[Candidate],
    sources: Sources,
    support: Support,
    scope: Container[str] | None,
    aliases: Mapping[str, str] | None = None,
) -> list[Evidence]:
    """The evidence of every candidate (``scope``: which file keys are in scope,
    ``select.scope.Scope``; None: all). ``aliases``: a moved variant's old ID (Note
    [Moves]), under which the op map and the replay may know its calls when they
    know none under its new one."""
    cpu = _results(sources.reference, sources.target, sources.notes, cpu=True)
    seen = _results(sources.results, sources.target, sources.notes)
    ops_of: dict[str, OpEvidence] = {}
    replay: dict[str, Replayed] = {}
    aliases = aliases or {}
    if sources.ops is not None:
        only = {c.variant_id for c in candidates}
        only |= {aliases[v] for v in only if v in aliases}
        code = {c.variant_id: c.fingerprint for c in candidates if c.fingerprint}
        ops_of = _op_map(sources.ops, only, code, sources.changed)
        if sources.replay is not None:
            strict = {c.variant_id for c in candidates if c.checks_messages}
            strict |= {aliases[v] for v in strict if v in aliases}
            replay = replayed(sources.ops, sources.replay, only, strict)
        for new, old in aliases.items():  # the same test: its calls under its old name
            if new not in ops_of and old in ops_of:
                ops_of[new] = ops_of[old]
                if old in replay:
                    replay[new] = replay[old]
    elif sources.replay is not None:
        raise UserError(
            f"--replay {sources.replay}: the replayed calls are the op map's; pass --ops DB too"
        )
    out: list[Evidence] = []
    covers = support.covers
    nothing = Replayed()
    for c in candidates:
        # without a support source no op is known to be supported or missing
        ev = Evidence(c.variant_id, dtypes=c.dtypes, ops_declared=callable(covers))
        rp = replay.get(c.variant_id, nothing)
        raised: set[str] = set()
        file = c.variant_id.partition("::")[0]
        if scope is not None and file not in scope:
            ev.out_of_scope = "file not in scope"
        ev.upstream_skip = gated(c.decorators, support.name)  # Note [Device gates]
        if support.dtypes is not None:
            ev.missing_dtypes = tuple(d for d in c.dtypes if d not in support.dtypes)
        known = ops_of.get(c.variant_id)
        if known is not None:
            ops, uncertain, ref, calls = known
            ev.ops, ev.ops_uncertain, ev.reference = ops, uncertain, ref
            if callable(covers):
                missing = [o for o in ops if not covers(o)]
                # an op not declared whose every call here replayed as on the CPU
                # works on the device (a device-independent kernel of torch's, or a
                # declaration that left it out): the replay is the evidence
                ev.missing_ops = tuple(o for o in missing if o not in rp.ops)
                lifted = [o for o in missing if o in rp.ops]
                # an error path met by another class of exception (a missing
                # kernel's) passes this test, and says nothing of the op's support:
                # neither missing nor supported (Note [Replaying calls])
                ev.replay_error_only = tuple(o for o in lifted if o in rp.by_class)
                ev.replay_covered = tuple(o for o in lifted if o not in rp.by_class)
                raised.update(o for o in ev.replay_covered if rp.ops[o])
            if uncertain is None and calls is not None:
                # the dtypes each call saw (Note [Call dtypes]) decide, not the dtype
                # axis: a test may ignore its dtype argument (float64 in the name,
                # float32 tensors on the device)
                ev.missing_dtypes, ev.dtype_rule, ev.replay_dtypes, by = _call_dtypes(
                    calls, support, rp.pairs
                )
                raised.update(by)
            else:
                if not ev.missing_dtypes and uncertain is None and support.op_dtypes:
                    ev.missing_dtypes, ev.dtype_rule = _op_dtypes(ops, c.dtypes, support.op_dtypes)
                if uncertain is None and ev.missing_dtypes and ops and set(ops) <= set(rp.ops):
                    # no call dtypes: the dtype axis stands for them, and every
                    # recorded call of the variant replayed as on the CPU
                    ev.replay_dtypes, ev.missing_dtypes, ev.dtype_rule = ev.missing_dtypes, (), None
                    raised.update(o for o in ops if rp.ops[o])
        ev.replay = rp.faults
        ev.replay_presumed = tuple(f"{op} {status}" for status, op in rp.presumed)
        if known is not None and callable(covers):
            # a declared op a cross-device call showed without a kernel
            ev.replay_no_kernel = tuple(
                o for o in known[0] if o in rp.no_kernel and o not in ev.missing_ops
            )
        ev.replay_raised = tuple(sorted(raised))
        cpu_runs = cpu.get(c.variant_id)
        ev.cpu = cpu_runs[-1] if cpu_runs else None
        ev.observed = seen.get(c.variant_id, [])
        out.append(ev)
    return out


def _op_dtypes(
    ops: tuple[str, ...],
    dtypes: tuple[str, ...],
    rules: tuple[tuple[str, object, frozenset[str]], ...],
) -> tuple[tuple[str, ...], str | None]:
    """The variant's dtypes an op it calls is not declared for, and that rule
    (``mul: float32, float16``); the variant's dtype stands for the dtype the op
    sees (Note [Selection rules])."""
    for name, matches, allowed in rules:
        if not callable(matches) or not any(matches(o) for o in ops):
            continue
        missing = tuple(d for d in dtypes if d not in allowed)
        if missing:
            return missing, f"{name} is declared for {', '.join(sorted(allowed))} only"
    return (), None


def _call_dtypes(
    calls: tuple[tuple[str, str], ...],
    support: Support,
    replayed: Mapping[tuple[str, str], bool] | None = None,
) -> tuple[tuple[str, ...], str | None, tuple[str, ...], tuple[str, ...]]:
    """The dtypes the variant's calls on the device saw that the backend does not
    declare for those ops (an op's own rule first, else the device's dtypes), and
    which call saw which (``aten::mm saw int64: mm is declared for ... only``);
    then the undeclared dtypes all of whose calls ``replayed`` as on the CPU (per
    (op, dtype): whether one of them raised on both sides), and the ops of those
    calls that raised (Note [Replaying calls])."""
    missing: list[str] = []
    notes: list[str] = []
    lifted: dict[str, set[str]] = {}  # dtype -> ops whose calls in it raised alike
    for op, dtype in calls:
        rule: str | None = None
        allowed = support.dtypes
        for name, matches, dtypes in support.op_dtypes:
            if callable(matches) and matches(op):
                rule, allowed = f"{name} is declared for {', '.join(sorted(dtypes))} only", dtypes
                break
        if allowed is None or dtype in allowed:
            continue
        if replayed is not None and (op, dtype) in replayed:
            lifted.setdefault(dtype, set()).update([op] if replayed[(op, dtype)] else [])
            continue
        if dtype not in missing:
            missing.append(dtype)
        notes.append(f"{op} saw {dtype}: {rule or 'the device does not declare it'}")
    # a dtype is lifted only when none of its undeclared calls is left
    ok = tuple(sorted(d for d in lifted if d not in missing))
    raised = tuple(sorted({o for d in ok for o in lifted[d]}))
    if not notes:
        return (), None, ok, raised
    more = f"; and {len(notes) - 3} more" if len(notes) > 3 else ""
    return tuple(missing), "; ".join(notes[:3]) + more, ok, raised


#: Per variant in the op map: (its ops, why its op set is uncertain or None, how it
#: ended on the reference device, the (op, dtype) pairs of its calls or None when
#: the index holds no dtype signatures for it).
OpEvidence = tuple[tuple[str, ...], str | None, Result | None, tuple[tuple[str, str], ...] | None]


def _op_map(
    path: Path,
    only: Collection[str] | None = None,
    code: Mapping[str, str] | None = None,
    changed: Container[str] = (),
) -> dict[str, OpEvidence]:
    """variant -> its op evidence (``OpEvidence``) from an op map index; ``code``:
    each variant's fingerprint now, ``changed``: the variants whose code changed
    (Note [Evidence of which code])."""
    from ootest.opmap.store import OpStore

    out: dict[str, OpEvidence] = {}
    with OpStore.open(path) as store:
        calls = store.call_dtypes(only)
        for vid, ops, uncertain, outcome, error, stopped in store.evidence(only, code, changed):
            ref = None
            if outcome:
                kind = error or outcome
                where = f" in {stopped}" if stopped else ""
                ref = Result(outcome, kind, f"{outcome} on the reference device: {kind}{where}")
            out[vid] = (tuple(sorted(ops)), uncertain, ref, calls.get(vid))
    return out


#: One distinct recorded call in the replay: (op, the dtypes of its device tensors,
#: whether it replayed as on the CPU, whether it raised alike (an error path), its
#: recorded signature, its fault (status, op, what happened) or None, and the fault
#: it is for a test that matches exception messages when it raised alike with
#: another message, else None).
_Fault = tuple[str, str, str]
_Call = tuple[str, frozenset[str], bool, bool, str, "_Fault | None", "_Fault | None"]


@dataclass(frozen=True)
class Replayed:
    """What the replay says of one variant's recorded calls (Note [Replaying calls])."""

    #: its calls that misbehaved: (status, op, what happened), worst first
    faults: tuple[tuple[str, str, str], ...] = ()
    #: the ops all of whose recorded calls replayed as on the CPU -> whether one of
    #: them raised on the device as on the CPU (an error path)
    ops: Mapping[str, bool] = field(default_factory=dict)
    #: the same per (op, dtype): the calls of the op with that dtype on the device
    pairs: Mapping[tuple[str, str], bool] = field(default_factory=dict)
    #: its calls written down (replayed or not), each as ``_Call``
    calls: tuple[_Call, ...] = ()
    #: its calls the replay did not run but presumed to crash or hang like calls of
    #: the same op and dtypes before them: (status, op); unknown, never a fault
    presumed: tuple[tuple[str, str], ...] = ()
    #: ops with a call that raised on the device only an exception of a subclass
    #: of the CPU's (a missing kernel's ``NotImplementedError`` for a
    #: ``RuntimeError``): the test expecting it passes, the op is not shown there
    by_class: frozenset[str] = frozenset()
    #: ops with a call that holds tensors on the CPU and the device (not judged by
    #: the CPU's: ``unusable``) where the device raised a missing kernel's error:
    #: whatever the test expects, no kernel of the op ran there
    no_kernel: frozenset[str] = frozenset()

    @property
    def seen(self) -> frozenset[tuple[str, str]]:
        """Every (op, dtype) of its calls written down."""
        return frozenset((c[0], d) for c in self.calls for d in c[1])


def replayed(
    ops: Path,
    replay: Path,
    only: Collection[str] | None = None,
    strict: Container[str] = (),
) -> dict[str, Replayed]:
    """Per variant with call examples, what the replay says of its calls.

    A call is taken as working when its result is ``ok`` (an error path included,
    unless the device's message differs from the CPU's and the variant is in
    ``strict``, the variants whose tests match messages: then it failed);
    a call the replay has no result for (a stopped replay, ``complete: false``) is
    unknown: it lifts nothing and skips nothing. An op (or an op in a dtype) works
    when it has replayed calls, all working, and each dtype signature the op map
    recorded for it (Note [Call dtypes]) has a replayed call: a call that could not
    be written down was not replayed, so it proves nothing."""
    from ootest.opmap.replay import FAULTS, read_replay, recorded_signature
    from ootest.opmap.store import OpStore

    rep = read_replay(replay)
    with OpStore.open(ops) as store:
        keys = store.example_keys(only)
        signed = store.call_signatures(only)
        # each distinct call once: (op, its dtypes, status, raised alike, signature, fault)
        calls: dict[str, _Call] = {}
        presumed: dict[str, tuple[str, str]] = {}  # key -> (status, op)
        # calls that raised alike only through the class hierarchy (a missing
        # kernel's NotImplementedError for the CPU's RuntimeError): key -> op
        by_class: dict[str, str] = {}
        no_kernel: dict[str, str] = {}  # key -> op (Replayed.no_kernel)
        # only the calls of ``only`` (an upgrade's few hundred of 250,000 variants)
        need = None if only is None else {k for ks in keys.values() for k in ks}
        for key, op, call in store.examples():
            if need is not None and key not in need:
                continue
            r = rep.results.get(key)
            if r is not None and r.get("status") == "unusable" and r.get("no_kernel"):
                no_kernel[key] = op
            if r is not None and r.get("presumed"):
                # never run (Note [Replaying calls]): a guess from other calls, no
                # fact about this one; it lifts nothing and skips nothing
                presumed[key] = (str(r["status"]), op)
                r = None
            status = "unknown" if r is None else str(r["status"])
            fault = None
            if r is not None and status in FAULTS:
                what = (f"{r['error']}: " if r.get("error") else "") + str(r.get("detail", ""))
                fault = (status, op, what)
            sig = recorded_signature(call)
            dtypes = frozenset(d for d in sig.split(",") if d)
            raised = bool(r is not None and r.get("error_path"))
            if raised and r is not None:
                cpu_class = str(r.get("cpu_error") or "").partition(":")[0]
                if str(r.get("error") or "") != cpu_class:
                    by_class[key] = op
            other = None
            if raised and r is not None and r.get("same_message") is False:
                dev, cpu = r.get("device_error"), r.get("cpu_error")
                why = f"the test matches messages and the device's differs: {dev} (the CPU: {cpu})"
                other = ("failed", op, why)
            calls[key] = (op, dtypes, status == "ok", raised, sig, fault, other)
    out: dict[str, Replayed] = {}
    for vid, ks in keys.items():
        mine = tuple(calls[k] for k in ks if k in calls)
        if vid in strict:
            mine = tuple(
                c if c[6] is None else (c[0], c[1], False, False, c[4], c[6], None) for c in mine
            )
        by_op: dict[str, list[_Call]] = {}
        for c in mine:
            f = by_op.get(c[0])
            if f is None:
                by_op[c[0]] = [c]
            else:
                f.append(c)
        works: dict[str, bool] = {}
        pairs: dict[tuple[str, str], bool] = {}
        recorded = signed.get(vid, {})
        for op, found in by_op.items():
            want = recorded.get(op, frozenset())
            if len(found) == 1 and found[0][2] and want <= {found[0][4]}:
                c = found[0]  # the common case: one call, as on the CPU, every signature
                works[op] = c[3]
                for d in c[1]:
                    pairs[(op, d)] = c[3]
                continue
            if all(c[2] for c in found) and want <= {c[4] for c in found}:
                works[op] = any(c[3] for c in found)
            for d in {d for c in found for d in c[1]}:
                made = [c for c in found if d in c[1]]
                need = {s for s in want if d in s.split(",")}
                if all(c[2] for c in made) and need <= {c[4] for c in made}:
                    pairs[(op, d)] = any(c[3] for c in made)
        bad = {c[5] for c in mine if c[5] is not None}
        faults = tuple(sorted(bad, key=lambda f: (FAULTS.index(f[0]), f[1], f[2]))) if bad else ()
        guessed = tuple(sorted({presumed[k] for k in ks if k in presumed}))
        sub = frozenset(by_class[k] for k in ks if k in by_class)
        lacking = frozenset(no_kernel[k] for k in ks if k in no_kernel)
        out[vid] = Replayed(faults, works, pairs, mine, guessed, sub, lacking)
    return out


def replay_faults(
    ops: Path, replay: Path, only: Collection[str] | None = None
) -> tuple[dict[str, tuple[tuple[str, str, str], ...]], dict[str, frozenset[str]]]:
    """Per variant, its recorded calls that misbehaved in the replay: (status, op,
    what happened), worst first; and the ops all of whose recorded calls replayed
    ``ok`` (``replayed``, Note [Replaying calls])."""
    got = replayed(ops, replay, only)
    faults = {v: r.faults for v, r in got.items() if r.faults}
    worked = {v: frozenset(r.ops) for v, r in got.items() if r.ops}
    return faults, worked
