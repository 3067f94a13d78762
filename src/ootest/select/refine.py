"""Stage 4: re-deciding from real runs, and keeping what people wrote.

Note [Refinement]
``ootest select refine`` reads the evidence sidecar ``select run`` wrote, adds
the results of real runs to each variant's history and decides again with the
same rules (Note [Selection rules]), plus:

- observed clean passes on the device are the strongest evidence: ``k`` clean
  passes in a row (default k = 2: an audit's, a run's) make any skip or xfail
  of the rules ``mandatory_success`` (``observed_pass:<k>``), a static skip
  (``op_unsupported``, ``upstream_skip``, ``replay_crashed``, ``replay_failed``...)
  included, its evidence naming the decision it overrides; fewer make a static skip ``xfail``
  (``passed_on_device:<n>/<k>``) so that it runs until it has them. Never
  overridden: ``out_of_scope`` (the team's choice) and ``upstream_broken`` (the
  CPU fails it too);
- a model judge's decision (``judge:<bucket>``, Note [Model judge]) is kept while
  the rules still find no evidence, the device has no result for it and a fact
  it cites still supports it (Note [Judge citations]: checked again, since a
  skipped variant never gets a result);
- a failure that is a numerical mismatch (``Tensor-likes are not close``) whose
  greatest relative difference is within the dtype's bound (``PRECISION_BOUNDS``:
  float32 1e-4, float16 1e-2, bfloat16 5e-2...; ``--max-rtol`` one bound for
  all) is a *proposal*, never a promotion: ``xfail``
  (``precision_proposal:<dtype>``) with the observed error and a precision
  edit of 2x the observed relative difference (torch's atol kept: ``DEFAULT_ATOL``),
  so the next run tries it; passes at
  that tolerance confirm it (the evidence says so) and it stays a proposal
  until a person pins it; a failure at it is decided again from that failure.
  Beyond the bound it stays the failure it is (``observed_fail``);
- a failure is ``xfail_strict`` with its signature, a crash or timeout ``skip``
  with its signal (the rules).

Entries without the ``ootest-select`` tag (written by a person, or pinned by
removing the tag) are kept as they are, comments included, and their names are
never decided again.
"""

from __future__ import annotations

import io
import json
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.record.decisions import sidecar_path as sidecar_path
from ootest.record.results import RunData
from ootest.record.signature import signature
from ootest.select.rules import FAILURES, PASSES, Decision, Evidence, Result, decide, promotable
from ootest.select.writer import TAG, Precision

_CLOSE = re.compile(r"Tensor-likes are not close")
_ABS = re.compile(r"Greatest absolute difference: ([0-9.eE+-]+|nan|inf)")
_REL = re.compile(r"Greatest relative difference: ([0-9.eE+-]+|nan|inf)")


#: evidence written only where a replay said something
_REPLAY_KEYS = (
    "replay",
    "replay_covered",
    "replay_dtypes",
    "replay_raised",
    "replay_presumed",
    "replay_error_only",
    "replay_no_kernel",
)


def evidence_row(ev: Evidence, d: Decision, fingerprint: str) -> dict[str, Any]:
    evidence = plain(ev)
    for key in _REPLAY_KEYS:
        if not evidence[key]:
            del evidence[key]  # written only where a replay said something
    return {"decision": plain(d), "evidence": evidence, "fingerprint": fingerprint}


_FIELDS: dict[type, tuple[str, ...]] = {}


def plain(obj: Any) -> Any:
    """``dataclasses.asdict`` of an evidence row's values (dataclasses, tuples, lists,
    dicts, and immutable leaves: str, numbers, bool, None), without its deep copy of
    every leaf (for the 23,500 rows of a whole OpInfo file, seconds of each write)."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(plain(x) for x in obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELDS.get(type(obj))
        if names is None:
            names = _FIELDS[type(obj)] = tuple(f.name for f in fields(obj))
        return {n: plain(getattr(obj, n)) for n in names}
    return obj


def check_sidecar(path: Path) -> None:
    """``path`` is an evidence sidecar one can read: a regular file. A pipe or a
    device would block the reader forever; either is named, not the config (issue
    35 item 9)."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise UserError(
            f"{path}: expected the evidence file 'ootest select run' wrote next to the "
            f"config; cannot read it: {e.strerror or e}"
        ) from None
    if not stat.S_ISREG(mode):
        found = "a folder" if stat.S_ISDIR(mode) else "a pipe, device or socket"
        raise UserError(
            f"{path}: expected the evidence file 'ootest select run' wrote next to the "
            f"config (a regular file); found {found}"
        )


def read_sidecar(path: Path, declared: bool = True) -> list[tuple[Evidence, Decision, str]]:
    """The sidecar's lines; ``declared``: what a line written before
    ``ops_declared`` was recorded is read as (:func:`declared_in`)."""
    return list(iter_sidecar(path, declared))


def iter_sidecar(path: Path, declared: bool = True) -> Iterator[tuple[Evidence, Decision, str]]:
    """:func:`read_sidecar` a line at a time (the sidecar of 250,000 variants is
    200 MB: never held whole as text and as lines besides what the caller keeps)."""
    check_sidecar(path)
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                try:
                    yield parse_row(json.loads(line), declared)
                except (ValueError, KeyError, TypeError) as e:
                    raise UserError(
                        f"{path}:{n}: expected an evidence line written by 'ootest select run'; {e}"
                    ) from None
    except (OSError, UnicodeDecodeError) as e:
        why = getattr(e, "strerror", None) or e
        raise UserError(
            f"{path}: expected the evidence file 'ootest select run' wrote next to the "
            f"config; cannot read it: {why}"
        ) from None


def declared_in(config_text: str) -> bool:
    """Whether the config's header names a support source that declared ops (its
    ``backend:`` line, and not ``nothing declared``): how a sidecar line written
    before ``ops_declared`` was recorded is read. No such line: not known, so not
    declared (issue 36: an old line counted as declared whatever was declared)."""
    head = config_text.split("test_suite_config:", 1)[0]
    for line in head.splitlines():
        if line.startswith("# backend: "):
            return not line.startswith("# backend: nothing declared")
    return False


def parse_row(row: dict[str, Any], declared: bool = True) -> tuple[Evidence, Decision, str]:
    """One evidence line, decoded (ValueError, KeyError, TypeError when it is not
    one ``select run`` writes); ``declared``: ``ops_declared`` of a line written
    before it was recorded."""
    raw = row["evidence"]
    ev = Evidence(
        **{
            **raw,
            "dtypes": tuple(raw["dtypes"]),
            "ops": tuple(raw["ops"]) if raw["ops"] is not None else None,
            "missing_ops": tuple(raw["missing_ops"]),
            "missing_dtypes": tuple(raw["missing_dtypes"]),
            "cpu": Result(**raw["cpu"]) if raw["cpu"] else None,
            "reference": Result(**raw["reference"]) if raw["reference"] else None,
            "observed": [Result(**r) for r in raw["observed"]],
            "replay": tuple(tuple(f) for f in raw.get("replay", ())),
            "replay_covered": tuple(raw.get("replay_covered", ())),
            "replay_dtypes": tuple(raw.get("replay_dtypes", ())),
            "replay_raised": tuple(raw.get("replay_raised", ())),
            "replay_presumed": tuple(raw.get("replay_presumed", ())),
            "replay_error_only": tuple(raw.get("replay_error_only", ())),
            "replay_no_kernel": tuple(raw.get("replay_no_kernel", ())),
            # a line written before it was recorded: as the config's header says
            "ops_declared": bool(raw.get("ops_declared", declared)),
        }
    )
    d = row["decision"]
    dec = Decision(d["variant_id"], d["mode"], d["reason"], tuple(d["evidence"]), d["source"])
    return ev, dec, str(row.get("fingerprint") or "")


@dataclass(frozen=True)
class Refined:
    decision: Decision
    precision: Precision | None = None


def observe(
    evidence: Iterable[Evidence],
    results: list[Path],
    target: str | None = None,
    notes: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Append the results of ``results`` to each variant's history (in place);
    returns the last raw result record per variant (for precision proposals). A
    file that ran without a device or on another than ``target`` (the config's
    ``device:``) is not device evidence: left out, with a line in ``notes`` (Note
    [Evidence origins])."""
    from ootest.record.origin import mismatch, run_origin
    from ootest.record.results import read_records

    by_id = {ev.variant_id: ev for ev in evidence}
    last: dict[str, dict[str, Any]] = {}
    for p in results:
        recs = read_records(p, missing_ok=False)
        why = mismatch(run_origin(recs), target)
        if why is not None:
            if notes is not None:
                notes.append(f"ootest: refine: {p}: {why}: not evidence of the device, not used")
            continue
        for rec in RunData.from_records(recs).results.values():
            ev = by_id.get(str(rec.get("variant_id")))
            if ev is None or rec.get("phase") == "collect":
                continue
            outcome = str(rec["outcome"])
            at = rec.get("time")
            if at is not None and any(r.at == at for r in ev.observed):
                continue  # this result was observed by an earlier refinement
            if outcome in FAILURES:
                sig = signature(rec)  # an expected failure is a failure all the same
                ev.observed.append(Result(outcome, sig.code, str(sig), at))
            elif outcome in PASSES:
                ev.observed.append(Result(outcome, at=at))
            last[ev.variant_id] = rec
    return last


def refine_one(
    ev: Evidence,
    last: dict[str, Any] | None,
    k: int,
    max_rtol: float | None = None,
    prior: Decision | None = None,
) -> Refined:
    """One variant decided again from its history (Note [Refinement]); ``max_rtol``:
    the largest relative mismatch a precision proposal covers (None: the dtype's
    bound, ``PRECISION_BOUNDS``)."""
    d = decide(ev)
    runs = [r.outcome for r in ev.observed]
    if prior is not None and prior.source == "model" and d.reason == "no_evidence" and not runs:
        from ootest.select.judge import still_supported

        # the judge's accepted proposal stands until the device says otherwise, and
        # while a fact it cites still supports it (a skip never gets a result)
        if still_supported(prior, ev):
            return Refined(prior)
    kept = _proposal_kept(ev, prior)
    if kept is not None:
        return kept
    passed = settle(ev, d, k)
    if passed is not None:
        return Refined(passed)
    if d.mode == "xfail_strict" and last is not None:
        prec = _precision(last, ev.dtypes, max_rtol)
        if prec is not None:
            return Refined(
                Decision(ev.variant_id, "xfail", f"precision_proposal:{prec.dtype}",
                         (prec.why, _proposed(prec)), "refine"),
                prec,
            )  # fmt: skip
    return Refined(
        Decision(d.variant_id, d.mode, d.reason, d.evidence, "refine" if runs else d.source)
    )


#: The largest relative mismatch a precision proposal covers, per dtype: about
#: 10-80x torch's own default rtol for it (float32 1.3e-6, float16 1e-3,
#: bfloat16 1.6e-2), so a kernel 0.1% off in float32 is a bug, not a tolerance.
#: A dtype not listed (integers, bool) gets no proposal.
PRECISION_BOUNDS = {
    "float64": 1e-6,
    "complex128": 1e-6,
    "float32": 1e-4,
    "complex64": 1e-4,
    "float16": 1e-2,
    "bfloat16": 5e-2,
}
#: torch's default atol per dtype (``torch.testing.assert_close``): what a proposal
#: keeps. Within a relative bound every element with a nonzero expected value is
#: covered by the proposed rtol alone; 2x the greatest absolute difference as atol
#: would loosen every comparison in the test by an amount no bound limits (values
#: of 1e6 off by 10 would let any small element be off by 20: issue 36).
DEFAULT_ATOL = {
    "float64": 1e-7,
    "complex128": 1e-7,
    "float32": 1e-5,
    "complex64": 1e-5,
    "float16": 1e-5,
    "bfloat16": 1e-5,
}
_PROPOSED = re.compile(r"^proposed precision (\w+): atol=(\S+), rtol=(\S+)$")


def _proposed(p: Precision) -> str:
    return f"proposed precision {p.dtype}: atol={p.atol:.3g}, rtol={p.rtol:.3g}"


def _proposal_kept(ev: Evidence, prior: Decision | None) -> Refined | None:
    """A precision proposal stays a proposal while the device passes at its
    tolerance (Note [Refinement]): a run confirms it, a person accepts it."""
    if prior is None or not prior.reason.startswith("precision_proposal:") or not ev.observed:
        return None
    if ev.observed[-1].outcome not in PASSES:
        return None  # failed at the proposed tolerance: decided again from the failure
    m = next((m for e in prior.evidence if (m := _PROPOSED.match(e))), None)
    if m is None:
        return None
    prec = Precision(m[1], float(m[2]), float(m[3]), prior.evidence[0])
    n = 0
    for r in reversed(ev.observed):
        if r.outcome not in PASSES:
            break
        n += 1
    why = (
        f"confirmed: passed the last {n} run(s) at the proposed tolerance; to accept it, "
        "pin the entry (remove the ootest-select tag, mode: mandatory_success)"
    )
    return Refined(
        Decision(ev.variant_id, "xfail", prior.reason, (prior.evidence[0], _proposed(prec), why),
                 "refine"),
        prec,
    )  # fmt: skip


#: Decisions clean passes on the device never override: the team's scope (a
#: preference, not a prediction) and a failure of the CPU reference run.
NOT_BY_PASSES = ("out_of_scope:", "upstream_broken:")


def settle(ev: Evidence, d: Decision, k: int = 2) -> Decision | None:
    """What clean passes on the device make of the rules' decision ``d`` (Note
    [Refinement]): the strongest evidence, so ``k`` clean passes in a row make any
    skip or xfail of the rules ``mandatory_success`` (``observed_pass:<k>``) and
    fewer make a static skip run (``xfail``, ``passed_on_device:<n>/<k>``), each
    with the decision they override in the evidence; None: nothing to change."""
    if d.mode == "mandatory_success" or d.reason.startswith(NOT_BY_PASSES):
        return None
    n = 0
    for r in reversed(ev.observed):
        if r.outcome not in PASSES:
            break
        n += 1
    if n == 0:
        return None
    was = () if promotable(d) else (f"overrides {d.reason}: {'; '.join(d.evidence)}",)
    if n >= k:
        return Decision(ev.variant_id, "mandatory_success", f"observed_pass:{k}",
                        (f"passed the last {k} runs on the device", *was), "refine")  # fmt: skip
    if d.mode != "skip":
        return None  # it runs already; the next passes promote it
    return Decision(
        ev.variant_id,
        "xfail",
        f"passed_on_device:{n}/{k}",
        (f"passed {n} clean run(s) on the device, {k} make it mandatory: it runs until then", *was),
        "refine",
    )


def decide_seen(ev: Evidence, k: int = 2) -> Decision:
    """The rules' decision, then what clean passes on the device make of it
    (:func:`settle`): how ``select run --results`` and ``--since`` decide."""
    d = decide(ev)
    return settle(ev, d, k) or d


def _precision(
    rec: dict[str, Any], dtypes: tuple[str, ...], max_rtol: float | None
) -> Precision | None:
    msg = str(rec.get("message") or "")
    if not _CLOSE.search(msg) or len(dtypes) != 1:
        return None
    bound = PRECISION_BOUNDS.get(dtypes[0]) if max_rtol is None else max_rtol
    if bound is None:
        return None
    a, r = _ABS.search(msg), _REL.search(msg)
    if a is None or r is None:
        return None
    try:
        atol, rtol = float(a[1]), float(r[1])
    except ValueError:
        return None
    if not (0 <= rtol <= bound) or atol != atol or atol == float("inf"):
        return None
    src = f"--max-rtol {bound:g}" if max_rtol is not None else f"{dtypes[0]}'s bound {bound:g}"
    why = (
        f"numerical mismatch on the device: greatest abs diff {atol:.3g}, rel diff {rtol:.3g} "
        f"(<= {src}); proposed: 2x that relative tolerance, torch's atol, to review"
    )
    return Precision(dtypes[0], DEFAULT_ATOL.get(dtypes[0], 1e-5), 2 * rtol, why)


def people_entries(config_text: str) -> tuple[dict[str, list[Any]], set[tuple[str, str]]]:
    """Per ``path:``, the entries without the generated tag (round-trip objects,
    comments included), and the (path, name) pairs they name."""
    if not _has_people_entries(config_text):
        return {}, set()
    from ruamel.yaml import YAML

    data = YAML().load(config_text)
    kept: dict[str, list[Any]] = {}
    names: set[tuple[str, str]] = set()
    files = ((data or {}).get("test_suite_config") or {}).get("files") or []
    for f in files:
        path = str(f.get("path"))
        for entry in f.get("tests") or []:
            if TAG in (entry.get("tags") or []):
                continue
            kept.setdefault(path, []).append(entry)
            names.update((path, str(n)) for n in entry.get("names") or [])
    return kept, names


def _has_people_entries(config_text: str) -> bool:
    """Whether a config may hold an entry without the generated tag: read first
    with libyaml when it is there (a generated config of a whole OpInfo file, all
    tagged, is not round-tripped for nothing); True when it cannot tell."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return True
    try:
        data = yaml.load(config_text, Loader=loader)
    except yaml.YAMLError:
        return True  # ruamel says what is wrong
    if not isinstance(data, dict):
        return True
    suite = data.get("test_suite_config")
    files = suite.get("files") if isinstance(suite, dict) else None
    if not isinstance(files, list):
        return True
    for f in files:
        tests = f.get("tests") if isinstance(f, dict) else None
        if tests is None:
            continue
        if not isinstance(tests, list):
            return True
        for entry in tests:
            tags = entry.get("tags") if isinstance(entry, dict) else None
            if not isinstance(tags, list) or TAG not in tags:
                return True
    return False


def splice(generated: str, kept: dict[str, list[Any]]) -> str:
    """The generated config with people's entries put first in their files."""
    if not kept:
        return generated
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096
    data = yaml.load(generated)
    files = data["test_suite_config"]["files"]
    for f in files:
        mine = kept.get(str(f["path"]))
        if mine:
            tests = f.get("tests")
            if tests is None:
                f["tests"] = tests = []
            for i, entry in enumerate(mine):
                tests.insert(i, entry)
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()
