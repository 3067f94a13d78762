"""The text each indexed thing is searched by (FTS5 documents).

Identifiers are also written split into words (``TestViewOps`` -> ``Test View
Ops``; ``make_tensor`` is split by the tokenizer itself), so a query in words
finds the code that spells them as a name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ootest.memory._static import FileFacts, Func, Klass

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def words(name: str) -> str:
    """``TestViewOps`` -> ``Test View Ops``; other names unchanged."""
    return _CAMEL.sub(" ", name)


def _join(parts: Iterable[str]) -> str:
    return "\n".join(p for p in parts if p)


def file_doc(facts: FileFacts) -> str:
    return _join([facts.key, facts.doc, facts.comments, facts.error or ""])


def class_doc(k: Klass) -> str:
    return _join(
        [
            words(k.name),
            " ".join(words(b) for b in k.bases),
            k.doc,
            k.comments,
            " ".join(str(d) for d in k.decorators),
            " ".join(f"{i.call}({i.args})" for i in k.instantiations),
        ]
    )


def test_doc(
    k: Klass | None, m: Func, helpers: list[str], names: list[str], summary: str = ""
) -> str:
    return _join(
        [
            words(k.name) if k is not None else "",
            m.name,
            m.doc,
            m.comments,
            " ".join(str(d) for d in m.decorators),
            " ".join(helpers),
            " ".join(names),
            summary,
        ]
    )


def entry_doc(row: tuple[Any, ...]) -> str:
    """Text of an ``entries`` row (db, name, type, base, variant, fingerprint, dtypes,
    sample, decorators)."""
    db, name, type_, base, variant, _, dtypes, sample, decorators = row[:9]
    decos = json.loads(decorators)
    described = [
        " ".join(
            [
                *d.get("decorators", []),
                str(d.get("cls_name") or ""),
                str(d.get("test_name") or ""),
                str(d.get("device_type") or ""),
            ]
        )
        for d in decos
    ]
    return _join([name, base, variant, type_, db, " ".join(json.loads(dtypes)), *described, sample])
