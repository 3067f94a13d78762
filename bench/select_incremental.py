"""Selection after an upgrade: a full ``ootest select run`` vs ``--since`` after a 5% change.

Generates the upstream-style tree of bench/index_build.py (N files, default
1,000, 250 variants each: 250,000), indexes it (``ootest index build`` with the
synthetic collector; torch's test database left out: the change is in the
tree), captures a synthetic op map (each ``@ops`` variant calls its op and
``aten::sum``, each ``@dtypes`` variant ``aten::ones`` and ``aten::add``) and
decides it once (``select run``: the config a team has). Then a helper is
edited in 5% of the files (every variant of those files is modified), the
memory rebuilt, and the same command is timed both ways:

  full         ootest select run --memory NEW.db ... --out full.yaml
  incremental  ootest select run --since OLD.db --memory NEW.db --config suite.yaml ...

Both are command lines (a new process each: imports included), best of
``--repeat``, wall and CPU (the process and its children). The incremental
result is then checked against the full one: every variant must get the same
mode from both configs, as ootest's own config loader decides it.

Usage: python bench/select_incremental.py [--files N] [--repeat R] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from index_build import DTYPES, OPS, generate, source, synthetic

from ootest.memory import BuildOptions, build_index
from ootest.opmap.ingest import ingest_records
from ootest.opmap.store import OpStore

SUPPORTED_OPS = [o for o in OPS if o not in ("cumsum", "matmul", "sin")] + ["sum", "ones"]
SUPPORTED_DTYPES = ["float32", "float16", "bfloat16", "int64", "bool", "int32"]


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_cli(args: list[str], repeat: int) -> tuple[float, float, str]:
    """Best-of-``repeat`` (wall, CPU) of ``ootest ARGS`` as a command line; stderr of the last."""
    best: tuple[float, float] | None = None
    err = ""
    for _ in range(repeat):
        c0, t0 = _cpu_children(), time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "ootest.cli", *args], capture_output=True, text=True
        )
        wall, cpu = time.perf_counter() - t0, _cpu_children() - c0
        if r.returncode != 0:
            sys.exit(f"ootest {' '.join(args)} failed:\n{r.stderr[-3000:]}")
        err = r.stderr
        if best is None or wall < best[0]:
            best = (wall, cpu)
    assert best is not None
    return best[0], best[1], err


def capture(db: Path, n_files: int) -> None:
    """A synthetic op map for every variant the synthetic collector lists."""
    recs: list[dict[str, object]] = [
        {
            "kind": "provenance",
            "torch_version": "2.13.0",
            "torch_git": "bench",
            "device": "emu",
            "profile": "full",
            "ootest_version": "bench",
            "time": 1.0,
        }
    ]
    for i in range(n_files):
        key, cls = f"test/test_gen_{i:04d}.py", f"TestGen{i}"
        for j in range(5):
            for op in OPS:
                for d in ("float32", "float64", "int64", "bfloat16"):
                    vid = f"{key}::{cls}::test_op_{j}[op={op},dtype={d}]"
                    recs.append(_ops(vid, key, {f"aten::{op}": 1, "aten::sum": 1}))
                    recs.append(_stop(vid))
        for j in range(5):
            for d in DTYPES:
                vid = f"{key}::{cls}::test_dtype_{j}[dtype={d}]"
                recs.append(_ops(vid, key, {"aten::ones": 1, "aten::add.Tensor": 1}))
                recs.append(_stop(vid))
    with OpStore.open(db, create=True) as store:
        ingest_records(store, recs, source="bench")


def _ops(vid: str, key: str, ops: dict[str, int]) -> dict[str, object]:
    return {
        "kind": "ops",
        "variant_id": vid,
        "nodeid": vid,
        "file": key,
        "mode": "eager",
        "ops": ops,
    }


def _stop(vid: str) -> dict[str, object]:
    return {"kind": "stop", "variant_id": vid, "op": None, "outcome": "passed", "error": None}


def modes(config: Path, root: Path, vids: list[str]) -> dict[str, str]:
    from ootest.config.decide import decide
    from ootest.config.load import load_config
    from ootest.config.when import Context
    from ootest.opmap.enable import variant_from_id

    cfg = load_config(config, env={"TORCH_ROOT": str(root)}, check_paths=False)
    files = {f.path.as_posix().rpartition("/test/")[2]: f for f in cfg.files}
    ctx = Context()
    out = {}
    for vid in vids:
        rf = files[vid.partition("::")[0].rpartition("/")[2]]
        out[vid] = decide(rf, cfg.suite.global_, variant_from_id(vid), ctx).mode
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--change", type=float, default=0.05, help="share of files edited")
    p.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = p.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-select-bench-"))
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    tree = base / "tree" / "test"
    generate(tree, args.files)
    old, new, ops = base / "old.db", base / "new.db", base / "ops.db"
    t0 = time.perf_counter()
    build_index(
        BuildOptions(roots=(tree,), db=old, torch_db=False, jobs=args.jobs), collector=synthetic
    )
    print(f"memory of {args.files:,} files built in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    capture(ops, args.files)
    print(f"op map captured in {time.perf_counter() - t0:.1f} s")
    (base / "sup.txt").write_text("\n".join(SUPPORTED_OPS) + "\n")
    flags = ["--ops", str(ops), "--supported", str(base / "sup.txt")]
    flags += ["--dtypes", ",".join(SUPPORTED_DTYPES)]
    suite = base / "suite.yaml"
    w, _c, err = timed_cli(["select", "run", "--memory", str(old), *flags, "--out", str(suite)], 1)
    print(f"decided the old tree: {w:.1f} s; {err.strip().splitlines()[0] if err.strip() else ''}")

    shutil.copy(old, new)
    n = max(1, round(args.files * args.change))
    for i in sorted(random.Random(0).sample(range(args.files), n)):
        (tree / f"test_gen_{i:04d}.py").write_text(source(i, rev=1))
    rep = build_index(
        BuildOptions(roots=(tree,), db=new, torch_db=False, jobs=args.jobs), collector=synthetic
    )
    print(f"{n} of {args.files} files edited (a helper): {rep.summary()}")

    full_w, full_c, _ = timed_cli(
        ["select", "run", "--memory", str(new), *flags, "--out", str(base / "full.yaml")],
        args.repeat,
    )
    inc_args = ["select", "run", "--since", str(old), "--memory", str(new)]
    inc_args += ["--config", str(suite), *flags, "--out", str(base / "inc.yaml")]
    inc_w, inc_c, err = timed_cli(inc_args, args.repeat)
    said = re.search(r"evaluated [\d,]+ of [\d,]+ variants[^\n]*", err)
    print(f"full:        {full_w:7.2f} s wall, {full_c:7.2f} s CPU")
    print(f"incremental: {inc_w:7.2f} s wall, {inc_c:7.2f} s CPU  ({said[0] if said else err})")
    print(
        f"ratio incremental / full: {inc_w / full_w:.3f} wall, {inc_c / full_c:.3f} CPU "
        "(target <= 0.10)"
    )

    # the same outcome: every variant gets one mode from both configs
    rows = (base / "full.evidence.jsonl").read_text().splitlines()
    vids = [json.loads(x)["decision"]["variant_id"] for x in rows]
    a = modes(base / "full.yaml", base / "tree", vids)
    b = modes(base / "inc.yaml", base / "tree", vids)
    diff = [v for v in vids if a[v] != b[v]]
    print(
        f"check: {len(vids) - len(diff):,} of {len(vids):,} variants get the same mode from "
        f"both configs" + (f"; differ: {diff[:5]}" if diff else "")
    )
    sizes = ", ".join(
        f"{x.name} {x.stat().st_size / 1e6:.1f} MB"
        for x in (suite, base / "suite.evidence.jsonl", new)
    )
    print(f"sizes: {sizes}")
    if not args.keep:
        shutil.rmtree(base)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
