"""A triage verdict for a failed CRCR job: a backend bug or an upstream change?

Note [Triage verdict]
PyTorch's relay promotes a backend (L2 -> L3) on a raw job pass rate; a job
that fails because ``pytorch/pytorch`` broke counts against the backend all the
same. pytorch/test-infra#8673 proposes that the downstream job attach a small
verdict to its callback; ``ootest relay report --triage`` builds it from
evidence only, and sends it as ``workflow.triage`` (off by default).

Each failing test of the run (what CRCR counts as failed: a failure, error,
crash, timeout or strict xpass) is classified, strongest evidence first:

1. ``backend``: a strict xfail passed (the backend's config must promote it);
2. ``upstream``: it fails on the CPU reference run too (strong), or the memory
   diff of this torch update marks the variant added or modified (weaker: the
   test changed; the backend may still be at fault);
3. ``flake``: its outcome flipped at least twice in the last ``k`` runs on this
   device (``--previous`` files, then this run): pass, fail, pass, fail;
4. ``backend``: it passes on the CPU reference and passed on this device in an
   earlier run of the window (a regression of this device, not of the test);
5. ``unknown``: the evidence says neither (no CPU reference result, or it never
   passed here).

The job's category is the first of ``backend``, ``unknown``, ``flake``,
``upstream`` that any failure has: a job is upstream's only when every failure
is. Confidence: ``upstream`` high when every failure fails on the CPU too,
medium when some rest on the memory diff alone; ``backend`` high unless some
failures are unknown (medium); ``flake`` medium; ``unknown`` low. A run with no
test results at all is ``infra`` (low): it failed before a test ran.

The evidence list is grouped by (category, failure signature) (Note [Selection
rules]: one bug in 300 variants is one signature), the verdict's category
first, then by size; it is cut at ``max_evidence`` entries (the largest group
of each category present is always among them) of at most
``MAX_VARIANTS`` variant IDs each, and every text is cut short, so the
callback body stays small whatever the run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.record.results import XPASSED_STRICT, Record, RunData, headline, read_records
from ootest.relay import names
from ootest.select.gather import reference_id
from ootest.select.signature import signature

SCHEMA_VERSION = 1
CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")
CONFIDENCES = ("high", "medium", "low")
#: Which category a job gets when its failures differ: the first one present.
PRECEDENCE = ("backend", "unknown", "flake", "upstream")
MAX_EVIDENCE = 10
MAX_VARIANTS = 5  # variant IDs per evidence entry
_TEXT = 300  # characters of an excerpt or a reason
_SUMMARY = 600
_LIMIT_EVIDENCE = 50  # what the emulator accepts at most

_PASS = frozenset({"passed", "xpassed", "xpassed_strict"})
_FAIL = frozenset({"failed", "error", "crashed", "timeout", "xfailed"})
#: Outcomes CRCR's test_results count as passed or skipped (see RunData.test_results).
_NOT_FAILED = frozenset({"passed", "xfailed", "xpassed", "skipped"})


@dataclass
class Inputs:
    """What a verdict rests on: this run and the evidence around it."""

    current: dict[str, Record]  # last result per variant ID
    reference: dict[str, Record] = field(default_factory=dict)  # CPU, by reference_id
    history: list[dict[str, Record]] = field(default_factory=list)  # oldest first, by ID
    changed: dict[str, str] = field(default_factory=dict)  # reference_id -> what changed
    window: int = 5  # the last k runs, this one included


@dataclass(frozen=True)
class Call:
    """The category of one failing variant, and why."""

    variant_id: str
    category: str
    strong: bool  # direct evidence (a CPU failure; CPU pass + an earlier pass here)
    why: str
    signature: str  # code, e.g. RuntimeError:1a2b3c4d
    excerpt: str


def _cut(text: str, n: int = _TEXT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def _by_ref(records: Mapping[str, Record]) -> dict[str, Record]:
    return {reference_id(k): r for k, r in records.items()}


def failing(current: Mapping[str, Record]) -> list[tuple[str, Record]]:
    """The results CRCR counts as failed, by variant ID."""
    return sorted((k, r) for k, r in current.items() if r.get("outcome") not in _NOT_FAILED)


def classify(vid: str, rec: Record, inp: Inputs) -> Call:
    """One failing variant (Note [Triage verdict])."""
    outcome = str(rec.get("outcome"))
    key = reference_id(vid)
    if outcome == XPASSED_STRICT:
        return Call(
            vid,
            "backend",
            True,
            "a strict xfail passed: the backend's config should promote it",
            "xpassed_strict",
            "xpassed_strict: " + _cut(str(rec.get("reason") or "strict xfail passed")),
        )
    sig = signature(rec)
    excerpt = _cut(f"{outcome}: {headline(rec.get('message')) or sig}")

    def call(category: str, strong: bool, why: str) -> Call:
        return Call(vid, category, strong, _cut(why), sig.code, excerpt)

    cpu = inp.reference.get(key)
    cpu_outcome = str(cpu.get("outcome")) if cpu is not None else None
    if cpu is not None and cpu_outcome in _FAIL:
        said = headline(cpu.get("message")) or str(signature(cpu))
        return call("upstream", True, f"fails on the CPU reference too: {said}")
    if key in inp.changed:
        return call("upstream", False, f"this torch update changed the test ({inp.changed[key]})")
    runs = [h[key]["outcome"] for h in inp.history if key in h][-(inp.window - 1) :]
    seen = [o in _PASS for o in [*runs, outcome] if o in _PASS | _FAIL]
    flips = sum(a != b for a, b in pairwise(seen))
    shown = " ".join("P" if ok else "F" for ok in seen)
    if flips >= 2:
        return call("flake", True, f"flipped {flips} times in the last {len(seen)} runs: {shown}")
    if cpu_outcome in _PASS and any(seen[:-1]):
        return call(
            "backend",
            True,
            f"passes on the CPU reference and passed on this device before ({shown})",
        )
    missing = []
    if cpu is None:
        missing.append("no CPU reference result")
    elif cpu_outcome not in _PASS:
        missing.append(f"the CPU reference {cpu_outcome} it")
    if not any(seen[:-1]):
        missing.append(f"not seen passing on this device ({len(seen) - 1} earlier runs)")
    return call("unknown", False, "; ".join(missing))


def upstream_ref(client_payload: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The PR number and the commit under test, from a dispatch's client_payload
    (values that are not an int and a 40-hex SHA are left out)."""

    def obj(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    p = obj(client_payload.get("payload"))
    pr_obj = obj(p.get("pull_request"))
    number = pr_obj.get("number")
    pr = number if isinstance(number, int) and not isinstance(number, bool) else None
    head = obj(pr_obj.get("head"))
    for sha in (head.get("sha"), p.get("after"), p.get("head_sha")):
        if names.is_sha(sha):
            return pr, sha
    return pr, None


def verdict(
    inp: Inputs,
    *,
    job: str,
    log_url: str | None,
    pr: int | None = None,
    commit: str | None = None,
    max_evidence: int = MAX_EVIDENCE,
) -> dict[str, Any] | None:
    """The verdict for a run (None when nothing failed)."""
    if not inp.current:
        return {
            "schema_version": SCHEMA_VERSION,
            "category": "infra",
            "confidence": "low",
            "summary": "the job produced no test results: it failed before any test ran "
            "(build, install or device setup)",
            "suspected_upstream": None,
            "evidence": [],
        }
    calls = [classify(vid, rec, inp) for vid, rec in failing(inp.current)]
    if not calls:
        return None
    count = Counter(c.category for c in calls)
    category = next(c for c in PRECEDENCE if count[c])
    if category == "upstream":
        confidence = "high" if all(c.strong for c in calls) else "medium"
    elif category == "backend":
        confidence = "medium" if count["unknown"] else "high"
    else:
        confidence = {"flake": "medium", "unknown": "low"}[category]

    groups: dict[tuple[str, str], list[Call]] = {}
    for c in calls:
        groups.setdefault((c.category, c.signature), []).append(c)
    order = [category, *(c for c in PRECEDENCE if c != category)]
    ranked = sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), -len(kv[1]), kv[0][1]))
    # the largest group of every category present first, so that a cut list still
    # shows each; then the rest by rank
    leads = [next(i for i, g in enumerate(ranked) if g[0][0] == c) for c in order if count[c]]
    rest = [i for i in range(len(ranked)) if i not in leads]
    picked = sorted([*leads, *rest][: max(0, max_evidence)])
    evidence = []
    for (cat, sig), members in (ranked[i] for i in picked):
        first = members[0]
        evidence.append(
            {
                "job": job,
                "test": first.variant_id,
                "log_url": log_url,
                "excerpt": first.excerpt,
                "category": cat,
                "signature": sig,
                "count": len(members),
                "variants": [m.variant_id for m in members[:MAX_VARIANTS]],
                "why": first.why,
            }
        )
    parts = ", ".join(f"{count[c]} {c}" for c in PRECEDENCE if count[c])
    lead = {
        "upstream": "every failure also fails on the CPU reference or is in a test this "
        "torch update changed",
        "backend": "some failures are this backend's: they pass on the CPU reference and "
        "passed here before, or a strict xfail passed",
        "flake": "the failures that are not upstream's flip between runs on this device",
        "unknown": "the evidence does not place some failures (run a CPU reference, keep "
        "earlier results)",
    }[category]
    n, g = len(calls), len(groups)
    summary = f"{n} failing test{'s' * (n != 1)}, {g} signature{'s' * (g != 1)} ({parts}): {lead}"
    suspected = None
    if category == "upstream":
        top = next(g for (cat, _), g in ranked if cat == "upstream")
        suspected = {"pr": pr, "commit": commit, "reason": top[0].why}
    return {
        "schema_version": SCHEMA_VERSION,
        "category": category,
        "confidence": confidence,
        "summary": _cut(summary, _SUMMARY),
        "suspected_upstream": suspected,
        "evidence": evidence,
    }


def check(obj: Any) -> list[str]:
    """Problems with a received verdict (the emulator's check; empty: accepted)."""
    if not isinstance(obj, dict):
        return [f"expected an object; found {type(obj).__name__}"]
    out = []
    if obj.get("schema_version") != SCHEMA_VERSION:
        found = obj.get("schema_version")
        out.append(f"schema_version: expected {SCHEMA_VERSION}; found {found!r}")
    for key, allowed in (("category", CATEGORIES), ("confidence", CONFIDENCES)):
        if obj.get(key) not in allowed:
            out.append(f"{key}: expected one of {', '.join(allowed)}; found {obj.get(key)!r}")
    if not isinstance(obj.get("summary"), str) or len(obj["summary"]) > 2000:
        out.append("summary: expected a string of at most 2000 characters")
    sus = obj.get("suspected_upstream")
    if sus is not None:
        if not isinstance(sus, dict) or not set(sus) <= {"pr", "commit", "reason"}:
            out.append("suspected_upstream: expected null or {pr, commit, reason}")
        elif sus.get("pr") is not None and not isinstance(sus.get("pr"), int):
            out.append("suspected_upstream.pr: expected an integer or null")
    ev = obj.get("evidence")
    if not isinstance(ev, list) or len(ev) > _LIMIT_EVIDENCE:
        out.append(f"evidence: expected a list of at most {_LIMIT_EVIDENCE} entries")
    else:
        for i, e in enumerate(ev):
            if not isinstance(e, dict) or not all(
                isinstance(e.get(k), str) for k in ("job", "test", "excerpt")
            ):
                out.append(f"evidence[{i}]: expected job, test and excerpt strings")
            elif len(e["excerpt"]) > 2000:
                out.append(f"evidence[{i}].excerpt: longer than 2000 characters")
    return out


# ------------------------------------------------------------------ inputs (I/O)
def _results(path: Path, what: str) -> dict[str, Record]:
    recs = read_records(path, missing_ok=False)
    if recs and not any("outcome" in r for r in recs):
        raise UserError(f"{what} {path}: expected ootest JSONL results (lines with 'outcome')")
    return RunData.from_records(recs).results


def changed_variants(path: Path) -> dict[str, str]:
    """reference_id -> what changed, from ``ootest index diff --json`` output."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        out = {reference_id(str(v)): "added" for v in data.get("added", [])}
        for m in data.get("modified", []):
            out[reference_id(str(m["id"]))] = ", ".join(str(r) for r in m.get("reasons", []))
    except OSError as e:
        raise UserError(f"--memory-diff {path}: cannot read it: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"--memory-diff {path}: expected the JSON 'ootest index diff OLD NEW --json' "
            f"prints (added, modified[].id); {type(e).__name__}: {e}"
        ) from None
    return out


def load_inputs(
    results: Path,
    reference: Iterable[Path] = (),
    previous: Iterable[Path] = (),
    memory_diff: Path | None = None,
    window: int = 5,
) -> Inputs:
    if window < 2:
        raise UserError(f"--flake-window: expected at least 2 runs; found {window}")
    text = results.read_text(encoding="utf-8", errors="replace") if results.is_file() else ""
    if text.lstrip().startswith("<"):
        raise UserError(
            f"--results {results}: --triage needs ootest JSONL results (JUnit XML has no "
            "variant IDs or failure details)"
        )
    ref: dict[str, Record] = {}
    for p in reference:
        ref.update(_by_ref(_results(p, "--reference")))
    return Inputs(
        current=_results(results, "--results"),
        reference=ref,
        history=[_by_ref(_results(p, "--previous")) for p in previous],
        changed=changed_variants(memory_diff) if memory_diff is not None else {},
        window=window,
    )
