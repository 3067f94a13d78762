from __future__ import annotations

import pytest

from ootest.errors import UserError
from ootest.opmap.names import OpName, SupportSet, parse_op


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("aten::add.Tensor", OpName("aten", "add", "Tensor")),
        ("aten.add.Tensor", OpName("aten", "add", "Tensor")),
        ("torch.ops.aten.add.Tensor", OpName("aten", "add", "Tensor")),
        ("add.Tensor", OpName("aten", "add", "Tensor")),
        ("aten::add", OpName("aten", "add", None)),
        ("add", OpName("aten", "add", None)),
        ("aten.add", OpName("aten", "add", None)),
        ("aten.add.default", OpName("aten", "add", "")),
        ("aten::empty_strided.default", OpName("aten", "empty_strided", "")),
        ("prims::convert_element_type", OpName("prims", "convert_element_type", None)),
        ("  add_.Scalar ", OpName("aten", "add_", "Scalar")),
    ],
)
def test_spellings(text: str, expected: OpName) -> None:
    assert parse_op(text) == expected


def test_default_overload_prints_as_the_recorded_name() -> None:
    assert str(parse_op("aten.empty_strided.default")) == "aten::empty_strided"
    assert str(parse_op("add.Tensor")) == "aten::add.Tensor"
    assert parse_op("add").packet == "aten::add"


@pytest.mark.parametrize("bad", ["", "aten::", "add.", "nn.functional.relu", "1add", "a b"])
def test_bad_names_are_user_errors(bad: str) -> None:
    with pytest.raises(UserError) as e:
        parse_op(bad)
    assert str(e.value) == (
        f"expected an op name such as 'aten::add.Tensor', 'aten::add' or 'add'; found {bad!r}"
    )


def test_support_rule_follows_emu() -> None:
    s = SupportSet.from_names(["add", "fill_", "cumsum.out", "aten::mm"], "t")
    covered = [
        "aten::add.Tensor",
        "aten::add",
        "aten::add_.Tensor",  # add covers the in-place packet, as emu does
        "aten::fill_.Scalar",
        "aten::cumsum.out",
        "aten::mm",
        "aten::mm_",  # a namespaced packet covers its in-place packet too
    ]
    not_covered = [
        "aten::fill.Scalar",  # fill_ does not cover fill
        "aten::cumsum",  # an overload covers only itself
        "aten::addmm",
        "prims::add",
    ]
    assert [n for n in covered if not s.covers(n)] == []
    assert [n for n in not_covered if s.covers(n)] == []


def test_always_and_everything() -> None:
    s = SupportSet.from_names([], "t", always=["view", "empty.memory_format"])
    assert s.covers("aten::view") and s.covers("aten::empty.memory_format")
    assert not s.covers("aten::view.dtype") and not s.covers("aten::empty.names")
    assert SupportSet.from_names(["*"], "t").covers("aten::anything.at_all")


def test_with_rule_adds_one_rule() -> None:
    s = SupportSet.from_names(["add"], "t").with_rule("aten::cumsum")
    assert s.covers("aten::cumsum.out") and s.covers("aten::add.Tensor")
    assert not s.covers("aten::mul.Tensor")
