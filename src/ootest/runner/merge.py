"""Results files of one run (e.g. one per shard) combined into one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ootest.errors import UserError
from ootest.record.results import Appender, Record, RunData, read_records

__all__ = ["merge", "read_runs"]


def read_runs(paths: Iterable[Path]) -> tuple[RunData, list[Record]]:
    """(the run the files make together, every record in file order); a missing
    file is a user error."""
    recs: list[Record] = []
    for p in paths:
        recs.extend(read_records(p, missing_ok=False))
    return RunData.from_records(recs), recs


def merge(inputs: list[Path], out: Path) -> RunData:
    """Write the records of ``inputs`` as one results file ``out``: collection,
    stale and session records as they were, then the last result of each variant."""
    data, recs = read_runs(inputs)
    if out.resolve() in {p.resolve() for p in inputs}:
        raise UserError(f"--results {out}: is also an input; choose another output file")
    out.unlink(missing_ok=True)
    w = Appender(out)
    try:
        for rec in recs:
            if rec.get("kind") != "result":
                w.write(rec)
        for rec in data.results.values():
            w.write(rec)
    finally:
        w.close()
    return data
