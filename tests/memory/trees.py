"""Synthetic test trees for the memory tests, written into a temporary folder.

``OLD`` and ``NEW`` are two versions of one upstream-style tree (real
``torch.testing._internal`` machinery: ``instantiate_device_type_tests``, ``@ops``
over a local op database of real ``OpInfo`` objects, ``@dtypes``). Between them:
a test added, a test removed, a body changed, a decorator changed, a helper
changed, one OpInfo entry changed, and a test only reformatted (which must not
count). ``test_broken.py`` fails to import in both.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ootest

LOCAL_OPS = '''
"""A local op database: real OpInfo entries, as upstream writes them."""
import torch
from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput
from torch.testing._internal.common_device_type import tol, toleranceOverride


def sample_inputs_binary(op, device, dtype, requires_grad, **kwargs):
    a = torch.ones(3, device=device, dtype=dtype)
    yield SampleInput(a, args=(a,))


local_op_db = [
    OpInfo("add", op=torch.add, dtypes=(torch.float32, torch.float64),
           sample_inputs_func=sample_inputs_binary),
    OpInfo("mul", op=torch.mul, dtypes=(torch.float32, torch.float64),
           sample_inputs_func=sample_inputs_binary{mul_extra}),
    OpInfo("sub", op=torch.sub, dtypes=(torch.float32, torch.float64),
           sample_inputs_func=sample_inputs_binary),
]
'''

MUL_CHANGE = (
    ",\n           decorators=(DecorateInfo(toleranceOverride("
    "{torch.float32: tol(atol=1e-3, rtol=1e-3)}), 'TestAlpha', 'test_op_runs'),)"
)

ALPHA_OLD = '''
"""Alpha: device-generic tests in upstream style."""
import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_utils import TestCase, run_tests

from local_ops import local_op_db


def _scale(t):
    return t * 2


def _double(t):
    # goes through _scale on purpose
    return _scale(t)


class TestAlpha(TestCase):
    @ops(local_op_db, allowed_dtypes=(torch.float32,))
    def test_op_runs(self, device, dtype, op):
        """Every sample input of the op runs on the device."""
        for sample in op.sample_inputs(device, dtype):
            op(sample.input, *sample.args)

    @dtypes(torch.float32, torch.float64)
    def test_double(self, device, dtype):
        """Doubling through the helper matches a multiplication."""
        t = torch.ones(2, device=device, dtype=dtype)
        self.assertEqual(_double(t), t * 2)

    @dtypes(torch.float32)
    def test_body_changes(self, device, dtype):
        x = torch.zeros(1, device=device, dtype=dtype)
        self.assertEqual(x.sum().item(), 0)

    @dtypes(torch.float32)
    def test_removed(self, device, dtype):
        pass

    @dtypes(torch.float32, torch.int64)
    def test_decorated(self, device, dtype):
        self.assertTrue(True)

    @dtypes(torch.float32)
    def test_formatting(self, device, dtype):
        y = [1,2,3]
        self.assertEqual(len(y), 3)


instantiate_device_type_tests(TestAlpha, globals(), only_for="cpu")

if __name__ == "__main__":
    run_tests()
'''

ALPHA_NEW = '''
"""Alpha: device-generic tests in upstream style."""
import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_utils import TestCase, run_tests

from local_ops import local_op_db


def _scale(t):
    return t + t


def _double(t):
    # goes through _scale on purpose
    return _scale(t)


class TestAlpha(TestCase):
    @ops(local_op_db, allowed_dtypes=(torch.float32,))
    def test_op_runs(self, device, dtype, op):
        """Every sample input of the op runs on the device."""
        for sample in op.sample_inputs(device, dtype):
            op(sample.input, *sample.args)

    @dtypes(torch.float32, torch.float64)
    def test_double(self, device, dtype):
        """Doubling through the helper matches a multiplication."""
        t = torch.ones(2, device=device, dtype=dtype)
        self.assertEqual(_double(t), t * 2)

    @dtypes(torch.float32)
    def test_body_changes(self, device, dtype):
        x = torch.zeros(2, device=device, dtype=dtype)
        self.assertEqual(x.sum().item(), 0)

    @dtypes(torch.float32)
    def test_added(self, device, dtype):
        self.assertEqual(torch.ones(1, device=device, dtype=dtype).item(), 1)

    @dtypes(torch.float32, torch.int32)
    def test_decorated(self, device, dtype):
        self.assertTrue(True)

    @dtypes(torch.float32)
    def test_formatting(self, device, dtype):
        """Now with a docstring, a comment and another layout: not a change."""
        y = [
            1,
            2,
            3,  # three
        ]
        self.assertEqual(len(y), 3)


instantiate_device_type_tests(TestAlpha, globals(), only_for="cpu")

if __name__ == "__main__":
    run_tests()
'''

BETA = '''
"""Beta: a plain unittest file."""
from torch.testing._internal.common_utils import TestCase, run_tests


def make_widget(n):
    return list(range(n))


class TestBeta(TestCase):
    def test_flies(self):
        """A zeppelin made by the widget factory flies."""
        self.assertEqual(len(make_widget(3)), 3)

    def test_lands(self):
        self.assertTrue(True)


if __name__ == "__main__":
    run_tests()
'''

BROKEN = """
import does_not_exist_anywhere  # fails at import: the build must go on


def test_never():
    pass
"""


def write_tree(root: Path, *, new: bool) -> Path:
    """An old or new version of the upstream-style tree; returns its ``test`` folder."""
    test = root / "test"
    test.mkdir(parents=True)
    (test / "local_ops.py").write_text(LOCAL_OPS.format(mul_extra=MUL_CHANGE if new else ""))
    (test / "test_alpha.py").write_text(ALPHA_NEW if new else ALPHA_OLD)
    (test / "test_beta.py").write_text(BETA)
    (test / "test_broken.py").write_text(BROKEN)
    return test


def vid(method: str, axes: str) -> str:
    return f"test/test_alpha.py::TestAlpha::{method}[{axes},device=cpu]"


# ---------------------------------------------------------------- torch-free trees
PLAIN_A = '''
"""Plain pytest tests: no torch needed to collect them."""
import pytest


def helper(x):
    return x + 1


class TestPlain:
    def test_one(self):
        """The helper adds one to a kumquat count."""
        assert helper(1) == 2


@pytest.mark.parametrize("n", [1, 2, 3])
def test_many(n):
    assert helper(n) > n
'''

PLAIN_B = """
def test_b1():
    assert True


def test_b2():
    assert 1 + 1 == 2
"""

CRASH = """
import ctypes

ctypes.string_at(0)  # segfaults while pytest imports the file


def test_never():
    pass
"""


def write_plain(root: Path, *, crash: bool = False) -> Path:
    tests = root / "tests"
    tests.mkdir(parents=True)
    (tests / "test_a.py").write_text(PLAIN_A)
    (tests / "test_b.py").write_text(PLAIN_B)
    (tests / "util.py").write_text("VALUE = 1\n")
    if crash:
        (tests / "test_crash.py").write_text(CRASH)
    return tests


def build_index(root: Path, db: Path, *extra: str) -> dict[str, object]:
    """``ootest index build --json`` of ``root`` with the tree's local op database
    (``local_ops:local_op_db``) instead of torch's; its JSON report."""
    r = ootest(
        "index", "build", "--root", str(root), "--db", str(db),
        "--no-torch-db", "--opdb", "local_ops:local_op_db", "--json", *extra,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data
