"""The marks the plugin gives variants: each prefix, and the text it registers with.

``-m op__add`` selects the variants of ``add``; see README "Marks". The names are
facts other tools read back (a selection written with ``-m``), so they are spelled
here only.
"""

from __future__ import annotations

from collections.abc import Iterable

from ootest.config.names import Variant

__all__ = [
    "ATEN",
    "DTYPE",
    "LABEL",
    "MODULE",
    "OP",
    "TAG",
    "axis_marks",
    "labels",
    "mark_text",
    "tags",
    "unique",
]

OP = "op__"  # the variant's op (its OpInfo name and full name)
DTYPE = "dtype__"  # each of its dtypes
MODULE = "module__"  # its ModuleInfo
TAG = "tag__"  # the config entry's tags
LABEL = "label__"  # suite, file and entry labels
ATEN = "aten__"  # aten ops the op map saw it call (--ootest-ops)

_TEXT = {
    OP: "variants of op ",
    DTYPE: "variants of dtype ",
    MODULE: "variants of module ",
    TAG: "config tag ",
    LABEL: "config label ",
    ATEN: "variants the op map saw call aten::",
}


def mark_text(name: str) -> str:
    """The description a mark is registered with (from its name)."""
    prefix, sep, rest = name.partition("__")
    return _TEXT.get(prefix + sep, "") + rest


def unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def axis_marks(v: Variant) -> tuple[str, ...]:
    """Mark names for a variant's op, dtypes and module."""
    ops = (OP + op for op in (v.op_name, v.op) if op)
    module = (MODULE + v.module,) if v.module else ()
    return unique([*ops, *(DTYPE + dt for dt in v.dtypes), *module])


def tags(names: Iterable[str]) -> list[str]:
    return [TAG + t for t in names]


def labels(names: Iterable[str]) -> list[str]:
    return [LABEL + x for x in names]
