"""What failing tests cost to report: ``ootest run`` of the same variants with
Note [The cost of a failing test]'s two measures off (``OOTEST_FAST_REPORTS=0``)
and on, alternated in one command, and the results compared variant by variant
(outcome, message, frames: they must be identical).

Usage: python bench/report_cost.py CONFIG [--device emu:young] [-k EXPR] [--repeat 1]

Without a CONFIG of your own, ``examples/emu_young.yaml`` (the bundled suite:
few failures, little to see); the numbers in bench/README.md come from a slice of
a whole upstream file (a git-ignored copy, ``TORCH_ROOT`` set to its root).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def results(path: Path) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if "variant_id" in r:
                out[r["variant_id"]] = (
                    r["outcome"],
                    r.get("message"),
                    tuple(r.get("frames") or ()),
                )
    return out


def run(config: str, device: str, expr: str | None, fast: bool, res: Path) -> tuple[float, float]:
    env = {**os.environ, "OOTEST_FAST_REPORTS": "1" if fast else "0"}
    cmd = [sys.executable, "-m", "ootest.cli", "run", config, "--device", device, "-q",
           "--results", str(res)]  # fmt: skip
    if expr:
        cmd += ["--", "-k", expr]
    t0 = time.perf_counter()
    before = os.times()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = os.times()
    cpu = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    return time.perf_counter() - t0, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("config", nargs="?", default=str(ROOT / "examples" / "emu_young.yaml"))
    p.add_argument("--device", default="emu:young")
    p.add_argument("-k", dest="expr")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ootest-report-cost-"))
    rows: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    seen: dict[bool, dict[str, tuple[object, ...]]] = {}
    for i in range(args.repeat):
        for fast in (False, True):
            res = work / f"{'on' if fast else 'off'}{i}" / "results.jsonl"
            rows[fast].append(run(args.config, args.device, args.expr, fast, res))
            seen[fast] = results(res)
    off, on = seen[False], seen[True]
    failed = sum(1 for r in on.values() if r[0] in ("failed", "error"))
    differ = sorted(v for v in off.keys() | on.keys() if off.get(v) != on.get(v))
    print(f"{len(on)} variants ({failed} failed); load {os.getloadavg()[0]:.1f}")
    print("| OOTEST_FAST_REPORTS | wall s | CPU s (process tree) |")
    print("|---|---:|---:|")
    for fast in (False, True):
        walls = ", ".join(f"{w:.1f}" for w, _ in rows[fast])
        cpus = ", ".join(f"{c:.1f}" for _, c in rows[fast])
        print(f"| {'1 (default)' if fast else '0'} | {walls} | {cpus} |")
    best = min(w for w, _ in rows[False]) / min(w for w, _ in rows[True])
    print(f"off / on, best of each: {best:.2f}x; results differing: {len(differ)}")
    for v in differ[:5]:
        print(f"  {v}: {off.get(v)} != {on.get(v)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
