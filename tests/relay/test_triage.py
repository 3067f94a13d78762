"""The CRCR triage verdict: upstream or backend, from evidence; checked by the emulator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from ootest.relay import report as rp
from ootest.relay import triage as tr
from ootest.relay.emulate import Emulator
from tests.conftest import run

F = "test/test_ops.py::TestOpConsistency::test_matches_cpu"
# fails on emu and on the CPU: NumPy 2 removed msort (seen on real upstream files)
UPSTREAM = "test/test_sort.py::TestSort::test_msort[dtype=float32]"
# passes on the CPU, passed here last time, fails now: this backend's
BACKEND = f"{F}[op=add,dtype=float32]"
FLAKY = f"{F}[op=mul,dtype=float32]"
CHANGED = f"{F}[op=exp,dtype=float32]"  # the torch update modified this test
NOTHING = f"{F}[op=sub,dtype=float32]"  # no CPU result, never seen passing
PASSING = f"{F}[op=abs,dtype=float32]"

MSORT = "E   AttributeError: module 'numpy' has no attribute 'msort'"
DEVICE = (
    "E   RuntimeError: emu (PrivateUse1) profile 'faulty': device error in "
    "aten::add.Tensor on 250 elements: kernel launch failed"
)
PAYLOAD = {
    "event_type": "pull_request",
    "delivery_id": "d-7",
    "payload": {
        "repository": {"full_name": "pytorch/pytorch"},
        "action": "synchronize",
        "pull_request": {"number": 194610, "head": {"sha": "e" * 40}, "labels": []},
    },
}


def _cpu(vid: str) -> str:
    head, _, axes = vid.partition("[")
    return f"{head}[{axes[:-1]},device=cpu]" if axes else f"{head}[device=cpu]"


def _rec(vid: str, outcome: str, message: str | None = None) -> dict[str, Any]:
    return {
        "kind": "result",
        "variant_id": vid,
        "outcome": outcome,
        "mode": "mandatory_success",
        "message": message,
        "where": "test_x.py:10" if message else None,
    }


def _write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _evidence(tmp_path: Path) -> dict[str, Path]:
    fail = {
        UPSTREAM: MSORT,
        BACKEND: DEVICE,
        FLAKY: "E   AssertionError: Tensor-likes are not close!",
        CHANGED: "E   TypeError: exp() got an unexpected keyword argument 'out_dtype'",
        NOTHING: "E   RuntimeError: aten::sub.Tensor is not implemented",
    }
    return {
        "current": _write(
            tmp_path / "current.jsonl",
            [_rec(v, "failed", m) for v, m in fail.items()] + [_rec(PASSING, "passed")],
        ),
        "cpu": _write(
            tmp_path / "cpu.jsonl",
            [_rec(_cpu(UPSTREAM), "failed", MSORT)]
            + [_rec(_cpu(v), "passed") for v in (BACKEND, FLAKY, CHANGED, PASSING)],
        ),
        "prev1": _write(
            tmp_path / "prev1.jsonl",
            [_rec(FLAKY, "failed", "E   AssertionError: x"), _rec(BACKEND, "passed")],
        ),
        "prev2": _write(
            tmp_path / "prev2.jsonl",
            [_rec(FLAKY, "passed"), _rec(BACKEND, "passed"), _rec(NOTHING, "failed", "E x")],
        ),
        "diff": _write_json(
            tmp_path / "diff.json",
            {"added": [], "removed": [], "modified": [{"id": CHANGED, "reasons": ["opinfo:exp"]}]},
        ),
    }


def _write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


def _by_test(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["test"]: e for e in verdict["evidence"]}


def test_each_failure_is_placed_by_its_evidence(tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    inp = tr.load_inputs(ev["current"], [ev["cpu"]], [ev["prev1"], ev["prev2"]], ev["diff"])
    v = tr.verdict(inp, job="suite | shard 1/1", log_url="https://x/runs/7", pr=1, commit="c")
    assert v is not None and tr.check(v) == []
    got = {t: e["category"] for t, e in _by_test(v).items()}
    assert got == {
        UPSTREAM: "upstream",
        BACKEND: "backend",
        FLAKY: "flake",
        CHANGED: "upstream",
        NOTHING: "unknown",
    }
    e = _by_test(v)
    assert e[UPSTREAM]["why"].startswith("fails on the CPU reference too: AttributeError")
    assert "msort" in e[UPSTREAM]["excerpt"] and e[UPSTREAM]["signature"].startswith(
        "AttributeError:"
    )
    assert e[BACKEND]["why"] == (
        "passes on the CPU reference and passed on this device before (P P F)"
    )
    assert e[FLAKY]["why"] == "flipped 2 times in the last 3 runs: F P F"
    assert e[CHANGED]["why"] == "this torch update changed the test (opinfo:exp)"
    assert "no CPU reference result" in e[NOTHING]["why"]
    # one backend failure makes the job the backend's; an unknown one lowers confidence
    assert (v["category"], v["confidence"]) == ("backend", "medium")
    assert v["evidence"][0]["category"] == "backend" and v["suspected_upstream"] is None
    assert v["summary"].startswith(
        "5 failing tests, 5 signatures (1 backend, 1 unknown, 1 flake, 2 upstream)"
    )


def test_flake_needs_two_flips_and_the_window_bounds_history(tmp_path: Path) -> None:
    cur = _write(tmp_path / "c.jsonl", [_rec(FLAKY, "failed", "E x")])
    cpu = _write(tmp_path / "cpu.jsonl", [_rec(_cpu(FLAKY), "passed")])
    runs = [_write(tmp_path / f"p{i}.jsonl", [_rec(FLAKY, o, "E x")]) for i, o in
            enumerate(["passed", "failed", "passed", "passed"])]  # fmt: skip

    def category(previous: list[Path], window: int) -> str:
        v = tr.verdict(tr.load_inputs(cur, [cpu], previous, None, window), job="j", log_url=None)
        assert v is not None
        return str(v["evidence"][0]["category"])

    assert category(runs, 5) == "flake"  # P F P P F
    assert category(runs, 3) == "backend"  # P P F: a clean regression
    assert category([], 5) == "unknown"  # never seen passing here
    with pytest.raises(Exception, match="--flake-window: expected at least 2 runs; found 1"):
        tr.load_inputs(cur, [cpu], runs, None, 1)


def test_all_upstream_and_confidence(tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    cur = _write(tmp_path / "c.jsonl", [_rec(UPSTREAM, "failed", MSORT), _rec(PASSING, "passed")])
    v = tr.verdict(tr.load_inputs(cur, [ev["cpu"]]), job="j", log_url=None, pr=5, commit="c" * 40)
    assert v is not None
    assert (v["category"], v["confidence"]) == ("upstream", "high")
    assert v["suspected_upstream"]["pr"] == 5 and v["suspected_upstream"]["commit"] == "c" * 40
    assert "msort" in v["suspected_upstream"]["reason"]
    # resting partly on the memory diff alone: medium
    cur = _write(
        tmp_path / "c2.jsonl", [_rec(UPSTREAM, "failed", MSORT), _rec(CHANGED, "error", "E x")]
    )
    v = tr.verdict(tr.load_inputs(cur, [ev["cpu"]], (), ev["diff"]), job="j", log_url=None)
    assert v is not None and (v["category"], v["confidence"]) == ("upstream", "medium")
    # nothing failed: no verdict; no results at all: infra
    ok = _write(tmp_path / "ok.jsonl", [_rec(PASSING, "passed"), _rec(UPSTREAM, "xfailed", "E x")])
    assert tr.verdict(tr.load_inputs(ok), job="j", log_url=None) is None
    empty = _write(tmp_path / "empty.jsonl", [])
    v = tr.verdict(tr.load_inputs(empty), job="j", log_url=None)
    assert v is not None and (v["category"], v["confidence"]) == ("infra", "low")
    # a strict xfail that passed is the backend's config to fix
    xp = _write(tmp_path / "xp.jsonl", [_rec(PASSING, "xpassed_strict")])
    v = tr.verdict(tr.load_inputs(xp), job="j", log_url=None)
    assert v is not None and (v["category"], v["confidence"]) == ("backend", "high")


def test_evidence_is_bounded_and_keeps_every_category(tmp_path: Path) -> None:
    long = "x" * 900
    recs = [
        _rec(f"{F}[op=op{i},dtype=float32]", "failed", f"E   RuntimeError: bug {i:c}z {long}")
        for i in range(65, 125)
    ]  # 60 signatures (the letter tells them apart; numbers are normalised away)
    recs += [_rec(f"{F}[op=same{i},dtype=float32]", "failed", "E   KeyError: a") for i in range(40)]
    recs.append(_rec(UPSTREAM, "failed", MSORT))  # the smallest group: ranked last
    cur = _write(tmp_path / "c.jsonl", recs)
    cpu = _write(tmp_path / "cpu.jsonl", [_rec(_cpu(UPSTREAM), "failed", MSORT)])
    v = tr.verdict(tr.load_inputs(cur, [cpu]), job="j", log_url=None)
    assert v is not None and v["category"] == "unknown"
    assert len(v["evidence"]) == tr.MAX_EVIDENCE
    top = v["evidence"][0]  # the biggest group first: one signature, 40 variants
    assert top["count"] == 40 and len(top["variants"]) == tr.MAX_VARIANTS
    assert v["evidence"][-1]["test"] == UPSTREAM  # kept although it ranks last
    assert all(len(e["excerpt"]) <= 300 for e in v["evidence"])
    assert len(json.dumps(v)) < 12_000
    v = tr.verdict(tr.load_inputs(cur, [cpu]), job="j", log_url=None, max_evidence=2)
    assert v is not None
    got = [(e["category"], e["count"]) for e in v["evidence"]]
    assert got == [("unknown", 40), ("upstream", 1)]


def test_input_errors_are_one_line(tmp_path: Path) -> None:
    bad = _write_json(tmp_path / "d.json", {"modified": [{"no_id": 1}]})
    cur = _write(tmp_path / "c.jsonl", [])
    with pytest.raises(Exception) as e:
        tr.load_inputs(cur, memory_diff=bad)
    assert str(e.value).startswith(
        f"--memory-diff {bad}: expected the JSON 'ootest index diff OLD NEW --json' prints"
    )
    xml = tmp_path / "j.xml"
    xml.write_text("<testsuites/>")
    with pytest.raises(Exception, match="--triage needs ootest JSONL results"):
        tr.load_inputs(xml)


def test_upstream_ref_reads_only_valid_values() -> None:
    assert tr.upstream_ref(PAYLOAD) == (194610, "e" * 40)
    push = {"payload": {"after": "a" * 40}}
    assert tr.upstream_ref(push) == (None, "a" * 40)
    assert tr.upstream_ref({"payload": {"after": "$(rm -rf /)"}}) == (None, None)
    assert tr.upstream_ref({"payload": {"pull_request": {"number": True}}}) == (None, None)


@pytest.fixture
def relay():  # type: ignore[no-untyped-def]
    emu = Emulator().start()
    yield emu
    emu.stop()


def test_callback_carries_the_verdict_to_the_emulator(relay: Emulator, tmp_path: Path) -> None:
    ev = _evidence(tmp_path)
    event = _write_json(tmp_path / "event.json", {"client_payload": PAYLOAD})
    env = {
        "OOTEST_RELAY_URL": relay.url,
        "OOTEST_RELAY_TOKEN": relay.issue_token("o/r"),
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "42",
        "GITHUB_RUN_ATTEMPT": "1",
        "OOTEST_JOB_NAME": "suite | shard 1/1",
        "RUNNER_TEMP": str(tmp_path),
    }
    cli = [sys.executable, "-m", "ootest.cli", "relay", "report"]
    assert run([*cli, "--status", "in_progress"], env=env).returncode == 0
    out = tmp_path / "verdict.json"
    r = run(
        [*cli, "--status", "completed", "--conclusion", "failure", "--results", str(ev["current"]),
         "--triage", "--reference", str(ev["cpu"]), "--previous", str(ev["prev1"]),
         "--previous", str(ev["prev2"]), "--memory-diff", str(ev["diff"]),
         "--triage-out", str(out)],
        env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "ootest relay: triage: backend (medium): 5 failing tests" in r.stderr
    (job,) = relay.jobs()
    verdict = job["triage"]
    assert verdict == json.loads(out.read_text())
    assert verdict["schema_version"] == 1 and verdict["category"] == "backend"
    e = _by_test(verdict)
    assert (e[UPSTREAM]["category"], e[BACKEND]["category"]) == ("upstream", "backend")
    assert e[UPSTREAM]["variants"] == [UPSTREAM] and e[BACKEND]["variants"] == [BACKEND]
    assert e[BACKEND]["job"] == "suite | shard 1/1"
    assert e[BACKEND]["log_url"] == "https://github.com/o/r/actions/runs/42"
    assert job["test_results"] == {"passed": 1, "failed": 5, "skipped": 0, "total": 6}
    page = httpx.get(relay.url + "/").text
    assert "backend (medium)" in page and "msort" in page

    # off by default; a malformed verdict is refused by the relay emulator
    plain = rp.build_body(PAYLOAD, rp.JobInfo("ci", "u", 8, 1, "j"), "completed", "failure", None)
    assert "triage" not in plain["workflow"]
    bad = {**verdict, "category": "cosmic rays"}
    body = rp.build_body(
        PAYLOAD, rp.JobInfo("ci", "u", 9, 1, "j"), "completed", "failure", None, bad
    )
    started = {k: v for k, v in body["workflow"].items() if k != "triage"}
    r2 = httpx.post(
        relay.url + "/github/callback",
        json={**body, "workflow": {**started, "status": "in_progress"}},
        headers={"Authorization": f"Bearer {relay.issue_token('o/r')}"},
    )
    assert r2.status_code == 200  # in_progress first
    r3 = httpx.post(
        relay.url + "/github/callback",
        json=body,
        headers={"Authorization": f"Bearer {relay.issue_token('o/r')}"},
    )
    assert r3.status_code == 400
    assert "workflow.triage: category: expected one of upstream" in r3.json()["error"]


def test_triage_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ootest.cli.main import main

    event = _write_json(tmp_path / "event.json", {"client_payload": PAYLOAD})
    for k, v in {
        "OOTEST_RELAY_TOKEN": "t",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "1",
        "OOTEST_JOB_NAME": "j",
        "RUNNER_TEMP": str(tmp_path),
    }.items():
        monkeypatch.setenv(k, v)
    cli = ["relay", "report", "--relay-url", "http://127.0.0.1:9", "--triage"]
    for extra, message in (
        (["--status", "in_progress"], "--triage: a verdict goes with --status completed only"),
        (
            ["--status", "completed", "--conclusion", "failure"],
            "--triage needs --results (the ootest JSONL results of this job)",
        ),
    ):
        assert main([*cli, *extra]) == 2
        assert capsys.readouterr().err.strip() == f"ootest: error: {message}"
