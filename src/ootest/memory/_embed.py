"""Optional embeddings of test documents (off by default; extra ``ootest[embed]``).

Note [Embedding weights ship in the wheel]: the model is WordLlama's
``l2_supercat_256`` (static token embeddings, mean-pooled, 256 dimensions), whose
weights and tokenizer lie inside the ``wordllama`` wheel itself: installing the
extra from the package registry is all it takes, and nothing downloads weights at
run time (``disable_download=True``; a model the wheel does not ship is an error,
never a fetch). Vectors are cached per (test, model) by the digest of the text
embedded: only tests whose text changed are embedded again. The embedder is
injectable (any ``texts -> vectors`` callable), so tests need no model.
"""

from __future__ import annotations

import logging
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
# Stored with every vector: another library or model never mixes with these.
DEFAULT_MODEL = "wordllama/l2_supercat_256"
_PREFIX = "wordllama/"
_BATCH = 64


def load_embedder(model: str = DEFAULT_MODEL) -> Embedder:
    """A WordLlama model shipped in its wheel; UserError when the ``embed`` extra
    is not installed or the wheel does not ship ``model``."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise UserError(
            "embeddings need the optional 'embed' extra: pip install 'ootest[embed]' "
            "(installs wordllama, whose wheel ships the model's weights)"
        ) from None
    finally:
        # wordllama's inference module calls logging.basicConfig() at import: undo
        # it, so that importing the extra leaves the process's logging as it was.
        root.handlers[:], root.level = handlers, level
    package = Path(wordllama.__file__).parent
    # weights/<config>_<dim>.safetensors (a "_binary" file is another format)
    weights = (package / "weights").glob("*_[0-9]*.safetensors")
    shipped = sorted(f"{_PREFIX}{w.stem}" for w in weights if w.stem.rpartition("_")[2].isdigit())
    if model not in shipped:
        raise UserError(
            f"embedding model {model!r} is not shipped in the installed wordllama wheel "
            f"(models are never downloaded); expected one of: {', '.join(shipped) or 'none'}"
        )
    config, _, dim = model.removeprefix(_PREFIX).rpartition("_")
    try:
        # cache_dir=the package folder: WordLlama looks for the tokenizer under
        # <cache_dir>/tokenizers/, which is where the wheel puts it.
        wl: Any = WordLlama.load(
            config=config, dim=int(dim), cache_dir=package, disable_download=True
        )
    except Exception as e:  # wordllama raises plain exceptions for missing or broken files
        raise UserError(f"embedding model {model!r} cannot be loaded from {package}: {e}") from None

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [[float(x) for x in v] for v in wl.embed(list(texts), norm=True)]

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
