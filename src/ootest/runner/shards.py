"""The shard matrix: a config's tests split into N shards, as a GitHub Actions matrix.

Each leg runs ``ootest run CONFIG --shard I/N --durations RESULTS``; the split
itself is made by the run (``ootest.record.shard.assign``) from the same
durations, so every test is in exactly one shard. The matrix only names the legs
and estimates their load.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ootest.config.paths import file_keys
from ootest.errors import UserError
from ootest.record.shard import assign, durations_from

if TYPE_CHECKING:
    from ootest.config.resolved import Config

__all__ = ["shard_matrix"]


def shard_matrix(cfg: Config, shards: int, durations: Iterable[Path] = ()) -> dict[str, Any]:
    """``{"include": [leg, ...]}``, one leg per shard of ``cfg``."""
    if shards < 1:
        raise UserError(f"--shards: expected a number >= 1; found {shards}")
    keys = file_keys(cfg.source, (t for t, _ in cfg.resolved))
    files = {keys.key(rf.path) for rf in cfg.files}
    known = durations_from(list(durations), files)
    _, load = assign(known, known, shards)
    name = cfg.source.stem
    device = cfg.suite.device or "plain"
    include = [
        {
            "shard": f"{i + 1}/{shards}",
            "index": i + 1,
            "total": shards,
            "job_name": f"ootest {name} ({device}) shard {i + 1} of {shards}",
            "artifact": f"ootest-{name}-shard-{i + 1}-of-{shards}",
            "estimated_seconds": round(load[i], 1) if known else None,
        }
        for i in range(shards)
    ]
    return {"include": include}
