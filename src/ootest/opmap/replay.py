"""``ootest ops replay``: the op map's call examples run on the device, before any test.

Note [Replaying calls]
Static evidence (declared ops and dtypes) cannot see that an op the backend
declares returns wrong numbers, kills the process, hangs, or fails from some
size on. Running every test to find out is what selection wants to avoid;
running each *distinct call* the tests make is far cheaper (an op map of
250,000 variants holds a few thousand distinct calls). Op capture writes those
calls down (Note [Call examples]); replay rebuilds each one on the CPU and on the
device with the same values, runs the op on both and compares with
``torch.testing.assert_close``'s default tolerances:

- ``ok``: same shapes, dtypes and values (values are not compared for ops whose
  results are not defined by their inputs: seeded random ops, ``empty``...); or
  an error path: it raised on the CPU and on the device an exception of the
  CPU's class or a subclass (``NotImplementedError`` is a ``RuntimeError``), as a
  test expecting it accepts (``"error_path": true``, both exceptions recorded, and
  ``"same_message"``: whether the first lines agree; for a test that matches
  messages, another message is a failure: Note [Tests that match messages]);
- ``failed``: the op raised on the device (its exception type and first line;
  when the CPU raised too, an exception that is not of the CPU's class);
- ``mismatch``: it returned something else (which result, greatest differences),
  or returned where the CPU raised;
- ``crashed``: the worker process died in this call (its signal);
- ``timeout``: the call did not return within ``--timeout`` seconds;
- ``unusable``: no evidence either way (the CPU reference died or hung; the call
  cannot be rebuilt; the op does not exist in this torch; too large; a call
  holding tensors on the CPU and on the device, rebuilt with that placement,
  raised on the device where the CPU, holding every tensor, returned: it may be
  the cross-device error its test expects, so it decides nothing and the
  variant is decided, and run, by the rest of its evidence).

Calls run in a worker process (``ootest.device.replay_worker``) that writes
which call it begins before it runs it; a crash or a hang costs that call and a
restart, never the replay. Each restart costs seconds (torch and the backend
load again) and each hang the whole timeout, so once ``presume_after`` calls of
one op with one dtype signature have crashed (or hung), the rest of that op's
calls with that signature are not run: they are recorded with the same status,
``"presumed": true`` and a detail that says so (calls are replayed grouped by
op and signature, so they come next). Selection reads the file (``ootest select run
--replay``): a variant certain to make a call that crashed, hung or failed is a
skip (Note [A known failure is re-checked by the replay]), one whose calls
mismatched is run without being required to pass (Note [Selection rules]); a
presumed call is no fact (it never ran): unknown, it skips nothing and the
variant runs (``no_evidence``). Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.untrusted import without_secrets

STATUSES = ("ok", "failed", "mismatch", "crashed", "timeout", "unusable")
FAULTS = ("crashed", "timeout", "failed", "mismatch")  # worst first
STARTUP_LIMIT = 300.0  # seconds a worker may take to load the backend


@dataclass
class Replay:
    """A replay file: where it ran, and each example's result by key."""

    header: dict[str, Any]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results.values():
            out[str(r["status"])] = out.get(str(r["status"]), 0) + 1
        return out


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit {rc}"


def signature_of(call: str) -> str:
    """The dtypes of a call example's device tensors (and a ``dtype=``), distinct and
    sorted: the signature a crash or hang is presumed for (Note [Replaying calls]).
    A tensor that is a lazy conj or neg view counts apart (``complex64+conj``): a
    crash copying a conj view says nothing of a plain copy (Note [Conjugate and
    negative views] in ootest.device.calls)."""
    found: set[str] = set()

    def walk(a: Any) -> None:
        if isinstance(a, list):
            for b in a:
                walk(b)
        elif isinstance(a, dict):
            if "T" in a:
                if a.get("dev"):  # a lazy conj or neg view is another kernel path
                    bits = "".join(f"+{b}" for b in ("conj", "neg") if a.get(b))
                    found.add(str(a["T"]) + bits)
            elif "dtype" in a:
                found.add(str(a["dtype"]))

    try:
        spec = json.loads(call)
        if not isinstance(spec, dict):
            return "?"
        walk(spec.get("args"))
        kwargs = spec.get("kwargs")
        walk(list(kwargs.values()) if isinstance(kwargs, dict) else None)
    except (ValueError, RecursionError):  # garbled or nested past any real call
        return "?"
    return ",".join(sorted(found))


def recorded_signature(call: str) -> str:
    """The dtype signature op capture recorded for a call example (Note [Call dtypes]):
    the distinct dtypes of its tensors on the device (in the arguments and one list
    deep) and a factory's ``dtype=`` when its ``device=`` is the device, sorted and
    comma-joined; "?" for a call that cannot be read. It matches the op map's
    ``call_sig`` rows, so a replay can tell which recorded signatures it ran."""
    found: set[str] = set()

    def tensors(items: Any) -> None:
        for a in items:
            for b in a if isinstance(a, list) else [a]:
                if isinstance(b, dict) and "T" in b and b.get("dev"):
                    found.add(str(b["T"]))

    try:
        spec = json.loads(call)
        args, kwargs = spec.get("args") or [], spec.get("kwargs") or {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return "?"
        tensors(args)
        if kwargs.get("device") == {"device": True} and isinstance(kwargs.get("dtype"), dict):
            found.add(str(kwargs["dtype"].get("dtype")))
        tensors(v for k, v in kwargs.items() if k != "device")
    except (ValueError, AttributeError, TypeError, RecursionError):
        return "?"
    return ",".join(sorted(found))


def new_replay(device: str, examples: int, timeout: float) -> Replay:
    """An empty replay with its header (``complete`` turns true when every call is in)."""
    from ootest.version import ootest_version

    return Replay(
        {
            "kind": "replay",
            "device": device,
            "ootest_version": ootest_version(),
            "examples": examples,
            "timeout": timeout,
            "time": time.time(),
            "complete": False,
        }
    )


def replay(
    examples: list[tuple[str, str, str]],
    device: str,
    *,
    timeout: float,
    presume_after: int = 2,
    python: str = sys.executable,
    on_progress: Callable[[int, int], None] | None = None,
    into: Replay | None = None,
    unplaced: Mapping[str, Mapping[str, Any]] | None = None,
) -> Replay:
    """Replay ``examples`` ((key, op, call) each) on ``device`` (Note [Replaying calls]).
    ``presume_after``: crashes (or hangs) of one op and signature after which its
    other (as large or larger) calls are not run (0: run every call). ``into``:
    the replay to fill, which keeps what was done when this raises or is
    interrupted. ``unplaced``: key -> the ``error`` and ``detail`` of an earlier
    replay's row of a call the device could not take the inputs of: re-checked by
    placement first (Note [A refresh replays what can change a decision])."""
    from ootest.device.calls import elements

    sigs = {k: signature_of(call) for k, _, call in examples}
    size = {k: _elements(call, elements) for k, _, call in examples}
    # grouped by op and signature, smallest first: a presumption covers larger calls
    examples = sorted(examples, key=lambda e: (e[1], sigs[e[0]], size[e[0]], e[0]))
    costly: dict[tuple[str, str, str], int] = {}  # (op, signature, status) -> count
    rep = into if into is not None else new_replay(device, len(examples), timeout)
    with tempfile.TemporaryDirectory(prefix="ootest-replay-") as tmp:
        todo = Path(tmp) / "todo.jsonl"
        rows = unplaced or {}

        def line(k: str, op: str, call: str) -> str:
            rec: dict[str, Any] = {"key": k, "op": op, "call": call}
            if k in rows:
                rec["unplaced"] = {"error": rows[k].get("error"), "detail": rows[k].get("detail")}
            return json.dumps(rec) + "\n"

        todo.write_text("".join(line(k, op, call) for k, op, call in examples), encoding="utf-8")
        start, attempt, loaded, failures = 0, 0, False, 0
        while start < len(examples):
            attempt += 1
            out, err = Path(tmp) / f"out{attempt}.jsonl", Path(tmp) / f"err{attempt}.txt"
            was, hello = start, False
            try:
                start, hello = _one_worker(
                    rep, examples, device, python, todo, out, err, start, timeout, on_progress
                )
                if start == was:  # it loaded, then ended or stalled before any call
                    raise _NoStart(
                        f"ops replay --device {device}: the worker stopped before call "
                        f"{was + 1} of {len(examples)} without running it; its output: "
                        f"{_tail(err)}"
                    )
            except _NoStart as e:
                # a device that loaded before may be busy a while after a crash
                failures += 1
                if not (loaded or hello) or failures > len(RESTART_WAITS):
                    raise UserError(str(e)) from None
                time.sleep(RESTART_WAITS[failures - 1])
                continue
            loaded, failures = loaded or hello, 0
            if start == 0 or start > len(examples):
                continue
            key, op, _ = examples[start - 1]
            status = rep.results.get(key, {}).get("status")
            if status not in ("crashed", "timeout"):
                continue
            sig = sigs[key]
            n = costly[(op, sig, status)] = costly.get((op, sig, status), 0) + 1
            while presume_after and n >= presume_after and start < len(examples):
                k, o, _ = examples[start]
                if (o, sigs[k]) != (op, sig):
                    break
                verb = "crashed" if status == "crashed" else "hung"
                _put(rep, examples, start, {"status": status, "presumed": True,
                     "detail": f"not run: {n} calls of {op} with {sig or 'no dtypes'} "
                     f"{verb} before it, none larger than it"})  # fmt: skip
                start += 1
                if on_progress is not None:
                    on_progress(len(rep.results), len(examples))
    rep.header["complete"] = len(rep.results) == len(examples)
    return rep


RESTART_WAITS = (2.0, 5.0, 10.0)  # seconds before trying again to load the backend
EXIT_GRACE = 5.0  # seconds a worker whose calls are all done may take to exit


class _NoStart(Exception):
    """The worker stopped before it began any call."""


def _elements(call: str, count: Callable[[Any], int]) -> int:
    try:
        return count(json.loads(call))
    except (ValueError, RecursionError, TypeError):
        return 0


def _one_worker(
    rep: Replay,
    examples: list[tuple[str, str, str]],
    device: str,
    python: str,
    todo: Path,
    out: Path,
    err: Path,
    start: int,
    timeout: float,
    on_progress: Callable[[int, int], None] | None,
) -> tuple[int, bool]:
    """Run one worker from ``start`` until it ends, dies or hangs: the next start, and
    whether it loaded the backend. Markers: ``hello`` (loaded), ``begin`` (rebuilding
    the call and running it on the CPU), ``device`` (running it on the device: the
    timeout counts from here), the result."""
    out.touch()
    cmd = [python, "-m", "ootest.device.replay_worker", device, str(todo), str(out), str(start)]
    with open(err, "wb") as errf:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=errf,
            stderr=errf,
            start_new_session=True,
            env=without_secrets(),  # Note [Secrets in the environment]
        )
    began: tuple[int, float] | None = None
    on_device: float | None = None
    cpu_limit = max(60.0, 6 * timeout)
    hello_by = time.monotonic() + STARTUP_LIMIT
    hello = False
    nxt = start
    pos = 0
    last = time.monotonic()  # the last line seen
    try:
        while True:
            rc = proc.poll()  # before reading: what it wrote before it ended is read below
            with open(out, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            cut = chunk.rfind(b"\n") + 1
            pos += cut
            now = time.monotonic()
            for line in chunk[:cut].splitlines():
                rec = json.loads(line)
                last = now
                if "hello" in rec:
                    hello = True
                    rep.header.setdefault("torch_version", rec["hello"])
                elif "begin" in rec:
                    began, on_device = (int(rec["begin"]), now), None
                elif "device" in rec:
                    on_device = now
                else:
                    i = int(rec.pop("i"))
                    _put(rep, examples, i, rec)
                    began, on_device, nxt = None, None, i + 1
                    if on_progress is not None:
                        on_progress(len(rep.results), len(examples))
            if rc is not None and cut == 0:
                if began is not None:
                    why = _signal_name(rc)
                    if on_device is not None:
                        res = {"status": "crashed", "detail": f"the process died: {why}"}
                    else:  # in the CPU reference or in rebuilding the call
                        res = {"status": "unusable", "detail": f"the CPU reference died: {why}"}
                    _put(rep, examples, began[0], res)
                    return began[0] + 1, hello
                if nxt < len(examples) and not hello:
                    raise _NoStart(_startup_failure(device, rc, err))
                return nxt, hello  # ended between calls: a new worker goes on
            if cut:
                continue
            if began is not None and on_device is not None and now - on_device > timeout:
                _kill(proc)
                _put(rep, examples, began[0], {"status": "timeout",
                     "detail": f"no return within {timeout:g} s"})  # fmt: skip
                return began[0] + 1, hello
            if began is not None and on_device is None and now - began[1] > cpu_limit:
                _kill(proc)
                _put(rep, examples, began[0], {"status": "unusable",
                     "detail": f"the CPU reference took over {cpu_limit:g} s"})  # fmt: skip
                return began[0] + 1, hello
            if hello and began is None:
                idle = EXIT_GRACE if nxt >= len(examples) else timeout
                if now - last > idle:  # stuck between calls, or in its exit
                    _kill(proc)
                    return nxt, hello
            if not hello and now > hello_by:
                _kill(proc)
                raise UserError(
                    f"ops replay --device {device}: the worker did not load the backend within "
                    f"{STARTUP_LIMIT:g} s; its output: {_tail(err)}"
                )
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            _kill(proc)


def _put(rep: Replay, examples: list[tuple[str, str, str]], i: int, rec: dict[str, Any]) -> None:
    key, op, _ = examples[i]
    rep.results[key] = {"kind": "call", "key": key, "op": op, **rec}


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _tail(err: Path, n: int = 600) -> str:
    try:
        text = err.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "(none)"
    return repr(text[-n:]) if text else "(none)"


def _startup_failure(device: str, rc: int, err: Path) -> str:
    return (
        f"ops replay --device {device}: the backend did not load ({_signal_name(rc)}); "
        f"its output: {_tail(err)}. Check that `ootest run --device {device}` works here"
    )


# ------------------------------------------------------------------ the file
def write_replay(path: Path, rep: Replay) -> None:
    from ootest.atomic import write_atomic

    lines = [json.dumps(rep.header, sort_keys=True)]
    lines += [json.dumps(rep.results[k], sort_keys=True) for k in sorted(rep.results)]
    write_atomic(path, "\n".join(lines) + "\n")


#: the replays read in this process: (path, inode, size, mtime) -> the replay (a refresh
#: reads the same 75,000-call file from several steps)
_READ: dict[tuple[str, int, int, int], Replay] = {}
_READ_MAX = 4


def read_replay(path: Path) -> Replay:
    """A replay file; one clear error for anything else. The same file unchanged is
    read once per process: do not change what this returns."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError as e:
        raise UserError(f"--replay {path}: cannot read it: {e.strerror or e}") from None
    hit = _READ.get(key)
    if hit is None:
        hit = _parse_replay(path)
        if len(_READ) >= _READ_MAX:
            _READ.pop(next(iter(_READ)))
        _READ[key] = hit
    return hit


def _parse_replay(path: Path) -> Replay:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(f"--replay {path}: cannot read it: {e.strerror or e}") from None
    where = f"--replay {path}"
    rep: Replay | None = None
    for n, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise UserError(
                f"{where}:{n}: expected a JSON object (a file `ootest ops replay` wrote); "
                f"found {line[:60]!r}"
            )
        if rep is None:
            if rec.get("kind") != "replay":
                raise UserError(
                    f'{where}:1: expected the replay header ({{"kind": "replay", ...}}); '
                    f"found kind {rec.get('kind')!r}. Write the file with `ootest ops replay`"
                )
            rep = Replay(rec)
            continue
        key, status = rec.get("key"), rec.get("status")
        if rec.get("kind") != "call" or not isinstance(key, str) or status not in STATUSES:
            raise UserError(
                f"{where}:{n}: expected a call result (kind 'call', a key, status one of "
                f"{', '.join(STATUSES)}); found {line[:80]!r}"
            )
        rep.results[key] = rec
    if rep is None:
        raise UserError(f"{where}: the file is empty; write it with `ootest ops replay`")
    return rep
