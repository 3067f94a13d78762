"""ootest's own version, as installed (provenance lines name it)."""

from __future__ import annotations

import functools


@functools.cache
def ootest_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ootest")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
