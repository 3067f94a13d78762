"""Callbacks against the local relay emulator: state machine, faults, retries, secrecy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ootest.relay import report as rp
from ootest.relay.emulate import Emulator
from tests.conftest import ROOT, Envelopes, run

PAYLOAD = {
    "event_type": "push",
    "delivery_id": "d-1",
    "payload": {"repository": {"full_name": "pytorch/pytorch"}, "after": "a" * 40},
}


@pytest.fixture
def relay():  # type: ignore[no-untyped-def]
    emu = Emulator().start()
    yield emu
    emu.stop()


def _job(name: str = "suite | shard 1/1", attempt: int = 1) -> rp.JobInfo:
    return rp.JobInfo(
        name="ci",
        url="https://github.com/o/r/actions/runs/7",
        run_id=7,
        run_attempt=attempt,
        job_name=name,
    )


def _send(
    relay: Emulator,
    tmp_path: Path,
    status: str,
    *,
    attempts: int = 6,
    job: rp.JobInfo | None = None,
    timeout: float = 5.0,
) -> str:
    body = rp.build_body(
        PAYLOAD,
        job or _job(),
        status,
        "success" if status == "completed" else None,
        {"passed": 3, "failed": 0, "skipped": 1, "total": 4},
    )
    logs: list[str] = []
    with httpx.Client(timeout=timeout) as client:
        return rp.send(
            client,
            relay.url,
            relay.issue_token("o/r"),
            body,
            rp.StateFile(tmp_path),
            rp.Retry(attempts=attempts, base=0.01),
            logs.append,
            repo="o/r",
        )


def test_full_job_accepted(relay: Emulator, tmp_path: Path) -> None:
    assert _send(relay, tmp_path, "in_progress") == "sent"
    assert _send(relay, tmp_path, "completed") == "sent"
    jobs = relay.jobs()
    assert len(jobs) == 1 and jobs[0]["status"] == "completed"
    assert jobs[0]["test_results"] == {"passed": 3, "failed": 0, "skipped": 1, "total": 4}
    assert [e["status"] for e in relay.accepted()] == ["in_progress", "completed"]


def test_state_machine_rejects_out_of_order_and_duplicates(relay: Emulator, tmp_path: Path) -> None:
    with pytest.raises(rp.DeliveryError, match="HTTP 400"):
        _send(relay, tmp_path, "completed")  # completed before in_progress
    _send(relay, tmp_path / "a", "in_progress")
    with pytest.raises(rp.DeliveryError, match="HTTP 400"):
        _send(relay, tmp_path / "b", "in_progress")  # a duplicate from a stateless sender
    # A re-run gets a fresh key through run_attempt.
    assert _send(relay, tmp_path / "c", "in_progress", job=_job(attempt=2)) == "sent"


def test_retries_on_injected_faults_end_with_one_of_each(relay: Emulator, tmp_path: Path) -> None:
    for status in (500, 429, 503):
        httpx.post(f"{relay.url}/_faults", json={"status": status})
    assert _send(relay, tmp_path, "in_progress") == "sent"
    httpx.post(f"{relay.url}/_faults", json={"delay": 1.5})  # accepted, answer too late
    assert _send(relay, tmp_path, "completed", timeout=0.5) == "sent"
    assert [e["status"] for e in relay.accepted()] == ["in_progress", "completed"]
    # The step runs again (e.g. a retried CI step): nothing is re-sent.
    before = len(relay.state.log)
    assert _send(relay, tmp_path, "completed") == "already-accepted"
    assert len(relay.state.log) == before


def test_gives_up_after_bounded_attempts(relay: Emulator, tmp_path: Path) -> None:
    httpx.post(f"{relay.url}/_faults", json={"status": 500, "count": 3})
    with pytest.raises(rp.DeliveryError, match="not delivered after 3 attempts"):
        _send(relay, tmp_path, "in_progress", attempts=3)


def test_bad_token_rejected(relay: Emulator, tmp_path: Path) -> None:
    body = rp.build_body(PAYLOAD, _job(), "in_progress", None, None)
    r = httpx.post(
        f"{relay.url}/github/callback", json=body, headers={"Authorization": "Bearer not-a-jwt"}
    )
    assert r.status_code == 401


def test_rate_limit(tmp_path: Path) -> None:
    emu = Emulator(rate_limit=2).start()
    try:
        for i in range(2):
            _send(emu, tmp_path / str(i), "in_progress", job=_job(f"j{i}"))
        with pytest.raises(rp.DeliveryError, match="not delivered after 2 attempts"):
            _send(emu, tmp_path / "x", "in_progress", job=_job("j9"), attempts=2)
    finally:
        emu.stop()


def test_results_from_jsonl_and_junit(tmp_path: Path) -> None:
    jl = tmp_path / "r.jsonl"
    jl.write_text(
        "\n".join(
            json.dumps({"outcome": o})
            for o in ("passed", "failed", "skipped", "xfailed", "xpassed_strict")
        )
    )
    assert rp.test_results(jl) == {"passed": 2, "failed": 2, "skipped": 1, "total": 5}
    xml = tmp_path / "j.xml"
    xml.write_text(
        "<testsuites><testsuite><testcase name='a'/><testcase name='b'><failure/>"
        "</testcase><testcase name='c'><skipped/></testcase></testsuite></testsuites>"
    )
    assert rp.test_results(xml) == {"passed": 1, "failed": 1, "skipped": 1, "total": 3}


def test_cli_report_end_to_end_token_never_printed(relay: Emulator, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"client_payload": PAYLOAD}))
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"outcome": "passed"}) + "\n")
    token = relay.issue_token("o/r")
    env = {
        "OOTEST_RELAY_URL": relay.url,
        "OOTEST_RELAY_TOKEN": token,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "42",
        "GITHUB_RUN_ATTEMPT": "1",
        "OOTEST_JOB_NAME": "suite | shard 1/1",
        "RUNNER_TEMP": str(tmp_path),
    }
    outs = []
    for args in (
        ["--status", "in_progress"],
        ["--status", "completed", "--conclusion", "success", "--results", str(results)],
        ["--status", "completed", "--conclusion", "success"],
    ):
        r = run([sys.executable, "-m", "ootest.cli", "relay", "report", *args], env=env)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout + r.stderr)
    assert "already-accepted" in outs[2]
    assert all(token not in o for o in outs)
    assert relay.jobs()[0]["test_results"]["total"] == 1


def test_cli_report_soft(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"client_payload": PAYLOAD}))
    env = {
        "OOTEST_RELAY_TOKEN": "t",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "1",
        "OOTEST_JOB_NAME": "j",
        "RUNNER_TEMP": str(tmp_path),
    }
    base = [
        sys.executable,
        "-m",
        "ootest.cli",
        "relay",
        "report",
        "--relay-url",
        "http://127.0.0.1:9",
        "--status",
        "in_progress",
        "--attempts",
        "1",
    ]
    assert run(base, env=env).returncode == 1
    soft = run([*base, "--soft"], env=env)
    assert soft.returncode == 0 and "::warning::" in soft.stdout
    # usage errors still fail under --soft
    bad = run([*base[:-4], "--status", "completed", "--soft"], env=env)
    assert bad.returncode == 2 and "--conclusion" in bad.stderr


def test_emulate_dispatches_fixture_to_command(crcr: Envelopes, tmp_path: Path) -> None:
    fixture = crcr.path("push_ciflow_tag.json")
    script = tmp_path / "job.sh"
    script.write_text(
        f"set -e\n{sys.executable} -m ootest.cli relay gate\n"
        f"{sys.executable} -m ootest.cli relay report --status in_progress --job-name j1\n"
        f"{sys.executable} -m ootest.cli relay report --status completed --conclusion success "
        "--job-name j1\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ootest.cli",
            "relay",
            "emulate",
            "--port",
            "0",
            "--dispatch",
            str(fixture),
            "--command",
            f"bash {script}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = json.loads(r.stdout[r.stdout.index("[") :])
    assert jobs[0]["status"] == "completed" and jobs[0]["delivery_id"] == crcr.push_delivery


def _mock_send(tmp_path: Path, handler: object) -> tuple[str, list[str]]:
    body = rp.build_body(PAYLOAD, _job(), "in_progress", None, None)
    logs: list[str] = []
    transport = httpx.MockTransport(handler)  # type: ignore[arg-type]
    with httpx.Client(transport=transport) as client:
        out = rp.send(
            client, "http://relay.invalid", "tok", body, rp.StateFile(tmp_path),
            rp.Retry(attempts=3, base=0.0, sleep=lambda s: None), logs.append, repo="o/r",
        )  # fmt: skip
    return out, logs


def test_a_dropped_connection_then_duplicate_counts_as_sent(tmp_path: Path) -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:  # the relay recorded it, then the connection dropped
            raise httpx.RemoteProtocolError("Server disconnected without sending a response")
        return httpx.Response(400, json={"error": "invalid transition in_progress -> in_progress"})

    out, logs = _mock_send(tmp_path, handler)
    assert out == "sent" and len(calls) == 2
    assert any("treated as accepted" in x for x in logs)


def test_relay_text_cannot_become_workflow_commands(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text="denied\n::add-mask::x\n::set-output name=a::b")

    with pytest.raises(rp.DeliveryError) as e:
        _mock_send(tmp_path, handler)
    msg = str(e.value)
    assert "\n" not in msg and "::" not in msg and "add-mask" in msg
