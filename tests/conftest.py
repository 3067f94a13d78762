from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

# pytester's in-process runs drop the modules a run imported; PyYAML's C
# extension cannot be imported twice into one process (its node classes stay
# those of the first import), so it is imported once here, before any run.
import yaml  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


# Note [Own fixtures first]
# Every test that reads data files runs on our own fixtures (tests/fixtures/, in
# the relay's and in Torch Spyre's shapes). The real data other people wrote (a
# `shared/` folder next to the checkout, or $OOTEST_SHARED_DIR) is an extra
# parametrization on top when it is there, never the only coverage: a clone on
# its own runs the same tests and skips none of them. Only this module knows
# where shared data lives; tests/test_standalone.py keeps it that way.
SHARED = Path(os.environ.get("OOTEST_SHARED_DIR") or ROOT.parent / "shared")


@dataclass(frozen=True)
class Envelopes:
    """A folder of relay dispatch envelopes (``client_payload``s) under the same
    file names, and the facts the tests expect of them.

    ``pull_request_{opened,synchronize,closed}.json`` (one PR, not landed),
    ``push_ciflow_tag.json``, ``push_tag_deleted.json`` (events of pytorch/pytorch)
    and ``github_webhook_pull_request_{opened,synchronize}.json`` (full-size
    webhooks of another repository, which a correct gate rejects)."""

    FILES: ClassVar[tuple[str, ...]] = (
        "github_webhook_pull_request_opened.json",
        "github_webhook_pull_request_synchronize.json",
        "pull_request_closed.json",
        "pull_request_opened.json",
        "pull_request_synchronize.json",
        "push_ciflow_tag.json",
        "push_tag_deleted.json",
    )
    origin: str  # "own" or "shared": the test ID's parameter
    folder: Path
    pr: str  # the PR number of the pull_request envelopes
    opened_sha: str
    synchronize_sha: str
    tag: str  # the tag push_ciflow_tag.json pushes
    push_sha: str
    push_delivery: str
    foreign: str  # the repository of the github_webhook_* envelopes

    def path(self, name: str) -> Path:
        return self.folder / name

    def load(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path(name).read_text())
        return data


@dataclass(frozen=True)
class SpyreConfigs:
    """A folder of ``test_suite_config`` files in Torch Spyre's published shape:
    ``test_binary_ufuncs.yaml``, ``test_view_ops_config.yaml`` and
    ``example_test_config.yaml`` (names, modes, tags, ``edits.ops`` include and
    exclude, ``edits.dtypes``, ``edits.functions``, ``unlisted_test_mode``, global
    dtypes and ops with precision and ``force_xfail``)."""

    FILES: ClassVar[tuple[str, ...]] = (
        "example_test_config.yaml",
        "test_binary_ufuncs.yaml",
        "test_view_ops_config.yaml",
    )
    origin: str
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    def all(self) -> list[Path]:
        return sorted(self.folder.glob("*.yaml"))


OWN_ENVELOPES = Envelopes(
    origin="own",
    folder=FIXTURES / "crcr",
    pr="161803",
    opened_sha="5e1f0c2a9d8b7e6f5a4c3b2d1e0f9a8b7c6d5e4f",
    synchronize_sha="0f9e8d7c6b5a49382716f5e4d3c2b1a0918273f6",
    tag="ciflow/trunk/161803",
    push_sha="3c2b1a09f8e7d6c5b4a3928176e5d4c3b2a1f0e9",
    push_delivery="e5d4c3b2-a190-4f8e-87d6-c5b4a3928170",
    foreign="octo-org/octo-repo",
)
# pytorch/crcr-test's fixtures and GitHub's example webhooks (shared/fixtures/crcr/SOURCE.md).
SHARED_ENVELOPES = Envelopes(
    origin="shared",
    folder=SHARED / "fixtures" / "crcr",
    pr="12345",
    opened_sha="a" * 40,
    synchronize_sha="b" * 40,
    tag="ciflow/trunk/12345",
    push_sha="d" * 40,
    push_delivery="test-delivery-push-001",
    foreign="Codertocat/Hello-World",
)
OWN_SPYRE = SpyreConfigs("own", FIXTURES / "torch-spyre")
SHARED_SPYRE = SpyreConfigs("shared", SHARED / "compat" / "torch-spyre")

ENVELOPES = [OWN_ENVELOPES] + ([SHARED_ENVELOPES] if SHARED_ENVELOPES.folder.is_dir() else [])
SPYRE_CONFIGS = [OWN_SPYRE] + ([SHARED_SPYRE] if SHARED_SPYRE.folder.is_dir() else [])


def spyre_params(*shared_marks: pytest.MarkDecorator) -> list[Any]:
    """SPYRE_CONFIGS for ``parametrize("spyre", ...)``, the shared twin carrying
    ``shared_marks`` (``slow`` where our own set already covers the default tier)."""
    return [
        pytest.param(s, id=s.origin, marks=shared_marks if s.origin == "shared" else ())
        for s in SPYRE_CONFIGS
    ]


@pytest.fixture(params=ENVELOPES, ids=lambda e: e.origin)
def crcr(request: pytest.FixtureRequest) -> Envelopes:
    """Each set of dispatch envelopes in turn: our own, then shared/ when present."""
    env: Envelopes = request.param
    return env


@pytest.fixture(params=SPYRE_CONFIGS, ids=lambda s: s.origin)
def spyre(request: pytest.FixtureRequest) -> SpyreConfigs:
    """Each set of Torch Spyre-shaped configs in turn: our own, then shared/ when present."""
    cfgs: SpyreConfigs = request.param
    return cfgs


def pytest_report_header(config: pytest.Config) -> str:
    found = [s.folder for s in (SHARED_ENVELOPES, SHARED_SPYRE) if s.folder.is_dir()]
    if found:
        return "shared data: " + ", ".join(map(str, found)) + " (extra 'shared' parameters)"
    return f"shared data: none at {SHARED} (own fixtures under tests/fixtures only)"


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


def ctrl_c_works() -> None:
    """``preexec_fn`` of a child a test interrupts: Ctrl-C as in a terminal. A pytest
    started in the background by a non-interactive shell (``pytest ... &``) ignores
    SIGINT, and children inherit that: Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn_ootest(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """``ootest ARGS`` started in the background (stdout and stderr piped)."""
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "ootest.cli", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=ctrl_c_works,
    )  # fmt: skip


def wait_for(path: Path, seconds: float = 60) -> None:
    """Until ``path`` exists (a test's "I started" file), at most ``seconds``."""
    end = time.time() + seconds
    while not path.exists() and time.time() < end:
        time.sleep(0.05)


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


_OWN_CACHE = pytest.StashKey[str]()


# Compiled artifacts keyed by their sources, shared with the user's cache.
_SHARED_CACHES = ("emu", "test-backends")


def pytest_configure(config: pytest.Config) -> None:
    """Tests write only into temporary folders: ootest's caches (plans, configs, judge
    answers) go to one made for this run, which the workers inherit. Only the emu
    build and the installed test backends are shared with the user's cache (links):
    they are compiled artifacts keyed by their sources, and rebuilding them per run
    would cost minutes."""
    if not _controller(config) or os.environ.get("OOTEST_CACHE_DIR"):
        return
    from ootest.cache import cache_dir

    own = tempfile.mkdtemp(prefix="ootest-tests-cache-")
    for name in _SHARED_CACHES:
        real = cache_dir() / name
        real.mkdir(parents=True, exist_ok=True)
        os.symlink(real, os.path.join(own, name))
    os.environ["OOTEST_CACHE_DIR"] = own
    config.stash[_OWN_CACHE] = own


def pytest_unconfigure(config: pytest.Config) -> None:
    own = config.stash.get(_OWN_CACHE, None)
    if own is not None:
        os.environ.pop("OOTEST_CACHE_DIR", None)
        for name in _SHARED_CACHES:
            os.unlink(os.path.join(own, name))
        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(scope="session")
def tinydev_env() -> dict[str, str]:
    """The variables (to lay over ``os.environ``) that give a child process the
    ``tiny`` test backend: its ``import torch`` autoloads it. Installed and built
    once per backend source and torch (cached, locked against parallel workers);
    nothing in this process changes (Note [Test backends stay out of .venv])."""
    from ootest.cache import cache_dir
    from tests.backends import TINYDEV, install

    return install(TINYDEV, cache_dir() / "test-backends").env()


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
