"""``--ootest-only FILE``: run only the variant IDs listed (the delta capture of an
upgrade, Note [Fresh evidence for the delta]; ``ootest ops capture --only``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TESTS = """
import unittest

class TestA(unittest.TestCase):
    def test_pass(self):
        pass
    def test_other(self):
        raise RuntimeError("must not run")

class TestB(unittest.TestCase):
    def test_pass(self):
        pass
"""


def test_only_the_listed_variants_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod=TESTS)
    everything = pytester.path / "all.jsonl"
    pytester.runpytest("--ootest-results", str(everything)).assert_outcomes(passed=2, failed=1)
    ids = {
        x["variant_id"].rsplit("::", 2)[-2] + "::" + x["variant_id"].rsplit("::", 1)[-1]: x[
            "variant_id"
        ]
        for x in map(json.loads, everything.read_text().splitlines())
        if x["kind"] == "result"
    }
    only = pytester.path / "only.txt"
    only.write_text(f"# the delta\n{ids['TestA::test_pass']}\n\n{ids['TestB::test_pass']}\n")
    res = pytester.path / "only.jsonl"
    r = pytester.runpytest("--ootest-only", str(only), "--ootest-results", str(res))
    r.assert_outcomes(passed=2, deselected=1)
    ran = sorted(
        x["variant_id"] for x in map(json.loads, res.read_text().splitlines())
        if x["kind"] == "result"
    )  # fmt: skip
    assert ran == sorted([ids["TestA::test_pass"], ids["TestB::test_pass"]])


def test_an_unreadable_list_is_one_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod=TESTS)
    r = pytester.runpytest("--ootest-only", "missing.txt")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        [
            "ERROR: ootest: --ootest-only missing.txt: expected a file of variant IDs, one a "
            "line; cannot read it: No such file or directory"
        ]
    )


def test_ops_capture_only_checks_its_list_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ootest.cli.main import main

    missing = tmp_path / "ids.txt"
    rc = main(["ops", "capture", str(tmp_path), "--only", str(missing), "--db",
               str(tmp_path / "ops.db")])  # fmt: skip
    assert (rc, capsys.readouterr().err) == (
        2,
        f"ootest: error: --only {missing}: expected a file of variant IDs, one a line; "
        "cannot read it: No such file or directory\n",
    )
    assert not (tmp_path / "ops.db.capture").exists()  # nothing ran
