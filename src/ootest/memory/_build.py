"""``ootest index build``: the static part, torch's test database, the variants.

Incremental by construction (see docs/memory.md, "Incremental builds"):

1. a file whose size and mtime match the index is not read; one whose content
   digest matches is not parsed (its stored facts are reused);
2. torch's test database is dumped again only when the installed torch (its
   version and testing internals) or a local op database changed;
3. a test file's variants are collected again only when its *collection stamp*
   changed: its content, the in-tree modules it imports (transitively) and the
   ``conftest.py`` files above it, the device, the config, torch, ootest's plugin;
4. a variant is fingerprinted again only when its file was collected again or
   its OpInfo/ModuleInfo entry changed; rows are written only where they differ.

Nothing here imports torch: the database dump and the collection run in child
processes (:mod:`ootest.memory._torchdb`, :mod:`ootest.memory._collect`).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ootest.atomic import exclusive
from ootest.errors import UserError
from ootest.memory._collect import CollectSettings, FileCollection, collect
from ootest.memory._entries import Dump, EntryChanges, store_entries
from ootest.memory._files import (
    Deps,
    SourceFile,
    Unreadable,
    discover,
    file_digest,
    ootest_stamp,
    read_source,
    torch_dir,
    torch_stamp,
)
from ootest.memory._fingerprint import TORCH_DBS
from ootest.memory._hashing import SCHEME, digest
from ootest.memory._rows import forget_file, forget_variants, load_imports, store_file
from ootest.memory._static import FileFacts, Import, dump_facts, load_facts, parse_file
from ootest.memory._store import (
    BUILDING,
    chunks,
    connect,
    read_meta,
    refresh_common_terms,
    write_meta,
)
from ootest.memory._variants import VariantWriter
from ootest.record.identity import backend_name

_IN_PROCESS_PARSE = 16  # fewer changed files than this: no process pool


class Reporter(Protocol):
    """Progress of a long build (the CLI shows a rich progress bar)."""

    def phase(self, label: str, total: int) -> Callable[[int], None]: ...

    def done(self) -> None: ...


class _Silent:
    def phase(self, label: str, total: int) -> Callable[[int], None]:
        return lambda n: None

    def done(self) -> None:
        pass


@dataclass(frozen=True)
class BuildOptions:
    roots: tuple[Path, ...]
    db: Path
    device: str | None = None
    config: Path | None = None
    opdbs: tuple[str, ...] = ()
    torch_db: bool = True
    variants: bool = True  # False: the static part only (no torch needed)
    jobs: int = 1
    pytest_args: tuple[str, ...] = ()
    group_size: int = 64


@dataclass
class BuildReport:
    files_total: int = 0
    files_read: int = 0  # content hashed (stat changed)
    files_parsed: int = 0
    files_removed: int = 0
    parse_errors: int = 0
    test_files: int = 0
    files_collected: int = 0
    collect_errors: int = 0  # in the index after the build
    variants_total: int = 0
    variants_fingerprinted: int = 0
    variants_added: int = 0
    variants_removed: int = 0
    variants_changed: int = 0
    # Note [Variant ID grammar]: of the variants collected by this build (an
    # incremental build collects only the files that changed)
    variants_collected: int = 0
    variants_inexact: int = 0
    entries_total: int = 0
    entries_dumped: bool = False
    entries_changed: int = 0  # added, removed, or with another fingerprint
    rows_written: int = 0
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # seconds: static, collect, ...

    def summary(self) -> str:
        """``parsed 0 of 1,204 files, 0 variants re-fingerprinted``."""
        return (
            f"parsed {self.files_parsed:,} of {self.files_total:,} files, "
            f"{self.variants_fingerprinted:,} variants re-fingerprinted"
        )

    def details(self) -> str:
        lines = [
            f"files: {self.files_total:,} ({self.files_read:,} read, {self.files_removed:,} "
            f"removed, {self.parse_errors:,} that do not parse)",
            f"test files: {self.test_files:,} ({self.files_collected:,} collected, "
            f"{self.collect_errors:,} with an import error)",
            f"variants: {self.variants_total:,} (+{self.variants_added:,} "
            f"-{self.variants_removed:,} ~{self.variants_changed:,})",
            *(
                [
                    f"variant IDs not exact as config names: {self.variants_inexact:,} of "
                    f"{self.variants_collected:,} collected"
                ]
                if self.variants_collected
                else []
            ),
            f"entries: {self.entries_total:,} ("
            + (
                f"read again, {self.entries_changed:,} changed"
                if self.entries_dumped
                else "unchanged"
            )
            + ")",
            f"rows written: {self.rows_written:,} in {self.seconds:.1f} s ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items())
            + ")",
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- validation
def _check(opts: BuildOptions) -> None:
    if opts.jobs < 1:
        raise UserError(f"--jobs: expected a number of processes >= 1, found {opts.jobs}")
    if opts.config is not None and not opts.config.is_file():
        raise UserError(f"--config {opts.config}: no such file")
    for spec in opts.opdbs:
        target, _, attr = spec.rpartition(":")
        if not target or not attr:
            raise UserError(
                f"--opdb: expected 'module:attr' or 'path/to/file.py:attr', found {spec!r}"
            )
    if opts.variants and torch_dir() is None:
        raise UserError(
            "torch is not installed in this environment; the variant part needs it "
            "(or pass --static-only)"
        )


def db_name(spec: str) -> str:
    """How a ``--opdb`` spec is named in the index: ``module:attr``."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        target = Path(target).stem
    return f"{target}:{attr}"


# ---------------------------------------------------------------- the build
#: connection id -> the BUILDING marker not yet written: it goes in with the first
#: transaction that changes anything, so an unchanged rebuild still writes nothing.
_MARK: dict[int, str] = {}


@contextmanager
def _tx(con: sqlite3.Connection) -> Iterator[None]:
    con.execute("BEGIN")
    before = con.total_changes
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    mark = _MARK.get(id(con))
    if mark is not None and con.total_changes != before:
        write_meta(con, {BUILDING: mark})  # readers refuse the index until the build is done
        del _MARK[id(con)]
    con.execute("COMMIT")


#: Enumerates the variants of test files: :func:`ootest.memory._collect.collect` (pytest
#: with the plugin); the benchmark substitutes a synthetic one to measure the rest at scale.
Collector = Callable[
    [Sequence[SourceFile], CollectSettings, int, Callable[[int], None]],
    tuple[dict[str, FileCollection], list[str]],
]


def build(
    opts: BuildOptions, reporter: Reporter | None = None, collector: Collector = collect
) -> BuildReport:
    started = time.perf_counter()
    rep = reporter or _Silent()
    _check(opts)
    skipped: list[str] = []
    files = discover(opts.roots, skipped)
    report = BuildReport(files_total=len(files), warnings=skipped)
    busy = (
        f"--db {opts.db}: another index build is writing it; wait for it to finish, "
        "or build into another --db"
    )
    with exclusive(opts.db, busy):  # Note [One writer of an index]
        con = connect(opts.db, create=True)
        try:
            _check_scheme(con, opts.db)
            started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            left = BUILDING in read_meta(con)  # by a build that was killed
            if not left:
                _MARK[id(con)] = f"started at {started_at} (pid {os.getpid()})"
            b = _Builder(con, opts, files, report, rep, collector)
            b.run()
            if left or id(con) not in _MARK:  # a marker is there: the build is whole now
                with _tx(con):
                    con.execute("DELETE FROM meta WHERE key=?", (BUILDING,))
        finally:
            _MARK.pop(id(con), None)
            con.close()
            rep.done()
    report.seconds = time.perf_counter() - started
    return report


def _check_scheme(con: sqlite3.Connection, path: Path) -> None:
    """An index of another fingerprint scheme is not updated in place: its rows
    would mix two recipes, and a diff against it would call everything modified."""
    found = read_meta(con).get("scheme")
    if found != SCHEME:
        raise UserError(
            f"{path}: built with fingerprint scheme {found}, this ootest uses scheme "
            f"{SCHEME}; build into a new file (--db NEW.db) or remove {path}"
        )


@dataclass
class _Stored:
    digest: str
    size: int
    mtime_ns: int
    root: str
    path: str


class _Builder:
    """One build: the phases in order, over one connection (see the module docstring)."""

    def __init__(
        self,
        con: sqlite3.Connection,
        opts: BuildOptions,
        files: list[SourceFile],
        report: BuildReport,
        reporter: Reporter,
        collector: Collector,
    ) -> None:
        self.con, self.opts, self.files, self.report, self.rep = con, opts, files, report, reporter
        self.collector = collector
        self.by_key = {f.key: f for f in files}
        self.digests: dict[str, str] = {}
        self.facts: dict[str, FileFacts] = {}  # parsed now, or read back when needed
        self.imports: dict[str, tuple[Import, ...]] = {}
        self._deps: Deps | None = None
        self.docs_changed = False  # searchable text written: recount the common words

    def run(self) -> None:
        with self._phase("static"):
            to_parse, touched, removed = self._scan()
            # torch's database loads in a child while the files are parsed here
            dump = self._start_dump() if self.opts.variants else None
            try:
                self._static(to_parse, touched, removed)
            except BaseException:
                if dump is not None:
                    dump.kill()
                raise
        if self.opts.variants:
            self._variant_part(dump)
        self.report.rows_written += self._write(lambda: write_meta(self.con, self._settings()))
        if self.docs_changed:
            self.report.rows_written += self._write(lambda: refresh_common_terms(self.con))
        self._count()

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.report.phases[name] = round(time.perf_counter() - started, 3)

    def _write(self, fn: Callable[[], int]) -> int:
        with _tx(self.con):
            return fn()

    # ------------------------------------------------------------ static part
    def _scan(self) -> tuple[list[tuple[str, bytes]], list[SourceFile], list[str]]:
        """(files to parse with their bytes, files only touched, keys removed): a
        file is read only when its stat changed, parsed only when its digest did."""
        stored = {
            r[0]: _Stored(*r[1:])
            for r in self.con.execute("SELECT key, digest, size, mtime_ns, root, path FROM files")
        }
        to_parse: list[tuple[str, bytes]] = []
        touched: list[SourceFile] = []
        unread: set[str] = set()
        for f in self.files:
            s = stored.get(f.key)
            if s is not None and (s.size, s.mtime_ns, s.path) == (f.size, f.mtime_ns, str(f.path)):
                self.digests[f.key] = s.digest
                continue
            try:
                data = read_source(f.path)
            except Unreadable as e:  # changed since it was found
                self.report.warnings.append(f"{f.path}: {e}; not indexed")
                unread.add(f.key)
                continue
            self.report.files_read += 1
            d = self.digests[f.key] = file_digest(data)
            if s is not None and s.digest == d:
                touched.append(f)
            else:
                to_parse.append((f.key, data))
        if unread:
            self.files = [f for f in self.files if f.key not in unread]
            self.by_key = {f.key: f for f in self.files}
            self.report.files_total = len(self.files)
        return to_parse, touched, sorted(set(stored) - set(self.by_key))

    def _static(
        self, to_parse: list[tuple[str, bytes]], touched: list[SourceFile], removed: list[str]
    ) -> None:
        parsed = self._parse(to_parse)
        self._deps = None  # from now on, the imports just parsed
        with _tx(self.con):
            for f in touched:
                self.con.execute(
                    "UPDATE files SET size=?, mtime_ns=?, root=?, path=? WHERE key=?",
                    (f.size, f.mtime_ns, str(f.root), str(f.path), f.key),
                )
            for key in removed:
                forget_file(self.con, key, everything=True)
            for facts in parsed:
                store_file(self.con, self.by_key[facts.key], self.digests[facts.key], facts)
                self.facts[facts.key] = facts
                self.imports[facts.key] = facts.imports
        self.docs_changed |= bool(parsed or removed)
        self.report.files_parsed = len(parsed)
        self.report.parse_errors = sum(1 for f in parsed if f.error)
        self.report.files_removed = len(removed)
        self.report.rows_written += len(touched) + len(removed) + len(parsed)

    def _parse(self, todo: list[tuple[str, bytes]]) -> list[FileFacts]:
        if not todo:
            return []
        advance = self.rep.phase("parsing files", len(todo))
        out: list[FileFacts] = []
        if len(todo) < _IN_PROCESS_PARSE or self.opts.jobs == 1:
            for key, data in todo:
                out.append(parse_file(key, data))
                advance(1)
            return out
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        with ProcessPoolExecutor(max_workers=self.opts.jobs, mp_context=ctx) as pool:
            size = max(1, len(todo) // (self.opts.jobs * 8))
            for text in pool.map(_parse_to_json, todo, chunksize=size):
                out.append(load_facts(text))
                advance(1)
        return out

    def _facts(self, key: str) -> FileFacts:
        found = self.facts.get(key)
        if found is None:
            row = self.con.execute("SELECT facts FROM facts WHERE key=?", (key,)).fetchone()
            found = self.facts[key] = load_facts(row[0]) if row else FileFacts(key=key)
        return found

    def deps(self) -> Deps:
        """In-tree imports of every file (stored imports for the files not parsed now)."""
        if self._deps is None:
            missing = [k for k in self.by_key if k not in self.imports]
            for part in chunks(missing):
                marks = ",".join("?" * len(part))
                for key, text in self.con.execute(
                    f"SELECT key, imports FROM files WHERE key IN ({marks})", part
                ):
                    self.imports[key] = load_imports(text)
            self._deps = Deps(self.files, self.imports)
        return self._deps

    def imported_modules(self, key: str) -> set[str]:
        """Modules a file imports, itself or through in-tree modules (Note [Entry lookup])."""
        deps = self.deps()
        out: set[str] = set()
        for k in (key, *sorted(deps.closure(key))):
            for imp in self.imports.get(k, ()):
                out.add(imp.module)
                out.update(f"{imp.module}.{n}" for n in imp.names)
            out.add(self.by_key[k].path.stem)  # an in-tree module by its plain name
        return out

    # ------------------------------------------------------------ variant part
    def _specs(self) -> list[str]:
        return [*(TORCH_DBS if self.opts.torch_db else ()), *self.opts.opdbs]

    def _stored_entries_stamp(self) -> str | None:
        row = self.con.execute("SELECT value FROM meta WHERE key='entries_stamp'").fetchone()
        return str(row[0]) if row else None

    def _start_dump(self) -> Dump | None:
        """Start dumping torch's database when its stamp changed. Decided before the
        changed files are parsed, with the imports stored for them: a local op
        database whose in-tree closure changed has a changed file in that closure
        (or a new file that an import now finds), so this never misses a change."""
        if self._entries_stamp(self._specs()) == self._stored_entries_stamp():
            return None
        roots = list(dict.fromkeys(str(f.root) for f in self.files))
        return Dump(self.opts.torch_db, self.opts.opdbs, roots, self._backend())

    def _variant_part(self, dump: Dump | None) -> None:
        specs = self._specs()
        stamp = self._entries_stamp(specs)  # with the imports just parsed: the one kept
        if dump is None and stamp != self._stored_entries_stamp():
            roots = list(dict.fromkeys(str(f.root) for f in self.files))
            dump = Dump(self.opts.torch_db, self.opts.opdbs, roots, self._backend())
        changes: EntryChanges | None = None
        try:
            with self._phase("collect"):
                results, stamps = self._collect()
            if dump is not None:
                with self._phase("entries"):  # what the dump takes beyond the collection
                    records = dump.records()
                    dump = None
                    with _tx(self.con):
                        changes = store_entries(self.con, records)
                        write_meta(self.con, {"entries_stamp": stamp})
        finally:
            if dump is not None:  # the collection failed: do not leave the dump running
                dump.kill()
        if changes is not None:
            self.docs_changed |= changes.written > 0
            self.report.entries_dumped = True
            self.report.entries_changed = changes.rows
            self.report.rows_written += changes.written + 1
            self.report.warnings += [
                f"database {db} could not be read: {msg}"
                for db, msg in sorted(changes.errors.items())
            ]
        with self._phase("fingerprint"):
            writer = self._fingerprint(specs, results, stamps, changes)
        c = writer.counts
        self.report.variants_fingerprinted = c.fingerprinted
        self.report.variants_added, self.report.variants_removed = c.added, c.removed
        self.report.variants_changed = c.changed
        self.report.rows_written += c.written
        inexact = {
            v.id: v.id_problem
            for fc in results.values()
            for v in fc.variants
            if v.id_problem is not None
        }
        self.report.variants_collected = sum(len(fc.variants) for fc in results.values())
        self.report.variants_inexact = len(inexact)
        if inexact:  # Note [Variant ID grammar]
            shown = "; ".join(f"{vid}: {why}" for vid, why in sorted(inexact.items())[:3])
            self.report.warnings.append(
                f"{len(inexact)} variant IDs do not select exactly their variant as a config "
                f"name (a config naming one reaches others too), e.g. {shown}"
            )
        if c.duplicates:
            self.report.warnings.append(
                f"{c.duplicates} collected items share a variant ID with another item "
                "(each ID is indexed once)"
            )

    def _fingerprint(
        self,
        specs: list[str],
        results: dict[str, FileCollection],
        stamps: dict[str, str],
        changes: EntryChanges | None,
    ) -> VariantWriter:
        writer = VariantWriter(self.con, [db_name(s) for s in specs], self.imported_modules)
        if results:
            advance = self.rep.phase("fingerprinting variants", len(results))
            with _tx(self.con):
                for key in sorted(results):
                    writer.write_file(results[key], stamps[key], self._facts(key))
                    advance(1)
        if changes is not None and changes.changed:
            with _tx(self.con):
                writer.refingerprint({n for _, n in changes.changed}, set(results))
        return writer

    def _local_db_files(self) -> list[str]:
        """In-tree files of the local op databases (with what they import)."""
        deps = self.deps()
        out: set[str] = set()
        for spec in self.opts.opdbs:
            target = spec.rpartition(":")[0]
            key = None
            if target.endswith(".py"):
                key = deps.by_path.get(str(Path(target).resolve()))
            else:
                for root in dict.fromkeys(f.root for f in self.files):
                    key = deps.module_file(target, SourceFile("", root, root / "_.py", 0, 0))
                    if key is not None:
                        break
            if key is not None:
                out.add(key)
                out.update(deps.closure(key))
        return sorted(out)

    def _backend(self) -> str | None:
        """The privateuse1 backend the entry fingerprints are limited to (Note
        [Device-limited entry fingerprints]); None without ``--device``."""
        return backend_name(self.opts.device) if self.opts.device else None

    def _entries_stamp(self, specs: list[str]) -> str:
        local = [(k, self.digests[k]) for k in self._local_db_files()]
        # "test_base": entries dumped before Note [Test-limited entry fingerprints]
        # are dumped again once, to fill entry_bases
        stamp = [SCHEME, specs, local, torch_stamp() if specs else "", self._backend()]
        return digest([*stamp, "test_base"])

    def _common_stamp(self) -> str:
        cfg = self.opts.config
        return digest(
            [
                SCHEME,
                self.opts.device or "",
                file_digest(cfg.read_bytes()) if cfg is not None else "",
                torch_stamp(),
                ootest_stamp(),
                list(self.opts.pytest_args),
            ]
        )

    def _collect(self) -> tuple[dict[str, FileCollection], dict[str, str]]:
        """Collect the test files whose collection stamp changed."""
        tests = [f for f in self.files if f.is_test]
        self.report.test_files = len(tests)
        stored = dict(self.con.execute("SELECT file, stamp FROM collected").fetchall())
        common = self._common_stamp()
        deps = self.deps()
        stamps = {
            f.key: digest(
                [
                    common,
                    self.digests[f.key],
                    [(k, self.digests[k]) for k in sorted(deps.closure(f.key))],
                ]
            )
            for f in tests
        }
        gone = sorted(set(stored) - set(stamps))
        if gone:
            with _tx(self.con):
                for key in gone:  # no longer a test file (renamed, or removed above)
                    forget_variants(self.con, key)
            self.report.rows_written += len(gone)
        todo = [f for f in tests if stored.get(f.key) != stamps[f.key]]
        if not todo:
            return {}, stamps
        advance = self.rep.phase("collecting variants", len(todo))
        settings = CollectSettings(
            device=self.opts.device,
            config=self.opts.config.resolve() if self.opts.config is not None else None,
            pytest_args=self.opts.pytest_args,
            group_size=self.opts.group_size,
        )
        results, warnings = self.collector(todo, settings, self.opts.jobs, advance)
        self.report.warnings += warnings
        self.report.files_collected = len(todo)
        return results, stamps

    # ------------------------------------------------------------ bookkeeping
    def _settings(self) -> dict[str, str]:
        o = self.opts
        return {
            "roots": json.dumps(sorted({f.root.name for f in self.files})),
            "device": o.device or "",
            "config": str(o.config) if o.config is not None else "",
            "opdbs": json.dumps([db_name(s) for s in o.opdbs]),
            "torch_db": "1" if o.torch_db else "0",
            "torch": _torch_version(),
        }

    def _count(self) -> None:
        one = self.con.execute
        self.report.variants_total = one("SELECT count(*) FROM variants").fetchone()[0]
        self.report.entries_total = one("SELECT count(*) FROM entries").fetchone()[0]
        self.report.collect_errors = one(
            "SELECT count(*) FROM collected WHERE error IS NOT NULL"
        ).fetchone()[0]


def _parse_to_json(item: tuple[str, bytes]) -> str:
    return dump_facts(parse_file(*item))


_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)


def _torch_version() -> str:
    base = torch_dir()
    if base is None:
        return ""
    try:
        m = _VERSION.search((base / "version.py").read_text(encoding="utf-8"))
    except OSError:
        return ""
    return m.group(1) if m else ""
