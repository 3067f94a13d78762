"""An upgrade of an upstream-style tree, indexed with the real torch machinery.

Two versions of one tree (see trees.py) are indexed by ``ootest index build`` in
child processes (torch is imported there, never here); ``ootest index diff``
must report exactly the variants that changed, each with its reasons.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ootest
from tests.memory.trees import build_index, vid, write_tree

pytestmark = pytest.mark.slow  # two builds that import torch: about a minute


@dataclass(frozen=True)
class Built:
    old_root: Path
    new_root: Path
    old_db: Path
    new_db: Path


def build(root: Path, db: Path) -> dict[str, object]:
    return build_index(root, db, "--jobs", "2")


def ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("upgrade")
    old_root = write_tree(base / "old", new=False)
    new_root = write_tree(base / "new", new=True)
    b = Built(old_root, new_root, base / "old.db", base / "new.db")
    build(old_root, b.old_db)
    build(new_root, b.new_db)
    return b


def test_diff_reports_exactly_the_changes_with_their_reasons(built: Built) -> None:
    data = json.loads(ok(ootest("index", "diff", str(built.old_db), str(built.new_db), "--json")))
    assert data["added"] == [
        vid("test_added", "dtype=float32"),
        vid("test_decorated", "dtype=int32"),
    ]
    assert data["removed"] == [
        vid("test_decorated", "dtype=int64"),
        vid("test_removed", "dtype=float32"),
    ]
    assert data["modified"] == [
        {"id": vid("test_body_changes", "dtype=float32"), "reasons": ["body"]},
        {"id": vid("test_decorated", "dtype=float32"), "reasons": ["decorator"]},
        {"id": vid("test_double", "dtype=float32"), "reasons": ["helper:_scale"]},
        {"id": vid("test_double", "dtype=float64"), "reasons": ["helper:_scale"]},
        {"id": vid("test_op_runs", "op=mul,dtype=float32"), "reasons": ["opinfo:mul"]},
    ]
    # 12 variants in the new index (10 of test_alpha, 2 of test_beta), 2 removed
    assert data["summary"] == (
        "9 of 14 variants changed: 2 helper, 2 added, 2 removed, 1 opinfo, 1 body, 1 decorator"
    )


def test_diff_text_output(built: Built) -> None:
    out = ok(ootest("index", "diff", str(built.old_db), str(built.new_db)))
    lines = out.splitlines()
    assert lines[0].startswith("9 of 14 variants changed: ")
    assert f"~ {vid('test_op_runs', 'op=mul,dtype=float32')}  (opinfo:mul)" in lines
    assert f"+ {vid('test_added', 'dtype=float32')}" in lines
    assert f"- {vid('test_removed', 'dtype=float32')}" in lines


def test_the_local_op_database_is_indexed_with_fingerprints(built: Built) -> None:
    hits = json.loads(ok(ootest("index", "query", "mul", "--db", str(built.new_db), "--json")))
    assert hits[0]["kind"] == "opinfo"
    assert hits[0]["key"] == "local_ops:local_op_db:mul"
    assert hits[0]["found_by"][0] == "exact:entry name"


def test_a_file_that_fails_to_import_is_in_the_index_and_in_stats(built: Built) -> None:
    data = json.loads(ok(ootest("index", "stats", "--db", str(built.new_db), "--json")))
    errors = data["errors"]
    assert [(e["kind"], e["where"]) for e in errors] == [("import", "test/test_broken.py")]
    assert "No module named 'does_not_exist_anywhere'" in errors[0]["message"]
    assert data["totals"]["variants"] == 12
    text = ok(ootest("index", "stats", "--db", str(built.new_db)))
    assert "test/test_broken.py" in text
    assert "ModuleNotFoundError: No module named 'does_not_exist_anywhere'" in text


def test_query_by_exact_id_docstring_word_and_symbol(built: Built) -> None:
    def query(text: str) -> list[dict[str, object]]:
        out = ok(ootest("index", "query", text, "--db", str(built.new_db), "--json"))
        hits: list[dict[str, object]] = json.loads(out)
        return hits

    exact = vid("test_double", "dtype=float64")
    first = query(exact)[0]
    assert (first["kind"], first["key"], first["found_by"]) == (
        "variant",
        exact,
        ["exact:variant id"],
    )
    first = query("zeppelin")[0]
    assert (first["kind"], first["key"]) == ("test", "test/test_beta.py::TestBeta::test_flies")
    assert first["found_by"] == ["bm25"]
    hits = query("make_widget")
    found = {(h["kind"], h["key"]) for h in hits}
    assert ("test", "test/test_beta.py::TestBeta::test_flies") in found
    assert ("symbol", "test/test_beta.py::make_widget") in found
    assert ("test", "test/test_beta.py::TestBeta::test_lands") not in found


def test_an_unchanged_rebuild_parses_nothing_and_rewrites_nothing(
    built: Built, tmp_path: Path
) -> None:
    db = tmp_path / "again.db"
    shutil.copy(built.new_db, db)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    r = ootest(
        "index",
        "build",
        "--root",
        str(built.new_root),
        "--db",
        str(db),
        "--no-torch-db",
        "--opdb",
        "local_ops:local_op_db",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "parsed 0 of 4 files, 0 variants re-fingerprinted"
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def test_editing_one_opinfo_entry_changes_only_that_ops_variants(
    built: Built, tmp_path: Path
) -> None:
    db = tmp_path / "edited.db"
    shutil.copy(built.new_db, db)
    ops = built.new_root / "local_ops.py"
    text = ops.read_text()
    try:
        ops.write_text(text.replace('OpInfo("sub", op=torch.sub,', 'OpInfo("sub", op=torch.rsub,'))
        report = build(built.new_root, db)
    finally:
        ops.write_text(text)
    # local_ops.py changed: the file importing it is collected again (its variants may
    # differ), so its 10 variants are fingerprinted again; only one fingerprint changes
    assert report["summary"] == "parsed 1 of 4 files, 10 variants re-fingerprinted"
    assert (report["entries_changed"], report["variants_changed"]) == (1, 1)
    data = json.loads(ok(ootest("index", "diff", str(built.new_db), str(db), "--json")))
    assert data["modified"] == [
        {"id": vid("test_op_runs", "op=sub,dtype=float32"), "reasons": ["opinfo:sub"]}
    ]
    assert data["added"] == data["removed"] == []
