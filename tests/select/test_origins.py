"""Evidence from the right place (Note [Evidence origins], issue 36 items 1-4):
device results, a CPU reference and a replay are used only where they come from
the device (or the CPU) they stand for, and a strict XPASS is a pass. No torch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ootest.errors import UserError
from ootest.select.pipeline import Backend, Inputs, refine, select, write
from ootest.select.refine import observe, refine_one
from ootest.select.rules import Evidence, decide
from tests.select.test_evidence import _world

F = "test/test_o.py::TestO"
MM = f"{F}::test_mm[dtype=float32]"  # calls an op emu:young lacks
ADD = f"{F}::test_add[dtype=float32]"  # calls only declared ops
YOUNG = Backend(device="emu:young")


def _inputs(tmp: Path, **kw: Any) -> Inputs:
    """The op map and variants of MM and ADD in ``tmp`` (a replay of their calls on
    emu:young, every call ok, at ``tmp/replay.jsonl``)."""
    db, _rep = _world(
        tmp,
        {
            MM: [("aten::_scaled_mm", "float32", True, "ok")],
            ADD: [("aten::add.Tensor", "float32", True, "ok")],
        },
    )
    variants = tmp / "v.jsonl"
    variants.write_text(
        "".join(
            json.dumps(
                {"kind": "variant", "variant_id": v, "device_variant": True, "dtypes": ["float32"]}
            )
            + "\n"
            for v in (MM, ADD)
        )
    )
    return Inputs(ops=db, variants=[variants], **kw)


def _session(device: str | None, torch: str | None = "2.13.0") -> dict[str, Any]:
    return {"kind": "session", "selected": 2, "files": {}, "device_spec": device,
            "torch": torch, "time": 0.0}  # fmt: skip


def _results(path: Path, *recs: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _res(vid: str, outcome: str, at: float, **kw: Any) -> dict[str, Any]:
    rec = {"kind": "result", "variant_id": vid, "outcome": outcome, "time": at, **kw}
    if outcome not in ("passed", "xpassed", "xpassed_strict", "skipped"):
        rec.setdefault("message", "E   RuntimeError: boom")
    return rec


def _cpu(vid: str) -> str:
    return vid[:-1] + ",device=cpu]"


def _decided(inputs: Inputs) -> tuple[dict[str, tuple[str, str]], list[str]]:
    sel = select(inputs)
    return {d.variant_id: (d.mode, d.reason) for d in sel.decisions}, sel.notes


# ------------------------------------------------------------ device results
def test_cpu_runs_given_as_results_are_not_device_passes(tmp_path: Path) -> None:
    """Two CPU runs as --results were ``observed_pass:2`` over ``op_unsupported``."""
    runs = [
        _results(
            tmp_path / f"cpu{i}.jsonl",
            _session(None),
            _res(_cpu(MM), "passed", i),
            _res(_cpu(ADD), "passed", i),
        )
        for i in (1, 2)
    ]
    # a CPU run written before sessions said their device: its IDs still say it
    runs.append(_results(tmp_path / "old.jsonl", _res(_cpu(MM), "passed", 3)))
    got, notes = _decided(_inputs(tmp_path, backend=YOUNG, results=runs))
    assert got[MM] == ("skip", "op_unsupported:aten::_scaled_mm")
    assert got[ADD] == ("mandatory_success", "ops_supported")
    assert notes == [
        f"ootest: --results {runs[0]}: ran without a device (its device-generic tests ran on "
        "the CPU): not evidence of the device, not used",
        f"ootest: --results {runs[1]}: ran without a device (its device-generic tests ran on "
        "the CPU): not evidence of the device, not used",
        f"ootest: --results {runs[2]}: 1 results of another device's variants (an ID with "
        "device=...) left out",
    ]


@pytest.mark.parametrize("other", ["torch_tiny:tiny", "tiny", "emu:full"])
def test_a_run_on_another_backend_is_not_device_evidence(tmp_path: Path, other: str) -> None:
    """The same IDs from another privateuse1 backend (or another emu profile)."""
    runs = [
        _results(tmp_path / f"r{i}.jsonl", _session(other), _res(MM, "passed", i)) for i in (1, 2)
    ]
    got, notes = _decided(_inputs(tmp_path, backend=YOUNG, results=runs))
    assert got[MM] == ("skip", "op_unsupported:aten::_scaled_mm")
    assert notes[0] == (
        f"ootest: --results {runs[0]}: ran on {other}, not on the target device emu:young: "
        "not evidence of the device, not used"
    )
    # the same runs on the target device (emu is emu:young) are the strongest evidence
    runs = [
        _results(tmp_path / f"y{i}.jsonl", _session("emu"), _res(MM, "passed", i)) for i in (1, 2)
    ]
    got, notes = _decided(_inputs(tmp_path, backend=YOUNG, results=runs))
    assert got[MM] == ("mandatory_success", "observed_pass:2") and notes == []


def test_an_older_file_is_checked_by_the_backend_name_its_collection_records_say(
    tmp_path: Path,
) -> None:
    coll = {"kind": "collection", "file": "test/test_o.py", "collected": 2,
            "device": "tiny", "device_module": "torch_tiny", "time": 0.0}  # fmt: skip
    runs = [_results(tmp_path / f"r{i}.jsonl", coll, _res(MM, "passed", i)) for i in (1, 2)]
    got, notes = _decided(_inputs(tmp_path, backend=YOUNG, results=runs))
    assert got[MM] == ("skip", "op_unsupported:aten::_scaled_mm")
    assert "ran on torch_tiny:tiny, not on the target device emu:young" in notes[0]


def test_refine_uses_only_runs_on_the_configs_device(tmp_path: Path) -> None:
    write(select(_inputs(tmp_path, backend=YOUNG)), tmp_path / "suite.yaml")
    other = [
        _results(tmp_path / f"f{i}.jsonl", _session("emu:full"), _res(MM, "passed", i))
        for i in (1, 2)
    ]
    sel = refine(tmp_path / "suite.yaml", other)
    assert dict((d.variant_id, d.reason) for d in sel.decisions)[MM] == (
        "op_unsupported:aten::_scaled_mm"
    )
    assert sel.notes[:2] == [
        f"ootest: refine: {other[0]}: ran on emu:full, not on the target device emu:young: "
        "not evidence of the device, not used",
        f"ootest: refine: {other[1]}: ran on emu:full, not on the target device emu:young: "
        "not evidence of the device, not used",
    ]
    mine = [
        _results(tmp_path / f"y{i}.jsonl", _session("emu:young"), _res(MM, "passed", i))
        for i in (1, 2)
    ]
    sel = refine(tmp_path / "suite.yaml", mine)
    assert dict((d.variant_id, d.reason) for d in sel.decisions)[MM] == "observed_pass:2"


# ------------------------------------------------------------ CPU reference
def test_a_reference_counts_only_its_cpu_results(tmp_path: Path) -> None:
    """A plain pytest run where the backend autoloads holds the device's variants
    (``device=tiny``) beside the CPU's: only the CPU's are the reference."""
    ref = _results(tmp_path / "ref.jsonl", _res(_cpu(ADD), "passed", 1),
                   _res(ADD[:-1] + ",device=tiny]", "failed", 2))  # fmt: skip
    got, notes = _decided(_inputs(tmp_path, backend=YOUNG, reference=[ref]))
    assert got[ADD] == ("mandatory_success", "ops_supported")  # not upstream_broken
    assert notes == [
        f"ootest: --reference {ref}: 1 of tiny left out: only its CPU results are the CPU reference"
    ]


def test_a_reference_without_cpu_results_is_refused(tmp_path: Path) -> None:
    ref = _results(tmp_path / "ref.jsonl", _session("emu:young"), _res(ADD, "failed", 1))
    with pytest.raises(UserError) as e:
        select(_inputs(tmp_path, backend=YOUNG, reference=[ref]))
    assert str(e.value) == (
        f"--reference {ref}: expected the results of a CPU run (variant IDs with device=cpu, "
        "or plain tests of a run without a device); found 1 results, none on the CPU "
        "(1 of emu:young); run the same files without --ootest-device, with the backend kept "
        "out (TORCH_DEVICE_BACKEND_AUTOLOAD=0 PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu pytest "
        "FILES --ootest-results cpu.jsonl)"
    )


# ------------------------------------------------------------ replay
def _replay_on(tmp: Path, device: str | None) -> Path:
    path = tmp / "replay.jsonl"
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    if device is None:
        head.pop("device", None)
    else:
        head["device"] = device
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    return path


def test_a_replay_without_a_target_device_lifts_nothing(tmp_path: Path) -> None:
    """``--supported ... --replay`` without --device: a replay made on emu:full
    lifted every undeclared op."""
    (tmp_path / "sup.txt").write_text("aten::add.Tensor\n")
    listed = Backend(supported=tmp_path / "sup.txt", dtypes="float32")
    inputs = _inputs(tmp_path, backend=listed)
    rep = _replay_on(tmp_path, "emu:full")
    got, notes = _decided(Inputs(**{**inputs.__dict__, "replay": rep}))
    assert got[MM] == ("skip", "op_unsupported:aten::_scaled_mm")
    assert notes == [
        f"ootest: --replay {rep}: replayed on emu:full, but no --device names the device the "
        "decisions are for: not used; pass --device emu:full (with --supported to override "
        "its ops) if that is the device"
    ]
    # named, the same replay lifts it (emu:full's ops overridden by the list)
    named = Backend(device="emu:full", supported=tmp_path / "sup.txt", dtypes="float32")
    got, notes = _decided(Inputs(**{**inputs.__dict__, "replay": rep, "backend": named}))
    assert got[MM] == ("mandatory_success", "ops_supported") and notes == []
    # a replay that does not say where it ran is no evidence of this device
    rep = _replay_on(tmp_path, None)
    got, notes = _decided(Inputs(**{**inputs.__dict__, "replay": rep, "backend": named}))
    assert got[MM] == ("skip", "op_unsupported:aten::_scaled_mm")
    assert notes[0].startswith(f"ootest: --replay {rep}: its header names no device")


def test_a_replay_on_the_same_device_spelled_otherwise_is_used(tmp_path: Path) -> None:
    (tmp_path / "sup.txt").write_text("aten::add.Tensor\n")
    young = Backend(device="emu:young", supported=tmp_path / "sup.txt")
    inputs = _inputs(tmp_path, backend=young)
    rep = _replay_on(tmp_path, "emu")  # emu is emu:young
    got, notes = _decided(Inputs(**{**inputs.__dict__, "replay": rep}))
    assert got[MM] == ("mandatory_success", "ops_supported") and notes == []
    rep = _replay_on(tmp_path, "emu:faulty")
    with pytest.raises(UserError, match="replayed on emu:faulty, but --device is emu:young"):
        select(Inputs(**{**inputs.__dict__, "replay": rep}))


# ------------------------------------------------------------ strict XPASS
def test_a_strict_xpass_is_a_pass(tmp_path: Path) -> None:
    """Failed once, then passed three times as strict XPASSes: promoted."""
    ev = Evidence(MM, ops=("aten::_scaled_mm",), missing_ops=("aten::_scaled_mm",),
                  ops_declared=True)  # fmt: skip
    runs = [_results(tmp_path / "r0.jsonl", _session("emu:young"), _res(MM, "failed", 0))]
    runs += [
        _results(tmp_path / f"r{i}.jsonl", _session("emu:young"), _res(MM, "xpassed_strict", i))
        for i in (1, 2, 3)
    ]
    last = observe([ev], runs)
    d = refine_one(ev, last[MM], 2).decision
    assert (d.mode, d.reason) == ("mandatory_success", "observed_pass:2")
    assert decide(Evidence(MM, observed=ev.observed[-1:])).reason == "no_evidence"
    # select run --results reads it the same way
    got, _ = _decided(_inputs(tmp_path, backend=YOUNG, results=runs))
    assert got[MM] == ("mandatory_success", "observed_pass:2")


# ------------------------------------------------------------ property
#: the origins a generated results file may have: (session device, whether the IDs
#: carry device=cpu, whether it is device evidence of emu:young)
ORIGINS = {
    "target": ("emu:young", False, True),
    "target_spelled": ("emu", False, True),
    "cpu": (None, True, False),
    "cpu_plain_ids": (None, False, False),
    "other_backend": ("torch_tiny:tiny", False, False),
    "other_profile": ("emu:full", False, False),
    "legacy_cpu_ids": ("-", True, False),  # no session line: its IDs say it
}
OUTCOMES = ["passed", "failed", "crashed", "xpassed_strict", "xfailed", "skipped"]
REFS = {"cpu": True, "tiny": False, "plain_no_device": True, "device_session": False}


def _file(tmp: Path, n: int, origin: str, outs: list[str]) -> Path:
    device, cpu_ids, _ = ORIGINS[origin]
    recs: list[dict[str, Any]] = [] if device == "-" else [_session(device)]
    for i, o in enumerate(outs):
        vid = (MM, ADD)[i % 2]
        recs.append(_res(_cpu(vid) if cpu_ids else vid, o, 10.0 * n + i))
    return _results(tmp / f"run{n}.jsonl", *recs)


def _ref(tmp: Path, kinds: list[tuple[str, str]]) -> tuple[Path, Path, bool, bool]:
    """A reference holding results of several origins, the same with only the
    CPU's (``REFS``: which kinds are the CPU's), and whether it holds CPU results
    and others (the last result per ID counts, as readers take it)."""
    last: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, (kind, o) in enumerate(kinds):
        vid = (MM, ADD)[i % 2]
        rec = {
            "cpu": _res(_cpu(vid), o, i),
            "tiny": _res(vid[:-1] + ",device=tiny]", o, i),
            "plain_no_device": _res(vid, o, i, device_variant=False),
            "device_session": _res(vid, o, i, device_variant=True),
        }[kind]
        last[rec["variant_id"]] = (kind, rec)
    session = [_session(None)]
    mixed = [r for _, r in last.values()]
    clean = [r for k, r in last.values() if REFS[k]]
    return (
        _results(tmp / "ref-mixed.jsonl", *session, *mixed),
        _results(tmp / "ref-cpu.jsonl", *session, *clean),
        bool(clean),
        len(clean) < len(mixed),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.lists(
        st.tuples(
            st.sampled_from(sorted(ORIGINS)),
            st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=4),
        ),
        max_size=4,
    ),
    ref=st.lists(st.tuples(st.sampled_from(sorted(REFS)), st.sampled_from(OUTCOMES)), max_size=4),
    replay_on=st.sampled_from(["emu:young", "emu", "emu:full", None]),
)
def test_no_decision_rests_on_a_fact_of_the_wrong_origin(
    files: list[tuple[str, list[str]]],
    ref: list[tuple[str, str]],
    replay_on: str | None,
) -> None:
    """Every decision made from evidence of mixed origins (CPU runs, other backends,
    other emu profiles, files that say no origin, references that mix the device's
    results in, a replay of another device or of none) is the decision made from
    the evidence of the right origin alone."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "sup.txt").write_text("aten::add.Tensor\n")
        backend = Backend(device="emu:young", supported=tmp / "sup.txt")
        inputs = _inputs(tmp, backend=backend)
        rep = _replay_on(tmp, replay_on)
        runs = [_file(tmp, n, origin, outs) for n, (origin, outs) in enumerate(files)]
        right = [p for p, (origin, _) in zip(runs, files, strict=True) if ORIGINS[origin][2]]
        mixed_ref, cpu_ref, has_cpu, has_other = _ref(tmp, ref)
        same = replay_on in ("emu:young", "emu")
        base = {**inputs.__dict__, "replay": rep if same else None}
        want = select(Inputs(**{**base, "results": right,
                                "reference": [cpu_ref] if has_cpu else []}))  # fmt: skip
        if replay_on is not None and not same:
            with pytest.raises(UserError, match="replayed on emu:full"):
                select(Inputs(**{**inputs.__dict__, "replay": rep}))
            return
        given_ = Inputs(**{**inputs.__dict__, "replay": rep, "results": runs,
                           "reference": [mixed_ref] if ref else []})  # fmt: skip
        if has_other and not has_cpu:
            with pytest.raises(UserError, match="none on the CPU"):
                select(given_)
            return
        got = select(given_)
        assert [(x.variant_id, x.mode, x.reason) for x in got.decisions] == [
            (x.variant_id, x.mode, x.reason) for x in want.decisions
        ]
