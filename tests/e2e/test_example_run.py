"""Subprocess tier: `ootest run` and the plugin on the example suite, on emu."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import ROOT, ootest, run


def _records(path: Path) -> dict[str, dict[str, object]]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs = [r for r in recs if r["kind"] == "result"]
    return {str(r["variant_id"]): r for r in recs}


def test_example_main_job(tmp_path: Path) -> None:
    res = tmp_path / "r.jsonl"
    r = ootest("run", "examples/emu_young.yaml", "--results", str(res), "-q")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "ootest summary" in r.stdout and "OK:" in r.stdout
    assert "missing kernel aten::cumsum.out" in r.stdout  # top failure causes
    by = _records(res)
    basics = "examples/suite/test_tensor_basics.py::TestTensorBasics::"
    ops = "examples/suite/test_op_consistency.py::TestOpConsistency::test_matches_cpu"
    want = {
        basics + "test_add_matches_cpu[dtype=float32]": ("passed", None),
        basics + "test_add_matches_cpu[dtype=float64]": ("skipped", "excluded"),
        basics + "test_add_matches_cpu[dtype=float16]": ("skipped", "capability"),
        basics + "test_half_accumulation[dtype=float16]": ("passed", "listed"),  # precision
        basics + "test_cumsum[dtype=float32]": ("xfailed", "listed"),
        basics + "test_sum_then_mean[dtype=float32]": ("xpassed", "listed"),
        basics + "test_scalar_read": ("passed", "unlisted"),
        ops + "[op=add,dtype=float32]": ("passed", "listed"),
        ops + "[op=div.trunc_rounding,dtype=float32]": ("skipped", "excluded"),
        ops + "[op=cumsum,dtype=int64]": ("xfailed", "listed"),
        ops + "[op=matmul,dtype=float64]": ("skipped", "capability"),
        "examples/suite/test_op_consistency.py::TestModuleConsistency::"
        "test_forward_matches_cpu[dtype=float32,module=nn.GELU,training=True]": (
            "skipped",
            "excluded",
        ),
    }
    for vid, (outcome, bucket) in want.items():
        assert vid in by, f"{vid} missing; have {sorted(by)[:5]}..."
        assert by[vid]["outcome"] == outcome, (vid, by[vid])
        if bucket:
            assert by[vid]["bucket"] == bucket, (vid, by[vid])
    # Every variant of the device classes is reported, none silently dropped.
    assert all(r["device_variant"] for r in by.values())
    # Names never depend on generated class names.
    assert not any("PRIVATEUSE1" in v or "EMU" in v for v in by)


def test_precision_override_is_what_makes_it_pass(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "test_suite_config:\n  device: emu\n  files:\n"
        f"    - path: {ROOT}/examples/suite/test_tensor_basics.py\n"
        "      tests:\n        - names: [test_half_accumulation]\n"
        "          mode: mandatory_success\n"
    )
    r = ootest("run", str(cfg), "--results", str(tmp_path / "r.jsonl"), "-q")
    assert r.returncode == 1
    by = _records(tmp_path / "r.jsonl")
    vid = (
        "examples/suite/test_tensor_basics.py::TestTensorBasics::"
        "test_half_accumulation[dtype=float16]"
    )
    assert by[vid]["outcome"] == "failed" and by[vid]["mode"] == "mandatory_success"


def test_strict_xpass_fails_the_run(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "test_suite_config:\n  device: emu\n  files:\n"
        f"    - path: {ROOT}/examples/suite/test_tensor_basics.py\n"
        "      tests:\n        - names: [test_scalar_read]\n          mode: xfail_strict\n"
    )
    r = ootest("run", str(cfg), "--results", str(tmp_path / "r.jsonl"), "-q")
    assert r.returncode == 1
    assert "strict xfail PASSED (promote it)" in r.stdout


def test_op_marks_select_exactly(tmp_path: Path) -> None:
    r = run(
        [
            sys.executable,
            "-m",
            "pytest",
            "examples/suite/test_op_consistency.py",
            "--ootest-device",
            "emu",
            "-m",
            "op__add",
            "--collect-only",
            "-q",
            "-W",
            "error::pytest.PytestUnknownMarkWarning",
            "-p",
            "no:cacheprovider",
        ]
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ids = [x for x in r.stdout.splitlines() if "::" in x]
    assert ids and all("_add_" in x for x in ids)
    assert len(ids) == 4  # add x (float32, float16, int64, float64)


def test_device_restrictions_bypass(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    base = (
        f"test_suite_config:\n  device: emu\n  files:\n"
        f"    - path: {ROOT}/examples/suite/test_tensor_basics.py\n"
        "      unlisted_test_mode: mandatory_success\n"
    )
    cfg.write_text(base)
    keep = run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--ootest-config",
            str(cfg),
            "-q",
            "-rs",
            "-k",
            "cuda or Cuda",
            "-p",
            "no:cacheprovider",
        ]
    )
    assert "TestCudaOnlyKernels" not in keep.stdout
    assert "Only runs on cuda" in keep.stdout  # onlyCUDA skips on the device
    cfg.write_text(base + "      device_restrictions: bypass\n")
    bypass = run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--ootest-config",
            str(cfg),
            "-q",
            "-rA",
            "-k",
            "cuda or Cuda",
            "-p",
            "no:cacheprovider",
        ]
    )
    assert "PASSED" in bypass.stdout and "TestCudaOnlyKernels" in bypass.stdout, bypass.stdout
    assert "Only runs on cuda" not in bypass.stdout


def test_cached_plan_decides_exactly_what_the_config_decides(tmp_path: Path) -> None:
    """The example suite on emu: a run without the plan cache, one that fills it, and
    one that reads every record from it report the same outcome for every variant."""
    for name in ("emu_young.yaml", "capabilities.yaml"):
        text = (ROOT / "examples" / name).read_text()
        (tmp_path / name).write_text(text.replace("path: suite/", f"path: {ROOT}/examples/suite/"))
    keep = ("outcome", "mode", "bucket", "reason", "issue", "origin", "op", "dtype", "capable")
    seen = []
    for i, extra in enumerate((["--ootest-no-cache"], [], [])):
        res = tmp_path / f"r{i}.jsonl"
        cfg = str(tmp_path / "emu_young.yaml")
        pytest_args = ["-p", "no:cacheprovider", "-v", "examples/suite", "--ootest-config", cfg]
        r = run(
            [sys.executable, "-m", "pytest", *pytest_args, "--ootest-results", str(res), *extra]
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
        plan = next(x for x in r.stdout.splitlines() if x.startswith("ootest: plan "))
        by = {k: {f: v.get(f) for f in keep} for k, v in _records(res).items()}
        seen.append((plan, by))
    assert "0 variants from the cache, 59 derived" in seen[0][0] and "not cached" in seen[0][0]
    assert "0 variants from the cache, 59 derived" in seen[1][0]
    assert "59 variants from the cache, 0 derived" in seen[2][0]
    assert len(seen[0][1]) == 59
    assert seen[0][1] == seen[1][1] == seen[2][1]
