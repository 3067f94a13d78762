"""Cost of the op capture (Note [Op capture]) against a plain run of the same tests.

The same test files on the same device, alternately in this one command, best of
--repeat and the median of paired ratios:

- baseline: ``pytest FILES --ootest-device D`` (the plugin, no capture);
- capture:  the same with ``--ootest-ops-capture`` (the recording dispatch mode,
  the streamed capture file).

Target (issue 13): ratio <= 1.5 on the example suite and on a real upstream file.
Files default to the example suite; pass upstream files (a git-ignored local copy,
e.g. ``.cache/upstream/test/test_view_ops.py``) as arguments.

Usage: .venv/bin/python bench/capture_overhead.py [--repeat N] [--device D] [FILE...]
"""

from __future__ import annotations

import argparse
import os
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
