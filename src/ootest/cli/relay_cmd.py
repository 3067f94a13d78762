"""``ootest relay gate|resolve|matrix|report|emulate`` (never imports torch)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ootest.cache import WORK_DIR
from ootest.errors import UserError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("relay", help="PyTorch Cross-Repository CI Relay (CRCR) integration")
    rs = p.add_subparsers(dest="relay_command", required=True, metavar="ACTION")

    g = rs.add_parser("gate", help="decide whether a dispatch is worth a build")
    g.add_argument("event", nargs="?", help="event JSON (default: $GITHUB_EVENT_PATH)")
    g.add_argument("--config", help="ootest config whose relay: section is the policy")
    g.add_argument("--device", help="device name for the ciflow/crcr/<device> label")
    g.add_argument("--json", action="store_true", help="print the decision as JSON")
    g.set_defaults(func=gate_cmd)

    r = rs.add_parser("resolve", help="the exact PyTorch commit to build")
    r.add_argument("event", nargs="?", help="event JSON (default: $GITHUB_EVENT_PATH)")
    r.add_argument("--config")
    r.add_argument("--device")
    r.add_argument("--repo", help="a local pytorch clone to search (git log --grep)")
    r.add_argument("--api", action="store_true", help="search through the GitHub REST API")
    r.add_argument(
        "--fallback",
        choices=("fail", "head"),
        default="fail",
        help="when a landed PR's commit is not found: fail (default) or build the "
        "branch head (needs --repo)",
    )
    r.add_argument("--nightly-message", help="resolve a nightly: the nightly commit's message")
    r.set_defaults(func=resolve_cmd)

    # 'plan' is the older spelling, kept for workflows written by earlier 'ootest init'
    pl = rs.add_parser("matrix", aliases=["plan"], help="GitHub Actions matrix of combinations")
    pl.add_argument("--sha", required=True, help="resolved PyTorch SHA")
    pl.add_argument("--suite", action="append", default=[], help="suite config (repeatable)")
    pl.add_argument("--shards", type=int, default=1)
    pl.add_argument("--backend-ref", default="main")
    pl.add_argument(
        "--compat",
        action="append",
        default=[],
        help="an older backend release to test as well (repeatable)",
    )
    pl.set_defaults(func=matrix_cmd)

    rp = rs.add_parser("report", help="send the status callback to the relay")
    rp.add_argument("--status", required=True, choices=("in_progress", "completed"))
    rp.add_argument("--conclusion")
    rp.add_argument("--results", help="ootest JSONL results or any JUnit XML")
    rp.add_argument("--event", help="event JSON (default: $GITHUB_EVENT_PATH)")
    rp.add_argument("--relay-url", default=os.environ.get("OOTEST_RELAY_URL"))
    rp.add_argument("--job-name", help="unique per matrix leg (default: $OOTEST_JOB_NAME)")
    rp.add_argument(
        "--artifact-url",
        default=os.environ.get("OOTEST_ARTIFACT_URL") or None,
        help="where the run's report, JUnit and results are (default: $OOTEST_ARTIFACT_URL)",
    )
    rp.add_argument("--nightly", metavar="SHA", help="nightly self-report for this SHA")
    rp.add_argument("--periodic", metavar="SHA", help="periodic self-report for this SHA")
    rp.add_argument("--state-dir", help="where accepted transitions are remembered")
    rp.add_argument(
        "--soft",
        action="store_true",
        help="a delivery failure is a warning (exit 0); usage errors still fail",
    )
    rp.add_argument("--attempts", type=int, default=6)
    rp.add_argument(
        "--attempt-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="each attempt (the request and the whole answer) ends within this (default 30)",
    )
    _add_triage(rp)
    rp.set_defaults(func=report_cmd)

    em = rs.add_parser("emulate", help="run a local relay + HUD emulator on loopback")
    em.add_argument("--port", type=int, default=8787)
    em.add_argument("--dispatch", help="fixture to send as a dispatch to --command")
    em.add_argument("--command", help="command under test (run without a shell)")
    em.add_argument("--repository", default="example/backend")
    em.add_argument("--rate-limit", type=int, default=100)
    em.set_defaults(func=emulate_cmd)


def gate_cmd(args: argparse.Namespace) -> int:
    from ootest.relay.gate import gate, load_policy, parse_envelope, read_event, write_github_output

    policy = load_policy(args.config, args.device)
    env = parse_envelope(*read_event(args.event))
    res = gate(env, policy)
    out = res.outputs()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{'run' if res.run else 'skip'}: {res.reason}")
    gh = os.environ.get("GITHUB_OUTPUT")
    if gh:
        write_github_output(out, gh)
    return 0


def resolve_cmd(args: argparse.Namespace) -> int:
    from ootest.relay import resolve as rv
    from ootest.relay.gate import gate, load_policy, parse_envelope, read_event, write_github_output

    if args.nightly_message is not None:
        sha, how = rv.nightly_source(args.nightly_message), "nightly source"
    else:
        res = gate(parse_envelope(*read_event(args.event)), load_policy(args.config, args.device))
        if not res.run:
            raise UserError(f"nothing to resolve: the gate skips this event ({res.reason})")
        if res.kind == "landed":
            from ootest.relay import deadline

            # Note [A deadline per attempt]: a trickling API cannot hold a request
            # longer; GitHub's answers read decoded and bounded (Note [Bounded answers])
            client = deadline.client(60.0, timeout=30.0, max_bytes=16 << 20) if args.api else None
            found = rv.resolve_landed(
                int(res.pr_number),
                res.base,
                repo=args.repo,
                client=client,
                token=os.environ.get("GITHUB_TOKEN"),
                fallback=args.fallback,
            )
            sha, how = found.sha, found.how
        else:
            sha, how = res.sha, f"{res.kind} head"
    print(f"{sha}  ({how})")
    gh = os.environ.get("GITHUB_OUTPUT")
    if gh:
        write_github_output({"sha": sha}, gh)
    return 0


def matrix_cmd(args: argparse.Namespace) -> int:
    from ootest.relay.matrix import combination_matrix

    print(
        json.dumps(
            combination_matrix(
                args.sha,
                args.suite,
                shards=args.shards,
                backend_ref=args.backend_ref,
                compat=args.compat,
            )
        )
    )
    return 0


def report_cmd(args: argparse.Namespace) -> int:
    from ootest.httpbody import AnswerTooLarge
    from ootest.relay import deadline
    from ootest.relay import report as rp
    from ootest.relay.gate import parse_envelope, read_event
    from ootest.timeout import check_timeout

    check_timeout(args.attempt_timeout, "--attempt-timeout")
    env = dict(os.environ)
    if not args.relay_url:
        raise UserError("--relay-url (or OOTEST_RELAY_URL) is required")
    if args.nightly or args.periodic:
        if args.status != "completed":
            raise UserError("nightly/periodic self-reports send --status completed only")
        kind, sha = ("nightly", args.nightly) if args.nightly else ("periodic", args.periodic)
        payload = rp.self_report_payload(kind, sha)
    else:
        envelope = parse_envelope(*read_event(args.event))
        payload = {
            "event_type": envelope.event_type,
            "delivery_id": envelope.delivery_id,
            "payload": envelope.payload,
        }
    job = rp.JobInfo.from_env(args.job_name, env)
    job.artifact_url = args.artifact_url
    results = rp.test_results(args.results) if args.results else None
    verdict = _triage(args, payload, job) if args.triage else None
    body = rp.build_body(payload, job, args.status, args.conclusion, results, verdict)
    state = rp.StateFile(
        Path(args.state_dir or os.path.join(env.get("RUNNER_TEMP") or WORK_DIR, "relay-state"))
    )

    def log(msg: str) -> None:
        print(f"ootest relay: {msg}", file=sys.stderr)

    try:
        # Note [A deadline per attempt]: each attempt ends within --attempt-timeout;
        # the relay's and the token service's answers read decoded and bounded (Note
        # [Bounded answers]): 1 MB is far more than either sends
        with deadline.client(args.attempt_timeout, max_bytes=1 << 20) as client:
            token = rp.oidc_token(client, env)
            outcome = rp.send(
                client,
                args.relay_url,
                token,
                body,
                state,
                rp.Retry(attempts=max(1, args.attempts)),
                log,
                repo=env.get("GITHUB_REPOSITORY", ""),
            )
    except (rp.DeliveryError, AnswerTooLarge) as e:
        if args.soft:
            print(f"::warning::ootest relay: {e}")
            return 0
        log(str(e))
        return 1
    print(f"ootest relay: {args.status} {outcome} for job {job.job_name!r}")
    return 0


def _command(text: str) -> list[str]:
    """The --command line as argv (run without a shell)."""
    from ootest.relay.limits import describe

    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise UserError(
            "--command: expected a command line with balanced quotes, found an unbalanced one "
            f"({e}); quote it as a shell would"
        ) from None
    if not argv:
        raise UserError(
            "--command: expected a program and its arguments, found nothing; "
            "pass e.g. --command 'bash job.sh'"
        )
    if shutil.which(argv[0]) is None:
        raise UserError(
            f"--command: cannot run {describe(argv[0])} (not found or not executable); "
            "expected a program and its arguments, run without a shell; pass a program on "
            "PATH or a path to one"
        )
    return argv


def _dispatch_fixture(path: str) -> dict[str, Any]:
    from ootest.relay import limits
    from ootest.relay.gate import MAX_EVENT_BYTES
    from ootest.relay.limits import MAX_DEPTH

    fix = "pass a client_payload JSON file"
    try:
        raw = limits.read_at_most(path, MAX_EVENT_BYTES, "a fixture")
        payload = limits.loads(raw, max_bytes=MAX_EVENT_BYTES, max_depth=MAX_DEPTH)
    except OSError as e:
        raise UserError(
            f"--dispatch {path}: cannot read it ({e.strerror or e}); expected a client_payload "
            "JSON file; pass the path of an existing file"
        ) from None
    except ValueError as e:
        raise UserError(f"--dispatch {path}: {e}; {fix}") from None
    if not isinstance(payload, dict):
        raise UserError(
            f"--dispatch {path}: expected a JSON object (a client_payload), found "
            f"{limits.describe(payload)}; {fix}"
        )
    return payload


# ------------------------------------------------------------------ triage
def _add_triage(rp: argparse.ArgumentParser) -> None:
    t = rp.add_argument_group(
        "triage (pytorch/test-infra#8673; off by default)",
        "--triage attaches a verdict (upstream, backend, infra, flake or unknown, with "
        "the evidence) as workflow.triage of a completed callback; see docs/relay.md",
    )
    t.add_argument("--triage", action="store_true", help="attach a triage verdict")
    t.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="JSONL",
        help="results of the same tests on the CPU",
    )
    t.add_argument(
        "--previous",
        action="append",
        default=[],
        metavar="JSONL",
        help="earlier results on this device, oldest first",
    )
    t.add_argument(
        "--memory-diff", metavar="JSON", help="'ootest index diff OLD NEW --json' of this update"
    )
    t.add_argument(
        "--device",
        metavar="DEVICE",
        help="the backend: MODULE:NAME as 'ootest run --device' takes it, or its NAME "
        "(default: what the results recorded)",
    )
    t.add_argument(
        "--backend-package",
        action="append",
        default=[],
        metavar="PKG",
        help="a package of the backend's own code, besides --device's module (repeatable)",
    )
    t.add_argument(
        "--flake-window",
        type=int,
        default=5,
        metavar="K",
        help="runs looked at for flakes, this one included (default 5)",
    )
    t.add_argument(
        "--triage-max-evidence",
        type=int,
        default=10,
        metavar="N",
        help="evidence entries at most (default 10)",
    )
    t.add_argument("--triage-out", metavar="PATH", help="also write the verdict to PATH (JSON)")


def _triage(args: argparse.Namespace, payload: dict[str, Any], job: Any) -> Any:
    from ootest.relay import triage as tr

    if args.status != "completed":
        raise UserError("--triage: a verdict goes with --status completed only")
    if not args.results:
        raise UserError("--triage needs --results (the ootest JSONL results of this job)")
    if args.triage_max_evidence < 0:
        raise UserError(
            f"--triage-max-evidence: expected 0 or more; found {args.triage_max_evidence}"
        )
    inputs = tr.load_inputs(
        Path(args.results),
        [Path(p) for p in args.reference],
        [Path(p) for p in args.previous],
        Path(args.memory_diff) if args.memory_diff else None,
        args.flake_window,
        args.device,
        args.backend_package,
    )
    for note in inputs.notes:
        print(f"ootest relay: triage: {note}", file=sys.stderr)
    pr, commit = tr.upstream_ref(payload)
    verdict = tr.verdict(
        inputs,
        job=job.job_name,
        log_url=job.artifact_url or job.url,
        pr=pr,
        commit=commit,
        max_evidence=args.triage_max_evidence,
    )
    if verdict is None:
        print("ootest relay: triage: no failing tests; no verdict attached", file=sys.stderr)
        return None
    if args.triage_out:
        from ootest.atomic import write_output

        write_output(Path(args.triage_out), json.dumps(verdict, indent=2) + "\n", "--triage-out")
    print(
        f"ootest relay: triage: {verdict['category']} ({verdict['confidence']}): "
        f"{verdict['summary']}",
        file=sys.stderr,
    )
    return verdict


def emulate_cmd(args: argparse.Namespace) -> int:
    from ootest.relay.emulate import Emulator

    # Every argument is checked before the emulator starts: a usage error is one line.
    if not 0 <= args.port <= 65535:
        raise UserError(
            f"--port: expected a port from 0 to 65535, found {args.port}; "
            "pass --port 0 for any free one"
        )
    if args.rate_limit < 1:
        raise UserError(
            "--rate-limit: expected a positive number of callbacks per minute, found "
            f"{args.rate_limit}; pass e.g. --rate-limit 100"
        )
    if args.dispatch is not None and args.command is None:
        raise UserError(
            "--dispatch: expected --command as well (the dispatch is given to the command "
            "under test), found none; pass --command 'bash job.sh'"
        )
    argv = _command(args.command) if args.command is not None else None
    client_payload = _dispatch_fixture(args.dispatch) if args.dispatch is not None else None
    try:
        emu = Emulator(port=args.port, rate_limit=args.rate_limit).start()
    except OSError as e:
        raise UserError(
            f"--port {args.port}: cannot listen on 127.0.0.1:{args.port} ({e.strerror or e}); "
            "expected a free port; pass another --port, or --port 0 for any free one"
        ) from None
    print(f"ootest relay emulator on {emu.url} (jobs: {emu.url}/jobs)", flush=True)
    try:
        if argv is not None:
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ)
                env.update(
                    {
                        "OOTEST_RELAY_URL": emu.url,
                        "OOTEST_RELAY_TOKEN": emu.issue_token(args.repository),
                        "GITHUB_REPOSITORY": args.repository,
                        "GITHUB_RUN_ID": env.get("GITHUB_RUN_ID", str(int(time.time()))),
                        "GITHUB_RUN_ATTEMPT": env.get("GITHUB_RUN_ATTEMPT", "1"),
                        "RUNNER_TEMP": d,
                    }
                )
                if client_payload is not None:
                    event = {
                        "action": client_payload.get("event_type"),
                        "client_payload": client_payload,
                    }
                    ev = Path(d) / "event.json"
                    ev.write_text(json.dumps(event))
                    env["GITHUB_EVENT_PATH"] = str(ev)
                try:
                    rc = subprocess.call(argv, env=env)
                except OSError as e:
                    from ootest.relay.limits import describe

                    raise UserError(
                        f"--command: cannot run {describe(argv[0])} ({e.strerror or e}); "
                        "expected a program and its arguments, run without a shell; pass a "
                        "program on PATH or a path to one"
                    ) from None
            print(json.dumps(emu.jobs(), indent=2))
            return rc
        while True:
            time.sleep(3600)
    finally:
        emu.stop()
