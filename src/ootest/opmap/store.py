"""The op map index: one SQLite file of variants, ops and who calls what, and the
queries it answers. Its schema and the Notes on it are :mod:`ootest.opmap.schema`;
the records the queries return, :mod:`ootest.opmap.answers`."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sqlite3
import time
from array import array
from collections import deque
from collections.abc import Collection, Container, Iterable, Iterator, Mapping, Sequence
from itertools import groupby, repeat
from operator import itemgetter
from pathlib import Path
from types import TracebackType
from typing import Any

from ootest.atomic import being_written, exclusive
from ootest.cache import OPS_DB
from ootest.errors import UserError
from ootest.opmap.answers import (
    CaptureEnd,
    Flags,
    ForTest,
    OpUse,
    Provenance,
    Stats,
    TestsFor,
    VariantHit,
)
from ootest.opmap.names import KNOWN_NAMESPACES, OpName, parse_op
from ootest.opmap.schema import (
    CODE_COLUMN,
    EDGE_INDEX,
    EXAMPLE_SCHEMA,
    MODE_NAMES,
    MODE_SETS,
    PROVENANCE_KEYS,
    SCHEMA,
    SCHEMA_VERSION,
    SIG_SCHEMA,
    STALE,
    unpack_ids,
)

DEFAULT_DB = OPS_DB

#: Seconds a writer waits for another writer of the same op map index (shards of a
#: capture that end together), and a reader for a write in progress.
WRITER_WAIT = 600.0


# ------------------------------------------------------------------ the store
class OpStore:
    """The op map index in one SQLite file.

    Open with :meth:`open`; use as a context manager or call :meth:`close`.
    Queries never import torch.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        self._namespaces: frozenset[str] | None = None
        self.readonly = False
        #: the index records which code each capture of a variant ran (schema 4; an
        #: older index opened read-only has no such column: every record's code is
        #: unknown, Note [Evidence of which code])
        self.has_code = True
        self._lock = contextlib.ExitStack()  # a writer's lock (Note [One writer of an index])

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike[str] = DEFAULT_DB, *, create: bool = False) -> OpStore:
        """Open the index at ``path``; ``create`` makes it (and its folder) if missing."""
        p = Path(path)
        if not p.exists():
            if not create:
                raise UserError(
                    f"{p}: expected an op map index; found no file there. Build one with "
                    f"`ootest ops ingest CAPTURE.jsonl --db {p}` (or pass --db PATH)"
                )
            p.parent.mkdir(parents=True, exist_ok=True)
        elif not p.is_file():
            raise UserError(f"{p}: expected an op map index file; found a folder")
        lock = contextlib.ExitStack()
        if create:  # a writer (ingest, merge, capture): one at a time, the next one waits
            busy = f"--db {p}: another ootest process is writing this op map index"
            lock.enter_context(exclusive(p, busy, wait=WRITER_WAIT))
        # a file (or folder) this process may not write is read as it is: an older
        # schema is completed in memory instead of upgraded in place
        folder = os.access(p.parent, os.W_OK)
        readonly = not create and not (os.access(p, os.W_OK) and folder)
        if readonly:
            # in a folder it may not write, SQLite cannot make a WAL index's side
            # files: read the file as it is (nothing can change it under us)
            uri = f"{p.resolve().as_uri()}?mode=ro" + ("" if folder else "&immutable=1")
            conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        else:
            conn = sqlite3.connect(p, isolation_level=None, timeout=WRITER_WAIT)
        store = cls(conn, p)
        store.readonly = readonly
        store._lock = lock
        try:
            store._setup(create)
        except sqlite3.DatabaseError as e:
            store.close()
            raise UserError(
                f"{p}: expected an op map index (SQLite); cannot read it ({e}); "
                "pass the right --db or rebuild it with `ootest ops ingest`"
            ) from None
        except BaseException:
            store.close()
            raise
        return store

    def _setup(self, create: bool) -> None:
        c = self._conn
        if not self.readonly:
            c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute("PRAGMA cache_size=-131072")  # 128 MiB: ingest and merge sort in memory
        c.execute("PRAGMA temp_store=MEMORY")
        c.execute("PRAGMA mmap_size=1073741824")
        has_meta = c.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
        ).fetchone()
        if has_meta is None:
            if not create and being_written(self.path):
                raise UserError(
                    f"{self.path}: another ootest process is creating this op map index "
                    "now; wait for it to finish (Note [One writer of an index])"
                )
            if not create:
                raise UserError(
                    f"{self.path}: expected an op map index; found a database without one. "
                    "Pass the right --db, or build an index with `ootest ops ingest`"
                )
            c.executescript(SCHEMA + EDGE_INDEX + ";")
            c.execute("INSERT INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            return
        row = c.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        found = row[0] if row else "none"
        older = ("1", "2", "3")
        if found in older and self.readonly:  # the missing tables, empty, in memory
            have = {str(r[0]) for r in c.execute("SELECT name FROM sqlite_master")}
            for stmt in (SIG_SCHEMA + EXAMPLE_SCHEMA).split(";"):
                m = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
                if m is not None and m[1] not in have:  # a temp table would hide a real one
                    c.execute(stmt.replace("CREATE TABLE", "CREATE TEMP TABLE"))
            self.has_code = False
            found = str(SCHEMA_VERSION)
        if found in older:  # upgraded in place: nothing to rewrite, tables to add
            c.execute("BEGIN IMMEDIATE")
            try:
                for stmt in (SIG_SCHEMA + EXAMPLE_SCHEMA).split(";"):
                    if stmt.strip():
                        c.execute(stmt)
                cols = {str(r[1]) for r in c.execute("PRAGMA table_info(variant_capture)")}
                if "code" not in cols:
                    c.execute(CODE_COLUMN)
                c.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")
            found = str(SCHEMA_VERSION)
        if found != str(SCHEMA_VERSION):
            raise UserError(
                f"{self.path}: expected op map schema version {SCHEMA_VERSION}; found {found}. "
                "Rebuild it with this ootest: `ootest ops ingest CAPTURE.jsonl --db NEW.db`"
            )

    def close(self) -> None:
        self._conn.close()
        self._lock.close()  # after the connection (Note [One writer of an index])

    def __enter__(self) -> OpStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection (for tools and tests that read the tables)."""
        return self._conn

    # ---------------------------------------------------------------- writing
    # (how an index is filled is ootest.opmap.ingest's: ingest_files, ingest_records,
    # merge_indexes; the store only keeps it)
    def forget_namespaces(self) -> None:
        """Drop the cached namespaces (after writing)."""
        self._namespaces = None

    def capture_id(self, prov: Mapping[str, Any], source: str) -> int:
        """The id of the capture with this provenance, added if new (Note [Combining captures])."""
        values = [str(prov.get(k) or "") for k in PROVENANCE_KEYS]
        t = float(prov.get("time") or 0.0)
        row = self._conn.execute(
            "SELECT id FROM capture WHERE torch_version=? AND torch_git=? AND device=? "
            "AND profile=? AND ootest_version=? AND time=?",
            (*values, t),
        ).fetchone()
        if row is not None:
            return int(row[0])
        cur = self._conn.execute(
            "INSERT INTO capture(torch_version, torch_git, device, profile, ootest_version, "
            "time, source, ingested) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*values, t, source, time.time()),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    # ---------------------------------------------------------------- queries
    def namespaces(self) -> frozenset[str]:
        """Op namespaces in the index (plus the well-known ones), for parsing names."""
        if self._namespaces is None:
            found = {
                str(r[0]).partition("::")[0]
                for r in self._conn.execute("SELECT DISTINCT packet FROM op")
            }
            self._namespaces = KNOWN_NAMESPACES | found
        return self._namespaces

    def parse(self, text: str) -> OpName:
        return parse_op(text, self.namespaces())

    def op_ids(self, op: OpName) -> list[tuple[int, str]]:
        """(id, name) of the recorded overloads a query names (a packet: all of them)."""
        if op.is_packet:
            rows = self._conn.execute(
                "SELECT id, name FROM op WHERE packet = ? ORDER BY name", (op.packet,)
            ).fetchall()
        else:
            rows = self._conn.execute(
                "SELECT id, name FROM op WHERE name = ?", (str(op),)
            ).fetchall()
        return [(int(i), str(n)) for i, n in rows]

    def resolve_ops(self, text: str) -> tuple[OpName, list[tuple[int, str]]]:
        """Parse and look up a queried op; an op nothing recorded is a user error."""
        op = self.parse(text)
        found = self.op_ids(op)
        if not found:
            raise UserError(self._unknown_op(text, op))
        return op, found

    def _unknown_op(self, text: str, op: OpName) -> str:
        names = [str(r[0]) for r in self._conn.execute("SELECT name FROM op")]
        # Compared without the namespace, which every candidate shares.
        short = {
            n.removeprefix("aten::"): n for n in {*names, *(n.partition(".")[0] for n in names)}
        }
        wanted = str(op).removeprefix("aten::")
        close = [short[m] for m in difflib.get_close_matches(wanted, list(short), n=5, cutoff=0.75)]
        hint = f"; similar: {', '.join(close)}" if close else ""
        return (
            f"op {text!r}: expected an op the op map recorded ({len(names)} overloads in "
            f"{self.path}); found no {'packet' if op.is_packet else 'overload'} {op}{hint}. "
            "No captured variant calls it (or the capture predates it: capture again)"
        )

    def tests_for(self, text: str, limit: int | None = None) -> TestsFor:
        """The variants calling an op (an overload, or every overload of a packet),
        sorted by variant ID; ``total`` counts them all.

        ``limit`` returns only the first ``limit`` variants in index order (the
        order they were first captured in): read from the head of each
        overload's range of ``edge_by_op``, so a query about an op that half the
        suite calls stays fast.
        """
        op, found = self.resolve_ops(text)
        ids = [i for i, _ in found]
        c = self._conn
        total = self.count_variants(ids)
        marks = ",".join("?" * len(ids))
        select = (
            "SELECT v.variant_id, e.mode, e.calls, v.device_branch, v.varies, v.partial, v.why "
            "FROM edge e JOIN variant v ON v.id = e.variant "
        )
        if limit is None:
            rows = c.execute(select + f"WHERE e.op IN ({marks})", ids).fetchall()
        else:
            heads: set[int] = set()
            for i in ids:
                heads.update(
                    r[0]
                    for r in c.execute(
                        "SELECT DISTINCT variant FROM edge WHERE op = ? ORDER BY variant LIMIT ?",
                        (i, limit),
                    )
                )
            chosen = sorted(heads)[:limit]
            rows = []
            for k in range(0, len(chosen), 500):
                chunk = chosen[k : k + 500]
                vmarks = ",".join("?" * len(chunk))
                rows += c.execute(
                    select + f"WHERE e.variant IN ({vmarks}) AND e.op IN ({marks})",
                    (*chunk, *ids),
                ).fetchall()
        # Per variant: [modes as bits, calls, flags]; flags shared (few distinct values).
        agg: dict[str, list[Any]] = {}
        shared: dict[tuple[Any, ...], Flags] = {}
        for vid, mode, k, *fl in rows:
            a = agg.get(vid)
            if a is None:
                key = tuple(fl)
                f = shared.get(key)
                if f is None:
                    f = shared[key] = Flags(bool(fl[0]), bool(fl[1]), bool(fl[2]), fl[3])
                agg[vid] = [1 << mode, k, f]
            else:
                a[0] |= 1 << mode
                a[1] += k
        out = [VariantHit(vid, MODE_SETS[a[0]], a[1], a[2]) for vid, a in sorted(agg.items())]
        return TestsFor(str(op), tuple(n for _, n in found), int(total), out)

    def count_variants(self, op_ids: list[int]) -> int:
        """How many variants call any of ``op_ids``: a posting list's length, or
        the marks set in a byte per variant by the lists of several overloads."""
        posting = self.postings(op_ids)
        if len(posting) == 1:
            return len(next(iter(posting.values())))
        (top,) = self._conn.execute("SELECT coalesce(max(id), 0) FROM variant").fetchone()
        seen = bytearray(int(top) + 1)
        for arr in posting.values():
            deque(map(seen.__setitem__, arr, repeat(1)), maxlen=0)
        return seen.count(1)

    def variant_info(self, ids: Iterable[int]) -> dict[int, tuple[str, Flags]]:
        """Variant ID and flags by internal id (for results computed on ids)."""
        out: dict[int, tuple[str, Flags]] = {}
        idl = list(ids)
        for k in range(0, len(idl), 900):
            chunk = idl[k : k + 900]
            marks = ",".join("?" * len(chunk))
            for i, name, db, va, pa, why in self._conn.execute(
                "SELECT id, variant_id, device_branch, varies, partial, why FROM variant "
                f"WHERE id IN ({marks})",
                chunk,
            ):
                out[int(i)] = (str(name), Flags(bool(db), bool(va), bool(pa), why))
        return out

    def resolve_variant(self, text: str) -> tuple[int, str]:
        """(id, variant ID) for an exact ID, node ID, unique prefix or unique substring."""
        c = self._conn
        row = c.execute(
            "SELECT id, variant_id FROM variant WHERE variant_id = ?", (text,)
        ).fetchone()
        if row is None:
            row = c.execute(
                "SELECT id, variant_id FROM variant WHERE nodeid = ?", (text,)
            ).fetchone()
        if row is not None:
            return int(row[0]), str(row[1])
        # A prefix is a range of the unique index; a substring is a scan.
        hi = text[:-1] + chr(ord(text[-1]) + 1) if text else ""
        cands = c.execute(
            "SELECT id, variant_id FROM variant WHERE variant_id >= ? AND variant_id < ? "
            "ORDER BY variant_id LIMIT 11",
            (text, hi),
        ).fetchall()
        how = "prefix"
        if not cands:
            how = "substring"
            cands = c.execute(
                "SELECT id, variant_id FROM variant WHERE instr(variant_id, ?) > 0 "
                "ORDER BY variant_id LIMIT 11",
                (text,),
            ).fetchall()
        if len(cands) == 1:
            return int(cands[0][0]), str(cands[0][1])
        if not cands:
            n = c.execute("SELECT count(*) FROM variant").fetchone()[0]
            raise UserError(
                f"variant {text!r}: expected a variant ID (or a unique prefix or substring of "
                f"one) recorded in {self.path} ({n} variants); found none. "
                "List some with `ootest ops tests-for OP`, or capture the test"
            )
        listed = "\n  ".join(str(r[1]) for r in cands[:10])
        more = " (first 10 shown)" if len(cands) > 10 else ""
        raise UserError(
            f"variant {text!r}: expected one variant; the {how} matches several{more}:\n"
            f"  {listed}\nPass more of the ID"
        )

    def for_test(self, text: str) -> ForTest:
        """The ops one variant called, how it ended per capture, and its flags."""
        vid, name = self.resolve_variant(text)
        c = self._conn
        nodeid, file, db, va, pa, why = c.execute(
            "SELECT nodeid, file, device_branch, varies, partial, why FROM variant WHERE id = ?",
            (vid,),
        ).fetchone()
        seen: dict[str, set[str]] = {}
        for n, d in c.execute(
            "SELECT o.name, s.dtypes FROM call_sig cs JOIN op o ON o.id = cs.op "
            "JOIN sig s ON s.id = cs.sig WHERE cs.variant = ?",
            (vid,),
        ):
            seen.setdefault(str(n), set()).update(str(d).split(","))
        written = dict(
            c.execute(
                "SELECT o.name, count(*) FROM call_example ce JOIN example e ON e.id = ce.example "
                "JOIN op o ON o.id = e.op WHERE ce.variant = ? GROUP BY o.name",
                (vid,),
            ).fetchall()
        )
        ops = [
            OpUse(
                str(n),
                str(p),
                MODE_NAMES[int(m)],
                int(k),
                tuple(sorted(seen.get(str(n), ()))) if int(m) == 0 else (),
                int(written.get(n, 0)) if int(m) == 0 else 0,
            )
            for n, p, m, k in c.execute(
                "SELECT o.name, o.packet, e.mode, e.calls FROM edge e JOIN op o ON o.id = e.op "
                "WHERE e.variant = ? ORDER BY o.name, e.mode",
                (vid,),
            )
        ]
        caps = {p.id: p for p in self.captures()}
        code_col = "code" if self.has_code else "NULL"
        ends = [
            CaptureEnd(caps[int(cap)], outcome, stopped, err, int(n), code)
            for cap, outcome, stopped, err, n, code in c.execute(
                f"SELECT capture, outcome, stopped_on, error, n_ops, {code_col} "
                "FROM variant_capture WHERE variant = ? ORDER BY capture",
                (vid,),
            )
        ]
        return ForTest(name, nodeid, file, Flags(bool(db), bool(va), bool(pa), why), ops, ends)

    def captures(self) -> list[Provenance]:
        return [
            Provenance(
                int(r[0]),
                str(r[1]),
                str(r[2]),
                str(r[3]),
                str(r[4]),
                str(r[5]),
                float(r[6]),
                str(r[7]),
            )
            for r in self._conn.execute(
                "SELECT id, torch_version, torch_git, device, profile, ootest_version, time, "
                "source FROM capture ORDER BY id"
            )
        ]

    def stats(self, top: int = 20) -> Stats:
        c = self._conn
        n_var = c.execute("SELECT count(*) FROM variant").fetchone()[0]
        n_op = c.execute("SELECT count(*) FROM op").fetchone()[0]
        n_edge = c.execute("SELECT count(*) FROM edge").fetchone()[0]
        dep = c.execute("SELECT count(*) FROM variant WHERE device_branch OR varies").fetchone()[0]
        partial = c.execute("SELECT count(*) FROM variant WHERE partial").fetchone()[0]
        tops = [
            (str(n), int(k))
            for n, k in c.execute(
                "SELECT o.name, t.k FROM (SELECT op, count(DISTINCT variant) AS k FROM edge "
                "GROUP BY op) t JOIN op o ON o.id = t.op ORDER BY t.k DESC, o.name LIMIT ?",
                (top,),
            )
        ]
        return Stats(n_var, n_op, n_edge, self.captures(), tops, dep, partial)

    def all_ops(self) -> list[tuple[int, str]]:
        return [(int(i), str(n)) for i, n in self._conn.execute("SELECT id, name FROM op")]

    def uncertain_variants(self) -> list[int]:
        """Variants whose ops may differ per device (internal ids)."""
        return [
            int(r[0])
            for r in self._conn.execute("SELECT id FROM variant WHERE device_branch OR varies")
        ]

    def all_variant_ids(self) -> list[str]:
        return [str(r[0]) for r in self._conn.execute("SELECT variant_id FROM variant ORDER BY 1")]

    def postings(self, op_ids: Iterable[int]) -> dict[int, array[int]]:
        """The variants calling each op (sorted internal ids), from ``op.variants``."""
        out: dict[int, array[int]] = {}
        ids = list(op_ids)
        for k in range(0, len(ids), 900):
            chunk = ids[k : k + 900]
            marks = ",".join("?" * len(chunk))
            for i, blob in self._conn.execute(
                f"SELECT id, variants FROM op WHERE id IN ({marks})", chunk
            ):
                out[int(i)] = unpack_ids(blob)
        return out

    def evidence(
        self,
        only: Collection[str] | None = None,
        code: Mapping[str, str] | None = None,
        changed: Container[str] = (),
    ) -> Iterator[tuple[str, frozenset[str], str | None, str | None, str | None, str | None]]:
        """Per variant, for the selection pipeline: (variant ID, every op it calls in any
        mode, why its op set is uncertain or None, and how it ended in the latest capture:
        outcome, exception type, the op it stopped on). ``only``: just these variant
        IDs (looked up one by one when they are a small part of the index, as an
        incremental selection asks). ``code``: each variant's fingerprint now; a
        variant no record of which was captured from it is stale (Note [Evidence of
        which code]): recorded from another fingerprint, or of unknown origin and in
        ``changed`` (an upgrade's added and modified variants)."""
        names = dict(self.all_ops())
        code_col = "code" if self.has_code else "NULL"
        rows = "SELECT id, variant_id, device_branch, varies, partial, why FROM variant"
        if only is not None and len(only) * 4 < self.variant_count():
            variants = []
            for part in _chunks(sorted(only)):
                marks = ",".join("?" * len(part))
                variants += self._conn.execute(
                    f"{rows} WHERE variant_id IN ({marks})", part
                ).fetchall()
            variants.sort()
            ids = [int(r[0]) for r in variants]
            edges: list[tuple[int, int]] = []
            ends: list[tuple[int, Any, Any, Any, Any]] = []
            for part in _chunks(ids):
                marks = ",".join("?" * len(part))
                edges += self._conn.execute(
                    f"SELECT variant, op FROM edge WHERE variant IN ({marks})", part
                ).fetchall()
                ends += self._conn.execute(
                    f"SELECT variant, outcome, error, stopped_on, {code_col} FROM variant_capture "
                    f"WHERE variant IN ({marks}) ORDER BY capture",
                    part,
                ).fetchall()
        else:
            variants = self._conn.execute(f"{rows} ORDER BY id").fetchall()
            edges = self._conn.execute("SELECT variant, op FROM edge").fetchall()
            ends = self._conn.execute(
                f"SELECT variant, outcome, error, stopped_on, {code_col} FROM variant_capture "
                "ORDER BY capture"
            ).fetchall()
        ops: dict[int, set[str]] = {}
        for v, o in edges:
            ops.setdefault(int(v), set()).add(names[int(o)])
        last: dict[int, tuple[str | None, str | None, str | None]] = {}
        codes: dict[int, set[str | None]] = {}
        for v, outcome, error, stopped, of in ends:
            codes.setdefault(int(v), set()).add(None if of is None else str(of))
            last[int(v)] = (
                None if outcome is None else str(outcome),
                None if error is None else str(error),
                None if stopped is None else str(stopped),
            )
        for i, vid, db, va, pa, why in variants:
            if only is not None and vid not in only:
                continue
            uncertain = None
            if db or va or pa:
                uncertain = str(why or ("device branch" if db else "varies" if va else "partial"))
            now = code.get(str(vid)) if code else None
            if now:
                uncertain = _stale(now, codes.get(int(i), set()), vid in changed) or uncertain
            end = last.get(int(i), (None, None, None))
            yield str(vid), frozenset(ops.get(int(i), ())), uncertain, *end

    def codes(self, only: Collection[str]) -> dict[str, frozenset[str]]:
        """Per variant of ``only`` the index holds: the fingerprints of the code its
        records were captured from (Note [Evidence of which code]; none known: empty)."""
        if not self.has_code:
            return {}
        out: dict[str, set[str]] = {}
        for part in _chunks(sorted(only)):
            marks = ",".join("?" * len(part))
            for vid, code in self._conn.execute(
                "SELECT v.variant_id, vc.code FROM variant v JOIN variant_capture vc "
                f"ON vc.variant = v.id WHERE v.variant_id IN ({marks})",
                part,
            ):
                got = out.setdefault(str(vid), set())
                if code is not None:
                    got.add(str(code))
        return {v: frozenset(c) for v, c in out.items()}

    def call_dtypes(
        self, only: Collection[str] | None = None
    ) -> dict[str, tuple[tuple[str, str], ...]]:
        """Per variant with recorded signatures (Note [Call dtype signatures]): the
        distinct (op, dtype) pairs of its calls on the device, sorted. ``only``:
        just these variant IDs (looked up one by one when they are a small part of
        the index)."""
        c = self._conn
        names = dict(self.all_ops())
        sigs = {int(i): str(d).split(",") for i, d in c.execute("SELECT id, dtypes FROM sig")}
        if only is not None and len(only) * 4 < self.variant_count():
            vids: dict[int, str] = {}
            listed: list[tuple[Any, Any, Any]] = []
            for part in _chunks(sorted(only)):
                marks = ",".join("?" * len(part))
                found = c.execute(
                    f"SELECT id, variant_id FROM variant WHERE variant_id IN ({marks})", part
                ).fetchall()
                vids.update((int(i), str(v)) for i, v in found)
                ids = [int(i) for i, _ in found]
                if ids:
                    listed += c.execute(
                        "SELECT variant, op, sig FROM call_sig "
                        f"WHERE variant IN ({','.join('?' * len(ids))}) ORDER BY variant",
                        ids,
                    ).fetchall()
            rows: Iterable[tuple[Any, Any, Any]] = listed
        else:
            vids = {int(i): str(v) for i, v in c.execute("SELECT id, variant_id FROM variant")}
            # streamed from the cursor: the rows of 250,000 variants are never a list
            rows = c.execute("SELECT variant, op, sig FROM call_sig ORDER BY variant")
        # rows come in key order (variant, op, sig): a variant's rows are
        # consecutive; each (op, sig) becomes its pairs once, shared by every variant
        cache: dict[tuple[int, int], tuple[tuple[str, str], ...]] = {}
        pairs: dict[int, tuple[tuple[str, str], ...]] = {}
        same: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
        for v, group in groupby(rows, key=itemgetter(0)):
            got: list[tuple[str, str]] = []
            for _, o, g in group:
                p = cache.get((o, g))
                if p is None:
                    p = cache[(o, g)] = tuple((names[o], d) for d in sigs[g])
                got += p
            mine = tuple(sorted(set(got)))
            pairs[v] = same.setdefault(mine, mine)  # variants of one op share theirs
        out = {vids[v]: p for v, p in pairs.items()}
        if only is not None:
            out = {k: p for k, p in out.items() if k in only}
        return dict(sorted(out.items()))

    def examples(self) -> list[tuple[str, str, str]]:
        """Every call example: (key, op name, call text), by op then key."""
        return [
            (str(k), str(n), str(t))
            for k, n, t in self._conn.execute(
                "SELECT e.key, o.name, e.call FROM example e JOIN op o ON o.id = e.op "
                "ORDER BY o.name, e.key"
            )
        ]

    def example_keys(self, only: Collection[str] | None = None) -> dict[str, tuple[str, ...]]:
        """Per variant with call examples: their keys, sorted (``only``: just these
        variant IDs)."""
        rows = self._conn.execute(
            "SELECT v.variant_id, e.key FROM call_example ce "
            "JOIN variant v ON v.id = ce.variant JOIN example e ON e.id = ce.example "
            "ORDER BY v.variant_id, e.key"
        )
        out: dict[str, tuple[str, ...]] = {}
        for vid, group in groupby(rows, key=itemgetter(0)):
            if only is None or vid in only:
                out[str(vid)] = tuple(str(k) for _, k in group)
        return out

    def call_signatures(
        self, only: Collection[str] | None = None
    ) -> dict[str, dict[str, frozenset[str]]]:
        """Per variant with recorded signatures (Note [Call dtypes]): per op, the
        distinct dtype signatures of its calls (``float32,int64``)."""
        rows = self._conn.execute(
            "SELECT v.variant_id, o.name, s.dtypes FROM call_sig cs "
            "JOIN variant v ON v.id = cs.variant JOIN op o ON o.id = cs.op "
            "JOIN sig s ON s.id = cs.sig ORDER BY v.variant_id"
        )
        out: dict[str, dict[str, frozenset[str]]] = {}
        for vid, group in groupby(rows, key=itemgetter(0)):
            if only is None or vid in only:
                per: dict[str, set[str]] = {}
                for _, op, sig in group:
                    per.setdefault(str(op), set()).add(str(sig))
                out[str(vid)] = {op: frozenset(v) for op, v in per.items()}
        return out

    def _ops_by_variant(self) -> dict[int, set[str]]:
        """Every variant's ops in any mode (names shared, not copied per variant)."""
        names = dict(self.all_ops())
        ops: dict[int, set[str]] = {}
        for v, o in self._conn.execute("SELECT variant, op FROM edge"):
            ops.setdefault(int(v), set()).add(names[int(o)])
        return ops

    def op_sets(self) -> Iterator[tuple[str, frozenset[str], bool, bool]]:
        """Per variant: (variant ID, every op it calls in any mode, whether its ops may
        differ per device, whether the set may stop short: no capture ran it to a pass)."""
        ops = self._ops_by_variant()
        for i, vid, db, va, pa in self._conn.execute(
            "SELECT id, variant_id, device_branch, varies, partial FROM variant ORDER BY id"
        ):
            yield str(vid), frozenset(ops.get(int(i), ())), bool(db or va), bool(pa)

    def variant_count(self) -> int:
        return int(self._conn.execute("SELECT count(*) FROM variant").fetchone()[0])


def _stale(now: str, recorded: set[str | None], changed: bool) -> str | None:
    """Why a variant's recorded ops are stale, or None (Note [Evidence of which code])."""
    if now in recorded:
        return None
    known = sorted(c for c in recorded if c is not None)
    if known:
        return (
            f"{STALE} (fingerprint {known[0][:12]}, now {now[:12]}): stale, run it "
            "(capture it again: ootest ops capture --memory)"
        )
    if changed:
        return (
            f"{STALE} or of unknown origin (the op map records no fingerprint for it) "
            "and the test changed since: stale, run it"
        )
    return None


def _chunks(items: Sequence[Any], size: int = 900) -> Iterator[Sequence[Any]]:
    """``items`` in parts small enough for one SQL ``IN (...)`` list."""
    for k in range(0, len(items), size):
        yield items[k : k + size]
