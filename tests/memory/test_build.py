"""Builds over torch-free pytest trees (fast): incremental rebuilds, crashes, errors.

The build runs in this process (it imports no torch); the collection children
run pytest with the ootest plugin.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ootest.memory import BuildOptions, build_index, diff_indexes, index_stats
from ootest.memory._store import connect
from tests.memory.trees import write_plain

A_IDS = [
    "tests/test_a.py::TestPlain::test_one",
    "tests/test_a.py::test_many[n=1]",
    "tests/test_a.py::test_many[n=2]",
    "tests/test_a.py::test_many[n=3]",
]
B_IDS = ["tests/test_b.py::test_b1", "tests/test_b.py::test_b2"]


def opts(root: Path, db: Path, **kw: object) -> BuildOptions:
    return BuildOptions(roots=(root,), db=db, torch_db=False, **kw)  # type: ignore[arg-type]


def variant_ids(db: Path) -> list[str]:
    con = connect(db, readonly=True)
    try:
        return [r[0] for r in con.execute("SELECT id FROM variants ORDER BY id")]
    finally:
        con.close()


def test_first_build_indexes_files_tests_and_variants(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    rep = build_index(opts(root, db, jobs=2))
    assert rep.summary() == "parsed 3 of 3 files, 6 variants re-fingerprinted"
    assert (rep.test_files, rep.files_collected, rep.variants_added) == (2, 2, 6)
    assert variant_ids(db) == A_IDS + B_IDS
    s = index_stats(db)
    assert s.totals == {
        "files": 3,
        "test files": 2,
        "classes": 1,
        "tests": 4,
        "variants": 6,
        "entries": 0,
        "device variants": 0,
    }
    assert s.by_file == [("tests/test_a.py", 4), ("tests/test_b.py", 2)]
    assert s.by_decorator == [("pytest.mark.parametrize", 1)]
    assert s.errors == []


def test_an_unchanged_rebuild_reads_parses_and_writes_nothing(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    build_index(opts(root, db))
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    rep = build_index(opts(root, db))
    assert rep.summary() == "parsed 0 of 3 files, 0 variants re-fingerprinted"
    assert (rep.files_read, rep.files_collected, rep.rows_written) == (0, 0, 0)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def test_changing_one_file_rereads_and_recollects_only_that_file(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    build_index(opts(root, db))
    old = tmp_path / "old.db"
    shutil.copy(db, old)
    path = root / "test_b.py"
    path.write_text(path.read_text().replace("1 + 1 == 2", "2 + 2 == 4"))
    rep = build_index(opts(root, db))
    assert rep.summary() == "parsed 1 of 3 files, 2 variants re-fingerprinted"
    assert (rep.files_read, rep.files_collected, rep.variants_changed) == (1, 1, 1)
    d = diff_indexes(old, db)
    assert [(m.id, m.reasons) for m in d.modified] == [("tests/test_b.py::test_b2", ("body",))]
    assert d.summary() == "1 of 6 variants changed: 1 body"


def test_touching_a_file_rehashes_it_without_parsing(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    build_index(opts(root, db))
    (root / "test_a.py").touch()
    rep = build_index(opts(root, db))
    assert (rep.files_read, rep.files_parsed, rep.files_collected) == (1, 0, 0)


def test_an_in_tree_module_change_recollects_the_files_importing_it(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    (root / "test_b.py").write_text(
        "from util import VALUE\n\n\ndef test_b1():\n    assert VALUE\n"
    )
    db = tmp_path / "memory.db"
    build_index(opts(root, db))
    (root / "util.py").write_text("VALUE = 2\n")
    rep = build_index(opts(root, db))
    assert (rep.files_parsed, rep.files_collected) == (1, 1)


def test_removed_files_leave_the_index(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    build_index(opts(root, db))
    (root / "test_b.py").unlink()
    rep = build_index(opts(root, db))
    assert (rep.files_removed, rep.files_total) == (1, 2)
    assert variant_ids(db) == A_IDS


def test_a_file_that_crashes_collection_is_recorded_and_the_build_goes_on(
    tmp_path: Path,
) -> None:
    root = write_plain(tmp_path, crash=True)
    db = tmp_path / "memory.db"
    rep = build_index(opts(root, db, jobs=1))
    assert rep.collect_errors == 1
    assert variant_ids(db) == A_IDS + B_IDS
    (kind, where, message), *rest = index_stats(db).errors
    assert (kind, where, rest) == ("import", "tests/test_crash.py", [])
    lines = message.splitlines()
    assert lines[:2] == [
        "collection crashed (exit code -11, SIGSEGV):",
        "Fatal Python error: Segmentation fault",
    ]
    assert lines[2].startswith('File "') and lines[2].endswith('test_crash.py", line 4 in <module>')


def test_a_file_that_does_not_parse_is_indexed_with_its_error(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    (root / "test_syntax.py").write_text("def test_x(:\n    pass\n")
    db = tmp_path / "memory.db"
    rep = build_index(opts(root, db))
    assert rep.parse_errors == 1
    kinds = {(k, w) for k, w, _ in index_stats(db).errors}
    assert kinds == {("parse", "tests/test_syntax.py"), ("import", "tests/test_syntax.py")}


def test_two_copies_of_a_tree_get_the_same_ids_and_no_diff(tmp_path: Path) -> None:
    one = write_plain(tmp_path / "one")
    two = write_plain(tmp_path / "elsewhere" / "two")
    build_index(opts(one, tmp_path / "one.db"))
    build_index(opts(two, tmp_path / "two.db"))
    d = diff_indexes(tmp_path / "one.db", tmp_path / "two.db")
    assert d.summary() == "0 of 6 variants changed"


def test_json_report_is_complete(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    rep = build_index(opts(root, tmp_path / "m.db", variants=False))
    data = json.loads(json.dumps(rep.to_json()))
    assert data["files_parsed"] == 3 and data["variants_total"] == 0


@pytest.mark.parametrize("jobs", [1, 2])
def test_static_only_needs_no_collection(tmp_path: Path, jobs: int) -> None:
    root = write_plain(tmp_path)
    rep = build_index(opts(root, tmp_path / "m.db", variants=False, jobs=jobs))
    assert (rep.files_parsed, rep.test_files, rep.variants_total) == (3, 0, 0)
