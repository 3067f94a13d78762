"""Fresh op evidence for an upgrade's delta (``select run --since``, ``select refresh``).

Note [Fresh evidence for the delta]
An upgrade decides again the variants the memory diff reports added or
modified (Note [Incremental selection]); their op evidence must be of their
code now, not of the code the team's op map was captured from (Note [Evidence
of which code]: upstream rewrites ``test_foo`` so it no longer calls
``_scaled_mm``, and an old record would keep it skipped for ever). Before
deciding them:

1. the team's op map (``--ops``) is copied (SQLite's backup: a consistent copy
   while others read it); the team's file is never written;
2. a move (Note [Moves]: the same test under another name) takes its records:
   they are copied under the new ID; for a plain move (nothing else changed) a
   record of the old fingerprint is of the new one (the same code), so a moved
   variant is never "not in the op map";
3. the added, modified and moved-with-a-change variants (only those) whose
   records are not of their code now are captured on the reference device
   (``emu:full``, as ``ops capture``): pytest is given only their files and
   runs only them (``--ootest-only``: by variant ID), each record is stamped with
   the variant's new fingerprint, and replaces what the copy held of it (a union
   with the old code's ops would keep an op the test no longer calls);
   A variant whose entry changed only in skips or decorators of other tests
   (Note [Entry changes that do not reach a variant]) is not in the delta: its
   records of the old fingerprint are of the new one, and are stamped so;
4. the upgrade decides from the copy. What the capture did not reach (a test
   that no longer collects, a capture that died) keeps its old records, stale:
   it runs (``no_evidence``), and the refresh's run step runs it.

The cost follows the delta: the files of those variants are collected and only
those variants run. ``--no-capture`` (no reference device can be built) skips
step 3: the delta's op evidence stays stale and each of its variants runs.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ootest.atomic import write_atomic
from ootest.errors import UserError

if TYPE_CHECKING:
    from ootest.opmap.store import OpStore

__all__ = ["Capturer", "Delta", "DeltaCapture", "Fresh", "capture_variants", "delta", "fresh_ops"]

#: The reference device of a delta capture (as ``ootest ops capture``'s default).
REFERENCE = "emu:full"


@dataclass(frozen=True)
class DeltaCapture:
    """How an upgrade makes its delta's op evidence fresh (``select run --since``,
    ``select refresh``): ``enabled`` False is ``--no-capture`` (the copy only: moves
    take their records, the delta stays stale), None: the team's op map as it is
    (the refresh, whose capture step made the copy already)."""

    enabled: bool | None = True
    device: str = REFERENCE
    timeout: float = 300.0
    out: Path | None = None  # the copy (default: ``<out>.ops.db`` next to the config)
    capturer: Capturer | None = None  # default: :func:`capture_variants`


@dataclass(frozen=True)
class Delta:
    """What an upgrade decides again, as the op map sees it."""

    #: added, modified and moved-with-a-change variants -> their fingerprint now
    fresh: dict[str, str]
    #: moves (old ID, new ID, the old fingerprint, the new one; both "" when the
    #: move changed the code too: its records follow but stay of the old code)
    moves: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: file key -> the test file in the new tree, for each file of ``fresh``
    files: dict[str, Path] = field(default_factory=dict)
    memory: Path | None = None  # the new tree's memory (the fingerprints' source)
    #: (ID, old fingerprint, new) of the variants an entry change does not reach
    #: (Note [Entry changes that do not reach a variant]): the same code
    restamp: list[tuple[str, str, str]] = field(default_factory=list)

    def empty(self) -> bool:
        """Nothing for the op map: no variant to capture, move or stamp anew."""
        return not self.fresh and not self.moves and not self.restamp


class Capturer(Protocol):
    """Captures ``only`` (a file of variant IDs) of ``files`` on ``device`` into
    ``db``, each variant's records stamped with ``code`` (its fingerprint in
    ``memory``) and replacing what ``db`` held of it (:func:`capture_variants`)."""

    def __call__(
        self,
        db: Path,
        files: Sequence[Path],
        only: Path,
        code: Mapping[str, str],
        *,
        memory: Path | None,
        device: str,
        timeout: float,
        say: Callable[[str], None],
    ) -> None: ...


def capture_variants(
    db: Path,
    files: Sequence[Path],
    only: Path,
    code: Mapping[str, str],
    *,
    memory: Path | None,
    device: str,
    timeout: float,
    say: Callable[[str], None],
) -> None:
    """The default :class:`Capturer`: ``ootest ops capture FILES --only ONLY --memory
    M --replace`` into ``db``, in a child process (it never imports torch here; the
    capture's own pytest is supervised: a crash costs one variant)."""
    args = ["ops", "capture", *map(str, files), "--only", str(only), "--replace",
            "--db", str(db), "--device", device, "--timeout", str(timeout), "-q"]  # fmt: skip
    if memory is not None:
        args += ["--memory", str(memory)]
    lines = ootest_child(
        args,
        f"the delta capture on {device} failed (ootest ops capture exit status {{rc}}; "
        "pass --no-capture where no reference device can be built)",
    )
    if lines:
        say(f"  {lines[-1]}")


def ootest_child(args: list[str], failed: str) -> list[str]:
    """``ootest ARGS`` in a child process (this one never imports torch): its
    output lines; a failure is one error, ``failed`` (``{rc}``: the exit status)
    and the end of its output."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "ootest.cli", *args], capture_output=True, text=True)
    lines = (r.stdout + r.stderr).strip().splitlines()
    if r.returncode != 0:
        tail = "\n".join(lines[-15:])
        raise UserError(f"{failed.format(rc=r.returncode)}; its output ends:\n{tail}")
    return lines


@dataclass
class Fresh:
    """What :func:`fresh_ops` did."""

    ops: Path  # the op map to decide the delta from
    delta: int  # variants of the delta
    asked: int  # of them, captured (their records were not of their code)
    captured: int  # of those, with records of their code now
    moved: int  # moves whose records followed
    seconds: float
    device: str | None  # None: not captured (--no-capture)
    #: variants whose records were stamped with their new fingerprint (the same code)
    restamped: int = 0

    def summary(self, timed: bool = True) -> str:
        """One line; ``timed``: with the seconds the capture took."""
        if self.device is None:
            how = f"not captured (--no-capture): {self.asked} variants' op evidence is stale"
        elif not self.asked:
            how = "nothing to capture: every variant's records are of its code now"
        else:
            how = f"captured {self.captured} of {self.asked} variants on {self.device}"
            how += f" in {self.seconds:.1f} s" if timed else ""
        moved = f"; {self.moved} moves took their records" if self.moved else ""
        if self.restamped:
            moved += (
                f"; {self.restamped} variants whose entry changed only for other tests keep theirs"
            )
        return f"op evidence for the {self.delta} variants decided again: {how}{moved}"


def delta(old_db: Path, new_db: Path) -> Delta:
    """The variants an upgrade from ``old_db`` to ``new_db`` decides again, and its
    moves (the diff ``select run --since`` reads)."""
    from ootest.memory import diff_indexes
    from ootest.select.gather import device_delta, from_memory

    diff = diff_indexes(old_db, new_db)
    dev = device_delta(new_db, diff)
    wanted = {*dev.entered, *(m.id for m in diff.modified)}
    wanted.update(new for _, new, reasons in dev.moved if reasons)
    fresh = {c.variant_id: c.fingerprint for c in from_memory(new_db, wanted)}
    plain = [(o, n) for o, n, reasons in dev.moved if not reasons]
    was = fingerprints(old_db, [o for o, _ in plain])
    now = fingerprints(new_db, [n for _, n in plain])
    moves = [(o, n, was.get(o, ""), now.get(n, "")) for o, n in plain]
    moves += [(o, n, "", "") for o, n, reasons in dev.moved if reasons]
    files = _files(new_db, {v.partition("::")[0] for v in fresh})
    return Delta(fresh, moves, files, new_db, list(diff.unreached))


def fingerprints(memory: Path, only: Iterable[str] | None = None) -> dict[str, str]:
    """Each variant's fingerprint in ``memory`` (Note [Evidence of which code])."""
    import sqlite3

    if not memory.is_file():
        raise UserError(f"--memory {memory}: no such index; build it with 'ootest index build'")
    con = sqlite3.connect(f"file:{memory}?mode=ro", uri=True)
    try:
        if only is None:
            return {str(v): str(f) for v, f in con.execute("SELECT id, fingerprint FROM variants")}
        ids = sorted(set(only))
        out: dict[str, str] = {}
        for k in range(0, len(ids), 900):
            part = ids[k : k + 900]
            marks = ",".join("?" * len(part))
            rows = con.execute(f"SELECT id, fingerprint FROM variants WHERE id IN ({marks})", part)
            out.update((str(v), str(f)) for v, f in rows)
        return out
    except sqlite3.Error as e:
        raise UserError(
            f"--memory {memory}: expected an ootest memory index; reading it failed: {e}"
        ) from None
    finally:
        con.close()


def _files(memory: Path, keys: set[str]) -> dict[str, Path]:
    """The test file of each file key, as the memory found it."""
    con = sqlite3.connect(f"file:{memory}?mode=ro", uri=True)
    try:
        ks = sorted(keys)
        out: dict[str, Path] = {}
        for k in range(0, len(ks), 900):
            part = ks[k : k + 900]
            marks = ",".join("?" * len(part))
            for key, path in con.execute(
                f"SELECT key, path FROM files WHERE key IN ({marks})", part
            ):
                out[str(key)] = Path(str(path))
        return out
    finally:
        con.close()


def fresh_ops(
    team: Path,
    out: Path,
    d: Delta,
    *,
    capture: bool = True,
    device: str = REFERENCE,
    timeout: float = 300.0,
    capturer: Capturer | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Fresh:
    """The op map ``out``: a copy of ``team`` with the delta's evidence made fresh
    (Note [Fresh evidence for the delta]); ``team`` is only read."""
    from ootest.opmap.store import OpStore

    started = time.perf_counter()
    if out.resolve() == team.resolve():
        raise UserError(f"{out}: the delta's op map must not be the team's op map {team}")
    for p in (out, out.with_name(out.name + "-wal"), out.with_name(out.name + "-shm")):
        p.unlink(missing_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with OpStore.open(team) as src:
        dst = sqlite3.connect(out)
        try:
            src.connection.backup(dst)
        finally:
            dst.close()
    with OpStore.open(out, create=True) as store:  # an older schema is upgraded here
        moved = follow(store, d.moves)
        restamped = restamp(store, d.restamp)
        recorded = store.codes(d.fresh)
    need = {v: fp for v, fp in d.fresh.items() if fp and fp not in recorded.get(v, ())}
    fresh = Fresh(out, len(d.fresh), len(need), 0, moved, 0.0, device if capture else None)
    fresh.restamped = restamped
    if capture and need:
        files = sorted({d.files[f] for v in need if (f := v.partition("::")[0]) in d.files})
        only = out.with_name(out.name + ".only.txt")
        # beside a file the user named: never written through a link planted there
        write_atomic(only, "".join(f"{v}\n" for v in sorted(need)))
        say(f"  capturing the {len(need)} variants decided again ({len(files)} files) on {device}")
        if files:
            (capturer or capture_variants)(
                out, files, only, need, memory=d.memory, device=device, timeout=timeout, say=say
            )
        with OpStore.open(out) as store:
            got = store.codes(need)
        fresh.captured = sum(1 for v, fp in need.items() if fp in got.get(v, ()))
    fresh.seconds = time.perf_counter() - started
    return fresh


def restamp(store: OpStore, rows: Sequence[tuple[str, str, str]]) -> int:
    """Stamp the records of each (ID, old fingerprint, new fingerprint) captured
    from the old fingerprint with the new one: the same code (Note [Entry changes
    that do not reach a variant]). Returns how many variants had such records."""
    if not rows or not store.has_code:
        return 0
    c = store.connection
    ids: dict[str, int] = {}
    wanted = sorted({v for v, _, _ in rows})
    for k in range(0, len(wanted), 900):
        part = wanted[k : k + 900]
        marks = ",".join("?" * len(part))
        query = f"SELECT id, variant_id FROM variant WHERE variant_id IN ({marks})"
        ids.update((str(v), int(i)) for i, v in c.execute(query, part))
    done = 0
    c.execute("BEGIN IMMEDIATE")
    try:
        for vid, was, now in rows:
            i = ids.get(vid)
            if i is None or not was or not now or was == now:
                continue
            cur = c.execute(
                "UPDATE variant_capture SET code = ? WHERE variant = ? AND code = ?", (now, i, was)
            )
            done += cur.rowcount > 0
    except BaseException:
        c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    return done


def follow(store: OpStore, moves: Sequence[tuple[str, str, str, str]]) -> int:
    """Copy each moved variant's records under its new ID (Note [Fresh evidence for
    the delta], step 2); a new ID the index already holds keeps its own. Returns
    how many moves took records."""
    from ootest.opmap.ingest import refresh_postings

    c = store.connection
    ids = {str(v): int(i) for i, v in c.execute("SELECT id, variant_id FROM variant")}
    done = 0
    ops: set[int] = set()
    c.execute("BEGIN IMMEDIATE")
    try:
        for old, new, was, now in moves:
            o = ids.get(old)
            if o is None or new in ids:
                continue
            cur = c.execute(
                "INSERT INTO variant(variant_id, nodeid, file, device_branch, varies, partial, "
                "why) SELECT ?, NULL, ?, device_branch, varies, partial, why FROM variant "
                "WHERE id = ?",
                (new, new.partition("::")[0], o),
            )
            n = int(cur.lastrowid or 0)
            ids[new] = n
            c.execute(
                "INSERT INTO edge(variant, op, mode, calls) "
                "SELECT ?, op, mode, calls FROM edge WHERE variant = ?",
                (n, o),
            )
            c.execute(
                "INSERT INTO call_sig(variant, op, sig) SELECT ?, op, sig FROM call_sig "
                "WHERE variant = ?",
                (n, o),
            )
            c.execute(
                "INSERT INTO call_example(variant, example) SELECT ?, example FROM call_example "
                "WHERE variant = ?",
                (n, o),
            )
            # the same code under another name: a record of the old code is of the new
            c.execute(
                "INSERT INTO variant_capture(variant, capture, n_ops, opset, outcome, "
                "stopped_on, error, device_branch, code) SELECT ?, capture, n_ops, opset, "
                "outcome, stopped_on, error, device_branch, "
                "CASE WHEN ? != '' AND code = ? THEN ? ELSE code END "
                "FROM variant_capture WHERE variant = ?",
                (n, was, was, now, o),
            )
            ops.update(int(r[0]) for r in c.execute("SELECT op FROM edge WHERE variant = ?", (n,)))
            done += 1
        refresh_postings(c, ops)
    except BaseException:
        c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    return done
