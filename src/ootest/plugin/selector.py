"""``--ootest-resume``, ``--ootest-shard`` and ``--ootest-only``: which collected
tests this run keeps."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ootest.plugin.keys import variant_id
from ootest.record.identity import FileKeys
from ootest.record.results import CRASHED, TIMEOUT, RunData, finished_files, read_records
from ootest.record.shard import ShardSpec, assign, durations_from

__all__ = ["NotCollected", "Selector"]


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
        finished_files: set[str] | None = None,
        only: frozenset[str] | None = None,
    ) -> None:
        self.done = done
        self.only = only  # --ootest-only: just these variant IDs
        self.crashed_files = crashed_files
        self.finished_files = finished_files or set()
        self.shard = shard
        self.durations = durations
        self.keys = keys
        self.skipped: list[str] = []  # file keys not collected in this session

    @classmethod
    def create(cls, ns: Any, keys: FileKeys, run: str | None = None) -> Selector | None:
        resume = getattr(ns, "ootest_resume", None)
        shard_text = getattr(ns, "ootest_shard", None)
        only_file = getattr(ns, "ootest_only", None)
        if not resume and not shard_text and not only_file:
            return None
        only = None
        if only_file:
            only = read_only(Path(only_file))
        done: set[str] = set()
        crashed: set[str] = set()
        finished: set[str] = set()
        if resume:
            records = read_records(Path(resume))
            data = RunData.from_records(records)
            for key, rec in data.results.items():
                if rec.get("phase") == "collect":
                    if rec.get("outcome") in (CRASHED, TIMEOUT):
                        crashed.add(str(rec.get("file")))
                else:
                    done.add(key)
            if run:
                finished = finished_files(records, run)
        shard = ShardSpec.parse(shard_text) if shard_text else None
        paths = [Path(p) for p in getattr(ns, "ootest_durations", None) or []]
        durations = durations_from(paths) if shard else {}
        return cls(done, crashed, shard, durations, keys, finished, only)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(
        self, module_path: Path, parent: pytest.Collector
    ) -> pytest.Collector | None:
        # Here rather than in pytest_ignore_collect, which pytest does not ask about
        # the files given on its command line (the config's files are).
        if not (self.crashed_files or self.finished_files):
            return None
        key = self.keys.key(module_path)
        config = parent.config
        serial = not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "no"
        # its collection crashed the process last time; or every test it has is done
        # (Note [Restarts skip finished files]; under pytest-xdist every worker must
        # collect the same tests, so there the files are collected and deselected)
        if key in self.crashed_files or (serial and key in self.finished_files):
            self.skipped.append(key)
            return NotCollected.from_parent(parent, path=module_path)
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
            other = self.only is not None and vid not in self.only
            (drop if other_shard or other or vid in self.done else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


class NotCollected(pytest.File):
    """A test file this session leaves out (see :meth:`Selector.pytest_pycollect_makemodule`)."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        return []


def read_only(path: Path, flag: str = "--ootest-only") -> frozenset[str]:
    """The variant IDs of an ``--ootest-only`` file: one a line (blank lines and
    ``#`` comments ignored); ``flag``: the option that named it, for the error."""
    from ootest.errors import UserError

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"{flag} {path}: expected a file of variant IDs, one a line; "
            f"cannot read it: {getattr(e, 'strerror', None) or e}"
        ) from None
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
