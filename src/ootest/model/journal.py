"""The journal of a recording: what ``model record`` keeps when the script dies.

Note [Recording journal]
The recorder writes its calls once, when the script ends (``Recorder.data``). A
script that segfaults, is killed, or is stopped harder than Python can catch left
nothing: minutes of a model run lost. So the recorder also appends to a journal as
it goes, one JSON line each:

- ``{"kind": "start", "format", "torch", "command"}`` first;
- ``{"kind": "call", "name", "args", "kwargs", "location"}`` when a distinct call is
  first seen (count 1; the line is written to the OS at once, so a crash keeps it);
- ``{"kind": "counts", "total", "counts": {index: count}, "locations": {index: {...}},
  "left_out"}`` at most once a second, for the calls that changed since the last.

:func:`read_journal` rebuilds the calls file from it (counts as of the last
``counts`` line, at least one per call seen); a torn last line is skipped. No torch
here: the ``ootest model record`` parent reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

__all__ = ["Journal", "read_journal"]

SNAPSHOT_SECONDS = 1.0


class Journal:
    """Appends the journal lines of one recording (Note [Recording journal])."""

    def __init__(self, path: Path, head: dict[str, Any]) -> None:
        self._fh: IO[str] = open(path, "w", encoding="utf-8", buffering=1)  # line by line
        self.write({"kind": "start", **head})

    def write(self, rec: dict[str, Any]) -> None:
        self._fh.write(json.dumps(rec, sort_keys=True) + "\n")

    def close(self) -> None:
        self._fh.close()


def read_journal(path: Path, exit_code: int) -> dict[str, Any] | None:
    """The calls data (as ``Recorder.data`` gives it) rebuilt from a journal; None
    when it holds no start line."""
    data: dict[str, Any] | None = None
    calls: list[dict[str, Any]] = []
    total = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the line the crash cut short
            if not isinstance(rec, dict):
                continue
            kind = rec.get("kind")
            if kind == "start":
                data = {k: v for k, v in rec.items() if k != "kind"}
            elif kind == "call" and data is not None:
                where = str(rec.get("location") or "unknown")
                calls.append(
                    {
                        "name": rec.get("name"),
                        "args": rec.get("args") or [],
                        "kwargs": rec.get("kwargs") or {},
                        "count": 1,
                        "locations": {where: 1},
                    }
                )
                total += 1
            elif kind == "counts" and data is not None:
                for i, n in (rec.get("counts") or {}).items():
                    if int(i) < len(calls):
                        calls[int(i)]["count"] = int(n)
                for i, locs in (rec.get("locations") or {}).items():
                    if int(i) < len(calls) and isinstance(locs, dict):
                        calls[int(i)]["locations"] = locs
                total = max(total, int(rec.get("total") or 0))
                data["left_out"] = rec.get("left_out") or {}
    if data is None:
        return None
    data.setdefault("left_out", {})
    data.update(exit_code=exit_code, total=total, calls=calls)
    return data
