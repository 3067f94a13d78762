"""Moves (Note [Moves]): ``index diff`` pairs a removed variant with the added one
that is the same test under another name, and says what else changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.memory import IndexDiff, diff_indexes
from tests.select.upgrade_trees import build, moves_version

SORT, MISC, OTHER = "test/test_sort.py", "test/test_misc.py", "test/test_other.py"
PARAM = "test/test_param.py::TestParam"


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("moves")
    for new in (False, True):
        files, spec = moves_version(new)
        name = "new" if new else "old"
        build(base / name, base / f"{name}.db", files, spec)
    return base / "old.db", base / "new.db"


@pytest.fixture(scope="module")
def diff(dbs: tuple[Path, Path]) -> IndexDiff:
    return diff_indexes(*dbs)


def test_a_class_split_is_a_move_of_each_variant_whose_test_did_not_change(
    diff: IndexDiff,
) -> None:
    moved = {m.old: (m.new, m.reasons) for m in diff.moved}
    # the same body, decorators, helpers (setUp, assertIsOrdered: now members of
    # another class) and imports: the same test under another class's name
    for t in ("test_sort[dtype=float32]", "test_sort[dtype=float64]", "test_topk",
              "test_sort_stable_none"):  # fmt: skip
        assert moved[f"{SORT}::TestSort::{t}"] == (f"{SORT}::TestSortDevice::{t}", ())
    # changed on the way: removed and added, not moved
    assert f"{SORT}::TestSort::test_rewritten" in diff.removed
    assert f"{SORT}::TestSortDevice::test_rewritten" in diff.added


def test_a_test_moved_to_another_file_is_a_move_and_says_what_else_changed(
    diff: IndexDiff,
) -> None:
    moved = {m.old: (m.new, m.reasons) for m in diff.moved}
    # another file imports other names: what the test reaches is in its helpers
    assert moved[f"{MISC}::TestMisc::test_moved"] == (f"{OTHER}::TestOther::test_moved", ())
    # a plain test, moved and decorated: a move that is decided again
    assert moved[f"{MISC}::TestMiscPlain::test_plain_moved"] == (
        f"{OTHER}::TestOtherPlain::test_plain_moved",
        ("decorator",),
    )


def test_renamed_parametrizations_are_moves_when_the_inputs_are_the_same(
    diff: IndexDiff,
) -> None:
    moved = {m.old: (m.new, m.reasons) for m in diff.moved}
    # renamed subtests: paired by the values they name (subtest(1, name=...))
    assert moved[f"{PARAM}::test_param[x=one]"] == (f"{PARAM}::test_param[x=small]", ())
    assert moved[f"{PARAM}::test_param[x=two]"] == (f"{PARAM}::test_param[x=large]", ())
    assert moved[f"{PARAM}::test_single[n=n3]"] == (f"{PARAM}::test_single[n=three]", ())


def test_what_moved_is_neither_added_nor_removed_and_the_counts_say_so(
    diff: IndexDiff, dbs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(diff.moved) == 9
    assert diff.added == [f"{SORT}::TestSortDevice::test_rewritten"]
    assert diff.removed == [f"{SORT}::TestSort::test_rewritten"]
    assert diff.summary() == "11 of 12 variants changed: 9 moved, 1 added, 1 removed"
    capsys.readouterr()
    assert main(["index", "diff", str(dbs[0]), str(dbs[1])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == diff.summary()
    assert (
        f"> {MISC}::TestMiscPlain::test_plain_moved -> "
        f"{OTHER}::TestOtherPlain::test_plain_moved  (decorator)"
    ) in out
    assert f"> {SORT}::TestSort::test_topk -> {SORT}::TestSortDevice::test_topk" in out
    assert main(["index", "diff", str(dbs[0]), str(dbs[1]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["moved"] == 9
    assert {"old": f"{PARAM}::test_single[n=n3]", "new": f"{PARAM}::test_single[n=three]",
            "reasons": []} in data["moved"]  # fmt: skip


def test_a_dtype_is_an_input_another_dtype_is_no_move() -> None:
    from ootest.memory._moves import _pair_variants

    t = "t.py::T::test_x"
    assert _pair_variants([f"{t}[dtype=float32]"], [f"{t}[dtype=float64]"]) == []
    # the same keys with the same values in another order: the same inputs
    assert _pair_variants([f"{t}[dtype=float32,n=1]"], [f"{t}[n=1,dtype=float32]"]) == [
        (f"{t}[dtype=float32,n=1]", f"{t}[n=1,dtype=float32]", True)
    ]
    # two renamed values nowhere in the decorators: not guessed
    assert _pair_variants([f"{t}[a=1]", f"{t}[a=2]"], [f"{t}[a=x]", f"{t}[a=y]"]) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("[m=1,n=64]", "[m=64,n=1]"),  # the same values as a multiset: other inputs
        ("[contiguous=True]", "[contiguous=False]"),  # the one left on each side
        ("[n=2]", "[n=3]"),
        ("[dtype=float32,n=1]", "[dtype=float32,size=1]"),  # a value under another key
    ],
)
def test_other_inputs_are_never_a_move(old: str, new: str) -> None:
    """Issue 34 item 3: a renamed parametrization pairs only identical inputs; the
    multiset of values and 'the one left on each side' paired these."""
    from ootest.memory._moves import _pair_variants

    t = "t.py::T::test_x"
    assert _pair_variants([t + old], [t + new]) == []


def test_a_renamed_subtest_pairs_by_the_value_it_names() -> None:
    from ootest.memory._moves import _pair_variants

    t = "t.py::T::test_x"
    old = '@parametrize("n", [subtest(3, name="n3"), subtest(4, name="n4")])'
    new = '@parametrize("n", [subtest(4, name="four"), subtest(3, name="three")])'
    got = _pair_variants([f"{t}[n=n3]", f"{t}[n=n4]"], [f"{t}[n=four]", f"{t}[n=three]"], old, new)
    assert sorted(got) == [(f"{t}[n=n3]", f"{t}[n=three]", True),
                           (f"{t}[n=n4]", f"{t}[n=four]", True)]  # fmt: skip
    # a renamed subtest whose value changed too: other inputs
    other = '@parametrize("n", [subtest(5, name="three")])'
    assert _pair_variants([f"{t}[n=n3]"], [f"{t}[n=three]"], old, other) == []
