"""The curated public API of ``ootest`` (its ``__all__``) and its cost to import."""

from __future__ import annotations

import sys

import pytest

import ootest
from tests.conftest import run


def test_all_is_sorted_and_every_name_resolves() -> None:
    assert ootest.__all__ == sorted(ootest.__all__, key=lambda n: (not n.isupper(), n))
    assert len(set(ootest.__all__)) == len(ootest.__all__)
    for name in ootest.__all__:
        assert getattr(ootest, name) is not None, name
    assert ootest.UserError.__module__ == "ootest.errors"
    assert issubclass(ootest.ConfigError, ootest.UserError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = ootest.nope  # type: ignore[attr-defined]


def test_importing_ootest_loads_no_yaml_pydantic_or_torch() -> None:
    code = (
        "import sys, ootest; assert ootest.__all__; "
        "print(sorted(m for m in ('yaml', 'pydantic', 'torch') if m in sys.modules))"
    )
    r = run([sys.executable, "-c", code])
    assert (r.returncode, r.stdout.strip()) == (0, "[]"), r.stderr


def test_public_modules_declare_all() -> None:
    """The modules other packages and users import from say what they export."""
    import importlib

    for name in (
        "ootest.errors",
        "ootest.plugin.marks",
        "ootest.record.crash",
        "ootest.record.identity",
        "ootest.record.results",
        "ootest.record.shard",
        "ootest.relay.matrix",
        "ootest.naming",
        "ootest.runner.job",
        "ootest.runner.merge",
        "ootest.runner.shards",
        "ootest.select.pipeline",
        "ootest.select.refresh",
    ):
        mod = importlib.import_module(name)
        exported = getattr(mod, "__all__", None)
        assert exported, f"{name} has no __all__"
        for n in exported:
            assert hasattr(mod, n), f"{name}.__all__ names {n!r}, which it lacks"
