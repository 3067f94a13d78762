"""The repository memory: a queryable index of test trees (``ootest index``).

One SQLite file holds, for one or more test trees: files, classes, template
tests with their decorators, helpers, docstrings and comments (the static part,
read with ``ast``); the OpInfo/ModuleInfo entries of the installed torch and of
local op databases; every concrete variant collected for a device, with a
fingerprint whose components say why it changed (see Note [Variant
fingerprints] in ``_fingerprint``); full-text search (FTS5, BM25); optional
embeddings and summaries. Builds are incremental; ``diff``, ``query`` and
``stats`` are read-only and never import torch.

Nothing in this package imports torch; only the child processes it starts do.
The submodules load when first used (a query needs none of the build's), so
the names below resolve lazily.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from ootest.llm import LLMSettings
    from ootest.memory._build import BuildOptions, BuildReport, Collector, Reporter
    from ootest.memory._diff import IndexDiff, Modified
    from ootest.memory._embed import Embedder, EmbedReport
    from ootest.memory._moves import Moved
    from ootest.memory._query import Hit
    from ootest.memory._stats import IndexStats
    from ootest.memory._summarize import SummaryReport

__all__ = [
    "BuildOptions",
    "BuildReport",
    "Collector",
    "EmbedReport",
    "Embedder",
    "Hit",
    "IndexDiff",
    "IndexStats",
    "LLMSettings",
    "Modified",
    "Moved",
    "Reporter",
    "SummaryReport",
    "build_index",
    "diff_indexes",
    "embed_tests",
    "index_stats",
    "query_index",
    "summarize_tests",
]

_LAZY = {
    "BuildOptions": "_build",
    "BuildReport": "_build",
    "Collector": "_build",
    "Reporter": "_build",
    "IndexDiff": "_diff",
    "Modified": "_diff",
    "Moved": "_moves",
    "EmbedReport": "_embed",
    "Embedder": "_embed",
    "Hit": "_query",
    "IndexStats": "_stats",
    "LLMSettings": "_summarize",  # defined in ootest.llm (shared with the model judge)
    "SummaryReport": "_summarize",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ootest.memory' has no attribute {name!r}")
    return getattr(importlib.import_module(f"ootest.memory.{module}"), name)


def build_index(
    opts: BuildOptions, reporter: Reporter | None = None, collector: Collector | None = None
) -> BuildReport:
    """Build or update the index ``opts.db`` (incremental). ``collector`` enumerates
    variants (default: pytest with the ootest plugin, in child processes)."""
    from ootest.memory._build import build
    from ootest.memory._collect import collect

    return build(opts, reporter, collector or collect)


def diff_indexes(old: Path, new: Path) -> IndexDiff:
    """Variants added, removed and modified (with reasons) from ``old`` to ``new``."""
    from ootest.memory._diff import diff_indexes as diff

    return diff(old, new)


def index_stats(db: Path, limit: int | None = 20) -> IndexStats:
    from ootest.memory._stats import stats

    return stats(db, limit)


def query_index(
    db: Path,
    text: str,
    limit: int = 20,
    embed: bool | None = None,
    embedder: Embedder | None = None,
) -> list[Hit]:
    """Search the index. Embeddings rank too when ``embedder`` is given, or when
    ``embed`` is not False, the index has embeddings and the ``embed`` extra is
    installed (``embed=True`` makes a missing extra or missing embeddings an error)."""
    from ootest.errors import UserError
    from ootest.memory._embed import DEFAULT_MODEL, has_embeddings, load_embedder
    from ootest.memory._query import search
    from ootest.memory._store import connect, read_meta

    con = connect(db, readonly=True)
    try:
        model = read_meta(con).get("embed_model", DEFAULT_MODEL)
        if embedder is None and embed is not False:
            present = has_embeddings(con, model)
            if embed and not present:
                raise UserError(f"{db}: the index has no embeddings; run 'ootest index embed'")
            if present:
                try:
                    embedder = load_embedder(model)
                except UserError:
                    if embed:
                        raise
        return search(con, text, limit, embedder, model)
    finally:
        con.close()


def embed_tests(
    db: Path, model: str | None = None, embedder: Embedder | None = None
) -> EmbedReport:
    """Embed the tests whose text changed (with the model the ``embed`` extra ships,
    unless ``embedder`` is given)."""
    from ootest.memory._embed import DEFAULT_MODEL, embed_index, load_embedder
    from ootest.memory._store import connect, write_meta

    name = model or DEFAULT_MODEL
    connect(db).close()  # fail early on a bad --db, before a model loads
    fn = embedder or load_embedder(name)
    rep = embed_index(db, fn, name)
    con = connect(db)
    try:
        con.execute("BEGIN")
        write_meta(con, {"embed_model": name})
        con.execute("COMMIT")
    finally:
        con.close()
    return rep


def summarize_tests(
    db: Path, settings: LLMSettings, client: httpx.Client | None = None, limit: int | None = None
) -> SummaryReport:
    """Summarize tests through an OpenAI-compatible endpoint (cached by prompt digest)."""
    from ootest.memory._summarize import summarize

    return summarize(db, settings, client, limit)
