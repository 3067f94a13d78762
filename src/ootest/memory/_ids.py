"""Variant IDs taken apart: helpers without the indexing machinery behind them
(``index diff`` and ``select run --since`` import this, not the collector)."""

from __future__ import annotations


def file_of(vid: str) -> str:
    """The file key a variant ID starts with."""
    return vid.split("::", 1)[0]


def template_of(vid: str) -> str:
    """The test key of a variant ID: the ID without its bracket."""
    file, _, rest = vid.partition("::")
    return f"{file}::{rest.split('[', 1)[0]}"
