"""``ootest ops capture --shard I/N`` on emu:full, as each leg of the capture
workflow runs it: split by durations, a shard record in its index (Note [Shard
records]) that ``ops merge`` checks, and ``--resume`` going on with the same
capture only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import ootest

FILE = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestShards(TestCase):
    def test_add(self, device):
        torch.ones(2, device=device).add(1)

    def test_mul(self, device):
        torch.ones(2, device=device).mul(2)

    def test_neg(self, device):
        torch.ones(2, device=device).neg()

    def test_abs(self, device):
        torch.ones(2, device=device).abs()


instantiate_device_type_tests(TestShards, globals())
"""
TREE = "e" * 40


def _record(db: Path) -> dict[str, object]:
    c = sqlite3.connect(db)
    try:
        (value,) = c.execute("SELECT value FROM meta WHERE key = 'shard'").fetchone()
    finally:
        c.close()
    out: dict[str, object] = json.loads(value)
    return out


def _results(db: Path) -> list[str]:
    lines = (db.parent / (db.name + ".capture") / "results.jsonl").read_text().splitlines()
    return [json.loads(x)["variant_id"] for x in lines if json.loads(x).get("kind") == "result"]


def test_shards_record_themselves_merge_when_all_arrived_and_resume(tmp_path: Path) -> None:
    (tmp_path / "test_sh.py").write_text(FILE)
    # durations: test_add (9 s) outweighs the other three (1 s each): shard 1 to itself
    vid = f"{tmp_path.name}/test_sh.py::TestShards::test_add"
    durations = tmp_path / "durations.jsonl"
    durations.write_text(
        "".join(
            json.dumps({"kind": "result", "variant_id": vid.replace("add", name), "file": "x",
                        "outcome": "passed", "duration": 9 if name == "add" else 1}) + "\n"
            for name in ("add", "mul", "neg", "abs")
        )
    )  # fmt: skip

    def capture(i: int, *extra: str) -> tuple[Path, str]:
        db = tmp_path / f"s{i}.db"
        r = ootest(
            "ops", "capture", "test_sh.py", "--device", "emu:full", "--db", str(db), "-q",
            "--shard", f"{i}/2", "--tree-commit", TREE, "--durations", str(durations), *extra,
            cwd=tmp_path,
        )  # fmt: skip
        assert r.returncode in (0, 2), r.stdout[-3000:] + r.stderr[-3000:]
        return db, r.stderr if r.returncode else ""

    s1, _ = capture(1)
    s2, _ = capture(2, "--resume")  # nothing to resume yet: a fresh capture, as a first attempt
    first, second = _results(s1), _results(s2)
    assert len(first) + len(second) == 4 and not set(first) & set(second)
    assert len(first) == 1 and first[0] == vid, first
    rec = _record(s1)
    assert (rec["shard"], rec["tree_commit"], rec["finished"]) == ("1/2", TREE, True)
    assert rec["torch_version"] == _record(s2)["torch_version"]
    # one shard alone is refused; both merge
    alone = ootest("ops", "merge", str(s1), "--db", str(tmp_path / "all.db"), cwd=tmp_path)
    assert alone.returncode == 2 and "missing shard(s) 2 of 2" in alone.stderr, alone.stderr
    both = ootest("ops", "merge", str(s1), str(s2), "--db", str(tmp_path / "all.db"))
    assert both.returncode == 0, both.stderr
    assert f"all 2 shard(s) of torch {rec['torch_version']} at tree {TREE}" in both.stdout
    # --resume goes on with what the folder holds: nothing of the shard runs again
    _, err = capture(2, "--resume")
    assert err == "" and _results(s2) == second
    # and refuses a folder holding another capture (here: another tree) in one line
    _, err = capture(2, "--resume", "--tree-commit", "f" * 40)
    assert err.startswith(f"ootest: error: ops capture --resume: {s2}.capture holds a capture of ")
    assert err.rstrip().endswith("; run without --resume to start over")
    assert len(err.strip().splitlines()) == 1
