"""``ootest select refresh`` end to end on emu:young (Note [Refresh]): the
example suite's ``test_tensor_basics.py`` as the old upstream version, and a
newer one written here; real memories (``index build``), a real run on the
device, a real kill of the whole process group in the middle of that run. The
same without torch, fast: tests/select/test_refresh.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, ootest

pytestmark = pytest.mark.slow  # index builds and runs on emu: a minute on a shared machine

OLD = (ROOT / "examples" / "suite" / "test_tensor_basics.py").read_text()
#: the newer upstream version: a body changed, a decorator added, a test removed,
#: two tests added (one takes seconds: the kill lands in the run)
NEW = (
    OLD.replace(
        "        self.assertEqual(x.to(device).mean().cpu(), x.mean())\n",
        "        self.assertEqual(x.to(device).mean().cpu(), x.mean())\n"
        "        self.assertEqual(x.to(device).sum().cpu(), x.sum())  # twice now\n",
    )
    .replace(
        "    @dtypes(torch.float32, torch.bfloat16)\n    def test_view_aliases_storage",
        "    @onlyCUDA\n"
        "    @dtypes(torch.float32, torch.bfloat16)\n    def test_view_aliases_storage",
    )
    .replace(
        "    def test_scalar_read(self, device):\n"
        "        self.assertEqual(torch.tensor(3.5, device=device).item(), 3.5)\n",
        "    def test_scalar_write(self, device):\n"
        "        t = torch.zeros(2, device=device)\n"
        "        t[1] = 4.0\n"
        "        self.assertEqual(t.cpu(), torch.tensor([0.0, 4.0]))\n\n"
        "    def test_slow_copy(self, device):\n"
        "        import time\n\n"
        "        time.sleep(4)\n"
        "        self.assertEqual(torch.ones(2, device=device).cpu(), torch.ones(2))\n",
    )
)
BASICS = "test/test_tensor_basics.py::TestTensorBasics"


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both trees, the old memory and the config a full run decided from it."""
    base = tmp_path_factory.mktemp("refresh-e2e")
    for name, text in (("old", OLD), ("new", NEW)):
        (base / name / "test").mkdir(parents=True)
        (base / name / "test" / "test_tensor_basics.py").write_text(text)
    _ok(ootest("index", "build", "--root", str(base / "old" / "test"), "--device", "emu:young",
               "--no-torch-db", "--db", str(base / "old.db")))  # fmt: skip
    _ok(ootest("select", "run", "--memory", str(base / "old.db"), "--device", "emu:young",
               "--out", str(base / "suite.yaml")))  # fmt: skip
    return base


def _copy(upstream: Path, at: Path) -> Path:
    at.mkdir()
    for name in ("old.db", "suite.yaml", "suite.evidence.jsonl"):
        (at / name).write_bytes((upstream / name).read_bytes())
    return at


def _argv(upstream: Path, at: Path) -> list[str]:
    return ["select", "refresh", "--config", str(at / "suite.yaml"), "--memory",
            str(at / "old.db"), "--root", str(upstream / "new" / "test"), "--device",
            "emu:young", "-k", "1", "--timeout", "60"]  # fmt: skip


def _env(upstream: Path) -> dict[str, str]:
    env = {**os.environ, "TORCH_ROOT": str(upstream / "new")}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _refresh(upstream: Path, at: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "ootest.cli", *_argv(upstream, at)]
    env = _env(upstream)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _decisions(at: Path) -> dict[str, tuple[str, str]]:
    rows = [json.loads(x) for x in (at / "suite.evidence.jsonl").read_text().splitlines()]
    return {r["decision"]["variant_id"]: (r["decision"]["mode"], r["decision"]["reason"])
            for r in rows}  # fmt: skip


def test_refresh_upgrades_the_config_on_the_device(upstream: Path, tmp_path: Path) -> None:
    at = _copy(upstream, tmp_path / "a")
    before = _decisions(at)
    out = _ok(_refresh(upstream, at))
    assert f"ootest: refresh: changed {at / 'suite.yaml'}" in out
    got = _decisions(at)
    # added, and passing on the device: promoted from no_evidence by the run (k=1)
    for name in ("test_scalar_write", "test_slow_copy"):
        assert got[f"{BASICS}::{name}"] == ("mandatory_success", "observed_pass:1")
    # the body changed: decided again, run, passed
    assert got[f"{BASICS}::test_sum_then_mean[dtype=float32]"] == (
        "mandatory_success",
        "observed_pass:1",
    )
    # a decorator upstream added: skipped, and not run
    for dt in ("float32", "bfloat16"):
        assert got[f"{BASICS}::test_view_aliases_storage[dtype={dt}]"] == ("skip", "upstream_skip")
    assert not [v for v in got if "test_scalar_read" in v]  # removed upstream
    assert [v for v in before if "test_scalar_read" in v]
    unchanged = [v for v in before if "test_add_matches_cpu" in v]
    assert unchanged and all(got[v] == before[v] for v in unchanged)  # not decided again
    body = (at / "suite.refresh" / "pr.md").read_text()
    assert r"- **run on the device**: 3 of the 5 variants decided again: 3 passed" in body
    assert r"- **decisions**: evaluated 5 of 14 variants \(2 added\; 3 modified\; 1 removed" in body
    assert "```diff\n--- a/suite.yaml\n+++ b/suite.yaml\n" in body
    state = json.loads((at / "suite.refresh" / "state.json").read_text())
    assert state["done"] == [
        "begin", "index", "diff", "capture", "replay", "decide", "run", "refine", "write"
    ]  # fmt: skip


def test_a_refresh_killed_in_its_run_resumes_there(upstream: Path, tmp_path: Path) -> None:
    at = _copy(upstream, tmp_path / "k")
    cmd = [sys.executable, "-m", "ootest.cli", *_argv(upstream, at)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=_env(upstream), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the kill takes the run's children too
    )  # fmt: skip
    state, log = at / "suite.refresh" / "state.json", at / "suite.refresh" / "run" / "pytest.log"
    end = time.time() + 300
    while time.time() < end and proc.poll() is None:
        if log.exists() and "decide" in state.read_text():
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the refresh ended before its run could be killed"
    time.sleep(2)  # in the run (test_slow_copy alone takes 4 s)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads(state.read_text())["done"] == [
        "begin",
        "index",
        "diff",
        "capture",
        "replay",
        "decide",
    ]
    assert (at / "suite.yaml").read_bytes() == (upstream / "suite.yaml").read_bytes()

    out = _ok(_refresh(upstream, at))
    assert (
        "ootest: refresh: resuming at step run (begin, index, diff, capture, replay, decide done)"
        in out
    )
    whole = _copy(upstream, tmp_path / "whole")
    _ok(_refresh(upstream, whole))
    assert _decisions(at) == _decisions(whole)

    def masked(p: Path) -> str:  # the two new memories were built at other times
        return re.sub(r"memory sha256:\w+", "memory sha256:*", p.read_text())

    assert masked(at / "suite.yaml") == masked(whole / "suite.yaml")
