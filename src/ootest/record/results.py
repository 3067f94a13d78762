"""The JSONL results file: the one record of a run that nothing may lose.

Every line is one JSON object with a ``kind``:

``result``      one test's final outcome (written the moment it is known)
``collection``  per file: tests collected and device variants instantiated
``session``     a pytest process started running ``selected`` tests (``files``: how
                many from each file; ``run``: the ``ootest run`` it belongs to;
                ``started``: ``fresh`` or ``forked`` from the fork server)
``finish``      that process ended normally (``exitstatus``)
``stale``       a config name that matched no collected variant

Lines from before ``kind`` existed count as ``result``. A line cut short by a
killed process is ignored when read and trimmed before anything is appended, so
a resumed run never glues a new record onto half of an old one. Writers use one
``write(2)`` per line on an ``O_APPEND`` descriptor, so concurrent pytest-xdist
workers never interleave inside a line. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ootest.errors import UserError

__all__ = [
    "BAD",
    "CRASHED",
    "CUT_SHORT",
    "ERROR",
    "FAILED",
    "OUTCOMES",
    "PASSED",
    "SKIPPED",
    "SKIPPED_BY",
    "TIMEOUT",
    "XFAILED",
    "XPASSED",
    "XPASSED_STRICT",
    "Appender",
    "Record",
    "RunData",
    "blocking",
    "headline",
    "read_records",
    "result_record",
    "skip_cause",
    "skipped_by",
    "state_dir",
    "trim_partial_line",
]

Record = dict[str, Any]

#: Every outcome a result record can carry, in report order.
OUTCOMES = (
    PASSED := "passed",
    FAILED := "failed",
    ERROR := "error",
    CRASHED := "crashed",
    TIMEOUT := "timeout",
    XFAILED := "xfailed",
    XPASSED := "xpassed",
    XPASSED_STRICT := "xpassed_strict",
    SKIPPED := "skipped",
)
BAD = frozenset({FAILED, ERROR, CRASHED, TIMEOUT})
#: Outcomes of a test whose process died in it: its duration is no estimate.
CUT_SHORT = frozenset({CRASHED, TIMEOUT})


def result_record(
    outcome: str,
    *,
    nodeid: str,
    variant_id: str,
    file: str,
    duration: float = 0.0,
    message: str | None = None,
    **fields: Any,
) -> Record:
    """A ``result`` line: the one place its shape is spelled (the plugin's test and
    collection results, a crashed or timed-out test's, pytest-xdist's lost worker's).

    ``nodeid`` is what pytest accepts back; ``variant_id`` and ``file`` are the
    identity results, resume and shards key on. ``fields`` are the variant's facts
    and decision (``mode``, ``reason``, ``op``, ...) or the crash's (``signal``).
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
    return {
        "kind": "result",
        "nodeid": nodeid,
        "variant_id": variant_id,
        "file": file,
        "outcome": outcome,
        **fields,
        "duration": round(duration, 4),
        "message": message,
        "time": time.time(),
    }


def state_dir(results: Path) -> Path:
    """Where the processes of a run keep their in-flight and fault files: next to
    the results file (``results.jsonl`` -> ``results.jsonl.state``)."""
    return results.with_name(results.name + ".state")


class Appender:
    """Append JSON lines atomically (one ``write`` per line, ``O_APPEND``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        trim_partial_line(path)
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, rec: Record) -> None:
        data = (json.dumps(rec, sort_keys=False) + "\n").encode("utf-8")
        while data:
            n = os.write(self.fd, data)
            data = data[n:]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def trim_partial_line(path: Path) -> None:
    """Drop a trailing line without its newline (a writer killed mid-line)."""
    try:
        with open(path, "rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            block = min(size, 1 << 16)
            while True:
                fh.seek(size - block)
                chunk = fh.read(block)
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    fh.truncate(size - block + cut + 1)
                    return
                if block == size:
                    fh.truncate(0)
                    return
                block = min(size, block * 2)
    except FileNotFoundError:
        return


#: The kinds of line a results file holds (see the module docstring).
KINDS = frozenset({"result", "collection", "session", "finish", "stale"})
#: What a result line looks like, for messages about files that hold none.
RESULT_EXAMPLE = (
    '{"kind": "result", "variant_id": "test/test_x.py::TestX::test_y[...]", '
    '"outcome": "passed", ...}'
)


def _is_record(rec: object) -> bool:
    """Whether a parsed line is a line of a results file (a result with an outcome,
    or a collection, session, finish or stale record)."""
    if not isinstance(rec, dict):
        return False
    kind = rec.get("kind", "result")
    return kind in KINDS and (kind != "result" or "outcome" in rec)


def _found(rec: object) -> str:
    """A parsed line that is no record, as an error message names it."""
    if isinstance(rec, dict):
        if "kind" in rec:
            return f"a record of kind {str(rec['kind'])[:40]!r}"
        keys = ", ".join(repr(str(k)[:40]) for k in list(rec)[:5])
        return f"an object with keys {keys}" if keys else "an empty object"
    return f"a JSON {type(rec).__name__.replace('dict', 'object').replace('str', 'string')}"


#: Note [Shared strings]: json parses every line's keys and values into strings of
#: their own; a results file repeats its keys on every line and a few values
#: (outcomes, modes, file keys, reason codes) on most. Sharing one string per text
#: (keys, and values shorter than this) holds 250,000 results in 160 MB instead of
#: 384 MB, at no cost in time (bench/scale_steps.py, bench/README.md).
_SHARED_LEN = 48


def read_records(path: Path, *, missing_ok: bool = True) -> list[Record]:
    """All well-formed records, in file order (torn lines are skipped).

    ``missing_ok=False`` is for a file the user named: it must exist, and a file
    with content must hold at least one line of a results file (a JSON Lines file of
    something else, an op capture or a list of objects, was read as "0 results")."""
    try:
        with open(path, "rb") as fh:
            return _read_records(path, fh, missing_ok)
    except FileNotFoundError:
        if missing_ok:
            return []
        raise UserError(
            f"{path}: no such results file; pass the JSONL file an 'ootest run' wrote"
        ) from None
    except OSError as e:
        raise UserError(f"{path}: cannot read results: {e.strerror}") from None


def _read_records(path: Path, fh: BinaryIO, missing_ok: bool) -> list[Record]:
    """:func:`read_records` of an open file, a line at a time (the results of 250,000
    variants are 100 MB: never held whole, as bytes and as lines, besides the records)."""
    out: list[Record] = []
    content = known = False
    foreign: tuple[int, str] | None = None  # the first JSON line that is no record
    shared: dict[str, str] = {}  # Note [Shared strings]
    size = 0
    for n, line in enumerate(fh, 1):
        size += len(line)
        if not line.strip():
            continue
        content = True
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue  # torn, garbled, or nested past json's limit: skip the line
        if _is_record(rec):
            known = True
        elif foreign is None:
            foreign = (n, _found(rec))
        if isinstance(rec, dict):
            rec = {
                shared.setdefault(k, k): (
                    shared.setdefault(v, v) if type(v) is str and len(v) < _SHARED_LEN else v
                )
                for k, v in rec.items()
            }
            rec.setdefault("kind", "result")
            out.append(rec)
    if content and not known and foreign is not None and not missing_ok:
        raise UserError(
            f"{path}:{foreign[0]}: expected a line of a results file 'ootest run' writes, "
            f"such as {RESULT_EXAMPLE}; found {foreign[1]} and no result in the file; "
            "pass the results .jsonl file (.ootest/results.jsonl or run --results PATH)"
        )
    if content and not out and not missing_ok:
        # A file the user named that holds no record at all is not a results file
        # (a gzip, a JUnit XML, a config): saying "0 results" would hide the mistake.
        raise UserError(
            f"{path}: expected JSON lines written by 'ootest run'; found no record in"
            f" {size} bytes; pass the results .jsonl file"
        )
    return out


@dataclass
class RunData:
    """A run's records, deduplicated: the last result per variant ID wins."""

    results: dict[str, Record] = field(default_factory=dict)
    collection: dict[str, Record] = field(default_factory=dict)
    stale: dict[tuple[str, str], Record] = field(default_factory=dict)
    sessions: int = 0
    finished: int = 0

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> RunData:
        data = cls()
        for i, rec in enumerate(records):
            kind = rec.get("kind")
            if kind == "result" and "outcome" in rec:
                key = rec.get("variant_id") or rec.get("nodeid") or f"#{i}"  # foreign: no ID
                data.results[str(key)] = rec
            elif kind == "collection" and "file" in rec:
                old = data.collection.get(rec["file"])
                # Every process that collects writes one; a shard or resume sees the
                # full file, so the counts agree. Keep the largest (a crash may cut one).
                if old is None or rec.get("collected", 0) >= old.get("collected", 0):
                    data.collection[rec["file"]] = rec
            elif kind == "stale":
                data.stale[(str(rec.get("origin")), str(rec.get("name")))] = rec
            elif kind == "session":
                data.sessions += 1
            elif kind == "finish":
                data.finished += 1
        return data

    @classmethod
    def load(cls, *paths: Path) -> RunData:
        recs: list[Record] = []
        for p in paths:
            recs.extend(read_records(p, missing_ok=False))
        return cls.from_records(recs)

    def records(self) -> list[Record]:
        return list(self.results.values())

    def counts(self) -> Counter[str]:
        return Counter(r["outcome"] for r in self.results.values())

    def test_results(self) -> dict[str, int]:
        """CRCR ``test_results``: ``{passed, failed, skipped, total}``.

        An expected failure is a good outcome (passed); an xpass that was not
        strict passed; every crash, timeout, error or strict xpass failed.
        """
        c = {"passed": 0, "failed": 0, "skipped": 0}
        for r in self.results.values():
            o = r["outcome"]
            if o in (PASSED, XFAILED, XPASSED):
                c["passed"] += 1
            elif o == SKIPPED:
                c["skipped"] += 1
            else:
                c["failed"] += 1
        c["total"] = sum(c.values())
        return c


def finished_files(records: Iterable[Record], run: str) -> set[str]:
    """Files (keys) in which every test a session of ``run`` selected has a result.

    Note [Restarts skip finished files]
    A restart after a crash need not import, instantiate and collect again a file
    whose tests all have results: it would only deselect every one of them. The
    last session of the run that selected tests from a file says how many; the
    results written since then for that file say how many of them are done. Only
    sessions of the same ``ootest run`` count (same arguments, same config), so a
    ``--resume`` with another selection collects everything again.
    """
    selected: dict[str, int] = {}
    done: dict[str, set[str]] = {}
    for i, rec in enumerate(records):
        kind = rec.get("kind")
        if kind == "session":
            files = rec.get("files")
            if rec.get("run") != run or not isinstance(files, dict):
                continue
            for key, n in files.items():
                selected[str(key)] = int(n) if isinstance(n, int) else 0
                done[str(key)] = set()
        elif kind == "result" and "outcome" in rec and rec.get("phase") != "collect":
            key = str(rec.get("file"))
            if key in done:
                done[key].add(str(rec.get("variant_id") or rec.get("nodeid") or f"#{i}"))
    return {key for key, n in selected.items() if len(done[key]) >= n}


def blocking(rec: Record) -> bool:
    """A result that fails the run: a mandatory test that did not pass, or a strict xpass."""
    if rec["outcome"] == XPASSED_STRICT:
        return True
    return rec["outcome"] in BAD and rec.get("mode") in (None, "mandatory_success")


#: Who skips a variant: the config (``mode: skip``, capability gating) or the test itself.
SKIPPED_BY = ("config", "test")


def skipped_by(rec: Record) -> tuple[str, str]:
    """Who skipped a skipped result, and why: ``("config", its reason)`` or
    ``("test", its own message)`` (``Only runs on cuda``, a module-level skip)."""
    if rec.get("mode") in ("skip",):
        return "config", str(rec.get("reason") or "?")
    lines = str(rec.get("message") or rec.get("reason") or "").strip().splitlines()
    return "test", (lines[0].removeprefix("Skipped: ").strip()[:200] if lines else "") or "?"


def skip_cause(rec: Record) -> str:
    """:func:`skipped_by` as one line: ``config: needs fp64``, ``test: Only runs on cuda``."""
    who, why = skipped_by(rec)
    return f"{who}: {why}"


def headline(message: object) -> str:
    """The one line of a failure message a person wants first.

    pytest's long form puts the error on lines starting with ``E``; the last
    such line is the exception itself (``E   ModuleNotFoundError: ...``).
    """
    lines = [x.strip() for x in str(message or "").strip().splitlines() if x.strip()]
    errors = [x[1:].strip() for x in lines if x.startswith("E ")]
    if errors:
        return errors[-1][:300]
    return lines[0][:300] if lines else ""
