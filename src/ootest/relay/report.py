"""Report a job's status to the relay: ``POST <relay>/github/callback``.

The body is the echoed ``client_payload`` plus a ``workflow`` object. Delivery is
retried on 429, 5xx and network errors with bounded exponential backoff and
jitter; a small state file per job key remembers which transitions the relay
accepted, so a retry or a re-run of the step never re-sends an accepted
transition (which the relay's state machine would reject with 400).
"""

from __future__ import annotations

import json
import os
import random
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from hashlib import sha256
from pathlib import Path
from typing import Any

import httpx

from ootest import naming as names
from ootest.atomic import write_atomic
from ootest.errors import UserError
from ootest.relay import limits
from ootest.relay.limits import MAX_DEPTH
from ootest.untrusted import for_terminal, redact

AUDIENCE = "pytorch-cross-repo-ci-relay"
CONCLUSIONS = ("success", "failure", "cancelled", "skipped", "timed_out", "neutral")


class DeliveryError(Exception):
    """The callback could not be delivered (after retries)."""


@dataclass
class JobInfo:
    name: str  # workflow name
    url: str
    run_id: int
    run_attempt: int
    job_name: str
    check_run_id: int | None = None
    artifact_url: str | None = None

    @classmethod
    def from_env(cls, job_name: str | None, env: dict[str, str]) -> JobInfo:
        def need(key: str) -> str:
            value = env.get(key)
            if not value:
                raise UserError(
                    f"environment variable {key} is not set (run inside GitHub "
                    "Actions, or set it for a local rehearsal)"
                )
            return value

        jn = job_name or env.get("OOTEST_JOB_NAME") or need("GITHUB_JOB")
        run_id = need("GITHUB_RUN_ID")
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        repo = need("GITHUB_REPOSITORY")
        try:
            rid, attempt = int(run_id), int(env.get("GITHUB_RUN_ATTEMPT", "1"))
        except ValueError:
            raise UserError("GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT must be integers") from None
        check = env.get("OOTEST_CHECK_RUN_ID")
        return cls(
            name=env.get("GITHUB_WORKFLOW", "ootest"),
            url=f"{server}/{repo}/actions/runs/{rid}",
            run_id=rid,
            run_attempt=attempt,
            job_name=jn,
            check_run_id=int(check) if check and check.isdigit() else None,
        )


def test_results(path: str | os.PathLike[str]) -> dict[str, int]:
    """``{passed, failed, skipped, total}`` from ootest JSONL results or any JUnit XML."""
    from ootest.atomic import read_bounded

    p = Path(path)
    data = read_bounded(p, "--results")  # /dev/zero was read forever (issue 28 item 15)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if data.lstrip().startswith(b"<"):
        try:
            root = ET.fromstring(data)  # bytes: the XML declaration names the encoding
        except ET.ParseError as e:
            raise UserError(f"{p}: not valid JUnit XML ({e})") from None
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            elif case.find("skipped") is not None:
                counts["skipped"] += 1
            else:
                counts["passed"] += 1
    else:
        from ootest.record.results import RunData, read_records

        recs = read_records(p)  # torn or non-UTF-8 lines are skipped, as in a run
        if data.strip() and not any("outcome" in r for r in recs):
            raise UserError(f"{p}: expected JSON lines with 'outcome' (ootest results)")
        return RunData.from_records(recs).test_results()
    counts["total"] = sum(counts.values())
    return counts


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def remote_text(text: str, limit: int = 200, secrets: tuple[str, ...] = ()) -> str:
    """Text from the relay, safe to print in a CI log: one line, short, and no
    ``::`` (a line starting ``::add-mask::`` or ``::set-output`` would be a GitHub
    Actions workflow command), control characters escaped and credentials (the
    relay may echo the OIDC token back: ``secrets``, in any form it may take)
    redacted before it is cut, so a token straddling the cut goes too
    (Note [Untrusted text])."""
    flat = redact(" ".join(text.split()), secrets)[:limit]
    return for_terminal(flat).replace("::", ": :")


def build_body(
    client_payload: dict[str, Any],
    job: JobInfo,
    status: str,
    conclusion: str | None,
    results: dict[str, int] | None,
    triage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The callback body; ``triage`` (a verdict, Note [Triage verdict]) is sent as
    ``workflow.triage`` with a completed status only."""
    if status not in ("in_progress", "completed"):
        raise UserError(f"--status: expected in_progress or completed, found {status!r}")
    if status == "completed" and conclusion not in CONCLUSIONS:
        raise UserError(
            f"--conclusion: expected one of {', '.join(CONCLUSIONS)} with --status completed"
        )
    workflow: dict[str, Any] = {
        "schema_version": "1",
        "status": status,
        "name": job.name,
        "url": job.url,
        "run_id": job.run_id,
        "run_attempt": job.run_attempt,
        "job_name": job.job_name,
        "check_run_id": job.check_run_id,
    }
    if status == "in_progress":
        workflow["started_at"] = _now()
    else:
        workflow["conclusion"] = conclusion
        workflow["completed_at"] = _now()
        if results is not None:
            workflow["test_results"] = results
        if job.artifact_url:
            workflow["artifact_url"] = job.artifact_url
        if triage is not None:
            workflow["triage"] = triage
    return {**client_payload, "workflow": workflow}


def self_report_payload(kind: str, sha: str) -> dict[str, Any]:
    """The client_payload of a nightly/periodic self-report."""
    if not names.is_sha(sha):
        raise UserError(
            f"--{kind}: expected {names.SHA_RULE} (the PyTorch commit), found "
            f"{limits.describe(sha)}; pass the SHA the nightly or periodic run built"
        )
    return {
        "event_type": kind,
        "delivery_id": sha,
        "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": sha},
    }


def oidc_token(client: httpx.Client, env: dict[str, str]) -> str:
    """A GitHub OIDC token for the relay's audience (never printed)."""
    direct = env.get("OOTEST_RELAY_TOKEN")
    if direct:
        return direct
    url, req = env.get("ACTIONS_ID_TOKEN_REQUEST_URL"), env.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not req:
        raise UserError(
            "no OIDC token: the job needs `permissions: id-token: write` "
            "(ACTIONS_ID_TOKEN_REQUEST_URL/_TOKEN are not set)"
        )
    sep = "&" if "?" in url else "?"
    try:
        r = client.get(f"{url}{sep}audience={AUDIENCE}", headers={"Authorization": f"bearer {req}"})
    except httpx.HTTPError as e:
        raise DeliveryError(f"requesting the OIDC token failed: {type(e).__name__}") from None
    if r.status_code != 200:
        raise DeliveryError(f"requesting the OIDC token failed with HTTP {r.status_code}")
    try:
        answer = limits.loads(r.content, max_bytes=1_000_000, max_depth=MAX_DEPTH)
    except ValueError as e:
        raise DeliveryError(f"the OIDC token response: {e}") from None
    value = answer.get("value") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value:
        raise DeliveryError("the OIDC token response has no 'value'")
    return value


@dataclass
class StateFile:
    """Transitions the relay accepted, per job key, so none is sent twice."""

    directory: Path

    def _path(self, key: tuple[Any, ...]) -> Path:
        digest = sha256(json.dumps(key).encode()).hexdigest()[:24]
        return self.directory / f"relay-{digest}.json"

    def accepted(self, key: tuple[Any, ...]) -> list[str]:
        try:
            data = json.loads(self._path(key).read_text())
            return list(data.get("accepted", []))
        except (OSError, ValueError):
            return []

    def record(self, key: tuple[Any, ...], status: str, note: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        done = self.accepted(key)
        write_atomic(path, json.dumps({"key": key, "accepted": [*done, status], "note": note}))


@dataclass
class Retry:
    attempts: int = 6
    base: float = 1.0
    cap: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep)

    def delay(self, n: int) -> float:
        backoff: float = self.base * float(2**n)
        return min(self.cap, backoff) * random.uniform(0.5, 1.0)


def send(
    client: httpx.Client,
    relay_url: str,
    token: str,
    body: dict[str, Any],
    state: StateFile,
    retry: Retry,
    log: Callable[[str], None],
    repo: str = "",
) -> str:
    """Deliver one transition; returns 'sent' or 'already-accepted'."""
    wf = body["workflow"]
    key = (body.get("delivery_id"), repo, wf["run_id"], wf["run_attempt"], wf["job_name"])
    status = wf["status"]
    if status in state.accepted(key):
        log(f"relay already accepted '{status}' for this job; not sending it again")
        return "already-accepted"
    if status == "completed" and "in_progress" not in state.accepted(key):
        log("note: no accepted in_progress callback is recorded for this job")
    url = relay_url.rstrip("/") + "/github/callback"
    uncertain = False  # an earlier attempt may have reached the relay
    last = ""
    for n in range(retry.attempts):
        try:
            r = client.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
        except httpx.TimeoutException:
            uncertain, last = True, "timeout"
        except httpx.TransportError as e:
            # the request may have reached the relay before the connection dropped
            # (a reply lost, not a request): like a timeout, a later 400 duplicate
            # then means it was accepted; a refused connection never reached it
            uncertain = uncertain or not isinstance(e, httpx.ConnectError)
            last = f"network error ({type(e).__name__})"
        else:
            if 200 <= r.status_code < 300:
                state.record(key, status, f"HTTP {r.status_code}")
                return "sent"
            if r.status_code == 400 and uncertain:
                # The timed-out attempt reached the relay, which now rejects the
                # repeat as a duplicate: the transition is accepted.
                state.record(key, status, "accepted (duplicate after a timeout)")
                log("relay reports a duplicate after a timed-out attempt: treated as accepted")
                return "sent"
            if r.status_code != 429 and r.status_code < 500:
                raise DeliveryError(
                    f"relay rejected the '{status}' callback: HTTP {r.status_code} "
                    f"{remote_text(r.text, secrets=(token,))}"
                )
            last = f"HTTP {r.status_code}"
        if n + 1 < retry.attempts:
            wait = retry.delay(n)
            log(f"callback attempt {n + 1} failed ({last}); retrying in {wait:.1f} s")
            retry.sleep(wait)
    raise DeliveryError(
        f"callback '{status}' not delivered after {retry.attempts} attempts (last: {last})"
    )
