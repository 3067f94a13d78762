"""Replaying the op map's calls on a faulty device (Note [Replaying calls]), in subprocesses:
capture on emu:full, replay on emu:faulty, decide with the replay."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import ootest, run

SUITE = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestRep(TestCase):
    def test_exp(self, device):  # faulty: every exp result 0.1 % too large
        self.assertEqual(torch.exp(torch.ones(8, device=device)).cpu(), torch.exp(torch.ones(8)))

    def test_abs_int(self, device):  # faulty: integer abs kills the process
        self.assertEqual(torch.tensor([-3, 2], device=device).abs().cpu(), torch.tensor([3, 2]))

    def test_sub(self, device):  # faulty: float sub never returns
        x = torch.ones(4, device=device)
        self.assertEqual((x - x).cpu(), torch.zeros(4))

    def test_add_big(self, device):  # faulty: add fails from 200 elements on
        x = torch.ones(2, 150, device=device)
        self.assertEqual((x + x).cpu(), torch.full((2, 150), 2.0))

    def test_add_small_expanded(self, device):  # small, one argument expanded: fine
        x = torch.ones(1, 3, device=device).expand(4, 3)
        y = torch.ones(4, 3, device=device)
        self.assertEqual((x + y).cpu(), torch.full((4, 3), 2.0))


instantiate_device_type_tests(TestRep, globals())

if __name__ == "__main__":
    run_tests()
"""


def _calls(path: Path) -> tuple[dict[str, object], dict[str, list[dict[str, object]]]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    by_op: dict[str, list[dict[str, object]]] = {}
    for r in lines[1:]:
        by_op.setdefault(str(r["op"]), []).append(r)
    return lines[0], by_op


def test_replay_finds_each_fault_and_selection_uses_it(tmp_path: Path) -> None:
    (tmp_path / "test_rep.py").write_text(SUITE)
    db, out = tmp_path / "ops.db", tmp_path / "replay.jsonl"
    r = ootest("ops", "capture", "test_rep.py", "--device", "emu:full", "--db", str(db), "-q",
               cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    cap = (tmp_path / "ops.db.capture" / "ops.jsonl").read_text().splitlines()
    examples = [json.loads(x) for x in cap if '"kind": "example"' in x]
    assert examples and all(json.loads(e["call"])["args"] for e in examples)

    r = ootest("ops", "replay", "--db", str(db), "--device", "emu:faulty", "--out", str(out),
               "--timeout", "3", "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    head, by_op = _calls(out)
    assert head["kind"] == "replay" and head["device"] == "emu:faulty"
    assert head["torch_version"]

    def statuses(op: str) -> set[object]:
        return {c["status"] for c in by_op[op]}

    assert statuses("aten::exp") == {"mismatch"}
    assert "relative 0.001" in str(by_op["aten::exp"][0]["detail"])
    assert statuses("aten::abs.out") == {"crashed"}  # the int64 call
    assert "SIGSEGV" in str(by_op["aten::abs.out"][0]["detail"])
    assert statuses("aten::sub.Tensor") == {"timeout"}
    assert {c["status"] for c in by_op["aten::add.Tensor"]} == {"ok", "failed"}
    failed = [c for c in by_op["aten::add.Tensor"] if c["status"] == "failed"]
    assert len(failed) == 1 and "TILE_OVERFLOW" in str(failed[0]["detail"])
    assert "calls that do not behave as on the CPU" in r.stdout  # the table

    variants = tmp_path / "v.jsonl"
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_rep.py",
             "--collect-only", "--ootest-device", "emu:faulty", "--ootest-variants",
             str(variants)], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    suite = tmp_path / "suite.yaml"
    common = ["--variants", str(variants), "--ops", str(db), "--device", "emu:faulty"]
    r = ootest("select", "run", *common, "--replay", str(out), "--out", str(suite), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (tmp_path / "suite.evidence.jsonl").read_text().splitlines()]
    got = {
        row["decision"]["variant_id"].split("::")[-1].split("_emu")[0]: (
            row["decision"]["mode"],
            row["decision"]["reason"],
        )
        for row in rows
    }
    assert got == {
        "test_exp": ("xfail", "replay_mismatch:aten::exp"),
        "test_abs_int": ("skip", "replay_crashed:aten::abs.out"),
        "test_sub": ("skip", "replay_timeout:aten::sub.Tensor"),
        # a known failure: skipped, the replay re-checks it (not every CI run)
        "test_add_big": ("skip", "replay_failed:aten::add.Tensor"),
        "test_add_small_expanded": ("mandatory_success", "ops_supported"),
    }
    text = suite.read_text()
    assert "# replayed calls " in text
    assert "replayed call of aten::abs.out crashed: the process died: SIGSEGV" in text

    # a replay of another device is refused before any work
    r = ootest("select", "run", *common[:-1], "emu:young", "--replay", str(out), "--out",
               str(tmp_path / "x.yaml"), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "replayed on emu:faulty, but --device is emu:young" in r.stderr
    assert not (tmp_path / "x.yaml").exists()

    # without the replay the same evidence says: every op declared
    r = ootest("select", "run", *common, "--out", str(tmp_path / "static.yaml"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    static = [json.loads(x) for x in (tmp_path / "static.evidence.jsonl").read_text().splitlines()]
    assert {row["decision"]["reason"] for row in static} == {"ops_supported"}
    assert all("replay" not in row["evidence"] for row in static)  # absent when empty

    # the refresh's replay step: the same command in a child process, on a device
    # without those faults (Note [A known failure is re-checked by the replay])
    from ootest.select.refresh import _ootest_replay

    said: list[str] = []
    young = tmp_path / "young.jsonl"
    _ootest_replay(db, young, device="emu:young", timeout=3.0, say=said.append)
    head, by_op = _calls(young)
    assert head["device"] == "emu:young" and head["complete"] is True
    assert {c["status"] for c in by_op["aten::add.Tensor"]} == {"ok"}
    assert sum(len(v) for v in by_op.values()) == head["examples"]

    # Note [A refresh replays what can change a decision]: with the faulty replay
    # kept, only the calls that did not replay ok run again (the faults, replayed
    # again: the same statuses); the ok ones keep their rows as they were
    again = tmp_path / "again.jsonl"
    slow_before = _calls(out)[1]
    _ootest_replay(db, again, device="emu:faulty", timeout=3.0, say=said.append, keep=out)
    head, by_op = _calls(again)
    ok_before = [c for cs in slow_before.values() for c in cs if c["status"] == "ok"]
    assert head["complete"] is True and head["kept_ok"] == len(ok_before) > 0
    assert sum(len(v) for v in by_op.values()) == head["examples"]
    rows = {c["key"]: c for cs in by_op.values() for c in cs}
    assert all(rows[c["key"]] == c for c in ok_before)  # kept as they were
    assert {c["status"] for c in by_op["aten::exp"]} == {"mismatch"}  # replayed again
    assert {c["status"] for c in by_op["aten::sub.Tensor"]} == {"timeout"}
    # a replay of another device is not kept: one error, nothing written
    r = ootest("ops", "replay", "--db", str(db), "--device", "emu:young", "--out",
               str(tmp_path / "no.jsonl"), "--keep-ok", str(out), "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "a replay on 'emu:faulty', not on 'emu:young'" in r.stderr
    assert not (tmp_path / "no.jsonl").exists()


def test_replay_without_examples_or_device_says_how_to_fix(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"kind": "provenance", "torch_version": "2.13.0", "device": "emu"}) + "\n"
    )
    r = ootest("ops", "ingest", str(tmp_path / "c.jsonl"), "--db", str(db), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = ootest("ops", "replay", "--db", str(db), "--device", "emu:faulty", "--out",
               str(tmp_path / "r.jsonl"), cwd=tmp_path)  # fmt: skip
    assert r.returncode != 0
    assert "holds no call examples" in r.stderr and "Traceback" not in r.stderr
    r = ootest("ops", "replay", "--db", str(db), "--device", "emu:nosuch", "--out",
               str(tmp_path / "r.jsonl"), cwd=tmp_path)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr


HANG = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestHang(TestCase):
    def test_add(self, device):
        torch.ones(3, device=device) + 1

    def test_sub(self, device):  # faulty: float sub never returns
        torch.ones(3, device=device) - 1


instantiate_device_type_tests(TestHang, globals())
"""


def test_a_stopped_replay_keeps_what_it_did_and_stops_its_worker(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    from tests.conftest import spawn_ootest

    (tmp_path / "test_hang.py").write_text(HANG)
    db, out = tmp_path / "ops.db", tmp_path / "replay.jsonl"
    r = ootest("ops", "capture", "test_hang.py", "--device", "emu:full", "--db", str(db), "-q",
               cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    proc = spawn_ootest("ops", "replay", "--db", str(db), "--device", "emu:faulty", "--out",
                        str(out), "--timeout", "120", "-q", cwd=tmp_path)  # fmt: skip

    def workers() -> set[int]:
        """This replay's worker processes (its children running the worker)."""
        ps = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
        return {
            int(pid)
            for pid, ppid, args in (x.split(None, 2) for x in ps.stdout.splitlines())
            if int(ppid) == proc.pid and "replay_worker" in args
        }

    def alive(pids: set[int]) -> set[int]:
        return {p for p in pids if Path(f"/proc/{p}").exists()}

    try:
        end = time.time() + 60
        while not workers() and time.time() < end:
            time.sleep(0.1)
        time.sleep(8)  # loaded, the add replayed, the sub hanging (its timeout is 120 s)
        mine = workers()
        assert mine
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "calls replayed, kept in" in err and "marked incomplete" in err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["complete"] is False
    assert {r["op"] for r in lines[1:]} >= {"aten::add.Tensor"}
    assert all(r["op"] != "aten::sub.Tensor" for r in lines[1:])  # it never returned
    end = time.time() + 10
    while alive(mine) and time.time() < end:
        time.sleep(0.1)
    assert not alive(mine), "the worker outlived the replay"
