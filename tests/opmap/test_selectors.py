"""Torch Spyre selectors decided from op evidence (pure: no store, no pytest run)."""

from __future__ import annotations

from typing import Any

import pytest

from ootest.config.model import Selectors
from ootest.opmap.names import SupportSet
from ootest.opmap.selectors import Evidence, Facts, SelectorSet

SUPPORT = SupportSet.from_names(["add", "mm", "empty_strided"], "test")


def sel(block: dict[str, Any]) -> SelectorSet:
    return SelectorSet.compile(Selectors.model_validate(block), SUPPORT)


def facts(
    ops: set[str] | None,
    *,
    dep: bool = False,
    partial: bool = False,
    marks: tuple[str, ...] = (),
    names: tuple[str, ...] = ("test_x",),
) -> Facts:
    ev = None if ops is None else Evidence(frozenset(ops), dep, partial)
    return Facts(ev, frozenset(marks), names)


MM = {"aten::mm", "aten::empty_strided"}
CUMSUM = {"aten::cumsum.out", "aten::add.Tensor"}

SPYRE = {"include": [{"has_ops": True, "ops_in_supported": True}]}


@pytest.mark.parametrize(
    ("case", "f", "selected", "unknown"),
    [
        ("all ops supported", facts(MM), True, False),
        ("an unsupported op", facts(CUMSUM), False, False),
        ("calls no op", facts(set()), False, False),
        ("not in the op map", facts(None), True, True),
        ("ops may differ per device", facts(CUMSUM, dep=True), True, True),
        # a partial set proves a positive (an unsupported op), never a negative
        ("partial, unsupported op seen", facts(CUMSUM, partial=True), False, False),
        ("partial, all seen supported", facts(MM, partial=True), True, True),
    ],
)
def test_spyre_include_block(case: str, f: Facts, selected: bool, unknown: bool) -> None:
    v = sel(SPYRE).decide(f)
    assert (v.selected, v.unknown) == (selected, unknown), case


def test_has_ops_list_matches_overloads_and_packets() -> None:
    packet = sel({"include": [{"has_ops": ["cumsum"]}]})
    overload = sel({"include": [{"has_ops": ["aten::add.Tensor"]}]})
    other = sel({"include": [{"has_ops": ["aten::add.Scalar", "mul"]}]})
    assert packet.decide(facts(CUMSUM)).selected  # aten::cumsum.out is of packet cumsum
    assert overload.decide(facts(CUMSUM)).selected
    assert not other.decide(facts(CUMSUM)).selected
    assert not packet.decide(facts(MM)).selected
    assert other.decide(facts(MM, partial=True)) == (True, True, "", "")  # may call mul later


def test_exclude_and_unknowns_keep_variants() -> None:
    s = sel({"exclude": [{"has_ops": False}, {"markers": ["slow"]}]})
    assert s.decide(facts(set())).why == "exclude[0] matches"
    assert s.decide(facts(MM, marks=("slow",))).why == "exclude[1] matches"
    assert s.decide(facts(MM)).selected
    assert s.decide(facts(None)) == (True, True, "", "")  # no evidence: not excluded
    assert s.decide(facts(set(), partial=True)).selected  # may call ops after it stopped


def test_and_within_an_item_or_between_items() -> None:
    s = sel(
        {
            "include": [
                {"markers": ["cuda"], "name_patterns": ["test_conv*"]},
                {"name_patterns": ["TestA::test_keep"]},
            ]
        }
    )
    assert s.decide(facts(None, marks=("cuda",), names=("test_conv2d_emu",))).selected
    assert not s.decide(facts(None, marks=("cuda",), names=("test_linear",))).selected
    assert not s.decide(facts(None, names=("test_conv2d_emu",))).selected
    assert s.decide(facts(None, names=("test_keep", "TestA::test_keep"))).selected
    # markers and names never need evidence: nothing is unknown here
    assert not s.decide(facts(None, names=("test_keep",))).unknown


def test_no_supported_ops_declared_allows_every_op() -> None:
    everything = SupportSet("cfg", everything=True)
    s = SelectorSet.compile(Selectors.model_validate(SPYRE), everything)
    assert s.decide(facts(CUMSUM)).selected
    assert s.needs_evidence and not sel({"include": [{"markers": ["x"]}]}).needs_evidence
