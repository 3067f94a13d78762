"""The compiled plan cache (plugin/plan.py): reused only while nothing it depends on changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = """
import unittest

class TestA(unittest.TestCase):
    def test_pass(self):
        pass
    def test_fail(self):
        self.fail("boom")
    def test_skipme(self):
        raise RuntimeError("must not run")
    def test_unlisted(self):
        pass
"""

CONFIG = """
test_suite_config:
  files:
    - path: {path}
      unlisted_test_mode: skip
      tests:
        - names: [TestA::test_pass]
        - names: [TestA::test_fail]
          mode: xfail
          reason: known bug
        - names: [TestA::test_skipme]
          mode: skip
          reason: crashes the device
        - names: [TestA::test_gone]
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("OOTEST_CACHE_DIR", str(pytester.path / "cache"))
    monkeypatch.delenv("OOTEST_NO_CACHE", raising=False)
    pytester.makepyfile(test_mod=TESTS)
    pytester.makefile(".yaml", cfg=CONFIG.format(path="test_mod.py"))
    return pytester


def _run(p: pytest.Pytester, name: str, *args: str) -> tuple[pytest.RunResult, dict[str, object]]:
    """One run; (result, {nodeid: decision fields}) from its results file."""
    res = p.path / f"{name}.jsonl"
    r = p.runpytest("--ootest-config", "cfg.yaml", "--ootest-results", str(res), "-v", *args)
    recs = [json.loads(x) for x in res.read_text().splitlines()]
    keep = ("outcome", "mode", "bucket", "reason", "issue", "origin", "variant_id")
    by = {x["nodeid"]: {k: x.get(k) for k in keep} for x in recs if x["kind"] == "result"}
    by["stale"] = sorted(x["name"] for x in recs if x["kind"] == "stale")
    return r, by


def _plan(r: pytest.RunResult) -> tuple[int, int, bool]:
    """(variants from the cache, variants decided now, config loaded) from the -v summary."""
    line = next(x for x in r.outlines if x.startswith("ootest: plan "))
    words = line.split(": ")[-1].split()
    return int(words[0]), int(words[5]), "(config loaded)" in line


def _touch(path: Path, text: str) -> None:
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later, distinct mtime


def test_second_run_reuses_the_plan_and_decides_the_same(suite: pytest.Pytester) -> None:
    r1, first = _run(suite, "r1")
    assert _plan(r1) == (0, 4, True)
    r2, second = _run(suite, "r2")
    assert _plan(r2) == (4, 0, False)  # the config was not even read
    assert second == first
    assert first["stale"] == ["TestA::test_gone"]
    r2.assert_outcomes(passed=1, skipped=2, xfailed=1)


def test_editing_the_config_recompiles_the_plan(suite: pytest.Pytester) -> None:
    _run(suite, "r1")
    cfg = suite.path / "cfg.yaml"
    _touch(cfg, cfg.read_text().replace("mode: skip\n", "mode: xfail\n"))
    r, by = _run(suite, "r2")
    assert _plan(r) == (0, 4, True)
    assert by["test_mod.py::TestA::test_skipme"]["mode"] == "xfail"  # now run, and it fails
    r.assert_outcomes(passed=1, xfailed=2, xpassed=1)  # (unlisted_test_mode too)


def test_an_extended_file_is_part_of_the_plan(suite: pytest.Pytester) -> None:
    suite.makefile(".yaml", base="test_suite_config:\n  labels: [one]\n")
    cfg = suite.path / "cfg.yaml"
    cfg.write_text(
        cfg.read_text().replace(
            "test_suite_config:\n", "test_suite_config:\n  extends: [base.yaml]\n"
        )
    )
    _run(suite, "r1")
    assert _plan(_run(suite, "r2")[0]) == (4, 0, False)
    _touch(suite.path / "base.yaml", "test_suite_config:\n  labels: [two]\n")
    r, _ = _run(suite, "r3", "-m", "label__two")
    assert _plan(r)[2] is True
    r.assert_outcomes(passed=1, skipped=2, xfailed=1)


def test_a_changed_test_file_is_decided_again(suite: pytest.Pytester) -> None:
    _run(suite, "r1")
    mod = suite.path / "test_mod.py"
    _touch(mod, TESTS + "    def test_gone(self):\n        pass\n")
    r, by = _run(suite, "r2")
    assert _plan(r) == (0, 5, True)
    assert by["test_mod.py::TestA::test_gone"]["mode"] == "mandatory_success"
    assert by["stale"] == []
    r3, again = _run(suite, "r3")
    assert _plan(r3) == (5, 0, False)
    assert again == by


def test_a_changed_test_file_under_an_injecting_config_is_decided_again(
    suite: pytest.Pytester,
) -> None:
    # A config with edits.*.include is loaded on every run (its injection needs it) while
    # the plan comes from the cache: deciding a changed file then named matched patterns
    # through ids only a compiled plan has (KeyError, INTERNALERROR, before the fix).
    cfg = suite.path / "cfg.yaml"
    cfg.write_text(
        cfg.read_text().replace(
            "        - names: [TestA::test_pass]\n",
            "        - names: [TestA::test_pass]\n"
            "          edits:\n"
            "            dtypes:\n"
            "              include: [{name: float16}]\n",
        )
    )
    _, first = _run(suite, "r1")
    mod = suite.path / "test_mod.py"
    _touch(mod, TESTS + "    # edited\n")
    r, by = _run(suite, "r2")
    r.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert _plan(r) == (0, 4, True)
    assert by == first


def test_a_path_variable_is_checked_again(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for d in ("a", "b"):
        (suite.path / d).mkdir()
        (suite.path / d / "__init__.py").write_text("")
        (suite.path / d / "test_mod.py").write_text(TESTS)
    (suite.path / "test_mod.py").unlink()
    (suite.path / "cfg.yaml").write_text(CONFIG.format(path="${OOTEST_SUITE}/test_mod.py"))
    monkeypatch.setenv("OOTEST_SUITE", str(suite.path / "a"))
    r1, by1 = _run(suite, "r1")
    assert _plan(r1) == (0, 8, True)  # both copies collected, only a/ configured
    assert by1["a/test_mod.py::TestA::test_unlisted"]["mode"] == "skip"
    assert by1["b/test_mod.py::TestA::test_unlisted"]["mode"] is None
    monkeypatch.setenv("OOTEST_SUITE", str(suite.path / "b"))
    r2, by2 = _run(suite, "r2")
    assert _plan(r2)[2] is True
    assert by2["a/test_mod.py::TestA::test_unlisted"]["mode"] is None
    assert by2["b/test_mod.py::TestA::test_unlisted"]["mode"] == "skip"


def test_a_glob_that_matches_a_new_file_recompiles(suite: pytest.Pytester) -> None:
    (suite.path / "cfg.yaml").write_text(CONFIG.format(path="test_*.py"))
    _run(suite, "r1")
    suite.makepyfile(test_more="def test_x():\n    pass\n")
    r, by = _run(suite, "r2")
    assert _plan(r) == (0, 5, True)
    assert by["test_more.py::test_x"]["mode"] == "skip"  # unlisted in the configured file


def test_a_damaged_cache_is_rebuilt(suite: pytest.Pytester) -> None:
    _run(suite, "r1")
    (plan,) = (suite.path / "cache" / "plans").iterdir()
    plan.write_bytes(b"\x00not marshal data")
    r, _ = _run(suite, "r2")
    assert _plan(r) == (0, 4, True)
    r.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert _plan(_run(suite, "r3")[0]) == (4, 0, False)


def test_the_cache_can_be_turned_off(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(suite, "r1")
    r, _ = _run(suite, "r2", "--ootest-no-cache")
    assert _plan(r) == (0, 4, True)
    assert "not cached" in r.stdout.str()
    monkeypatch.setenv("OOTEST_NO_CACHE", "1")
    assert _plan(_run(suite, "r3")[0]) == (0, 4, True)


def test_plans_unused_for_a_month_are_pruned(suite: pytest.Pytester) -> None:
    plans = suite.path / "cache" / "plans"
    plans.mkdir(parents=True)
    old, recent = plans / "0ld.marshal", plans / "recent.marshal"
    for f in (old, recent):
        f.write_bytes(b"x")
    month = 31 * 86400
    os.utime(old, (old.stat().st_atime - month, old.stat().st_mtime - month))
    _run(suite, "r1")  # writes its plan, then prunes
    assert not old.exists() and recent.exists()
    assert len([p for p in plans.iterdir() if p.suffix == ".marshal"]) == 2  # + this run's
