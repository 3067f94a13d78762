"""The CRCR triage verdict: upstream or backend, from evidence; checked by the emulator."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections import Counter
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
    results = _write(tmp_path / "r.jsonl", [_rec(PASSING, "passed")])
    done = ["--status", "completed", "--conclusion", "failure", "--results", str(results)]
    for extra, message in (
        (["--status", "in_progress"], "--triage: a verdict goes with --status completed only"),
        (
            [*done, "--device", "Tiny-1"],
            "--device: expected NAME, MODULE:NAME or emu[:PROFILE] (NAME: a backend name of "
            "1-40 lowercase letters or '_', starting with a letter (what torch.device() accepts "
            "for a privateuse1 backend); MODULE: a dotted Python module); found 'Tiny-1'; pass "
            "what 'ootest run --device' was given, e.g. torch_spyre:spyre",
        ),
        (
            [*done, "--device", "a b:tiny"],
            "--device: expected MODULE:NAME with MODULE a dotted Python module; found "
            "'a b:tiny'; pass what 'ootest run --device' was given, e.g. torch_spyre:spyre",
        ),
        (
            [*done, "--backend-package", "../x"],
            "--backend-package: expected a dotted Python package name; found '../x'; pass the "
            "name you import, e.g. torch_tiny or vendor.tiny",
        ),
        (
            ["--status", "completed", "--conclusion", "failure"],
            "--triage needs --results (the ootest JSONL results of this job)",
        ),
    ):
        assert main([*cli, *extra]) == 2
        assert capsys.readouterr().err.strip() == f"ootest: error: {message}"


# ------------------------------------------------------------ a backend's own failures
S = "test/test_sort_and_select.py::TestSortAndSelect"
# torch 2.13's dispatcher error for an op without a kernel, as the recorder keeps it
# (the exception's text, first 500 characters; checked on emu:young, which registers
# no aten::sort.values_stable: the 'emu' below is the renamed privateuse1 backend)
_CNR = (
    "NotImplementedError: Could not run '{op}' with arguments from the '{key}' backend. "
    "This could be because the operator doesn't exist for this backend, or was omitted "
    "during the selective/custom build process (if using custom build). If you are a "
    "Facebook employee using PyTorch on mobile, please visit https://fburl.com/ptmfixes "
    "for possible resolutions. '{op}' is only available for these backends: [CPU, Meta, "
    "BackendSelect, Python, FuncTorchDynamicLayerBackMode, Functionalize, Conjugate, "
    "Negative, ZeroTensor, ADInplaceOrView, AutogradOther, AutogradCPU, AutogradCUDA, "
    "AutogradHIP, AutogradXLA"
)


def missing(op: str, key: str = "tiny") -> str:
    return _CNR.format(op=op, key=key)[:500]


MISSING = f"{S}::test_sort_stable[dtype=float32]"  # no kernel: backend, high
MISSING2 = f"{S}::test_sort_stable[dtype=int64]"  # the same op again
TOPK = f"{S}::test_topk[dtype=float32]"  # another op
RAISED = f"{S}::test_sort_layout[dtype=float32]"  # the backend's frame raised it: high
OWN_EXC = f"{S}::test_sort_empty[dtype=float32]"  # the backend's exception class: high
NAMED = f"{S}::test_sort_half[dtype=float16]"  # only the text names it: medium
CPU_TOO = f"{S}::test_msort[dtype=float32]"  # no kernel, but fails on the CPU too: upstream
UPGRADED = f"{S}::test_sort_new_arg[dtype=float32]"  # the update changed it: upstream
FLIPS = f"{S}::test_sort_random[dtype=float32]"  # flips between runs: flake
NO_REF = f"{S}::test_kthvalue[dtype=float32]"  # no CPU result: unknown
OTHER_KEY = f"{S}::test_sort_to_cpu[dtype=float32]"  # a CPU kernel missing: not the backend's
PLAIN = f"{S}::test_sort_values[dtype=float32]"  # CPU passes, nothing ties it: unknown

TINY_FRAMES = ["test_sort_and_select.py", "torch/_tensor.py", "torch_tiny/kernels.py"]
TORCH_FRAMES = ["test_sort_and_select.py", "torch/_tensor.py", "torch/_ops.py"]


def _fail(vid: str, message: str, frames: list[str] | None = None) -> dict[str, Any]:
    rec = _rec(vid, "failed", message)
    rec["frames"] = frames if frames is not None else TORCH_FRAMES
    return rec


def _backend_run(tmp_path: Path, *, collection: bool = False) -> dict[str, Path]:
    fail = [
        _fail(MISSING, missing("aten::sort.values_stable")),
        _fail(MISSING2, missing("aten::sort.values_stable")),
        _fail(TOPK, missing("aten::topk.values", "AutogradPrivateUse1")),
        _fail(RAISED, "RuntimeError: unsupported layout torch.sparse_coo", TINY_FRAMES),
        _fail(OWN_EXC, "torch_tiny.errors.DeviceError: queue 3 stalled"),
        _fail(NAMED, "RuntimeError: tiny: unsupported dtype Half"),
        _fail(CPU_TOO, missing("aten::msort")),
        _fail(UPGRADED, missing("aten::sort.values_stable")),
        _fail(FLIPS, "RuntimeError: tiny: timeout waiting for queue", TINY_FRAMES),
        _fail(NO_REF, missing("aten::kthvalue.values")),
        _fail(OTHER_KEY, missing("aten::sort.values_stable", "CPU")),
        _fail(PLAIN, "AssertionError: Tensor-likes are not close!"),
    ]
    head = []
    if collection:  # what 'ootest run --device torch_tiny:tiny' writes
        head = [
            {
                "kind": "collection",
                "file": "test/test_sort_and_select.py",
                "collected": 12,
                "device": "tiny",
                "device_module": "torch_tiny",
            }
        ]
    cpu_pass = (MISSING, MISSING2, TOPK, RAISED, OWN_EXC, NAMED, UPGRADED, FLIPS, OTHER_KEY, PLAIN)
    return {
        "current": _write(tmp_path / "current.jsonl", head + fail),
        "cpu": _write(
            tmp_path / "cpu.jsonl",
            [_rec(_cpu(v), "passed") for v in cpu_pass]
            + [_rec(_cpu(CPU_TOO), "failed", MSORT)],
        ),
        "prev": _write(
            tmp_path / "prev.jsonl",
            [_rec(FLIPS, "passed"), _rec(MISSING, "failed", missing("aten::sort.values_stable"))],
        ),
        "prev2": _write(tmp_path / "prev2.jsonl", [_rec(FLIPS, "failed", "E x")]),
        "diff": _write_json(
            tmp_path / "diff.json",
            {"added": [], "modified": [{"id": UPGRADED, "reasons": ["test_source"]}]},
        ),
    }  # fmt: skip


def _calls(inp: tr.Inputs) -> dict[str, tr.Call]:
    return {vid: tr.classify(vid, rec, inp) for vid, rec in tr.failing(inp.current)}


def test_a_backends_own_failures_are_placed(tmp_path: Path) -> None:
    ev = _backend_run(tmp_path)
    inp = tr.load_inputs(
        ev["current"], [ev["cpu"]], [ev["prev2"], ev["prev"]], ev["diff"], device="torch_tiny:tiny"
    )
    got = {vid: (c.category, c.confidence) for vid, c in _calls(inp).items()}
    assert got == {
        MISSING: ("backend", "high"),
        MISSING2: ("backend", "high"),
        TOPK: ("backend", "high"),  # reported under the autograd key: still this backend's
        RAISED: ("backend", "high"),
        OWN_EXC: ("backend", "high"),
        NAMED: ("backend", "medium"),
        CPU_TOO: ("upstream", "high"),  # never the backend's when the CPU fails too
        UPGRADED: ("upstream", "medium"),  # changed by this update: upstream keeps it
        FLIPS: ("flake", "medium"),  # F P F: flakes keep their rule, frames or not
        NO_REF: ("unknown", "low"),
        OTHER_KEY: ("unknown", "low"),  # a missing CPU kernel is not the backend's
        PLAIN: ("unknown", "low"),
    }
    calls = _calls(inp)
    assert calls[MISSING].why == (
        "the 'tiny' backend has no kernel for aten::sort.values_stable (the dispatcher's "
        "NotImplementedError); passes on the CPU reference"
    )
    assert calls[MISSING].signature == "missing_kernel:aten::sort.values_stable"
    assert calls[MISSING].excerpt == (
        "failed: NotImplementedError: Could not run 'aten::sort.values_stable' with "
        "arguments from the 'tiny' backend."
    )
    assert calls[TOPK].signature == "missing_kernel:aten::topk.values"
    assert calls[RAISED].why == (
        "raised in the backend's code (torch_tiny/kernels.py); passes on the CPU reference"
    )
    assert calls[OWN_EXC].why.startswith(
        "raised as the backend's own exception (torch_tiny.errors.DeviceError)"
    )
    assert calls[NAMED].why == "the error names the backend ('tiny'); passes on the CPU reference"
    assert calls[CPU_TOO].why == (
        "fails on the CPU reference too: AttributeError: module 'numpy' has no attribute 'msort'"
    )
    assert calls[UPGRADED].why == "this torch update changed the test (test_source)"
    assert calls[NO_REF].why == (
        "no CPU reference result; not seen passing on this device (0 earlier runs); "
        "missing kernel aten::kthvalue.values on the 'tiny' backend"
    )
    assert "nothing in the error ties it to the backend" in calls[PLAIN].why


def test_the_mixed_job_is_the_backends_and_names_what_to_implement(tmp_path: Path) -> None:
    ev = _backend_run(tmp_path)
    inp = tr.load_inputs(
        ev["current"], [ev["cpu"]], [ev["prev2"], ev["prev"]], ev["diff"], device="torch_tiny:tiny"
    )
    v = tr.verdict(inp, job="j", log_url=None, pr=7, commit="c" * 40)
    assert v is not None and tr.check(v) == []
    # 5 of 12 are the backend's with high confidence: the job is the backend's, but
    # under half rest on strong evidence, so medium
    assert (v["category"], v["confidence"]) == ("backend", "medium")
    assert v["suspected_upstream"] is None
    assert v["summary"] == (
        "12 failing tests, 11 signatures (6 backend, 3 unknown, 1 flake, 2 upstream): "
        "the backend's own: 3 missing kernels on the 'tiny' backend (implement first: "
        "aten::sort.values_stable 2, aten::topk.values 1), 2 raised by its own code, "
        "1 error that names it"
    )
    top = v["evidence"][0]  # the verdict's category first, the largest group first
    assert (top["category"], top["signature"], top["count"]) == (
        "backend",
        "missing_kernel:aten::sort.values_stable",
        2,
    )
    assert top["variants"] == [MISSING, MISSING2]
    assert {e["category"] for e in v["evidence"]} == {"backend", "unknown", "flake", "upstream"}


def test_the_job_category_needs_strong_evidence_or_a_majority(tmp_path: Path) -> None:
    def call(category: str, confidence: str) -> tr.Call:
        return tr.Call("v", category, confidence, "why", "sig", "excerpt", "rule")

    hb, mb = call("backend", "high"), call("backend", "medium")
    up, mup = call("upstream", "high"), call("upstream", "medium")
    unk, fl = call("unknown", "low"), call("flake", "medium")
    assert tr.combine([hb, up, up, up]) == ("backend", "medium")  # keeps the job red alone
    assert tr.combine([hb, hb, up, unk]) == ("backend", "high")  # half are strong
    assert tr.combine([mb, mb, up]) == ("backend", "medium")  # a majority, none strong
    assert tr.combine([mb, up, up]) == ("unknown", "low")  # a lone medium call decides nothing
    assert tr.combine([unk, fl, up]) == ("unknown", "low")
    assert tr.combine([fl, up]) == ("flake", "medium")
    assert tr.combine([up, up]) == ("upstream", "high")
    assert tr.combine([up, mup]) == ("upstream", "medium")


def test_without_a_passing_cpu_reference_nothing_is_the_backends(tmp_path: Path) -> None:
    ev = _backend_run(tmp_path)
    # no reference at all: the current behaviour (unknown, or what history says)
    inp = tr.load_inputs(
        ev["current"], [], [ev["prev2"], ev["prev"]], ev["diff"], device="torch_tiny:tiny"
    )
    got = Counter(c.category for c in _calls(inp).values())
    assert got == Counter({"unknown": 10, "upstream": 1, "flake": 1})
    v = tr.verdict(inp, job="j", log_url=None)
    assert v is not None and (v["category"], v["confidence"]) == ("unknown", "low")
    # a reference that fails or skips them: never the backend's
    cpu = _write(
        tmp_path / "cpu-bad.jsonl",
        [_rec(_cpu(MISSING), "failed", "E   RuntimeError: x"), _rec(_cpu(RAISED), "skipped")],
    )
    calls = _calls(tr.load_inputs(ev["current"], [cpu], device="torch_tiny:tiny"))
    assert (calls[MISSING].category, calls[RAISED].category) == ("upstream", "unknown")
    assert "the CPU reference skipped it" in calls[RAISED].why


def test_the_backend_is_known_from_the_results_or_the_flags(tmp_path: Path) -> None:
    ev = _backend_run(tmp_path, collection=True)
    # no --device: the collection records name the backend and its module
    inp = tr.load_inputs(ev["current"], [ev["cpu"]])
    assert inp.backend == tr.Backend("tiny", ("torch_tiny",))
    got = {v: c.category for v, c in _calls(inp).items()}
    assert got[MISSING] == got[RAISED] == got[OWN_EXC] == "backend"
    # without either, only PrivateUse1 is the backend's key, and no frame is its own
    (tmp_path / "p").mkdir()
    plain = _backend_run(tmp_path / "p")
    calls = _calls(tr.load_inputs(plain["current"], [plain["cpu"]]))
    assert (calls[MISSING].category, calls[RAISED].category) == ("unknown", "unknown")
    assert calls[TOPK].category == "backend"  # 'AutogradPrivateUse1' names the slot
    # a name alone: the text rules; a package given: its frames are the backend's
    calls = _calls(tr.load_inputs(plain["current"], [plain["cpu"]], device="tiny"))
    assert (calls[MISSING].category, calls[RAISED].category) == ("backend", "unknown")
    inp = tr.load_inputs(plain["current"], [plain["cpu"]], device="tiny", packages=["torch_tiny"])
    assert _calls(inp)[RAISED].confidence == "high"
    assert tr.Backend.of("emu:faulty") == tr.Backend("emu", ("ootest.device.emu",))
    assert tr.Backend.of("vendor.tiny.ext:tiny") == tr.Backend("tiny", ("vendor",))
    assert tr.Backend("emu", ("ootest.device.emu",)).owns("ootest/device/emu/__init__.py")
    for device, message in (
        ("Tiny-1", "--device: expected NAME, MODULE:NAME or emu[:PROFILE]"),
        (":tiny", "--device: expected NAME, MODULE:NAME or emu[:PROFILE]"),
        ("a b:tiny", "--device: expected MODULE:NAME with MODULE a dotted Python module"),
    ):
        with pytest.raises(Exception, match=re.escape(message)):
            tr.load_inputs(plain["current"], device=device)
    with pytest.raises(Exception, match="--backend-package: expected a dotted Python package"):
        tr.load_inputs(plain["current"], packages=["../x"])


def test_hostile_test_output_is_escaped_and_bounded(tmp_path: Path) -> None:
    evil = "\x1b[2J\x1b]8;;http://x\x07click\u202egnp.exe\u200b\x00" + "y" * 5000
    vid = f"{S}::test_evil[x=\x1b[31m{'z' * 900}]"
    cur = _write(
        tmp_path / "c.jsonl",
        [
            _fail(vid, f"RuntimeError: tiny: {evil}\nE   second line"),
            _fail(MISSING, "NotImplementedError: Could not run 'aten::x\x1b' with arguments "
                  "from the 'tiny' backend. " + evil),
        ],
    )  # fmt: skip
    cpu = _write(tmp_path / "cpu.jsonl", [_rec(_cpu(vid), "passed"), _rec(_cpu(MISSING), "passed")])
    v = tr.verdict(tr.load_inputs(cur, [cpu], device="tiny"), job="j", log_url=None)
    assert v is not None and tr.check(v) == []
    text = json.dumps(v, ensure_ascii=False)
    assert not any(unicodedata.category(ch)[0] == "C" for ch in text)
    assert "\\x1b[2J" in v["evidence"][0]["excerpt"] + v["evidence"][1]["excerpt"]
    for e in v["evidence"]:
        assert len(e["excerpt"]) <= 300 and len(e["why"]) <= 300 and len(e["test"]) <= 300
        assert all(len(x) <= 300 for x in e["variants"])
    # an op name outside the dispatcher's characters is no missing kernel
    assert not any(e["signature"].startswith("missing_kernel") for e in v["evidence"])
    assert len(v["summary"]) <= 600 and len(text) < 6000


def test_recorded_frames_tell_the_backends_code(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # a backend package of plain Python (no torch needed to see who raised what)
    pkg = pytester.mkpydir("torch_tiny")
    (pkg / "kernels.py").write_text("def sort(x):\n    raise RuntimeError('unsupported layout')\n")
    pytester.makepyfile(
        test_sort="""
from torch_tiny import kernels

def test_sort():
    kernels.sort([3, 1])

def test_plain():
    assert [1, 3] == [3, 1]
"""
    )
    pytester.runpytest("--ootest-results", "r.jsonl")
    results = pytester.path / "r.jsonl"
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    recs = {r["variant_id"].rsplit("::", 1)[-1]: r for r in lines if r["kind"] == "result"}
    assert recs["test_sort"]["frames"] == ["test_sort.py", "torch_tiny/kernels.py"]
    assert recs["test_plain"]["frames"] == ["test_sort.py"]
    cpu = _write(
        tmp_path / "cpu.jsonl",
        [_rec(_cpu(r["variant_id"]), "passed") for r in recs.values()],
    )
    inp = tr.load_inputs(results, [cpu], device="torch_tiny:tiny")
    got = {vid.rsplit("::", 1)[-1]: (c.category, c.confidence) for vid, c in _calls(inp).items()}
    assert got == {"test_sort": ("backend", "high"), "test_plain": ("unknown", "low")}


def test_torchs_repro_line_does_not_name_the_backend(tmp_path: Path) -> None:
    repro = (
        "\n\nTo execute this test, run the following from the base repo dir:\n"
        "    python tests/tiny/test_sort.py TestSortPRIVATEUSE1.test_sort_tiny_float32"
    )
    cur = _write(
        tmp_path / "c.jsonl",
        [
            _fail(PLAIN, "AssertionError: boom" + repro),
            _fail(NAMED, "RuntimeError: tiny: x" + repro),
        ],
    )
    cpu = _write(tmp_path / "cpu.jsonl", [_rec(_cpu(PLAIN), "passed"), _rec(_cpu(NAMED), "passed")])
    calls = _calls(tr.load_inputs(cur, [cpu], device="torch_tiny:tiny"))
    assert (calls[PLAIN].category, calls[NAMED].category) == ("unknown", "backend")


# ------------------------------------------------------- the CPU reference's origin
def test_a_reference_counts_only_its_cpu_results(tmp_path: Path) -> None:
    """Note [Evidence origins]: a plain pytest run of the same files where the
    backend autoloads holds the device's variants (``device=tiny``) beside the
    CPU's; their failures made the device's failures 'upstream'."""
    ev = _backend_run(tmp_path)
    recs = [json.loads(x) for x in ev["cpu"].read_text().splitlines()]
    failures = [json.loads(x) for x in ev["current"].read_text().splitlines()]
    tiny = [
        {**r, "variant_id": r["variant_id"][:-1] + ",device=tiny]"}
        for r in failures
        if r.get("kind") == "result" and r["variant_id"].endswith("]")
    ]
    both = _write(tmp_path / "both.jsonl", recs + tiny)  # the CPU's first, as pytest ran them
    inp = tr.load_inputs(ev["current"], [both], device="torch_tiny:tiny")
    want = tr.load_inputs(ev["current"], [ev["cpu"]], device="torch_tiny:tiny")
    assert {v: c.category for v, c in _calls(inp).items()} == {
        v: c.category for v, c in _calls(want).items()
    }
    assert _calls(inp)[MISSING].category == "backend"
    assert inp.notes == [
        f"--reference {both}: {len(tiny)} of tiny left out: only its CPU results are the "
        "CPU reference"
    ]


def test_a_reference_without_cpu_results_is_refused(tmp_path: Path) -> None:
    ev = _backend_run(tmp_path, collection=True)
    with pytest.raises(tr.UserError) as e:
        tr.load_inputs(ev["current"], [ev["current"]], device="torch_tiny:tiny")
    assert str(e.value).startswith(
        f"--reference {ev['current']}: expected the results of a CPU run (variant IDs with "
        "device=cpu, or plain tests of a run without a device); found 12 results, none on "
        "the CPU (12 of torch_tiny:tiny); run the same files without --ootest-device"
    )


def test_the_backend_is_known_by_the_device_its_sessions_ran_on(tmp_path: Path) -> None:
    """A run without a config writes no collection lines; its session line says the
    device (``device_spec``), which names the backend."""
    ev = _backend_run(tmp_path)
    lines = ev["current"].read_text()
    session = {"kind": "session", "selected": 12, "device_spec": "torch_tiny:tiny", "torch": "2"}
    ev["current"].write_text(json.dumps(session) + "\n" + lines)
    calls = _calls(tr.load_inputs(ev["current"], [ev["cpu"]]))
    assert (calls[MISSING].category, calls[MISSING].rule) == ("backend", "missing_kernel")
