"""What lets a run outlive a test that hangs or kills its process: the fault log,
the in-flight file, and the per-test timeout (``--ootest-state``, ``--ootest-timeout``)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

from ootest.plugin.keys import is_controller, module_node_id, result_fields, worker
from ootest.record import crash
from ootest.record.identity import FileKeys

__all__ = ["Isolation"]


class Isolation:
    """Records in the state directory which test (or file, while collecting) each
    process is running, with faulthandler writing next to it, so that whoever sees
    the process die (the supervisor, a pytest-xdist controller) can attribute the
    crash; and, with a timeout, dumps and kills a test still running after it."""

    def __init__(self, state_dir: Path | None, timeout: float | None, keys: FileKeys) -> None:
        self.state_dir, self.timeout, self.keys = state_dir, timeout, keys
        self.worker = "main"
        self._inflight: Path | None = None
        self._fault_fh: IO[str] | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        config = session.config
        if is_controller(config) or self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.worker = wid = worker(config)
        self._inflight = crash.inflight_path(self.state_dir, wid)
        self._fault_fh = open(self.state_dir / f"fault-{wid}-{os.getpid()}.log", "w")
        faulthandler.enable(file=self._fault_fh, all_threads=True)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._fault_fh is not None:
            faulthandler.disable()
            self._fault_fh.close()
            with contextlib.suppress(OSError):
                if os.path.getsize(self._fault_fh.name) == 0:
                    os.unlink(self._fault_fh.name)

    def _track(self, data: dict[str, Any]) -> None:
        if self._inflight is not None:
            data.update(
                start=time.time(),
                worker=self.worker,
                timeout=self.timeout,
                fault_log=self._fault_fh.name if self._fault_fh is not None else None,
            )
            crash.write_inflight(self._inflight, data)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        if self._inflight is None or not isinstance(collector, pytest.Module):
            return (yield)
        key = self.keys.key(collector.path)
        arg = module_node_id(collector.config, collector.nodeid, collector.nodeid, collector.path)
        self._track({"phase": "collect", "nodeid": arg, "variant_id": key, "file": key})
        try:
            return (yield)
        finally:
            crash.clear_inflight(self._inflight)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        if self._inflight is not None:
            self._track({"phase": "run", "pytest_nodeid": item.nodeid, **result_fields(item)})
        armed = self.timeout is not None and self.timeout > 0
        armed = armed and not runs_no_code(item, nextitem)
        if armed and self.timeout:
            faulthandler.dump_traceback_later(
                self.timeout, exit=True, file=self._fault_fh or sys.stderr
            )
        try:
            return (yield)
        finally:
            if armed:
                faulthandler.cancel_dump_traceback_later()
            if self._inflight is not None:
                crash.clear_inflight(self._inflight)


def runs_no_code(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether ``item`` can run no code that might hang: it carries an unconditional
    ``skip`` mark (how a config skips a variant), so pytest skips it before setting
    anything up, and the next test shares its parent, so its teardown tears down
    nothing either (the last test of a class or module tears down that scope:
    ``tearDownClass``, fixtures, which may hang, so it keeps its timeout).

    The op capture does not enter its recorder for such a test either (Note
    [Capture cost]). The timeout is ``faulthandler``'s watchdog, a thread started and joined per
    test: 0.2-0.7 ms each on two loaded cores, 14 s of wall time over the 23,300
    variants a config skips in real ``test_unary_ufuncs.py`` (``ootest ops
    capture`` arms it by default; bench/README.md, "Op capture")."""
    return (
        nextitem is not None
        and nextitem.parent is item.parent
        and item.get_closest_marker("skip") is not None
    )
