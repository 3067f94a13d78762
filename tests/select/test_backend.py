"""Capabilities from the backend itself (Note [Backend capabilities], Note [What a
backend supports]): the probe's op list and what select run and ops missing
decide from it, without --supported or --dtypes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ootest.opmap.ingest import ingest_records
from tests.device.fake_backend import fake_backend

ROOT = Path(__file__).resolve().parents[2]

# Kernels registered in Python for PrivateUse1, as a young backend does in C++:
# abs and add as out= kernels only, mm as a functional kernel; nothing else.
_KERNELS = """
_lib = torch.library.Library("aten", "IMPL")
for _name in ("abs.out", "add.out", "mm"):
    _lib.impl(_name, lambda *a, **k: None, "PrivateUse1")
"""


def _probe(device: str, site: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    r = subprocess.run(
        [sys.executable, "-m", "ootest.plugin.probe", device],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_the_probe_knows_kernels_out_kernels_and_composites(tmp_path: Path) -> None:
    site = fake_backend(tmp_path, "fakebk", "fake", tail=_KERNELS)
    ops = _probe("fake", site)["ops"]
    assert isinstance(ops, dict)
    assert ops["aten::mm"] == "kernel"
    assert ops["aten::abs.out"] == "kernel"
    # out= kernels serve the functional and in-place ops through torch's
    # composite kernels (abs: CompositeExplicitAutograd; add: structured)
    assert ops["aten::abs"] == "out=aten::abs.out"
    assert ops["aten::add.Tensor"] == "out=aten::add.out"
    assert ops["aten::add_.Tensor"] == "out=aten::add.out"
    # device-independent composite kernels need nothing of the backend's own
    assert ops["aten::detach"] == "composite"
    # neither a kernel nor an out= kernel: not runnable
    for op in ("aten::mul.Tensor", "aten::sort.stable", "aten::empty.memory_format"):
        assert op not in ops
    # an out= overload whose kernel is torch's generated wrapper of the functional
    # overload is served through it (mm.out is native, not such a wrapper); one
    # whose functional overload is not served is left out (issue 36: it counted as
    # composite when no out= overload's argument names matched its own)
    assert ops["aten::_foreach_abs.out"] == "via=aten::_foreach_abs"
    assert "aten::_adaptive_avg_pool2d.out" not in ops


# A backend's "not implemented yet" hook: a boxed PrivateUse1 fallback that only
# raises, and an autograd wrapper of mul with no kernel under it.
_RAISING = (
    _KERNELS
    + """
def _refuse(op, *args, **kwargs):
    raise NotImplementedError(f"{op} is not implemented for fake yet")


_fb = torch.library.Library("_", "IMPL")
_fb.fallback(_refuse, "PrivateUse1")
_lib.impl("mul.Tensor", lambda *a, **k: None, "AutogradPrivateUse1")
"""
)


def test_a_fallback_that_raises_and_an_autograd_wrapper_are_no_support(tmp_path: Path) -> None:
    """Issue 36: any boxed fallback, even one that only raises, marked every op
    supported, and an AutogradPrivateUse1-only registration counted as a kernel.
    The probe calls the fallback once on a tiny tensor: it raised, so only the
    backend's own kernels (and what they serve) count; the autograd wrapper is not
    a kernel."""
    site = fake_backend(tmp_path, "fakebk", "fake", tail=_RAISING)
    got = _probe("fake", site)
    ops = got["ops"]
    assert isinstance(ops, dict)
    assert got["fallback"] is True
    assert str(got["fallback_broken"]).startswith("aten::neg through it raised "), got
    assert "fallback" not in set(ops.values())
    assert ops["aten::mm"] == "kernel" and ops["aten::abs"] == "out=aten::abs.out"
    for op in ("aten::mul.Tensor", "aten::sort.stable", "aten::neg"):
        assert op not in ops, op


# What a probe of such a backend says, saved (select scope/run --save-detected).
_DETECTED = {
    "device": "fakebk:fake",
    "name": "fake",
    "torch": "2.13.0",
    "keys": {"PrivateUse1": ["aten::abs.out", "aten::add.out", "aten::mm"]},
    "ops": {
        "aten::abs.out": "kernel",
        "aten::abs": "out=aten::abs.out",
        "aten::add.Tensor": "out=aten::add.out",
        "aten::add.out": "kernel",
        "aten::mm": "kernel",
        "aten::detach": "composite",
    },
    "dtypes": None,
}

_VARIANTS = {
    "test/t.py::TestT::test_add[dtype=float64]": ("aten::add.Tensor", "aten::detach"),
    "test/t.py::TestT::test_abs[dtype=int8]": ("aten::abs",),
    "test/t.py::TestT::test_sort[dtype=float32]": ("aten::sort.stable", "aten::mm"),
}


def _inputs(tmp_path: Path, detected: dict[str, object] = _DETECTED) -> None:
    from ootest.opmap.store import OpStore

    recs: list[dict[str, object]] = [
        {"kind": "provenance", "torch": "2.13.0", "device": "emu:full", "ootest": "0"}
    ]
    lines = []
    for vid, ops in _VARIANTS.items():
        recs.append({"kind": "ops", "variant_id": vid, "ops": dict.fromkeys(ops, 1)})
        recs.append({"kind": "stop", "variant_id": vid, "outcome": "passed"})
        dtype = vid.rpartition("=")[2].rstrip("]")
        lines.append({"kind": "variant", "variant_id": vid, "device_variant": True,
                      "dtypes": [dtype]})  # fmt: skip
    with OpStore.open(tmp_path / "ops.db", create=True) as s:
        ingest_records(s, recs, source="test")
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (tmp_path / "det.json").write_text(json.dumps(detected))


def _decisions(tmp_path: Path, *extra: str) -> tuple[dict[str, tuple[str, str]], str]:
    from ootest.cli.main import main

    argv = ["select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--out", "s.yaml"]
    assert main([*argv, *extra]) == 0
    rows = [json.loads(x) for x in (tmp_path / "s.evidence.jsonl").read_text().splitlines()]
    got = {r["decision"]["variant_id"]: (r["decision"]["mode"], r["decision"]["reason"])
           for r in rows}  # fmt: skip
    return got, (tmp_path / "s.yaml").read_text()


def test_select_run_decides_from_a_saved_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _inputs(tmp_path)
    got, text = _decisions(tmp_path, "--detected", "det.json")
    add, abs_, sort = _VARIANTS
    # no dtype declared: float64 and int8 are not taken as unsupported
    assert got[add] == ("mandatory_success", "ops_supported")
    assert got[abs_] == ("mandatory_success", "ops_supported")
    assert got[sort] == ("skip", "op_unsupported:aten::sort.stable")
    assert "backend: probed fakebk:fake (torch 2.13.0: 1 composite, 3 kernel, 2 out)" in text
    assert "torch" not in sys.modules


def test_declarations_override_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _inputs(tmp_path, {**_DETECTED, "dtypes": ["float32", "float64"]})
    add, abs_, sort = _VARIANTS
    got, _ = _decisions(tmp_path, "--detected", "det.json")
    assert got[abs_] == ("skip", "dtype_unsupported:int8")  # the device module declares dtypes
    got, text = _decisions(tmp_path, "--detected", "det.json", "--dtypes", "float32,int8")
    assert got[add] == ("skip", "dtype_unsupported:float64")
    assert got[abs_] == ("mandatory_success", "ops_supported")
    assert "; dtypes: float32,int8" in text
    (tmp_path / "ops.txt").write_text("sort\nmm\n")
    got, text = _decisions(
        tmp_path, "--detected", "det.json", "--supported", "ops.txt", "--dtypes", "float32,int8"
    )
    assert got[sort] == ("mandatory_success", "ops_supported")
    assert got[abs_] == ("skip", "op_unsupported:aten::abs")
    assert "; ops: ops.txt" in text


def test_a_detection_without_ops_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ootest.cli.main import main

    monkeypatch.chdir(tmp_path)
    old = {k: v for k, v in _DETECTED.items() if k not in ("ops", "dtypes")}
    _inputs(tmp_path, old)
    argv = ["select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--out", "s.yaml"]
    assert main([*argv, "--detected", "det.json"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ootest: error: --detected det.json: this detection holds no op list (saved by an "
        "older ootest); probe again with --device"
    )


def test_ops_missing_from_a_saved_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ootest.cli.main import main

    monkeypatch.chdir(tmp_path)
    _inputs(tmp_path)
    capsys.readouterr()
    assert main(["ops", "missing", "--db", "ops.db", "--detected", "det.json", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["blocked"] == 1
    assert [(n["rule"], n["overloads"]) for n in rep["needs"]] == [("sort", ["aten::sort.stable"])]


def test_select_run_probes_the_backend(tmp_path: Path) -> None:
    """The documented command on a backend torch autoloads: no --supported, no
    --dtypes; the probe is saved for the next run."""
    site = fake_backend(tmp_path, "fakebk", "fake", tail=_KERNELS)
    _inputs(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    cmd = [sys.executable, "-m", "ootest.cli", "select", "run", "--variants", "v.jsonl",
           "--ops", "ops.db", "--device", "fakebk:fake", "--save-detected", "probe.json",
           "--out", "s.yaml"]  # fmt: skip
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "s.evidence.jsonl").read_text().splitlines()]
    got = {r["decision"]["variant_id"]: r["decision"]["reason"] for r in rows}
    add, abs_, sort = _VARIANTS
    assert got == {
        add: "ops_supported",
        abs_: "ops_supported",
        sort: "op_unsupported:aten::sort.stable",
    }
    saved = json.loads((tmp_path / "probe.json").read_text())
    assert saved["ops"]["aten::abs"] == "out=aten::abs.out"
    assert "  device: fakebk:fake\n" in (tmp_path / "s.yaml").read_text()


def test_an_emu_profile_of_every_dtype_declares_no_dtype_limit(tmp_path: Path) -> None:
    """emu:full says ``dtypes: ["*"]``, which its reader keeps as an empty list (every
    dtype): select run --device emu:full skipped every variant as dtype_unsupported
    (an empty set of declared dtypes), found on the real-history benchmark."""
    from ootest.select.backend import capabilities

    full = capabilities(device="emu:full")
    assert full.dtypes is None, full.dtypes
    young = capabilities(device="emu:young")
    assert young.dtypes is not None and "float32" in young.dtypes
