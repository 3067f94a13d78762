"""What hostile dispatches cost the gate, against an ordinary dispatch, in one run.

Whole command (`ootest relay gate FILE`, best of N wall) and in-process
(`parse_envelope` + `gate` on the bytes, best of N), each as a ratio of the
ordinary dispatch measured in the same run. Every hostile case must be refused
with exit 2 in about the time of an ordinary one.
Usage: python bench/relay_hostile.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ootest.relay.gate import EnvelopeError, RelayPolicy, gate, parse_envelope

SHA = "a" * 40


def dispatch(**extra: object) -> dict[str, object]:
    pr = {"number": 12345, "labels": [{"name": "ciflow/crcr/emu"}], "head": {"sha": SHA}}
    payload = {"action": "opened", "repository": {"full_name": "pytorch/pytorch"}}
    payload["pull_request"] = {**pr, **extra}
    return {"event_type": "pull_request", "delivery_id": "d-1", "payload": payload}


def event(client_payload: object) -> bytes:
    return json.dumps({"action": "pull_request", "client_payload": client_payload}).encode()


def cases() -> dict[str, bytes]:
    mb = 1_000_000
    unit = '\\"[{'  # a backslash, a quote and brackets: 6 bytes once JSON-encoded
    return {
        "ordinary dispatch": event(dispatch()),
        "1,000 levels": b'{"client_payload": ' + b"[" * 1_000 + b"]" * 1_000 + b"}",
        "100,000 levels": b"[" * 100_000 + b"]" * 100_000,
        "10 MB event": event({**dispatch(), "pad": "x" * (10 * mb)}),
        "1 MB of '['": b"[" * (mb - 1),
        "1 MB of '[]' pairs": b"[" + b"[]," * (mb // 3 - 1) + b"[]]",
        "990 KB of string escapes": event({**dispatch(), "pad": unit * 165_000}),
        "60 KB payload, 64 KB cap": event(dispatch(title=unit * 10_000)),
        "5,000 labels": event(dispatch(labels=[{"name": "x"}] * 5_000)),
    }


def best(fn: Callable[[], object], repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def in_process(raw: bytes) -> str:
    try:
        res = gate(parse_envelope(raw), RelayPolicy(device="emu"))
    except EnvelopeError as e:
        return "refused: " + str(e).split("; ")[0][:70]
    return f"{'run' if res.run else 'skip'}: {res.reason}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    repeat = ap.parse_args().repeat
    with tempfile.TemporaryDirectory() as d:
        rows = []
        for name, raw in cases().items():
            path = Path(d) / "event.json"
            path.write_bytes(raw)
            cmd = [sys.executable, "-m", "ootest.cli", "relay", "gate", str(path)]
            rc = subprocess.run(cmd, capture_output=True).returncode
            wall = best(lambda cmd=cmd: subprocess.run(cmd, capture_output=True), repeat)
            t_in = best(lambda raw=raw: in_process(raw), repeat)
            rows.append((name, len(raw), rc, wall, t_in, in_process(raw)))
    base_wall, base_in = rows[0][3], rows[0][4]
    print(f"{'case':26s} {'bytes':>11s} {'rc':>3s} {'cmd s':>7s} {'x':>6s} {'in-proc ms':>11s} "
          f"{'x':>7s}  outcome")  # fmt: skip
    for name, size, rc, wall, t_in, outcome in rows:
        print(
            f"{name:26s} {size:11,d} {rc:3d} {wall:7.3f} {wall / base_wall:6.2f} "
            f"{t_in * 1e3:11.3f} {t_in / base_in:7.1f}  {outcome}"
        )


if __name__ == "__main__":
    main()
