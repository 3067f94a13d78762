"""A fork server: restart pytest after a crash without paying for its start-up again.

Note [Fork server]
~~~~~~~~~~~~~~~~~~
A crash costs a new pytest process, and most of that is start-up that comes out
the same every time: importing pytest and torch, loading the device, importing
``torch.testing._internal`` (and ``common_methods_invocations`` when the test
files use it, 4-8 s on two cores). A young backend can crash hundreds of times
in one file. So ``ootest run`` starts one long-lived process, the fork server,
that does that start-up once, in the order the plugin does it (device first,
then ``torch.testing._internal``), and then forks one child per pytest session;
each child runs ``pytest`` with the same arguments as a fresh process would.
The supervisor (:mod:`ootest.runner.supervise`) watches the child exactly as it
watches a fresh one: its exit status comes back through the server, its in-flight
and fault files are its own, and a timeout kills the child, never the server.

Forking is only safe where the server has started no threads of its own: a
child of a process whose OpenMP pool or device driver threads were running
inherits their locks but not the threads. So the server runs no tensor ops,
counts its threads after ``import torch`` and again after loading the device and
the test modules' imports, and refuses to serve (the supervisor then starts
fresh processes, as before) when the count grew. Devices declare whether they
may be loaded before a fork at all: ``emu`` (host memory, no threads) does; a
backend module does only when the user says so (``ootest run --fork on``). The
server is also given up, for the rest of the run, when it dies or when a forked
child stops before running any test; that attempt is repeated in a fresh
process.

Protocol, one JSON object per line: the server answers ``{"ready": true}`` or
``{"ready": false, "why": ...}`` once; then for each request
``{"argv": [...], "env": {...}}`` (pytest's arguments and the child's
environment) it answers ``{"pid": N}`` and, when that child has ended,
``{"exit": status}`` (a negative status is the signal, as :mod:`subprocess`
reports it). The server writes ``$ pytest ...`` before each child so that the
log shows where each session starts. Nothing here imports torch at module level.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import re
import runpy
import select
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

#: ``torch.testing._internal`` modules a test file imports at its top level: the
#: server imports them once so that each child finds them loaded.
_PRELOAD = re.compile(r"^(?:from|import)\s+(torch\.testing\._internal\.[\w.]+)", re.M)

_INTERNAL = "torch.testing._internal"

#: The most bytes of a test file read when looking for its imports.
_SCAN_BYTES = 1 << 20


def preloads(files: Sequence[str]) -> list[str]:
    """The upstream test modules the given test files import at their top level."""
    out: dict[str, None] = {}
    for f in files:
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                text = fh.read(_SCAN_BYTES)
        except OSError:  # a directory or a glob: pytest finds the files, nothing preloaded
            continue
        out.update(dict.fromkeys(_PRELOAD.findall(text)))
    return list(out)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1  # unknown: the counts never match and nothing is forked


class ServerGone(Exception):
    """The fork server is no longer there to answer."""


class ForkServer:
    """The supervisor's handle on a running fork server."""

    def __init__(self, proc: subprocess.Popen[bytes], requests: int, replies: int) -> None:
        self.proc = proc
        self._requests = requests
        self._replies = replies
        self._buffer = b""
        self.why_not: str | None = None  # set once the server cannot serve (or stopped)

    @classmethod
    def start(
        cls,
        *,
        device: str | None,
        preload: Sequence[str],
        argv: Sequence[str],
        env: dict[str, str],
        stdout: int | None,
        force: bool = False,
    ) -> ForkServer:
        """Start a server (it gets ready in the background: see :meth:`ready`)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        cmd = [sys.executable, "-m", "ootest.runner.forkserver", str(req_r), str(rep_w)]
        cmd += ["--device", device or "", *(f"--preload={m}" for m in preload)]
        cmd += [*(["--force"] if force else []), "--argv", json.dumps(list(argv))]
        try:
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=stdout,
                stderr=subprocess.STDOUT if stdout is not None else None,
                pass_fds=(req_r, rep_w),
            )
        finally:
            os.close(req_r)
            os.close(rep_w)
        return cls(proc, req_w, rep_r)

    def _reply(self, timeout: float | None) -> dict[str, Any] | None:
        """The server's next answer; None when none came within ``timeout`` seconds."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._replies, 65536)
            if not chunk:
                raise ServerGone("it exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            data = json.loads(line)
        except ValueError:
            raise ServerGone(f"it answered {line[:200]!r}") from None
        if not isinstance(data, dict):
            raise ServerGone(f"it answered {line[:200]!r}")
        return data

    def ready(self) -> bool:
        """Wait until the server has loaded everything; False (and why_not) if it cannot serve."""
        if self.why_not is not None:
            return False
        try:
            answer = self._reply(None)
        except ServerGone as e:
            self.why_not = f"stopped while loading ({e})"
            return False
        if not answer or not answer.get("ready"):
            self.why_not = str((answer or {}).get("why") or "not ready")
            return False
        return True

    def spawn(self, argv: Sequence[str], env: dict[str, str]) -> Forked | None:
        """Fork a pytest child with these arguments and environment; None if the server
        is gone (``why_not`` says why) and the caller must start a fresh process."""
        if self.why_not is not None:
            return None
        request = (json.dumps({"argv": list(argv), "env": env}) + "\n").encode()
        try:
            os.write(self._requests, request)
            answer = self._reply(None)
        except (OSError, ServerGone) as e:
            self.why_not = f"stopped ({e})"
            return None
        pid = answer.get("pid") if answer else None
        if not isinstance(pid, int):
            self.why_not = str((answer or {}).get("why") or "did not fork")
            return None
        return Forked(self, pid)

    def close(self) -> None:
        """Stop the server (closing its request pipe ends it) and reap it."""
        for fd in (self._requests, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self._requests = self._replies = -1
        if self.why_not is None:
            self.why_not = "closed"
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Forked:
    """A pytest child of the fork server, watched like a :class:`subprocess.Popen`."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        try:
            answer = self.server._reply(timeout)
        except (OSError, ServerGone) as e:
            # The server died with its child (which it takes along: PR_SET_PDEATHSIG).
            self.server.why_not = f"stopped ({e})"
            self.returncode = -int(signal.SIGKILL)
            return self.returncode
        if answer is None:
            raise subprocess.TimeoutExpired(["pytest", f"pid {self.pid}"], timeout or 0.0)
        self.returncode = int(answer.get("exit", 1))
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --------------------------------------------------------------------- the server
def _prepare(device: str | None, preload: Sequence[str], force: bool) -> str | None:
    """Load what every child needs; the reason not to fork, or None."""
    import pytest  # noqa: F401  (loaded once, for every child)

    from ootest.device.activate import DeviceSpec, activate_device, keep_autoload_out

    if not device:
        return None
    spec = DeviceSpec.parse(device)
    if spec.kind != "emu" and not force:
        return f"device {device!r} is not declared fork-safe (--fork on declares it)"
    keep_autoload_out(device)  # the parent said so (Note [Backends as they ship])
    importlib.import_module("torch")
    before = _threads()  # numpy's OpenBLAS may run a thread; it is fork-safe (pthread_atfork)
    # The same order as the plugin: the device before torch.testing._internal.
    activate_device(spec)
    for name in (f"{_INTERNAL}.common_utils", f"{_INTERNAL}.common_device_type", *preload):
        try:
            importlib.import_module(name)
        except Exception:  # the child imports it again and reports the error
            continue
    after = _threads()
    if after > before or before < 0:
        # a forked child would inherit those threads' locks but not the threads
        return f"device {device!r} started {after - before} thread(s) while loading"
    return None


def _child(req: dict[str, Any], fds: tuple[int, int], argv0: str) -> None:
    """In the forked child: become ``python -m pytest ARGV`` and never return."""
    code: int = 1
    try:
        for fd in fds:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(req["env"]).items()})
        os.environ["OOTEST_PARENT_PID"] = str(os.getppid())  # tied to the server
        os.environ["OOTEST_STARTED"] = "forked"
        sys.argv = [argv0, *map(str, req["argv"])]
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)  # python -m pytest
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # reported in the log, as a fresh process would
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(args: Sequence[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m ootest.runner.forkserver")
    ap.add_argument("requests", type=int)
    ap.add_argument("replies", type=int)
    ap.add_argument("--device", default="")
    ap.add_argument("--preload", action="append", default=[])
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--argv", type=json.loads, default=[])  # pytest's, as the first child's
    ns = ap.parse_args(args)

    from ootest.record.crash import die_with_parent

    die_with_parent()  # the supervisor's child: gone when it is
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the child and the supervisor
    replies = os.fdopen(ns.replies, "w", buffering=1)

    def answer(data: dict[str, Any]) -> None:
        replies.write(json.dumps(data) + "\n")

    import pytest

    argv0 = str(Path(pytest.__file__).with_name("__main__.py"))
    # torch.testing._internal.common_utils parses sys.argv when it is imported.
    sys.argv = [argv0, *ns.argv]
    try:
        why = _prepare(ns.device or None, ns.preload, ns.force)
    except Exception as e:  # a fresh pytest meets the same error and reports it
        why = f"could not load the device ({type(e).__name__}: {str(e)[:300]})"
    if why is not None:
        answer({"ready": False, "why": why})
        return 0
    base = _threads()
    answer({"ready": True})
    requests: IO[bytes] = os.fdopen(ns.requests, "rb")
    for line in requests:
        req = json.loads(line)
        now = _threads()
        if now > base:
            answer({"pid": None, "why": f"runs {now} threads, {base} when it was ready"})
            continue
        print(f"\n$ pytest {' '.join(map(str, req['argv']))}  (forked)", flush=True)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req, (ns.requests, ns.replies), argv0)
        answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        answer({"exit": os.waitstatus_to_exitcode(status)})
    return 0


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1:]))
