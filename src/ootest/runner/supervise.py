"""Run pytest under supervision: survive crashes and hangs, lose nothing.

``ootest run`` starts pytest (with the plugin) as a child process and watches
the results file grow. When the child dies before it says it finished, the test
it had in flight (see :mod:`ootest.record.crash`) is recorded as ``crashed`` or
``timeout`` and pytest starts again with ``--ootest-resume``: every test that
has a result is deselected, so the run continues after the crasher rather than
from the top. Each restart adds one result, so the loop always ends.

With a :class:`ForkPlan`, pytest is not started afresh each time but forked
from a fork server that imported pytest and torch and loaded the device once
(see Note [Fork server] in :mod:`ootest.runner.forkserver`); the child is
watched the same way. Without one, or when the server cannot serve, each
session is a fresh process.

The child is tied to this process (``PR_SET_PDEATHSIG`` on Linux): if the
runner is killed, so is pytest, and ``ootest run --resume`` picks up from the
results file. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from ootest.record import crash
from ootest.record.results import Appender, RunData, read_records
from ootest.runner.forkserver import ForkServer, preloads
from ootest.untrusted import env_secrets, hide_env_secrets, without_secrets

#: Child output shown while the progress bar runs (the rest is in the log):
#: device build progress and errors that stop pytest.
SHOW = re.compile(rb"^(ootest: (building|emu built)|ERROR: |INTERNALERROR)")

#: Extra seconds past the per-test timeout before the runner kills a child whose
#: own watchdog did not fire (a process stuck in the kernel, for instance).
GRACE_S = 30.0


@dataclass
class Attempt:
    returncode: int
    finished: bool
    crash: dict[str, object] | None = None
    repeated: bool = False  # the same test crashed again after a resume
    forked: bool = False  # forked from the fork server rather than started afresh


@dataclass(frozen=True)
class ForkPlan:
    """What the fork server loads before it forks pytest (Note [Fork server])."""

    device: str | None  # the device the sessions use; None: pytest and the plugin only
    files: list[str]  # the test files, whose upstream imports it loads too
    force: bool = False  # the user says the device may be loaded before a fork


class _Process(Protocol):
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


@dataclass
class Supervisor:
    pytest_cmd: list[str]  # without --ootest-results/--ootest-state/--ootest-resume
    results: Path
    state: Path
    log: Path | None  # None: the child's output goes to our terminal
    timeout: float | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    on_progress: Callable[[int, int], None] | None = None  # (done, total)
    on_line: Callable[[str], None] | None = None  # child output lines worth showing now
    attempts: list[Attempt] = field(default_factory=list)
    total: int = 0  # tests in the whole run, as the first session reported
    fork: ForkPlan | None = None  # None: every session is a fresh process
    fork_note: str | None = None  # why sessions were not (or no longer) forked
    _server: ForkServer | None = None
    _server_log: BinaryIO | None = None
    _server_tee: threading.Thread | None = None
    _crashed: set[tuple[object, object]] = field(default_factory=set)

    def run(self) -> Attempt:
        """Run to the end; return the last attempt (finished, or why it could not go on)."""
        self.state.mkdir(parents=True, exist_ok=True)
        # Sessions of this run know each other by it (the plugin skips the files
        # an earlier one of them finished, see Note [Restarts skip finished files]).
        self.env = {**self.env, "OOTEST_RUN_ID": uuid.uuid4().hex}
        try:
            return self._loop()
        finally:
            self._stop_server()

    def _loop(self) -> Attempt:
        while True:
            for p in self.state.glob("inflight-*.json"):
                crash.clear_inflight(p)
            before = RunData.from_records(read_records(self.results))
            resume = bool(before.results) or before.sessions > 0
            attempt = self._once(resume=resume, done=len(before.results))
            inflight = crash.read_inflight(crash.inflight_path(self.state, "main"))
            if attempt.forked and not attempt.finished and inflight is None:
                after = RunData.from_records(read_records(self.results))
                if after.sessions == before.sessions and len(after.results) == len(before.results):
                    # A forked pytest that stopped before running anything: whatever the
                    # cause, a fresh process gives the answer a user would get without
                    # the server, and the rest of the run does without it.
                    self._stop_server("a forked pytest stopped before running any test")
                    attempt = self._once(resume=resume, done=len(before.results))
                    inflight = crash.read_inflight(crash.inflight_path(self.state, "main"))
            self.attempts.append(attempt)
            if attempt.finished:
                return attempt
            if inflight is None:
                return attempt  # died outside any test: nothing to attribute, stop
            rec = crash.crash_record(inflight, attempt.returncode)
            out = Appender(self.results)
            out.write(rec)
            out.close()
            attempt.crash = rec
            key = (rec.get("phase"), rec.get("variant_id") or rec.get("nodeid"))
            if key in self._crashed:  # resuming did not get past it: stop, never loop
                attempt.repeated = True
                return attempt
            self._crashed.add(key)

    def _pytest_args(self) -> list[str] | None:
        """pytest's own arguments when the command is ``python -m pytest ...``."""
        cmd = self.pytest_cmd
        if len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1:3] == ["-m", "pytest"]:
            return cmd[3:]
        return None

    def _start_server(self, env: dict[str, str]) -> None:
        args = self._pytest_args()
        if self.fork is None or self._server is not None or self.fork_note is not None:
            return
        if args is None or not sys.platform.startswith("linux"):
            self.fork_note = "forking needs Linux and 'python -m pytest'"
            return
        stdout: int | None = None
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            self._server_log = open(self.log, "ab")  # open while it serves
            stdout = subprocess.PIPE
        self._server = ForkServer.start(
            device=self.fork.device,
            preload=preloads(self.fork.files),
            argv=args,
            env=env,
            stdout=stdout,
            force=self.fork.force,
        )
        if self._server_log is not None:
            self._server_tee = threading.Thread(
                target=self._tee, args=(self._server.proc, self._server_log), daemon=True
            )
            self._server_tee.start()
        if not self._server.ready():
            self._stop_server(self._server.why_not)

    def _stop_server(self, why: str | None = None) -> None:
        if why is not None and self.fork_note is None:
            self.fork_note = why
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._server_tee is not None:
            self._server_tee.join(timeout=10)
            self._server_tee = None
        if self._server_log is not None:
            self._server_log.close()
            self._server_log = None

    def _once(self, resume: bool, done: int) -> Attempt:
        cmd = [*self.pytest_cmd, "--ootest-results", str(self.results)]
        cmd += ["--ootest-state", str(self.state)]
        if resume:
            cmd += ["--ootest-resume", str(self.results)]
        # tests run with no secret of ours (Note [Secrets in the environment])
        env = {
            k: v for k, v in without_secrets(self.env).items() if not k.startswith("PYTEST_XDIST_")
        }
        env["OOTEST_PARENT_PID"] = str(os.getpid())  # a new session, even under xdist
        start_size = self.results.stat().st_size if self.results.exists() else 0
        self._start_server(env)
        forked = self._server.spawn(cmd[3:], env) if self._server is not None else None
        if self._server is not None and forked is None:
            self._stop_server(self._server.why_not)
        if forked is not None:
            rc = self._watch(forked, start_size, done)
            if self._server is not None and self._server.why_not is not None:
                self._stop_server(self._server.why_not)
        elif self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "ab") as log:
                log.write(f"\n$ {' '.join(cmd)}\n".encode())
                log.flush()
                proc = subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
                )
                tee = threading.Thread(target=self._tee, args=(proc, log), daemon=True)
                tee.start()
                rc = self._watch(proc, start_size, done)
                tee.join(timeout=10)
        else:
            proc = subprocess.Popen(cmd, env=env)
            rc = self._watch(proc, start_size, done)
        _scrub(self.results, start_size)
        finished = any(r["kind"] == "finish" for r in _records_since(self.results, start_size))
        return Attempt(returncode=rc, finished=finished, forked=forked is not None)

    def _tee(self, proc: subprocess.Popen[bytes], log: BinaryIO) -> None:
        """Copy the child's output to the log; pass on the lines a person needs now."""
        assert proc.stdout is not None
        secret = bool(env_secrets())
        for line in proc.stdout:
            if secret:  # Note [Secrets in the environment]
                line = hide_env_secrets(line.decode("utf-8", "surrogateescape")).encode(
                    "utf-8", "surrogateescape"
                )
            log.write(line)
            log.flush()
            if self.on_line is not None and SHOW.match(line):
                self.on_line(line.decode("utf-8", "replace").rstrip())

    def _watch(self, proc: _Process, offset: int, done: int) -> int:
        tail = _Tail(self.results, offset)
        inflight = crash.inflight_path(self.state, "main")
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.25)
                except subprocess.TimeoutExpired:
                    rc = None
                for rec in tail.new():
                    if rec["kind"] == "result":
                        done += 1
                    elif rec["kind"] == "session":
                        selected = int(str(rec.get("selected", 0)))
                        self.total = max(self.total, done + selected)
                if self.on_progress is not None and self.total:
                    self.on_progress(done, max(self.total, done))
                if rc is not None:
                    return rc
                if self.timeout and _stuck(inflight, self.timeout + GRACE_S):
                    proc.kill()  # its own watchdog did not fire; recorded as a crash
        except BaseException:
            proc.kill()
            proc.wait()
            raise


def _stuck(inflight: Path, limit: float) -> bool:
    data = crash.read_inflight(inflight)
    if data is None or data.get("phase") != "run":
        return False
    return time.time() - float(data.get("start", time.time())) > limit


class _Tail:
    """Records appended to a JSONL file since an offset (complete lines only)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset

    def new(self) -> list[dict[str, object]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out: list[dict[str, object]] = []
        for line in chunk[: end + 1].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                rec.setdefault("kind", "result")
                out.append(rec)
        return out


def _records_since(path: Path, offset: int) -> list[dict[str, object]]:
    return _Tail(path, offset).new()


def _scrub(results: Path, start: int) -> None:
    """The results a session appended, with no value of a secret of our environment
    in them: a test may have found one outside its own environment (Note [Secrets
    in the environment]). Rewritten only when one is there."""
    if not env_secrets() or not results.is_file():
        return
    with open(results, "rb") as f:
        f.seek(start)
        tail = f.read().decode("utf-8", "surrogateescape")
    clean = hide_env_secrets(tail)
    if clean != tail:
        with open(results, "r+b") as f:
            f.seek(start)
            f.write(clean.encode("utf-8", "surrogateescape"))
            f.truncate()
