"""Guard, shards, merge and reports: pure functions and cheap subprocess runs (no torch)."""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ootest.errors import UserError
from ootest.record.results import RunData
from ootest.record.shard import ShardSpec, assign
from ootest.runner import guard
from tests.conftest import ootest, run


def _coll(key: str, collected: int, device: int) -> dict[str, object]:
    return {
        "kind": "collection",
        "file": key,
        "collected": collected,
        "device_variants": device,
    }


# ------------------------------------------------------------------- guard
def test_guard_quiet_on_a_normal_run() -> None:
    run = RunData.from_records([_coll("test/a.py", 100, 90)])
    base = RunData.from_records([_coll("test/a.py", 100, 90)])
    assert guard.check([guard.GuardFile("test/a.py", None)], run, base, device=True) == []


def test_guard_trips_on_a_drop_against_the_baseline() -> None:
    run = RunData.from_records([_coll("test/a.py", 100, 40)])
    base = RunData.from_records([_coll("test/a.py", 100, 90)])
    (trip,) = guard.check([guard.GuardFile("test/a.py", None)], run, base, device=True)
    assert "a.py: 40 device variants, the baseline run had 90 (56% fewer" in trip.message
    assert "only_for=" in trip.message


def test_guard_threshold_allows_small_drops() -> None:
    run = RunData.from_records([_coll("test/a.py", 100, 87)])
    base = RunData.from_records([_coll("test/a.py", 100, 90)])
    files = [guard.GuardFile("test/a.py", None)]
    assert guard.check(files, run, base, device=True, threshold=0.05) == []
    assert guard.check(files, run, base, device=True, threshold=0.01) != []


def test_guard_expect_wins_over_the_baseline() -> None:
    run = RunData.from_records([_coll("test/a.py", 100, 90)])
    (trip,) = guard.check([guard.GuardFile("test/a.py", 120)], run, None, device=True)
    assert "the config's expect: had 120" in trip.message


def test_guard_zero_device_variants_is_always_an_error() -> None:
    run = RunData.from_records([_coll("test/a.py", 7, 0)])
    (trip,) = guard.check([guard.GuardFile("test/a.py", None)], run, None, device=True)
    assert "instantiated 0 device variants (7 tests collected in all)" in trip.message
    assert "device_restrictions: bypass" in trip.message
    # Without a device, plain tests are what counts.
    assert guard.check([guard.GuardFile("test/a.py", None)], run, None, device=False) == []
    empty = RunData.from_records([_coll("test/a.py", 0, 0)])
    (trip,) = guard.check([guard.GuardFile("test/a.py", None)], empty, None, device=False)
    assert "a.py: instantiated 0 tests" in trip.message


# ------------------------------------------------------------------- shards
def test_assign_covers_every_test_once_and_balances() -> None:
    keys = [f"t{i}" for i in range(50)]
    durations = {f"t{i}": float(i) for i in range(40)}  # t40..t49 never timed
    where, load = assign(keys, durations, 4)
    assert sorted(where) == sorted(keys)
    assert set(where.values()) == {0, 1, 2, 3}
    assert max(load) - min(load) <= max(durations.values())  # LPT bound
    unknown = [where[f"t{i}"] for i in range(40, 50)]
    assert max(unknown.count(s) for s in range(4)) <= 3  # spread, not piled on one shard
    assert assign(reversed(keys), durations, 4)[0] == where  # order does not matter


@pytest.mark.parametrize("bad", ["0/3", "4/3", "x", "1/0", "2"])
def test_shard_spec_errors(bad: str) -> None:
    with pytest.raises(UserError, match="expected I/N"):
        ShardSpec.parse(bad)


SUITE = (
    "import pytest\n\n"
    + "\n".join(f"def test_{i:02d}():\n    assert {i % 4 != 1}\n" for i in range(20))
    + "\ndef test_xfail_that_passes():\n    pass\n\ndef test_strict_that_passes():\n    pass\n"
    + "\n@pytest.mark.parametrize('x', [1])\ndef test_param_xfail(x):\n    pass\n"
)

CONFIG = """
test_suite_config:
  files:
    - path: ./test_many.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [test_01]
          mode: xfail
          reason: tracked upstream
          issue: https://example.invalid/1
        - names: [test_xfail_that_passes, test_param_xfail]
          mode: xfail
        - names: [test_strict_that_passes]
          mode: xfail_strict
        - names: [test_03]
          mode: skip
          reason: flaky
        - names: [test_renamed_upstream, "re:^test_gone_.*"]
          mode: mandatory_success
"""


@pytest.fixture
def many(tmp_path: Path) -> Path:
    (tmp_path / "test_many.py").write_text(SUITE)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    return tmp_path


def _results(path: Path) -> dict[str, str]:
    return {k: str(r["outcome"]) for k, r in RunData.load(path).results.items()}


def test_shards_merge_to_the_unsharded_run(many: Path) -> None:
    full = ootest("run", "cfg.yaml", "--results", "full.jsonl", cwd=many)
    assert full.returncode == 1, full.stdout[-2000:]
    # Durations from the full run balance the shards; all shards use the same file.
    plan = ootest("plan", "cfg.yaml", "--shards", "3", "--durations", "full.jsonl", cwd=many)
    assert plan.returncode == 0, plan.stderr
    legs = json.loads(plan.stdout)["include"]
    assert [leg["shard"] for leg in legs] == ["1/3", "2/3", "3/3"]
    assert len({leg["job_name"] for leg in legs}) == 3
    assert all(leg["estimated_seconds"] is not None for leg in legs)  # durations matched
    seen: list[str] = []
    for leg in legs:
        r = ootest(
            "run", "cfg.yaml", "--shard", leg["shard"], "--durations", "full.jsonl",
            "--results", f"s{leg['index']}.jsonl", "-q", cwd=many,
        )  # fmt: skip
        assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
        part = _results(many / f"s{leg['index']}.jsonl")
        assert part, "every shard gets tests"
        seen += part
    assert sorted(seen) == sorted(_results(many / "full.jsonl"))  # each test exactly once
    m = ootest(
        "merge", "s1.jsonl", "s2.jsonl", "s3.jsonl", "--results", "m.jsonl",
        "--junit", "m.xml", "--html", "m.html", cwd=many,
    )  # fmt: skip
    assert m.returncode == 1
    assert _results(many / "m.jsonl") == _results(many / "full.jsonl")
    one = json.loads(ootest("report", "full.jsonl", "--format", "json", cwd=many).stdout)
    merged = json.loads(ootest("report", "m.jsonl", "--format", "json", cwd=many).stdout)
    assert one == merged == {"passed": 17, "failed": 5, "skipped": 1, "total": 23}


class _Cells(HTMLParser):
    """Collects text by element id and data-outcome cells of the totals table."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.totals: dict[str, int] = {}
        self.text: dict[str, str] = {}
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.stack.append(str(a["id"]))
        if tag == "td" and self.stack and self.stack[-1] == "totals":
            self._cell = a.get("data-outcome")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.totals[self._cell] = int(data)
        for i in self.stack:
            self.text[i] = self.text.get(i, "") + data


def test_stale_promotions_and_html_report(many: Path) -> None:
    r = ootest("run", "cfg.yaml", "--strict-config", cwd=many)
    assert r.returncode == 2, r.stdout[-2000:]  # stale names are an error with --strict-config
    assert "--strict-config: 2 config name(s) matched no test" in r.stderr
    assert "cfg.yaml:18: test_renamed_upstream" in r.stdout
    assert "cfg.yaml:18: re:^test_gone_.*" in r.stdout
    assert "strict xfail PASSED (promote it) test_many.py::test_strict_that_passes" in r.stdout
    assert "2 xfail variant(s) passed" in r.stdout
    assert "test_many.py::test_param_xfail[x=1]" in r.stdout  # brackets are not markup

    page = (many / ".ootest" / "report.html").read_text()
    p = _Cells()
    p.feed(page)
    counts = RunData.load(many / ".ootest" / "results.jsonl").counts()
    assert p.totals["total"] == 23
    for outcome in ("passed", "failed", "xfailed", "xpassed", "xpassed_strict", "skipped"):
        assert p.totals[outcome] == counts[outcome], outcome
    assert (p.totals["passed"], p.totals["failed"], p.totals["xpassed_strict"]) == (14, 4, 1)
    assert "test_renamed_upstream" in p.text["stale"]
    assert "test_xfail_that_passes" in p.text["promotions"]
    assert "test_strict_that_passes" in p.text["promotions"]
    assert "test_many.py::test_05" in p.text["failures"]
    assert "<script" not in page and "://" not in page.replace("https://example.invalid", "")

    # Without --strict-config the same run is a test failure (exit 1), not a config error.
    assert ootest("run", "cfg.yaml", cwd=many).returncode == 1


def test_report_formats(many: Path) -> None:
    assert ootest("run", "cfg.yaml", "--results", "r.jsonl", cwd=many).returncode == 1
    j = ootest("report", "r.jsonl", "--format", "junit", cwd=many)
    assert j.returncode == 0 and j.stdout.startswith("<testsuites")
    assert 'name="ootest.issue" value="https://example.invalid/1"' in j.stdout
    bad = ootest("report", "missing.jsonl", cwd=many)
    assert bad.returncode == 2 and "missing.jsonl: no such results file" in bad.stderr


def test_plan_merge_report_do_not_import_torch(many: Path) -> None:
    assert ootest("run", "cfg.yaml", "--results", "r.jsonl", cwd=many).returncode == 1
    probe = (
        "import sys, runpy\n"
        "for argv in (['plan', 'cfg.yaml', '--shards', '2', '--durations', 'r.jsonl'],\n"
        "             ['merge', 'r.jsonl', '--results', 'm.jsonl'],\n"
        "             ['report', 'r.jsonl', '--format', 'html', '-o', 'r.html'],\n"
        "             ['report', '--trend', 'r.jsonl', 'm.jsonl', '--format', 'html',\n"
        "              '-o', 't.html'],\n"
        "             ['report', '--trend', 'r.jsonl', 'm.jsonl', '--json']):\n"
        "    sys.argv = ['ootest', *argv]\n"
        "    try:\n"
        "        runpy.run_module('ootest.cli', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    r = run([sys.executable, "-c", probe], cwd=many)
    assert "TORCH False" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "id='trend-runs'" in (many / "t.html").read_text()


def test_failure_causes_group_missing_kernels_dtypes_and_signals() -> None:
    from ootest.runner.render import failure_causes

    def rec(i: int, outcome: str, message: str, **kw: object) -> dict[str, object]:
        return {"kind": "result", "nodeid": f"t{i}", "outcome": outcome, "message": message, **kw}

    missing = "NotImplementedError: Could not run 'aten::cumsum.out' with arguments from 'emu'"
    data = RunData.from_records(
        [
            rec(1, "xfailed", missing),
            rec(2, "failed", missing),
            rec(3, "failed", "emu: aten::mm does not support dtype Long (supported: Float)"),
            rec(4, "crashed", "process died of SIGSEGV", signal="SIGSEGV"),
            rec(5, "failed", "E   AssertionError: Tensor-likes are not close!\nmore"),
            rec(6, "passed", missing),  # not a failure
        ]
    )
    rows = {c: (n, dict(o)) for c, n, o in failure_causes(data)}
    assert rows["missing kernel aten::cumsum.out"] == (2, {"xfailed": 1, "failed": 1})
    assert rows["aten::mm: dtype Long not supported"][0] == 1
    assert rows["crashed (SIGSEGV)"][0] == 1
    assert rows["AssertionError: Tensor-likes are not close!"][0] == 1
    assert sum(n for n, _ in rows.values()) == 5


def test_summary_caps_a_long_stale_list(capsys: pytest.CaptureFixture[str]) -> None:
    from ootest.record.results import RunData
    from ootest.runner.render import print_summary

    recs = [{"kind": "stale", "origin": f"c.yaml:{i}", "name": f"T::test_{i}"} for i in range(23)]
    print_summary(RunData.from_records(recs), "r.jsonl")
    out = capsys.readouterr().out
    assert "23 config name(s) matched no test" in out
    assert "T::test_19" in out and "T::test_20" not in out
    assert "... and 3 more" in out
    assert "variant filter" not in out
    # Note [Exact op filters]: a family op= filter written before says why it is stale
    recs.append({"kind": "stale", "origin": "c.yaml:99", "name": "T::test_x[op=div,dtype=int64]"})
    print_summary(RunData.from_records(recs), "r.jsonl")
    out = " ".join(capsys.readouterr().out.split())
    assert "1 of them name an op in a variant filter: op= is the OpInfo's full name" in out


def test_skips_are_summarised_by_who_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    from ootest.record.results import skip_cause
    from ootest.runner.render import print_summary

    upstream = {
        "kind": "result", "variant_id": "t/a.py::T::test_cuda", "file": "t/a.py",
        "outcome": "skipped", "mode": "mandatory_success",
        "reason": "not listed in the config (unlisted_test_mode: mandatory_success)",
        "message": "Skipped: Only runs on cuda",
    }  # fmt: skip
    config = {
        "kind": "result", "variant_id": "t/a.py::T::test_x", "file": "t/a.py",
        "outcome": "skipped", "mode": "skip", "reason": "needs fp64",
        "message": "Skipped: needs fp64",
    }  # fmt: skip
    assert skip_cause(upstream) == "test: Only runs on cuda"
    assert skip_cause(config) == "config: needs fp64"
    print_summary(RunData.from_records([upstream, config]), "r.jsonl", [], [])
    out = capsys.readouterr().out
    assert "test: Only runs on cuda" in out and "config: needs fp64" in out
    assert "unlisted_test_mode: mandatory_success" not in out
