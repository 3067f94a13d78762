"""Upstream's gating decorators, decided as torch 2.13's common_device_type.py
acts on a privateuse1 device (Note [Device gates]); pure, no torch."""

from __future__ import annotations

import sys

import pytest

from ootest.select.gates import gate, gated
from ootest.select.gather import Candidate, Sources, Support, gather
from ootest.select.rules import decide

SKIPS = [
    "@onlyCUDA",
    "@onlyCPU",
    "@onlyMPS",
    "@onlyXPU",
    "@onlyHPU",
    "@common_device_type.onlyCUDA",
    "@skipPRIVATEUSE1",
    "@skipPRIVATEUSE1If(True, 'no')",
    "@onlyOn('cuda')",
    "@onlyOn(['cuda', 'cpu'])",
    # _has_sufficient_memory raises SkipTest('Unknown device type') for any
    # device type but cpu, mps, cuda, xpu: checked on emu, it skips
    "@largeTensorTest('12GB')",
    "@largeTensorTest(1024, device='privateuse1')",
    "@unittest.skip('broken')",
    "@unittest.skipIf(True, 'x')",
]
RUNS = [
    "@onlyCUDAAndPRIVATEUSE1",  # upstream enables it for privateuse1 explicitly
    "@onlyPRIVATEUSE1",
    "@onlyAccelerator",
    "@onlyNativeDeviceTypes",  # NATIVE_DEVICES holds the privateuse1 backend's name
    "@onlyNativeDeviceTypesAnd(['hpu'])",
    "@onlyOn(['cuda', 'privateuse1'])",
    "@deviceCountAtLeast(1)",
    "@deviceCountAtLeast(2)",  # the device count is unknown here: run it
    "@skipPRIVATEUSE1If(not TEST_X, 'needs x')",  # a condition: unknown, run it
    "@unittest.skipIf(IS_WINDOWS, 'x')",
    "@largeTensorTest('4GB', device='cpu')",  # host memory: unknown, run it
    "@skipCUDAIf(True, 'x')",
    "@skipCPUIfNoLapack",
    "@skipMeta",
    "@skipXLA",
    "@skipMPS",
    "@skipCUDAIfRocm",
    "@expectedFailureCPU",
    "@dtypesIfPRIVATEUSE1(torch.float32)",
    "@ops(op_db)",
]


@pytest.mark.parametrize("deco", SKIPS)
def test_a_decorator_that_skips_on_privateuse1_is_an_upstream_skip(deco: str) -> None:
    assert gate(deco) is not None


@pytest.mark.parametrize("deco", RUNS)
def test_a_decorator_that_enables_or_may_run_it_is_no_skip(deco: str) -> None:
    assert gate(deco) is None


def test_onlyon_naming_the_backend_by_name_runs() -> None:
    assert gate("@onlyOn('emu')", "emu") is None
    assert gate("@onlyOn('emu')", "spyre") is not None
    assert gate("@largeTensorTest('1GB', device='cpu')", "emu") is None


def test_enabled_and_count_gated_tests_are_decided_by_their_ops() -> None:
    # before: both were upstream_skip, although upstream runs them on privateuse1
    cands = [
        Candidate("t.py::T::test_a", decorators=("@onlyCUDAAndPRIVATEUSE1",)),
        Candidate("t.py::T::test_b", decorators=("@deviceCountAtLeast(2)",)),
        Candidate("t.py::T::test_c", decorators=("@onlyCUDA",)),
    ]
    evs = gather(cands, Sources(), Support(), None)
    got = {ev.variant_id[-6:]: decide(ev).reason for ev in evs}
    assert got == {"test_a": "no_evidence", "test_b": "no_evidence", "test_c": "upstream_skip"}
    assert evs[2].upstream_skip == "@onlyCUDA: upstream runs it on cuda only"
    assert gated(["@dtypes(torch.float32)", "@largeTensorTest('8GB')"]) is not None
    assert "torch" not in sys.modules


def test_a_class_upstream_enables_for_privateuse1_is_in_scope() -> None:
    # before: a class decorated @onlyCUDAAndPRIVATEUSE1 was "kept off the device"
    from ootest.select.scope import Prefs, classify, file_info
    from tests.select.test_scope import DEVICE, det

    for deco, inside in (("@onlyCUDAAndPRIVATEUSE1\n", True), ("@onlyCUDA\n", False)):
        text = DEVICE.format(deco=deco, extra="")
        s = classify(file_info("test/test_x.py", text.encode(), "emu"), det(), Prefs())
        assert (deco, s.in_scope) == (deco, inside), s.why
