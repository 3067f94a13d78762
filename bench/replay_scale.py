"""What selection pays to read a replay at scale (Note [Replaying calls]).

A synthetic op map of N variants, each with K call examples drawn from a pool of
P distinct calls (a real test tree repeats its calls: the example suite's 59
variants make 251 distinct ones), and a replay file in which one call in 50
failed. Measured, best of --repeat, process time:

  ingest        the capture records (ops, examples, stops) into a new index
  example_keys  ``OpStore.example_keys``: every variant's example keys
  replay        ``select.gather.replay_faults``: per variant, its misbehaving
                calls and the ops all of whose calls replayed ok (what
                ``select run --replay`` adds to a full run)
  baseline      ``select.gather._op_map`` on the same index: the op evidence
                every ``select run --ops`` reads; the replay's cost is printed
                as a ratio to it

No torch, no device: the replay itself (running the calls) is measured by
``select_quality.py``. Not a test.

Usage: python bench/replay_scale.py [--variants N] [--examples K] [--pool P] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ootest.device.calls import example_key  # noqa: E402
from ootest.opmap.ingest import ingest_records  # noqa: E402
from ootest.opmap.replay import Replay, write_replay  # noqa: E402
from ootest.opmap.store import OpStore  # noqa: E402
from ootest.select.gather import _op_map, replay_faults  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=250_000)
    ap.add_argument("--examples", type=int, default=10)
    ap.add_argument("--pool", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    rnd = random.Random(1)
    pool = [
        (
            f"aten::op{i % 700}",
            json.dumps(
                {"args": [{"T": "float32", "dev": True, "shape": [i % 97 + 1]}], "kwargs": {}},
                sort_keys=True,
                separators=(",", ":"),
            ),
        )
        for i in range(args.pool)
    ]
    recs: list[dict[str, object]] = [
        {"kind": "provenance", "torch_version": "2.13.0", "device": "emu", "time": 1.0}
    ]
    for v in range(args.variants):
        vid = f"test/test_f{v % 1000}.py::T::test_{v}"
        picks = rnd.sample(range(args.pool), args.examples)
        recs.append({"kind": "ops", "variant_id": vid, "ops": {pool[i][0]: 1 for i in picks}})
        recs += [
            {"kind": "example", "variant_id": vid, "op": pool[i][0], "call": pool[i][1]}
            for i in picks
        ]
        recs.append({"kind": "stop", "variant_id": vid, "outcome": "passed"})
    with tempfile.TemporaryDirectory(prefix="ootest-replay-scale-") as tmp:
        db, out = Path(tmp) / "ops.db", Path(tmp) / "replay.jsonl"
        t = time.process_time()
        with OpStore.open(db, create=True) as store:
            ingest_records(store, recs, source="synthetic")
        ingest = time.process_time() - t
        rep = Replay({"kind": "replay"})
        for i, (op, call) in enumerate(pool):
            key = example_key(op, call)
            status = "failed" if i % 50 == 0 else "ok"
            rep.results[key] = {"kind": "call", "key": key, "op": op, "status": status}
        write_replay(out, rep)
        keys_s, replay_s, base_s = [], [], []
        for _ in range(args.repeat):
            t = time.process_time()
            _op_map(db)
            base_s.append(time.process_time() - t)
            t = time.process_time()
            with OpStore.open(db) as store:
                keys = store.example_keys()
            keys_s.append(time.process_time() - t)
            t = time.process_time()
            faults, worked = replay_faults(db, out)
            replay_s.append(time.process_time() - t)
        size = db.stat().st_size / 1e6
    links = args.variants * args.examples
    print(f"{args.variants:,} variants x {args.examples} examples from {args.pool:,} calls")
    print(f"ingest (with ops and stops): {ingest:.1f} s CPU; index {size:.0f} MB")
    print(f"example_keys: best {min(keys_s):.2f} s CPU ({len(keys):,} variants, {links:,} links)")
    print(
        f"replay_faults: best {min(replay_s):.2f} s CPU ({len(faults):,} variants with a "
        f"misbehaving call, {len(worked):,} with ops replayed ok)"
    )
    print(
        f"baseline, the op evidence of a full select run (_op_map): best {min(base_s):.2f} s "
        f"CPU; replay / baseline {min(replay_s) / min(base_s):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
