"""Where ootest keeps what it can rebuild: the emu build, compiled config plans."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$OOTEST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ootest``, else ``~/.cache/ootest``."""
    base = os.environ.get("OOTEST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ootest"
    )
    return Path(base)
