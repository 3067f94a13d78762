"""The ``ootest`` pytest plugin entry module (registered through ``pytest11``).

Thin on purpose: it declares options and, only when a config, a device or
another ootest option is given, registers the stateful
:class:`ootest.plugin._core.OotestPlugin`, which registers the plugins for the
other jobs asked for (``recorder``, ``isolation``, ``selector``, ``dump``,
``opcapture``; they share state through ``keys``). It never imports torch at
module level.
"""

from __future__ import annotations

import os

import pytest

from ootest.errors import UserError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ootest", "ootest: run upstream PyTorch tests on a device")
    group.addoption(
        "--ootest-config",
        dest="ootest_config",
        metavar="FILE",
        help="test_suite_config YAML to apply (also: ini 'ootest_config', env OOTEST_CONFIG)",
    )
    group.addoption(
        "--ootest-device",
        dest="ootest_device",
        metavar="DEVICE",
        help="device backend: 'emu[:profile]' or 'module:name' (also: ini 'ootest_device', "
        "env OOTEST_DEVICE, or 'device:' in the config)",
    )
    group.addoption(
        "--ootest-results",
        dest="ootest_results",
        metavar="PATH",
        help="append one JSON line per test result to PATH as results are known",
    )
    group.addoption(
        "--ootest-timeout",
        dest="ootest_timeout",
        type=float,
        metavar="SECONDS",
        help="per-test timeout: a test still running after SECONDS is dumped and its process "
        "killed (recorded as 'timeout'); default: the config's 'timeout:'",
    )
    group.addoption(
        "--ootest-state",
        dest="ootest_state",
        metavar="DIR",
        help="where each process records the test in flight and its fault log, so a crash "
        "can be attributed (default: next to --ootest-results)",
    )
    group.addoption(
        "--ootest-resume",
        dest="ootest_resume",
        metavar="PATH",
        help="skip the tests that already have a result in this JSONL results file",
    )
    group.addoption(
        "--ootest-shard",
        dest="ootest_shard",
        metavar="I/N",
        help="run only shard I of N (split by recorded durations, see --ootest-durations)",
    )
    group.addoption(
        "--ootest-durations",
        dest="ootest_durations",
        action="append",
        metavar="PATH",
        help="results file(s) of earlier runs whose durations balance the shards",
    )
    group.addoption(
        "--ootest-only",
        dest="ootest_only",
        metavar="PATH",
        help="run only the variants whose IDs PATH lists, one a line (the others are "
        "deselected; 'ootest ops capture --only' and an upgrade's delta capture use it)",
    )
    group.addoption(
        "--ootest-variants",
        dest="ootest_variants",
        metavar="PATH",
        help="write one JSON line per collected variant (its ID, node ID, file key, class, "
        "method, op, dtypes, module, decision) and per file that failed to import; with "
        "--collect-only this enumerates variants without running them",
    )
    group.addoption(
        "--ootest-ops",
        dest="ootest_ops",
        metavar="DB",
        help="an op map index: every variant also gets 'aten__<op>' marks for the ops it was "
        "seen to call (-m aten__mm selects every test that calls mm)",
    )
    group.addoption(
        "--ootest-ops-capture",
        dest="ootest_ops_capture",
        metavar="PATH",
        help="record the aten ops each variant calls on the device and append them to PATH "
        "(the capture stream 'ootest ops capture' turns into the op map)",
    )
    group.addoption(
        "--ootest-no-cache",
        dest="ootest_no_cache",
        action="store_true",
        help="load and decide the config afresh instead of using the compiled plan cached "
        "in $OOTEST_CACHE_DIR/plans (also: env OOTEST_NO_CACHE=1)",
    )
    parser.addini("ootest_config", "test_suite_config YAML to apply", default="")
    parser.addini("ootest_device", "device backend: 'emu[:profile]' or 'module:name'", default="")


def _setting(config: pytest.Config, name: str) -> str | None:
    """A setting from the command line, else the environment, else the ini file (the
    precedence docs/plugin.md states: the nearer the invocation, the stronger)."""
    ns = config.known_args_namespace
    value = getattr(ns, name, None) or os.environ.get(name.upper()) or config.getini(name)
    return str(value) if value else None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # The backend must be registered before anything imports
    # torch.testing._internal (a conftest may), so this runs before conftests load.
    cfg_path = _setting(early_config, "ootest_config")
    device = _setting(early_config, "ootest_device")
    ns = early_config.known_args_namespace
    others = (
        "ootest_results",
        "ootest_timeout",
        "ootest_resume",
        "ootest_shard",
        "ootest_only",
        "ootest_variants",
        "ootest_ops",
    )
    if not cfg_path and not device and not any(getattr(ns, o, None) for o in others):
        return
    from ootest.plugin._core import OotestPlugin

    try:
        plugin = OotestPlugin.create(early_config, cfg_path, device)
    except UserError as e:
        raise pytest.UsageError(f"ootest: {e}") from None
    early_config.pluginmanager.register(plugin, "ootest-core")
