"""Time and peak memory of each pipeline step at two sizes (default 25,000 and
250,000 variants), measured side by side in one command.

The tree is bench/index_build.py's synthetic upstream-style one (250 variants per
file); each step runs as its own child process, so its peak RSS is its own
(``os.wait4``): wall and CPU seconds and peak RSS per step and size, then the
growth large / small. Memory that follows the input (a 10x tree) grows ~10x; a
step whose memory is bounded grows far less.

  index    ``build_index`` of the tree with the synthetic collector (what pytest
           would list; collection itself is measured by index_build.py)
  ingest   ``ootest ops ingest`` of a capture stream per shard (2 shards; each
           variant calls its op, ``aten::sum`` and per dtype test ``aten::ones``,
           ``aten::add.Tensor``, with a ``dtypes`` line per call and a ``stop``)
  merge    ``ootest ops merge`` of the two shard indexes
  select   ``ootest select run --memory --ops --supported --dtypes`` (a config and
           its evidence sidecar)
  review   ``ootest select review --html`` of that config
  report   ``ootest report --format html`` and ``--format summary`` of a run's
           results in which every variant ended as its decision says (6% of the
           mandatory ones failing on a missing kernel), ``--ops`` for the coverage

No torch, no device (replaying calls is measured by replay_scale.py and
select_quality.py). Not a test.

Usage: python bench/scale_steps.py [--small FILES] [--large FILES] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from index_build import DTYPES, OP_DTYPES, OPS, generate

SUPPORTED_OPS = [o for o in OPS if o not in ("cumsum", "matmul", "sin")] + ["sum", "ones"]
SUPPORTED_DTYPES = ["float32", "float16", "bfloat16", "int64", "bool", "int32"]
HERE = Path(__file__).resolve().parent


def step(argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    t = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)  # fmt: skip
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({p.returncode}):\n{err.decode()[-3000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def ootest(*args: str) -> list[str]:
    return [sys.executable, "-m", "ootest.cli", *args]


def variants(n_files: int) -> list[tuple[str, str, list[str], str]]:
    """(variant ID, file key, ops, dtype) of every variant of the synthetic tree."""
    out = []
    for i in range(n_files):
        key, cls = f"test/test_gen_{i:04d}.py", f"TestGen{i}"
        for j in range(5):
            for op in OPS:
                for d in OP_DTYPES:
                    vid = f"{key}::{cls}::test_op_{j}[op={op},dtype={d}]"
                    out.append((vid, key, [f"aten::{op}", "aten::sum"], d))
        for j in range(5):
            for d in DTYPES:
                vid = f"{key}::{cls}::test_dtype_{j}[dtype={d}]"
                out.append((vid, key, ["aten::ones", "aten::add.Tensor"], d))
    return out


def capture_streams(folder: Path, vs: list[tuple[str, str, list[str], str]]) -> list[Path]:
    prov = {"kind": "provenance", "torch_version": "2.13.0", "torch_git": "bench",
            "device": "emu", "profile": "full", "ootest_version": "bench", "time": 1.0}  # fmt: skip
    paths = [folder / "shard0.jsonl", folder / "shard1.jsonl"]
    outs = [p.open("w") for p in paths]
    for o in outs:
        o.write(json.dumps(prov) + "\n")
    for k, (vid, key, ops, d) in enumerate(vs):
        o = outs[k % 2]
        o.write(json.dumps({"kind": "ops", "variant_id": vid, "nodeid": vid, "file": key,
                            "mode": "eager", "ops": {op: 1 for op in ops}}) + "\n")  # fmt: skip
        for op in ops:
            o.write(json.dumps({"kind": "dtypes", "variant_id": vid, "op": op,
                                "dtypes": [d]}) + "\n")  # fmt: skip
        o.write(json.dumps({"kind": "stop", "variant_id": vid, "op": None,
                            "outcome": "passed", "error": None}) + "\n")  # fmt: skip
    for o in outs:
        o.close()
    return paths


def results(folder: Path, sidecar: Path) -> Path:
    """A run's results as the decisions say (6% of the mandatory ones failing)."""
    rnd = random.Random(0)
    path = folder / "results.jsonl"
    with sidecar.open() as src, path.open("w") as out:
        for line in src:
            d = json.loads(line)["decision"]
            vid, mode, reason = d["variant_id"], d["mode"], d["reason"]
            rec: dict[str, Any] = {"kind": "result", "variant_id": vid, "nodeid": vid,
                                   "file": vid.partition("::")[0], "mode": mode,
                                   "duration": 0.01, "reason": reason,
                                   "code": reason.split(":")[0]}  # fmt: skip
            if mode == "skip":
                rec.update(outcome="skipped", evidence=d["evidence"][:3])
            elif mode.startswith("xfail"):
                rec.update(outcome="xfailed", evidence=d["evidence"][:3], message="E   boom")
            elif rnd.random() < 0.06:
                rec.update(outcome="failed", message="Could not run 'aten::sum' with arguments")
            else:
                rec.update(outcome="passed")
            out.write(json.dumps(rec) + "\n")
    return path


def measure(base: Path, n_files: int) -> tuple[int, dict[str, tuple[float, float, float]]]:
    w = base / f"n{n_files}"
    if w.exists():
        shutil.rmtree(w)
    tree = w / "tree" / "test"
    generate(tree, n_files)
    out: dict[str, tuple[float, float, float]] = {}
    code = (
        "from pathlib import Path; from index_build import synthetic; "
        "from ootest.memory import BuildOptions, build_index; "
        f"build_index(BuildOptions(roots=(Path({str(tree)!r}),), db=Path('memory.db'), "
        "torch_db=False, jobs=1), collector=synthetic)"
    )
    out["index"] = step([sys.executable, "-c", code], w)
    vs = variants(n_files)
    shards = capture_streams(w, vs)
    ingest = (0.0, 0.0, 0.0)
    for i, s in enumerate(shards):  # one shard after the other: the largest counts
        t = step(ootest("ops", "ingest", "--db", f"shard{i}.db", str(s)), w)
        ingest = (ingest[0] + t[0], ingest[1] + t[1], max(ingest[2], t[2]))
    out["ingest"] = ingest
    out["merge"] = step(ootest("ops", "merge", "--db", "ops.db", "shard0.db", "shard1.db"), w)
    (w / "sup.txt").write_text("\n".join(SUPPORTED_OPS) + "\n")
    out["select"] = step(
        ootest("select", "run", "--memory", "memory.db", "--ops", "ops.db", "--supported",
               "sup.txt", "--dtypes", ",".join(SUPPORTED_DTYPES), "--out", "suite.yaml"),
        w,
    )  # fmt: skip
    out["review"] = step(ootest("select", "review", "suite.yaml", "--html", "review.html"), w)
    res = results(w, w / "suite.evidence.jsonl")
    html = step(ootest("report", str(res), "--format", "html", "--ops", "ops.db",
                       "-o", "report.html"), w)  # fmt: skip
    md = step(ootest("report", str(res), "--format", "summary", "--ops", "ops.db",
                     "-o", "summary.md"), w)  # fmt: skip
    out["report html"], out["report summary"] = html, md
    return len(vs), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=100, help="files (250 variants each)")
    ap.add_argument("--large", type=int, default=1000)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    n_small, small = measure(base, args.small)
    n_large, large = measure(base, args.large)
    print(f"{'step':<15} {n_small:>9,} variants{'':>14} {n_large:>9,} variants{'':>14} growth")
    print(f"{'':<15} {'wall':>7} {'CPU':>7} {'peak MB':>8}   {'wall':>7} {'CPU':>7} "
          f"{'peak MB':>8}   {'CPU':>5} {'RSS':>5}")  # fmt: skip
    for name in small:
        a, b = small[name], large[name]
        print(f"{name:<15} {a[0]:>6.1f}s {a[1]:>6.1f}s {a[2]:>8.0f}   {b[0]:>6.1f}s "
              f"{b[1]:>6.1f}s {b[2]:>8.0f}   {b[1] / max(a[1], 1e-3):>4.1f}x "
              f"{b[2] / max(a[2], 1e-3):>4.1f}x")  # fmt: skip
    if not args.keep:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
