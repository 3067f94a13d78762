"""Where ootest keeps files: what it can rebuild (the emu build, compiled config
plans) in the user's cache, and what a project's runs write in its work folder."""

from __future__ import annotations

import os
from pathlib import Path

#: The work folder: results, logs, indexes of a project, relative to where ootest runs.
WORK_DIR = Path(".ootest")
OPS_DB = WORK_DIR / "ops.db"  # the op map index (ootest ops, select)
MEMORY_DB = WORK_DIR / "memory.db"  # the repository memory (ootest index, select)


def cache_dir() -> Path:
    """``$OOTEST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ootest``, else ``~/.cache/ootest``."""
    base = os.environ.get("OOTEST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ootest"
    )
    return Path(base)
