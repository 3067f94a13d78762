"""``ootest ops merge`` checks that every shard of one capture run arrived
(Note [Shard records]): one line, exit 2, nothing merged, when one is missing,
given twice, cut short, or of another torch, tree or shard count."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ootest.opmap.ingest import ingest_records
from ootest.opmap.shards import ShardRecord, write_shard
from ootest.opmap.store import OpStore

from .conftest import PROV, ops, stop
from .test_cli import ootest

TREE = "a" * 40


def _shard(
    tmp_path: Path,
    i: int,
    n: int,
    *,
    torch: str = "2.13.0",
    tree: str | None = TREE,
    finished: bool = True,
    name: str | None = None,
) -> str:
    """A shard's index as `ops capture --shard I/N` leaves it: its own variant, its record."""
    db = tmp_path / (name or f"shard-{i}-of-{n}.db")
    vid = f"test/test_x.py::TestX::test_{i}"
    records: list[dict[str, Any]] = [
        {**PROV, "torch_version": torch, "time": PROV["time"] + i},
        ops(vid, {"aten::add.Tensor": i}),
        stop(vid),
    ]
    with OpStore.open(db, create=True) as store:
        ingest_records(store, records, source="test")
        write_shard(store.connection, ShardRecord(f"{i}/{n}", torch, tree, finished))
    return db.name


def _merge(tmp_path: Path, *sources: str, extra: tuple[str, ...] = ()) -> Any:
    return ootest("ops", "merge", *sources, "--db", "all.db", *extra, cwd=tmp_path)


def _variants(db: Path) -> int:
    c = sqlite3.connect(db)
    try:
        return int(c.execute("SELECT count(*) FROM variant").fetchone()[0])
    finally:
        c.close()


def test_every_shard_merges_and_the_whole_is_recorded(tmp_path: Path) -> None:
    shards = [_shard(tmp_path, i, 3) for i in (3, 1, 2)]
    done = _merge(tmp_path, *shards, extra=("--torch-version", "2.13.0", "--tree-commit", TREE))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"all 3 shard(s) of torch 2.13.0 at tree {TREE}"
    assert _variants(tmp_path / "all.db") == 3
    c = sqlite3.connect(tmp_path / "all.db")
    (meta,) = c.execute("SELECT value FROM meta WHERE key = 'capture'").fetchone()
    c.close()
    assert json.loads(meta) == {"shards": 3, "torch_version": "2.13.0", "tree_commit": TREE}


HOW = "merge the shards of one capture run (ops capture --shard I/N, same torch and tree)"


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (
            lambda t: [_shard(t, 1, 4), _shard(t, 2, 4), _shard(t, 4, 4)],
            (),
            f"ops merge: expected all 4 shards of torch 2.13.0 at tree {TREE}, found 3; "
            "missing shard(s) 3 of 4: capture them (ops capture --shard I/4) and merge all 4",
        ),
        (
            lambda t: [_shard(t, 1, 2), _shard(t, 2, 2, torch="2.14.0")],
            (),
            f"ops merge: shard-2-of-2.db: expected shard 2/2 of torch 2.13.0 at tree {TREE} "
            f"like shard-1-of-2.db, found torch 2.14.0 at tree {TREE} (another torch); {HOW}",
        ),
        (
            lambda t: [_shard(t, 1, 2), _shard(t, 2, 2, tree="b" * 40)],
            (),
            f"ops merge: shard-2-of-2.db: expected shard 2/2 of torch 2.13.0 at tree {TREE} "
            f"like shard-1-of-2.db, found torch 2.13.0 at tree {'b' * 40} (another tree); {HOW}",
        ),
        (
            lambda t: [_shard(t, 1, 2), _shard(t, 2, 3)],
            (),
            "ops merge: shard-2-of-3.db: expected a shard of 2 like shard-1-of-2.db "
            f"(shard 1/2), found shard 2/3; {HOW}",
        ),
        (
            lambda t: [_shard(t, 1, 2), _shard(t, 1, 2, name="again.db"), _shard(t, 2, 2)],
            (),
            "ops merge: shard 1/2 is given twice (shard-1-of-2.db and again.db); "
            "give each shard once",
        ),
        (
            lambda t: [_shard(t, 1, 2), _shard(t, 2, 2, finished=False)],
            (),
            f"ops merge: shard-2-of-2.db: shard 2/2 of torch 2.13.0 at tree {TREE} stopped "
            "before its last test; capture it again with --resume (it goes on where it stopped)",
        ),
        (
            lambda t: [_shard(t, 1, 1)],
            ("--torch-version", "2.14.0"),
            "ops merge: shard-1-of-1.db: expected a capture of torch 2.14.0 (--torch-version), "
            f"found shard 1/1 of torch 2.13.0; {HOW}",
        ),
        (
            lambda t: [_shard(t, 1, 1)],
            ("--tree-commit", "c" * 40),
            f"ops merge: shard-1-of-1.db: expected a capture of tree {'c' * 40} (--tree-commit), "
            f"found shard 1/1 of tree {TREE}; {HOW}",
        ),
    ],
    ids=["missing", "torch", "tree", "count", "twice", "cut-short", "want-torch", "want-tree"],
)
def test_an_incomplete_or_mixed_set_is_refused(
    tmp_path: Path, make: Any, extra: tuple[str, ...], message: str
) -> None:
    done = _merge(tmp_path, *make(tmp_path), extra=extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[0] == f"ootest: error: {message}"
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "all.db").exists()  # nothing merged


def test_a_whole_index_among_shards_is_refused_and_whole_ones_merge_as_before(
    tmp_path: Path,
) -> None:
    whole = tmp_path / "whole.db"
    with OpStore.open(whole, create=True) as store:
        ingest_records(store, [PROV, ops("t.py::T::t", {"aten::mul.Tensor": 1})], source="t")
    done = _merge(tmp_path, _shard(tmp_path, 1, 2), "whole.db")
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "ootest: error: ops merge: whole.db: expected a shard of a capture (ops capture "
        f"--shard I/N), found an index without a shard record; {HOW}"
    )
    plain = ootest("ops", "merge", "whole.db", "--db", "plain.db", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "shard(s)" not in plain.stdout


def test_capture_refuses_a_bad_tree_commit_or_durations_before_running(tmp_path: Path) -> None:
    from tests.conftest import ootest as ootest_cli

    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    base = ("ops", "capture", "test_x.py", "--db", "s.db", "--shard", "1/2")
    done = ootest_cli(*base, "--tree-commit", "main; echo pwned", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "ootest: error: ops capture: --tree-commit: expected a 40-hex git commit, "
        "found 'main; echo pwned'"
    )
    done = ootest_cli(*base, "--durations", "nowhere.jsonl", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "ootest: error: ops capture: --durations nowhere.jsonl: no such results file"
    )
    assert not (tmp_path / "s.db.capture").exists()  # refused before anything ran


def test_a_shard_names_heads_commit_only_for_a_test_file_that_is_heads(tmp_path: Path) -> None:
    import subprocess

    from ootest.cli.capture_cmd import _tree_commit

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / ".gitignore").write_text(".cache/\n")
    (tmp_path / "test_ours.py").write_text("def test_x():\n    pass\n")
    git("add", "-A")
    git("commit", "-qm", "tests")
    head = git("rev-parse", "HEAD")
    copy = tmp_path / ".cache" / "upstream" / "test"
    copy.mkdir(parents=True)
    (copy / "test_theirs.py").write_text("def test_y():\n    pass\n")
    (tmp_path / "test_new.py").write_text("def test_z():\n    pass\n")
    assert _tree_commit(None, [str(tmp_path / "test_ours.py")]) == head
    assert _tree_commit(None, [str(tmp_path / "test_ours.py::test_x")]) == head
    # a git-ignored copy of another tree, an untracked file: not HEAD's
    assert _tree_commit(None, [str(copy / "test_theirs.py")]) is None
    assert _tree_commit(None, [str(tmp_path / "test_new.py")]) is None
    (tmp_path / "test_ours.py").write_text("def test_x():\n    assert 0\n")
    assert _tree_commit(None, [str(tmp_path / "test_ours.py")]) is None  # changed since
    assert _tree_commit("b" * 40, [str(copy / "test_theirs.py")]) == "b" * 40
