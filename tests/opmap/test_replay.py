"""The replay's supervisor and file (Note [Replaying calls]), with a stand-in worker: no torch."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from ootest.errors import UserError
from ootest.opmap.replay import read_replay, replay, write_replay

# Behaves like ootest.device.replay_worker; each example's op says what to do.
WORKER = """
import json, os, signal, sys, time
_, _, device, todo, out, start = sys.argv[1:7]
here = os.path.dirname(todo)
if device == "emu:broken":
    print("ImportError: no backend here", file=sys.stderr)
    sys.exit(3)
if device == "emu:busy" and int(start) > 0 and not os.path.exists(todo + ".waited"):
    open(todo + ".waited", "w").close()  # busy once after a crash, then free
    print("RuntimeError: device busy", file=sys.stderr)
    sys.exit(1)
f = open(out, "a")
def put(r):
    f.write(json.dumps(r) + "\\n"); f.flush()
put({"hello": "2.13.0"})
lines = open(todo).read().splitlines()
for i in range(int(start), len(lines)):
    op = json.loads(lines[i])["op"]
    put({"begin": i})
    if op == "cpucrash":  # dies in the CPU reference, before the device runs anything
        os.kill(os.getpid(), signal.SIGSEGV)
    put({"device": i})
    if op == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if op == "hang":
        time.sleep(60)
    put({"i": i, "status": "failed" if op == "boom" else "ok", "detail": op})
if device == "emu:exithang":  # a driver thread joined at exit, forever
    time.sleep(60)
"""


@pytest.fixture
def python(tmp_path: Path) -> str:
    (tmp_path / "worker.py").write_text(WORKER)
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "worker.py"}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def _examples(*ops: str) -> list[tuple[str, str, str]]:
    return [(f"k{i}", op, "{}") for i, op in enumerate(ops)]


def test_a_crash_or_a_hang_costs_one_call_and_a_restart(python: str, tmp_path: Path) -> None:
    seen: list[int] = []
    t = time.monotonic()
    rep = replay(
        _examples("ok", "crash", "ok", "hang", "boom", "ok"),
        "emu:x",
        timeout=1.0,
        python=python,
        on_progress=lambda done, total: seen.append(done),
    )
    assert time.monotonic() - t < 30
    got = {k: (r["status"], r["op"]) for k, r in rep.results.items()}
    assert got == {
        "k0": ("ok", "ok"),
        "k1": ("crashed", "crash"),
        "k2": ("ok", "ok"),
        "k3": ("timeout", "hang"),
        "k4": ("failed", "boom"),
        "k5": ("ok", "ok"),
    }
    assert "SIGSEGV" in rep.results["k1"]["detail"]
    assert rep.header["torch_version"] == "2.13.0" and rep.header["examples"] == 6
    assert seen == sorted(seen) and seen[-1] == 6
    assert rep.counts() == {
        "ok": 3, "failed": 1, "mismatch": 0, "crashed": 1, "timeout": 1, "unusable": 0
    }  # fmt: skip
    out = tmp_path / "r.jsonl"
    write_replay(out, rep)
    assert read_replay(out).results == rep.results


def test_after_two_crashes_of_one_op_and_signature_the_rest_are_presumed(python: str) -> None:
    f32 = '{"args":[{"T":"float32","dev":true,"shape":[2]}],"kwargs":{}}'
    i64 = '{"args":[{"T":"int64","dev":true,"shape":[2]}],"kwargs":{}}'
    examples = [(f"k{i}", "crash", f32.replace("[2]", f"[{i + 2}]")) for i in range(4)]
    examples += [("k9", "crash", i64), ("ka", "ok", f32)]
    rep = replay(examples, "emu:x", timeout=1.0, python=python)
    got = {k: (r["status"], bool(r.get("presumed"))) for k, r in rep.results.items()}
    assert got == {
        "k0": ("crashed", False),
        "k1": ("crashed", False),
        "k2": ("crashed", True),
        "k3": ("crashed", True),
        "k9": ("crashed", False),  # another signature: run
        "ka": ("ok", False),
    }
    assert rep.results["k2"]["detail"] == (
        "not run: 2 calls of crash with float32 crashed before it, none larger than it"
    )
    every = replay(examples, "emu:x", timeout=1.0, presume_after=0, python=python)
    assert not any(r.get("presumed") for r in every.results.values())


def test_a_crash_in_the_cpu_reference_is_not_the_devices(python: str) -> None:
    rep = replay(_examples("cpucrash", "ok"), "emu:x", timeout=1.0, python=python)
    assert rep.results["k0"]["status"] == "unusable"
    assert rep.results["k0"]["detail"] == "the CPU reference died: SIGSEGV"
    assert rep.results["k1"]["status"] == "ok" and rep.header["complete"] is True


def test_a_worker_stuck_in_its_exit_is_stopped_and_its_results_kept(python: str) -> None:
    t = time.monotonic()
    rep = replay(_examples("ok", "ok"), "emu:exithang", timeout=1.0, python=python)
    assert time.monotonic() - t < 20  # the grace after the last call, not its 60 s
    assert {r["status"] for r in rep.results.values()} == {"ok"} and len(rep.results) == 2


def test_a_device_busy_after_a_crash_is_waited_for(python: str) -> None:
    rep = replay(_examples("crash", "ok"), "emu:busy", timeout=1.0, python=python)
    assert rep.results["k0"]["status"] == "crashed" and rep.results["k1"]["status"] == "ok"


def test_a_backend_that_does_not_load_is_one_clear_error(python: str) -> None:
    with pytest.raises(UserError) as e:
        replay(_examples("ok"), "emu:broken", timeout=1.0, python=python)
    msg = str(e.value)
    assert "the backend did not load (exit 3)" in msg and "no backend here" in msg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the file is empty"),
        ("not json\n", "1: expected a JSON object"),
        ('{"kind": "call"}\n', "1: expected the replay header"),
        (
            '{"kind": "replay"}\n{"kind": "call", "key": "k", "status": "fine"}\n',
            "2: expected a call result (kind 'call', a key, status one of ok, failed",
        ),
    ],
)
def test_a_file_that_is_not_a_replay_is_one_clear_error(
    tmp_path: Path, text: str, message: str
) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        read_replay(p)
    assert message in str(e.value) and str(p) in str(e.value)


def test_select_run_needs_the_op_map_for_a_replay(tmp_path: Path) -> None:
    from ootest.select.gather import Sources, Support, gather

    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"kind": "replay"}) + "\n")
    with pytest.raises(UserError) as e:
        gather([], Sources(replay=p), Support(), None)
    assert "pass --ops DB too" in str(e.value)
    assert os.path.exists(p)


def test_the_signature_of_a_call_and_of_a_hostile_one() -> None:
    from ootest.opmap.replay import signature_of

    call = (
        '{"args":[{"T":"float32","dev":true,"shape":[2]},{"T":"int64","dev":false,"shape":[1]},'
        '[{"T":"bfloat16","dev":true,"shape":[1]}]],"kwargs":{"dtype":{"dtype":"float16"}}}'
    )
    assert signature_of(call) == "bfloat16,float16,float32"  # the CPU tensor does not count
    # a lazy conj view is presumed apart: tiny crashed copying conj views of complex
    # tensors, and every plain complex copy after two such crashes was presumed to
    # crash (54 passing variants of test_unary_ufuncs left unknown)
    conj = '{"args":[{"T":"complex64","dev":true,"shape":[2],"conj":true}],"kwargs":{}}'
    plain = '{"args":[{"T":"complex64","dev":true,"shape":[2]}],"kwargs":{}}'
    assert signature_of(conj) == "complex64+conj" != signature_of(plain) == "complex64"
    assert signature_of('{"args": [' * 100_000) == "?"
    assert signature_of("[" * 100_000 + "]" * 100_000) == "?"


def test_a_missing_kernels_error_names_its_op() -> None:
    from ootest.device.replay_worker import _missing_kernel

    e = NotImplementedError(
        "Could not run 'aten::_index_put_impl_' with arguments from the 'PrivateUse1' "
        "backend. This could be because the operator doesn't exist for this backend"
    )
    assert _missing_kernel(e) == "aten::_index_put_impl_"
    assert _missing_kernel(RuntimeError(str(e))) is None  # not the dispatcher's
    assert _missing_kernel(NotImplementedError("no such thing")) is None
