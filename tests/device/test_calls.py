"""Subprocess tier: call examples written and rebuilt on emu (Note [Call examples])."""

from __future__ import annotations

import sys

from tests.conftest import ROOT, run


def test_call_examples_on_emu() -> None:
    r = run(
        [sys.executable, "-m", "pytest", str(ROOT / "tests/device/calls_checks.py"),
         "--ootest-device", "emu:full", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith("12 passed"), summary


def test_a_call_holding_tensors_on_both_sides_is_told_apart() -> None:
    """Issue 34 item 4 (without torch): which recorded calls the replay cannot
    judge by the CPU's (Note [Replaying calls])."""
    from ootest.device.calls import places_apart

    on = {"T": "float32", "shape": [2, 2], "dev": True}
    off = {**on, "dev": False}
    scalar = {"T": "float32", "shape": [], "dev": False}
    assert places_apart({"args": [on, off], "kwargs": {}})
    assert places_apart({"args": [on], "kwargs": {"other": [off]}})
    assert not places_apart({"args": [on, on], "kwargs": {}})
    assert not places_apart({"args": [on, scalar], "kwargs": {}})  # a CPU scalar goes anywhere
    assert not places_apart({"args": [off, off, 3], "kwargs": {"device": {"device": True}}})
