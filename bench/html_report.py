"""Size and build time of the HTML report for synthetic 25,000-variant results files.

The baseline, measured in the same run: reading the results file
(``RunData.load``) and building the JUnit XML from it, which every report does
or could do anyway. Times are the best CPU seconds of --repeat calls (CPU, not
wall: the machine is shared). Shapes:

- ``typical``: 60 files, 1-8 classes each, ops x dtypes; 55% passed, 25% skipped
  (by the config and by the tests, 150 distinct messages), 8% failed with
  500-character messages, the rest xfailed, crashed, errors, xpassed;
- ``all-failed``: every variant failed with its own 500-character message;
- ``all-skipped``: every variant skipped by the test with its own message;
- ``classes``: like ``typical`` but 5 variants per class (5,000 classes).

Also the trend of two typical runs (``--trend``): 10% of variants change outcome,
1% are removed and 1% added.
Usage: python bench/html_report.py [--variants N] [--repeat R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ootest.record.results import RunData
from ootest.runner.render import html_report, junit
from ootest.runner.trend import trend

OPS = [f"op_{i}" for i in range(300)]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool", "complex64"]


def records(shape: str, n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    rnd = random.Random(seed)
    per_class = 5 if shape == "classes" else None
    for i in range(n):
        f = (i // per_class if per_class else i) % 60
        cls = f"Test{i // per_class}" if per_class else f"Test{f}_{(i // 60) % (1 + f % 8)}"
        op, dt = OPS[i % len(OPS)], DTYPES[(i // len(OPS)) % len(DTYPES)]
        vid = f"test/test_{f}.py::{cls}::test_{i % 97}[op={op},dtype={dt}]"
        rec: dict[str, Any] = {
            "kind": "result",
            "variant_id": vid,
            "nodeid": vid,
            "file": f"test/test_{f}.py",
            "op": op,
            "dtype": dt,
            "mode": "mandatory_success",
            "duration": 0.01,
        }
        x = rnd.random()
        if shape == "all-failed":
            rec.update(outcome="failed", message=f"E   AssertionError: variant {i} " + "x" * 470)
        elif shape == "all-skipped":
            rec.update(outcome="skipped", message=f"Skipped: test {i} needs something")
        elif x < 0.55:
            rec.update(outcome="passed")
        elif x < 0.675:
            rec.update(outcome="skipped", mode="skip", reason=f"config reason {i % 50}")
        elif x < 0.80:
            rec.update(outcome="skipped", message=f"Skipped: Only runs on device {i % 100}")
        elif x < 0.88:
            kernel = f"Could not run 'aten::{op}' with arguments from the 'emu' backend. "
            rec.update(outcome="failed", message=kernel + "y" * 430)
        elif x < 0.96:
            rec.update(outcome="xfailed", mode="xfail", message="E   known")
        elif x < 0.97:
            rec.update(outcome="crashed", signal="SIGSEGV", message="process died of SIGSEGV")
        elif x < 0.98:
            rec.update(outcome="error", message="E   RuntimeError: setup failed")
        else:
            rec.update(outcome="xpassed", mode="xfail")
        yield rec


def successor(old: RunData, seed: int = 1) -> Iterator[dict[str, Any]]:
    """The next run: 10% of variants change outcome, 1% are gone, 1% are new."""
    rnd = random.Random(seed)
    flip = {"failed": "passed", "passed": "failed", "skipped": "crashed"}
    for key, rec in old.results.items():
        x = rnd.random()
        if x < 0.01:
            continue
        if x < 0.02:
            yield {**rec, "variant_id": key + "_new", "outcome": "passed"}
        elif x < 0.12:
            yield {**rec, "outcome": flip.get(rec["outcome"], "failed")}
        else:
            yield rec


def write(path: Path, recs: Iterator[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Best CPU time of ``repeat`` calls (CPU, not wall: the bench machine is shared)."""
    out, value = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        value = fn()
        out = min(out, time.process_time() - t)
    return out, value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=25_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the results and HTML files here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(
            f"{'shape':12s} {'JSONL MB':>8s} {'read s':>7s} {'JUnit s':>7s} {'HTML s':>7s} "
            f"{'HTML/read':>9s} {'HTML MB':>8s} {'JUnit MB':>8s}"
        )
        for shape in ("typical", "all-failed", "all-skipped", "classes"):
            src = folder / f"{shape}.jsonl"
            write(src, records(shape, args.variants))
            t_read, data = best(lambda src=src: RunData.load(src), args.repeat)
            t_junit, tree = best(lambda data=data: junit(data), args.repeat)
            t_html, page = best(lambda data=data, t=shape: html_report(data, t), args.repeat)
            xml = ET.tostring(tree.getroot(), encoding="unicode")
            if args.keep:
                (folder / f"{shape}.html").write_text(page, encoding="utf-8")
            print(
                f"{shape:12s} {src.stat().st_size / 1e6:8.2f} {t_read:7.3f} {t_junit:7.3f} "
                f"{t_html:7.3f} {t_html / t_read:9.2f} {len(page.encode()) / 1e6:8.2f} "
                f"{len(xml.encode()) / 1e6:8.2f}"
            )
        old = RunData.load(folder / "typical.jsonl")
        new = RunData.from_records(successor(old))
        t_trend, tr = best(lambda: trend([("a", old), ("b", new)]), args.repeat)
        t_page, page = best(lambda: html_report(new, "trend", trend=tr), args.repeat)
        print(
            f"trend of two typical runs ({tr.changed()} variants changed, {len(tr.changes)} "
            f"transitions): compare {t_trend:.3f} s, HTML with trend {t_page:.3f} s, "
            f"{len(page.encode()) / 1e6:.2f} MB"
        )


if __name__ == "__main__":
    main()
