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


def axes_of(vid: str) -> list[tuple[str, str]]:
    """The axes of a variant ID's bracket as (key, value) pairs, in order (Note
    [Variant ID grammar] in ``ootest/config/names.py``: a part without ``=``
    continues the value before it, as a dtype tuple does)."""
    rest = vid.partition("::")[2]
    _, bracket, axes = rest.partition("[")
    if not bracket:
        return []
    out: list[tuple[str, str]] = []
    for part in axes.removesuffix("]").split(","):
        key, eq, value = part.partition("=")
        if eq:
            out.append((key, value))
        elif out:
            out[-1] = (out[-1][0], f"{out[-1][1]},{part}")
    return out


def has_device_axis(vid: str) -> bool:
    """The ID carries a ``device=`` axis: an instantiation for another device than
    the one indexed (``TestFoo::test_x[device=cpu]``), not a variant of the device
    nor a plain test (Note [Selectable variants])."""
    rest = vid.partition("::")[2]
    return "[device=" in rest or ",device=" in rest
