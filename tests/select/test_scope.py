"""Scope: which test files are worth analysing for a backend, and why.

The combination logic runs on made-up detection results (no torch); one test
probes the real emu device in a child process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ootest.cli.main import main
from ootest.errors import UserError
from ootest.select.scope import Detection, Prefs, Selection, classify, file_info
from tests.conftest import ROOT, ootest

DEVICE = """import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDA
from torch.testing._internal.common_utils import TestCase


{deco}class TestX(TestCase):
    def test_a(self, device):
        pass


instantiate_device_type_tests(TestX, globals(){extra})
"""
PLAIN = """from torch.testing._internal.common_utils import TestCase


class TestP(TestCase):
    def test_p(self):
        pass
"""
DISTRIBUTED = """import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase


class TestPG(MultiProcessTestCase):
    def test_allreduce(self):
        pass
"""
OPEN_REG = """import torch


def test_rename():
    torch.utils.rename_privateuse1_backend("foo")
"""

TREE = {
    "test_ops_like.py": DEVICE.format(deco="", extra=""),
    "test_cpu_only.py": PLAIN,
    "test_cuda_only.py": DEVICE.format(deco="", extra=', only_for="cuda"'),
    "test_not_here.py": DEVICE.format(deco="", extra=', except_for=("privateuse1",)'),
    "test_gated.py": DEVICE.format(deco="@onlyCUDA\n", extra=""),
    "test_autograd_x.py": DEVICE.format(deco="", extra=""),
    "test_sparse_x.py": DEVICE.format(deco="", extra=""),
    "distributed/test_c10d_x.py": DISTRIBUTED,
    "inductor/test_fusion.py": PLAIN,
    "test_open_reg.py": OPEN_REG,
    "test_broken.py": "def test_x(:\n",
    "helpers.py": "X = 1\n",  # not a test file: not listed
}


def write_tree(root: Path) -> Path:
    test = root / "test"
    for name, text in TREE.items():
        (test / name).parent.mkdir(parents=True, exist_ok=True)
        (test / name).write_text(text)
    return test


def det(**kw: object) -> Detection:
    base: dict[str, object] = {
        "device": "emu:young",
        "name": "emu",
        "torch": "2.13.0",
        "keys": {"PrivateUse1": ["aten::add.Tensor", "aten::mm"], "AutogradPrivateUse1": []},
    }
    return Detection(**{**base, **kw})  # type: ignore[arg-type]


def scoped(det: Detection, prefs: Prefs | None = None) -> dict[str, tuple[str, bool, str]]:
    out = {}
    for name, text in TREE.items():
        if name.rpartition("/")[2].startswith("test_"):
            s = classify(file_info(f"test/{name}", text.encode(), det.name), det, prefs or Prefs())
            out[name] = (s.area, s.in_scope, s.why)
    return out


def test_detection_and_files_decide_scope_each_with_its_reason() -> None:
    s = scoped(det())
    assert {k: v[:2] for k, v in s.items()} == {
        "test_ops_like.py": ("ops", True),
        "test_cpu_only.py": ("ops", False),
        "test_cuda_only.py": ("ops", False),
        "test_not_here.py": ("ops", False),
        "test_gated.py": ("ops", False),
        "test_autograd_x.py": ("autograd", True),
        "test_sparse_x.py": ("sparse", False),
        "distributed/test_c10d_x.py": ("distributed", False),
        "inductor/test_fusion.py": ("compile", False),
        "test_open_reg.py": ("ops", True),
        "test_broken.py": ("ops", True),  # unreadable here is unknown: it runs
    }
    assert s["test_ops_like.py"][2] == (
        "tests instantiated for the device (TestX); the backend registers 2 PrivateUse1 kernels"
    )
    assert s["test_autograd_x.py"][2].endswith(
        "PyTorch's generic autograd kernels run on its 2 PrivateUse1 kernels"
    )
    assert s["test_cpu_only.py"][2] == "no tests instantiated for devices: they run on the CPU only"
    assert s["test_cuda_only.py"][2] == (
        "its device-generic tests are kept off the device (TestX: instantiated only for cuda)"
    )
    assert "TestX: @onlyCUDA keeps it off the device" in s["test_gated.py"][2]
    assert "instantiated except for it" in s["test_not_here.py"][2]
    assert s["distributed/test_c10d_x.py"][2] == "no ProcessGroup backend is registered for 'emu'"
    assert s["test_sparse_x.py"][2] == "no SparsePrivateUse1 or SparseCsrPrivateUse1 kernel"
    assert s["test_broken.py"][2].startswith("it does not parse here (SyntaxError")
    assert s["test_broken.py"][2].endswith("its tests cannot be read, kept in")

    # a backend hooking more: its areas come in
    more = scoped(
        det(
            keys={"PrivateUse1": ["aten::add.Tensor"], "SparsePrivateUse1": ["aten::add.Tensor"]},
            compile=["inductor: codegen registered for 'emu' (EmuScheduling)"],
            distributed="emupg",
        )
    )
    assert more["test_sparse_x.py"][:2] == ("sparse", True)
    assert more["distributed/test_c10d_x.py"] == (
        "distributed",
        True,
        "ProcessGroup backend 'emupg' for 'emu'",
    )
    assert more["inductor/test_fusion.py"][1] is True
    # nothing registered: nothing in scope
    assert not any(v[1] for v in scoped(det(keys={"PrivateUse1": []})).values())


def test_preferences_win_the_most_specific_first() -> None:
    prefs = Prefs(
        include=Selection(areas=("distributed",), folders=("test/inductor",)),
        exclude=Selection(areas=("autograd",), folders=("test",), files=("test_x",)),
        source="scope.yaml",
    )
    # test/ excluded as a folder, but include.folders test/inductor is longer
    s = scoped(det(), prefs)
    assert s["inductor/test_fusion.py"] == (
        "compile",
        True,
        "included by scope.yaml (include.folders: test/inductor); detection: no torch.compile "
        "backend is registered for 'emu' (no Inductor codegen, dynamo backend or entry point)",
    )
    assert s["test_ops_like.py"][1] is False and s["test_ops_like.py"][2].startswith(
        "excluded by scope.yaml (exclude.folders: test); detection: tests instantiated"
    )
    files = Prefs(
        include=Selection(files=("test/test_cpu_only.py",), areas=("distributed",)),
        exclude=Selection(areas=("autograd",), files=("test/test_ops_like.py",)),
    )
    s = scoped(det(), files)
    assert s["test_cpu_only.py"][1] is True and s["test_ops_like.py"][1] is False
    assert s["test_autograd_x.py"][2].startswith(
        "excluded by preferences (exclude.areas: autograd)"
    )
    assert s["distributed/test_c10d_x.py"][1] is True  # the team wants it, detection aside


def test_scope_command_writes_reviewable_yaml_that_select_run_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    root = write_tree(tmp_path / "torch")
    (tmp_path / "det.json").write_text(json.dumps({**det().__dict__}))
    (tmp_path / "scope.yaml").write_text(
        "include:\n  areas: [distributed]\nexclude:\n  files: [test/test_autograd_x.py]\n"
        "notes: |\n  We care about training workloads.\n"
    )
    args = ["select", "scope", "--detected", "det.json", "--root", str(root)]
    assert main([*args, "--prefs", "scope.yaml", "--out", "out.yaml"]) == 0
    err = capsys.readouterr().err
    assert "ootest: scope: 4 of 11 test files in scope for emu:young -> out.yaml" in err
    text = (tmp_path / "out.yaml").read_text()
    assert text.startswith("# ootest select scope: the test files worth analysing for emu:young")
    doc = yaml.safe_load(text)
    assert [f["path"] for f in doc["files"]] == [
        "test/distributed/test_c10d_x.py",
        "test/test_broken.py",
        "test/test_open_reg.py",
        "test/test_ops_like.py",
    ]
    assert all(f["why"] for f in doc["files"] + doc["excluded"])
    assert doc["preferences"]["notes"] == "We care about training workloads."
    assert doc["areas"]["compile"]["hooked"] is False
    assert doc["detected"]["kernels"]["PrivateUse1"] == 2

    # select run --scope reads it: files left out are skipped, naming their area
    variants = tmp_path / "v.jsonl"
    variants.write_text(
        "".join(
            json.dumps({"kind": "variant", "variant_id": v, "device_variant": True}) + "\n"
            for v in (
                "test/test_ops_like.py::TestX::test_a",
                "test/test_sparse_x.py::TestX::test_a",
            )
        )
    )
    assert main(["select", "run", "--variants", str(variants), "--scope", "out.yaml",
                 "--out", "s.yaml"]) == 0  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "s.evidence.jsonl").read_text().splitlines()]
    assert [r["decision"]["reason"] for r in rows] == ["no_evidence", "out_of_scope:sparse"]


def test_only_what_the_scope_excluded_is_out_and_the_run_counts_the_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: a file missing from the scope (added upstream after it was written)
    # was skipped as out of scope: unknown meant skip
    monkeypatch.chdir(tmp_path)
    Path("scope.yaml").write_text(
        "files:\n  - {path: test/test_a.py, area: ops, why: x}\n"
        "excluded:\n  - {path: test/test_b.py, area: compile, why: y}\n"
    )
    Path("keys.txt").write_text("test/test_a.py\n!test/test_b.py\n")
    files = ("test_a", "test_b", "test_new", "test_newer")
    Path("v.jsonl").write_text(
        "".join(
            json.dumps({"kind": "variant", "variant_id": f"test/{f}.py::T::t",
                        "device_variant": True}) + "\n"
            for f in files
        )
    )  # fmt: skip
    for scope, out in (("scope.yaml", "compile"), ("keys.txt", "file not in scope")):
        capsys.readouterr()
        argv = ["select", "run", "--variants", "v.jsonl", "--scope", scope, "--out", "s.yaml"]
        assert main(argv) == 0
        rows = [json.loads(x) for x in Path("s.evidence.jsonl").read_text().splitlines()]
        got = {r["evidence"]["variant_id"][5:-9]: r["decision"]["reason"] for r in rows}
        assert got == {
            "test_a": "no_evidence",
            "test_b": f"out_of_scope:{out}",
            "test_new": "no_evidence",
            "test_newer": "no_evidence",
        }
        assert (
            f"ootest: scope: 2 files are not named in {scope} (added after it was written?); "
            "decided as in scope: test/test_new.py, test/test_newer.py"
        ) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("include:\n  areas: [opz]\n", "scope.yaml:2: include.areas.0: unknown area 'opz'; "
         "expected one of ops, autograd, compile, distributed, sparse, quantized, nested"),
        ("exclude:\n  dirs: [x]\n", "scope.yaml:2: exclude.dirs: unknown key 'dirs'; "
         "expected areas, folders, files"),
        ("nots: x\n", "scope.yaml:1: nots: unknown key 'nots'; expected one of include, "
         "exclude, notes"),
        ("include: [ops]\n", "scope.yaml:1: include: expected a mapping with areas, folders, "
         "files"),
    ],
)  # fmt: skip
def test_bad_preferences_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    text: str, error: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path)
    (tmp_path / "det.json").write_text(json.dumps({**det().__dict__}))
    (tmp_path / "scope.yaml").write_text(text)
    rc = main(["select", "scope", "--detected", "det.json", "--root", "test",
               "--prefs", "scope.yaml"])  # fmt: skip
    assert (rc, capsys.readouterr().err) == (2, f"ootest: error: {error}\n")


def test_scope_probes_emu_in_a_child_process(tmp_path: Path) -> None:
    out = tmp_path / "scope.yaml"
    r = ootest(
        "select", "scope", "--device", "emu:young", "--root", str(ROOT / "examples" / "suite"),
        "--out", str(out), "--save-detected", str(tmp_path / "det.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    det = json.loads((tmp_path / "det.json").read_text())
    # emu registers its profile's ops one by one for PrivateUse1, nothing else
    ops = det["keys"]["PrivateUse1"]
    assert "aten::add.Tensor" in ops and "aten::empty_strided" in ops
    assert "aten::_scaled_mm" not in ops  # not in the young profile
    assert det["keys"]["AutogradPrivateUse1"] == [] and det["compile"] == []
    assert det["distributed"] is None and det["name"] == "emu"
    assert doc["detected"]["kernels"]["PrivateUse1"] == len(ops)
    assert [f["path"] for f in doc["files"]] == [
        "examples/suite/test_op_consistency.py",
        "examples/suite/test_tensor_basics.py",
    ]
    assert doc["areas"]["ops"]["hooked"] is True and doc["areas"]["distributed"]["hooked"] is False


def test_a_torch_root_without_tests_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # it said "--root /x/test: does not exist" though no --root was given
    monkeypatch.chdir(tmp_path)
    (tmp_path / "det.json").write_text(json.dumps({**det().__dict__}))
    (tmp_path / "pytorch").mkdir()
    monkeypatch.setenv("TORCH_ROOT", "pytorch")
    rc = main(["select", "scope", "--detected", "det.json"])
    assert (rc, capsys.readouterr().err) == (
        2,
        "ootest: error: select scope: pytorch/test (from the TORCH_ROOT environment variable, "
        "pytorch) does not exist; expected a PyTorch checkout whose test/ folder holds the "
        "tests; set TORCH_ROOT to one, or pass --root PATH\n",
    )
    # --root is named when it was given
    rc = main(["select", "scope", "--detected", "det.json", "--root", "elsewhere"])
    assert (rc, capsys.readouterr().err) == (
        2,
        "ootest: error: --root elsewhere: does not exist; expected a folder of test files\n",
    )


def test_scope_runs_from_python_without_the_cli(tmp_path: Path) -> None:
    """Issue 25 item 1: the scope is a function of its sources; the CLI only maps flags
    and prints. Same decisions as the command, files it cannot read passed to warn."""
    from ootest.select.scope import run_scope

    root = write_tree(tmp_path / "torch")
    (root / "test_fifo.py").symlink_to("/dev/zero")
    (tmp_path / "det.json").write_text(json.dumps({**det().__dict__}))
    warned: list[str] = []
    found = run_scope([root], detected=tmp_path / "det.json", warn=warned.append)
    assert found.detection.device == "emu:young"
    assert len(warned) == 1 and "test_fifo.py" in warned[0], warned
    assert found.inside == sum(s.in_scope for s in found.scoped) == 4
    assert found.text().startswith("# ootest select scope: the test files worth analysing")
    with pytest.raises(UserError, match="probed for emu:young, not emu:full"):
        run_scope([root], detected=tmp_path / "det.json", device="emu:full")
