"""pytest's own terminal summary, linear in the number of reports.

Note [Linear terminal summary]
pytest's ``TerminalReporter`` prints each failure (and, with ``-rP``/``-rA``, each
pass) followed by its teardown sections, which it finds by rescanning every
setup/teardown report for each one (``_get_teardown_reports``): quadratic. With
21,000 failures of a whole upstream OpInfo file the summary ran for more than 20
minutes after the last test, single-threaded. ootest writes its own summary and
results, but the pytest output (``ootest run``'s log, a plain ``pytest
--ootest-config`` run) must not cost what it costs at that size: the reporter's
lookup is answered from an index built once per set of reports. What is printed
is unchanged (the same reports, in the same order).

The method is pytest's private API; where a pytest lacks it nothing is replaced.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest


def index_teardown_reports(reporter: Any) -> Callable[[Any], list[Any]] | None:
    """A drop-in for ``reporter._get_teardown_reports`` that answers from an index,
    rebuilt only when reports were added since it was built; None where the
    reporter has no such method."""
    if not callable(getattr(reporter, "_get_teardown_reports", None)):
        return None
    built: list[Any] = [-1, {}]  # [reports indexed, node ID -> teardown reports]

    def get(node_id: Any) -> list[Any]:
        # the node ID as pytest passes it: ``rep.id`` (a NodeId) or, before 9, a string
        seen = len(reporter.stats.get("", ()))
        if seen != built[0]:
            by_id: defaultdict[Any, list[Any]] = defaultdict(list)
            for r in reporter.getreports(""):
                if getattr(r, "when", None) == "teardown":
                    by_id[getattr(r, "id", r.nodeid)].append(r)
                    if getattr(r, "id", None) is not None:
                        by_id[r.nodeid].append(r)  # callers passing the string form
            built[0], built[1] = seen, by_id
        return list(built[1].get(node_id, ()))

    return get


class LinearSummary:
    """Registered with the ootest plugin (Note [Linear terminal summary])."""

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
        get = index_teardown_reports(reporter) if reporter is not None else None
        if get is not None:
            reporter._get_teardown_reports = get
