"""emu's declared faults (Note [emu faults]): the profile format (in process, no
torch) and each fault kind on the built device (subprocess tier)."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from ootest.device.emu import Fault, read_profile
from ootest.errors import DeviceError
from tests.conftest import ROOT, ootest, run


def _profile(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _error(path: Path) -> str:
    with pytest.raises(DeviceError) as e:
        read_profile(str(path))
    return str(e.value)


# ------------------------------------------------------------ profile format
def test_faulty_is_young_plus_faults() -> None:
    young, faulty = read_profile("young"), read_profile("faulty")
    assert faulty.ops == young.ops and faulty.dtypes == young.dtypes
    assert faulty.op_dtypes == {**young.op_dtypes, "mul": ["float32", "float16", "bfloat16"]}
    assert {op: f.kind for op, f in faulty.faults.items()} == {
        "exp": "wrong",
        "abs": "crash",
        "sub": "hang",
        "add": "error",
    }
    assert faulty.faults["exp"].rel_error == 1e-3
    assert faulty.faults["abs"].dtypes == ("int64",) and faulty.faults["abs"].signal == "SIGSEGV"
    assert faulty.faults["add"].min_numel == 200
    assert young.faults == {} and read_profile("full").faults == {}


def test_extends_merges_ops_op_dtypes_and_faults(tmp_path: Path) -> None:
    path = _profile(
        tmp_path,
        """\
        extends: faulty
        ops: [cumsum]
        op_dtypes: {mul: [float32]}
        faults:
          abs: {kind: crash, signal: SIGABRT}
          cumsum: {kind: wrong, rel_error: 0.5, dtypes: [float32], min_numel: 10}
        """,
    )
    p = read_profile(str(path))
    assert p.name == "p" and p.ops == [*read_profile("young").ops, "cumsum"]
    assert (
        p.op_dtypes["mul"] == ["float32"]
        and p.op_dtypes["mm"] == read_profile("young").op_dtypes["mm"]
    )
    assert p.faults["abs"] == Fault(kind="crash", signal="SIGABRT", origin=f"{path}:5:3")
    assert p.faults["cumsum"] == Fault(
        kind="wrong", rel_error=0.5, dtypes=("float32",), min_numel=10, origin=f"{path}:6:3"
    )
    assert p.faults["exp"].kind == "wrong"  # inherited


def test_unknown_fault_kind_is_a_clear_error(tmp_path: Path) -> None:
    path = _profile(tmp_path, "extends: young\nfaults:\n  exp: {kind: wrnog, rel_error: 1.0e-3}\n")
    assert _error(path) == (
        f"{path}:3:15: faults.exp.kind: unknown fault kind 'wrnog'; "
        "expected one of wrong, crash, hang, error"
    )


def test_every_bad_fault_entry_is_reported_with_its_place(tmp_path: Path) -> None:
    path = _profile(
        tmp_path,
        """\
        extends: young
        fault: {}
        faults:
          exp: {kind: wrong}
          abs:
            kind: crash
            signal: SIGKILL
            rel_error: 0.1
          sub: {kind: hang, dtypes: [float8], min_numel: -1}
          add: error
          neg: {rel_error: 2}
          div: {kind: wrong, rel_error: 2}
        """,
    )
    assert _error(path).splitlines() == [
        f"{path}:2:1: fault: unknown key 'fault'; "
        "expected one of description, extends, dtypes, ops, op_dtypes, faults",
        f"{path}:4:8: faults.exp: missing 'rel_error:'; a 'wrong' fault needs the relative "
        "error of its results, e.g. rel_error: 1.0e-3",
        f"{path}:7:13: faults.abs.signal: expected one of SIGSEGV, SIGABRT, found 'SIGKILL'",
        f"{path}:8:5: faults.abs.rel_error: unknown key 'rel_error' for a 'crash' fault; "
        "expected one of kind, dtypes, min_numel, noncontiguous, after_calls, signal",
        f"{path}:9:30: faults.sub.dtypes[0]: unknown dtype 'float8'; expected one of "
        "float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64, bool, "
        "complex32, complex64, complex128, uint16, uint32, uint64, quint8, qint8, qint32, "
        "quint4x2, quint2x4",
        f"{path}:9:50: faults.sub.min_numel: expected an integer >= 0, found -1",
        f"{path}:10:8: faults.add: expected a mapping with 'kind:' "
        "(wrong, crash, hang, error), found a string ('error')",
        f"{path}:11:8: faults.neg: missing 'kind:'; expected one of wrong, crash, hang, error",
        f"{path}:12:33: faults.div.rel_error: expected a number in (0, 1], found 2",
    ]


def test_faults_must_be_a_mapping(tmp_path: Path) -> None:
    path = _profile(tmp_path, "extends: young\nfaults: [exp]\n")
    assert _error(path) == (
        f"{path}:2:9: faults: expected a mapping of op name to fault, found a list"
    )


def test_extends_errors_say_where(tmp_path: Path) -> None:
    path = _profile(tmp_path, "extends: yung\n")
    assert _error(path) == (
        f"{path}:1:10: extends: unknown profile 'yung'; expected one of faulty, full, subtle, "
        "young or a path to a profile YAML file (relative to this one)"
    )
    a = _profile(tmp_path, "extends: b.yaml\n", "a.yaml")
    _profile(tmp_path, "extends: a.yaml\n", "b.yaml")
    assert _error(a) == (
        f"{tmp_path / 'b.yaml'}:1:10: extends: profiles extend each other in a cycle "
        "(a.yaml -> b.yaml -> a.yaml); remove one 'extends:'"
    )


# ------------------------------------------------------- the device (subprocess)
def _child(code: str, timeout: int = 300) -> tuple[int, str, str]:
    r = run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_fault_checks_on_the_device() -> None:
    r = run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "tests/device/emu_fault_checks.py"),
            "--ootest-device",
            "emu:faulty",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
        ]
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith(("8 passed in", "8 passed, ")), summary


def test_crash_kills_the_process_with_sigsegv() -> None:
    rc, out, err = _child(
        """\
        import torch
        from ootest.device import emu
        emu.load("faulty")
        print("float abs", torch.abs(torch.tensor([-1.0], device="emu")).cpu().tolist(), flush=True)
        torch.abs(torch.tensor([-1, 2], device="emu"))
        print("survived")
        """
    )
    assert rc == -signal.SIGSEGV, (rc, err[-2000:])
    assert "float abs [1.0]" in out and "survived" not in out
    assert "emu: device fault in aten::abs.out (profile 'faulty'): segmentation fault" in err


def test_crash_signal_sigabrt(tmp_path: Path) -> None:
    path = _profile(tmp_path, "extends: faulty\nfaults:\n  neg: {kind: crash, signal: SIGABRT}\n")
    rc, out, err = _child(
        f"""\
        import faulthandler, torch
        from ootest.device import emu
        faulthandler.enable()
        emu.load({str(path)!r})
        torch.neg(torch.ones(2, device="emu"))
        print("survived")
        """
    )
    assert rc == -signal.SIGABRT, (rc, err[-2000:])
    assert "survived" not in out and "Fatal Python error: Aborted" in err


def test_hang_blocks_in_the_kernel_until_a_timeout_ends_it() -> None:
    rc, out, err = _child(
        """\
        import faulthandler, threading, torch
        from ootest.device import emu
        emu.load("faulty")
        t = threading.Thread(target=lambda: torch.ones(2, device="emu") - 1, daemon=True)
        t.start()
        t.join(1.0)  # the main thread runs on: the hanging kernel released the GIL
        print("thread hung" if t.is_alive() else "thread returned", flush=True)
        faulthandler.dump_traceback_later(1, exit=True)  # the runner's per-test timeout
        torch.ones(2, device="emu") - torch.ones(2, device="emu")
        print("main returned")
        """,
        timeout=120,
    )
    assert "thread hung" in out and "main returned" not in out, (out, err[-2000:])
    assert rc == 1 and "Timeout (0:00:01)!" in err
    assert "emu: aten::sub.Tensor hangs on the device (profile 'faulty')" in err


def test_fault_on_an_op_the_profile_does_not_enable(tmp_path: Path) -> None:
    path = _profile(tmp_path, "extends: young\nfaults:\n  cumsum: {kind: crash}\n")
    rc, _, err = _child(
        f"""\
        from ootest.device import emu
        from ootest.errors import DeviceError
        try:
            emu.load({str(path)!r})
        except DeviceError as e:
            raise SystemExit(str(e))
        """
    )
    assert rc == 1
    assert err.strip() == (
        f"{path}:3:3: faults.cumsum: no op enabled by profile 'p' matches 'cumsum'; "
        "a fault applies to an enabled op: add it to 'ops:' or remove the fault"
    )


@pytest.mark.slow  # minutes: the whole example suite on emu
def test_example_suite_on_faulty_shows_each_fault(tmp_path: Path) -> None:
    res = tmp_path / "r.jsonl"
    r = ootest(
        "run", "examples/emu_young.yaml", "--device", "emu:faulty", "--results", str(res),
        "--timeout", "10", "-q",
    )  # fmt: skip
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    recs = [json.loads(x) for x in res.read_text().splitlines()]
    by = {
        str(x["variant_id"]).rpartition("::")[2]: x
        for x in recs
        if x["kind"] == "result" and "TestOpConsistency" in x["variant_id"]
    }
    got = {
        v: (x["outcome"], (str(x["message"] or "").splitlines() or [""])[0]) for v, x in by.items()
    }
    tile = (
        "Exception: emu (PrivateUse1) profile 'faulty': device error in aten::add.Tensor on "
        "250 elements: tile count exceeds the launch limit (TILE_OVERFLOW)"
    )
    for variant, (outcome, first_line) in {
        "test_matches_cpu[op=exp,dtype=float32]": (
            "failed",
            "Exception: Tensor-likes are not close!",
        ),
        "test_matches_cpu[op=exp,dtype=int64]": (
            "failed",
            "Exception: Tensor-likes are not close!",
        ),
        "test_matches_cpu[op=abs,dtype=int64]": ("crashed", "process died of SIGSEGV"),
        "test_matches_cpu[op=abs,dtype=float32]": ("passed", ""),
        "test_matches_cpu[op=sub,dtype=float32]": (
            "timeout",
            "timed out after 10.0 s (per-test timeout); process killed",
        ),
        "test_matches_cpu[op=sub,dtype=int64]": ("passed", ""),
        "test_matches_cpu[op=add,dtype=float32]": ("failed", tile),
        "test_matches_cpu[op=add,dtype=int64]": ("failed", tile),
        "test_matches_cpu[op=mul,dtype=int64]": (
            "failed",
            "Exception: emu (PrivateUse1) profile 'faulty': aten::mul.Tensor does not support "
            "dtype Long (supported: Half, Float, BFloat16)",
        ),
        "test_matches_cpu[op=mul,dtype=float32]": ("passed", ""),
    }.items():
        assert got[variant] == (outcome, first_line), (variant, got[variant])
    assert "Greatest relative difference: 0.0010" in str(
        by["test_matches_cpu[op=exp,dtype=float32]"]["message"]
    )
    # the basics' add (12 elements) stays below add's min_numel and passes
    results = {str(x["variant_id"]): x["outcome"] for x in recs if x["kind"] == "result"}
    basics = "examples/suite/test_tensor_basics.py::TestTensorBasics::"
    assert results[basics + "test_add_matches_cpu[dtype=int64]"] == "passed"
    assert results[basics + "test_add_matches_cpu[dtype=float32]"] == "passed"


# ------------------------------------------- faults one call does not show
def test_context_keys_are_read_and_checked(tmp_path: Path) -> None:
    subtle = read_profile("subtle")
    assert subtle.faults["mm"] == Fault(
        "wrong", rel_error=1e-2, noncontiguous=True, origin=subtle.faults["mm"].origin
    )
    assert subtle.faults["exp"].after_calls == 2
    bad = _profile(
        tmp_path,
        """\
        extends: young
        faults:
          mm: {kind: wrong, rel_error: 0.01, noncontiguous: 1}
          exp: {kind: error, after_calls: -1}
        """,
    )
    err = _error(bad)
    assert "p.yaml:3:53: faults.mm.noncontiguous: expected true or false, found 1" in err
    assert "p.yaml:4:35: faults.exp.after_calls: expected an integer >= 0, found -1" in err


def test_context_faults_fire_only_in_their_context() -> None:
    rc, out, err = _child(
        """\
        import torch
        from ootest.device import emu

        emu.load("subtle")
        a, b = torch.randn(3, 4), torch.randn(5, 4)
        want = a @ b.t()
        got = (a.to("emu") @ b.to("emu").t()).cpu()  # a transposed operand
        print("noncontiguous", round(((got - want).abs() / want.abs()).max().item(), 3))
        got = (a.to("emu") @ b.t().contiguous().to("emu")).cpu()
        print("contiguous", round(((got - want).abs() / want.abs()).max().item(), 3))
        x = torch.rand(4) + 0.5
        for i in range(4):
            rel = (torch.exp(x.to("emu")).cpu() / torch.exp(x) - 1).abs().max().item()
            print("exp", i, round(rel, 3))
        """
    )
    assert rc == 0, err
    assert out.splitlines() == [
        "noncontiguous 0.01",
        "contiguous 0.0",
        "exp 0 0.0",
        "exp 1 0.0",
        "exp 2 0.01",
        "exp 3 0.01",
    ]
