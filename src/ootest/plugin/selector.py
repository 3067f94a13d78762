"""``--ootest-resume`` and ``--ootest-shard``: which collected tests this run keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ootest.plugin.keys import variant_id
from ootest.record.identity import FileKeys
from ootest.record.results import CRASHED, TIMEOUT, RunData, read_records
from ootest.record.shard import ShardSpec, assign, durations_from

__all__ = ["Selector"]


class Selector:
    """Drops tests a resumed run already has, and tests of other shards.

    Runs last among collection hooks, so ``-k``/``-m`` selection and the core
    plugin's decisions (which give every item its variant ID) come first.
    Both key on variant IDs and file keys, never on node IDs: a run resumed
    from another folder or machine continues where it stopped.
    """

    def __init__(
        self,
        done: set[str],
        crashed_files: set[str],
        shard: ShardSpec | None,
        durations: Any,
        keys: FileKeys,
    ) -> None:
        self.done = done
        self.crashed_files = crashed_files
        self.shard = shard
        self.durations = durations
        self.keys = keys

    @classmethod
    def create(cls, ns: Any, keys: FileKeys) -> Selector | None:
        resume = getattr(ns, "ootest_resume", None)
        shard_text = getattr(ns, "ootest_shard", None)
        if not resume and not shard_text:
            return None
        done: set[str] = set()
        crashed: set[str] = set()
        if resume:
            data = RunData.from_records(read_records(Path(resume)))
            for key, rec in data.results.items():
                if rec.get("phase") == "collect":
                    if rec.get("outcome") in (CRASHED, TIMEOUT):
                        crashed.add(str(rec.get("file")))
                else:
                    done.add(key)
        shard = ShardSpec.parse(shard_text) if shard_text else None
        paths = [Path(p) for p in getattr(ns, "ootest_durations", None) or []]
        return cls(done, crashed, shard, durations_from(paths) if shard else {}, keys)

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        if self.crashed_files and collection_path.suffix == ".py":
            if self.keys.key(collection_path) in self.crashed_files:
                return True  # its collection crashed the process last time
        return None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        ids = [variant_id(i) for i in items]
        where: dict[str, int] | None = None
        if self.shard is not None:
            where, _ = assign(ids, self.durations, self.shard.total)
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item, vid in zip(items, ids, strict=True):
            other_shard = where is not None and where[vid] != self.shard.index - 1  # type: ignore[union-attr]
            (drop if other_shard or vid in self.done else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
