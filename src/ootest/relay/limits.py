"""Bounded reading of untrusted JSON, and how untrusted values are shown in messages.

Python's ``json`` recurses once per nesting level and raises RecursionError near
1,000 levels, after doing the work; :func:`deeper_than` checks the nesting of the
raw bytes first, in a few linear C-speed passes (bytes methods and one regex), so
a deep document is refused before it is parsed.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import Any

# How deep any JSON the relay commands read may nest. The GitHub webhooks the relay
# forwards nest 5 levels, 7 inside a dispatch event (shared/fixtures/crcr, checked
# by tests/relay/test_hostile.py); 32 leaves room and stays far below the ~1,000
# levels where Python's json gives up with RecursionError.
MAX_DEPTH = 32

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_PARENS = bytes.maketrans(b"[]{}", b"()()")


# Possessive repeats (Python 3.11+) never backtrack; plain ones give the same
# matches on these patterns, about 6x slower (they keep a restart point per unit).
_REPEAT = b"*+" if sys.version_info >= (3, 11) else b"*"


@functools.lru_cache(maxsize=4)
def _balanced(limit: int) -> re.Pattern[bytes]:
    """Top-level units of balanced parentheses nested at most ``limit`` deep. A
    match runs once over the text and ends before the first unit that would go
    one level deeper or is not closed."""
    unit = b""
    for _ in range(limit):
        unit = rb"(?:\(" + unit + rb"\))" + _REPEAT
    return re.compile(unit)


def _units_end(pattern: re.Pattern[bytes], text: bytes) -> int:
    m = pattern.match(text)  # the pattern matches the empty string: never None
    return m.end() if m else 0


def deeper_than(raw: bytes, limit: int) -> bool:
    """Whether containers in the JSON text ``raw`` nest deeper than ``limit``
    (``[]`` is 1 level, ``{"a": []}`` 2), decided without parsing, in time linear
    in its size.

    Strings are cut out first: escaped backslashes and quotes go, then every
    quote-delimited run. Invalid JSON (an unclosed or unopened bracket) counts as
    deeper only if the parser would recurse past ``limit`` before its error.
    """
    flat = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(flat.split(b'"')[::2])
    skeleton = outside.translate(_PARENS, _NOT_BRACKETS)
    balanced = _balanced(limit)
    rest = skeleton[_units_end(balanced, skeleton) :]
    if not rest or rest.startswith(b")"):
        return False  # balanced within the limit, or an unopened ')' (invalid JSON)
    # The first unit left is too deep, or not closed when the text ends: closing
    # it artificially completes it only in the second case.
    return _units_end(balanced, rest + b")" * (limit + 1)) == 0


def object_depth(obj: Any, limit: int) -> int:
    """The nesting depth of decoded data, counted without recursion; stops at
    ``limit + 1`` (which also ends the walk of a structure that contains itself)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_at_most(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """The bytes of a file that holds at most ``max_bytes`` (no more is read).

    OSError passes through; a larger file is a ValueError reading 'expected ...,
    found ...' with its size."""
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            size = os.fstat(fh.fileno()).st_size  # 0 for a pipe
            found = f"{size:,} bytes" if size > max_bytes else f"more than {max_bytes:,} bytes"
            raise ValueError(f"expected {what} of at most {max_bytes:,} bytes, found {found}")
    return data


def loads(raw: bytes, *, max_bytes: int, max_depth: int, what: str = "JSON") -> Any:
    """Decode ``raw`` within bounds; a ValueError's text reads 'expected ..., found ...'."""
    if len(raw) > max_bytes:
        raise ValueError(
            f"expected {what} of at most {max_bytes:,} bytes, found {len(raw):,} bytes"
        )
    try:
        # UTF-8 only (what GitHub sends): no byte of a multi-byte character is a
        # quote or a bracket, so json_depth reads the bytes as the parser will.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"expected valid JSON, found bytes that are not UTF-8 ({e.reason} at byte {e.start:,})"
        ) from None
    if deeper_than(raw, max_depth):
        raise ValueError(
            f"expected JSON nested at most {max_depth} levels deep, found more than {max_depth}"
        )
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError, or more digits than Python converts
        raise ValueError(f"expected valid JSON, found {one_line(str(e))}") from None


def one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


_SHOWN = re.compile(r"[A-Za-z0-9._/:@+= -]*")
_EXCERPT = 40  # characters of a found value a message may quote


def describe(value: Any) -> str:
    """An untrusted value as a message may show it: one short line, and text only
    when every character is in a plain set (never a shell or workflow snippet)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            digits = str(value)
        except ValueError:  # more digits than Python converts
            return f"a number of more than {sys.get_int_max_str_digits():,} digits"
        n = len(digits.lstrip("-"))
        return digits if n <= 20 else f"a {n}-digit number"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return f"a list of {len(value):,} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        if not _SHOWN.fullmatch(value):
            return (
                f"a string of {len(value):,} characters (not shown: outside [A-Za-z0-9._/:@+= -])"
            )
        if len(value) > _EXCERPT:
            return f"{value[:_EXCERPT]!r}... ({len(value):,} characters)"
        return repr(value)
    return f"a {type(value).__name__}"
