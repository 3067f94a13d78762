"""``--ootest-results PATH``: one JSON line per result, appended as results are known."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ootest.plugin.keys import COLLECTION, FACTS, is_controller, is_worker, worker
from ootest.plugin.selector import Selector
from ootest.record import crash
from ootest.record.results import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    XFAILED,
    XPASSED,
    XPASSED_STRICT,
    Appender,
    result_record,
)

__all__ = ["Recorder", "classify"]


class Recorder:
    """Writes the results file: per config file what was collected, stale config
    names, one session line, one line per test result or uncollectable file, and
    a finish line. Under pytest-xdist only the controller writes (it gets the
    workers' reports); a worker writes nothing."""

    def __init__(
        self, path: Path, state_dir: Path | None, run_id: str | None, started: str
    ) -> None:
        self.path, self.state_dir = path, state_dir
        self.run_id = run_id  # the 'ootest run' this session belongs to
        self.started = started  # "fresh", or "forked" from the fork server (Note [Fork server])
        self.out: Appender | None = None
        self.is_worker = False

    def pytest_configure(self, config: pytest.Config) -> None:
        self.out = Appender(self.path)
        self.is_worker = is_worker(config)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.out is not None:
            self.out.close()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.out is not None and not self.is_worker:
            self.out.write({"kind": "finish", "exitstatus": int(exitstatus), "time": time.time()})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        if self.out is None or is_controller(config):
            return
        col = config.stash[COLLECTION]
        now = time.time()
        for key, st in sorted(col.stats.items()):
            self.out.write(
                {
                    "kind": "collection",
                    "file": key,
                    "collected": st.collected,
                    "device_variants": st.device_variants,
                    "device": col.device,
                    "device_module": col.module,
                    "time": now,
                }
            )
        selector = config.pluginmanager.get_plugin("ootest-selector")
        if not (isinstance(selector, Selector) and selector.skipped):
            # A session that left finished files out cannot tell a stale name from one
            # that matched only there; the session that collected them said it.
            for origin, name in col.stale:
                self.out.write({"kind": "stale", "origin": origin, "name": name, "time": now})
        files = Counter(dict.fromkeys(col.stats, 0))
        files.update(
            f.file if (f := item.stash.get(FACTS, None)) is not None else col.keys.key(item.path)
            for item in session.items
        )
        self.out.write(
            {
                "kind": "session",
                "selected": len(session.items),
                "files": dict(files),
                "plan": {"reused": col.reused, "computed": col.computed},
                "worker": worker(config),
                "pid": os.getpid(),
                "run": self.run_id,
                "started": self.started,
                # where it ran (Note [Evidence origins]): readers of other devices'
                # results, and of a CPU reference, tell them apart by it
                "device_spec": col.spec,
                "torch": _torch_version(),
                "time": now,
            }
        )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A file that cannot be imported (e.g. an upstream file needing a newer torch)
        # is one clear error result; one that skips itself at import (a module-level
        # SkipTest, "requires CUDA") one skipped result. The other files still run.
        if self.out is None or self.is_worker or not (report.failed or report.skipped):
            return
        if report.skipped:
            lr = report.longrepr
            why = str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
            outcome, message = (
                SKIPPED,
                "module skipped at import: " + why.removeprefix("Skipped: "),
            )
        else:
            outcome, message = ERROR, "collection failed: " + str(report.longrepr)[-3000:]
        key = str(getattr(report, "ootest_file", None) or report.fspath)
        self.out.write(
            result_record(
                outcome,
                nodeid=str(getattr(report, "ootest_nodeid", None) or report.nodeid),
                variant_id=key,
                file=key,
                phase="collect",
                mode=None,
                reason=message if outcome == SKIPPED else None,
                message=message,
            )
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.out is None or self.is_worker:
            return
        if str(report.when) == "???" and "crashed while running" in str(report.longrepr):
            rec = self._xdist_crash(report)  # a pytest-xdist worker died in this test
        else:
            outcome = classify(report)
            if outcome is None:
                return
            rec = _record(report, outcome)
        self.out.write(rec)

    def _xdist_crash(self, report: pytest.TestReport) -> dict[str, Any]:
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        wid = str(getattr(gateway, "id", "?"))
        inflight = None
        if self.state_dir is not None:
            inflight = crash.read_inflight(crash.inflight_path(self.state_dir, wid))
        if inflight is None or inflight.get("pytest_nodeid") != report.nodeid:
            # nothing known about the test beyond what pytest-xdist says
            file = report.fspath or report.nodeid.split("::")[0]
            inflight = {"nodeid": report.nodeid, "variant_id": report.nodeid, "file": file}
            inflight["mode"] = None
        rec = crash.crash_record(inflight)
        rec["message"] = f"pytest-xdist worker {wid}: {rec['message']}"
        return rec


def _torch_version() -> str | None:
    """The torch the session imported (collection imports it), without importing it."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch is not None else None
    return str(version) if version is not None else None


def _record(report: pytest.TestReport, outcome: str) -> dict[str, Any]:
    # the fields the core plugin put on the report at setup (a pytest-xdist
    # controller sees only the report)
    props = {
        k[len("ootest_") :]: v
        for k, v in report.user_properties
        if isinstance(k, str) and k.startswith("ootest_")
    }
    return result_record(
        outcome,
        nodeid=str(props.get("nodeid", report.nodeid)),
        variant_id=str(props.get("variant_id", report.nodeid)),
        file=str(props.get("file", report.fspath)),
        mode=props.get("mode"),
        bucket=props.get("bucket"),
        reason=props.get("reason"),
        issue=props.get("issue"),
        origin=props.get("origin"),
        op=props.get("op"),
        dtype=props.get("dtype"),
        device_variant=props.get("device_variant", False),
        capable=props.get("capable", False),
        **{k: props[k] for k in ("code", "evidence") if k in props},
        where=_where(report),
        frames=_frames(report),
        duration=report.duration,
        message=_excerpt(report),
    )


def classify(report: pytest.TestReport) -> str | None:
    """One outcome per test: from the call phase, or from setup/teardown when they decide it."""
    wasxfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return XPASSED if wasxfail else PASSED
        if report.skipped:
            return XFAILED if wasxfail else SKIPPED
        text = str(report.longrepr) if report.longrepr is not None else ""
        return XPASSED_STRICT if text.startswith("[XPASS(strict)]") else FAILED
    if report.when == "setup":
        if report.skipped:
            return XFAILED if wasxfail else SKIPPED
        if report.failed:
            return ERROR
        return None
    if report.failed:  # teardown
        return ERROR
    return None


def _where(report: pytest.TestReport) -> str | None:
    """``file.py:line`` where a failure was raised (the innermost frame pytest shows)."""
    crash = getattr(report.longrepr, "reprcrash", None) if report.failed else None
    if crash is None:
        return None
    return f"{os.path.basename(str(crash.path))}:{crash.lineno}"


#: Traceback entries a result keeps, innermost last: enough to see who raised it.
MAX_FRAMES = 8


def _frames(report: pytest.TestReport) -> list[str] | None:
    """The files of a failure's traceback, innermost last (at most ``MAX_FRAMES``),
    each as its import path (``torch/_ops.py``, ``torch_tiny/kernels.py``): who
    raised it, the same on every machine (Note [Triage verdict])."""
    lr = report.longrepr if report.failed else None
    if lr is None or isinstance(lr, str):
        return None
    paths = [
        str(loc.path)
        for entry in getattr(getattr(lr, "reprtraceback", None), "reprentries", None) or ()
        if (loc := getattr(entry, "reprfileloc", None)) is not None
    ]
    crash = getattr(lr, "reprcrash", None)
    if crash is not None and (
        not paths or os.path.abspath(paths[-1]) != os.path.abspath(str(crash.path))
    ):
        paths.append(str(crash.path))  # --tb=native/line: entries without locations
    roots = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    return [_import_path(p, roots)[:200] for p in paths[-MAX_FRAMES:]] or None


def _import_path(path: str, roots: list[str]) -> str:
    """``path`` relative to the longest of ``roots`` (``sys.path``, absolute) that
    holds it, with ``/`` (``.../site-packages/torch/_ops.py`` -> ``torch/_ops.py``);
    its base name when none does."""
    real = os.path.abspath(path)
    best = ""
    for root in roots:
        if len(root) > len(best) and real.startswith(root.rstrip(os.sep) + os.sep):
            best = root
    return os.path.relpath(real, best).replace(os.sep, "/") if best else os.path.basename(real)


def _excerpt(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    if report.passed:
        return None
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])[:500]
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:500]
    return str(lr)[-500:] if lr is not None else None
