"""Run pytest under supervision: survive crashes and hangs, lose nothing.

``ootest run`` starts pytest (with the plugin) as a child process and watches
the results file grow. When the child dies before it says it finished, the test
it had in flight (see :mod:`ootest.record.crash`) is recorded as ``crashed`` or
``timeout`` and pytest starts again with ``--ootest-resume``: every test that
has a result is deselected, so the run continues after the crasher rather than
from the top. Each restart adds one result, so the loop always ends.

The child is tied to this process (``PR_SET_PDEATHSIG`` on Linux): if the
runner is killed, so is pytest, and ``ootest run --resume`` picks up from the
results file. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ootest.record import crash
from ootest.record.results import Appender, RunData, read_records

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
    _crashed: set[tuple[object, object]] = field(default_factory=set)

    def run(self) -> Attempt:
        """Run to the end; return the last attempt (finished, or why it could not go on)."""
        self.state.mkdir(parents=True, exist_ok=True)
        while True:
            for p in self.state.glob("inflight-*.json"):
                crash.clear_inflight(p)
            before = RunData.from_records(read_records(self.results))
            attempt = self._once(
                resume=bool(before.results) or before.sessions > 0, done=len(before.results)
            )
            self.attempts.append(attempt)
            if attempt.finished:
                return attempt
            inflight = crash.read_inflight(crash.inflight_path(self.state, "main"))
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

    def _once(self, resume: bool, done: int) -> Attempt:
        cmd = [*self.pytest_cmd, "--ootest-results", str(self.results)]
        cmd += ["--ootest-state", str(self.state)]
        if resume:
            cmd += ["--ootest-resume", str(self.results)]
        env = {k: v for k, v in self.env.items() if not k.startswith("PYTEST_XDIST_")}
        env["OOTEST_PARENT_PID"] = str(os.getpid())  # a new session, even under xdist
        start_size = self.results.stat().st_size if self.results.exists() else 0
        if self.log is not None:
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
        finished = any(r["kind"] == "finish" for r in _records_since(self.results, start_size))
        return Attempt(returncode=rc, finished=finished)

    def _tee(self, proc: subprocess.Popen[bytes], log: BinaryIO) -> None:
        """Copy the child's output to the log; pass on the lines a person needs now."""
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if self.on_line is not None and SHOW.match(line):
                self.on_line(line.decode("utf-8", "replace").rstrip())

    def _watch(self, proc: subprocess.Popen[bytes], offset: int, done: int) -> int:
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
