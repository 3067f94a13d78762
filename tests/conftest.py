from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# pytester's in-process runs drop the modules a run imported; PyYAML's C
# extension cannot be imported twice into one process (its node classes stay
# those of the first import), so it is imported once here, before any run.
import yaml  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
SPYRE = SHARED / "compat" / "torch-spyre"


def run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        cmd, cwd=cwd or ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def ootest(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "ootest.cli", *args], cwd=cwd, env=env)


@pytest.fixture
def spyre_dir() -> Path:
    if not SPYRE.is_dir():
        pytest.skip("shared/compat is not next to this checkout")
    return SPYRE
