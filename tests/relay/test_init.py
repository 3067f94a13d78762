"""`ootest init` writes a workflow that parses, lints and keeps payload text out of scripts."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ootest


def test_init_writes_valid_workflow(tmp_path: Path) -> None:
    r = ootest("init", "--dir", str(tmp_path), "--device", "spyre", "--shards", "2")
    assert r.returncode == 0, r.stderr
    wf_path = tmp_path / ".github/workflows/crcr-spyre.yml"
    text = wf_path.read_text()
    wf = yaml.safe_load(text)
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["repository_dispatch"]["types"] == ["pull_request", "push"]
    assert "schedule" in on and "workflow_dispatch" in on
    assert wf["permissions"]["id-token"] == "write"
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    uses = [s["uses"] for s in steps if "uses" in s]
    assert uses and all(re.search(r"@[0-9a-f]{40}$", u) for u in uses)
    for s in steps:
        # no expression at all inside scripts: values reach them through env
        assert "${{" not in s.get("run", ""), s
    assert "github.event." not in text  # no payload field anywhere in the workflow
    test_steps = [s.get("run", "") for s in wf["jobs"]["test"]["steps"]]
    assert any("--status in_progress" in x for x in test_steps)
    assert any("--status completed" in x for x in test_steps)
    assert "concurrency" in wf["jobs"]["test"]
    assert ootest("config", "validate", "--no-paths", str(tmp_path / "ootest.yaml")).returncode == 0
    here = Path(sys.executable).parent / "check-jsonschema"
    lint = str(here) if here.exists() else shutil.which("check-jsonschema")
    if lint is None:
        pytest.skip("check-jsonschema not installed")
    r = subprocess.run(
        [lint, "--builtin-schema", "vendor.github-workflows", str(wf_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    assert ootest("init", "--dir", str(tmp_path), "--device", "npu").returncode == 0
    r = ootest("init", "--dir", str(tmp_path), "--device", "npu")
    assert r.returncode == 2 and "--force" in r.stderr
    bad = ootest("init", "--dir", str(tmp_path), "--device", "x; rm -rf")
    assert bad.returncode == 2 and "expected a backend name" in bad.stderr
