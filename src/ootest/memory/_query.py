"""``ootest index query TEXT``: exact names first, then BM25, then embeddings, fused.

Ranked lists are merged by weighted reciprocal-rank fusion
(``score = sum(weight / (60 + rank))``):

1. identity (weight 10): the variant ID or test key (``file::Class::test``) given;
2. exact names (weight 3): the test (its key without the variant's bracket), a
   test, class, module-level symbol, OpInfo/ModuleInfo entry or file of that
   name, and the tests that use a symbol of that name (directly or through
   their helpers);
3. BM25 over the text of files, classes, tests and entries (FTS5; weight 1):
   documents with every word, then (when fewer than asked) those with some of
   the rarer words; when even the rarest word is in more than RANKED_MATCHES
   documents they are listed unranked (bounded time: ranking costs per match);
4. cosine similarity of embeddings, when the index has them and an embedder
   is given (weight 1).

An identity match always ranks first; up to 30 exact name matches rank above
anything found by text alone.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.memory._store import connect

RRF_K = 60
WEIGHTS = {"id": 10.0, "exact": 3.0, "bm25": 1.0, "embedding": 1.0}
#: A query that names something skips BM25 when its rarest word is in more documents
#: than this (``test_x``: every test has "test"); ranking costs about 3 us per match.
NAMED_MATCHES = 2000
#: The any-word ranking uses the rarest words whose documents add up to about this
#: many (at least the rarest word): common words add little to BM25 but cost the same.
ANY_WORD_MATCHES = 3000
#: A query whose rarest word is in more documents than this: they are listed
#: unranked (BM25 over them would take longer than a query may; such words say little).
RANKED_MATCHES = 2000
_TOKEN = re.compile(r"[A-Za-z0-9]+")
_BRACKET = re.compile(r"\[[^\[\]]*\]$")

Embedder = Callable[[Sequence[str]], list[list[float]]]


@dataclass
class Hit:
    kind: str  # variant | test | class | symbol | file | opinfo | moduleinfo
    key: str
    score: float = 0.0
    found_by: list[str] = field(default_factory=list)  # exact:<how> | bm25 | embedding
    snippet: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "score": round(self.score, 6),
            "found_by": self.found_by,
            "snippet": self.snippet,
        }


Ranked = list[tuple[str, str, str]]  # (kind, key, how or snippet)


def query(
    db: Path, text: str, limit: int = 20, embedder: Embedder | None = None, model: str = ""
) -> list[Hit]:
    con = connect(db, readonly=True)
    try:
        return search(con, text, limit, embedder, model)
    finally:
        con.close()


def search(
    con: sqlite3.Connection,
    text: str,
    limit: int = 20,
    embedder: Embedder | None = None,
    model: str = "",
) -> list[Hit]:
    text = text.strip()
    if not text:
        return []
    lists: dict[str, Ranked] = {"id": identity(con, text), "exact": exact(con, text, limit * 5)}
    # The variant or test named exactly is the answer: no text ranking. Text that names
    # something else gets the documents with all its words, when they are few; the
    # broader rankings are for queries that name nothing.
    named = bool(lists["id"] or lists["exact"])
    if not lists["id"]:
        lists["bm25"] = bm25(
            con,
            text,
            limit * 5,
            enough=limit,
            any_word=not named,
            at_most=NAMED_MATCHES if named else None,
        )
    if embedder is not None:
        from ootest.memory._embed import nearest

        lists["embedding"] = nearest(con, text, embedder, model, limit * 5)
    hits = fuse(lists, limit)
    add_snippets(con, text, hits)
    return hits


def fuse(lists: dict[str, Ranked], limit: int) -> list[Hit]:
    hits: dict[tuple[str, str], Hit] = {}
    for name, ranked in lists.items():
        weight = WEIGHTS[name]
        for rank, (kind, key, how) in enumerate(ranked, start=1):
            hit = hits.setdefault((kind, key), Hit(kind, key))
            hit.score += weight / (RRF_K + rank)
            hit.found_by.append(f"exact:{how}" if name in ("id", "exact") else name)
    ordered = sorted(hits.values(), key=lambda h: (-h.score, h.kind, h.key))
    return ordered[:limit]


def identity(con: sqlite3.Connection, text: str) -> Ranked:
    """The variant or test ``text`` names exactly."""
    out: Ranked = []
    for (vid,) in con.execute("SELECT id FROM variants WHERE id=?", (text,)):
        out.append(("variant", vid, "variant id"))
    for (key,) in con.execute("SELECT key FROM tests WHERE key=?", (text,)):
        out.append(("test", key, "test key"))
    return out


def exact(con: sqlite3.Connection, text: str, limit: int) -> Ranked:
    """Things named ``text`` (every lookup is an index search)."""
    out: Ranked = []
    one = con.execute
    base = _BRACKET.sub("", text)
    if base != text:
        for (key,) in one("SELECT key FROM tests WHERE key=?", (base,)):
            out.append(("test", key, "test of the variant"))
    cls, _, meth = text.rpartition("::")
    if cls:
        rows = one(
            "SELECT key FROM tests WHERE cls=? AND method=? ORDER BY key LIMIT ?",
            (cls, meth, limit),
        )
    else:  # read in key order from the (method, key) index: the first ``limit`` only
        rows = one("SELECT key FROM tests WHERE method=? ORDER BY key LIMIT ?", (meth, limit))
    out += [("test", key, "test name") for (key,) in rows]
    rows = one("SELECT file, name FROM classes WHERE name=? ORDER BY file LIMIT ?", (text, limit))
    out += [("class", f"{f}::{n}", "class name") for f, n in rows]
    rows = one(
        "SELECT file, name, kind FROM symbols WHERE name=? AND kind != 'class' "
        "ORDER BY file LIMIT ?",
        (text, limit),
    )
    out += [("symbol", f"{f}::{n}", f"{k} name") for f, n, k in rows]
    rows = one(
        "SELECT db, name, type FROM entries WHERE name=? UNION "
        "SELECT db, name, type FROM entries WHERE base=? ORDER BY 2, 1 LIMIT ?",
        (text, text, limit),
    )
    out += [(t, f"{db}:{n}", "entry name") for db, n, t in rows]
    rows = one(  # in index order (tests as they were indexed): a common name stops early
        "SELECT tests.key FROM refs JOIN tests ON tests.id = refs.test WHERE refs.name=? "
        "ORDER BY refs.test LIMIT ?",
        (text, limit),
    )
    out += [("test", key, "uses symbol") for (key,) in rows]
    rows = one(
        "SELECT key FROM files WHERE key=? UNION SELECT key FROM files WHERE name=? "
        "ORDER BY 1 LIMIT ?",
        (text, text, limit),
    )
    out += [("file", key, "file") for (key,) in rows]
    seen: set[tuple[str, str]] = set()
    unique: Ranked = []
    for kind, key, how in out:
        if (kind, key) not in seen:
            seen.add((kind, key))
            unique.append((kind, key, how))
    return unique[:limit]


def words_of(text: str) -> list[str]:
    return list(dict.fromkeys(t.lower() for t in _TOKEN.findall(text)))


def fts_query(words: list[str], op: str) -> str:
    """The words as quoted FTS5 terms joined by ``op`` ("AND" / "OR")."""
    return f" {op} ".join(f'"{w}"' for w in words)


def bm25(
    con: sqlite3.Connection,
    text: str,
    limit: int,
    enough: int | None = None,
    any_word: bool = True,
    at_most: int | None = None,
) -> Ranked:
    """Documents ranked by BM25 (title weighted 5x). Documents with every word come
    first; with ``any_word``, documents with only some of the rarer words are added
    when those are fewer than ``enough`` (ranking costs about 3 us per matching
    document: an OR of common words matches most of the index). ``at_most``:
    nothing when the rarest word is in more documents than that."""
    words = words_of(text)
    if not words:
        return []
    counts = doc_counts(con, words)
    query = fts_query(informative(con, counts), "AND")
    n = min(counts.values())  # at least as many documents as have every word
    if at_most is not None and n > at_most:
        return []
    if n > RANKED_MATCHES:  # words in most documents say little: the first ones, unranked
        return _unranked(con, query, limit)
    out = _ranked(con, query, limit)
    if any_word and len(out) < (enough or limit) and len(words) > 1:
        have = {(k, key) for k, key, _ in out}
        more = _ranked(con, fts_query(rare_words(counts), "OR"), limit)
        out += [r for r in more if (r[0], r[1]) not in have][: limit - len(out)]
    return out


def doc_counts(con: sqlite3.Connection, words: list[str]) -> dict[str, int]:
    """How many documents hold each word, from ``common_terms`` (a word not listed
    there is in fewer than COMMON_TERM documents, or changed by the stemmer: 0)."""
    marks = ",".join("?" * len(words))
    found = dict(con.execute(f"SELECT term, docs FROM common_terms WHERE term IN ({marks})", words))
    return {w: int(found.get(w, 0)) for w in words}


def informative(con: sqlite3.Connection, counts: dict[str, int]) -> list[str]:
    """The words without those in more than a quarter of the documents ("test",
    "py", "dtype" in a variant ID), unless that leaves none: they filter little and
    make the AND slow (FTS5 intersects their long document lists)."""
    total = int(con.execute("SELECT max(id) FROM docmap").fetchone()[0] or 0)  # about
    kept = [w for w, n in counts.items() if n <= total // 4]
    return kept or list(counts)


def rare_words(counts: dict[str, int]) -> list[str]:
    """The rarest words whose document counts add up to ANY_WORD_MATCHES (at least one)."""
    out: list[str] = []
    total = 0
    for w, n in sorted(counts.items(), key=lambda kv: (kv[1], kv[0])):
        if out and total + n > ANY_WORD_MATCHES:
            break
        out.append(w)
        total += n
    return out


def _unranked(con: sqlite3.Connection, query: str, limit: int) -> Ranked:
    rows = con.execute(
        "SELECT docmap.kind, docmap.key FROM docs JOIN docmap ON docmap.id = docs.rowid "
        "WHERE docs MATCH ? LIMIT ?",
        (query, limit),
    ).fetchall()
    return [(kind, key, "") for kind, key in rows]


def _ranked(con: sqlite3.Connection, query: str, limit: int) -> Ranked:
    rows = con.execute(
        "SELECT docmap.kind, docmap.key FROM docs JOIN docmap ON docmap.id = docs.rowid "
        "WHERE docs MATCH ? ORDER BY bm25(docs, 5.0, 1.0) LIMIT ?",
        (query, limit),
    ).fetchall()
    return [(kind, key, "") for kind, key in rows]


def add_snippets(con: sqlite3.Connection, text: str, hits: list[Hit], width: int = 80) -> None:
    """The first query word in context (``...the [word] in...``) for the hits BM25
    found, cut from the stored text here: FTS5's snippet() would evaluate the whole
    query again for each row."""
    words = words_of(text)
    rows = [h for h in hits if "bm25" in h.found_by]
    if not words or not rows:
        return
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\w*", re.I)
    for h in rows:
        found = con.execute(
            "SELECT docs.body FROM docmap JOIN docs ON docs.rowid = docmap.id "
            "WHERE docmap.kind=? AND docmap.key=? LIMIT 1",
            (h.kind, h.key),
        ).fetchone()
        if found is not None:
            h.snippet = snippet(str(found[0]), pattern, width)


def snippet(body: str, pattern: re.Pattern[str], width: int) -> str:
    flat = " ".join(body.split())
    m = pattern.search(flat)
    if m is None:
        return flat[:width]
    start = max(0, m.start() - width // 3)
    cut = flat[start : start + width]
    marked = pattern.sub(lambda x: f"[{x.group(0)}]", cut)
    return ("..." if start else "") + marked + ("..." if start + width < len(flat) else "")
