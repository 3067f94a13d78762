"""Decisions people can see, on emu with the example suite (subprocesses, slow):
capture on emu:full, decide for emu:young with ``select run``, run the config; every
variant the config skips or expects to fail is reported under its decision's reason
code, with the counts the sidecar gives, in the results, the terminal and JUnit;
then ``select review`` of the same config."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from ootest.record.decisions import reason_key
from ootest.record.results import RunData
from tests.conftest import ROOT, ootest, run


def _ok(r: object) -> str:
    assert getattr(r, "returncode", 1) == 0, (
        getattr(r, "stdout", "")[-3000:] + getattr(r, "stderr", "")[-3000:]
    )
    return str(getattr(r, "stdout", ""))


@pytest.mark.slow  # a minute: a capture and a run of the example suite on emu
def test_a_selected_configs_run_reports_its_reason_codes(tmp_path: Path) -> None:
    env = {"OOTEST_ROOT": str(ROOT)}
    ops, variants, suite = tmp_path / "ops.db", tmp_path / "v.jsonl", tmp_path / "suite.yaml"
    _ok(ootest("ops", "capture", "examples/suite", "--device", "emu:full", "--db", str(ops), "-q"))
    _ok(
        run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/suite",
             "--collect-only", "--ootest-device", "emu:young", "--ootest-variants", str(variants)]
        )
    )  # fmt: skip
    _ok(ootest("select", "run", "--variants", str(variants), "--ops", str(ops), "--device",
               "emu:young", "--root-var", "OOTEST_ROOT", "--out", str(suite)))  # fmt: skip
    out = _ok(ootest("run", str(suite), "--results", str(tmp_path / "r.jsonl"), "--timeout",
                     "30", env=env))  # fmt: skip

    rows = [json.loads(x)["decision"] for x in (tmp_path / "suite.evidence.jsonl").open()]
    decided = {r["variant_id"]: r for r in rows}
    data = RunData.load(tmp_path / "r.jsonl")
    assert set(data.results) == set(decided)  # the IDs join
    by_test = {v for v, r in data.results.items() if r["outcome"] == "skipped"
               and r["mode"] != "skip"}  # fmt: skip
    want = Counter(
        r["reason"].split(":")[0] for v, r in decided.items()
        if r["mode"] != "mandatory_success" and v not in by_test
    )  # fmt: skip
    got = Counter(
        reason_key(r)[0] for v, r in data.results.items()
        if r["mode"] != "mandatory_success" and v not in by_test
    )  # fmt: skip
    assert got == want and got["op_unsupported"] > 0 and got["dtype_unsupported"] > 0
    for v, r in data.results.items():
        assert (r["reason"], r.get("code")) == (
            decided[v]["reason"], decided[v]["reason"].split(":")[0],
        ), v  # fmt: skip
        if r["mode"] == "skip":
            assert r["evidence"] == decided[v]["evidence"][:3]
    assert f"{want['op_unsupported']}  config: op_unsupported (aten::" in out
    assert "not listed in the config" not in out
    root = ET.parse(tmp_path / "junit.xml").getroot()
    codes = Counter(p.get("value") for p in root.iter("property") if p.get("name") == "ootest.code")
    assert codes["op_unsupported"] == want["op_unsupported"]

    review = _ok(ootest("select", "review", str(suite), "--html", str(tmp_path / "rv.html"),
                        "--json", env=env))  # fmt: skip
    r = json.loads(review)
    assert {g["code"]: g["count"] for g in r["reasons"]} == dict(
        Counter(x["reason"].split(":")[0] for x in rows)
    )
    assert r["blocking_ops"] and r["blocking_ops"][0]["unlocks"] >= 1
