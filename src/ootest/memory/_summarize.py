"""Optional short summaries of tests through an OpenAI-compatible HTTP endpoint.

Off by default: only ``ootest index summarize`` asks a model. Each prompt is
built from the test's source and facts; its digest keys the cache, so a rerun
asks nothing again and gives byte-identical summaries. The HTTP client is
injectable (``httpx.Client`` with a transport), so tests need no network.
A summary is added to its test's searchable text. The request itself is
:func:`ootest.llm.chat`, shared with the model judge of ``select run``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ootest.llm import LLMSettings, chat
from ootest.memory._hashing import digest
from ootest.memory._static import FileFacts, load_facts
from ootest.memory._store import connect, refresh_common_terms

if TYPE_CHECKING:
    import httpx  # imported when summaries are asked for: query and stats need none of it

SYSTEM = (
    "You summarize one PyTorch test in one or two sentences: what behaviour it checks, "
    "which operators or modules it exercises, and any device or dtype restriction. "
    "Answer with the summary only."
)
_MAX_SOURCE = 6000


@dataclass
class SummaryReport:
    asked: int = 0
    cached: int = 0


def prompt_for(key: str, source: str, decorators: str, helpers: str) -> str:
    parts = [f"Test: {key}"]
    if decorators:
        parts.append(f"Decorators:\n{decorators}")
    if helpers:
        parts.append(f"Helpers it uses: {helpers}")
    parts.append(f"Source:\n{source[:_MAX_SOURCE]}")
    return "\n\n".join(parts)


def summarize(
    db: Path, settings: LLMSettings, client: httpx.Client | None = None, limit: int | None = None
) -> SummaryReport:
    import httpx

    con = connect(db)
    own = client is None
    http = client or httpx.Client(timeout=settings.timeout)
    try:
        return _summarize(con, settings, http, limit)
    finally:
        con.close()
        if own:
            http.close()


def _summarize(
    con: sqlite3.Connection, settings: LLMSettings, http: httpx.Client, limit: int | None
) -> SummaryReport:
    rep = SummaryReport()
    rows = con.execute(
        "SELECT tests.key, tests.file, tests.cls, tests.method, tests.decorators, tests.helpers, "
        "tests.body, files.path, facts.facts FROM tests JOIN files ON files.key = tests.file "
        "JOIN facts ON facts.key = tests.file ORDER BY tests.key"
    ).fetchall()
    for key, _file, cls, method, decorators, helpers, body, path, facts_json in rows:
        if limit is not None and rep.asked >= limit:
            break
        source = _source(Path(path), load_facts(facts_json), cls, method)
        prompt = prompt_for(key, source, decorators, helpers)
        pkey = digest([settings.model, SYSTEM, prompt])
        if con.execute("SELECT 1 FROM summaries WHERE prompt=?", (pkey,)).fetchone():
            rep.cached += 1
            continue
        text = chat(http, settings, SYSTEM, prompt)
        rep.asked += 1
        con.execute("BEGIN")
        con.execute(
            "INSERT OR REPLACE INTO summaries VALUES(?,?,?,?,?)",
            (pkey, key, body, settings.model, text),
        )
        _append_to_doc(con, key, text)
        con.execute("COMMIT")
    if rep.asked:
        con.execute("BEGIN")
        refresh_common_terms(con)
        con.execute("COMMIT")
    return rep


def _source(path: Path, facts: FileFacts, cls: str, method: str) -> str:
    funcs = (
        facts.functions
        if not cls
        else next((k.methods for k in facts.classes if k.name == cls), ())
    )
    func = next((f for f in funcs if f.name == method), None)
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    if func is None:
        return ""
    return "\n".join(lines[func.line - 1 : func.end])


def _append_to_doc(con: sqlite3.Connection, key: str, text: str) -> None:
    row = con.execute("SELECT id FROM docmap WHERE kind='test' AND key=?", (key,)).fetchone()
    if row is not None:
        con.execute("UPDATE docs SET body = body || char(10) || ? WHERE rowid=?", (text, row[0]))
