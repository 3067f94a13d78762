"""Every workflow ``ootest init`` can write passes the ecosystem's own checks:
GitHub's workflow schema (check-jsonschema's vendored ``github-workflows``) and
zizmor, the GitHub Actions security linter, offline, with zero findings. Each
tool runs once over every file of every combination (fast); a missing tool is a
skip that says so (CI installs both from requirements-dev.txt)."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ootest.relay.init import CAPTURE_WEEKLY, WEEKLY, init

# Every option of init() that changes what it writes, each value that changes it
# differently: whether each workflow is written, its schedule, the shard counts
# at both ends, the runner labels (quoted YAML), and a local build's pin note.
REFRESH = (None, WEEKLY, "0 3 * * *")
CAPTURE = ((None, 4), (CAPTURE_WEEKLY, 1), ("0 1 * * *", 256))
TARGETS = ((None, 1, "1.2.0"), ("self-hosted,on,1.0", 256, "0.3.0.dev2+g1a2b3c"))
COVERED = {"directory", "device", "module", "shards", "force", "runs_on", "version"}
COVERED |= {"refresh", "capture", "capture_shards"}


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements-dev.txt)")
    return found


@pytest.fixture(scope="module")
def workflows(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("init-lint")
    out: list[Path] = []
    n = 0
    for refresh in REFRESH:
        for capture, capture_shards in CAPTURE:
            for runs_on, shards, version in TARGETS:
                d = root / f"repo{n}"
                n += 1
                written = init(
                    d, "spyre", "torch_spyre", shards, False, runs_on=runs_on, version=version,
                    refresh=refresh, capture=capture, capture_shards=capture_shards,
                )  # fmt: skip
                out += [p for p in written if p.suffix == ".yml"]
    return out


def test_the_combinations_cover_every_option_of_init() -> None:
    # an option added to init() without a case here would go unchecked
    assert set(inspect.signature(init).parameters) == COVERED


def test_every_combination_writes_every_workflow(workflows: list[Path]) -> None:
    names = {p.name for p in workflows}
    assert names == {"crcr-spyre.yml", "ootest-refresh-spyre.yml", "ootest-capture-spyre.yml"}
    assert len(workflows) == 18 + 12 + 12  # every repo, 2 of 3 with a refresh or a capture


def test_every_workflow_validates_against_githubs_schema(workflows: list[Path]) -> None:
    lint = _tool("check-jsonschema")
    r = subprocess.run(
        [lint, "--builtin-schema", "vendor.github-workflows", *map(str, workflows)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_zizmor_finds_nothing_in_any_workflow(workflows: list[Path]) -> None:
    zizmor = _tool("zizmor")
    # --no-config and --no-ignores: nothing of the machine's or the file's hides a finding
    r = subprocess.run(
        [zizmor, "--offline", "--no-config", "--no-ignores", "--format", "plain",
         *map(str, workflows)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No findings to report" in r.stdout, r.stdout + r.stderr
