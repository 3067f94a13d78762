"""Writing the index: capture records in, shard indexes merged.

Note [Fast ingest]
A full capture is millions of edges. Per record Python does only what needs
Python (parse the line, check its fields, map a variant ID to its id, learn a
new op name); each ``ops`` record then becomes one statement whose
``json_each`` expands the op counts into rows inside SQLite. A variant new to
the index, read in its first capture, has nothing to combine with but its own
lines, so its rows go straight into ``edge`` (lines add up on conflict); any
other row goes to a staging table keyed (capture, variant, op, mode), where
its lines add up, and from there into ``edge`` in one statement (the larger
count wins, Note [Combining captures]). Op sets are fingerprinted from the
parsed records as they pass. A fresh index gets its op index built once at
the end (a sort) instead of row by row.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ootest.device.calls import example_key
from ootest.errors import UserError
from ootest.opmap.answers import IngestReport
from ootest.opmap.capture import MAX_OPS, ReadStats, check_record, keys_ok, read_capture
from ootest.opmap.names import overload_of
from ootest.opmap.schema import EDGE_INDEX, PROVENANCE_KEYS, op_hash, pack_ids
from ootest.opmap.store import OpStore
from ootest.opname import OpNameError

Record = tuple[int, dict[str, Any], str | None]  # line number, record, line text if any

# An ops record's counts, expanded by SQLite (Note [Fast ingest]). Into the
# staging table, or straight into ``edge`` for a variant the index has never
# seen, read in its first capture (nothing to combine with but its own lines).
# Lines of one variant add up, saturating at 2**63 - 1: SQLite turns an integer
# sum that overflows into a float (two lines of 2**63 - 1 calls stored
# 1.8e19; issue 35 item 9), so the sum is never taken when it would.
_MAX_CALLS = 2**63 - 1
_EXPAND = (
    "SELECT {cols} FROM json_each(?4, ?5) AS j JOIN temp.alias AS a ON a.raw = j.key "
    f"WHERE true ON CONFLICT DO UPDATE SET calls = CASE WHEN calls > {_MAX_CALLS} - "
    f"excluded.calls THEN {_MAX_CALLS} ELSE calls + excluded.calls END"
)
_STAGE_OPS = "INSERT INTO temp.stage(capture, variant, op, mode, calls) " + _EXPAND.format(
    cols="?1, ?2, a.op, ?3, j.value"
)
_DIRECT_OPS = "INSERT INTO edge(variant, op, mode, calls) " + _EXPAND.format(
    cols="?2, a.op, ?3, j.value"
)

Pair = tuple[int, int]  # (capture, variant)


class Ingest:
    """One ingest transaction (Note [Combining captures], Note [Fast ingest])."""

    BATCH = 20_000  # ops records per executemany

    def __init__(
        self,
        store: OpStore,
        report: IngestReport,
        code: Mapping[str, str] | None = None,
        replace: bool = False,
    ) -> None:
        self.store = store
        #: each variant's fingerprint in the memory of the tree captured (Note
        #: [Evidence of which code]); a variant it does not name: unknown
        self.code = code or {}
        #: the variants this ingest records replace what the index held of them
        #: (Note [Fresh evidence for the delta]) instead of adding to it
        self.replace = replace
        self.c = store.connection
        self.report = report
        self.raw_ids: dict[str, int] = {}  # recorded spelling -> op id (= temp.alias)
        self.op_ids: dict[str, int] = {}
        self.op_h: dict[int, int] = {}
        self.new_ops: list[tuple[int, str, str, int]] = []
        self.var_ids: dict[str, int] = {}
        self.var_rows: dict[int, list[str | None]] = {}  # touched: [variant_id, nodeid, file]
        self.next_op = 1
        self.first_new_var = 1
        self.next_var = 1
        self.capture: int | None = None
        self.direct: list[tuple[int, int, int, str, str]] = []
        self.staged: list[tuple[int, int, int, str, str]] = []
        self.first_capture: dict[int, int] = {}  # new variant -> the capture it came in
        # Op sets per (capture, variant), built from the lines as they come; a
        # variant whose lines are not consecutive is recounted from the rows.
        self.current: Pair | None = None
        self.current_ops: set[int] = set()
        self.opsets: dict[Pair, tuple[int, int]] = {}
        self.revisit: set[Pair] = set()
        self.stops: dict[Pair, tuple[str | None, str | None, str | None]] = {}
        #: 1: the test branches on the device; 2: it started a thread, which op
        #: capture does not see into (Note [Capture sees one thread])
        self.branches: dict[Pair, int] = {}
        self.pairs: set[Pair] = set()
        self.sig_ids: dict[str, int] = {}  # "float32,int64" -> sig id
        self.new_sigs: list[tuple[int, str]] = []
        self.next_sig = 1
        self.call_sigs: set[tuple[int, int, int]] = set()  # (variant, op, sig)
        self.examples: dict[str, tuple[int, str]] = {}  # key -> (op id, call text)
        self.call_examples: set[tuple[int, str]] = set()  # (variant, example key)
        self.fresh = False

    def __enter__(self) -> Ingest:
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        for i, name, h in c.execute("SELECT id, name, h FROM op"):
            self.op_ids[name] = i
            self.op_h[i] = h
        self.next_op = max(self.op_h, default=0) + 1
        for i, vid in c.execute("SELECT id, variant_id FROM variant"):
            self.var_ids[vid] = i
        self.first_new_var = self.next_var = max(self.var_ids.values(), default=0) + 1
        self.sig_ids = {str(d): int(i) for i, d in c.execute("SELECT id, dtypes FROM sig")}
        self.next_sig = max(self.sig_ids.values(), default=0) + 1
        self.fresh = c.execute("SELECT 1 FROM edge LIMIT 1").fetchone() is None
        if self.fresh:
            c.execute("DROP INDEX IF EXISTS edge_by_op")
        for t in ("stage", "alias"):
            c.execute(f"DROP TABLE IF EXISTS temp.{t}")
        c.execute(
            "CREATE TEMP TABLE stage(capture INTEGER, variant INTEGER, op INTEGER, "
            "mode INTEGER, calls INTEGER, PRIMARY KEY(capture, variant, op, mode)) WITHOUT ROWID"
        )
        c.execute("CREATE TEMP TABLE alias(raw TEXT PRIMARY KEY, op INTEGER) WITHOUT ROWID")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        c = self.c
        try:
            if exc_type is None:
                try:
                    self._finish()
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
                c.execute("COMMIT")
            else:
                c.execute("ROLLBACK")
        finally:
            self.store.forget_namespaces()
            for t in ("stage", "alias"):
                c.execute(f"DROP TABLE IF EXISTS temp.{t}")

    # ------------------------------------------------------------ reading
    def feed(self, records: Iterable[Record], source: str) -> None:
        """Stage every record of one source (a file, or the capture's records)."""
        self.capture = None
        for n, rec, line in records:
            kind = check_record(f"{source}:{n}", rec)
            self.report.records += 1
            if kind == "provenance":
                self._close_current()
                self.capture = self.store.capture_id(rec, source)
                if self.capture not in self.report.captures:
                    self.report.captures.append(self.capture)
                continue
            if self.capture is None:
                raise UserError(
                    f"{source}:{n}: expected a provenance record first (it says which torch "
                    f"and device the ops come from); found a {kind!r} record. Was the capture "
                    "written by `ootest ops capture`?"
                )
            key = (self.capture, self._variant(rec))
            self.pairs.add(key)
            try:
                self._one(kind, key, rec, line)
            except OpNameError as e:  # where it was found, as for every other field
                raise UserError(f"{source}:{n}: {'ops' if kind == 'ops' else 'op'}: {e}") from None
        self._close_current()

    def _one(self, kind: str, key: Pair, rec: dict[str, Any], line: str | None) -> None:
        if kind == "ops":
            self._ops(key, rec, line)
        elif kind == "dtypes":
            self._dtypes(key[1], rec)
        elif kind == "example":
            self._example(key[1], rec)
        elif kind == "stop":
            op = rec.get("op")
            self.stops[key] = (
                str(overload_of(op)) if op else None,
                rec.get("outcome"),
                rec.get("error"),
            )
        else:
            flag = THREADS if rec.get("threads") else 1
            self.branches[key] = max(self.branches.get(key, 0), flag)

    def _variant(self, rec: dict[str, Any]) -> int:
        vid = rec["variant_id"]
        i = self.var_ids.get(vid)
        if i is None:
            i = self.var_ids[vid] = self.next_var
            self.next_var += 1
        row = self.var_rows.get(i)
        if row is None:
            row = self.var_rows[i] = [vid, None, None]
        if rec.get("nodeid"):
            row[1] = rec["nodeid"]
        if rec.get("file"):
            row[2] = rec["file"]
        return i

    def _ops(self, key: Pair, rec: dict[str, Any], line: str | None) -> None:
        ops: dict[str, int] = rec["ops"]
        if line is None and not keys_ok(ops):  # JSON keys are strings; API records may not be
            raise UserError(
                f"{rec['variant_id']}: ops: expected op names (strings) as keys; "
                f"found {sorted({type(k).__name__ for k in ops})}"
            )
        raw_ids = self.raw_ids
        if not raw_ids.keys() >= ops.keys():
            self._learn([r for r in ops if r not in raw_ids])
        if key != self.current:
            self._close_current()
            self.current = key
            if key in self.opsets:
                self.revisit.add(key)
        self.current_ops.update(map(raw_ids.__getitem__, ops))
        if len(self.current_ops) > MAX_OPS:  # over several records: see store.op_hash
            raise UserError(
                f"{rec['variant_id']}: ops: expected at most {MAX_OPS:,} op names in one "
                f"variant; found {len(self.current_ops):,}"
            )
        mode = 1 if rec.get("mode") == "compiled" else 0
        cap, var = key
        row = (cap, var, mode, *((json.dumps(ops), "$") if line is None else (line, "$.ops")))
        if var >= self.first_new_var and self.first_capture.setdefault(var, cap) == cap:
            self.direct.append(row)
        else:
            self.staged.append(row)
        if len(self.direct) + len(self.staged) >= self.BATCH:
            self._flush()

    def _dtypes(self, var: int, rec: dict[str, Any]) -> None:
        """One call signature (Note [Call dtype signatures])."""
        raw: str = rec["op"]
        if raw not in self.raw_ids:
            self._learn([raw])
        text = ",".join(sorted(set(rec["dtypes"])))
        sig = self.sig_ids.get(text)
        if sig is None:
            sig = self.sig_ids[text] = self.next_sig
            self.next_sig += 1
            self.new_sigs.append((sig, text))
        self.call_sigs.add((var, self.raw_ids[raw], sig))

    def _example(self, var: int, rec: dict[str, Any]) -> None:
        """One call example (Note [Call examples in the index])."""
        raw: str = rec["op"]
        if raw not in self.raw_ids:
            self._learn([raw])
        op = self.raw_ids[raw]
        name = str(overload_of(raw))
        key = example_key(name, rec["call"])
        if key not in self.examples:
            self.examples[key] = (op, rec["call"])
        self.call_examples.add((var, key))

    def _close_current(self) -> None:
        if self.current is not None:
            if self.current not in self.revisit:
                ops = self.current_ops
                self.opsets[self.current] = (len(ops), sum(map(self.op_h.__getitem__, ops)))
            self.current = None
            self.current_ops = set()

    def _learn(self, raws: list[str]) -> None:
        """Map recorded spellings to op ids (a new overload gets a row)."""
        rows = []
        for raw in raws:
            name = str(overload_of(raw))
            i = self.op_ids.get(name)
            if i is None:
                i = self.op_ids[name] = self.next_op
                self.next_op += 1
                h = self.op_h[i] = op_hash(name)
                self.new_ops.append((i, name, name.partition(".")[0], h))
            rows.append((raw, i))
            self.raw_ids[raw] = i
        self.c.executemany("INSERT INTO temp.alias VALUES (?, ?)", rows)

    def _flush(self) -> None:
        if self.direct:
            self.c.executemany(_DIRECT_OPS, self.direct)
            self.direct = []
        if self.staged:
            self.c.executemany(_STAGE_OPS, self.staged)
            self.staged = []

    # ------------------------------------------------------------ writing
    def _finish(self) -> None:
        self._close_current()
        self._flush()
        c = self.c
        dropped = self._drop_replaced() if self.replace else set()
        c.executemany("INSERT INTO op(id, name, packet, h) VALUES (?, ?, ?, ?)", self.new_ops)
        c.executemany(
            "INSERT INTO variant(id, variant_id, nodeid, file) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET nodeid = coalesce(excluded.nodeid, nodeid), "
            "file = coalesce(excluded.file, file)",
            ((i, *row) for i, row in self.var_rows.items()),
        )
        for cap, var in self.revisit:  # its rows are in edge if direct, else in stage
            table, where = (
                ("edge", "variant = ?2")
                if self.first_capture.get(var) == cap
                else ("temp.stage", "capture = ?1 AND variant = ?2")
            )
            n, s = c.execute(
                f"SELECT count(*), coalesce(sum(o.h), 0) FROM op o WHERE o.id IN "
                f"(SELECT op FROM {table} WHERE {where})",
                (cap, var),
            ).fetchone()
            self.opsets[(cap, var)] = (int(n), int(s))
        c.executemany(
            _UPSERT_VARIANT_CAPTURE,
            (
                (
                    var,
                    cap,
                    *self.opsets.get((cap, var), (0, 0)),
                    *self._stop((cap, var)),
                    self.branches.get((cap, var), 0),
                    self.code.get(str(self.var_rows[var][0])),
                )
                for cap, var in sorted(self.pairs, key=lambda k: (k[1], k[0]))
            ),
        )
        c.executemany("INSERT INTO sig(id, dtypes) VALUES (?, ?)", self.new_sigs)
        c.executemany(
            "INSERT OR IGNORE INTO call_sig(variant, op, sig) VALUES (?, ?, ?)",
            sorted(self.call_sigs),
        )
        c.executemany(
            "INSERT INTO example(op, key, call) VALUES (?, ?, ?) ON CONFLICT(key) DO NOTHING",
            ((op, key, call) for key, (op, call) in sorted(self.examples.items())),
        )
        c.executemany(
            "INSERT OR IGNORE INTO call_example(variant, example) "
            "SELECT ?, id FROM example WHERE key = ?",
            sorted(self.call_examples),
        )
        c.execute(
            "INSERT INTO edge(variant, op, mode, calls) "
            "SELECT variant, op, mode, calls FROM temp.stage WHERE true "
            "ON CONFLICT(variant, op, mode) DO UPDATE SET calls = max(calls, excluded.calls)"
        )
        self.report.variants += len({v for _, v in self.pairs})
        if self.fresh:
            c.execute(EDGE_INDEX)
        refresh_postings(c, set(self.raw_ids.values()) | dropped)
        refresh_flags(c)
        self.report.edges = int(c.execute("SELECT count(*) FROM edge").fetchone()[0])

    def _drop_replaced(self) -> set[int]:
        """Forget what the index held of the variants this ingest records, but
        their rows of the captures read now (Note [Fresh evidence for the delta]);
        the ops whose posting lists lose them."""
        c = self.c
        old = sorted({v for _, v in self.pairs if v < self.first_new_var})
        caps = sorted({cap for cap, _ in self.pairs})
        ops: set[int] = set()
        cmarks = ",".join("?" * len(caps))
        for k in range(0, len(old), 500):
            part = old[k : k + 500]
            marks = ",".join("?" * len(part))
            ops.update(
                int(r[0])
                for r in c.execute(f"SELECT DISTINCT op FROM edge WHERE variant IN ({marks})", part)
            )
            for table in ("edge", "call_sig", "call_example"):
                c.execute(f"DELETE FROM {table} WHERE variant IN ({marks})", part)
            c.execute(
                f"DELETE FROM variant_capture WHERE variant IN ({marks}) "
                f"AND capture NOT IN ({cmarks})",
                (*part, *caps),
            )
        return ops

    def _stop(self, key: Pair) -> tuple[str | None, str | None, str | None]:
        op, outcome, error = self.stops.get(key, (None, None, None))
        return outcome, op, error


# A capture read again only fills in: a record without ops keeps the op set
# already stored for that capture (Note [Combining captures]).
_UPSERT_VARIANT_CAPTURE = (
    "INSERT INTO variant_capture(variant, capture, n_ops, opset, outcome, stopped_on, "
    "error, device_branch, code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(variant, capture) DO UPDATE SET "
    "n_ops = CASE WHEN excluded.n_ops > 0 THEN excluded.n_ops ELSE n_ops END, "
    "opset = CASE WHEN excluded.n_ops > 0 THEN excluded.opset ELSE opset END, "
    "outcome = coalesce(excluded.outcome, outcome), "
    "stopped_on = coalesce(excluded.stopped_on, stopped_on), "
    "error = coalesce(excluded.error, error), "
    "device_branch = max(device_branch, excluded.device_branch), "
    "code = coalesce(excluded.code, code)"
)


def refresh_postings(c: sqlite3.Connection, ops: Iterable[int]) -> None:
    """Recompute the posting list (``op.variants``) of the given ops from ``edge``."""
    rows = []
    for i in sorted(ops):
        (text,) = c.execute(
            "SELECT group_concat(variant) FROM (SELECT DISTINCT variant FROM edge WHERE op = ?)",
            (i,),
        ).fetchone()
        rows.append((pack_ids(map(int, text.split(","))) if text else b"", i))
    c.executemany("UPDATE op SET variants = ? WHERE id = ?", rows)


#: ``device_branch`` of a variant whose test started a thread (1: it branches on
#: the device): its ops are uncertain either way, and the why says which
THREADS = 2


def refresh_flags(c: sqlite3.Connection) -> None:
    """Recompute every variant's device-dependence, ``varies`` and ``partial``."""
    from ootest.opmap.schema import COMPLETE_OUTCOMES

    complete = ",".join(f"'{o}'" for o in sorted(COMPLETE_OUTCOMES))
    c.execute(
        f"""
        UPDATE variant SET device_branch = a.db, varies = a.nv > 1, partial = NOT a.complete,
          why = CASE
            WHEN a.db >= {THREADS} AND a.nv > 1 THEN
              'the test starts threads, which op capture does not see into; its ops '
              || 'differ between captures ' || a.caps
            WHEN a.db >= {THREADS} THEN
              'the test starts threads, which op capture does not see into'
            WHEN a.db AND a.nv > 1 THEN
              'the test branches on the device type; its ops differ between captures '
              || a.caps
            WHEN a.db THEN 'the test branches on the device type'
            WHEN a.nv > 1 THEN 'its ops differ between captures ' || a.caps
            ELSE NULL END
        FROM (
          SELECT variant, max(device_branch) AS db,
            count(DISTINCT n_ops || ':' || opset) AS nv,
            max(coalesce(outcome IN ({complete}), 0)) AS complete,
            group_concat(capture, ', ') AS caps
          FROM variant_capture GROUP BY variant
        ) AS a
        WHERE variant.id = a.variant
        """
    )


# ------------------------------------------------------------------ merging
def merge(store: OpStore, others: list[Path], report: IngestReport) -> None:
    """Merge shard indexes into ``store`` (Note [Combining captures]).

    Each source is merged in a transaction of its own: SQLite attaches a
    database only outside a transaction.
    """
    for other in others:
        OpStore.open(other).close()  # exists, is an index, has our schema
    c = store.connection
    try:
        for other in others:
            report.sources.append(str(other))
            c.execute("ATTACH DATABASE ? AS src", (str(other),))
            try:
                c.execute("BEGIN IMMEDIATE")
                try:
                    refresh_postings(c, _merge_one(store, report))
                    refresh_flags(c)
                    c.execute("COMMIT")
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
            finally:
                c.execute("DETACH DATABASE src")
    finally:
        store.forget_namespaces()


def _merge_one(store: OpStore, report: IngestReport) -> set[int]:
    """Copy the attached ``src`` index's rows into ``store``; the ops it touched."""
    c = store.connection
    try:
        capmap: dict[int, int] = {}
        for row in c.execute(
            "SELECT id, torch_version, torch_git, device, profile, ootest_version, time, "
            "source FROM src.capture ORDER BY id"
        ).fetchall():
            prov = dict(zip((*PROVENANCE_KEYS, "time"), row[1:7], strict=True))
            capmap[row[0]] = store.capture_id(prov, str(row[7]))
        report.captures.extend(i for i in capmap.values() if i not in report.captures)
        c.execute("CREATE TEMP TABLE capmap(old INTEGER PRIMARY KEY, new INTEGER NOT NULL)")
        c.executemany("INSERT INTO temp.capmap VALUES (?, ?)", capmap.items())
        c.execute(
            "INSERT INTO main.op(name, packet, h) SELECT name, packet, h FROM src.op "
            "WHERE true ORDER BY id ON CONFLICT(name) DO NOTHING"
        )
        c.execute(
            "INSERT INTO main.variant(variant_id, nodeid, file) "
            "SELECT variant_id, nodeid, file FROM src.variant WHERE true ORDER BY id "
            "ON CONFLICT(variant_id) DO UPDATE SET "
            "nodeid = coalesce(excluded.nodeid, nodeid), file = coalesce(excluded.file, file)"
        )
        c.execute(
            "CREATE TEMP TABLE vmap(old INTEGER PRIMARY KEY, new INTEGER NOT NULL) WITHOUT ROWID"
        )
        c.execute(
            "INSERT INTO temp.vmap SELECT s.id, m.id FROM src.variant s "
            "JOIN main.variant m ON m.variant_id = s.variant_id"
        )
        c.execute(
            "CREATE TEMP TABLE omap(old INTEGER PRIMARY KEY, new INTEGER NOT NULL) WITHOUT ROWID"
        )
        c.execute(
            "INSERT INTO temp.omap SELECT s.id, m.id FROM src.op s "
            "JOIN main.op m ON m.name = s.name"
        )
        cols = {str(r[1]) for r in c.execute("PRAGMA src.table_info(variant_capture)")}
        code = "vc.code" if "code" in cols else "NULL"  # a read-only source of schema 1-3
        c.executemany(
            _UPSERT_VARIANT_CAPTURE,
            c.execute(
                "SELECT vm.new, cm.new, vc.n_ops, vc.opset, vc.outcome, vc.stopped_on, vc.error, "
                f"vc.device_branch, {code} FROM src.variant_capture vc "
                "JOIN temp.vmap vm ON vm.old = vc.variant "
                "JOIN temp.capmap cm ON cm.old = vc.capture"
            ).fetchall(),
        )
        c.execute(
            "INSERT INTO main.edge(variant, op, mode, calls) "
            "SELECT vm.new, om.new, e.mode, e.calls FROM src.edge e "
            "JOIN temp.vmap vm ON vm.old = e.variant JOIN temp.omap om ON om.old = e.op "
            "WHERE true ON CONFLICT(variant, op, mode) DO UPDATE SET "
            "calls = max(calls, excluded.calls)"
        )
        c.execute(
            "INSERT INTO main.sig(dtypes) SELECT dtypes FROM src.sig WHERE true ORDER BY id "
            "ON CONFLICT(dtypes) DO NOTHING"
        )
        c.execute(
            "INSERT OR IGNORE INTO main.call_sig(variant, op, sig) "
            "SELECT vm.new, om.new, ms.id FROM src.call_sig cs "
            "JOIN temp.vmap vm ON vm.old = cs.variant JOIN temp.omap om ON om.old = cs.op "
            "JOIN src.sig ss ON ss.id = cs.sig JOIN main.sig ms ON ms.dtypes = ss.dtypes"
        )
        c.execute(
            "INSERT INTO main.example(op, key, call) SELECT om.new, e.key, e.call "
            "FROM src.example e JOIN temp.omap om ON om.old = e.op WHERE true ORDER BY e.id "
            "ON CONFLICT(key) DO NOTHING"
        )
        c.execute(
            "INSERT OR IGNORE INTO main.call_example(variant, example) "
            "SELECT vm.new, me.id FROM src.call_example ce "
            "JOIN temp.vmap vm ON vm.old = ce.variant JOIN src.example se ON se.id = ce.example "
            "JOIN main.example me ON me.key = se.key"
        )
        report.variants += int(c.execute("SELECT count(*) FROM temp.vmap").fetchone()[0])
        report.edges = int(c.execute("SELECT count(*) FROM main.edge").fetchone()[0])
        return {int(r[0]) for r in c.execute("SELECT new FROM temp.omap")}
    finally:
        for t in ("capmap", "vmap", "omap"):
            c.execute(f"DROP TABLE IF EXISTS temp.{t}")


def ingest_files(
    store: OpStore,
    paths: Sequence[str | os.PathLike[str]],
    *,
    code: Mapping[str, str] | None = None,
) -> IngestReport:
    """Ingest capture files (JSON lines) into ``store``, all in one transaction;
    ``code``: as :func:`ingest_records`."""
    report = IngestReport()
    started = time.perf_counter()
    with Ingest(store, report, code) as ing:
        for path in paths:
            stats = ReadStats()
            report.sources.append(str(path))
            ing.feed(read_capture(path, stats), str(path))
            if stats.truncated_last_line:
                report.truncated.append(str(path))
    report.seconds = time.perf_counter() - started
    return report


def ingest_records(
    store: OpStore,
    records: Iterable[Mapping[str, Any]],
    *,
    source: str = "<records>",
    code: Mapping[str, str] | None = None,
    replace: bool = False,
) -> IngestReport:
    """Ingest capture records (the dicts a capture stream holds), in one transaction.

    The first record must be a ``provenance`` record. ``source`` names the
    records in error messages (``source:N`` is the N-th record) and in the
    ``capture`` table. ``code``: each variant's fingerprint in the memory of the
    tree captured (Note [Evidence of which code]); ``replace``: the records
    replace what the index held of the variants they name (Note [Fresh evidence
    for the delta]) instead of adding to it.
    """
    report = IngestReport(sources=[source])
    started = time.perf_counter()
    with Ingest(store, report, code, replace) as ing:
        ing.feed(((i, dict(r), None) for i, r in enumerate(records, 1)), source)
    report.seconds = time.perf_counter() - started
    return report


def merge_indexes(store: OpStore, others: Sequence[str | os.PathLike[str]]) -> IngestReport:
    """Merge other indexes (e.g. one per shard) into ``store``."""
    report = IngestReport()
    started = time.perf_counter()
    merge(store, [Path(o) for o in others], report)
    report.seconds = time.perf_counter() - started
    return report
