"""Selection rules and failure signatures: pure functions, no torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ootest.errors import UserError
from ootest.opmap.ingest import ingest_records
from ootest.record.signature import signature
from ootest.select.rules import Evidence, Result, decide
from ootest.select.writer import Placed, render, split_id


def _fail(msg: str, where: str = "x.py:1") -> dict[str, object]:
    return {"outcome": "failed", "message": f"E   {msg}", "where": where}


def test_one_bug_in_many_variants_is_one_signature() -> None:
    a = signature(_fail("RuntimeError: shape [3, 4] at 0x7f00 of 'a' failed after 12 tries"))
    b = signature(_fail("RuntimeError: shape [5, 6] at 0x7e11 of 'b' failed after 3 tries"))
    c = signature(_fail("RuntimeError: a different message"))
    assert a == b and a.code == b.code and a.code != c.code
    assert a.kind == "RuntimeError" and a.code.startswith("RuntimeError:")
    assert signature(_fail("Exception: x")).kind == "Exception"
    assert "PrivateUse1" in str(signature(_fail("Exception: emu (PrivateUse1)")))
    assert signature({"outcome": "crashed", "signal": "SIGSEGV"}).kind == "SIGSEGV"


def test_evidence_order_and_unknown_means_run_it() -> None:
    bad = Result("failed", "RuntimeError:1", "RuntimeError: x")
    mm = ("aten::mm",)
    assert decide(Evidence("v", ops=mm, ops_declared=True)).mode == "mandatory_success"
    assert decide(Evidence("v", ops=mm, ops_declared=True, missing_ops=mm)).reason == (
        "op_unsupported:aten::mm"
    )
    # the op set may differ per device: no skip from missing ops, it runs
    unsure = decide(Evidence("v", ops=("aten::mm",), missing_ops=("aten::mm",), ops_uncertain="x"))
    assert (unsure.mode, unsure.reason) == ("xfail", "no_evidence")
    assert decide(Evidence("v")).mode == "xfail"  # nothing known
    # broken on the CPU too: never the backend's fault, never mandatory
    up = decide(Evidence("v", ops=("aten::mm",), cpu=bad, observed=[bad]))
    assert (up.mode, up.reason) == ("xfail", "upstream_broken:RuntimeError:1")
    seen = decide(Evidence("v", ops=("aten::mm",), observed=[bad]))
    assert (seen.mode, seen.reason) == ("xfail_strict", "observed_fail:RuntimeError:1")
    crash = Result("crashed", "SIGSEGV:1", "SIGSEGV")
    assert decide(Evidence("v", cpu=bad, observed=[crash])).mode == "skip"
    f64 = ("float64",)
    assert decide(Evidence("v", dtypes=f64, ops=mm, missing_dtypes=f64)).reason == (
        "dtype_unsupported:float64"
    )


def test_output_is_compact_and_says_why() -> None:
    decisions = [
        decide(Evidence(f"test/t.py::T::test_a[dtype={d}]", ops=("aten::add",), ops_declared=True))
        for d in ("float32", "int64")
    ] + [
        decide(
            Evidence("test/t.py::T::test_b[dtype=float32]", ops=("aten::mm",), ops_declared=True)
        ),
        decide(
            Evidence(
                "test/t.py::T::test_b[dtype=float64]",
                dtypes=("float64",),
                ops=("aten::mm",),
                missing_dtypes=("float64",),
            )
        ),
    ]
    placed = [Placed(d, *split_id(d.variant_id)) for d in decisions]
    text = render(placed, {"test/t.py": "${TORCH_ROOT}/test/t.py"}, ["hdr"])
    # what no entry names is undecided: it runs (Note [Undecided variants run])
    assert "unlisted_test_mode: xfail" in text
    assert "            - T::test_a\n" in text  # all its variants share a decision: named once
    assert '"T::test_b[dtype=float64]"' in text and "dtype_unsupported:float64" in text
    assert text == render(list(reversed(placed)), {"test/t.py": "${TORCH_ROOT}/test/t.py"}, ["hdr"])
    import yaml

    data = yaml.safe_load(text)
    (f,) = data["test_suite_config"]["files"]
    assert f["path"] == "${TORCH_ROOT}/test/t.py"
    assert [t["mode"] for t in f["tests"]] == ["mandatory_success", "skip"]


def test_an_op_declared_for_some_dtypes_only_skips_the_other_dtypes(tmp_path: Path) -> None:
    from ootest.opmap.support import from_emu, from_file
    from ootest.select.gather import _op_dtypes

    listed = tmp_path / "ops.yaml"
    listed.write_text("ops:\n  - {name: mul, dtypes: [float32, bfloat16]}\n  - add\n")
    rules = from_file(listed).dtype_rules()
    assert [(n, sorted(d)) for n, _, d in rules] == [("mul", ["bfloat16", "float32"])]
    # an overload of the packet is covered by the rule; other ops are not
    assert _op_dtypes(("aten::add.Tensor", "aten::mul.Tensor"), ("int64",), rules) == (
        ("int64",),
        "mul is declared for bfloat16, float32 only",
    )
    assert _op_dtypes(("aten::mul.Tensor",), ("float32",), rules) == ((), None)
    assert _op_dtypes(("aten::add.Tensor",), ("int64",), rules) == ((), None)
    d = decide(
        Evidence(
            "v",
            dtypes=("int64",),
            ops=("aten::mul.Tensor",),
            missing_dtypes=("int64",),
            dtype_rule="mul is declared for bfloat16, float32 only",
        )
    )
    assert (d.mode, d.reason) == ("skip", "dtype_unsupported:int64")
    assert "mul is declared for bfloat16, float32 only" in d.evidence[0]
    # emu's profiles carry theirs (faulty: mul on floating types only)
    faulty = {n: d for n, _, d in from_emu("emu:faulty").dtype_rules()}
    assert "int64" not in faulty["mul"] and "float32" in faulty["mul"]
    listed.write_text("ops:\n  - {name: mul, dtypes: float32}\n")
    with pytest.raises(UserError, match=r"ops\[0\]\.dtypes: expected a list of dtype names"):
        from_file(listed)


_PROV = {
    "kind": "provenance", "torch_version": "2", "torch_git": "a", "device": "emu",
    "profile": "full", "ootest_version": "0", "time": 1.0,
}  # fmt: skip
PROMO = "t.py::T::test_matmul_int_promotion[dtype=float32]"
FINE = "t.py::T::test_mm[dtype=float32]"
WIDE = "t.py::T::test_sum[dtype=float32]"
CALLS = {
    PROMO: {"aten::fill_.Scalar": ["int64"], "aten::mm": ["int64"]},
    FINE: {"aten::mm": ["float32"], "aten::sum": ["float32"]},
    WIDE: {"aten::sum": ["float32", "float64"]},
}


def _signed_index(db: Path, signed: bool = True) -> Path:
    """An op map of CALLS; ``signed``: with each call's dtypes (schema 2 captures)."""
    from ootest.opmap.store import OpStore

    recs: list[dict[str, object]] = [_PROV]
    for vid, sigs in CALLS.items():
        recs.append({"kind": "ops", "variant_id": vid, "ops": dict.fromkeys(sigs, 1)})
        if signed:
            recs += [
                {"kind": "dtypes", "variant_id": vid, "op": op, "dtypes": ds}
                for op, ds in sigs.items()
            ]
        recs.append({"kind": "stop", "variant_id": vid, "outcome": "passed"})
    with OpStore.open(db, create=True) as s:
        ingest_records(s, recs, source="test")
    return db


def test_recorded_call_dtypes_decide_instead_of_the_dtype_axis(tmp_path: Path) -> None:
    """An int64 mm inside a float32-parametrized test is skipped on emu:young
    (mm: floating types only), whatever its dtype axis says; a variant whose calls
    all saw declared dtypes stays mandatory; an index without signatures falls
    back to the axis (Note [Call dtypes])."""
    from ootest.device.emu import read_profile
    from ootest.opmap.support import from_emu
    from ootest.select.gather import Candidate, Sources, Support, gather

    ops = from_emu("emu:young")
    support = Support(
        ops.covers, frozenset(read_profile("young").dtypes), "emu:young", ops.dtype_rules()
    )
    cands = [Candidate(v, ("float32",)) for v in CALLS]

    def decisions(db: Path) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        out = {}
        for ev in gather(cands, Sources(ops=db), support, None):
            d = decide(ev)
            out[ev.variant_id] = (d.mode, d.reason, d.evidence)
        return out

    got = decisions(_signed_index(tmp_path / "signed.db"))
    assert got[PROMO][:2] == ("skip", "dtype_unsupported:int64")
    assert got[PROMO][2] == (
        "dtypes not declared: int64 (aten::mm saw int64: mm is declared for bfloat16, "
        "float16, float32 only)",
    )
    assert got[FINE][:2] == ("mandatory_success", "ops_supported")
    # an op without a rule of its own: the device's dtypes (young has no float64)
    assert got[WIDE][:2] == ("skip", "dtype_unsupported:float64")
    assert "aten::sum saw float64: the device does not declare it" in got[WIDE][2][0]
    # the same calls without signatures (an older index): the float32 axis stands in
    old = decisions(_signed_index(tmp_path / "old.db", signed=False))
    assert {v: m for v, (m, _, _) in old.items()} == dict.fromkeys(CALLS, "mandatory_success")
    # a test that ignores its dtype argument: float64 in its name, float32 on the
    # device (upstream's test_conj_self): the calls decide, not the axis
    cands = [Candidate(FINE, ("float64",))]
    assert decisions(tmp_path / "signed.db")[FINE][:2] == ("mandatory_success", "ops_supported")
    assert decisions(tmp_path / "old.db")[FINE][:2] == ("skip", "dtype_unsupported:float64")


def test_select_run_says_which_op_saw_which_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from ootest.cli.main import main

    monkeypatch.chdir(tmp_path)
    _signed_index(tmp_path / "ops.db")
    variants = tmp_path / "v.jsonl"
    variants.write_text(
        "".join(
            json.dumps(
                {"kind": "variant", "variant_id": v, "device_variant": True, "dtypes": ["float32"]}
            )
            + "\n"
            for v in CALLS
        )
    )
    assert main(["select", "run", "--variants", "v.jsonl", "--ops", "ops.db",
                 "--device", "emu:young", "--out", "s.yaml"]) == 0  # fmt: skip
    rows = {
        r["decision"]["variant_id"]: r
        for r in map(json.loads, (tmp_path / "s.evidence.jsonl").read_text().splitlines())
    }
    promo = rows[PROMO]
    assert promo["decision"]["reason"] == "dtype_unsupported:int64"
    assert promo["evidence"]["dtype_rule"] == (
        "aten::mm saw int64: mm is declared for bfloat16, float16, float32 only"
    )
    assert rows[FINE]["decision"]["mode"] == "mandatory_success"
    assert "aten::mm saw int64" in promo["decision"]["evidence"][0]
    assert "unlisted_test_mode: xfail" in (tmp_path / "s.yaml").read_text()  # undecided runs


def test_a_config_selected_for_a_device_runs_on_it_and_refine_says_when_nothing_matched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `select run --device emu:young` wrote no device:, so the documented next step
    # `ootest run suite.yaml` ran every test on no device (CPU variants), and refine
    # learned nothing from those results without saying so.
    from ootest.cli.main import main

    monkeypatch.chdir(tmp_path)
    vid = "test/t.py::TestX::test_a[dtype=float32]"
    rec = {"kind": "variant", "variant_id": vid, "device_variant": True}
    Path("v.jsonl").write_text(json.dumps(rec) + "\n")
    argv = ["select", "run", "--variants", "v.jsonl", "--device", "emu:young", "--out", "s.yaml"]
    assert main(argv) == 0
    text = Path("s.yaml").read_text()
    assert "test_suite_config:\n  device: emu:young\n  files:\n" in text
    cpu = {"kind": "result", "variant_id": vid[:-1] + ",device=cpu]", "outcome": "failed"}
    Path("r.jsonl").write_text(json.dumps(cpu) + "\n")
    capsys.readouterr()
    assert main(["select", "refine", "s.yaml", "--results", "r.jsonl"]) == 0
    err = capsys.readouterr().err
    assert "no result in r.jsonl is a variant of s.yaml" in err
    assert "  device: emu:young\n" in Path("s.yaml").read_text()  # kept on rewrite
    assert "torch" not in sys.modules


# ------------------------------------------------------------ replayed calls
CRASH = ("crashed", "aten::abs.out", "the process died: SIGSEGV")
HANG = ("timeout", "aten::sub.Tensor", "no return within 5 s")
FAIL = ("failed", "aten::add.Tensor", "RuntimeError: tile count exceeds the launch limit")
OFF = ("mismatch", "aten::exp", "result: greatest absolute difference 0.94, relative 0.001")


def test_replayed_calls_decide_between_declared_ops_and_mandatory() -> None:
    ops = ("aten::abs.out", "aten::add.Tensor", "aten::exp", "aten::sub.Tensor")

    def d(*faults: tuple[str, str, str], **kw: object) -> tuple[str, str]:
        got = decide(Evidence("v", ops=ops, replay=faults, ops_declared=True, **kw))  # type: ignore[arg-type]
        return got.mode, got.reason

    assert d() == ("mandatory_success", "ops_supported")
    assert d(CRASH, FAIL) == ("skip", "replay_crashed:aten::abs.out")  # worst first
    assert d(HANG) == ("skip", "replay_timeout:aten::sub.Tensor")
    assert d(FAIL, OFF) == ("skip", "replay_failed:aten::add.Tensor")
    assert d(OFF) == ("xfail", "replay_mismatch:aten::exp")
    # what is declared, and what was seen on the device, come first
    assert d(CRASH, missing_ops=("aten::exp",)) == ("skip", "op_unsupported:aten::exp")
    assert d(CRASH, missing_dtypes=("int64",))[1] == "dtype_unsupported:int64"
    bad = Result("failed", "RuntimeError:1", "RuntimeError: x")
    assert d(CRASH, observed=[bad]) == ("xfail_strict", "observed_fail:RuntimeError:1")
    # a misbehaving call is evidence even where the op set may differ per device,
    # but a crash or hang of a call it may not make there is no skip: it runs
    assert d(OFF, ops_uncertain="device branch") == ("xfail", "replay_mismatch:aten::exp")
    assert d(CRASH, ops_uncertain="device branch") == ("xfail", "replay_crashed:aten::abs.out")
    assert d(HANG, ops_uncertain="varies") == ("xfail", "replay_timeout:aten::sub.Tensor")
    assert d(FAIL, ops_uncertain="device branch") == ("xfail", "replay_failed:aten::add.Tensor")
    why = decide(
        Evidence("v", ops=ops, ops_declared=True, replay=(CRASH, HANG, FAIL, OFF))
    ).evidence
    assert why[0] == "replayed call of aten::abs.out crashed: the process died: SIGSEGV"
    assert why[-1] == "and 1 more replayed calls misbehaved"


def test_refine_promotes_a_replay_xfail_that_passes_k_times() -> None:
    from ootest.select.refine import refine_one

    good = [Result("passed", at=1.0), Result("passed", at=2.0)]
    fail_ev = Evidence("v", ops=("aten::add.Tensor",), replay=(FAIL,), observed=good)
    assert refine_one(fail_ev, None, 2, 0.05).decision.reason == "observed_pass:2"
    crash_ev = Evidence("v", ops=("aten::abs.out",), replay=(CRASH,), observed=good[:1])
    # one clean pass (an audit's) of a static skip: it runs until it has k
    assert refine_one(crash_ev, None, 2, 0.05).decision.reason == "passed_on_device:1/2"
    one = Evidence("v", ops=("aten::add.Tensor",), replay=(OFF,), observed=good[:1])
    assert refine_one(one, None, 2, 0.05).decision.reason == "replay_mismatch:aten::exp"
    # a failed call of a certain op set is a skip (it does not run): passes it got
    # anyway (an audit's) override it, and say what they override
    failed = refine_one(fail_ev, None, 2, 0.05).decision
    assert failed.evidence[-1].startswith("overrides replay_failed:aten::add.Tensor: replayed")
    once = Evidence("v", ops=("aten::add.Tensor",), replay=(FAIL,), observed=good[:1])
    assert refine_one(once, None, 2, 0.05).decision.reason == "passed_on_device:1/2"
    uncertain = Evidence("v", ops=("aten::add.Tensor",), ops_uncertain="device branch",
                         replay=(FAIL,), observed=good)  # fmt: skip
    # the xfail it is when its op set is uncertain ran: its passes promote it as such
    promoted = refine_one(uncertain, None, 2, 0.05).decision
    assert promoted.evidence == ("passed the last 2 runs on the device",)


def test_a_known_failure_is_skipped_and_a_mismatch_runs() -> None:
    """Note [A known failure is re-checked by the replay]: a call a variant certain
    to make it raised on the device where the CPU returned is a skip (the replay at
    the next refresh re-checks it, not every CI run); an uncertain op set runs it
    (xfail); other values than the CPU's run (xfail: the test's tolerance may take
    them), certain or not."""
    ops = ("aten::add.Tensor", "aten::exp")
    certain = decide(Evidence("v", ops=ops, ops_declared=True, replay=(FAIL,)))
    assert (certain.mode, certain.reason) == ("skip", "replay_failed:aten::add.Tensor")
    assert certain.evidence == (
        "replayed call of aten::add.Tensor failed: RuntimeError: tile count exceeds the "
        "launch limit",
        "not run: the replay re-checks it (select refresh --replay); it comes back when its "
        "calls replay as on the CPU",
    )
    for unsure in ({"ops_uncertain": "device branch"}, {"ops": None}):
        kw = {"ops": ops, **unsure}
        got = decide(Evidence("v", ops_declared=True, replay=(FAIL,), **kw))  # type: ignore[arg-type]
        assert (got.mode, got.reason) == ("xfail", "replay_failed:aten::add.Tensor")
        assert got.evidence[-1].startswith("runs all the same: ")
    for unsure in ({}, {"ops_uncertain": "device branch"}):
        got = decide(Evidence("v", ops=ops, ops_declared=True, replay=(OFF,), **unsure))  # type: ignore[arg-type]
        assert (got.mode, got.reason) == ("xfail", "replay_mismatch:aten::exp")


def test_replay_evidence_survives_the_sidecar(tmp_path: Path) -> None:
    from ootest.select.refine import evidence_row, read_sidecar

    ev = Evidence("v", ops=("aten::exp",), replay=(OFF,))
    plain = Evidence("w", ops=("aten::exp",))
    side = tmp_path / "s.evidence.jsonl"
    rows = [evidence_row(e, decide(e), "fp") for e in (ev, plain)]
    side.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "replay" not in rows[1]["evidence"]  # nothing said: nothing written
    back = read_sidecar(side)
    assert [e for e, _, _ in back] == [ev, plain]


def test_an_undeclared_op_whose_calls_replayed_ok_counts_as_supported(tmp_path: Path) -> None:
    """Upstream's test_movedim[int64] calls ``detach``, which emu:young does not
    declare and runs anyway (torch's device-independent kernel): its replayed call
    is the evidence. An undeclared op whose call failed stays missing."""
    from ootest.device.calls import example_key
    from ootest.opmap.replay import Replay, write_replay
    from ootest.opmap.store import OpStore
    from ootest.select.gather import Candidate, Sources, Support, gather

    call = '{"args":[{"T":"int64","dev":true,"shape":[2]}],"kwargs":{}}'
    ok_v, bad_v = "t.py::T::test_movedim[dtype=int64]", "t.py::T::test_cumsum[dtype=int64]"
    recs: list[dict[str, object]] = [_PROV]
    for vid, op in ((ok_v, "aten::detach"), (bad_v, "aten::cumsum")):
        recs += [
            {"kind": "ops", "variant_id": vid, "ops": {op: 1, "aten::add.Tensor": 1}},
            {"kind": "example", "variant_id": vid, "op": op, "call": call},
            {"kind": "stop", "variant_id": vid, "outcome": "passed"},
        ]
    db = tmp_path / "ops.db"
    with OpStore.open(db, create=True) as s:
        ingest_records(s, recs, source="test")
    rep = Replay({"kind": "replay", "device": "emu:young"})
    for op, status in (("aten::detach", "ok"), ("aten::cumsum", "failed")):
        key = example_key(op, call)
        rep.results[key] = {"kind": "call", "key": key, "op": op, "status": status}
    write_replay(tmp_path / "r.jsonl", rep)
    declared = {"aten::add.Tensor"}
    support = Support(lambda op: op in declared, None, "list")
    cands = [Candidate(ok_v), Candidate(bad_v)]

    def decisions(replay: Path | None) -> dict[str, tuple[str, str, tuple[str, ...]]]:
        evs = gather(cands, Sources(ops=db, replay=replay), support, None)
        return {e.variant_id: (decide(e).mode, decide(e).reason, decide(e).evidence) for e in evs}

    got = decisions(tmp_path / "r.jsonl")
    assert got[ok_v] == (
        "mandatory_success",
        "ops_supported",
        ("all 2 ops it calls are declared or replayed as on the CPU (aten::detach)",),
    )
    assert got[bad_v][:2] == ("skip", "op_unsupported:aten::cumsum")
    assert decisions(None)[ok_v][:2] == ("skip", "op_unsupported:aten::detach")  # no replay


def test_an_old_evidence_line_counts_as_declared_only_where_the_header_says_so(
    tmp_path: Path,
) -> None:
    """Issue 36: a sidecar line written before ``ops_declared`` was recorded was read
    as declared whatever the config was decided from; a config decided with
    nothing declared then kept ``ops_supported`` on every refine. The header's
    ``backend:`` line says how it was decided."""
    from ootest.select.pipeline import refine
    from ootest.select.refine import evidence_row
    from ootest.select.writer import Placed, render, split_id

    ev = Evidence("test/t.py::T::test_a", ops=("aten::add.Tensor",), ops_declared=True)
    d = decide(ev)
    assert d.reason == "ops_supported"
    row = evidence_row(ev, d, "fp")
    del row["evidence"]["ops_declared"]  # as an older ootest wrote it
    for backend, want in (("nothing declared", "no_evidence"), ("emu:young", "ops_supported")):
        cfg = tmp_path / backend.replace(" ", "_").replace(":", "_") / "suite.yaml"
        cfg.parent.mkdir()
        head = [f"backend: {backend}; ootest 0", "decisions: 1 mandatory_success"]
        text = render([Placed(d, *split_id(ev.variant_id))], {"test/t.py": "t.py"}, head)
        cfg.write_text(text)
        cfg.with_name("suite.evidence.jsonl").write_text(json.dumps(row) + "\n")
        (got,) = refine(cfg, []).decisions
        assert got.reason == want, (backend, got)
