"""``ootest index stats``: what the index holds, counted (read-only)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.memory._store import connect, read_meta


@dataclass
class IndexStats:
    totals: dict[str, int] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    by_file: list[tuple[str, int]] = field(default_factory=list)  # variants per file
    by_class: list[tuple[str, int]] = field(default_factory=list)
    by_decorator: list[tuple[str, int]] = field(default_factory=list)  # tests per decorator
    by_op: list[tuple[str, int]] = field(default_factory=list)
    by_dtype: list[tuple[str, int]] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, where, message)

    def to_json(self) -> dict[str, Any]:
        def table(rows: list[tuple[str, int]]) -> list[dict[str, Any]]:
            return [{"name": n, "count": c} for n, c in rows]

        return {
            "totals": self.totals,
            "meta": self.meta,
            "by_file": table(self.by_file),
            "by_class": table(self.by_class),
            "by_decorator": table(self.by_decorator),
            "by_op": table(self.by_op),
            "by_dtype": table(self.by_dtype),
            "errors": [{"kind": k, "where": w, "message": m} for k, w, m in self.errors],
        }


def stats(db: Path, limit: int | None = 20) -> IndexStats:
    con = connect(db, readonly=True)
    try:
        return _stats(con, limit)
    finally:
        con.close()


def _top(con: sqlite3.Connection, sql: str, limit: int | None) -> list[tuple[str, int]]:
    rows = con.execute(sql + " ORDER BY 2 DESC, 1 LIMIT ?", (limit if limit else -1,))
    return [(str(n), int(c)) for n, c in rows]


def _stats(con: sqlite3.Connection, limit: int | None) -> IndexStats:
    one = con.execute
    s = IndexStats(meta={k: v for k, v in read_meta(con).items() if k != "entries_stamp"})
    s.totals = {
        name: int(one(f"SELECT count(*) FROM {table}").fetchone()[0])
        for name, table in (
            ("files", "files"),
            ("test files", "collected"),
            ("classes", "classes"),
            ("tests", "tests"),
            ("variants", "variants"),
            ("entries", "entries"),
        )
    }
    s.totals["device variants"] = int(
        one("SELECT count(*) FROM variants WHERE device_variant").fetchone()[0]
    )
    file = "substr(id, 1, instr(id, '::') - 1)"  # a variant ID starts with its file key
    s.by_file = _top(con, f"SELECT {file}, count(*) FROM variants GROUP BY 1", limit)
    s.by_class = _top(
        con,
        f"SELECT {file} || '::' || cls, count(*) FROM variants WHERE cls != '' GROUP BY 1",
        limit,
    )
    s.by_decorator = _top(
        con, "SELECT name, count(DISTINCT test) FROM decorators GROUP BY name", limit
    )
    s.by_op = _top(con, "SELECT op, count(*) FROM variants WHERE op IS NOT NULL GROUP BY op", limit)
    dtypes: Counter[str] = Counter()
    for text, n in one("SELECT dtypes, count(*) FROM variants WHERE dtypes != '' GROUP BY dtypes"):
        for d in str(text).split(","):
            dtypes[d] += int(n)
    s.by_dtype = sorted(dtypes.items(), key=lambda kv: (-kv[1], kv[0]))[: limit or None]
    s.errors = [
        ("import", str(f), str(m))
        for f, m in one("SELECT file, error FROM collected WHERE error IS NOT NULL ORDER BY file")
    ]
    s.errors += [
        ("parse", str(f), str(m))
        for f, m in one("SELECT key, error FROM files WHERE error IS NOT NULL ORDER BY key")
    ]
    s.errors += [
        ("database", str(d), str(m))
        for d, m in one("SELECT db, message FROM db_errors ORDER BY db")
    ]
    return s
