"""Split tests across N shards by recorded durations.

Greedy longest-first (LPT): tests with a recorded duration, longest first, each
go to the shard with the least total time; tests never timed are then dealt to
the shard with the least estimated time, each estimated at the mean recorded
duration (or 1 s when nothing was ever timed), so they spread evenly. Ties break
on the shard number, and the input order is sorted first, so every process that
sees the same tests and the same durations computes the same split: each test
lands in exactly one shard without any coordination.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ootest.errors import UserError
from ootest.record.results import CUT_SHORT, RunData

__all__ = [
    "ShardSpec",
    "assign",
    "durations_from",
]


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based
    total: int

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if m is None or not 1 <= int(m[1]) <= int(m[2]):
            raise UserError(f"--shard: expected I/N with 1 <= I <= N (e.g. 2/4); found {text!r}")
        return cls(int(m[1]), int(m[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def assign(
    keys: Iterable[str], durations: Mapping[str, float], shards: int
) -> tuple[dict[str, int], list[float]]:
    """Map each key to a shard (0-based) and return the estimated load per shard."""
    keys = sorted(set(keys))
    known = sorted((k for k in keys if k in durations), key=lambda k: (-durations[k], k))
    unknown = [k for k in keys if k not in durations]
    times = [durations[k] for k in known]
    estimate = sum(times) / len(times) if times else 1.0
    load = [0.0] * shards
    out: dict[str, int] = {}
    for k in known:
        i = min(range(shards), key=lambda j: (load[j], j))
        out[k] = i
        load[i] += durations[k]
    for k in unknown:
        i = min(range(shards), key=lambda j: (load[j], j))
        out[k] = i
        load[i] += estimate
    return out, load


def durations_from(paths: Iterable[Path], files: set[str] | None = None) -> dict[str, float]:
    """Per-test durations by variant ID from earlier results files; with ``files``
    (file keys, see Note [File keys]), only tests of those files."""
    data = RunData.load(*paths)
    return {
        key: float(r.get("duration") or 0.0)
        for key, r in data.results.items()
        if r.get("outcome") not in CUT_SHORT  # a cut-short time is no estimate
        and (files is None or str(r.get("file")) in files)
    }
