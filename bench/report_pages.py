"""Size and build time of the pages that explain decisions, at 250,000 synthetic
variants against a baseline of 25,000 measured in the same run.

Pages (Note [Bounded HTML], Note [Self-contained pages]):

- ``report``: the run's HTML report, every skipped and xfailed variant with a
  selection decision (reason code, detail, evidence), plus the op coverage
  section (op map in memory: each variant calls 3-8 of 1,500 ops, with 1-2 dtypes
  of 8 per call);
- ``coverage``: building the coverage (the join) alone;
- ``review``: ``select review`` of a generated config's sidecar (reading it,
  grouping by reason, file, blocking op, the changes against a previous sidecar
  with 5% of the decisions changed) and its HTML;
- ``summary``: the Markdown job summary with the coverage.

The shape: 600 files, 70% mandatory (ops_supported), 25% skip (op_unsupported
over 1,500 ops, dtype_unsupported, upstream_skip), 5% xfail (replay_failed);
results 60% passed, skips as decided, 4% failed on a missing kernel.
Times are best-of --repeat CPU seconds (the machine is shared). The ratio that
matters is size(250k) / size(25k): bounded pages stay near 1, not 10.
Usage: python bench/report_pages.py [--small N] [--large N] [--repeat R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ootest.record.results import RunData
from ootest.runner.coverage import coverage
from ootest.runner.render import html_report
from ootest.runner.summary import job_summary
from ootest.select.review import build_review, review_html

OPS = [f"aten::op_{i}.default" for i in range(1500)]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool", "complex64"]


def synth(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, Any]:
    """(results records, sidecar rows, ops by variant, (op, dtype) pairs by variant)."""
    rnd = random.Random(seed)
    results, rows = [], []
    ops_of: dict[str, tuple[str, ...]] = {}
    pairs_of: dict[str, tuple[tuple[str, str], ...]] = {}
    for i in range(n):
        f = i % 600
        dt = DTYPES[(i // 600) % len(DTYPES)]
        vid = f"test/test_{f}.py::Test{f}::test_{i % 997}[op={i % 300},dtype={dt}]"
        ops = tuple(sorted({OPS[int(rnd.paretovariate(1.2)) % len(OPS)]
                            for _ in range(rnd.randint(3, 8))}))  # fmt: skip
        ops_of[vid] = ops
        pairs_of[vid] = tuple((op, DTYPES[(i + k) % 8]) for k, op in enumerate(ops))
        x = rnd.random()
        missing: list[str] = []
        if x < 0.70:
            mode, reason, ev = "mandatory_success", "ops_supported", ["all ops declared"]
        elif x < 0.85:
            missing = [ops[-1]]
            mode, reason = "skip", f"op_unsupported:{ops[-1]}"
            ev = [f"calls {len(ops)} ops; not declared: {ops[-1]}"]
        elif x < 0.91:
            mode, reason, ev = "skip", f"dtype_unsupported:{dt}", [f"dtypes not declared: {dt}"]
        elif x < 0.95:
            mode, reason, ev = "skip", "upstream_skip", ["@onlyCUDA: runs on cuda only"]
        else:
            mode, reason = "xfail", f"replay_failed:{ops[0]}"
            ev = [f"{ops[0]}: RuntimeError: replay {i % 40}"]
        rows.append({
            "decision": {"variant_id": vid, "mode": mode, "reason": reason, "evidence": ev,
                         "source": "rules"},
            "evidence": {"variant_id": vid, "dtypes": [dt], "ops": list(ops),
                         "missing_ops": missing, "missing_dtypes": [], "cpu": None,
                         "reference": None, "observed": []},
            "fingerprint": "",
        })  # fmt: skip
        rec: dict[str, Any] = {"kind": "result", "variant_id": vid, "nodeid": vid,
                               "file": f"test/test_{f}.py", "mode": mode, "dtype": dt,
                               "duration": 0.01}  # fmt: skip
        if mode == "skip":
            rec.update(outcome="skipped", reason=reason, code=reason.split(":")[0], evidence=ev)
        elif mode == "xfail":
            rec.update(outcome="xfailed", reason=reason, code="replay_failed", evidence=ev,
                       message=f"E   RuntimeError: replay {i % 40}")  # fmt: skip
        elif rnd.random() < 0.06:
            kernel = f"Could not run '{ops[-1]}' with arguments from the 'x' backend"
            rec.update(outcome="failed", reason=reason, code="ops_supported", message=kernel)
        else:
            rec.update(outcome="passed", reason=reason, code="ops_supported")
        results.append(rec)
    return results, rows, ops_of, pairs_of


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return min(times), out


def measure(n: int, repeat: int, folder: Path) -> dict[str, tuple[float, int]]:
    results, rows, ops_of, pairs_of = synth(n)
    data = RunData.from_records(results)
    out: dict[str, tuple[float, int]] = {}
    t, cov = best(lambda: coverage(data, ops_of, pairs_of, source="ops.db"), repeat)
    out["coverage"] = (t, len(json.dumps(cov.to_json())))
    out["ops reached"] = (0.0, len(cov.ops))
    t, page = best(lambda: html_report(data, "bench", coverage=cov), repeat)
    out["report"] = (t, len(page.encode()))
    (folder / f"report-{n}.html").write_text(page)
    t, md = best(lambda: job_summary(data, "r.jsonl", coverage=cov), repeat)
    out["summary"] = (t, len(md.encode()))
    cfg = folder / f"s{n}.yaml"
    cfg.write_text("test_suite_config:\n  files: []\n")
    side = folder / f"s{n}.evidence.jsonl"
    side.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rnd = random.Random(1)
    for r in rows:  # the previous config: 5% decided otherwise
        if rnd.random() < 0.05:
            r["decision"]["mode"], r["decision"]["reason"] = "xfail", "no_evidence"
    prev = folder / f"p{n}.yaml"
    prev.write_text(cfg.read_text())
    (folder / f"p{n}.evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t, text = best(lambda: review_html(build_review(cfg, prev)), repeat)
    out["review"] = (t, len(text.encode()))
    (folder / f"review-{n}.html").write_text(text)
    out["sidecar"] = (0.0, side.stat().st_size)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=25_000)
    ap.add_argument("--large", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        small = measure(a.small, a.repeat, folder)
        large = measure(a.large, a.repeat, folder)
    print(f"{'page':10s} {a.small:>9,d}: CPU s   bytes   {a.large:>9,d}: CPU s   bytes"
          "   time x   size x")  # fmt: skip
    for k in ("coverage", "report", "summary", "review", "sidecar", "ops reached"):
        (ts, ss), (tl, sl) = small[k], large[k]
        tx = f"{tl / ts:7.2f}" if ts else "      -"
        print(f"{k:10s} {ts:15.2f} {ss:9,d} {tl:17.2f} {sl:9,d} {tx} {sl / ss:8.2f}")


if __name__ == "__main__":
    main()
