"""Optional embeddings of test documents (off by default; extra ``ootest[embed]``).

Nothing is downloaded unless the user asks for embeddings explicitly
(``ootest index embed``, or ``--embed`` on ``query`` with the model's weights
already cached). Vectors are cached per (test, model) by the digest of the text
embedded: only tests whose text changed are embedded again. The embedder is
injectable (any ``texts -> vectors`` callable), so tests need no model.
"""

from __future__ import annotations

import math
import sqlite3
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.memory._hashing import digest_text
from ootest.memory._store import connect

Embedder = Callable[[Sequence[str]], list[list[float]]]
DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
_BATCH = 64


def load_embedder(model: str = DEFAULT_MODEL, *, allow_download: bool) -> Embedder:
    """A fastembed model; UserError when the ``embed`` extra is not installed."""
    try:
        from fastembed import TextEmbedding
    except ImportError:
        raise UserError(
            "embeddings need the optional 'embed' extra: pip install 'ootest[embed]' "
            "(installs fastembed; the model's weights download on first use of "
            "'ootest index embed')"
        ) from None
    # Without allow_download, only weights already in fastembed's cache may load.
    offline: dict[str, Any] = {} if allow_download else {"local_files_only": True}
    try:
        emb: Any = TextEmbedding(model_name=model, **offline)
    except Exception as e:  # fastembed raises plain exceptions for unknown/missing models
        how = "" if allow_download else " (not downloaded yet: run 'ootest index embed' first)"
        raise UserError(f"embedding model {model!r} cannot be loaded{how}: {e}") from None

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [[float(x) for x in v] for v in emb.embed(list(texts))]

    return embed


@dataclass
class EmbedReport:
    embedded: int = 0
    reused: int = 0
    dropped: int = 0


def embed_index(db: Path, embedder: Embedder, model: str) -> EmbedReport:
    """Embed every test document whose text changed since it was last embedded."""
    con = connect(db)
    try:
        return _embed(con, embedder, model)
    finally:
        con.close()


def _embed(con: sqlite3.Connection, embedder: Embedder, model: str) -> EmbedReport:
    rep = EmbedReport()
    docs = con.execute(
        "SELECT docmap.key, docs.body FROM docmap JOIN docs ON docs.rowid = docmap.id "
        "WHERE docmap.kind = 'test' ORDER BY docmap.key"
    ).fetchall()
    have = dict(
        con.execute("SELECT key, digest FROM embeddings WHERE model=?", (model,)).fetchall()
    )
    todo = [(k, body, digest_text(body)) for k, body in docs if have.get(k) != digest_text(body)]
    rep.reused = len(docs) - len(todo)
    gone = have.keys() - {k for k, _ in docs}
    con.execute("BEGIN")
    try:
        con.executemany(
            "DELETE FROM embeddings WHERE key=? AND model=?", [(k, model) for k in gone]
        )
        rep.dropped = len(gone)
        for i in range(0, len(todo), _BATCH):
            batch = todo[i : i + _BATCH]
            vectors = embedder([body for _, body, _ in batch])
            con.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES(?,?,?,?)",
                [(k, model, d, _pack(v)) for (k, _, d), v in zip(batch, vectors, strict=True)],
            )
            rep.embedded += len(batch)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return rep


def has_embeddings(con: sqlite3.Connection, model: str) -> bool:
    row = con.execute("SELECT 1 FROM embeddings WHERE model=? LIMIT 1", (model,)).fetchone()
    return row is not None


def _pack(vector: Sequence[float]) -> bytes:
    return array("f", _normalized(vector)).tobytes()


def _normalized(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def nearest(
    con: sqlite3.Connection, text: str, embedder: Embedder, model: str, limit: int
) -> list[tuple[str, str, str]]:
    """Tests ranked by cosine similarity to ``text`` (kind, key, "")."""
    q = _normalized(embedder([text])[0])
    scored: list[tuple[float, str]] = []
    for key, blob in con.execute("SELECT key, vector FROM embeddings WHERE model=?", (model,)):
        v = array("f")
        v.frombytes(blob)
        if len(v) != len(q):
            continue
        scored.append((sum(a * b for a, b in zip(q, v, strict=True)), key))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [("test", key, "") for _, key in scored[:limit]]
