"""A triage verdict for a failed CRCR job: a backend bug or an upstream change?

Note [Triage verdict]
PyTorch's relay promotes a backend (L2 -> L3) on a raw job pass rate; a job
that fails because ``pytorch/pytorch`` broke counts against the backend all the
same. pytorch/test-infra#8673 proposes that the downstream job attach a small
verdict to its callback; ``ootest relay report --triage`` builds it from
evidence only, and sends it as ``workflow.triage`` (off by default).

Each failing test of the run (what CRCR counts as failed: a failure, error,
crash, timeout or strict xpass) is classified, strongest evidence first, with a
confidence (high, medium, low):

1. ``backend`` (high): a strict xfail passed (the backend's config must promote it);
2. ``upstream``: it fails on the CPU reference run too (high), or the memory
   diff of this torch update marks the variant added or modified (medium: the
   test changed; the backend may still be at fault);
3. ``flake`` (medium): its outcome flipped at least twice in the last ``k`` runs
   on this device (``--previous`` files, then this run): pass, fail, pass, fail;
4. ``backend``, only where the CPU reference passes the same test:
   a. (high) the dispatcher found no kernel of this backend for an op
      (``NotImplementedError: Could not run 'aten::sort.values_stable' with
      arguments from the 'tiny' backend``): the op is named, and the job summary
      counts the failures per missing op (what to implement first);
   b. (high) the backend's own code raised it: the innermost traceback frame
      outside ``torch/`` (the dispatch plumbing) is in the backend's package, or
      the exception's class is defined there;
   c. (high) it passed on this device in an earlier run of the window (a
      regression of this device, not of the test);
   d. (medium) the error text names the backend (``RuntimeError: tiny:
      unsupported dtype``), as a word;
5. ``unknown`` (low): the evidence says neither (no CPU reference result, the
   CPU does not pass it, or nothing ties the failure to the backend).

The backend is known by its privateuse1 name and its packages: ``--device``
(``module:name``, as ``ootest run`` takes it; the module's top-level package is
the backend's code), ``--backend-package``, else the ``device`` and
``device_module`` the results file's collection records carry. Result records
carry ``frames``: the import paths of the failure's traceback, innermost last.

The job's category answers who must act for the job to go green. ``backend``
when one failure is the backend's with high confidence (it alone keeps the job
red, whatever upstream does) or most failures are the backend's; otherwise
``unknown`` when some failure is neither upstream's nor a flake (an unknown, or
a lone medium backend call); otherwise ``flake`` when some failure flips;
otherwise ``upstream``: a job is upstream's only when every failure is.
Confidence: ``backend`` high when its high-confidence failures are at least half
of all, else medium; ``upstream`` high when every failure fails on the CPU too,
else medium; ``flake`` medium; ``unknown`` low. A run with no test results at
all is ``infra`` (low): it failed before a test ran.

Test output is hostile text: every string taken from it (excerpts, reasons,
variant IDs, op names) has control and format characters escaped
(``\\x1b``, ``\\u202e``), whitespace flattened, and is cut to a bounded length.

The evidence list is grouped by (category, failure signature) (Note [Selection
rules]: one bug in 300 variants is one signature), the verdict's category
first, then by size; it is cut at ``max_evidence`` entries (the largest group
of each category present is always among them) of at most
``MAX_VARIANTS`` variant IDs each, and every text is cut short, so the
callback body stays small whatever the run.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from ootest import naming as names
from ootest.errors import UserError
from ootest.record.identity import backend_module, backend_name, reference_id
from ootest.record.origin import cpu_reference, run_origin
from ootest.record.results import XPASSED_STRICT, Record, RunData, headline, read_records
from ootest.record.signature import signature

SCHEMA_VERSION = 1
CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")
CONFIDENCES = ("high", "medium", "low")
#: Which category a job gets when its failures differ (the backend's only on
#: strong evidence or a majority: see Note [Triage verdict]).
PRECEDENCE = ("backend", "unknown", "flake", "upstream")
MAX_EVIDENCE = 10
MAX_VARIANTS = 5  # variant IDs per evidence entry
MAX_OPS = 5  # missing ops the summary names
_TEXT = 300  # characters of an excerpt or a reason
_ID = 300  # characters of a variant ID
_SUMMARY = 600
_LIMIT_EVIDENCE = 50  # what the emulator accepts at most

_PASS = frozenset({"passed", "xpassed", "xpassed_strict"})
_FAIL = frozenset({"failed", "error", "crashed", "timeout", "xfailed"})
#: Outcomes CRCR's test_results count as passed or skipped (see RunData.test_results).
_NOT_FAILED = frozenset({"passed", "xfailed", "xpassed", "skipped"})

#: The dispatcher's error for an op without a kernel for a dispatch key (torch 2.13:
#: "Could not run 'aten::sort.values_stable' with arguments from the 'tiny' backend.
#: This could be because the operator doesn't exist for this backend, ...").
_MISSING = re.compile(
    r"Could not run '([A-Za-z_][\w:.]{0,119})' with arguments from the '(\w{1,64})' backend"
)
#: Functionality keys a backend's missing kernel may be reported under.
_KEY_PREFIX = re.compile(r"^(?:Autograd|SparseCsr|Sparse|Quantized|NestedTensor)", re.I)
#: Frames of torch itself: the plumbing between a test and a backend's kernel.
_TORCH = "torch/"
_DOTTED = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+")
#: What torch's test harness appends to a failure's message (the command that repeats it).
_REPRO = "To execute this test, run the following"
_MODULE = re.compile(r"[A-Za-z_]\w{0,99}(?:\.[A-Za-z_]\w{0,99}){0,9}")


@dataclass(frozen=True)
class Backend:
    """The device under test: its privateuse1 name and the packages of its own code."""

    name: str | None = None
    packages: tuple[str, ...] = ()

    @classmethod
    def of(cls, device: str | None, packages: Iterable[str] = ()) -> Backend:
        """From a ``--device`` value (``module:name``, ``emu[:profile]`` or a name);
        a name or module that breaks the rules is left out (see :func:`device_problem`)."""
        name = module = None
        if device:
            module = backend_module(device)
            name = backend_name(device) if ":" in device or module else device.strip()
        name = name if name and names.is_device_name(name) else None
        module = module if module and _MODULE.fullmatch(module) else None
        pkgs = [p.strip() for p in packages if _MODULE.fullmatch(p.strip())]
        if module:  # the module's distribution: its top-level package, emu's own folder
            pkgs.append(module if module.startswith("ootest.") else module.split(".")[0])
        return cls(name or None, tuple(dict.fromkeys(pkgs)))

    def is_key(self, key: str) -> bool:
        """Whether a dispatch key in an error is this backend's (``PrivateUse1``, its
        name, ``AutogradPrivateUse1``...)."""
        k = _KEY_PREFIX.sub("", key).lower()
        return k == "privateuse1" or (self.name is not None and k == self.name.lower())

    def owns(self, path: str) -> bool:
        """Whether an import path (``torch_tiny/ops.py``) is in the backend's packages."""
        for pkg in self.packages:
            base = pkg.replace(".", "/")
            if path.startswith(base + "/") or path in (base + ".py", base):
                return True
        return False

    def named_in(self, text: str) -> str | None:
        """The backend's name or package as a word of ``text`` (names of at least 3
        characters: a shorter one matches too much), or None."""
        words = [w for w in (self.name, *self.packages) if w and len(w) >= 3]
        for w in words:
            if re.search(rf"(?<![\w.]){re.escape(w)}(?![\w])", text, re.I):
                return w
        return None


def device_problem(device: str) -> str | None:
    """What is wrong with a ``--device`` value for triage, or None."""
    b = Backend.of(device)
    module = backend_module(device)
    if b.name is None or (module is None and ":" in device):
        return (
            "expected NAME, MODULE:NAME or emu[:PROFILE] "
            f"(NAME: {names.DEVICE_NAME_RULE}; MODULE: a dotted Python module)"
        )
    if module is not None and not b.packages:
        return "expected MODULE:NAME with MODULE a dotted Python module"
    return None


@dataclass
class Inputs:
    """What a verdict rests on: this run and the evidence around it."""

    current: dict[str, Record]  # last result per variant ID
    reference: dict[str, Record] = field(default_factory=dict)  # CPU, by reference_id
    history: list[dict[str, Record]] = field(default_factory=list)  # oldest first, by ID
    changed: dict[str, str] = field(default_factory=dict)  # reference_id -> what changed
    window: int = 5  # the last k runs, this one included
    backend: Backend = field(default_factory=Backend)
    #: what reading the evidence left out, one line each (Note [Evidence origins])
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Call:
    """The category of one failing variant, and why."""

    variant_id: str
    category: str
    confidence: str  # high, medium, low
    why: str
    signature: str  # code, e.g. RuntimeError:1a2b3c4d, missing_kernel:aten::add.out
    excerpt: str
    rule: str  # which rule placed it (Note [Triage verdict])
    op: str | None = None  # the missing op, for a missing kernel

    @property
    def strong(self) -> bool:
        return self.confidence == "high"


def clean(text: str, n: int = _TEXT) -> str:
    """Hostile text made safe to show: control and format characters escaped
    (``\x1b`` -> ``\\x1b``, bidi overrides too), whitespace flattened, at most ``n``
    characters."""
    flat = " ".join(str(text)[: 4 * n].split())
    out = []
    for ch in flat:
        if unicodedata.category(ch)[0] == "C":
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else "?")
        else:
            out.append(ch)
    safe = "".join(out)
    return safe if len(safe) <= n else safe[: n - 3] + "..."


def _by_ref(records: Mapping[str, Record]) -> dict[str, Record]:
    return {reference_id(k): r for k, r in records.items()}


def failing(current: Mapping[str, Record]) -> list[tuple[str, Record]]:
    """The results CRCR counts as failed, by variant ID."""
    return sorted((k, r) for k, r in current.items() if r.get("outcome") not in _NOT_FAILED)


def missing_ops(rec: Record, backend: Backend) -> list[str]:
    """The ops the dispatcher found no kernel of this backend for, in a failure's message."""
    text = str(rec.get("message") or "")[:4000]
    ops = [op for op, key in _MISSING.findall(text) if backend.is_key(key)]
    return list(dict.fromkeys(ops))


def raised_by(rec: Record, backend: Backend) -> str | None:
    """Where the backend's own code raised a failure, when it did: the innermost
    frame outside torch (``frames``, innermost last) in its package, or an exception
    class defined there."""
    frames = rec.get("frames")
    if isinstance(frames, list):
        for f in reversed(frames):
            path = str(f)
            if path.startswith(_TORCH):
                continue
            if backend.owns(path):
                return f"raised in the backend's code ({path})"
            break
    kind = headline(rec.get("message")).split(":", 1)[0].strip()
    if _DOTTED.fullmatch(kind) and backend.owns(kind.rsplit(".", 1)[0].replace(".", "/")):
        return f"raised as the backend's own exception ({kind})"
    return None


def classify(vid: str, rec: Record, inp: Inputs) -> Call:
    """One failing variant (Note [Triage verdict])."""
    outcome = str(rec.get("outcome"))
    key = reference_id(vid)
    if outcome == XPASSED_STRICT:
        return Call(
            vid,
            "backend",
            "high",
            "a strict xfail passed: the backend's config should promote it",
            "xpassed_strict",
            "xpassed_strict: " + clean(str(rec.get("reason") or "strict xfail passed")),
            "strict_xpass",
        )
    ops = missing_ops(rec, inp.backend)
    sig = signature(rec)
    code = clean(f"missing_kernel:{ops[0]}", 160) if ops else sig.code
    line = headline(rec.get("message"))
    if ops and (m := _MISSING.search(line)):  # its first sentence says it all
        line = line[: m.end() + 1]
    excerpt = clean(f"{outcome}: {line or sig}")
    who = f"the {inp.backend.name!r} backend" if inp.backend.name else "this backend"

    def call(category: str, confidence: str, rule: str, why: str) -> Call:
        op = ops[0] if ops and rule == "missing_kernel" else None
        return Call(vid, category, confidence, clean(why), code, excerpt, rule, op)

    cpu = inp.reference.get(key)
    cpu_outcome = str(cpu.get("outcome")) if cpu is not None else None
    if cpu is not None and cpu_outcome in _FAIL:
        said = headline(cpu.get("message")) or str(signature(cpu))
        return call("upstream", "high", "cpu_fails", f"fails on the CPU reference too: {said}")
    if key in inp.changed:
        return call(
            "upstream",
            "medium",
            "changed",
            f"this torch update changed the test ({inp.changed[key]})",
        )
    runs = [h[key]["outcome"] for h in inp.history if key in h][-(inp.window - 1) :]
    seen = [o in _PASS for o in [*runs, outcome] if o in _PASS | _FAIL]
    flips = sum(a != b for a, b in pairwise(seen))
    shown = " ".join("P" if ok else "F" for ok in seen)
    if flips >= 2:
        return call(
            "flake",
            "medium",
            "flips",
            f"flipped {flips} times in the last {len(seen)} runs: {shown}",
        )
    if cpu_outcome in _PASS:
        if ops:
            return call(
                "backend",
                "high",
                "missing_kernel",
                f"{who} has no kernel for {', '.join(ops)} (the dispatcher's "
                "NotImplementedError); passes on the CPU reference",
            )
        raised = raised_by(rec, inp.backend)
        if raised:
            return call("backend", "high", "raised", f"{raised}; passes on the CPU reference")
        if any(seen[:-1]):
            return call(
                "backend",
                "high",
                "regression",
                f"passes on the CPU reference and passed on this device before ({shown})",
            )
        # the error's own text, not torch's repro line after it (it names files and tests)
        said = str(rec.get("message") or "")[:1000].split(_REPRO, 1)[0]
        word = inp.backend.named_in(" ".join(said.split()))
        if word:
            return call(
                "backend",
                "medium",
                "named",
                f"the error names the backend ({word!r}); passes on the CPU reference",
            )
    missing = []
    if cpu is None:
        missing.append("no CPU reference result")
    elif cpu_outcome not in _PASS:
        missing.append(f"the CPU reference {cpu_outcome} it")
    if not any(seen[:-1]):
        missing.append(f"not seen passing on this device ({len(seen) - 1} earlier runs)")
    if cpu_outcome in _PASS:
        missing.append("nothing in the error ties it to the backend")
    if ops:
        missing.append(f"missing kernel {', '.join(ops)} on {who}")
    return call("unknown", "low", "unplaced", "; ".join(missing))


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


def combine(calls: list[Call]) -> tuple[str, str]:
    """The job's category and confidence from its failures' (Note [Triage verdict])."""
    count = Counter(c.category for c in calls)
    strong_backend = sum(c.category == "backend" and c.strong for c in calls)
    if strong_backend or 2 * count["backend"] > len(calls):
        return "backend", "high" if 2 * strong_backend >= len(calls) else "medium"
    if count["unknown"] or count["backend"]:
        return "unknown", "low"
    if count["flake"]:
        return "flake", "medium"
    return "upstream", "high" if all(c.strong for c in calls) else "medium"


def _n(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}" if n else ""


def _ops_line(calls: list[Call]) -> str:
    """The missing kernels behind the backend's failures, the most failures first."""
    ops = Counter(c.op for c in calls if c.category == "backend" and c.op)
    shown = ", ".join(f"{clean(op, 80)} {n}" for op, n in ops.most_common(MAX_OPS))
    more = len(ops) - MAX_OPS
    return shown + (f" and {more} more op{'s' * (more != 1)}" if more > 0 else "")


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
    category, confidence = combine(calls)
    count = Counter(c.category for c in calls)
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
                "test": clean(first.variant_id, _ID),
                "log_url": log_url,
                "excerpt": first.excerpt,
                "category": cat,
                "signature": sig,
                "count": len(members),
                "variants": [clean(m.variant_id, _ID) for m in members[:MAX_VARIANTS]],
                "why": first.why,
            }
        )
    parts = ", ".join(f"{count[c]} {c}" for c in PRECEDENCE if count[c])
    rules = Counter(c.rule for c in calls if c.category == "backend")
    who = f"the {inp.backend.name!r} backend" if inp.backend.name else "this backend"
    own = [
        f"{rules['missing_kernel']} missing kernel{'s' * (rules['missing_kernel'] != 1)} on "
        f"{who} (implement first: {_ops_line(calls)})"
        if rules["missing_kernel"]
        else "",
        f"{rules['raised']} raised by its own code" if rules["raised"] else "",
        f"{rules['regression']} passed here before" if rules["regression"] else "",
        _n(rules["named"], "error that names it", "errors that name it"),
        _n(rules["strict_xpass"], "strict xfail passed", "strict xfails passed"),
    ]
    lead = {
        "upstream": "every failure also fails on the CPU reference or is in a test this "
        "torch update changed",
        "backend": "the backend's own: " + ", ".join(x for x in own if x),
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
        "summary": clean(summary, _SUMMARY),
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
def _records(path: Path, what: str) -> list[Record]:
    recs = read_records(path, missing_ok=False)
    if recs and not any("outcome" in r for r in recs):
        raise UserError(f"{what} {path}: expected ootest JSONL results (lines with 'outcome')")
    return recs


def _run(path: Path, what: str) -> RunData:
    return RunData.from_records(_records(path, what))


def _results(path: Path, what: str) -> dict[str, Record]:
    return _run(path, what).results


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
    device: str | None = None,
    packages: Iterable[str] = (),
) -> Inputs:
    """The evidence files read; ``device`` (a ``--device`` value) and ``packages`` name
    the backend, else the results' collection records do (Note [Triage verdict])."""
    if window < 2:
        raise UserError(f"--flake-window: expected at least 2 runs; found {window}")
    if device is not None and (problem := device_problem(device)):
        raise UserError(
            f"--device: {problem}; found {clean(device, 80)!r}; pass what 'ootest run "
            "--device' was given, e.g. torch_spyre:spyre"
        )
    packages = tuple(packages)
    for pkg in packages:
        if not _MODULE.fullmatch(pkg.strip()):
            raise UserError(
                "--backend-package: expected a dotted Python package name; found "
                f"{clean(pkg, 80)!r}; pass the name you import, e.g. torch_tiny or vendor.tiny"
            )
    text = results.read_text(encoding="utf-8", errors="replace") if results.is_file() else ""
    if text.lstrip().startswith("<"):
        raise UserError(
            f"--results {results}: --triage needs ootest JSONL results (JUnit XML has no "
            "variant IDs or failure details)"
        )
    ref: dict[str, Record] = {}
    notes: list[str] = []
    for p in reference:
        # only its CPU results: a plain pytest run where the backend autoloads holds
        # the device's own variants too, whose failures are not the CPU's
        cpu, note = cpu_reference(f"--reference {p}", _records(p, "--reference"))
        ref.update(cpu)
        if note is not None:
            notes.append(note)
    recs = _records(results, "--results")
    run = RunData.from_records(recs)
    if device is None:  # what the run itself recorded: the device its sessions ran on
        ran = sorted(d for d in run_origin(recs).devices if d is not None)
        if ran:
            device = ran[0]
    return Inputs(
        current=run.results,
        reference=ref,
        history=[_by_ref(_results(p, "--previous")) for p in previous],
        changed=changed_variants(memory_diff) if memory_diff is not None else {},
        window=window,
        backend=Backend.of(device, packages),
        notes=notes,
    )
