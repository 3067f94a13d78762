"""The selection pipeline end to end on the example suite on emu's ``faulty`` profile
(a young device with wrong numbers, a crash, a hang): subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, ootest, run


def _ok(r: object) -> str:
    assert getattr(r, "returncode", 1) == 0, (
        getattr(r, "stdout", "")[-3000:] + getattr(r, "stderr", "")[-3000:]
    )
    return str(getattr(r, "stdout", ""))


@pytest.mark.slow  # minutes: the whole example suite on emu, several rounds
def test_capture_select_run_refine_converges(tmp_path: Path) -> None:
    env = {"OOTEST_ROOT": str(ROOT)}
    ops, variants, suite = tmp_path / "ops.db", tmp_path / "v.jsonl", tmp_path / "suite.yaml"
    _ok(ootest("ops", "capture", "examples/suite", "--device", "emu:full", "--db", str(ops), "-q"))
    _ok(
        run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/suite",
             "--collect-only", "--ootest-device", "emu:young", "--ootest-variants", str(variants)]
        )
    )  # fmt: skip
    select = ["select", "run", "--variants", str(variants), "--ops", str(ops)]
    select += ["--device", "emu:faulty", "--root-var", "OOTEST_ROOT"]
    _ok(ootest(*select, "--out", str(suite)))
    first = suite.read_bytes(), (tmp_path / "suite.evidence.jsonl").read_bytes()
    _ok(ootest(*select, "--out", str(suite)))  # same inputs, same bytes
    assert (suite.read_bytes(), (tmp_path / "suite.evidence.jsonl").read_bytes()) == first

    # every decision has a reason code and evidence; every entry a comment saying why
    rows = [json.loads(x) for x in (tmp_path / "suite.evidence.jsonl").read_text().splitlines()]
    assert len(rows) == 59 and all(r["decision"]["reason"] for r in rows)
    reasons = {r["decision"]["reason"].split(":")[0] for r in rows}
    assert {"ops_supported", "op_unsupported", "dtype_unsupported"} <= reasons
    text = suite.read_text()
    assert text.count("- names:") == text.count("# ootest select:")
    # never mandatory without evidence, never skipped without evidence
    for r in rows:
        d = r["decision"]
        if d["reason"] == "no_evidence":
            assert d["mode"] == "xfail"

    changed = []
    for i in range(3):
        res = tmp_path / f"r{i}.jsonl"
        out = ootest("run", str(suite), "--device", "emu:faulty", "--results", str(res), "-q",
                     "--timeout", "15", env=env)  # fmt: skip
        if out.returncode == 0:
            break
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
        ref = ootest("select", "refine", str(suite), "--results", str(res))
        _ok(ref)
        changed.append(ref.stderr)
    assert out.returncode == 0, f"did not converge in 3 rounds: {changed}"
    final = [json.loads(x) for x in res.read_text().splitlines() if '"result"' in x]
    assert all(r["outcome"] == "passed" for r in final if r.get("mode") == "mandatory_success")


@pytest.mark.slow  # a minute: capture, replay, one run of the example suite on emu
def test_with_the_replay_the_first_config_already_passes(tmp_path: Path) -> None:
    """Note [Replaying calls]: the faults no declaration shows are found before any
    test runs, so the config selected for emu:faulty passes as it is."""
    env = {"OOTEST_ROOT": str(ROOT)}
    ops, variants, suite = tmp_path / "ops.db", tmp_path / "v.jsonl", tmp_path / "suite.yaml"
    replay = tmp_path / "replay.jsonl"
    _ok(ootest("ops", "capture", "examples/suite", "--device", "emu:full", "--db", str(ops), "-q"))
    _ok(ootest("ops", "replay", "--db", str(ops), "--device", "emu:faulty", "--out", str(replay),
               "--timeout", "5", "-q"))  # fmt: skip
    _ok(
        run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/suite",
             "--collect-only", "--ootest-device", "emu:faulty", "--ootest-variants", str(variants)]
        )
    )  # fmt: skip
    _ok(ootest("select", "run", "--variants", str(variants), "--ops", str(ops), "--replay",
               str(replay), "--device", "emu:faulty", "--root-var", "OOTEST_ROOT", "--out",
               str(suite)))  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "suite.evidence.jsonl").read_text().splitlines()]
    reasons = {r["decision"]["reason"]: r["decision"]["mode"] for r in rows}
    assert reasons["replay_crashed:aten::abs.out"] == "skip"  # integer abs kills the process
    assert reasons["replay_timeout:aten::sub.Tensor"] == "skip"  # float sub hangs
    assert reasons["replay_mismatch:aten::exp"] == "xfail"  # exp is 0.1 % off
    assert reasons["replay_failed:aten::add.Tensor"] == "xfail"  # add fails from 200 elements
    res = tmp_path / "r.jsonl"
    out = ootest("run", str(suite), "--device", "emu:faulty", "--results", str(res), "-q",
                 "--timeout", "15", env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    got = [json.loads(x) for x in res.read_text().splitlines() if '"result"' in x]
    assert not [r for r in got if r["outcome"] in ("crashed", "timeout")]  # none was run
    mandatory = [r for r in got if r.get("mode") == "mandatory_success"]
    assert len(mandatory) >= 20 and all(r["outcome"] == "passed" for r in mandatory)
