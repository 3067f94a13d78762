"""Entry fingerprints limited to the index's device (Note [Device-limited entry
fingerprints]): on emu, another device type's dtype lists and skips change no
variant; the generic fields of an entry change exactly that op's variants."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ootest
from tests.memory.trees import build_index

pytestmark = pytest.mark.slow  # three builds that load emu and import torch in the children

OPS = """
import unittest

import torch
from torch.testing._internal.common_dtype import floating_types, floating_types_and
from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput


def sample_inputs_binary(op, device, dtype, requires_grad, **kwargs):
    a = torch.ones(3, device=device, dtype=dtype)
    yield SampleInput(a, args=(a,))


def sample_inputs_scaled(op, device, dtype, requires_grad, **kwargs):
    a = torch.ones(3, device=device, dtype=dtype) * 2
    yield SampleInput(a, args=(a,))


local_op_db = [
    OpInfo("add", op=torch.add, dtypes=(torch.float32, torch.float64),
           sample_inputs_func=sample_inputs_binary{add_extra}),
    OpInfo("mul", op=torch.mul, dtypes=(torch.float32, torch.float64),
           sample_inputs_func={mul_sample}),
]
"""

# what only a CUDA or XPU device sees: its dtype lists and a skip for it
ADD_OTHER_DEVICES = (
    ",\n           dtypesIfCUDA=floating_types_and(torch.half), "
    "backward_dtypesIfCUDA=floating_types(),"
    "\n           dtypesIfXPU=floating_types_and(torch.bfloat16),"
    "\n           skips=(DecorateInfo(unittest.skip('not on cuda'), 'TestGamma', "
    "'test_op_runs', device_type='cuda'),)"
)

GAMMA = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase

from local_ops import local_op_db


class TestGamma(TestCase):
    @ops(local_op_db, allowed_dtypes=(torch.float32, torch.float64))
    def test_op_runs(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            op(sample.input, *sample.args)


instantiate_device_type_tests(TestGamma, globals())
"""


def write(root: Path, *, add_extra: str = "", mul_sample: str = "sample_inputs_binary") -> None:
    (root / "local_ops.py").write_text(OPS.format(add_extra=add_extra, mul_sample=mul_sample))


def build(root: Path, db: Path) -> dict[str, object]:
    return build_index(root, db, "--device", "emu:full")


def diff(old: Path, new: Path) -> dict[str, object]:
    r = ootest("index", "diff", str(old), str(new), "--json")
    assert r.returncode == 0, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_other_device_types_change_nothing_generic_fields_change_that_op(
    tmp_path: Path,
) -> None:
    root = tmp_path / "test"
    root.mkdir()
    (root / "test_gamma.py").write_text(GAMMA)
    write(root)
    base = tmp_path / "base.db"
    first = build(root, base)
    assert first["variants_total"] == 4  # add, mul x float32, float64 on emu

    # CUDA/XPU dtype lists and a CUDA skip: the entry's full digest changes, no variant's
    other = tmp_path / "other_devices.db"
    shutil.copy(base, other)
    write(root, add_extra=ADD_OTHER_DEVICES)
    report = build(root, other)
    assert (report["entries_changed"], report["variants_changed"]) == (0, 0)
    d = diff(base, other)
    assert (d["modified"], d["added"], d["removed"]) == ([], [], [])

    # the sample-input function every device uses: exactly mul's variants change
    generic = tmp_path / "generic.db"
    shutil.copy(other, generic)
    write(root, add_extra=ADD_OTHER_DEVICES, mul_sample="sample_inputs_scaled")
    report = build(root, generic)
    assert (report["entries_changed"], report["variants_changed"]) == (1, 2)
    d = diff(other, generic)
    modified = d["modified"]
    assert isinstance(modified, list)
    assert sorted((m["id"].split("[")[1], m["reasons"]) for m in modified) == [
        ("op=mul,dtype=float32]", ["opinfo:mul"]),
        ("op=mul,dtype=float64]", ["opinfo:mul"]),
    ]
