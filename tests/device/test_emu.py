"""Subprocess tier: the emu device (imports torch, builds emu once, cached)."""

from __future__ import annotations

import sys

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
    assert summary.startswith(("11 passed in", "11 passed, ")), summary
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
    assert "emu: unknown profile 'adult'; expected one of faulty, full, young" in r.stderr
