"""docs/your-backend.md end to end, on a backend nobody wrote for ootest's sake:
the ``tiny`` test backend (tests/backends: its own distribution with a
``torch.backends`` entry point, a few kernels, several ``out=`` only, no declared
dtypes, a dtype conversion that copies raw bytes, ``pin_memory()`` that kills
the process). Only the documented commands, no ``--supported``, no ``--dtypes``,
no environment variable set by hand: the op capture on ``emu:full`` runs in the
same environment (ootest keeps torch's autoload out of its emu children).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import ootest, run

_SUITE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestTiny(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_add(self, device, dtype):
        x = torch.arange(6, dtype=dtype).reshape(2, 3).to(device)
        self.assertEqual((x + x).cpu(), torch.arange(6, dtype=dtype).reshape(2, 3) * 2)

    def test_abs(self, device):
        x = torch.tensor([-1.5, 2.0, -3.0]).to(device)
        self.assertEqual(torch.abs(x).cpu(), torch.tensor([1.5, 2.0, 3.0]))

    def test_sort(self, device):
        x = torch.tensor([3.0, 1.0, 2.0]).to(device)
        self.assertEqual(torch.sort(x).values.cpu(), torch.tensor([1.0, 2.0, 3.0]))

    def test_to_double(self, device):
        x = torch.tensor([1.0, 2.0, 3.0], device=device)
        self.assertEqual(x.to(torch.float64).cpu(), torch.tensor([1.0, 2.0, 3.0]).double())

    def test_pinned_copy(self, device):
        host = torch.ones(3).pin_memory()
        self.assertEqual(host.to(device).cpu(), torch.ones(3))


instantiate_device_type_tests(TestTiny, globals())

if __name__ == "__main__":
    run_tests()
"""

ID = "test_tiny.py::TestTiny::"


def test_a_third_party_backend_from_pip_install_to_a_reviewed_config(
    tmp_path: Path, tinydev_env: dict[str, str]
) -> None:
    (tmp_path / "test_tiny.py").write_text(_SUITE)
    # the backend's own test tree: file keys and config paths are relative to it
    env = {**tinydev_env, "TORCH_DEVICE_ROOT": str(tmp_path)}

    def cli(*args: str) -> str:
        r = ootest(*args, cwd=tmp_path, env=env)
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
        return r.stdout + r.stderr

    # 1. the op map, captured on emu:full beside the installed backend
    out = cli("ops", "capture", "test_tiny.py", "--device", "emu:full", "--db", "ops.db", "-q")
    assert out.count("TORCH_DEVICE_BACKEND_AUTOLOAD=0") == 1
    # 2. the variants for the backend, named the way torch autoloads it
    r = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py",
             "--collect-only", "--ootest-device", "tiny", "--ootest-variants", "v.jsonl"],
            cwd=tmp_path, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # 3. the recorded calls replayed on the backend against the CPU
    cli("ops", "replay", "--db", "ops.db", "--device", "tiny", "--out", "replay.jsonl", "-q")
    # 4. decided from what the backend registers (probed) and what the replay saw
    cli("select", "run", "--variants", "v.jsonl", "--ops", "ops.db", "--device", "tiny",
        "--replay", "replay.jsonl", "--root-var", "TORCH_DEVICE_ROOT",
        "--out", "suite.yaml")  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "suite.evidence.jsonl").read_text().splitlines()]
    got = {
        r["decision"]["variant_id"].removeprefix(ID): (
            r["decision"]["mode"],
            r["decision"]["reason"],
        )
        for r in rows
    }
    text = (tmp_path / "suite.yaml").read_text()
    assert "# backend: probed tiny (torch " in text
    assert "  device: tiny\n" in text
    # out= kernels serve add and abs; float64 is declared by nobody and runs
    assert got["test_add[dtype=float32]"] == ("mandatory_success", "ops_supported")
    assert got["test_add[dtype=float64]"] == ("mandatory_success", "ops_supported")
    assert got["test_abs"] == ("mandatory_success", "ops_supported")
    # no kernel for sort
    assert got["test_sort"][0] == "skip" and got["test_sort"][1].startswith("op_unsupported:")
    # the silent wrong conversion: no declaration shows it, the replay does
    assert got["test_to_double"][0] == "xfail"
    assert got["test_to_double"][1].startswith("replay_mismatch:"), got["test_to_double"]
    # 5. run it; the host-side crash is survived
    r = ootest("run", "suite.yaml", "--results", "r1.jsonl", "--timeout", "60", "-q",
               cwd=tmp_path, env=env)  # fmt: skip
    results = {}
    for line in (tmp_path / "r1.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "result" and rec.get("phase") != "collect":
            results[str(rec["variant_id"]).removeprefix(ID)] = rec["outcome"]
    for name, (mode, _) in got.items():
        if mode == "mandatory_success" and name != "test_pinned_copy":
            assert results[name] == "passed", (name, results)
    assert results["test_to_double"] == "xfailed"
    assert results["test_sort"] == "skipped"
    if got["test_pinned_copy"][0] != "skip":
        assert results["test_pinned_copy"] == "crashed", results  # isolated: the run went on
        # 6. refine from what happened: the crash becomes a skip with its signal
        cli("select", "refine", "suite.yaml", "--results", "r1.jsonl")
        again = [
            json.loads(x) for x in (tmp_path / "suite.evidence.jsonl").read_text().splitlines()
        ]
        pin = next(
            r["decision"] for r in again if r["decision"]["variant_id"].endswith("pinned_copy")
        )
        assert (pin["mode"], pin["reason"].split(":")[0]) == ("skip", "observed_crashed")
    r = ootest("run", "suite.yaml", "--results", "r2.jsonl", "--timeout", "60", "-q",
               cwd=tmp_path, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
