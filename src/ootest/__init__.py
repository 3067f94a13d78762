"""ootest: PyTorch's upstream device-generic tests on out-of-tree (privateuse1) backends.

The curated public API. Every name loads on first use (PEP 562), so
``import ootest`` (which the ``pytest11`` entry and every CLI start do) stays
free of PyYAML, pydantic and torch; see ``tests/test_public_api.py``.

- configs: :func:`load_config` -> :class:`Config` (:class:`ResolvedFile` per test
  file); :func:`decide` gives a :class:`Variant` its :class:`Decision` in a
  :class:`Context`;
- the run record: :data:`OUTCOMES`, :func:`read_records`, :class:`RunData`;
- errors: :class:`OotestError` > :class:`UserError` > :class:`ConfigError`,
  :class:`DeviceError`, each :class:`Problem` of a config located by file, line
  and key path.

PYTEST_DONT_REWRITE: a pytest forked from the fork server (Note [Fork server] in
``ootest.runner.forkserver``) finds this package imported before pytest could
mark it for assertion rewriting; this tells pytest not to warn about it. The
marker acts on this module only, which has no asserts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ootest.config.decide import Decision, decide
    from ootest.config.load import load_config
    from ootest.config.names import Variant
    from ootest.config.resolved import Config, ResolvedFile
    from ootest.config.when import Context
    from ootest.errors import ConfigError, DeviceError, OotestError, Problem, UserError
    from ootest.record.results import OUTCOMES, RunData, read_records

__all__ = [
    "OUTCOMES",
    "Config",
    "ConfigError",
    "Context",
    "Decision",
    "DeviceError",
    "OotestError",
    "Problem",
    "ResolvedFile",
    "RunData",
    "UserError",
    "Variant",
    "__version__",
    "decide",
    "load_config",
    "read_records",
]

_WHERE = {
    "OUTCOMES": "ootest.record.results",
    "Config": "ootest.config.resolved",
    "ConfigError": "ootest.errors",
    "Context": "ootest.config.when",
    "Decision": "ootest.config.decide",
    "DeviceError": "ootest.errors",
    "OotestError": "ootest.errors",
    "Problem": "ootest.errors",
    "ResolvedFile": "ootest.config.resolved",
    "RunData": "ootest.record.results",
    "UserError": "ootest.errors",
    "Variant": "ootest.config.names",
    "decide": "ootest.config.decide",
    "load_config": "ootest.config.load",
    "read_records": "ootest.record.results",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from ootest.version import ootest_version

        return ootest_version()
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'ootest' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
