"""Subprocess tier: the emu device (imports torch, builds emu once, cached)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import ROOT, run


def test_emu_behaviour() -> None:
    r = run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "tests/device/emu_checks.py"),
            "--ootest-device",
            "emu:young",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
        ]
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout.strip().splitlines()[-1]
    # every check ran and passed: nothing failed, skipped or deselected
    assert summary.startswith(("14 passed in", "14 passed, ")), summary
    assert not any(w in summary for w in ("failed", "skipped", "error", "deselected")), summary


def test_torch_import_alone_does_not_load_emu() -> None:
    code = (
        "import torch; assert torch._C._get_privateuse1_backend_name() == 'privateuseone';"
        "assert not hasattr(torch, 'emu'); print('ok')"
    )
    r = run([sys.executable, "-c", code])
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_unknown_profile_is_a_clear_error() -> None:
    r = run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "tests/device/emu_checks.py"),
            "--ootest-device",
            "emu:adult",
            "-q",
        ]
    )
    assert r.returncode == 4
    assert "emu: unknown profile 'adult'; expected one of faulty, full, subtle, young" in r.stderr


def test_a_baton_left_by_a_killed_loader_does_not_block_later_loads(tmp_path: Path) -> None:
    # A process killed while inside torch.utils.cpp_extension.load leaves its
    # `lock` file behind; every later load used to wait on it forever.
    code = (
        "import os, sys, shutil, pathlib, ootest.device.emu as e\n"
        "e.load('young')\n"
        "built = e.build_location()[1]\n"
        "dst = pathlib.Path(sys.argv[1]) / 'emu' / built.name\n"
        "shutil.copytree(built, dst)\n"
        "print(dst)\n"
    )
    r = run([sys.executable, "-c", code, str(tmp_path)])
    assert r.returncode == 0, r.stderr[-2000:]
    copy = Path(r.stdout.strip().splitlines()[-1])
    (copy / "lock").write_text("")  # the stale baton
    load = (
        "import ootest.device.emu as e, torch; e.load('young')\n"
        "print((torch.ones(2, device='emu') + 1).device)"
    )
    r = run([sys.executable, "-c", load], env={"OOTEST_CACHE_DIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "emu:0" in r.stdout, r.stdout
    assert "building" not in r.stderr  # the finished build was imported, not rebuilt


def test_profiles_declare_quantized_support(tmp_path: Path) -> None:
    from ootest.device.emu import allows_quantized, read_profile

    assert allows_quantized(read_profile("full"))  # dtypes: ["*"]
    assert not allows_quantized(read_profile("young"))
    assert not allows_quantized(read_profile("faulty"))
    own = tmp_path / "int8.yaml"
    own.write_text("dtypes: [float32, qint8]\nops: [add, flip]\n")
    assert allows_quantized(read_profile(str(own)))
