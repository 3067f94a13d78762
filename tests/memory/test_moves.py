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
    # two renamed values: paired in the order the decorator lists them
    assert moved[f"{PARAM}::test_param[x=one]"] == (f"{PARAM}::test_param[x=small]", ())
    assert moved[f"{PARAM}::test_param[x=two]"] == (f"{PARAM}::test_param[x=large]", ())
    # one renamed value: the one left on each side
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
    # a renamed parameter key with the same values: the same inputs
    assert _pair_variants([f"{t}[dtype=float32,n=1]"], [f"{t}[dtype=float32,size=1]"]) == [
        (f"{t}[dtype=float32,n=1]", f"{t}[dtype=float32,size=1]", True)
    ]
    # two renamed values nowhere in the decorators: not guessed
    assert _pair_variants([f"{t}[a=1]", f"{t}[a=2]"], [f"{t}[a=x]", f"{t}[a=y]"]) == []
