"""Per-object memoization for objects that are not hashable (pydantic models, OpInfos)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """``build(obj)`` computed once per object, keyed by identity.

    The table holds each object, so its ``id`` cannot be reused by another one
    while the entry lives; ``clear()`` drops them all.
    """

    def __init__(self, build: Callable[[K], V]) -> None:
        self._build = build
        self._table: dict[int, tuple[K, V]] = {}

    def __call__(self, obj: K) -> V:
        hit = self._table.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = self._table[id(obj)] = (obj, self._build(obj))
        return hit[1]

    def clear(self) -> None:
        self._table.clear()
