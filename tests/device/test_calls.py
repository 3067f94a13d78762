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
    assert summary.startswith("10 passed"), summary
