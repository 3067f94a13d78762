"""What a shard of a capture says about itself, and the merge's check that every
shard of one capture run arrived.

Note [Shard records]
A capture split over a CI matrix (``ops capture --shard I/N``, one index per
leg) is merged by ``ops merge``. A merge of shards 1, 2 and 4 of 4, or of
shards of two torch versions, would give an op map that silently lacks a
quarter of the tests, or mixes two torches: nothing downstream could tell.
So each shard's index records, in its ``meta`` table under ``shard``, which
shard it is (``I/N``), the torch version its capture ran (read from the
capture's provenance, not from an option) and the commit of the test tree it
ran, and whether its run reached the end. ``ops merge`` reads every source's
record before it merges anything and refuses, in one line, a set of shards
that is not exactly 1..N of one N, one torch version and one tree commit, or
that holds a shard which stopped early. A merged index records the whole
(``capture`` in ``meta``: torch version, tree commit, shard count), which is
what the CI workflow publishes under.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ootest.errors import UserError
from ootest.record.shard import ShardSpec

__all__ = ["MergedRecord", "ShardRecord", "check_shards", "read_shard", "write_merged"]

SHARD_KEY = "shard"
MERGED_KEY = "capture"


@dataclass(frozen=True)
class ShardRecord:
    shard: str  # "I/N"
    torch_version: str
    tree_commit: str | None  # None: the test tree is not a git checkout
    finished: bool  # the capture ran to its last test

    @property
    def spec(self) -> ShardSpec:
        return ShardSpec.parse(self.shard)

    def describe(self) -> str:
        return f"torch {self.torch_version} at tree {self.tree_commit or '(unknown)'}"


@dataclass(frozen=True)
class MergedRecord:
    shards: int
    torch_version: str
    tree_commit: str | None


def _get(c: sqlite3.Connection, key: str) -> str | None:
    row = c.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def _put(c: sqlite3.Connection, key: str, value: object) -> None:
    c.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
        "excluded.value",
        (key, json.dumps(value, sort_keys=True)),
    )


def read_shard(c: sqlite3.Connection, where: str) -> ShardRecord | None:
    """The shard record of an index, None when it has none (a whole capture)."""
    text = _get(c, SHARD_KEY)
    if text is None:
        return None
    try:
        raw = json.loads(text)
        rec = ShardRecord(
            shard=str(raw["shard"]),
            torch_version=str(raw["torch_version"]),
            tree_commit=None if raw["tree_commit"] is None else str(raw["tree_commit"]),
            finished=bool(raw["finished"]),
        )
        rec.spec  # noqa: B018 (validates I/N)
    except (ValueError, KeyError, TypeError, UserError):
        raise UserError(
            f"{where}: expected a shard record (shard, torch_version, tree_commit, finished) "
            f"in the index's meta table; found {text[:80]!r}; capture this shard again"
        ) from None
    return rec


def write_shard(c: sqlite3.Connection, rec: ShardRecord) -> None:
    _put(c, SHARD_KEY, asdict(rec))


def write_merged(c: sqlite3.Connection, rec: MergedRecord) -> None:
    _put(c, MERGED_KEY, asdict(rec))


def torch_versions(c: sqlite3.Connection, captures: Sequence[int]) -> list[str]:
    """The distinct torch versions of these capture rows, sorted."""
    marks = ",".join("?" * len(captures))
    rows = c.execute(
        f"SELECT DISTINCT torch_version FROM capture WHERE id IN ({marks})", tuple(captures)
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def _numbers(idx: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(i) for i in idx[:limit])
    return shown + (f" and {len(idx) - limit} more" if len(idx) > limit else "")


def check_shards(
    sources: Sequence[tuple[str, ShardRecord | None]],
    *,
    torch_version: str | None = None,
    tree_commit: str | None = None,
) -> MergedRecord | None:
    """Every shard of one capture run, each once, or one ``UserError`` line saying
    which is missing or does not belong (Note [Shard records]). None: no source is
    a shard and nothing was expected (a merge of whole captures)."""
    expected = torch_version is not None or tree_commit is not None
    if all(rec is None for _, rec in sources) and not expected:
        return None
    how = "merge the shards of one capture run (ops capture --shard I/N, same torch and tree)"
    for path, rec in sources:
        if rec is None:
            raise UserError(
                f"ops merge: {path}: expected a shard of a capture (ops capture --shard I/N), "
                f"found an index without a shard record; {how}"
            )
    records = [(p, r) for p, r in sources if r is not None]
    first_path, first = records[0]
    if torch_version is not None and first.torch_version != torch_version:
        raise UserError(
            f"ops merge: {first_path}: expected a capture of torch {torch_version} "
            f"(--torch-version), found shard {first.shard} of torch {first.torch_version}; {how}"
        )
    if tree_commit is not None and first.tree_commit != tree_commit:
        raise UserError(
            f"ops merge: {first_path}: expected a capture of tree {tree_commit} (--tree-commit), "
            f"found shard {first.shard} of tree {first.tree_commit or '(unknown)'}; {how}"
        )
    total = first.spec.total
    seen: dict[int, str] = {}
    for path, rec in records:
        if rec.spec.total != total:
            raise UserError(
                f"ops merge: {path}: expected a shard of {total} like {first_path} "
                f"(shard {first.shard}), found shard {rec.shard}; {how}"
            )
        for what, mine, theirs in (
            ("torch", rec.torch_version, first.torch_version),
            ("tree", rec.tree_commit, first.tree_commit),
        ):
            if mine != theirs:
                raise UserError(
                    f"ops merge: {path}: expected shard {rec.shard} of {first.describe()} like "
                    f"{first_path}, found {rec.describe()} (another {what}); {how}"
                )
        if rec.spec.index in seen:
            raise UserError(
                f"ops merge: shard {rec.shard} is given twice ({seen[rec.spec.index]} and "
                f"{path}); give each shard once"
            )
        seen[rec.spec.index] = path
        if not rec.finished:
            raise UserError(
                f"ops merge: {path}: shard {rec.shard} of {rec.describe()} stopped before its "
                "last test; capture it again with --resume (it goes on where it stopped)"
            )
    missing = [i for i in range(1, total + 1) if i not in seen]
    if missing:
        raise UserError(
            f"ops merge: expected all {total} shards of {first.describe()}, found "
            f"{len(seen)}; missing shard(s) {_numbers(missing)} of {total}: capture them "
            f"(ops capture --shard I/{total}) and merge all {total}"
        )
    return MergedRecord(total, first.torch_version, first.tree_commit)
