"""Rows of the static part: one file's facts written into (or removed from) the index."""

from __future__ import annotations

import json
import sqlite3

from ootest.memory._files import SourceFile
from ootest.memory._fingerprint import template_components
from ootest.memory._static import FileFacts, Func, Import, Klass, Symbol, dump_facts
from ootest.memory._text import class_doc, file_doc, test_doc


def test_key(file: str, cls: str, method: str) -> str:
    """``file::Class::test`` (``file::test`` for a plain function): a template test."""
    return f"{file}::{cls}::{method}" if cls else f"{file}::{method}"


def id_range(file: str) -> tuple[str, str]:
    """Bounds of the variant IDs of ``file`` (they start with ``file::``): a range
    over the primary key instead of an index on the file."""
    return f"{file}::", f"{file}:;"  # ";" sorts right after ":"


def forget_file(con: sqlite3.Connection, key: str, *, everything: bool) -> None:
    """Delete a file's static rows (and, with ``everything``, the file and its variants)."""
    con.execute("DELETE FROM docs WHERE rowid IN (SELECT id FROM docmap WHERE file=?)", (key,))
    con.execute("DELETE FROM docmap WHERE file=?", (key,))
    con.execute("DELETE FROM refs WHERE test IN (SELECT id FROM tests WHERE file=?)", (key,))
    con.execute("DELETE FROM decorators WHERE test IN (SELECT id FROM tests WHERE file=?)", (key,))
    for table in ("tests", "classes", "symbols"):
        con.execute(f"DELETE FROM {table} WHERE file=?", (key,))
    if everything:
        con.execute("DELETE FROM files WHERE key=?", (key,))
        con.execute("DELETE FROM facts WHERE key=?", (key,))
        forget_variants(con, key)


def forget_variants(con: sqlite3.Connection, key: str) -> None:
    con.execute("DELETE FROM variants WHERE id >= ? AND id < ?", id_range(key))
    con.execute("DELETE FROM templates WHERE file=?", (key,))
    con.execute("DELETE FROM collected WHERE file=?", (key,))


def store_file(con: sqlite3.Connection, f: SourceFile, digest: str, facts: FileFacts) -> None:
    """Replace the static rows of one parsed file."""
    forget_file(con, f.key, everything=False)
    con.execute(
        "INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?,?,?,?,?)",
        (
            f.key,
            str(f.root),
            str(f.path),
            f.path.name,
            digest,
            f.size,
            f.mtime_ns,
            int(f.is_test),
            facts.error,
            dump_imports(facts.imports),
        ),
    )
    con.execute("INSERT OR REPLACE INTO facts VALUES(?,?)", (f.key, dump_facts(facts)))
    con.executemany(
        "INSERT INTO symbols VALUES(?,?,?,?)",
        [(f.key, s.name, s.kind, s.line) for s in facts.symbols],
    )
    add_doc(con, f.key, "file", f.key, file_doc(facts))
    for k in facts.classes:
        con.execute(
            "INSERT OR REPLACE INTO classes VALUES(?,?,?,?,?,?,?)",
            (
                f.key,
                k.name,
                k.line,
                k.form,
                json.dumps(list(k.bases)),
                json.dumps([str(d) for d in k.decorators]),
                json.dumps([f"{i.call}({i.args})" for i in k.instantiations]),
            ),
        )
        add_doc(con, f.key, "class", f"{f.key}::{k.name}", class_doc(k))
        for m in k.methods:
            _store_test(con, facts, k, m)
    for fn in facts.functions:
        _store_test(con, facts, None, fn)


def _store_test(con: sqlite3.Connection, facts: FileFacts, k: Klass | None, m: Func) -> None:
    cls = k.name if k is not None else ""
    key = test_key(facts.key, cls, m.name)
    comps = template_components(facts, cls, m.name)
    helpers = sorted(c.split(":", 1)[1] for c in comps if c.startswith("helper:"))
    cur = con.execute(
        "INSERT INTO tests(key, file, cls, method, line, form, decorators, doc, helpers, body)"
        " VALUES(?,?,?,?,?,?,?,?,?,?)",
        (
            key,
            facts.key,
            cls,
            m.name,
            m.line,
            k.form if k is not None else "function",
            "\n".join(str(d) for d in m.decorators),
            m.doc,
            " ".join(helpers),
            m.body,
        ),
    )
    tid = cur.lastrowid
    con.executemany(
        "INSERT INTO decorators VALUES(?,?,?)", [(tid, d.name, d.args) for d in m.decorators]
    )
    # The names a test uses: its own, its helpers' and what they use (a symbol
    # query finds the test through any of them), and the ``self.X`` it and they
    # use as ``self.X`` (selection reads ``self.assertRaisesRegex``: the test
    # matches exception messages; ootest.select.gather.MESSAGE_CHECKS).
    names = set(m.refs) | {h.rsplit(".", 1)[-1] for h in helpers}
    names.update(f"self.{a}" for a in m.attrs)
    for h in helpers:
        owner, _, attr = h.rpartition(".")
        sym = facts.symbol(h) if not owner else _member(facts, owner, attr)
        if sym is not None:
            names.update(sym.refs)
            names.update(f"self.{a}" for a in sym.attrs)
    con.executemany("INSERT OR IGNORE INTO refs VALUES(?,?)", [(n, tid) for n in sorted(names)])
    row = con.execute(
        "SELECT text FROM summaries WHERE key=? AND body=? ORDER BY prompt LIMIT 1",
        (key, m.body),
    ).fetchone()
    summary = str(row[0]) if row else ""  # see ootest.memory._summarize
    add_doc(con, facts.key, "test", key, test_doc(k, m, helpers, sorted(names), summary))


def _member(facts: FileFacts, cls: str, name: str) -> Symbol | None:
    """A class's member ``name`` (a helper method) as the file defines it."""
    k = facts.klass(cls)
    if k is None:
        return None
    return next((m for m in k.members if m.name == name), None)


def add_doc(con: sqlite3.Connection, file: str, kind: str, key: str, body: str) -> None:
    """One searchable document (its title is its key)."""
    cur = con.execute(
        "INSERT INTO docmap(file, kind, key, title) VALUES(?,?,?,?)", (file, kind, key, key)
    )
    con.execute("INSERT INTO docs(rowid, title, body) VALUES(?,?,?)", (cur.lastrowid, key, body))


def forget_doc(con: sqlite3.Connection, file: str, key: str) -> None:
    con.execute(
        "DELETE FROM docs WHERE rowid IN (SELECT id FROM docmap WHERE file=? AND key=?)",
        (file, key),
    )
    con.execute("DELETE FROM docmap WHERE file=? AND key=?", (file, key))


def dump_imports(imports: tuple[Import, ...]) -> str:
    return json.dumps([[i.module, list(i.names), i.level] for i in imports])


def load_imports(text: str) -> tuple[Import, ...]:
    return tuple(Import(m, tuple(n), lvl) for m, n, lvl in json.loads(text))
