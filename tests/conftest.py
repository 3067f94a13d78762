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


# ------------------------------------------------------ the checkout stays untouched
# Tests write only into their own tmp dirs: the suite fails if a file in the
# checkout appeared, changed or vanished while it ran (tool caches excepted).
_TOOL_DIRS = {
    ".git",
    ".venv",
    ".cache",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
}


def checkout_files(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _TOOL_DIRS and not d.endswith(".egg-info")]
        for f in files:
            p = os.path.join(folder, f)
            try:
                st = os.stat(p)
            except OSError:
                continue
            out[os.path.relpath(p, root)] = (st.st_mtime_ns, st.st_size)
    return out


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


_BEFORE = pytest.StashKey[dict[str, tuple[int, int]]]()


def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        session.config.stash[_BEFORE] = checkout_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None or os.environ.get("OOTEST_ALLOW_CHECKOUT_WRITES"):
        return
    after = checkout_files()
    changed = sorted({p for p in before.keys() | after.keys() if before.get(p) != after.get(p)})
    if changed:
        shown = "\n  ".join(changed[:20])
        sys.stderr.write(f"\nTests changed files in the checkout:\n  {shown}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
