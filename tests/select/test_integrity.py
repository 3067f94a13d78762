"""Selection integrity (issue 29): what the device showed outranks what was
predicted, history survives an upgrade, numbers are proposed not absorbed, and
nothing undecided is skipped. No torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.opmap.ingest import ingest_records
from ootest.select.refine import refine_one
from ootest.select.rules import Evidence, Result

PASS1, PASS2 = Result("passed", at=1.0), Result("passed", at=2.0)


def _vrec(vid: str, dtypes: tuple[str, ...] = ()) -> str:
    rec = {"kind": "variant", "variant_id": vid, "device_variant": True, "dtypes": list(dtypes)}
    return json.dumps(rec) + "\n"


def _result(vid: str, outcome: str, at: float, **kw: object) -> str:
    return json.dumps({"kind": "result", "variant_id": vid, "outcome": outcome, "time": at, **kw})


def _rows(side: Path) -> dict[str, dict[str, object]]:
    out = {}
    for line in side.read_text().splitlines():
        row = json.loads(line)
        out[row["evidence"]["variant_id"]] = row
    return out


def _certain_ops(vids: list[str]) -> None:
    """An op map in ./ops.db certain that each of ``vids`` calls add only: a dtype
    the backend does not declare skips only with a certain op set."""
    from ootest.opmap.store import OpStore

    recs: list[dict[str, object]] = [
        {"kind": "provenance", "torch_version": "2", "torch_git": "a", "device": "emu",
         "profile": "full", "ootest_version": "0", "time": 1.0},
    ]  # fmt: skip
    for vid in vids:
        recs += [
            {"kind": "ops", "variant_id": vid, "ops": {"aten::add.Tensor": 1}},
            {"kind": "stop", "variant_id": vid, "outcome": "passed"},
        ]
    with OpStore.open(Path("ops.db"), create=True) as store:
        ingest_records(store, recs, source="test")


# ------------------------------------------------ item 8: passes override static skips
@pytest.mark.parametrize(
    "ev",
    [
        Evidence("v", ops=("aten::mm",), missing_ops=("aten::mm",), ops_declared=True),
        Evidence(
            "v",
            ops=("aten::mm",),
            dtypes=("float64",),
            missing_dtypes=("float64",),
            ops_declared=True,
        ),
        Evidence("v", upstream_skip="@onlyCUDA: upstream runs it on cuda only"),
        Evidence("v", reference=Result("failed", "RuntimeError:1", "x")),
    ],
)
def test_clean_passes_on_the_device_override_a_static_decision(ev: Evidence) -> None:
    # before: refine promoted no_evidence and replay_* only; a false skip the audit
    # found could never be corrected
    ev.observed = [PASS1]
    one = refine_one(ev, None, 2, 0.05).decision
    if one.reason != "reference_fail:RuntimeError:1":  # an xfail runs already
        assert (one.mode, one.reason) == ("xfail", "passed_on_device:1/2")
    ev.observed = [PASS1, PASS2]
    two = refine_one(ev, None, 2, 0.05).decision
    assert (two.mode, two.reason, two.source) == ("mandatory_success", "observed_pass:2", "refine")
    assert two.evidence[0] == "passed the last 2 runs on the device"
    assert two.evidence[1].startswith("overrides ")


def test_scope_and_a_failing_cpu_reference_are_not_overridden_by_passes() -> None:
    scoped = Evidence("v", out_of_scope="compile", observed=[PASS1, PASS2])
    assert refine_one(scoped, None, 2, 0.05).decision.reason == "out_of_scope:compile"
    cpu = Result("failed", "RuntimeError:1", "x")
    broken = Evidence("v", ops=("aten::mm",), cpu=cpu, observed=[PASS1, PASS2])
    assert refine_one(broken, None, 2, 0.05).decision.reason == "upstream_broken:RuntimeError:1"
    failed_last = Evidence("v", missing_ops=("aten::mm",), ops=("aten::mm",),
                           observed=[PASS1, Result("failed", "E:1", "E", 3.0)])  # fmt: skip
    assert refine_one(failed_last, None, 2, 0.05).decision.reason == "observed_fail:E:1"


def test_an_audited_pass_re_decides_a_skip_through_refine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    vid = "test/t.py::T::test_a[dtype=float64]"
    Path("v.jsonl").write_text(_vrec(vid, ("float64",)))
    Path("sup.txt").write_text("add\n")
    _certain_ops([vid])
    assert main(["select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--supported",
                 "sup.txt", "--dtypes", "float32", "--out", "s.yaml"]) == 0  # fmt: skip
    assert _rows(Path("s.evidence.jsonl"))[vid]["decision"]["reason"] == (  # type: ignore[index]
        "dtype_unsupported:float64"
    )
    Path("audit.jsonl").write_text(_result(vid, "passed", 10.0) + "\n")
    assert main(["select", "refine", "s.yaml", "--results", "audit.jsonl"]) == 0
    d = _rows(Path("s.evidence.jsonl"))[vid]["decision"]
    assert (d["mode"], d["reason"]) == ("xfail", "passed_on_device:1/2")  # type: ignore[index]
    Path("run.jsonl").write_text(_result(vid, "xpassed", 20.0) + "\n")
    assert main(["select", "refine", "s.yaml", "--results", "run.jsonl"]) == 0
    d = _rows(Path("s.evidence.jsonl"))[vid]["decision"]
    assert (d["mode"], d["reason"]) == ("mandatory_success", "observed_pass:2")  # type: ignore[index]
    assert "overrides dtype_unsupported:float64" in d["evidence"][1]  # type: ignore[index]
    assert "torch" not in sys.modules


# ------------------------------------------------ item 10: precision is proposed
def _close(abs_diff: float, rel: float) -> str:
    return (
        "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 1 / 4 (25.0%)\n"
        f"Greatest absolute difference: {abs_diff} at index (0,) (up to 1e-05 allowed)\n"
        f"Greatest relative difference: {rel} at index (0,) (up to 1.3e-06 allowed)"
    )


def _mismatch(
    vid: str, dtype: str, abs_diff: float, rel: float
) -> tuple[Evidence, dict[str, object]]:
    rec = {"outcome": "failed", "message": _close(abs_diff, rel), "where": "x.py:1"}
    from ootest.record.signature import signature

    sig = signature(rec)
    ev = Evidence(vid, dtypes=(dtype,), ops=("aten::exp",),
                  observed=[Result("failed", sig.code, str(sig), 1.0)])  # fmt: skip
    return ev, rec


def test_a_float32_kernel_off_by_a_tenth_of_a_percent_stays_a_failure() -> None:
    # before: within --max-rtol 0.05 it became mandatory_success with 2x the error,
    # hiding emu:faulty's deliberately wrong exp
    ev, rec = _mismatch("v[dtype=float32]", "float32", 0.0027, 0.001)
    d = refine_one(ev, rec, 2).decision
    assert (d.mode, d.reason.split(":")[0]) == ("xfail_strict", "observed_fail")
    # the same error in bfloat16 is within what the dtype carries: a proposal
    ev, rec = _mismatch("v[dtype=bfloat16]", "bfloat16", 0.0027, 0.001)
    assert refine_one(ev, rec, 2).decision.reason == "precision_proposal:bfloat16"
    # an explicit --max-rtol is one bound for every dtype
    ev, rec = _mismatch("v[dtype=float32]", "float32", 0.0027, 0.001)
    assert refine_one(ev, rec, 2, 0.05).decision.reason == "precision_proposal:float32"


def test_a_precision_proposal_keeps_torchs_atol_whatever_the_absolute_error() -> None:
    """Issue 36: the proposed atol was 2x the greatest absolute difference, with
    no bound: values of 1e6 off by 10 (rel 1e-5, within float32's bound) proposed
    atol=20 for every comparison of the test. The relative bound covers every
    element; the atol stays torch's."""
    ev, rec = _mismatch("v[dtype=float32]", "float32", 10.0, 1e-5)
    r = refine_one(ev, rec, 2)
    assert r.decision.reason == "precision_proposal:float32"
    assert r.precision is not None and (r.precision.atol, r.precision.rtol) == (1e-5, 2e-5)


def test_a_precision_edit_is_a_proposal_confirmed_by_a_run_never_a_promotion() -> None:
    ev, rec = _mismatch("v[dtype=float32]", "float32", 2e-5, 4e-5)
    r = refine_one(ev, rec, 2)
    assert (r.decision.mode, r.decision.reason) == ("xfail", "precision_proposal:float32")
    assert r.decision.evidence[0].startswith("numerical mismatch on the device: greatest abs ")
    assert r.decision.evidence[1] == "proposed precision float32: atol=1e-05, rtol=8e-05"
    assert r.precision is not None and r.precision.rtol == pytest.approx(8e-5)
    # two runs pass at the proposed tolerance: confirmed, still a proposal
    ev.observed += [PASS1.__class__("xpassed", at=2.0), PASS1.__class__("xpassed", at=3.0)]
    again = refine_one(ev, None, 2, None, r.decision)
    assert (again.decision.mode, again.decision.reason) == ("xfail", "precision_proposal:float32")
    assert again.decision.evidence[2].startswith("confirmed: passed the last 2 run(s)")
    assert again.precision == r.precision.__class__("float32", 1e-5, 8e-5, r.decision.evidence[0])


def test_refine_writes_the_proposal_as_an_xfail_with_its_tolerance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.chdir(tmp_path)
    vid = "test/t.py::T::test_a[dtype=float32]"
    Path("v.jsonl").write_text(_vrec(vid, ("float32",)))
    assert main(["select", "run", "--variants", "v.jsonl", "--out", "s.yaml"]) == 0
    line = _result(vid, "failed", 10.0, message=_close(2e-5, 4e-5), where="x.py:1")
    Path("r.jsonl").write_text(line + "\n")
    assert main(["select", "refine", "s.yaml", "--results", "r.jsonl"]) == 0
    text = Path("s.yaml").read_text()
    assert "# ootest select: precision_proposal:float32 (1 name)" in text
    (f,) = yaml.safe_load(text)["test_suite_config"]["files"]
    (entry,) = [t for t in f["tests"] if t["names"] == ["T::test_a[dtype=float32]"]]
    assert entry["mode"] == "xfail"
    assert entry["edits"]["dtypes"]["include"] == [
        {"name": "float32", "precision": {"atol": 1e-05, "rtol": 8e-05}}
    ]
    assert main(["config", "validate", "s.yaml", "--no-paths"]) == 0


# ------------------------------------------------ item 9: an upgrade keeps history
@pytest.fixture(scope="module")
def memories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.select import suites

    base = tmp_path_factory.mktemp("integrity")
    return suites.build_inputs(base)


def test_an_upgrade_drops_a_changed_bodys_results_and_keeps_a_helpers_as_history(
    memories: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import shutil

    for name in ("old.db", "new.db", "ops.db", "sup.txt"):
        shutil.copy(memories / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    sel = ["--supported", "sup.txt", "--dtypes", "float32,float64,float16", "--ops", "ops.db"]
    assert main(["select", "run", "--memory", "old.db", *sel, "--out", "s.yaml"]) == 0
    alpha = "test/test_alpha.py::TestAlpha"
    helper, body = f"{alpha}::test_double[dtype=float32]", f"{alpha}::test_body[dtype=float32]"
    Path("r.jsonl").write_text(
        _result(helper, "crashed", 5.0, signal="SIGSEGV") + "\n"
        + _result(body, "failed", 5.0, message="E   RuntimeError: boom", where="x.py:1") + "\n"
    )  # fmt: skip
    assert main(["select", "refine", "s.yaml", "--results", "r.jsonl"]) == 0
    before = _rows(Path("s.evidence.jsonl"))
    assert before[helper]["decision"]["reason"].startswith("observed_crashed:SIGSEGV")  # type: ignore[index]
    capsys.readouterr()
    argv = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "s.yaml", *sel]
    assert main(argv) == 0
    err = capsys.readouterr().err
    after = _rows(Path("s.evidence.jsonl"))
    # a helper change: re-decided; its crash was of other code it called (Note
    # [History across changes]): history only, the refresh runs it again
    h = after[helper]
    assert h["changed"] == ["helper:_scale"]
    assert h["decision"]["reason"] == "ops_supported"  # type: ignore[index]
    assert h["evidence"]["observed"] == []  # type: ignore[index]
    assert [r["outcome"] for r in h["history"]["observed"]] == ["crashed"]  # type: ignore[index]
    # the test's own body changed: its runs were of other code, dropped, said so
    b = after[body]
    assert b["changed"] == ["body"] and b["evidence"]["observed"] == []  # type: ignore[index]
    assert b["dropped"] == "1 observed results: the test body changed"
    assert b["decision"]["reason"] == "ops_supported"  # type: ignore[index]
    assert (
        "1 re-decided variants lost their observed results: the test body changed (the "
        "next run gives new ones)"
    ) in err
    assert "1 re-decided variants keep their observed results as history only" in err


# ------------------------------------------------ item 7: nothing undecided is skipped
def test_a_generated_config_never_skips_what_it_did_not_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: unlisted_test_mode was the most common mode (usually skip), so a test
    # added upstream later, or a variant a collection missed, was skipped undecided
    from ootest.config.decide import Context, decide
    from ootest.config.load import load_config
    from ootest.opmap.enable import variant_from_id
    from ootest.select.audit import population

    monkeypatch.chdir(tmp_path)
    t = "test/t.py::T"
    decided = [f"{t}::test_skip[dtype=float64]", f"{t}::test_skip2[dtype=float64]",
               f"{t}::test_skip3[dtype=float64]", f"{t}::test_ok[dtype=float32]"]  # fmt: skip
    Path("v.jsonl").write_text("".join(_vrec(v, (v[-8:-1],)) for v in decided))
    Path("sup.txt").write_text("add\n")
    _certain_ops(decided[:3])  # test_ok: not in the op map
    assert main(["select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--supported",
                 "sup.txt", "--dtypes", "float32", "--out", "s.yaml"]) == 0  # fmt: skip
    text = Path("s.yaml").read_text()
    assert "unlisted_test_mode: xfail" in text
    # a dtype skip names its variants exactly: a later dtype is not skipped by it
    assert '"T::test_skip[dtype=float64]"' in text and "- T::test_skip\n" not in text
    cfg = load_config(Path("s.yaml"), env={"TORCH_ROOT": str(tmp_path)}, check_paths=False)
    (rf,) = cfg.files
    later = [f"{t}::test_new[dtype=float32]", f"{t}::test_skip[dtype=bfloat16]"]
    for vid in [*decided, *later]:
        mode = decide(rf, cfg.suite.global_, variant_from_id(vid), Context()).mode
        want = "skip" if vid.endswith("[dtype=float64]") else "xfail"  # test_ok: no_evidence
        assert (vid, mode) == (vid, want)
    # the audit samples them too, given the variants that exist
    monkeypatch.setenv("TORCH_ROOT", str(tmp_path))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text("")
    pop, _, _ = population(Path("s.yaml"), [*decided, *later])
    assert pop.unlisted == 2
    assert {m.variant_id: m.reason for m in pop.members if m.reason.startswith("unlisted")} == {
        later[0]: "unlisted",
        later[1]: "unlisted",
    }


def test_an_upgrade_says_when_a_config_skips_what_it_does_not_list(
    memories: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import shutil

    for name in ("old.db", "new.db", "ops.db", "sup.txt"):
        shutil.copy(memories / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    sel = ["--supported", "sup.txt", "--dtypes", "float32", "--ops", "ops.db"]
    assert main(["select", "run", "--memory", "old.db", *sel, "--out", "s.yaml"]) == 0
    text = Path("s.yaml").read_text()
    Path("s.yaml").write_text(text.replace("unlisted_test_mode: xfail", "unlisted_test_mode: skip"))
    capsys.readouterr()
    argv = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "s.yaml", *sel]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "2 file blocks skip what they do not list (unlisted_test_mode: skip)" in err
