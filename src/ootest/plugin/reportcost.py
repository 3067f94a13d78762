"""What a test costs to report, kept flat when tens of thousands of tests fail.

Note [The cost of a failing test]
Running every variant of upstream ``test_unary_ufuncs.py`` on a young backend
fails about 20,000 of them, and most of the run's CPU went to two things that
grow with the process's size, not with the test (py-spy, 876 variants, 727
failures, ``ootest run`` on ``emu:young``):

* **Torch's tracked-input bookkeeping** (24% of the samples). Every ``@ops``
  test ends in ``clear_tracked_input()``, and a failing one also calls
  ``get_tracked_input()``; both call ``inspect.stack()``, which asks
  ``inspect.getmodule`` for every frame. A frame of a frozen module
  (``<frozen runpy>``: ``python -m pytest`` and ootest's fork server run
  pytest through runpy) names no file ``inspect`` can map, so each such frame
  scans all of ``sys.modules`` (several thousand with torch loaded) and finds
  nothing. :func:`map_frozen_frames` tells ``inspect`` which module each
  ``<frozen NAME>`` is (true: that frame's code is that module's), so the
  look-up is one dict hit. What ``inspect`` returns for such a frame does not
  change in what a test can see: its source stays unavailable.
* **pytest's traceback of each failure** (58%). For every entry it shows,
  pytest parses the entry's whole source file to find the statement's range,
  with a cache that lives for one failure only: each failure parsed
  ``common_utils.py``, ``common_device_type.py``, the test file... again.
  :func:`share_parsed_sources` makes that cache live for the process, bounded
  (at most ``MAX_FILES`` files and ``MAX_SOURCE_BYTES`` of their source; an
  AST costs about 35 bytes per byte of source) and checked against each
  file's size and modification time.

The same 876 variants: 116 s before, 31 s with both, identical results
(outcome, message and frames of every variant); bench/report_cost.py measures
it side by side. Both change pytest's or Python's private state, so each looks
for exactly what it changes and does nothing when it is not there (another
pytest or Python); ``OOTEST_FAST_REPORTS=0`` turns both off.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections import OrderedDict
from typing import Any

ENV = "OOTEST_FAST_REPORTS"
MAX_FILES = 64
MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_FILE_BYTES = 2 * 1024 * 1024


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no", "off")


def map_frozen_frames() -> int:
    """Tell ``inspect`` the module of each ``<frozen NAME>`` code file; the number added."""
    table = getattr(inspect, "modulesbyfile", None)
    if not isinstance(table, dict):
        return 0
    added = 0
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        if getattr(spec, "origin", None) != "frozen":
            continue
        key = f"<frozen {name}>"
        if key not in table:
            table[key] = name
            added += 1
    return added


class ParsedSources:
    """A bounded, process-wide stand-in for the per-failure ``astcache`` dict of
    pytest's traceback formatter: ``get`` and ``[key] = node`` only, as pytest
    uses it; an entry is dropped when its file changed on disk."""

    def __init__(self, max_files: int = MAX_FILES, max_bytes: int = MAX_SOURCE_BYTES) -> None:
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._nodes: OrderedDict[Any, tuple[tuple[int, int], Any]] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _stamp(key: Any) -> tuple[int, int] | None:
        try:
            st = os.stat(key)
        except (OSError, TypeError, ValueError):
            return None
        return (st.st_size, st.st_mtime_ns)

    def get(self, key: Any, default: Any = None) -> Any:
        held = self._nodes.get(key)
        if held is None:
            return default
        if self._stamp(key) != held[0]:
            self._drop(key)
            return default
        self._nodes.move_to_end(key)
        return held[1]

    def __setitem__(self, key: Any, node: Any) -> None:
        stamp = self._stamp(key)
        if stamp is None or stamp[0] > MAX_FILE_BYTES or stamp[0] > self.max_bytes:
            return  # not a file, or too big to keep: parsed again next time
        self._drop(key)
        self._nodes[key] = (stamp, node)
        self._bytes += stamp[0]
        while len(self._nodes) > self.max_files or self._bytes > self.max_bytes:
            self._drop(next(iter(self._nodes)))

    def _drop(self, key: Any) -> None:
        held = self._nodes.pop(key, None)
        if held is not None:
            self._bytes -= held[0][0]

    def __len__(self) -> int:
        return len(self._nodes)


_SHARED = ParsedSources()


def share_parsed_sources() -> bool:
    """Make pytest's traceback formatter keep parsed sources across failures;
    False (nothing changed) where this pytest formats tracebacks otherwise."""
    from _pytest._code import code

    formatter = getattr(code, "ExceptionInfoFormatter", None) or getattr(
        code, "FormattedExcinfo", None
    )
    original = getattr(formatter, "_getentrysource", None)
    if formatter is None or original is None:
        return False
    if getattr(original, "__ootest_shared__", False):
        return True
    fields = getattr(formatter, "__dataclass_fields__", {})
    if "astcache" not in fields:
        return False

    def _getentrysource(self: Any, entry: Any) -> Any:
        object.__setattr__(self, "astcache", _SHARED)
        return original(self, entry)

    _getentrysource.__ootest_shared__ = True  # type: ignore[attr-defined]
    formatter._getentrysource = _getentrysource
    return True


def install() -> None:
    """Both, unless ``OOTEST_FAST_REPORTS=0``."""
    if not enabled():
        return
    map_frozen_frames()
    share_parsed_sources()
