"""Decisions only from the evidence the rules require (Note [Selection rules]):
what gather makes of declarations, the op map and the replay, and properties of
the rules over generated evidence. No torch."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ootest.opmap.ingest import ingest_records
from ootest.opmap.schema import STALE
from ootest.select.gather import Candidate, Sources, Support, gather
from ootest.select.rules import MODES, Evidence, Result, decide
from tests.conftest import ROOT
from tests.select.test_since import Work, built, cli, work  # noqa: F401  (fixtures)

_PROV = {
    "kind": "provenance", "torch_version": "2", "torch_git": "a", "device": "emu",
    "profile": "full", "ootest_version": "0", "time": 1.0,
}  # fmt: skip


def _call(dtype: str, n: int = 2, dev: bool = True) -> str:
    return json.dumps(
        {"args": [{"T": dtype, "dev": dev, "shape": [n]}], "kwargs": {}},
        sort_keys=True,
        separators=(",", ":"),
    )


#: per variant: (op, the dtype signature of a call, whether it was written down
#: as an example, its replay status: ok, raised (an error path), failed, crashed,
#: presumed (a crash presumed, not run), unusable, or None: no result in the replay)
Calls = dict[str, list[tuple[str, str, bool, str | None]]]


def _world(
    folder: Path, calls: Calls, *, signed: bool = True, branch: Iterable[str] = ()
) -> tuple[Path, Path]:
    """An op map of ``calls`` (with call dtypes when ``signed``) and a replay of its
    examples on the device."""
    from ootest.device.calls import example_key
    from ootest.opmap.replay import Replay, write_replay
    from ootest.opmap.store import OpStore

    folder.mkdir(parents=True, exist_ok=True)
    recs: list[dict[str, Any]] = [_PROV]
    rep = Replay({"kind": "replay", "device": "emu:young", "complete": True})
    n = 0  # a call of its own per item: one shape each
    for vid, made in calls.items():
        recs.append({"kind": "ops", "variant_id": vid, "ops": {op: 1 for op, *_ in made}})
        for op, sig, written, status in made:
            n += 1
            if signed:
                recs.append({"kind": "dtypes", "variant_id": vid, "op": op, "dtypes": [sig]})
            if not written:
                continue
            call = _call(sig, n)
            recs.append({"kind": "example", "variant_id": vid, "op": op, "call": call})
            key = example_key(op, call)
            if status is None:
                rep.header["complete"] = False
                continue
            res: dict[str, Any] = {"kind": "call", "key": key, "op": op, "status": status}
            if status in ("raised", "raised_other"):
                # raised: the device's kernel raised the CPU's exception, message
                # and all; raised_other: a missing kernel's "Could not run ...", a
                # NotImplementedError (a RuntimeError) with another message
                res.update(status="ok", error_path=True, cpu_error="RuntimeError: x",
                           error="RuntimeError", same_message=True,
                           detail="error path: raises on the device as on the CPU")  # fmt: skip
                if status == "raised_other":
                    res.update(same_message=False, error="NotImplementedError",
                               device_error="NotImplementedError: Could not run 'x'")  # fmt: skip
            elif status in ("failed", "crashed"):
                res["detail"] = "boom"
            elif status == "presumed":  # not run: earlier calls of it crashed
                res.update(status="crashed", presumed=True, detail="not run: 2 calls crashed")
            elif status == "no_kernel":  # tensors on both sides, a missing kernel's error
                res.update(status="unusable", error="NotImplementedError", no_kernel=op,
                           detail="tensors on the CPU and the device")  # fmt: skip
            rep.results[key] = res
        if vid in branch:
            recs.append({"kind": "device_branch", "variant_id": vid})
        recs.append({"kind": "stop", "variant_id": vid, "outcome": "passed"})
    db, out = folder / "ops.db", folder / "replay.jsonl"
    with OpStore.open(db, create=True) as s:
        ingest_records(s, recs, source="test")
    write_replay(out, rep)
    return db, out


YOUNG = frozenset({"float32", "int64", "bool"})


def _declared(*ops: str, dtypes: frozenset[str] | None = YOUNG) -> Support:
    return Support(lambda op: op in ops, dtypes, "list")


def _decide(
    folder: Path,
    calls: Calls,
    support: Support,
    *,
    replay: bool = True,
    axes: dict[str, tuple[str, ...]] | None = None,
    strict: Iterable[str] = (),
    **kw: Any,
) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    db, rep = _world(folder, calls, **kw)
    axes = axes or {}
    strict = set(strict)
    cands = [
        Candidate(v, axes.get(v, ()), checks_messages=v in strict) for v in sorted({*calls, *axes})
    ]
    out = {}
    for ev in gather(cands, Sources(ops=db, replay=rep if replay else None), support, None):
        d = decide(ev)
        out[ev.variant_id] = (d.mode, d.reason, d.evidence)
    return out


# ---------------------------------------------------------------- B.1 nothing declared
def test_nothing_declared_makes_nothing_mandatory(tmp_path: Path) -> None:
    """`select run --ops` with neither --supported nor --device decided every variant
    mandatory_success ("all N ops it calls are declared") under "backend: nothing
    declared". Without a support source the op evidence decides nothing: it runs."""
    calls: Calls = {"t.py::T::test_a": [("aten::add.Tensor", "float32", True, "ok")]}
    got = _decide(tmp_path, calls, Support(None, None, "nothing declared"), replay=False)
    mode, reason, why = got["t.py::T::test_a"]
    assert (mode, reason) == ("xfail", "no_evidence")
    assert why == ("calls 1 ops, but the backend declares none (nothing declared)",)
    # the same op map with the op declared: mandatory
    got = _decide(tmp_path / "d", calls, _declared("aten::add.Tensor"), replay=False)
    assert got["t.py::T::test_a"][:2] == ("mandatory_success", "ops_supported")


def test_select_run_without_a_support_source_decides_no_op_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ootest.cli.main import main

    monkeypatch.chdir(tmp_path)
    vid = "t.py::T::test_a[dtype=float32]"
    _world(tmp_path, {vid: [("aten::add.Tensor", "float32", True, "ok")]})
    rec = {"kind": "variant", "variant_id": vid, "device_variant": True, "dtypes": ["float32"]}
    Path("v.jsonl").write_text(json.dumps(rec) + "\n")
    argv = ["select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--out", "s.yaml"]
    assert main(argv) == 0
    assert "1 no_evidence" in capsys.readouterr().out
    (row,) = map(json.loads, Path("s.evidence.jsonl").read_text().splitlines())
    assert row["decision"]["mode"] == "xfail" and row["evidence"]["ops_declared"] is False
    assert "backend: nothing declared" in Path("s.yaml").read_text()


def test_an_upgrade_without_a_support_source_makes_nothing_mandatory(
    work: Work,  # noqa: F811  (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`select run --since` with --supported forgotten: the re-decided variants
    are not 'all N ops it calls are declared'."""
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "new.db",
                     "--config", "suite.yaml", "--ops", "ops.db", "--out", "new.yaml")  # fmt: skip
    assert rc == 0, err
    rows = [json.loads(x) for x in (work / "new.evidence.jsonl").read_text().splitlines()]
    # re-decided ones; a variant a person's entry holds keeps its line ("held")
    again = [r["decision"] for r in rows if r.get("changed") and not r.get("held")]
    assert again and not [d for d in again if d["mode"] == "mandatory_success"], again
    assert {d["reason"] for d in again} >= {"no_evidence"}


def test_a_new_replay_that_lifts_a_dtype_re_decides_its_variant(
    work: Work,  # noqa: F811  (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`select run --since --replay NEW` (only the backend changed): a variant whose
    undeclared dtype the new replay shows working is decided again."""
    from ootest.device.calls import example_key
    from ootest.opmap.replay import Replay, write_replay
    from ootest.opmap.store import OpStore

    f64 = "test/test_alpha.py::TestAlpha::test_double[dtype=float64]"
    before = {json.loads(x)["decision"]["variant_id"]: json.loads(x)
              for x in (work / "suite.evidence.jsonl").read_text().splitlines()}  # fmt: skip
    assert before[f64]["decision"]["reason"] == "dtype_unsupported:float64"
    recs: list[dict[str, Any]] = [
        {"kind": "provenance", "torch_version": "2.13.0", "device": "emu", "time": 7.0}
    ]
    # the same op set as the first capture (else the captures disagree: uncertain)
    recs.append({"kind": "ops", "variant_id": f64, "ops": {"aten::mul.Tensor": 1, "aten::sum": 1}})
    recs.append({"kind": "stop", "variant_id": f64, "outcome": "passed"})
    rep = Replay({"kind": "replay", "device": "emu:faulty", "complete": True})
    for op in ("aten::mul.Tensor", "aten::sum"):
        call = _call("float64")
        recs.append({"kind": "example", "variant_id": f64, "op": op, "call": call})
        key = example_key(op, call)
        rep.results[key] = {"kind": "call", "key": key, "op": op, "status": "ok"}
    with OpStore.open(work / "ops.db") as s:
        ingest_records(s, recs, source="more")
    write_replay(work / "r.jsonl", rep)
    since = ["select", "run", "--since", "old.db", "--memory", "old.db", "--config", "suite.yaml"]
    rc, _, err = cli(capsys, *since, "--device", "emu:faulty", "--supported", "sup.txt",
                     "--dtypes", "float32,float16", "--ops", "ops.db", "--replay", "r.jsonl",
                     "--out", "b.yaml")  # fmt: skip
    assert rc == 0, err
    assert "1 by the replay" in err, err
    rows = {json.loads(x)["decision"]["variant_id"]: json.loads(x)
            for x in (work / "b.evidence.jsonl").read_text().splitlines()}  # fmt: skip
    moved = rows[f64]
    assert moved["changed"] == ["replay"]
    assert moved["decision"]["mode"] == "mandatory_success", moved
    assert moved["evidence"]["replay_dtypes"] == ["float64"]


# ------------------------------------------------------- B.2, B.3 uncertain op sets
def test_an_uncertain_op_set_never_skips(tmp_path: Path) -> None:
    """A replayed crash and an undeclared dtype skip a variant certain to make that
    call; one that branches on the device runs (its replay reason, as xfail)."""
    calls: Calls = {
        "t.py::T::test_crash": [("aten::abs", "int64", True, "crashed")],
        "t.py::T::test_branch": [("aten::abs", "int64", True, "crashed")],
        "t.py::T::test_f64": [("aten::mul.Tensor", "float64", True, "failed")],
        "t.py::T::test_f64_branch": [("aten::mul.Tensor", "float64", True, "failed")],
    }
    got = _decide(
        tmp_path,
        calls,
        _declared("aten::abs", "aten::mul.Tensor"),
        branch={"t.py::T::test_branch", "t.py::T::test_f64_branch"},
    )
    assert got["t.py::T::test_crash"][:2] == ("skip", "replay_crashed:aten::abs")
    mode, reason, why = got["t.py::T::test_branch"]
    assert (mode, reason) == ("xfail", "replay_crashed:aten::abs")
    assert why[-1] == (
        "runs all the same: op set may differ per device: the test branches on the device type"
    )
    assert got["t.py::T::test_f64"][:2] == ("skip", "dtype_unsupported:float64")
    assert got["t.py::T::test_f64_branch"][:2] == ("xfail", "replay_failed:aten::mul.Tensor")


def test_the_dtype_axis_skips_only_with_a_certain_op_set(tmp_path: Path) -> None:
    """A float64 variant the op map does not hold (or holds as uncertain) is not a
    dtype skip: its test may never make a float64 tensor on the device."""
    vid, absent = "t.py::T::test_x[dtype=float64]", "t.py::T::test_y[dtype=float64]"
    calls: Calls = {vid: [("aten::add.Tensor", "float64", True, "ok")]}
    axes = {vid: ("float64",), absent: ("float64",)}
    support = _declared("aten::add.Tensor")
    got = _decide(tmp_path, calls, support, replay=False, signed=False, branch={vid}, axes=axes)
    for v in (vid, absent):
        assert got[v][:2] == ("xfail", "no_evidence"), v
    assert got[absent][2] == (
        "not in the op map; dtypes not declared: float64 (no skip without a certain op set)",
    )
    # the same variant, certain of its ops: the axis stands for the dtype its ops see
    got = _decide(tmp_path / "c", calls, support, replay=False, signed=False, axes=axes)
    assert got[vid][:2] == ("skip", "dtype_unsupported:float64")


# ------------------------------------------------------------- B.6 incomplete replay
def test_a_call_without_a_replay_result_lifts_nothing_and_skips_nothing(tmp_path: Path) -> None:
    """A stopped replay (``complete: false``): one ok call of an undeclared op no
    longer makes it supported when its other call has no result."""
    calls: Calls = {
        "t.py::T::test_half": [
            ("aten::detach", "float32", True, "ok"),
            ("aten::detach", "float32", True, None),  # the replay stopped before it
            ("aten::add.Tensor", "float32", True, None),
        ],
        "t.py::T::test_done": [("aten::detach", "int64", True, "ok")],
    }
    got = _decide(tmp_path, calls, _declared("aten::add.Tensor"))
    assert got["t.py::T::test_half"][:2] == ("skip", "op_unsupported:aten::detach")
    assert got["t.py::T::test_done"][:2] == ("mandatory_success", "ops_supported")
    # the declared op whose call has no result: unknown, not a fault: still mandatory
    calls = {"t.py::T::test_half": calls["t.py::T::test_half"][2:]}
    assert _decide(tmp_path / "b", calls, _declared("aten::add.Tensor"))["t.py::T::test_half"][
        :2
    ] == ("mandatory_success", "ops_supported")


def test_only_on_the_backends_own_name_is_no_skip(tmp_path: Path) -> None:
    """``@onlyOn("spyre")`` runs on the spyre backend: gather and the judge's
    gating list called the gate check without the device's name, which made it a
    false ``upstream_skip`` (issue 36)."""
    from ootest.select.judge import Case

    vid = "t.py::T::test_a"
    calls: Calls = {vid: [("aten::add.Tensor", "float32", True, "ok")]}
    db, _ = _world(tmp_path, calls)
    support = Support(lambda op: True, None, "list", name="spyre")
    (mine,) = gather(
        [Candidate(vid, (), "", ('@onlyOn("spyre")',))], Sources(ops=db), support, None
    )
    assert decide(mine).reason == "ops_supported"
    (other,) = gather(
        [Candidate(vid, (), "", ('@onlyOn("cuda")',))], Sources(ops=db), support, None
    )
    assert decide(other).reason == "upstream_skip"
    d = decide(mine)
    assert Case.of(mine, d, ('@onlyOn("spyre")',), "spyre").gating() == ()
    assert Case.of(mine, d, ('@onlyOn("cuda")',), "spyre").gating() == ('@onlyOn("cuda")',)


def test_a_presumed_crash_is_unknown_never_a_skip(tmp_path: Path) -> None:
    """Two empty-tensor ``sort`` calls crashed in the replay, so the rest of the
    op's float32 calls were presumed to crash and not run (``"presumed": true``):
    the variant whose own call crashed is a skip; the one whose larger call was
    only presumed runs, and is not mandatory either (issue 36)."""
    crashed, guessed = "t.py::T::test_sort_empty", "t.py::T::test_sort_large"
    calls: Calls = {
        crashed: [("aten::sort.stable", "float32", True, "crashed")],
        guessed: [
            ("aten::add.Tensor", "float32", True, "ok"),
            ("aten::sort.stable", "float32", True, "presumed"),
        ],
    }
    got = _decide(tmp_path, calls, _declared("aten::sort.stable", "aten::add.Tensor"))
    assert got[crashed][:2] == ("skip", "replay_crashed:aten::sort.stable")
    mode, reason, why = got[guessed]
    assert (mode, reason) == ("xfail", "no_evidence")
    assert why == (
        "calls 2 ops, none missing; replayed calls not run, presumed from others of the "
        "same op and dtypes: aten::sort.stable crashed",
    )


def test_a_call_no_example_was_written_for_proves_nothing(tmp_path: Path) -> None:
    """Each dtype signature the op map recorded for an op needs a replayed call
    before the op (or the dtype) counts as working."""
    calls: Calls = {
        "t.py::T::test_a": [
            ("aten::detach", "float32", True, "ok"),
            ("aten::detach", "float64", False, None),  # a call that could not be written
        ]
    }
    got = _decide(tmp_path, calls, _declared())
    assert got["t.py::T::test_a"][:2] == ("skip", "dtype_unsupported:float64")
    got = _decide(tmp_path / "x", calls, _declared(dtypes=None))
    assert got["t.py::T::test_a"][:2] == ("skip", "op_unsupported:aten::detach")


# -------------------------------------------------- A.1 A.2 A.3 evidence beats declarations
def test_an_undeclared_dtype_whose_calls_replayed_as_on_the_cpu_is_not_a_skip(
    tmp_path: Path,
) -> None:
    """--dtypes float32,int64,bool: error-path tests in float64 or int8 pass on the
    device; the replay ran their calls, so the undeclared dtype skips nothing."""
    calls: Calls = {
        # test_flipud_invalid[dtype=float64]: its float64 calls replayed as on the CPU
        "t.py::T::test_flipud_invalid[dtype=float64]": [
            ("aten::lift_fresh", "float64", True, "ok"),
            ("aten::flip", "float64", True, "raised"),
        ],
        # one float64 call failed: the undeclared dtype stands
        "t.py::T::test_bad[dtype=float64]": [
            ("aten::lift_fresh", "float64", True, "ok"),
            ("aten::flip", "float64", True, "failed"),
        ],
        # only the int8 calls decide about int8; float32 is declared
        "t.py::T::test_imag_noncomplex[dtype=int8]": [
            ("aten::lift_fresh", "int8", True, "ok"),
            ("aten::imag", "int8", True, "raised"),
            ("aten::add.Tensor", "float32", True, "failed"),
        ],
    }
    ops = ("aten::lift_fresh", "aten::flip", "aten::imag", "aten::add.Tensor")
    got = _decide(tmp_path, calls, _declared(*ops))
    mode, reason, why = got["t.py::T::test_flipud_invalid[dtype=float64]"]
    assert (mode, reason) == ("mandatory_success", "ops_supported")
    assert why == (
        "all 2 ops it calls are declared; dtypes not declared but every call in them "
        "replayed as on the CPU: float64; error path: raises on the device as on the CPU "
        "(aten::flip)",
    )
    assert got["t.py::T::test_bad[dtype=float64]"][:2] == ("skip", "dtype_unsupported:float64")
    # A.2: a declared dtype (float32) whose call failed in the replay: never mandatory
    # (a skip: the replay re-checks it)
    assert got["t.py::T::test_imag_noncomplex[dtype=int8]"][:2] == (
        "skip",
        "replay_failed:aten::add.Tensor",
    )
    # without the replay: the declaration decides, as before
    got = _decide(tmp_path / "n", calls, _declared(*ops), replay=False)
    assert got["t.py::T::test_flipud_invalid[dtype=float64]"][:2] == (
        "skip",
        "dtype_unsupported:float64",
    )


def test_the_dtype_axis_is_lifted_when_every_call_replayed_as_on_the_cpu(tmp_path: Path) -> None:
    """An op map without call dtypes: the axis stands for them, and the variant's
    every recorded call replayed as on the CPU lifts it (an error path included)."""
    ok_v, bad_v = "t.py::T::test_a[dtype=complex128]", "t.py::T::test_b[dtype=complex128]"
    calls: Calls = {
        ok_v: [("aten::view.dtype", "complex128", True, "raised")],
        bad_v: [("aten::view.dtype", "complex128", True, "ok"), ("aten::add", "x", True, None)],
    }
    axes = {ok_v: ("complex128",), bad_v: ("complex128",)}
    got = _decide(tmp_path, calls, _declared("aten::view.dtype", "aten::add"), signed=False,
                  axes=axes)  # fmt: skip
    assert got[ok_v][:2] == ("mandatory_success", "ops_supported")
    assert "error path: raises on the device as on the CPU (aten::view.dtype)" in got[ok_v][2][0]
    assert got[bad_v][:2] == ("skip", "dtype_unsupported:complex128")


def test_an_undeclared_op_whose_call_raised_alike_counts_as_working(tmp_path: Path) -> None:
    """An index_put the backend does not declare raises on the device the
    RuntimeError test_index_put_accumulate_empty expects, as on the CPU: its
    kernel is there and checks its inputs."""
    vid = "t.py::T::test_index_put_accumulate_empty"
    calls: Calls = {
        vid: [
            ("aten::uniform_", "float32", True, "ok"),
            ("aten::index_put", "float32", True, "raised"),
        ]
    }
    mode, reason, why = _decide(tmp_path, calls, _declared("aten::uniform_"))[vid]
    assert (mode, reason) == ("mandatory_success", "ops_supported")
    assert why == (
        "all 2 ops it calls are declared or replayed as on the CPU (aten::index_put); "
        "error path: raises on the device as on the CPU (aten::index_put)",
    )


def test_a_missing_kernels_error_path_lifts_no_op_to_supported(tmp_path: Path) -> None:
    """Issue 36: emu:young has no index_put kernel; its NotImplementedError is a
    RuntimeError, which test_index_put_accumulate_empty expects, so the test may
    pass, but the op is not shown to work: the variant runs (xfail), neither
    skipped nor mandatory, and the op is not listed as replayed as on the CPU."""
    vid = "t.py::T::test_index_put_accumulate_empty"
    calls: Calls = {
        vid: [
            ("aten::uniform_", "float32", True, "ok"),
            ("aten::index_put", "float32", True, "raised_other"),
        ]
    }
    mode, reason, why = _decide(tmp_path, calls, _declared("aten::uniform_"))[vid]
    assert (mode, reason) == ("xfail", "no_evidence")
    assert why == (
        "calls 2 ops, none missing; error path only: aten::index_put raised on the device "
        "another exception class than on the CPU (a missing kernel's?), which this test "
        "accepts; its support is not shown",
    )


def test_an_error_path_with_another_message_fails_a_test_that_matches_messages(
    tmp_path: Path,
) -> None:
    """test_boolean_assignment_value_mismatch: ``assertRaisesRegex(Exception, 'shape
    mismatch', ...)`` over ``index_put_``, which emu:young lacks: its "Could not run"
    is an Exception, not that message (failed on the device). test_flip_errors in a
    dtype: the same call, a test that does not match messages (passes).
    Note [Tests that match messages]"""
    regex, plain = "t.py::T::test_value_mismatch", "t.py::T::test_index_put_empty"
    made = [("aten::arange", "int64", True, "ok"), ("aten::index_put_", "int64", True,
            "raised_other")]  # fmt: skip
    calls: Calls = {regex: made, plain: made}
    got = _decide(tmp_path, calls, _declared("aten::arange"), strict=[regex])
    mode, reason, why = got[regex]
    assert (mode, reason) == ("skip", "op_unsupported:aten::index_put_")
    # the test that does not match messages passes with the missing kernel's error,
    # which shows nothing of index_put_'s support: it runs (issue 36)
    assert got[plain][:2] == ("xfail", "no_evidence")
    # a declared op: the test that matches messages fails there, never mandatory
    got = _decide(tmp_path / "d", calls, _declared("aten::arange", "aten::index_put_"),
                  strict=[regex])  # fmt: skip
    mode, reason, why = got[regex]
    assert (mode, reason) == ("skip", "replay_failed:aten::index_put_")
    assert "the test matches messages and the device's differs: NotImplementedError" in why[0]
    # the same message on both sides: alike for both
    same = {v: [("aten::index_put_", "int64", True, "raised")] for v in (regex, plain)}
    got = _decide(tmp_path / "s", same, _declared(), strict=[regex])
    assert got[regex][:2] == got[plain][:2] == ("mandatory_success", "ops_supported")


MESSAGES_FILE = """
from torch.testing._internal.common_utils import TestCase


def check_shape(case, f):
    with case.assertRaisesRegex(RuntimeError, "shape mismatch"):
        f()


class TestM(TestCase):
    def test_direct(self, device):
        self.assertRaisesRegex(RuntimeError, "dims", lambda: None)

    def test_helper(self, device):
        self._helper()

    def _helper(self):
        with self.assertWarnsRegex(UserWarning, "x"):
            pass

    def test_plain(self, device):
        self.assertRaises(RuntimeError, lambda: None)
"""


def test_the_memory_knows_which_tests_match_messages(tmp_path: Path) -> None:
    """Note [Tests that match messages]: ``refs`` holds the ``self.X`` a test and its
    helpers use; a check through a module-level helper's parameter is not seen."""
    from ootest.select.gather import from_memory
    from tests.select.suites import build_memory

    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_m.py").write_text(MESSAGES_FILE)
    names = ("test_direct", "test_helper", "test_plain")
    build_memory(tmp_path / "test", tmp_path / "m.db",
                 {"test/test_m.py": [("TestM", n, ()) for n in names]})  # fmt: skip
    got = {
        c.variant_id.rpartition("::")[2]: c.checks_messages for c in from_memory(tmp_path / "m.db")
    }
    assert got == {"test_direct": True, "test_helper": True, "test_plain": False}


def test_checks_messages_reads_the_compiled_test() -> None:
    import functools

    from ootest.record.messages import checks_messages

    class Case:
        def direct(self) -> None:
            self.assertRaisesRegex(RuntimeError, "x", lambda: None)  # type: ignore[attr-defined]

        def nested(self) -> None:
            def inner() -> None:
                self.assertWarnsRegex(UserWarning, "x")  # type: ignore[attr-defined]

            inner()

        def via_helper(self) -> None:
            self._helper()

        def _helper(self) -> None:
            self.assertExpectedRaisesInline(RuntimeError, lambda: None, "")  # type: ignore[attr-defined]

        def plain(self) -> None:
            self.assertRaises(RuntimeError, lambda: None)  # type: ignore[attr-defined]

    def deco(f: Any) -> Any:
        @functools.wraps(f)
        def wrapper(*a: Any) -> Any:
            return f(*a)

        return wrapper

    assert checks_messages(Case.direct) and checks_messages(deco(Case.direct))
    assert checks_messages(Case.nested)
    assert checks_messages(Case.via_helper, Case) and not checks_messages(Case.via_helper)
    assert not checks_messages(Case.plain, Case)
    assert not checks_messages(None) and not checks_messages(42)


def test_checks_messages_sees_a_caught_exception_read_and_pytest_match() -> None:
    """Issue 36: ``with self.assertRaises(E) as cm: ...; str(cm.exception)`` and
    ``pytest.raises(E, match=...)`` match messages too; a missing kernel's
    "Could not run ..." fails them."""
    from ootest.record.messages import checks_messages

    class Case:
        def caught(self) -> None:
            with self.assertRaises(RuntimeError) as cm:  # type: ignore[attr-defined]
                pass
            self.assertIn("shape", str(cm.exception))  # type: ignore[attr-defined]

        def caught_only(self) -> None:
            with self.assertRaises(RuntimeError):  # type: ignore[attr-defined]
                pass

    def with_match() -> None:
        with pytest.raises(RuntimeError, match="shape"):
            pass

    def excinfo_match() -> None:
        with pytest.raises(RuntimeError) as e:
            pass
        e.match("shape")

    def class_only() -> None:
        with pytest.raises(RuntimeError):
            pass

    assert checks_messages(Case.caught) and not checks_messages(Case.caught_only)
    assert checks_messages(with_match) and checks_messages(excinfo_match)
    assert not checks_messages(class_only)


# ------------------------------------------------------------ properties of the rules
_OPS = ("aten::mm", "aten::add.Tensor")
_FAULT = {
    "crashed": ("crashed", "aten::mm", "SIGSEGV"),
    "timeout": ("timeout", "aten::mm", "no return"),
    "failed": ("failed", "aten::add.Tensor", "RuntimeError: x"),
    "mismatch": ("mismatch", "aten::add.Tensor", "off"),
}


def _result(outcome: str) -> Result:
    return Result(outcome, f"{outcome}:1", outcome)


_outcomes = st.sampled_from(["passed", "failed", "crashed", "timeout", "xfailed", "skipped"])
evidence = st.builds(
    Evidence,
    variant_id=st.just("t.py::T::test_x[dtype=float64]"),
    dtypes=st.sampled_from([(), ("float64",)]),
    out_of_scope=st.sampled_from([None, "ops"]),
    upstream_skip=st.sampled_from([None, "@onlyCUDA: upstream runs it on other devices only"]),
    ops=st.sampled_from([None, (), _OPS[:1], _OPS]),
    # a stale op set (captured from other code, Note [Evidence of which code]) is
    # uncertain like any other: no skip, no mandatory on it
    ops_uncertain=st.sampled_from([None, "device branch", "partial", f"{STALE} (fp 1a2b)"]),
    missing_ops=st.sampled_from([(), _OPS[:1]]),
    missing_dtypes=st.sampled_from([(), ("float64",)]),
    cpu=st.none() | _outcomes.map(_result),
    reference=st.none() | _outcomes.map(_result),
    observed=st.lists(_outcomes.map(_result), max_size=2),
    replay=st.lists(st.sampled_from(sorted(_FAULT)), max_size=2, unique=True).map(
        lambda ks: tuple(_FAULT[k] for k in sorted(ks, key=list(_FAULT).index))
    ),
    replay_covered=st.sampled_from([(), _OPS[1:]]),
    ops_declared=st.booleans(),
    replay_dtypes=st.sampled_from([(), ("float64",)]),
    replay_raised=st.sampled_from([(), _OPS[1:]]),
    replay_presumed=st.sampled_from([(), ("aten::mm crashed",)]),
    replay_error_only=st.sampled_from([(), _OPS[1:]]),
)


def _certain(ev: Evidence) -> bool:
    return ev.ops is not None and ev.ops_uncertain is None


#: The facts docs/select.md's table of reasons names in its "requires" column.
FACTS = {
    "observed_crash": lambda ev: (
        bool(ev.observed) and ev.observed[-1].outcome in ("crashed", "timeout")
    ),
    "observed_failure": lambda ev: (
        bool(ev.observed) and ev.observed[-1].outcome in ("failed", "crashed", "timeout", "xfailed")
    ),
    "cpu_failure": lambda ev: ev.cpu is not None and ev.cpu.outcome != "passed",
    "reference_failure": lambda ev: (
        ev.reference is not None and ev.reference.outcome not in ("passed", "skipped")
    ),
    "reference_pass": lambda ev: ev.reference is not None and ev.reference.outcome == "passed",
    "out_of_scope": lambda ev: bool(ev.out_of_scope),
    "upstream_decorator": lambda ev: bool(ev.upstream_skip),
    "certain_ops": _certain,
    "device_ops": lambda ev: bool(ev.ops),
    "no_device_ops": lambda ev: ev.ops == (),
    "declared": lambda ev: ev.ops_declared,
    "missing_dtype": lambda ev: bool(ev.missing_dtypes),
    "missing_op": lambda ev: bool(ev.missing_ops),
    "replay_fault": lambda ev: bool(ev.replay),
    "replay_crash": lambda ev: bool(ev.replay) and ev.replay[0][0] in ("crashed", "timeout"),
    "replay_raise": lambda ev: (
        bool(ev.replay) and ev.replay[0][0] in ("crashed", "timeout", "failed")
    ),
}


def _skip_grade(ev: Evidence) -> bool:
    return (
        FACTS["observed_crash"](ev)
        or bool(ev.out_of_scope)
        or bool(ev.upstream_skip)
        or (_certain(ev) and bool(ev.missing_dtypes))
        or (_certain(ev) and ev.ops_declared and bool(ev.missing_ops))
        or (_certain(ev) and FACTS["replay_raise"](ev))
    )


@settings(max_examples=2000, deadline=None)
@given(evidence)
def test_no_decision_without_the_evidence_it_needs(ev: Evidence) -> None:
    """For every combination of uncertain, missing, declared, replayed evidence: no
    skip without a skip-grade fact (an uncertain op set is none), no
    mandatory_success without a support source and a certain op set (or no device
    op at all and a pass on the reference device)."""
    d = decide(ev)
    assert d.mode in MODES and d.reason
    if d.mode == "skip":
        assert _skip_grade(ev), (ev, d)
    if not _certain(ev):
        assert d.reason.split(":")[0] in (
            "observed_crashed", "observed_timeout", "upstream_broken", "observed_fail",
            "reference_fail", "out_of_scope", "upstream_skip", "no_evidence",
            "replay_failed", "replay_mismatch", "replay_crashed", "replay_timeout",
        ), (ev, d)  # fmt: skip
        assert d.mode != "skip" or d.reason.startswith(
            ("observed_", "out_of_scope", "upstream_skip")
        )
    if d.mode == "mandatory_success":
        assert _certain(ev)
        assert (ev.ops_declared and bool(ev.ops)) or (
            ev.ops == () and FACTS["reference_pass"](ev)
        ), (ev, d)
        assert not ev.replay and not ev.missing_dtypes and not ev.replay_presumed
        assert not ev.replay_error_only
        assert not (ev.ops_declared and ev.missing_ops)


def reason_table() -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    """docs/select.md's table of reasons: code -> (its modes, the facts it requires)."""
    text = (ROOT / "docs" / "select.md").read_text()
    table = text.split("## Reason codes", 1)[1].split("\n## ", 1)[0]
    out: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        modes = frozenset(m for m in re.findall(r"[a-z_]+", cells[1]) if m in MODES)
        facts = tuple(re.findall(r"`([a-z_]+)`", cells[2]))
        for code in re.findall(r"`([a-z_]+)(?::[^`]*)?`", cells[0]):
            out[code] = (modes, facts)
    return out


def test_each_reason_says_what_it_proves_and_what_it_does_not() -> None:
    """Issue 36: docs/select.md says, for every reason of its table, what the
    reason proves and what it does not."""
    text = (ROOT / "docs" / "select.md").read_text()
    part = text.split("### What each reason proves, and what it does not", 1)[1]
    part = part.split("\nThe facts:", 1)[0]
    said: dict[str, tuple[str, str]] = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for code in re.findall(r"`([a-z_]+)(?::[^`]*)?`", cells[0]):
                said[code] = (cells[1], cells[2])
    missing = set(reason_table()) - set(said)
    assert not missing, missing
    assert {"judge:skip", "judge:xfail"} <= {
        m for line in part.splitlines() for m in re.findall(r"`(judge:[a-z]+)`", line)
    }
    assert all(proves and not_ for proves, not_ in said.values())


def test_the_reason_table_names_every_reason_and_known_facts() -> None:
    table = reason_table()
    produced = {
        "observed_crashed", "observed_timeout", "upstream_broken", "observed_fail",
        "reference_fail", "out_of_scope", "upstream_skip", "dtype_unsupported",
        "op_unsupported", "replay_crashed", "replay_timeout", "replay_failed",
        "replay_mismatch", "ops_supported", "no_device_ops", "no_evidence",
    }  # fmt: skip
    assert produced <= set(table), produced - set(table)
    for code, (modes, facts) in table.items():
        assert modes, code
        assert set(facts) <= set(FACTS), (code, set(facts) - set(FACTS))
    assert table["dtype_unsupported"][1] == ("certain_ops", "missing_dtype")
    assert table["ops_supported"][1] == ("declared", "certain_ops", "device_ops")


@settings(max_examples=2000, deadline=None)
@given(evidence)
def test_the_rules_hold_to_the_table_of_reasons(ev: Evidence) -> None:
    """Each decision's reason has every fact docs/select.md says it requires, and
    one of the modes it gives."""
    d = decide(ev)
    modes, facts = reason_table_cached()[d.reason.split(":")[0]]
    assert d.mode in modes, (d, modes)
    for fact in facts:
        assert FACTS[fact](ev), (d.reason, fact, ev)


@settings(max_examples=300, deadline=None)
@given(evidence, st.data())
def test_evidence_lacking_a_required_fact_never_gives_the_reason(ev: Evidence, data: Any) -> None:
    """For each reason, evidence with one of its required facts taken away never
    gives that reason."""
    code, (_, facts) = data.draw(
        st.sampled_from(sorted((c, v) for c, v in reason_table_cached().items() if v[1]))
    )
    fact = data.draw(st.sampled_from(facts))
    _knock_out(ev, fact)
    assert not FACTS[fact](ev), fact
    assert decide(ev).reason.split(":")[0] != code, (code, fact, ev)


def _knock_out(ev: Evidence, fact: str) -> None:
    """Takes ``fact`` away from ``ev`` (in place), leaving the rest."""
    if fact in ("observed_crash", "observed_failure"):
        ev.observed = [r for r in ev.observed if r.outcome == "passed"]
    elif fact == "cpu_failure":
        ev.cpu = None
    elif fact == "reference_failure":
        ev.reference = Result("passed")
    elif fact == "reference_pass":
        ev.reference = None
    elif fact == "out_of_scope":
        ev.out_of_scope = None
    elif fact == "upstream_decorator":
        ev.upstream_skip = None
    elif fact == "certain_ops":
        ev.ops_uncertain = "device branch"
    elif fact == "device_ops":
        ev.ops = ()
    elif fact == "no_device_ops":
        ev.ops = _OPS
    elif fact == "declared":
        ev.ops_declared = False
    elif fact == "missing_dtype":
        ev.missing_dtypes = ()
    elif fact == "missing_op":
        ev.missing_ops = ()
    elif fact == "replay_fault":
        ev.replay = ()
    elif fact == "replay_crash":
        ev.replay = tuple(f for f in ev.replay if f[0] not in ("crashed", "timeout"))
    elif fact == "replay_raise":
        ev.replay = tuple(f for f in ev.replay if f[0] not in ("crashed", "timeout", "failed"))
    else:  # a fact the table names and this test does not know
        raise AssertionError(fact)


_TABLE: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}


def reason_table_cached() -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    if not _TABLE:
        _TABLE.update(reason_table())
    return _TABLE


# ------------------------------------------- lifted gates only with complete evidence
_STATUSES = ["ok", "raised", "failed", "mismatch", "crashed", "unusable", None]
_calls = st.tuples(
    st.sampled_from(["aten::detach", "aten::flip"]),
    st.sampled_from(["float32", "float64"]),
    st.booleans(),
    st.sampled_from(_STATUSES),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(_calls, min_size=1, max_size=4), st.booleans())
def test_a_gate_is_lifted_only_by_complete_replayed_evidence(
    made: list[tuple[str, str, bool, str | None]], signed: bool
) -> None:
    """An undeclared op or dtype is taken as supported only when every recorded call
    of it has a replay result, all as on the CPU (an error path counts)."""
    vid = "t.py::T::test_x[dtype=float64]"
    with tempfile.TemporaryDirectory() as tmp:
        db, rep = _world(Path(tmp), {vid: made}, signed=signed)
        (ev,) = gather(
            [Candidate(vid, ("float64",))],
            Sources(ops=db, replay=rep),
            _declared(dtypes=frozenset({"float32"})),
            None,
        )
    alike = ("ok", "raised")

    def works(calls: list[tuple[str, str, bool, str | None]]) -> bool:
        # every call written down has a result as on the CPU, and (with call
        # dtypes recorded) each signature has a call written down
        written = [c for c in calls if c[2]]
        if not written or any(c[3] not in alike for c in written):
            return False
        return not signed or {c[1] for c in calls} <= {c[1] for c in written}

    by_op: dict[str, list[tuple[str, str, bool, str | None]]] = {}
    for c in made:
        by_op.setdefault(c[0], []).append(c)
    for op in ev.replay_covered:
        assert works(by_op[op]), (op, made)
    for dtype in ev.replay_dtypes:
        if signed:
            assert all(works([c for c in cs if c[1] == dtype]) for cs in by_op.values()
                       if any(c[1] == dtype for c in cs)), (dtype, made)  # fmt: skip
        else:
            assert all(works(cs) for cs in by_op.values()), (dtype, made)
    if decide(ev).mode == "mandatory_success":
        assert all(works(cs) for cs in by_op.values()), made


def test_a_declared_op_a_cross_device_call_shows_without_a_kernel_is_not_mandatory(
    tmp_path: Path,
) -> None:
    """A hand list declares ``_index_put_impl_``, which the device lacks; the only
    call of it the op map wrote down indexes a device tensor with a CPU index
    (tensors on both sides: the CPU cannot judge it, ``unusable``), and the device
    raised "Could not run 'aten::_index_put_impl_' ...". No kernel ran, whatever
    the test expects: the declaration proves nothing, the variant runs
    (``no_evidence``), never mandatory; without that mark it stays mandatory."""
    vid = "t.py::T::test_index_put[dtype=float32]"
    op = "aten::_index_put_impl_"
    for status, want in (("no_kernel", ("xfail", "no_evidence")),
                         ("unusable", ("mandatory_success", "ops_supported"))):  # fmt: skip
        db, rep = _world(tmp_path / status, {vid: [(op, "float32", True, status)]})
        (ev,) = gather([Candidate(vid, ("float32",))], Sources(ops=db, replay=rep),
                       _declared(op), None)  # fmt: skip
        d = decide(ev)
        assert (d.mode, d.reason) == want, d
    assert ev.replay_no_kernel == ()
    db, rep = _world(tmp_path / "again", {vid: [(op, "float32", True, "no_kernel")]})
    (ev,) = gather([Candidate(vid, ("float32",))], Sources(ops=db, replay=rep), _declared(op), None)
    assert ev.replay_no_kernel == (op,)
    assert (
        "no kernel ran: aten::_index_put_impl_ raised a missing kernel's error"
        in (decide(ev).evidence[0])
    )


def test_an_evidence_row_is_what_asdict_makes_of_it() -> None:
    """refine.plain: asdict without its deep copies (a whole OpInfo file's 23,500 rows
    are written at every select step), the same values, the same types."""
    from dataclasses import asdict

    from ootest.select.refine import evidence_row, plain
    from ootest.select.rules import Decision, Evidence, Result

    seen = Result("failed", "RuntimeError:1a2b", "RuntimeError: boom", 12.5)
    ev = Evidence(
        "test/test_x.py::TestX::test_a[dtype=float32]", ("float32",), ops=("aten::add",),
        missing_ops=("aten::mul",), cpu=Result("passed"), observed=[seen, Result("passed")],
        replay=(("failed", "aten::mul", "NotImplementedError: no kernel"),),
        replay_dtypes=("float16",), ops_declared=True,
    )  # fmt: skip
    d = Decision(ev.variant_id, "skip", "replay_failed:aten::mul", ("a line", "another"))
    assert plain(ev) == asdict(ev) and plain(d) == asdict(d)
    assert type(plain(ev)["observed"]) is list and type(plain(ev)["dtypes"]) is tuple
    row = evidence_row(ev, d, "fp")
    assert row["evidence"]["observed"][0] == asdict(seen)
    assert "replay_covered" not in row["evidence"]


def test_a_sidecar_is_read_a_line_at_a_time_and_bad_bytes_are_one_error(tmp_path: Path) -> None:
    """refine.iter_sidecar: the lines as read_sidecar gives them, read as a stream
    (select review of 250,000 variants: 731 -> 203 MB); a file that is not UTF-8
    is one error naming it, no traceback."""
    from ootest.errors import UserError
    from ootest.select.refine import evidence_row, iter_sidecar, read_sidecar
    from ootest.select.rules import Decision, Evidence

    side = tmp_path / "suite.evidence.jsonl"
    rows = []
    for i in range(3):
        vid = f"test/test_x.py::TestX::test_{i}"
        row = evidence_row(Evidence(vid, ops=("aten::add",)), Decision(vid, "skip", "r"), "fp")
        rows.append(json.dumps(row, sort_keys=True))
    side.write_text("\n".join(rows) + "\n")
    streamed = iter_sidecar(side)
    assert next(streamed)[1].variant_id.endswith("test_0")
    assert [d.variant_id for _, d, _ in read_sidecar(side)] == [
        f"test/test_x.py::TestX::test_{i}" for i in range(3)
    ]
    side.write_bytes(rows[0].encode() + b"\n\xff\xfe\n")
    bad = r"suite\.evidence\.jsonl: expected the evidence file .* cannot read it"
    with pytest.raises(UserError, match=bad):
        read_sidecar(side)
