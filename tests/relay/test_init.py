"""`ootest init` writes a workflow whose jobs hold only what they need and pin what
they run, and whose scripts do what they claim: the checks parse the generated YAML
and run its `run:` scripts with bash as GitHub Actions does (`shell: bash`), against a
fake `ootest` that fails and the real one talking to the loopback relay emulator."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ootest.cli import run_cmd
from ootest.cli.main import _parser
from ootest.errors import UserError
from ootest.record.shard import durations_from
from ootest.relay.emulate import Emulator
from ootest.relay.init import init, ootest_pin
from ootest.relay.report import CONCLUSIONS
from ootest.version import ootest_version
from tests.conftest import ootest

WF = ".github/workflows/crcr-spyre.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
PAYLOAD = {
    "event_type": "push",
    "delivery_id": "d-1",
    "payload": {"repository": {"full_name": "pytorch/pytorch"}, "after": "a" * 40},
}


def _generate(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    init(tmp_path, "spyre", "torch_spyre", 2, False, **kw)
    wf: dict[str, Any] = yaml.safe_load((tmp_path / WF).read_text())
    return wf


def _steps(wf: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, s) for name, job in wf["jobs"].items() for s in job["steps"]]


def _reports(job: dict[str, Any]) -> bool:
    return any("ootest relay report" in s.get("run", "") for s in job["steps"])


def _step(job: dict[str, Any], needle: str) -> dict[str, Any]:
    """The one step of ``job`` whose script or action contains ``needle``."""
    found = [s for s in job["steps"] if needle in s.get("run", s.get("uses", ""))]
    assert len(found) == 1, (needle, found)
    return found[0]


def _resolve(text: str, values: dict[str, str]) -> str:
    """``${{ expr }}`` replaced by ``values[expr]``: a test that meets an expression it
    does not know fails, so a new one in a job under test must be looked at."""
    return EXPR.sub(lambda m: values[m.group(1)], text)


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a step's script as `shell: bash` does: ``bash --noprofile --norc -eo pipefail``."""
    path = cwd / f".step-{abs(hash(script))}.sh"
    path.write_text(script)
    full = {**os.environ, **env}
    full.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _bin(tmp_path: Path, body: str) -> str:
    """A folder holding an `ootest` command with this body; returns a PATH with it first."""
    d = tmp_path / f"bin-{abs(hash(body))}"
    d.mkdir(exist_ok=True)
    exe = d / "ootest"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return f"{d}{os.pathsep}{os.environ['PATH']}"


REAL_OOTEST = f'exec {shlex.quote(sys.executable)} -m ootest.cli "$@"'


# ------------------------------------------------------------------ the file itself


def test_init_writes_valid_workflow(tmp_path: Path) -> None:
    r = ootest("init", "--dir", str(tmp_path), "--device", "spyre", "--shards", "2")
    assert r.returncode == 0, r.stderr
    wf_path = tmp_path / WF
    text = wf_path.read_text()
    wf = yaml.safe_load(text)
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["repository_dispatch"]["types"] == ["pull_request", "push"]
    assert "schedule" in on and "workflow_dispatch" in on
    assert wf["defaults"]["run"]["shell"] == "bash"  # -eo pipefail
    assert "github.event." not in text  # no payload field anywhere in the workflow
    assert wf["jobs"]["test"]["runs-on"] == ["self-hosted", "spyre"]
    assert "concurrency" in wf["jobs"]["test"]
    assert ootest("config", "validate", "--no-paths", str(tmp_path / "ootest.yaml")).returncode == 0
    here = Path(sys.executable).parent / "check-jsonschema"
    lint = str(here) if here.exists() else shutil.which("check-jsonschema")
    if lint is None:
        pytest.skip("check-jsonschema not installed")
    r = subprocess.run(
        [lint, "--builtin-schema", "vendor.github-workflows", str(wf_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    assert ootest("init", "--dir", str(tmp_path), "--device", "npu").returncode == 0
    r = ootest("init", "--dir", str(tmp_path), "--device", "npu")
    assert r.returncode == 2 and "--force" in r.stderr
    bad = ootest("init", "--dir", str(tmp_path), "--device", "x; rm -rf")
    assert bad.returncode == 2 and "expected a backend name" in bad.stderr


def test_scripts_hold_no_expression_and_everything_is_pinned(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    pin, _ = ootest_pin(ootest_version())
    installs = 0
    for job, s in _steps(wf):
        script = s.get("run", "")
        # values reach scripts only through env:, never as ${{ }} text in the script
        assert "${{" not in script, (job, script)
        if "uses" in s:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", s["uses"]), (job, s["uses"])
        for line in script.splitlines():
            if "pip install" in line:
                assert line.strip() == f'pip install "{pin}"', (job, line)
                installs += 1
    assert installs == len(wf["jobs"]) - 1  # every job but durations, which runs no ootest


def test_id_token_only_in_jobs_that_report_and_they_run_no_pr_code(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    assert wf["permissions"] == {}  # nothing granted to the whole workflow
    reporting = {name for name, job in wf["jobs"].items() if _reports(job)}
    assert reporting == {"start", "report"}
    for name, job in wf["jobs"].items():
        assert "permissions" in job, f"{name} inherits the workflow's permissions"
        assert ("id-token" in job["permissions"]) == (name in reporting), name
    for name in reporting:
        job = wf["jobs"][name]
        assert job["permissions"] == {"id-token": "write"}
        assert job["runs-on"] == "ubuntu-latest"  # a fresh VM, not a runner PR code ran on
        for s in job["steps"]:
            uses, script = s.get("uses", ""), s.get("run", "")
            assert not uses.startswith(("actions/checkout@", "actions/cache")), (name, uses)
            assert "scripts/" not in script and "ootest run" not in script, (name, script)
    # the job that builds and runs the PR's code has no token, and no git credentials
    test = wf["jobs"]["test"]
    assert "scripts/crcr_build.sh" in _step(test, "crcr_build.sh")["run"]
    assert test["permissions"] == {"contents": "read"}
    for _, s in _steps(wf):
        if s.get("uses", "").startswith("actions/checkout@"):
            assert s["with"]["persist-credentials"] is False


def test_uploads_are_what_the_runner_writes(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    test = wf["jobs"]["test"]
    line = next(ln for ln in _step(test, "ootest run ")["run"].splitlines() if "ootest run " in ln)
    args = _parser().parse_args(shlex.split(line)[1:])
    outs = run_cmd.output_paths(args)
    runner_writes = {str(p) for p in (outs.results, outs.junit, outs.html, outs.log) if p}
    upload = _step(test, "actions/upload-artifact@")
    paths = set(upload["with"]["path"].split())
    written_by_steps = {
        p for p in paths if any(f"> {p}" in s.get("run", "") for s in test["steps"])
    }
    assert written_by_steps == {".ootest/conclusion"}
    assert paths - written_by_steps == runner_writes
    if any(part.startswith(".") for p in paths for part in Path(p).parts):
        assert upload["with"]["include-hidden-files"] is True  # upload-artifact skips them


# ------------------------------------------------------------------ scripts, run


def test_plan_step_fails_when_the_plan_fails(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    script = _step(wf["jobs"]["plan"], "ootest relay matrix")["run"]
    out = tmp_path / "github_output"
    env = {"TORCH_SHA": "b" * 40, "OOTEST_CONFIG": "ootest.yaml", "GITHUB_OUTPUT": str(out)}
    failing = _bash(script, tmp_path, {**env, "PATH": _bin(tmp_path, "exit 2")})
    assert failing.returncode != 0
    assert "matrix=" not in (out.read_text() if out.exists() else "")
    ok = _bash(script, tmp_path, {**env, "PATH": _bin(tmp_path, REAL_OOTEST)})
    assert ok.returncode == 0, ok.stderr
    legs = json.loads(out.read_text().removeprefix("matrix="))["include"]
    assert [leg["leg"] for leg in legs] == [0, 1]  # --shards 2


def _artifact(upload: dict[str, Any], workspace: Path, dest: Path) -> None:
    """What upload-artifact then download-artifact leave: the uploaded files, relative
    to the least common ancestor of the listed paths, under the download path."""
    paths = [Path(p) for p in upload["with"]["path"].split()]
    root = Path(os.path.commonpath([p.parent for p in paths]))
    for p in paths:
        if (workspace / p).exists():
            target = dest / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(workspace / p, target)


def _leg(wf: dict[str, Any], tmp_path: Path, job_status: str | None, results: str | None) -> Path:
    """A test leg's workspace after its run, passed through its artifact to a report
    job's folder; job_status None: the leg uploaded nothing (its runner died)."""
    test, report = wf["jobs"]["test"], wf["jobs"]["report"]
    ws, job = tmp_path / "test-ws", tmp_path / "report-ws"
    ws.mkdir(exist_ok=True)
    job.mkdir(exist_ok=True)
    if job_status is None:
        return job
    if results is not None:
        (ws / ".ootest").mkdir(exist_ok=True)
        (ws / ".ootest" / "results.jsonl").write_text(results)
    record = _step(test, "JOB_STATUS")
    r = _bash(
        record["run"],
        ws,
        {"JOB_STATUS": _resolve(record["env"]["JOB_STATUS"], {"job.status": job_status})},
    )
    assert r.returncode == 0, r.stderr
    upload, download = (
        _step(test, "actions/upload-artifact@"),
        _step(report, "actions/download-artifact@"),
    )
    assert _resolve(upload["with"]["name"], {"matrix.leg": "0"}) == _resolve(
        download["with"]["name"], {"matrix.leg": "0"}
    )
    _artifact(upload, ws, job / download["with"]["path"])
    return job


@pytest.mark.parametrize(
    ("job_status", "test_result", "expected"),
    [
        ("success", "failure", "success"),  # this leg passed though another failed
        ("failure", "failure", "failure"),
        ("cancelled", "cancelled", "cancelled"),
        ("cancelled", "failure", "cancelled"),  # this leg cancelled, another failed
        (None, "cancelled", "cancelled"),  # cancelled before it could upload
        (None, "failure", "failure"),  # its runner died
        ("skipped; echo pwned", "success", "failure"),  # not a value the leg can record
    ],
)
def test_conclusion_mapping(
    tmp_path: Path, job_status: str | None, test_result: str, expected: str
) -> None:
    wf = _generate(tmp_path)
    job = _leg(wf, tmp_path, job_status, None)
    out = job / "github_output"
    step = _step(wf["jobs"]["report"], "leg/conclusion")
    r = _bash(step["run"], job, {"TEST_RESULT": test_result, "GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0, r.stderr
    assert out.read_text() == f"conclusion={expected}\n"
    assert expected in CONCLUSIONS  # what `ootest relay report --conclusion` accepts


RESULTS = "".join(
    json.dumps({"kind": "result", "variant_id": f"f.py::T::t_{i}", "file": "f.py", **r}) + "\n"
    for i, r in enumerate(
        [
            {"outcome": "passed", "duration": 2.0},
            {"outcome": "failed", "duration": 1.0},
            {"outcome": "skipped", "duration": 0.0},
        ]
    )
)


@pytest.fixture
def relay():  # type: ignore[no-untyped-def]
    emu = Emulator().start()
    yield emu
    emu.stop()


def _report_job(
    wf: dict[str, Any],
    name: str,
    cwd: Path,
    relay: Emulator,
    *,
    attempt: str,
    extra: dict[str, str],
) -> None:
    """Run every script step of the start or report job, in order, as one leg."""
    event = cwd.parent / "event.json"
    event.write_text(json.dumps({"action": "push", "client_payload": PAYLOAD}))
    values = {
        "matrix.job_name": "ootest | backend main | torch aaaaaaaaaaaa | shard 1/2",
        "matrix.torch_sha": "a" * 40,
        "needs.gate.outputs.kind": "push",
        "github.server_url": "https://github.com",
        "github.repository": "o/r",
        "github.run_id": "77",
        **extra,
    }
    runner_temp = cwd / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    env = {
        **{k: _resolve(str(v), values) for k, v in wf["jobs"][name]["env"].items()},
        "PATH": _bin(cwd, REAL_OOTEST),
        "OOTEST_RELAY_URL": relay.url,
        "OOTEST_RELAY_TOKEN": relay.issue_token("o/r"),
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "77",
        "GITHUB_RUN_ATTEMPT": attempt,
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_STEP_SUMMARY": str(cwd / "step_summary.md"),
    }
    out = cwd / "github_output"
    outputs: dict[str, str] = {}
    for s in wf["jobs"][name]["steps"]:
        if "run" not in s or "pip install" in s["run"]:
            continue
        step_env = {
            k: _resolve(str(v), {f"steps.conclusion.outputs.{o}": outputs[o] for o in outputs})
            for k, v in s.get("env", {}).items()
        }
        out.write_text("")
        r = _bash(s["run"], cwd, {**env, **step_env, "GITHUB_OUTPUT": str(out)})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "::warning::" not in r.stdout, r.stdout  # every callback was accepted
        for ln in out.read_text().splitlines():
            key, value = ln.split("=", 1)
            outputs[key] = value


def test_start_and_report_jobs_against_the_relay_emulator(tmp_path: Path, relay: Emulator) -> None:
    wf = _generate(tmp_path)
    start = tmp_path / "start-ws"
    start.mkdir()
    _report_job(wf, "start", start, relay, attempt="1", extra={})
    job = _leg(wf, tmp_path, "failure", RESULTS)
    done = {"needs.test.result": "failure", "needs.start.outputs.attempt": "1"}
    _report_job(wf, "report", job, relay, attempt="1", extra=done)
    (first,) = relay.jobs()
    assert (first["run_attempt"], first["status"]) == (1, "completed")
    assert first["conclusion"] == "failure"
    assert first["test_results"] == {"passed": 1, "failed": 1, "skipped": 1, "total": 3}
    # the callback and the job summary link to the leg's artifacts (report, JUnit, results)
    assert first["artifact_url"] == "https://github.com/o/r/actions/runs/77#artifacts"
    summary = (job / "step_summary.md").read_text()
    assert "CRCR test_results: passed 1, failed 1, skipped 1, total 3" in summary
    assert "(https://github.com/o/r/actions/runs/77#artifacts)" in summary
    # "Re-run failed jobs": test and report run again under attempt 2, start does not
    # (its output still says attempt 1), so report sends this attempt's in_progress.
    # This time the leg is cancelled before any test finished: its results hold no
    # outcome, which `--results` refuses, and the leg is reported without counts.
    shutil.rmtree(job / "runner-temp")
    job = _leg(wf, tmp_path, "cancelled", json.dumps({"kind": "session"}) + "\n")
    again = {"needs.test.result": "cancelled", "needs.start.outputs.attempt": "1"}
    _report_job(wf, "report", job, relay, attempt="2", extra=again)
    second = next(j for j in relay.jobs() if j["run_attempt"] == 2)
    assert (second["status"], second["conclusion"]) == ("completed", "cancelled")
    assert "test_results" not in second
    assert [e["status"] for e in relay.accepted()] == ["in_progress", "completed"] * 2


# ------------------------------------------------------------------ caches and durations


def test_caches_and_durations_flow(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    plan, test, durations = (wf["jobs"][j] for j in ("plan", "test", "durations"))
    names = [s.get("run", s.get("uses", "")) for s in test["steps"]]
    at = {
        k: next(i for i, n in enumerate(names) if k in n)
        for k in (
            "OOTEST_CACHE_DIR=",
            "actions/cache/restore@",
            "ootest run ",
            "actions/cache/save@",
        )
    }
    assert (
        at["OOTEST_CACHE_DIR="]
        < at["actions/cache/restore@"]
        < at["ootest run "]
        < at["actions/cache/save@"]
    )
    for s in (_step(test, "actions/cache/restore@"), _step(test, "actions/cache/save@")):
        assert s["with"]["path"] == "${{ env.OOTEST_CACHE_DIR }}"
    # only a run of reviewed PyTorch code writes what later runs restore
    assert "needs.gate.outputs.trusted == 'true'" in _step(test, "actions/cache/save@")["if"]
    assert "needs.gate.outputs.trusted == 'true'" in durations["if"]
    # the durations: restored once by plan, handed to every leg, saved by a trusted run
    restore = _step(plan, "actions/cache/restore@")["with"]
    save = _step(durations, "actions/cache/save@")["with"]
    assert save["key"].startswith(restore["restore-keys"])
    assert _step(plan, "actions/upload-artifact@")["with"]["name"] == "ootest-durations"
    assert _step(test, "actions/download-artifact@")["with"]["name"] == "ootest-durations"
    line = _step(test, "ootest run ")["run"]
    args = _parser().parse_args(shlex.split(line.replace("$RUNNER_TEMP", "/rt"))[1:])
    assert args.durations == ["/rt/ootest-durations/durations.jsonl"]
    # the merge leaves one file ootest reads back as the durations of every leg
    merge = _step(durations, "results.jsonl")
    for i in range(2):
        leg = tmp_path / "legs" / f"ootest-leg-{i}"
        leg.mkdir(parents=True)
        (leg / "results.jsonl").write_text(RESULTS.replace("::t_", f"::leg{i}_"))
    out = tmp_path / "github_output"
    r = _bash(merge["run"], tmp_path, {"RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "save=true\n"
    merged = durations_from([tmp_path / "ootest-durations" / "durations.jsonl"])
    assert len(merged) == 6 and merged["f.py::T::leg1_0"] == 2.0


# ------------------------------------------------------------------ options


def test_runs_on_labels(tmp_path: Path) -> None:
    r = ootest(
        "init", "--dir", str(tmp_path), "--device", "spyre", "--runs-on", "self-hosted, on,1.0"
    )
    assert r.returncode == 0, r.stderr
    wf = yaml.safe_load((tmp_path / WF).read_text())
    # quoted: YAML would read on and 1.0 as a boolean and a number
    assert wf["jobs"]["test"]["runs-on"] == ["self-hosted", "on", "1.0"]
    assert all(wf["jobs"][j]["runs-on"] == "ubuntu-latest" for j in wf["jobs"] if j != "test")
    for bad, found in [
        ("a b", "'a b'"),
        ("x,,y", "''"),
        ("${{ github.actor }}", "'${{ github.actor }}'"),
    ]:
        with pytest.raises(UserError) as e:
            init(tmp_path / "x", "spyre", "torch_spyre", 1, False, runs_on=bad)
        assert str(e.value) == (
            "--runs-on: expected runner labels separated by commas, each of 1-64 characters "
            f"[A-Za-z0-9._-] (e.g. self-hosted,spyre), found {found}"
        )
    with pytest.raises(UserError, match="named twice"):
        init(tmp_path / "x", "spyre", "torch_spyre", 1, False, runs_on="a,a")
    assert not (tmp_path / "x").exists()


def test_pin_of_a_local_build(tmp_path: Path) -> None:
    _generate(tmp_path, version="0.3.0.dev2+g1a2b3c")
    wf_text = (tmp_path / WF).read_text()
    assert 'pip install "ootest==0.3.0.dev2"' in wf_text
    assert "ootest==0.3.0.dev2+" not in wf_text
    assert "# ootest 0.3.0.dev2+g1a2b3c is a local build" in wf_text
    assert ootest_pin("1.2.0") == ("ootest==1.2.0", "")
    with pytest.raises(UserError, match=r"version is unknown .*pip install -e \."):
        ootest_pin("unknown")
    with pytest.raises(UserError, match="not a PEP 440 version"):
        ootest_pin("1.0; curl evil")
