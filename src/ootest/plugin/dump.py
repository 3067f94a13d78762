"""``--ootest-variants PATH``: every collected variant as one JSON line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ootest.config.names import Variant, inexact_ids
from ootest.plugin.keys import OUTCOME, item_node_id
from ootest.plugin.variant import variant_from_item
from ootest.record.messages import checks_messages
from ootest.record.results import Appender

if TYPE_CHECKING:
    from ootest.plugin.keys import Core

__all__ = ["VariantDump"]


class VariantDump:
    """``--ootest-variants PATH``: every collected variant as one JSON line, with the
    same IDs, facts and decisions the core plugin gives it (the repository memory
    enumerates variants with it, test bodies never run), and every file that could
    not be collected with its error."""

    def __init__(self, path: Path, core: Core) -> None:
        self.path, self.core = path, core
        self.out: Appender | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        if not hasattr(config, "workerinput"):  # the controller gets the workers' reports
            self.path.unlink(missing_ok=True)
            self.out = Appender(self.path)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.out is not None:
            self.out.close()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if self.out is None or not report.failed:
            return
        key = str(getattr(report, "ootest_file", None) or report.fspath)
        message = str(report.longrepr)[-3000:]
        self.out.write({"kind": "collect_error", "file": key, "message": message})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.out is None:
            return
        core = self.core
        names = frozenset({core.device.name} if core.device else ())
        found = [(item, variant_from_item(item, core.keys.key(item.path), names)) for item in items]
        by_file: dict[str, list[Variant]] = {}
        for _, v in found:
            by_file.setdefault(v.file, []).append(v)
        inexact: dict[str, str] = {}  # Note [Variant ID grammar]
        for group in by_file.values():
            inexact.update((f"{group[0].file}::{t}", why) for t, why in inexact_ids(group).items())
        for item, v in found:
            d = item.stash.get(OUTCOME, None)
            obj = getattr(item, "obj", None)
            try:
                checks = checks_messages(getattr(obj, "__func__", obj), getattr(item, "cls", None))
            except TypeError:  # an unhashable test object
                checks = False
            self.out.write(
                {
                    "kind": "variant",
                    "variant_id": v.variant_id,
                    "nodeid": item_node_id(item),
                    "file": v.file,
                    "cls": v.cls,
                    "method": v.method,
                    "op": v.op,
                    "op_name": v.op_name,
                    "dtypes": list(v.dtypes),
                    "module": v.module,
                    "params": dict(v.params),
                    "device_variant": v.device_variant,
                    "checks_messages": checks,  # Note [Tests that match messages]
                    "id_exact": v.variant_id not in inexact,
                    **({"id_problem": inexact[v.variant_id]} if v.variant_id in inexact else {}),
                    "mode": d.mode if d is not None else None,
                    "reason": d.message if d is not None else None,
                }
            )
