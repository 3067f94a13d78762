"""Op map at scale: ingest, queries and index size on a synthetic capture.

Builds a capture of 250,000 variants x 20 ops (5,000,000 edges) over a
vocabulary of about 1,500 overloads in about 600 packets, drawn Zipf-like (a
few ops, such as ``aten::empty_strided``, are in nearly every test; most are
rare), then measures through the Python API the CLI uses:

  ingest      JSON lines -> index (one transaction), edges per second, and
              the ratio to only parsing the lines with json.loads (the floor
              for any ingester written in Python)
  tests-for   p50/p95 over 200 random ops (uniform over the vocabulary, as a
              person asking about "their" op would be), the first 50 variants
              and the total, as the CLI's table shows; the same for the
              heaviest op with every variant fetched (what --json returns)
  for-test    p50/p95 over 200 random variants (exact IDs)
  missing     ranking and a 10-op plan against a 300-op support list
  CLI         one `ootest ops for-test` process, against `python -c pass`

Targets: p95 < 20 ms for both queries, missing < 2 s. Not a test.
With ``--dtypes`` every (variant, op) also gets a ``dtypes`` record (one call
signature, one in ten ops a second one), as captures write since schema 2.

Usage: python bench/opmap_queries.py [--variants N] [--ops-per-variant K] [--dtypes]
       [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ootest.opmap.ingest import ingest_files  # noqa: E402
from ootest.opmap.missing import missing  # noqa: E402
from ootest.opmap.names import SupportSet  # noqa: E402
from ootest.opmap.store import OpStore  # noqa: E402

OVERLOADS = ("Tensor", "Scalar", "out", "dim", "int", "self", "other", "values", "default")
FILES = 60
SIGS = (["float32"], ["float32", "int64"])


def vocabulary(n_ops: int, rng: random.Random) -> list[str]:
    """About ``n_ops`` overload names in packets of 1-5 overloads, in Zipf rank order."""
    names: list[str] = []
    k = 0
    while len(names) < n_ops:
        base = f"op{k}"
        k += 1
        for ov in rng.sample(OVERLOADS, rng.randint(1, 5)):
            names.append(f"aten::{base}" if ov == "default" else f"aten::{base}.{ov}")
        if rng.random() < 0.15:  # an in-place packet
            names.append(f"aten::{base}_.Tensor")
    names = names[:n_ops]
    rng.shuffle(names)  # popularity does not follow the packet order
    return names


def write_capture(
    path: Path, n_var: int, per: int, vocab: list[str], seed: int, dtypes: bool = False
) -> None:
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** 1.1 for r in range(len(vocab))]
    cum: list[float] = []
    total = 0.0
    for w in weights:
        total += w
        cum.append(total)
    with path.open("w") as fh:
        fh.write(
            json.dumps(
                {
                    "kind": "provenance",
                    "torch_version": "2.13.0",
                    "torch_git": "0" * 40,
                    "device": "emu",
                    "profile": "full",
                    "ootest_version": "0.1.0",
                    "time": 1733320000.0,
                }
            )
            + "\n"
        )
        for i in range(n_var):
            ops: set[str] = set()
            while len(ops) < per:
                ops.update(rng.choices(vocab, cum_weights=cum, k=per - len(ops)))
            f = f"test/test_f{i % FILES}.py"
            vid = f"{f}::TestC{i % 97}::test_m{i}[op=o{i % 500},dtype=float32]"
            rec = {
                "kind": "ops",
                "variant_id": vid,
                "nodeid": vid,
                "file": f,
                "mode": "eager",
                "ops": {o: rng.randint(1, 9) for o in ops},
            }
            fh.write(json.dumps(rec) + "\n")
            if dtypes:  # one call signature per op, a few ops with a second one
                for o in ops:
                    for sig in SIGS[: 1 + (rng.random() < 0.1)]:
                        d = {"kind": "dtypes", "variant_id": vid, "op": o, "dtypes": sig}
                        fh.write(json.dumps(d) + "\n")
            fh.write(json.dumps({"kind": "stop", "variant_id": vid, "outcome": "passed"}) + "\n")


def timed(fn: Callable[[], object], n: int = 1) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def build(cap: Path, db: Path, args: argparse.Namespace, vocab: list[str]) -> None:
    """Write the capture, ingest it, and print the ingest numbers."""
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    t = time.perf_counter()
    write_capture(cap, args.variants, args.ops_per_variant, vocab, seed=1, dtypes=args.dtypes)
    print(f"capture written: {cap.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s")

    t = time.perf_counter()
    with cap.open() as fh:
        for line in fh:
            json.loads(line)
    parse_only = time.perf_counter() - t
    store = OpStore.open(db, create=True)
    rep = ingest_files(store, [cap])
    store.close()
    size = db.stat().st_size + sum(p.stat().st_size for p in (Path(f"{db}-wal"),) if p.exists())
    edges = rep.edges
    print(
        f"ingest: {rep.variants:,} variants, {edges:,} edges in {rep.seconds:.1f} s "
        f"({edges / rep.seconds / 1e6:.2f} M edges/s); index {size / 1e6:.0f} MB "
        f"= {size / 1e6 / (edges / 1e6):.1f} MB per million edges"
    )
    print(
        f"  baseline: json.loads of every line alone {parse_only:.1f} s; "
        f"ingest / parse = {rep.seconds / parse_only:.1f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=250_000)
    ap.add_argument("--ops-per-variant", type=int, default=20)
    ap.add_argument("--vocab", type=int, default=1500)
    ap.add_argument("--keep", type=Path, default=None, help="build in DIR and keep it")
    ap.add_argument(
        "--dtypes",
        action="store_true",
        help="a dtypes record (call signature) per variant and op, as captures write since "
        "schema 2",
    )
    ap.add_argument(
        "--queries-only", action="store_true", help="reuse the index in --keep DIR: queries only"
    )
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress in logs
    rng = random.Random(0)
    work = args.keep or Path(tempfile.mkdtemp(prefix="opmap-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary(args.vocab, rng)
    cap = work / "capture.jsonl"
    db = work / "ops.db"
    if args.queries_only:
        if args.keep is None or not db.is_file():
            sys.exit("--queries-only needs --keep DIR holding ops.db from an earlier run")
    else:
        build(cap, db, args, vocab)

    store = OpStore.open(db)
    ops = [n for _, n in store.all_ops()]
    variants = store.all_variant_ids()
    qrng = random.Random(2)
    op_q = [qrng.choice(ops) for _ in range(200)]
    var_q = [qrng.choice(variants) for _ in range(200)]
    store.tests_for(op_q[0], limit=50)  # warm the page cache, as a second query would
    tf = [timed(lambda o=o: store.tests_for(o, limit=50))[0] for o in op_q]
    ft = [timed(lambda v=v: store.for_test(v))[0] for v in var_q]
    heavy = store.stats(top=1).top_ops[0]
    full = timed(lambda: store.tests_for(heavy[0]), 3)
    overloads: dict[str, int] = {}
    for n in ops:
        overloads[n.partition(".")[0]] = overloads.get(n.partition(".")[0], 0) + 1
    packet = next(p for p in (n.partition(".")[0] for n in vocab) if overloads[p] > 1)
    pk = timed(lambda: store.tests_for(packet, limit=50), 5)
    print(
        f"tests-for (first 50 + total): p50 {pct(tf, 0.5) * 1e3:.2f} ms, "
        f"p95 {pct(tf, 0.95) * 1e3:.2f} ms, max {max(tf) * 1e3:.1f} ms (target p95 < 20 ms)"
    )
    print(
        f"tests-for the heaviest op {heavy[0]} ({heavy[1]:,} variants, all fetched): "
        f"best {min(full) * 1e3:.0f} ms; the most popular multi-overload packet "
        f"{packet} (first 50 + total): best {min(pk) * 1e3:.0f} ms"
    )
    print(
        f"for-test: p50 {pct(ft, 0.5) * 1e3:.2f} ms, p95 {pct(ft, 0.95) * 1e3:.2f} ms, "
        f"max {max(ft) * 1e3:.1f} ms (target p95 < 20 ms)"
    )
    supported = SupportSet.from_names(vocab[:300], "bench: the 300 most used ops")
    ms = timed(lambda: missing(store, supported, top=10), 5)
    rep_m = missing(store, supported, top=10)
    print(
        f"missing (300 supported ops, top 10 plan): best {min(ms):.2f} s, "
        f"median {statistics.median(ms):.2f} s "
        f"(target < 2 s); {rep_m.blocked:,} of {rep_m.total:,} variants blocked, "
        f"plan unblocks {rep_m.plan[-1].cumulative if rep_m.plan else 0:,}"
    )
    store.close()

    cli = [sys.executable, "-m", "ootest.cli", "ops", "for-test", var_q[0], "--db", str(db)]
    t_cli = min(timed(lambda: subprocess.run(cli, check=True, capture_output=True), 5))
    t_py = min(timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 5))
    print(
        f"CLI `ootest ops for-test`: best {t_cli * 1e3:.0f} ms "
        f"(python -c pass: {t_py * 1e3:.0f} ms; ratio {t_cli / t_py:.1f}x)"
    )
    if args.keep is None:
        for p in sorted(work.iterdir()):
            p.unlink()
        work.rmdir()


if __name__ == "__main__":
    main()
