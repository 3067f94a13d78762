"""Variant IDs and node IDs do not depend on where things are (Note [File keys]).

The normal layout: a backend repository with its own pytest.ini runs upstream
files that live in a PyTorch checkout elsewhere (``TORCH_ROOT``), outside
pytest's rootdir. Two of those files define the same class and test names.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.conftest import ootest, run

UPSTREAM = """
import os
import signal

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestSame(TestCase):
    @dtypes(torch.float32, torch.int64)
    def test_add(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2, dtype=dtype))

    def test_crash(self, device):
        if os.environ.get("CRASH_IN") in (__file__.rsplit("/", 1)[-1], "all"):
            os.kill(os.getpid(), signal.SIGSEGV)


instantiate_device_type_tests(TestSame, globals())

if __name__ == "__main__":
    run_tests()
"""

SUITE = """
test_suite_config:
  device: emu:full
  files:
    - path: ${TORCH_ROOT}/test/test_alpha.py
      unlisted_test_mode: mandatory_success
    - path: ${TORCH_ROOT}/test/test_beta.py
      unlisted_test_mode: mandatory_success
"""

IDS = {
    f"test/{f}::TestSame::{t}"
    for f in ("test_alpha.py", "test_beta.py")
    for t in ("test_add[dtype=float32]", "test_add[dtype=int64]", "test_crash")
}


def _layout(tmp: Path) -> tuple[Path, Path]:
    torch_root = tmp / "src" / "pytorch"
    (torch_root / "test").mkdir(parents=True)
    for name in ("test_alpha.py", "test_beta.py"):
        (torch_root / "test" / name).write_text(UPSTREAM)
    backend = tmp / "backend"
    (backend / "ci").mkdir(parents=True)
    (backend / "pytest.ini").write_text("[pytest]\n")
    (backend / "ci" / "suite.yaml").write_text(SUITE)
    return torch_root, backend


def _results(path: Path) -> list[dict[str, object]]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    return [r for r in recs if r.get("kind") == "result"]


def _env(torch_root: Path, **extra: str) -> dict[str, str]:
    return {"TORCH_ROOT": str(torch_root), "OOTEST_NO_CACHE": "1", **extra}


def test_ids_do_not_depend_on_checkout_location_or_working_folder(tmp_path: Path) -> None:
    torch_root, backend = _layout(tmp_path)
    first = ootest(
        "run", "ci/suite.yaml", "--results", str(tmp_path / "r1.jsonl"),
        cwd=backend, env=_env(torch_root),
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # The same checkout somewhere else, the run started from another folder.
    moved = tmp_path / "elsewhere" / "torch-copy"
    shutil.copytree(torch_root, moved)
    second = ootest(
        "run", "../backend/ci/suite.yaml", "--results", str(tmp_path / "r2.jsonl"),
        cwd=tmp_path / "elsewhere", env=_env(moved),
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]

    one, two = _results(tmp_path / "r1.jsonl"), _results(tmp_path / "r2.jsonl")
    assert {str(r["variant_id"]) for r in one} == IDS
    assert {str(r["variant_id"]) for r in two} == IDS
    assert {r["file"] for r in one} == {"test/test_alpha.py", "test/test_beta.py"}
    # Collection records and the guard key on the same file keys.
    colls = [
        json.loads(x)
        for x in (tmp_path / "r1.jsonl").read_text().splitlines()
        if '"collection"' in x
    ]
    assert sorted(c["file"] for c in colls) == ["test/test_alpha.py", "test/test_beta.py"]

    # Every node ID names its file, and pytest takes it back from where the run started.
    for r in one:
        nodeid = str(r["nodeid"])
        path = nodeid.split("::")[0]
        assert path and Path(backend, path).resolve().is_file(), nodeid
    again = run(
        [*_pytest(), str(one[0]["nodeid"]), "--ootest-device", "emu:full", "-q"],
        cwd=backend, env=_env(torch_root),
    )  # fmt: skip
    assert again.returncode == 0 and "1 passed" in again.stdout, again.stdout[-2000:]
    # --deselect with a recorded node ID drops exactly that test.
    alpha = next(r for r in one if r["variant_id"] == "test/test_alpha.py::TestSame::test_crash")
    sel = run(
        [*_pytest(), str(torch_root / "test" / "test_alpha.py"), "--ootest-device", "emu:full",
         "--deselect", str(alpha["nodeid"]), "-q"],
        cwd=backend, env=_env(torch_root),
    )  # fmt: skip
    assert "2 passed, 1 deselected" in sel.stdout, sel.stdout[-2000:]

    # People see test/x.py, never an absolute or ../ path.
    named = [x for x in first.stdout.splitlines() if "test_alpha.py" in x]
    assert named and all("test/test_alpha.py" in x for x in named), named
    assert not any("../" in x or "src/pytorch" in x for x in named), named
    html = (tmp_path / "report.html").read_text()
    assert "test/test_beta.py" in html and "../" not in html and "src/pytorch" not in html


def _pytest() -> list[str]:
    import sys

    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]


def test_same_names_in_two_files_crash_resume_and_shard(tmp_path: Path) -> None:
    torch_root, backend = _layout(tmp_path)
    res = tmp_path / "out" / "results.jsonl"
    crashed = ootest(
        "run", "ci/suite.yaml", "--results", str(res), cwd=backend,
        env=_env(torch_root, CRASH_IN="all"),
    )  # fmt: skip
    assert crashed.returncode == 1, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    recs = _results(res)
    by_id = {str(r["variant_id"]): r["outcome"] for r in recs}
    assert set(by_id) == IDS and len(recs) == len(IDS)  # each once: resume skipped what ran
    assert by_id["test/test_alpha.py::TestSame::test_crash"] == "crashed"
    assert by_id["test/test_beta.py::TestSame::test_crash"] == "crashed"
    assert sorted(set(by_id.values())) == ["crashed", "passed"]
    assert "2 crash(es)/timeout(s) recovered" in crashed.stdout
    # the reports and the state folder sit next to --results, not in the checkout
    assert (tmp_path / "out" / "report.html").is_file() and not (backend / ".ootest").exists()

    shards = []
    for i in (1, 2):
        out = tmp_path / f"shard{i}.jsonl"
        r = ootest(
            "run", "ci/suite.yaml", "--shard", f"{i}/2", "--durations", str(res),
            "--results", str(out), cwd=backend, env=_env(torch_root),
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        shards.append({str(x["variant_id"]) for x in _results(out)})
    assert shards[0] | shards[1] == IDS and not shards[0] & shards[1]
    assert shards[0] and shards[1]
    assert sorted(os.listdir(backend)) == ["ci", "pytest.ini"]  # nothing written there
