"""What a test that killed its process leaves behind, and how it is recorded.

Each pytest process that runs tests (the main process, or each pytest-xdist
worker) keeps two small files in the state directory:

``inflight-<worker>.json``  the test it is running now (nodeid and the result
                            fields the plugin knows before it runs), or the file
                            it is collecting; removed when the test ends.
``fault-<worker>-<pid>.log`` where :mod:`faulthandler` writes when the process
                            dies of a fatal signal or when the per-test timeout
                            (``faulthandler.dump_traceback_later``, a C thread
                            that fires even when the GIL is held) expires.

When a process dies, whoever notices (``ootest run`` for the main process,
the pytest-xdist controller for a worker) turns these into one ``crashed`` or
``timeout`` result. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ootest.atomic import write_atomic
from ootest.record.results import CRASHED, TIMEOUT, Record, result_record

__all__ = [
    "clear_inflight",
    "crash_record",
    "die_with_parent",
    "inflight_path",
    "read_inflight",
    "signal_name",
    "worker_id",
    "write_inflight",
]

_FATAL = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}


#: In-flight fields that are not result fields.
_NOT_RESULT = ("fault_log", "start", "timeout", "pytest_nodeid")


def worker_id(workerinput: dict[str, Any] | None = None) -> str:
    """``gw0``... in a pytest-xdist worker (from its ``workerinput``), else ``main``."""
    if workerinput is not None:
        return str(workerinput.get("workerid", "main"))
    return "main"


def inflight_path(state: Path, worker: str) -> Path:
    return state / f"inflight-{worker}.json"


def write_inflight(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data))


def read_inflight(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def clear_inflight(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _fault_text(inflight: dict[str, Any]) -> str:
    path = inflight.get("fault_log")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(20000)
    except OSError:
        return ""


def signal_name(returncode: int) -> str:
    """``SIGSEGV`` for a :mod:`subprocess` return code of -11."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def crash_record(inflight: dict[str, Any], returncode: int | None = None) -> Record:
    """The result of the test (or collection) that was in flight when its process died.

    ``returncode`` is the process's exit status when the caller knows it (a
    negative number is the signal, as :mod:`subprocess` reports it).
    """
    fault = _fault_text(inflight)
    timeout = re.search(r"^Timeout \(([\d:.]+)\)!", fault, re.M)
    sig: str | None = None
    if returncode is not None and returncode < 0:
        sig = signal_name(returncode)
    if sig is None:
        m = re.search(r"Fatal Python error: ([A-Za-z -]+)", fault)
        if m:
            sig = _FATAL.get(m[1].strip())
    if timeout is not None:
        outcome = TIMEOUT
        why = f"timed out after {inflight.get('timeout')} s (per-test timeout); process killed"
    elif sig is not None:
        outcome = CRASHED
        why = f"process died of {sig}"
    elif returncode is not None:
        outcome = CRASHED
        why = f"process exited with status {returncode} in the middle of the test (os._exit?)"
    else:
        outcome = CRASHED
        why = "process died without a fault report (SIGKILL, OOM killer or os._exit)"
    fields = {k: v for k, v in inflight.items() if k not in _NOT_RESULT}
    nodeid, variant_id, file = (str(fields.pop(k, "")) for k in ("nodeid", "variant_id", "file"))
    message = (why + ("\n" + _last_lines(fault) if fault.strip() else ""))[:2000]
    if inflight.get("phase") == "collect":
        message = "collection crashed: " + message
    return result_record(
        outcome,
        nodeid=nodeid,
        variant_id=variant_id,
        file=file,
        **fields,
        signal=sig,
        duration=time.time() - float(inflight.get("start", time.time())),
        message=message,
    )


def _last_lines(text: str, n: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[:n])


def die_with_parent() -> None:
    """In the pytest child: exit when ``ootest run`` dies (Linux ``PR_SET_PDEATHSIG``)."""
    parent = os.environ.pop("OOTEST_PARENT_PID", None)  # not for grandchildren (xdist workers)
    if not parent or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # the parent died before prctl took effect
        os._exit(1)
