"""Plugin behaviour with pytester (plain tests, no torch, in-process)."""

from __future__ import annotations

import json

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
    def test_fixed(self):
        pass
    def test_unlisted(self):
        pass

def test_plain():
    pass
"""

CONFIG = """
test_suite_config:
  files:
    - path: test_mod.py
      unlisted_test_mode: skip
      tests:
        - names: [TestA::test_pass, test_plain]
          mode: mandatory_success
        - names: [TestA::test_fail]
          mode: xfail
          reason: known bug
        - names: [TestA::test_skipme]
          mode: skip
          reason: crashes the device
          issue: https://example.invalid/7
        - names: [TestA::test_fixed]
          mode: xfail_strict
        - names: [TestA::test_renamed_upstream]
          mode: mandatory_success
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_mod=TESTS)
    pytester.makefile(".yaml", cfg=CONFIG)
    return pytester


def test_outcomes(suite: pytest.Pytester) -> None:
    r = suite.runpytest("--ootest-config", "cfg.yaml", "-rsxX")
    r.assert_outcomes(passed=2, failed=1, skipped=2, xfailed=1)
    r.stdout.fnmatch_lines(
        [
            "*[[]XPASS(strict)[]] listed as xfail_strict*promote it to mandatory_success",
            "*SKIPPED*crashes the device [[]https://example.invalid/7[]] (*cfg.yaml:11)",
            "*SKIPPED*not listed in the config (unlisted_test_mode: skip)*",
            "*XFAIL*test_fail - known bug*",
        ]
    )
    assert r.ret == 1


def test_stale_names_listed(suite: pytest.Pytester) -> None:
    r = suite.runpytest("--ootest-config", "cfg.yaml")
    r.stdout.fnmatch_lines(
        ["*ootest: 1 config names matched no test*", "*cfg.yaml:17: TestA::test_renamed_upstream"]
    )


def test_a_stale_op_filter_says_op_is_exact(suite: pytest.Pytester) -> None:
    """Note [Exact op filters]: a filter written for an OpInfo family before op= was
    exact matches nothing now; the list of stale names says why."""
    family = "        - names: ['TestA::test_pass[op=div]', 'TestA::test_fixed[dtype=int64]']\n"
    suite.makefile(".yaml", fam=CONFIG + family)
    r = suite.runpytest("--ootest-config", "fam.yaml")
    r.stdout.fnmatch_lines(
        [
            "*ootest: 3 config names matched no test*",
            "*fam.yaml:19: TestA::test_pass[[]op=div[]]",
            "  1 of them name an op in a variant filter: op= is the OpInfo's full name, exactly "
            "as the variant ID writes it (op=div.trunc_rounding, op=_refs.gcd), not its family "
            "(op=div); edits.ops and supported_ops keep the family (docs/config.md)",
        ]
    )
    r = suite.runpytest("--ootest-config", "cfg.yaml")
    assert "name an op in a variant filter" not in r.stdout.str()


def test_many_stale_names_are_capped_unless_verbose(suite: pytest.Pytester) -> None:
    gone = "".join(f"        - names: [TestA::test_gone_{i}]\n" for i in range(25))
    suite.makefile(".yaml", many=CONFIG + gone)
    r = suite.runpytest_subprocess("--ootest-config", "many.yaml")
    r.stdout.fnmatch_lines(
        ["*ootest: 26 config names matched no test*", "  ... and 6 more (-v lists them all)"]
    )
    assert "test_gone_18" in r.stdout.str() and "test_gone_19" not in r.stdout.str()
    r = suite.runpytest_subprocess("--ootest-config", "many.yaml", "-v")
    assert "test_gone_24" in r.stdout.str() and "more (-v" not in r.stdout.str()


def test_config_from_env_and_ini(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOTEST_CONFIG", "cfg.yaml")
    suite.runpytest().assert_outcomes(passed=2, failed=1, skipped=2, xfailed=1)
    monkeypatch.delenv("OOTEST_CONFIG")
    suite.makeini("[pytest]\nootest_config = cfg.yaml\n")
    suite.runpytest().assert_outcomes(passed=2, failed=1, skipped=2, xfailed=1)


def test_settings_precedence_is_cli_then_env_then_ini(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/plugin.md: the command line beats the environment, which beats the ini file."""
    suite.makeini("[pytest]\nootest_config = missing-ini.yaml\n")
    monkeypatch.setenv("OOTEST_CONFIG", "cfg.yaml")
    suite.runpytest().assert_outcomes(passed=2, failed=1, skipped=2, xfailed=1)
    monkeypatch.setenv("OOTEST_CONFIG", "missing-env.yaml")
    r = suite.runpytest("--ootest-config", "cfg.yaml")
    r.assert_outcomes(passed=2, failed=1, skipped=2, xfailed=1)
    r = suite.runpytest()  # the environment's file is the one read
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "missing-env.yaml" in r.stderr.str() and "missing-ini" not in r.stderr.str()


def test_without_config_plugin_is_inert(suite: pytest.Pytester) -> None:
    r = suite.runpytest()
    r.assert_outcomes(passed=4, failed=2)


def test_results_jsonl(suite: pytest.Pytester) -> None:
    suite.runpytest("--ootest-config", "cfg.yaml", "--ootest-results", "out/r.jsonl")
    lines = [json.loads(x) for x in (suite.path / "out/r.jsonl").read_text().splitlines()]
    recs = [r for r in lines if r["kind"] == "result"]
    by = {r["variant_id"]: r for r in recs}
    assert by["test_mod.py::TestA::test_fail"]["outcome"] == "xfailed"
    assert by["test_mod.py::TestA::test_fixed"]["outcome"] == "xpassed_strict"
    skip = by["test_mod.py::TestA::test_skipme"]
    assert (skip["outcome"], skip["reason"], skip["issue"]) == (
        "skipped",
        "crashes the device",
        "https://example.invalid/7",
    )
    assert by["test_mod.py::test_plain"]["outcome"] == "passed"
    assert len(recs) == 6
    (coll,) = [r for r in lines if r["kind"] == "collection"]
    assert (coll["file"], coll["collected"]) == ("test_mod.py", 6)
    (stale,) = [r for r in lines if r["kind"] == "stale"]
    assert stale["name"] == "TestA::test_renamed_upstream"
    # where it ran (Note [Evidence origins]): no device; torch not imported in this run
    (session,) = [r for r in lines if r["kind"] == "session"]
    assert (session["device_spec"], session["torch"]) == (None, None)
    assert lines[-1]["kind"] == "finish"


def test_bad_config_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod=TESTS)
    pytester.makefile(
        ".yaml",
        cfg="test_suite_config:\n  files:\n    - path: test_mod.py\n"
        "      unlisted_test_mode: sometimes\n",
    )
    r = pytester.runpytest("--ootest-config", "cfg.yaml")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(
        [
            "*ootest: *cfg.yaml:4:27: test_suite_config.files[[]0[]]"
            ".unlisted_test_mode: expected one of*found 'sometimes'*"
        ]
    )
    assert "Traceback" not in r.stderr.str()


def test_bad_device_spec(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mod="def test_a():\n    pass\n")
    r = pytester.runpytest("--ootest-device", "non sense")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines(["*expected 'emu', 'emu:<profile>', '<module>:<backend name>'*"])


@pytest.mark.parametrize(
    ("flag", "top", "message"),
    [
        ("-1", "", "*--ootest-timeout: expected a positive number of seconds; found -1"),
        ("inf", "", "*--ootest-timeout: expected a positive number of seconds; found inf"),
        (None, "  timeout: .inf\n", "*cfg.yaml:2:12: *timeout: expected a finite number*"),
        (None, "  timeout: 1.0e15\n", "*cfg.yaml:2:12: *timeout: expected a number less than*"),
    ],
)  # fmt: skip
def test_a_bad_timeout_is_a_usage_error(
    pytester: pytest.Pytester, flag: str | None, top: str, message: str
) -> None:
    # faulthandler.dump_traceback_later takes no timeout <= 0 or past ~1e12 s: these
    # were an INTERNALERROR ValueError/OverflowError at the first test
    pytester.makepyfile(test_mod="def test_a():\n    pass\n")
    pytester.makefile(".yaml", cfg=f"test_suite_config:\n{top}  files:\n    - path: test_mod.py\n")
    args = ["--ootest-timeout", flag] if flag else ["--ootest-config", "cfg.yaml"]
    r = pytester.runpytest(*args)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([message])
    assert "INTERNALERROR" not in r.stdout.str() + r.stderr.str()


def test_output_paths_that_cannot_be_written_are_a_usage_error(pytester: pytest.Pytester) -> None:
    # each was an INTERNALERROR traceback at configure
    pytester.makepyfile(test_mod="def test_a():\n    pass\n")
    pytester.mkdir("adir")
    pytester.makefile(".txt", afile="x")
    for args, message in (
        (["--ootest-results", "adir"], "*--ootest-results adir: is a folder; expected a file path"),
        (["--ootest-variants", "adir"], "*--ootest-variants adir: is a folder; expected a file*"),
        (["--ootest-results", "afile.txt/r.jsonl"], "*r.jsonl: cannot create its folder (a file*"),
        (["--ootest-results", "r.jsonl", "--ootest-state", "afile.txt"],
         "*--ootest-state afile.txt: is a file; expected a folder*"),
    ):  # fmt: skip
        r = pytester.runpytest(*args)
        assert r.ret == pytest.ExitCode.USAGE_ERROR, args
        r.stderr.fnmatch_lines([message])
        assert "INTERNALERROR" not in r.stdout.str() + r.stderr.str()


def test_tags_and_labels_become_marks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="def test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n"
    )
    pytester.makefile(
        ".yaml",
        cfg="""
test_suite_config:
  labels: [trunk]
  files:
    - path: test_m.py
      labels: [f1]
      unlisted_test_mode: mandatory_success
      tests:
        - names: [test_a]
          tags: [model_1, ops__inductor-pointwise]
          labels: [nightly]
""",
    )
    # In a subprocess: several in-process runs would re-import PyYAML's C extension.
    base = ["--ootest-config", "cfg.yaml", "-W", "error::pytest.PytestUnknownMarkWarning"]
    pytester.runpytest_subprocess(*base, "-m", "label__trunk").assert_outcomes(passed=3)
    pytester.runpytest_subprocess(*base, "-m", "label__f1").assert_outcomes(passed=3)
    pytester.runpytest_subprocess(*base, "-m", "label__nightly").assert_outcomes(passed=1)
    pytester.runpytest_subprocess(*base, "-m", "tag__model_1 and not tag__nothing").assert_outcomes(
        passed=1
    )
    r = pytester.runpytest_subprocess(*base, "-m", "tag__ops__inductor-pointwise", "-v")
    r.assert_outcomes(passed=1)
    r.stdout.fnmatch_lines(["*test_a PASSED*"])


def test_without_a_config_neither_pydantic_nor_yaml_is_imported(pytester: pytest.Pytester) -> None:
    # Startup cost of the plugin when no config is used (device or results only).
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    pytester.makeconftest(
        "import sys\n"
        "def pytest_sessionfinish(session):\n"
        "    print('LOADED', 'pydantic' in sys.modules, 'yaml' in sys.modules)\n"
    )
    r = pytester.runpytest_subprocess("--ootest-results", "r.jsonl", "-s")
    r.stdout.fnmatch_lines(["*LOADED False False*"])
    r = pytester.runpytest_subprocess("-s", "-p", "no:ootest")
    r.stdout.fnmatch_lines(["*LOADED False False*"])  # nothing else in this venv loads them


def test_parametrized_methods_of_plain_classes_are_distinct_variants(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_p="""
import pytest

class TestPlain:
    @pytest.mark.parametrize("n", [1, 2])
    def test_x(self, n):
        assert n
"""
    )
    pytester.runpytest("--ootest-results", "r.jsonl")
    recs = [json.loads(x) for x in (pytester.path / "r.jsonl").read_text().splitlines()]
    ids = sorted(r["variant_id"] for r in recs if r["kind"] == "result")
    name = pytester.path.name
    assert ids == [f"{name}/test_p.py::TestPlain::test_x[n={n}]" for n in (1, 2)]
