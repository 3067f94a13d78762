"""Cost of the op capture (Note [Op capture]) against a plain run of the same tests.

The same test files on the same device, alternately in this one command, best of
--repeat and the median of paired ratios:

- baseline: ``pytest FILES --ootest-device D`` (the plugin, no capture);
- capture:  the same with ``--ootest-ops-capture`` (the recording dispatch mode,
  the streamed capture file).

Target (issue 13): ratio <= 1.5 on the example suite and on a real upstream file.
Files default to the example suite; pass upstream files (a git-ignored local copy,
e.g. ``.cache/upstream/test/test_view_ops.py``) as arguments.

``--real`` (issue 28 item 19) times the commands a user runs on a real OpInfo-heavy
file instead: ``$TORCH_ROOT/test/test_unary_ufuncs.py`` (a local copy of upstream's,
kept out of git; 23,523 variants on emu) with a config that selects ``--select``
(default ``TestUnaryUfuncs::test_batch_vs_slicing[dtype=float32]``, 222 variants,
the rest skipped by the config as a real backend's config skips them):

- baseline: ``ootest run CONFIG`` (supervised pytest, results, JUnit, HTML);
- capture:  ``ootest ops capture CONFIG`` (the same supervised pytest under the
  recorder, then the capture ingested into a new index).

Both in wall and CPU seconds (the children's user + system time, which the other
jobs on a shared machine disturb less), and the sum of the per-test durations the
results files record (where the recorder's per-call work shows). Target <= 1.5.

Usage: .venv/bin/python bench/capture_overhead.py [--repeat N] [--device D] [FILE...]
       TORCH_ROOT=.cache/torch .venv/bin/python bench/capture_overhead.py --real
           [--repeat N] [--select NAME]...
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = [str(ROOT / "examples" / "suite")]


def timed(cmd: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t
    if r.returncode not in (0, 1):
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="emu:full")
    ap.add_argument("--real", action="store_true", help="$TORCH_ROOT's test_unary_ufuncs.py")
    ap.add_argument("--select", action="append", metavar="NAME", help="with --real: config names")
    args = ap.parse_args()
    if args.real:
        real(args)
        return
    files = args.files or SUITE
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    base += ["--ootest-device", args.device]
    with tempfile.TemporaryDirectory() as d:
        timed([*base, "--collect-only"])  # warm the emu build and file caches
        plain, cap = [], []
        for i in range(args.repeat):
            plain.append(timed(base))
            out = Path(d) / f"ops{i}.jsonl"
            cap.append(timed([*base, "--ootest-ops-capture", str(out)]))
        lines = sum(1 for _ in open(out, encoding="utf-8"))
    ratios = [c / p for c, p in zip(cap, plain, strict=True)]
    print(f"files: {' '.join(files)} on {args.device}, {args.repeat} alternating pairs")
    print(f"plain pytest + plugin   best {min(plain):6.2f} s")
    print(f"with the op capture     best {min(cap):6.2f} s  ({lines} capture lines)")
    print(
        f"ratio: best {min(cap) / min(plain):.3f}, median of pairs {statistics.median(ratios):.3f}"
        " (target <= 1.5)"
    )


REAL_FILE = "test_unary_ufuncs.py"
REAL_SELECT = "TestUnaryUfuncs::test_batch_vs_slicing[dtype=float32]"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _command(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``cmd`` (its whole process tree, waited for)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    cpu, t = _children_cpu(), time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took, cpu = time.perf_counter() - t, _children_cpu() - cpu
    if r.returncode not in (0, 1):
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return took, cpu


def _durations(results: Path) -> tuple[float, int]:
    """The sum of the per-test durations a results file records, and how many ran."""
    total, ran = 0.0, 0
    with open(results, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("kind") == "result":
                total += float(rec.get("duration") or 0.0)
                ran += rec.get("outcome") not in ("skipped", "deselected")
    return total, ran


def real(args: argparse.Namespace) -> None:
    """``ootest run`` against ``ootest ops capture`` on real test_unary_ufuncs.py (module
    docstring)."""
    test = Path(os.environ.get("TORCH_ROOT") or "/nonexistent") / "test" / REAL_FILE
    if not test.is_file():
        raise SystemExit(f"--real needs $TORCH_ROOT/test/{REAL_FILE} (not found: {test})")
    names = args.select or [REAL_SELECT]
    ootest = [sys.executable, "-m", "ootest.cli"]
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "real.yaml"
        cfg.write_text(
            "test_suite_config:\n"
            f"  device: {args.device}\n"
            "  files:\n"
            f"    - path: {json.dumps(str(test))}\n"
            "      unlisted_test_mode: skip\n"
            "      tests:\n"
            f"        - names: {json.dumps(names)}\n"
        )
        # warm the emu build, the OS's file cache and the plan cache for both
        timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
               "--ootest-config", str(cfg), str(test)])  # fmt: skip
        rows: dict[str, list[tuple[float, float, float]]] = {"run": [], "capture": []}
        ran = 0
        for i in range(args.repeat):
            res = Path(d) / f"run{i}" / "results.jsonl"
            wall, cpu = _command([*ootest, "run", str(cfg), "--results", str(res), "-q"])
            per_test, ran = _durations(res)
            rows["run"].append((wall, cpu, per_test))
            db = Path(d) / f"cap{i}" / "ops.db"
            db.parent.mkdir()
            wall, cpu = _command([*ootest, "ops", "capture", str(cfg), "--db", str(db), "-q",
                                  "--device", args.device])  # fmt: skip
            per_test, _ = _durations(db.with_name(db.name + ".capture") / "results.jsonl")
            rows["capture"].append((wall, cpu, per_test))
    print(f"{test} selecting {', '.join(names)} on {args.device}: {ran} variants ran;")
    print(f"{args.repeat} alternating pairs of `ootest run` and `ootest ops capture`")
    print(f"{'':10s} {'wall s':>8s} {'CPU s':>8s} {'per-test s':>11s}   (best of each)")
    for label, vals in rows.items():
        print(f"{label:10s} " + " ".join(f"{min(v[k] for v in vals):8.2f}" for k in range(2))
              + f" {min(v[2] for v in vals):11.2f}")  # fmt: skip
    for k, what in enumerate(("wall", "CPU", "per-test")):
        pairs = [c[k] / r[k] for r, c in zip(rows["run"], rows["capture"], strict=True)]
        best = min(c[k] for c in rows["capture"]) / min(r[k] for r in rows["run"])
        print(f"ratio {what:9s} best {best:.3f}, median of pairs {statistics.median(pairs):.3f}"
              " (target <= 1.5)")  # fmt: skip


if __name__ == "__main__":
    main()
