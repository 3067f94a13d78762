"""Fresh op evidence for the delta, for real (issue 34 item 1; Note [Fresh
evidence for the delta]): upstream rewrites a helper so that a test no longer
calls ``cumsum``, which ``emu:young`` lacks. The team's op map was captured from
the old version on ``emu:full``; ``select refresh`` captures only the changed
variant (by its ID) on ``emu:full`` into a copy, decides it mandatory, runs it on
the device and writes the config. Without the capture (today's code) the variant
stays ``skip op_unsupported:aten::cumsum`` for ever. The same without torch,
fast: tests/select/test_fresh.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, ootest

pytestmark = pytest.mark.slow  # index builds, captures and a run on emu: minutes here

OLD = """import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


def _acc(t):
    return t.cumsum(0)


class TestAcc(TestCase):
    @dtypes(torch.float32)
    def test_acc(self, device, dtype):
        x = torch.ones(4, device=device, dtype=dtype)
        self.assertEqual(_acc(x).cpu().sum().item(), _acc(torch.ones(4)).sum().item())

    @dtypes(torch.float32)
    def test_same(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2.0))


instantiate_device_type_tests(TestAcc, globals())
"""
NEW = OLD.replace("    return t.cumsum(0)\n", "    return t * 2\n")
ACC = "test/test_acc.py::TestAcc::test_acc[dtype=float32]"
SAME = "test/test_acc.py::TestAcc::test_same[dtype=float32]"


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def _decisions(at: Path) -> dict[str, tuple[str, str]]:
    rows = [json.loads(x) for x in (at / "suite.evidence.jsonl").read_text().splitlines()]
    return {r["decision"]["variant_id"]: (r["decision"]["mode"], r["decision"]["reason"])
            for r in rows}  # fmt: skip


def test_a_refresh_captures_the_changed_variant_and_makes_it_mandatory(tmp_path: Path) -> None:
    for name, text in (("old", OLD), ("new", NEW)):
        (tmp_path / name / "test").mkdir(parents=True)
        (tmp_path / name / "test" / "test_acc.py").write_text(text)
    old = tmp_path / "old" / "test"
    _ok(ootest("index", "build", "--root", str(old), "--device", "emu:young", "--no-torch-db",
               "--db", str(tmp_path / "old.db")))  # fmt: skip
    _ok(ootest("ops", "capture", str(old), "--device", "emu:full", "--db",
               str(tmp_path / "ops.db"), "-q"))  # fmt: skip
    _ok(ootest("select", "run", "--memory", str(tmp_path / "old.db"), "--ops",
               str(tmp_path / "ops.db"), "--device", "emu:young", "--out",
               str(tmp_path / "suite.yaml")))  # fmt: skip
    assert _decisions(tmp_path)[ACC] == ("skip", "op_unsupported:aten::cumsum")
    team = (tmp_path / "ops.db").read_bytes()

    env = {**os.environ, "TORCH_ROOT": str(tmp_path / "new")}
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "ootest.cli", "select", "refresh", "--config",
           str(tmp_path / "suite.yaml"), "--memory", str(tmp_path / "old.db"), "--root",
           str(tmp_path / "new" / "test"), "--ops", str(tmp_path / "ops.db"), "--device",
           "emu:young", "-k", "1", "--timeout", "60"]  # fmt: skip
    out = _ok(subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600))
    assert (
        "op evidence for the 1 variants decided again: captured 1 of 1 variants on emu:full" in out
    )
    got = _decisions(tmp_path)
    assert got[ACC] == ("mandatory_success", "ops_supported")  # captured, decided, ran, passed
    assert got[SAME] == ("mandatory_success", "ops_supported")  # unchanged: not captured
    work = tmp_path / "suite.refresh"
    state = json.loads((work / "state.json").read_text())
    assert state["facts"]["capture"]["asked"] == 1 and state["facts"]["run"]["ran"] == 1
    # the capture ran the changed variant only, not the file
    ran = [
        json.loads(x) for x in (work / "ops.db.capture" / "results.jsonl").read_text().splitlines()
    ]
    assert sorted(r["variant_id"] for r in ran if r.get("kind") == "result") == [ACC]
    # the team's op map is replaced only at the write step, by the copy it was decided from
    assert (tmp_path / "ops.db").read_bytes() != team
    for_test = _ok(ootest("ops", "for-test", ACC, "--db", str(tmp_path / "ops.db"), "--json"))
    ops = {o["op"] for o in json.loads(for_test)["ops"]}
    assert "aten::cumsum" not in ops and "aten::mul.Tensor" in ops
