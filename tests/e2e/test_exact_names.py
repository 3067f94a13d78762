"""Subprocess tier on emu: a Python reference (``_refs.abs``) beside its op
(``abs``) and ``norm.nuc`` beside ``norm``, each named exactly by a config
``ootest select`` generated, and each run under its own decision (Note [Exact op
filters]; issue 33 item 1). The fixture is our own upstream-style file over real
``op_db`` and ``python_ref_db`` entries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import ootest

PAIRS = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db, python_ref_db
from torch.testing._internal.common_utils import TestCase, run_tests

# An op beside its Python reference, and an OpInfo beside a variant of the same name.
PAIRS = [o for o in op_db + python_ref_db
         if o.name in ("abs", "_refs.abs", "norm") and o.variant_test_name in ("", "nuc")]


class TestPairs(TestCase):
    @ops(PAIRS, allowed_dtypes=(torch.float32,))
    def test_pair(self, device, dtype, op):
        # the plain ops fail on the device, their siblings pass
        if op.name in ("abs", "norm") and op.variant_test_name == "":
            raise RuntimeError(f"{op.name} differs on the device")


instantiate_device_type_tests(TestPairs, globals())

if __name__ == "__main__":
    run_tests()
"""

EVERYTHING = """
test_suite_config:
  device: emu:full
  files:
    - path: ${TORCH_ROOT}/test/test_pairs.py
      unlisted_test_mode: mandatory_success
"""

T = "TestPairs::test_pair"


def _results(path: Path) -> dict[str, dict[str, object]]:
    recs = (json.loads(x) for x in path.read_text().splitlines())
    return {r["variant_id"].split("::", 1)[1]: r for r in recs if r["kind"] == "result"}


def test_a_generated_config_names_a_python_ref_and_its_op_apart(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_pairs.py").write_text(PAIRS)
    (tmp_path / "all.yaml").write_text(EVERYTHING)
    env = {"TORCH_ROOT": str(tmp_path), "OOTEST_CACHE_DIR": str(tmp_path / "cache")}
    first = ootest(
        "run", "all.yaml", "--results", "r1.jsonl", "--", "--ootest-variants", "v.jsonl",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    ran = _results(tmp_path / "r1.jsonl")
    assert {k: r["outcome"] for k, r in ran.items()} == {
        f"{T}[op=abs,dtype=float32]": "failed",
        f"{T}[op=_refs.abs,dtype=float32]": "passed",
        f"{T}[op=norm,dtype=float32]": "failed",
        f"{T}[op=norm.nuc,dtype=float32]": "passed",
    }
    dump = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [v["id_exact"] for v in dump if v["kind"] == "variant"] == [True] * 4

    # two clean runs make a pass mandatory (the second run's results: the same outcomes)
    shutil.copy(tmp_path / "r1.jsonl", tmp_path / "r2.jsonl")
    (tmp_path / "sup.txt").write_text("aten::abs\n")
    sel = ootest(
        "select", "run", "--variants", "v.jsonl", "--results", "r1.jsonl", "--results",
        "r2.jsonl", "--supported", "sup.txt", "--dtypes", "float32", "--out", "suite.yaml",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert sel.returncode == 0, sel.stdout[-3000:] + sel.stderr[-3000:]
    text = (tmp_path / "suite.yaml").read_text()
    # each variant by its own exact name: the failing op's entry comes after its
    # passing sibling's, so a name reaching both would give the sibling its xfail
    mandatory = text.index(f'- "{T}[op=_refs.abs,dtype=float32]"')
    assert text.index(f'- "{T}[op=norm.nuc,dtype=float32]"') > mandatory
    assert text.index(f'- "{T}[op=abs,dtype=float32]"') > mandatory
    assert text.index(f'- "{T}[op=norm,dtype=float32]"') > mandatory

    second = ootest("run", "suite.yaml", "--device", "emu:full", "--results", "r3.jsonl",
                    cwd=tmp_path, env=env)  # fmt: skip
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    ran = _results(tmp_path / "r3.jsonl")
    got = {k: (r["outcome"], r["mode"], r.get("code")) for k, r in ran.items()}
    assert got == {
        f"{T}[op=abs,dtype=float32]": ("xfailed", "xfail_strict", "observed_fail"),
        f"{T}[op=_refs.abs,dtype=float32]": ("passed", "mandatory_success", "observed_pass"),
        f"{T}[op=norm,dtype=float32]": ("xfailed", "xfail_strict", "observed_fail"),
        f"{T}[op=norm.nuc,dtype=float32]": ("passed", "mandatory_success", "observed_pass"),
    }
