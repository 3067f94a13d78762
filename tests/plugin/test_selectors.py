"""Torch Spyre selectors applied by the plugin from a hand-made op map (pytester, no torch).

Each selection is compared with the query that asks the same question of the
index: ``has_ops: [op]`` with ``ootest ops tests-for op``; ``has_ops: true,
ops_in_supported: true`` with the variants that call ops minus the ones
``ootest ops missing --config`` counts as blocked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ootest.opmap.ingest import ingest_records
from ootest.opmap.missing import blocked
from ootest.opmap.store import OpStore
from ootest.opmap.support import from_config
from tests.opmap.conftest import PROV, ops, stop

TESTS = """
import unittest

class TestA(unittest.TestCase):
    def test_mm(self): pass
    def test_add(self): pass
    def test_cumsum(self): pass
    def test_scaled(self): pass
    def test_nothing(self): pass
    def test_new(self): pass
"""

V = "test_mod.py::TestA::"
CERTAIN = [
    PROV,
    ops(V + "test_mm", {"aten::mm": 1, "aten::empty_strided": 1}),
    stop(V + "test_mm"),
    ops(V + "test_add", {"aten::add.Tensor": 2}),
    stop(V + "test_add"),
    ops(V + "test_cumsum", {"aten::cumsum.out": 1, "aten::add.Tensor": 1}),
    stop(V + "test_cumsum"),
    ops(V + "test_scaled", {"aten::_scaled_mm": 1, "aten::mm": 1}),
    stop(V + "test_scaled"),
    stop(V + "test_nothing"),  # ran to a pass calling no aten op
]  # test_new: not captured

HEAD = """\
test_suite_config:
  op_map: {op_map}
  files:
    - path: test_mod.py
      unlisted_test_mode: mandatory_success
{tests}
  global:
    supported_ops: [add, mm, empty_strided]
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_mod=TESTS)
    with OpStore.open(pytester.path / "ops.db", create=True) as store:
        ingest_records(store, CERTAIN, source="hand-made")
    return pytester


def config(p: pytest.Pytester, top: str = "", tests: str = "", op_map: str = "null") -> Path:
    text = HEAD.format(op_map=op_map, tests=tests)
    if top:
        text = text.replace("test_suite_config:\n", "test_suite_config:\n" + top, 1)
    path = p.path / "cfg.yaml"
    path.write_text(text)
    return path


def collect(p: pytest.Pytester, *args: str) -> tuple[dict[str, dict[str, Any]], str]:
    """(variant ID -> its dumped variant line (mode, reason), pytest's output), collected only."""
    out = p.path / "variants.jsonl"
    r = p.runpytest(
        "--ootest-config", "cfg.yaml", "--collect-only", "--ootest-variants", str(out), *args
    )
    assert r.ret == 0, r.stdout.str()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return {x["variant_id"]: x for x in lines if x["kind"] == "variant"}, r.stdout.str()


def selected(p: pytest.Pytester, *args: str) -> set[str]:
    return {k for k, x in collect(p, *args)[0].items() if x["mode"] != "skip"}


def test_has_ops_list_selects_what_tests_for_answers(suite: pytest.Pytester) -> None:
    config(suite, top="  test_selectors:\n    include: [{has_ops: [mm]}]\n")
    with OpStore.open(suite.path / "ops.db") as store:
        want = {h.variant_id for h in store.tests_for("mm").variants}
    assert want == {V + "test_mm", V + "test_scaled"}
    found, _ = collect(suite, "--ootest-ops", "ops.db")
    got = {k for k, x in found.items() if x["mode"] != "skip"}
    assert got == want | {V + "test_new"}  # not captured: kept (run more, never skip more)
    skipped = found[V + "test_add"]
    assert skipped["reason"].startswith("left out by test_selectors: no include item matches (")
    assert skipped["reason"].endswith("(cfg.yaml:3)")


def test_spyre_block_selects_what_missing_leaves_unblocked(suite: pytest.Pytester) -> None:
    cfg = config(
        suite,
        top="  test_selectors:\n    include:\n      - {has_ops: true, ops_in_supported: true}\n",
    )
    with OpStore.open(suite.path / "ops.db") as store:
        support, _ = from_config(cfg)
        stuck = blocked(store, support).missing_count.keys()
        info = store.variant_info(stuck)
        calling = {vid for vid, found, *_ in store.op_sets() if found}
    want = calling - {info[i][0] for i in stuck}
    assert want == {V + "test_mm", V + "test_add"}
    assert selected(suite, "--ootest-ops", "ops.db") == want | {V + "test_new"}


def test_entry_selectors_narrow_the_entry(suite: pytest.Pytester) -> None:
    config(
        suite,
        tests="""\
      tests:
        - names: ["re:TestA::test_.*"]
          mode: xfail
          reason: waits on cumsum
          selectors:
            include: [{has_ops: [cumsum]}]
            exclude: [{name_patterns: [test_nothing]}]
""",
        op_map="ops.db",  # from the config, relative to it: no --ootest-ops needed
    )
    r = suite.runpytest("--ootest-config", "cfg.yaml", "-rX")
    # cumsum's entry decides test_cumsum; test_new (no evidence) too; the rest fall
    # through to unlisted_test_mode: mandatory_success
    r.assert_outcomes(passed=4, xpassed=2)
    r.stdout.fnmatch_lines(["XPASS*test_cumsum*waits on cumsum*", "XPASS*test_new*"])


def test_markers_see_aten_marks_and_exclude_wins(suite: pytest.Pytester) -> None:
    config(
        suite,
        top="  test_selectors:\n    exclude: [{markers: [aten___scaled_mm]}, {has_ops: false}]\n",
    )
    found, out = collect(suite, "--ootest-ops", "ops.db")
    left = {k: x["reason"] for k, x in found.items() if x["mode"] == "skip"}
    assert left == {
        V + "test_scaled": "left out by test_selectors: exclude[0] matches (cfg.yaml:3)",
        V + "test_nothing": "left out by test_selectors: exclude[1] matches (cfg.yaml:3)",
    }
    assert "ootest: test_selectors left out 2 variant(s) (skipped, with why)\n" in out
    assert "ootest: test_selectors kept 1 variant(s) the op map cannot judge" in out


def test_evidence_without_an_index_is_a_config_error(suite: pytest.Pytester) -> None:
    config(
        suite,
        top="  test_selectors:\n    include:\n      - markers: [x]\n      - has_ops: true\n",
    )
    r = suite.runpytest("--ootest-config", "cfg.yaml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        [
            "ERROR: ootest: cfg.yaml:5: test_selectors.include[1].has_ops: needs op evidence: "
            "expected an op map index; found none. Pass --ootest-ops DB (built by "
            "`ootest ops capture`) or set test_suite_config.op_map"
        ]
    )
    # markers and name_patterns need no index
    config(suite, top="  test_selectors:\n    include: [{name_patterns: ['*_mm']}]\n")
    assert selected(suite) == {V + "test_mm"}


def test_a_missing_index_names_where_it_was_given(suite: pytest.Pytester) -> None:
    config(suite, top="  test_selectors:\n    include: [{has_ops: true}]\n", op_map="nope.db")
    r = suite.runpytest("--ootest-config", "cfg.yaml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        ["ERROR: ootest: cfg.yaml: op_map: nope.db: expected an op map index; found no file there*"]
    )
