"""Torch's test database in the index: the dump child and the ``entries`` rows."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ootest.errors import UserError
from ootest.memory._rows import add_doc, forget_doc
from ootest.memory._text import entry_doc
from ootest.untrusted import without_secrets

_COLUMNS = (
    "db, name, type, base, variant, fingerprint, dtypes, sample, decorators, full_fingerprint"
)


class Dump:
    """``python -m ootest.memory._torchdb`` running in a child process (it imports
    torch), started before the variants are collected so both run at once."""

    def __init__(
        self,
        torch_db: bool,
        opdbs: Sequence[str],
        paths: Sequence[str],
        backend: str | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="ootest-index-db-")
        self.out = Path(self._tmp.name) / "entries.jsonl"
        cmd = [sys.executable, "-m", "ootest.memory._torchdb", "--out", str(self.out)]
        if torch_db:
            cmd.append("--torch")
        for spec in opdbs:
            cmd += ["--opdb", spec]
        for path in paths:
            cmd += ["--path", path]
        if backend:
            cmd += ["--backend", backend]
        self._err: IO[bytes] = open(Path(self._tmp.name) / "stderr", "wb")
        env = {**without_secrets(), "OOTEST_PARENT_PID": str(os.getpid())}  # dies with the build
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=self._err, stdin=subprocess.DEVNULL, env=env
        )

    def records(self) -> list[dict[str, Any]]:
        """Wait for the child; its records, or UserError with its error output."""
        try:
            rc = self.proc.wait()
            self._err.close()
            if rc != 0:
                tail = (Path(self._tmp.name) / "stderr").read_text(errors="replace")[-2000:]
                raise UserError(f"reading torch's test database failed (exit code {rc}):\n{tail}")
            lines = self.out.read_text(encoding="utf-8").splitlines()
            return [json.loads(line) for line in lines if line.strip()]
        finally:
            self.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close()

    def close(self) -> None:
        self._err.close()
        self._tmp.cleanup()


@dataclass
class EntryChanges:
    changed: set[tuple[str, str]] = field(default_factory=set)  # (type, name)
    rows: int = 0  # entries added, removed or with another fingerprint
    written: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # db -> why it could not be read


def _row(r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        r["db"],
        r["name"],
        r["type"],
        r["base"],
        r["variant"],
        r["fingerprint"],
        json.dumps(r["dtypes"], sort_keys=True),
        r["sample"],
        json.dumps(r["decorators"], sort_keys=True),
        r["full_fingerprint"],
    )


#: Note [Test-limited entry fingerprints]: an index built before the table existed
#: gets it at its next dump (its entries stamp names the table, see ``_build``)
BASES_TABLE = (
    "CREATE TABLE IF NOT EXISTS entry_bases(db TEXT NOT NULL, name TEXT NOT NULL, "
    "test_base TEXT NOT NULL, PRIMARY KEY(db, name)) WITHOUT ROWID"
)


def _store_bases(con: sqlite3.Connection, records: list[dict[str, Any]]) -> int:
    """Each entry's ``test_base`` (Note [Test-limited entry fingerprints]); rows written."""
    con.execute(BASES_TABLE)
    new: dict[tuple[str, str], str] = {}
    for r in records:
        if r["kind"] == "entry" and r.get("test_base"):
            new.setdefault((r["db"], r["name"]), str(r["test_base"]))
    old = {(str(d), str(n)): str(b) for d, n, b in con.execute("SELECT * FROM entry_bases")}
    gone = sorted(old.keys() - new.keys())
    con.executemany("DELETE FROM entry_bases WHERE db=? AND name=?", gone)
    put = [(*k, b) for k, b in sorted(new.items()) if old.get(k) != b]
    con.executemany("INSERT OR REPLACE INTO entry_bases VALUES(?,?,?)", put)
    return len(gone) + len(put)


def store_entries(con: sqlite3.Connection, records: list[dict[str, Any]]) -> EntryChanges:
    """Write the entries that differ from the stored ones (in a transaction the caller
    holds); say which (type, name) changed, so their variants are fingerprinted again."""
    old = {(r[0], r[1]): r for r in con.execute(f"SELECT {_COLUMNS} FROM entries")}
    new: dict[tuple[str, str], tuple[Any, ...]] = {}
    out = EntryChanges()
    for r in records:
        if r["kind"] == "db_error":
            out.errors[r["db"]] = r["message"]
        else:
            new.setdefault((r["db"], r["name"]), _row(r))
    for key in sorted(old.keys() - new.keys()):
        con.execute("DELETE FROM entries WHERE db=? AND name=?", key)
        forget_doc(con, "", f"{key[0]}:{key[1]}")
        out.changed.add((old[key][2], key[1]))
        out.rows += 1
        out.written += 1
    for key, row in new.items():
        before = old.get(key)
        if before == row:
            continue
        con.execute(f"INSERT OR REPLACE INTO entries({_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?)", row)
        forget_doc(con, "", f"{key[0]}:{key[1]}")
        add_doc(con, "", row[2], f"{key[0]}:{key[1]}", entry_doc(row))
        out.written += 1
        if before is None or before[5] != row[5]:
            out.changed.add((row[2], key[1]))
            out.rows += 1
    out.written += _store_bases(con, records)
    stored = dict(con.execute("SELECT db, message FROM db_errors").fetchall())
    if stored != out.errors:
        con.execute("DELETE FROM db_errors")
        con.executemany("INSERT INTO db_errors VALUES(?,?)", sorted(out.errors.items()))
        out.written += 1
    return out
