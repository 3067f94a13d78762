"""The index file: one SQLite database (stdlib ``sqlite3``, FTS5 for text).

Tables (see docs/memory.md for what each column means):

- ``meta``: schema and fingerprint scheme versions, build settings, stamps;
- ``files``, ``facts``: every indexed Python file by file key, its content
  digest, stat and imports; its parsed facts (JSON), so an unchanged file is
  never parsed again;
- ``tests``, ``classes``, ``symbols``, ``refs``: the static part, queryable;
- ``entries``: OpInfo / ModuleInfo entries with their fingerprints;
- ``collected``: per test file, the stamp its variants were collected under and
  its collection error, if any;
- ``templates``: per template test, its fingerprint components;
- ``variants``: every collected variant with its fingerprint (by variant ID, which
  starts with the file key: a file's variants are a range of the primary key;
  no other index, the table is the largest);
- ``docs`` (FTS5) + ``docmap``: the text searched by ``ootest index query``;
  ``docs_terms``: how many documents hold each word (fts5vocab, counted when
  read); ``common_terms``: those counts for the words in at least COMMON_TERM
  documents, kept by the build (a query reads them in microseconds);
- ``embeddings``, ``summaries``: optional, cached by fingerprint / prompt digest.

Writes happen only where something changed: an unchanged rebuild leaves the
file's bytes and mtime as they were.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from ootest.atomic import being_written
from ootest.errors import UserError
from ootest.memory._hashing import SCHEME

SCHEMA_VERSION = 2
_APP_ID = 0x6F6F7465  # "oote": marks the file as an ootest index

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE files(
    key TEXT PRIMARY KEY, root TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL,
    digest TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    is_test INTEGER NOT NULL, error TEXT, imports TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX files_name ON files(name);
CREATE TABLE facts(key TEXT PRIMARY KEY, facts TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE classes(
    file TEXT NOT NULL, name TEXT NOT NULL, line INTEGER NOT NULL, form TEXT NOT NULL,
    bases TEXT NOT NULL, decorators TEXT NOT NULL, instantiation TEXT NOT NULL,
    PRIMARY KEY(file, name)
) WITHOUT ROWID;
CREATE INDEX classes_name ON classes(name);
CREATE TABLE tests(
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, file TEXT NOT NULL, cls TEXT NOT NULL,
    method TEXT NOT NULL, line INTEGER NOT NULL, form TEXT NOT NULL, decorators TEXT NOT NULL,
    doc TEXT NOT NULL, helpers TEXT NOT NULL, body TEXT NOT NULL
);
CREATE INDEX tests_file ON tests(file);
CREATE INDEX tests_method ON tests(method, key);
CREATE INDEX tests_cls ON tests(cls, method);
CREATE TABLE decorators(test INTEGER NOT NULL, name TEXT NOT NULL, args TEXT NOT NULL);
CREATE INDEX decorators_test ON decorators(test);
CREATE TABLE refs(name TEXT NOT NULL, test INTEGER NOT NULL, PRIMARY KEY(name, test)) WITHOUT ROWID;
CREATE INDEX refs_test ON refs(test);
CREATE TABLE symbols(
    file TEXT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, line INTEGER NOT NULL,
    PRIMARY KEY(file, name)
) WITHOUT ROWID;
CREATE INDEX symbols_name ON symbols(name);
CREATE TABLE entries(
    db TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL, base TEXT NOT NULL,
    variant TEXT NOT NULL, fingerprint TEXT NOT NULL, dtypes TEXT NOT NULL,
    sample TEXT NOT NULL, decorators TEXT NOT NULL, full_fingerprint TEXT NOT NULL,
    PRIMARY KEY(db, name)
) WITHOUT ROWID;
CREATE INDEX entries_name ON entries(name);
CREATE INDEX entries_base ON entries(base);
CREATE TABLE entry_bases(
    db TEXT NOT NULL, name TEXT NOT NULL, test_base TEXT NOT NULL, PRIMARY KEY(db, name)
) WITHOUT ROWID;
CREATE TABLE db_errors(db TEXT PRIMARY KEY, message TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE collected(file TEXT PRIMARY KEY, stamp TEXT NOT NULL, error TEXT) WITHOUT ROWID;
CREATE TABLE templates(
    key TEXT PRIMARY KEY, file TEXT NOT NULL, components TEXT NOT NULL,
    fingerprint TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX templates_file ON templates(file);
CREATE TABLE variants(
    id TEXT PRIMARY KEY, cls TEXT NOT NULL, op TEXT, dtypes TEXT NOT NULL, module TEXT,
    device_variant INTEGER NOT NULL, mode TEXT, reason TEXT, entry_fp TEXT,
    fingerprint TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE docmap(
    id INTEGER PRIMARY KEY, file TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    title TEXT NOT NULL
);
CREATE INDEX docmap_file ON docmap(file);
CREATE INDEX docmap_key ON docmap(key);
CREATE VIRTUAL TABLE docs USING fts5(title, body, tokenize = 'porter unicode61');
CREATE VIRTUAL TABLE docs_terms USING fts5vocab(docs, 'row');
CREATE TABLE common_terms(term TEXT PRIMARY KEY, docs INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE embeddings(
    key TEXT NOT NULL, model TEXT NOT NULL, digest TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY(key, model)
) WITHOUT ROWID;
CREATE TABLE summaries(
    prompt TEXT PRIMARY KEY, key TEXT NOT NULL, body TEXT NOT NULL, model TEXT NOT NULL,
    text TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX summaries_key ON summaries(key);
"""


def connect(path: Path, *, create: bool = False, readonly: bool = False) -> sqlite3.Connection:
    """Open the index at ``path``: UserError if it is missing (and not ``create``),
    not an SQLite file, or not an ootest index of this schema version. A
    ``readonly`` connection cannot change the file (query, stats, diff)."""
    if not create and being_written(path):
        raise UserError(
            f"{path}: an index build is writing it now; wait for it to finish "
            "(Note [One writer of an index])"
        )
    if not path.exists() or (create and path.is_file() and path.stat().st_size == 0):
        # (an empty file is the one a build's lock made: a new index)
        if not create:
            raise UserError(
                f"{path}: no index there; build one with 'ootest index build --root PATH "
                f"--db {path}'"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, isolation_level=None)
        try:
            con.executescript(
                f"BEGIN;{_SCHEMA}PRAGMA application_id={_APP_ID};"
                f"PRAGMA user_version={SCHEMA_VERSION};"
                f"INSERT INTO meta VALUES('scheme','{SCHEME}');COMMIT;"
            )
        except sqlite3.OperationalError as e:  # e.g. an SQLite without FTS5
            con.close()
            path.unlink()
            raise UserError(f"{path}: cannot create the index: {e}") from None
        return con
    if path.is_dir():
        raise UserError(f"{path}: is a folder; --db expects an index file")
    if readonly:
        uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
        con = sqlite3.connect(uri, uri=True, isolation_level=None)
    else:
        con = sqlite3.connect(path, isolation_level=None)
    try:
        app_id = con.execute("PRAGMA application_id").fetchone()[0]
        version = con.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as e:
        con.close()
        raise UserError(f"{path}: not an ootest index ({e})") from None
    if app_id != _APP_ID:
        con.close()
        raise UserError(f"{path}: not an ootest index (an SQLite file of something else)")
    if version != SCHEMA_VERSION:
        con.close()
        raise UserError(
            f"{path}: index schema version {version}, this ootest reads version "
            f"{SCHEMA_VERSION}; rebuild it with 'ootest index build' into a new file"
        )
    if not create:
        building = read_meta(con).get(BUILDING)
        if building is not None:
            con.close()
            raise UserError(
                f"{path}: incomplete: the index build that {building} did not finish "
                f"(killed or crashed); build it again with 'ootest index build ... --db {path}'"
            )
    return con


#: The meta key a build sets when it starts and removes when it is done: an index
#: that still has it was left by a build that was killed (Note [One writer of an index]).
BUILDING = "building"


COMMON_TERM = 50


def refresh_common_terms(con: sqlite3.Connection) -> int:
    """Recount the common words (after documents changed); rows written."""
    new = dict(
        con.execute("SELECT term, doc FROM docs_terms WHERE doc >= ?", (COMMON_TERM,)).fetchall()
    )
    old = dict(con.execute("SELECT term, docs FROM common_terms").fetchall())
    if new == old:
        return 0
    con.execute("DELETE FROM common_terms")
    con.executemany("INSERT INTO common_terms VALUES(?,?)", sorted(new.items()))
    return len(new)


def read_meta(con: sqlite3.Connection) -> dict[str, str]:
    return dict(con.execute("SELECT key, value FROM meta").fetchall())


def write_meta(con: sqlite3.Connection, values: dict[str, str]) -> int:
    """Write the entries that differ; return how many were written."""
    old = read_meta(con)
    changed = [(k, v) for k, v in values.items() if old.get(k) != v]
    con.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)", changed)
    return len(changed)


def chunks(items: list[str], size: int = 500) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
