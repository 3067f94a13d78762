"""Re-deciding part of a selected config: an upgrade, an enabled op.

Note [Incremental selection]
Two changes re-decide only the variants they can affect, and land as a diff of
the config (Note [Config patches] says how it is edited):

- **an upgrade** (``select run --since OLD.db --memory NEW.db --config S``):
  the repository memory diff (``ootest index diff``) names the device variants
  added or modified (their fingerprint changed: body, decorator, helper,
  import, OpInfo/ModuleInfo entry) and removed. Only the added and modified are
  decided again, with the same evidence and rules as a full run, plus their
  history where it still holds (Note [History across changes]); a removed one
  leaves the sidecar and the names that named exactly it. A moved one (Note
  [Moves]: the same test under another name) is decided again under its new ID
  like any other (this run's scope, support and replay; the op map's calls of
  its old ID when it has none under the new one), with its history
  (``changed: ["moved"]``, or ``["moved", "decorator"]`` when something else
  changed too, and ``moved_from``), and is named where its mode needs a name. A
  person's entry that named it by its exact or template name names it by its
  new name (within its file) or is copied into the block of the file it moved
  to; a pattern is left as it is, and the run says so, for review. A variant a
  person's entry decides keeps its decision, but its line takes the new fingerprint and
  ``changed`` (``held``), and the run lists it. Everything else is
  kept as it was, byte for byte, sidecar lines included, and so are the
  variants of a file the new memory could not collect (Note [Files not
  collected]: not removed; the run says so in one line). With ``--replay`` (a
  new ``ootest ops replay``: a new backend build, a new capture), the variants
  whose replay evidence changes (faults, undeclared ops its calls cover or show
  only an error path of, calls presumed to crash) are decided again too
  (``changed: ["replay"]``); given the replay it is a new run of (the refresh's
  ``replay`` step), so is every variant with a call whose result differs between
  the two: a ``replay_failed`` skip comes back when its calls replay as on the
  CPU (Note [A known failure is re-checked by the replay]). A replay the
  config's header already names changes nothing and is not read. Pass the same memory twice
  (``--since M.db --memory M.db``) when only the backend changed.
- **an enabled op** (``select enable OP --ops DB --config S``): the variants
  whose evidence lists an op the new rule covers among their missing ops are
  the ones that waited on it; only they are decided again, with those ops
  removed from their missing ops (the rule is the op map's own, as ``ootest
  ops enable`` applies it).

Both keep what people decided (entries without the ``ootest-select`` tag), update
the header's provenance and decision counts, and write each re-decided variant's
new evidence line with ``changed`` saying why it was decided again.

Note [History across changes]
A variant's history (the results observed on the device, the CPU reference, the
judge's record) decides again after an upgrade only when no change can alter
whether or how it runs on the device: a plain move, an import (what the test
reaches of its imports is compared as its helpers), a new replay
(``KEEPS_HISTORY``). After a change of the test's body (``INVALIDATES``) it is
dropped (the line says ``dropped``: its runs were of other code). After any
other change (a decorator, the device flag, an OpInfo or ModuleInfo entry, a
helper; a variant that became a device variant, whose runs were on the CPU),
and when the new evidence has an upstream gate (``upstream_skip``) the old one
had not, it is kept in the line's ``history`` (``why``, ``observed``, ``cpu``,
``judge``) and decides nothing: runs made before ``@onlyCUDA`` was added never
override it, and the variant is decided from the rules until it runs again
(the refresh runs it; ``select refine`` writes lines without it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ootest.atomic import write_all
from ootest.errors import UserError
from ootest.select.gather import (
    Candidate,
    Sources,
    Support,
    device_delta,
    device_ids,
    from_memory,
    gather,
)
from ootest.select.patch import patch
from ootest.select.refine import decide_seen, iter_sidecar, read_sidecar, sidecar_path
from ootest.select.rules import Decision, Evidence, decide

#: The model judge as an upgrade asks it (Note [Model judge]): the re-decided
#: variants' candidates and rule decisions, and the variant IDs a citation may name
#: -> the decisions after it, and the sidecar's ``judge`` record per judged variant.
Judging = Callable[
    [list[Candidate], list[tuple[Evidence, Decision]], Collection[str]],
    tuple[list[tuple[Evidence, Decision]], dict[str, dict[str, Any]]],
]

_VID = re.compile(r'"variant_id": ("(?:[^"\\]|\\.)*")')
#: ``json.dumps(row, sort_keys=True)`` without building an encoder per line
_ENCODE = json.JSONEncoder(sort_keys=True).encode


@dataclass
class Outcome:
    """What an incremental change did; nothing is written until :meth:`write`."""

    config: Path
    out: Path
    new_text: str
    diff: str
    sidecar: _Sidecar
    evaluated: int
    total: int
    decisions: Counter[str] = field(default_factory=Counter)  # new decisions, by mode
    details: list[str] = field(default_factory=list)  # "3 added", "2 removed"...
    held: list[str] = field(default_factory=list)
    unplaceable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: variants decided again only because the replay judges their calls otherwise
    by_replay: int = 0

    def summary(self) -> str:
        head = f"evaluated {self.evaluated:,} of {self.total:,} variants"
        parts = [*self.details]
        if self.decisions:
            parts.append("now " + ", ".join(f"{n} {m}" for m, n in sorted(self.decisions.items())))
        return head + (f" ({'; '.join(parts)})" if parts else "")

    def write(self) -> None:
        from ootest.atomic import write_outputs

        try:  # both or neither
            write_outputs(
                [(self.out, self.new_text), (sidecar_path(self.out), self.sidecar.write_to)],
                "--out",
            )
        finally:
            self.sidecar.close()  # the old file may be the one replaced


# ------------------------------------------------------------------ the sidecar
class _Sidecar:
    """The evidence sidecar, mapped into memory and edited by variant ID.

    Every writer (``select run``, ``refine``, this module) writes one line per
    variant sorted by variant ID, so a line is found by binary search over byte
    offsets and only the lines a change touches are read: an upgrade touching 5%
    of 250,000 variants does not decode the other 95%. The first ``"variant_id"``
    and ``"mode"`` keys of a line are the decision's (the keys are sorted; quotes
    inside JSON strings are escaped). The file is mapped, not read: only the
    pages a search touches are loaded, and :meth:`write_to` copies the untouched
    stretches file to file in the kernel where it can (``copy_file_range``), so
    the 95% no change touches never pass through Python."""

    def __init__(self, config: Path) -> None:
        import mmap

        self.path = sidecar_path(config)
        self.data: bytes | mmap.mmap = b""
        try:
            with open(self.path, "rb") as fh:  # the map keeps its own descriptor
                if os.fstat(fh.fileno()).st_size:
                    self.data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise UserError(
                f"{self.path}: expected the evidence file 'ootest select run' wrote next to "
                f"{config.name}; cannot read it: {e.strerror or e}"
            ) from None
        self.edits: dict[str, bytes | None] = {}  # variant -> new line (None: gone)
        self._found: dict[str, tuple[bool, int, int]] = {}
        self._old: dict[str, tuple[bytes, str] | None] = {}
        self._totals: Counter[str] | None = None

    def _line(self, pos: int) -> tuple[int, int]:
        """(start, end) of the line holding byte ``pos`` (end: its newline)."""
        start = self.data.rfind(b"\n", 0, pos) + 1
        end = self.data.find(b"\n", pos)
        return start, len(self.data) if end < 0 else end

    def _field(self, start: int, end: int, key: bytes) -> str:
        i = self.data.find(key, start, end)
        if i < 0:
            n = self.data[:start].count(b"\n") + 1
            raise UserError(
                f"{self.path}:{n}: expected an evidence line written by 'ootest select run'; "
                f"found no {key.decode().split(':')[0]}"
            )
        i += len(key)
        raw = self.data[i : self.data.find(b'"', i, end)]
        if raw.endswith(b"\\") or b"\\" in raw:  # an escape: decode the string properly
            m = _VID.match(self.data[i - len(key) : end].decode("utf-8"))
            return str(json.loads(m[1])) if m else raw.decode("utf-8", "replace")
        return raw.decode("utf-8")

    def vid(self, start: int, end: int) -> str:
        return self._field(start, end, b'"variant_id": "')

    def mode(self, start: int, end: int) -> str:
        return self._field(start, end, b'"mode": "')

    def locate(self, vid: str, lo: int = 0) -> tuple[bool, int, int]:
        """(found, start, end) of ``vid``'s line at or after byte ``lo`` (a line
        start); not found: start = end = where its line belongs. Galloping from
        ``lo``: the next of a sorted run of changed variants is usually a few lines
        on, so it costs a few probes, not a full binary search."""
        hi, step = len(self.data), 1024
        while lo < hi:  # gallop: the first probe past vid bounds the search
            start, end = self._line(min(lo + step, hi - 1))
            if start <= lo:
                break
            here = self.vid(start, end)
            if here == vid:
                return True, start, end
            if here < vid:
                lo, step = end + 1, step * 2
            else:
                hi = start
                break
        while lo < hi:
            start, end = self._line((lo + hi) // 2)
            here = self.vid(start, end)
            if here == vid:
                return True, start, end
            if here < vid:
                lo = end + 1
            else:
                hi = start
        return False, lo, lo

    def find(self, vid: str, lo: int = 0) -> tuple[bool, int, int]:
        """:meth:`locate`, remembered (the data never changes; edits are kept aside)."""
        hit = self._found.get(vid)
        if hit is None:
            hit = self._found[vid] = self.locate(vid, lo)
        return hit

    def rows_of(self, file: str) -> Counter[str]:
        """The modes of the rows of one file key, as the sidecar has them now: each
        mode's key counted over the file's stretch of lines (as :meth:`totals`
        counts), read line by line only when the counts do not add up to the lines."""
        from ootest.select.rules import MODES

        _, lo, _ = self.locate(file + "::")
        _, hi, _ = self.locate(file + ":;", lo)  # ':' + 1 is ';'
        chunk = self.data[lo:hi]  # a map has no count()
        counted = Counter(
            {m: n for m in MODES if (n := chunk.count(b'"mode": "' + m.encode() + b'"'))}
        )
        if sum(counted.values()) == chunk.count(b"\n"):
            return counted
        out: Counter[str] = Counter()
        pos = lo
        while pos < hi:
            start, end = self._line(pos)
            out[self.mode(start, end)] += 1
            pos = end + 1
        return out

    def _next_is(self, pos: int, vid: str) -> tuple[bool, int, int] | None:
        """``vid``'s line if it is the one starting at byte ``pos``, read as :meth:`vid`
        reads it (an ID JSON writes with escapes is left to :meth:`find`)."""
        if pos >= len(self.data) or vid in self._found:
            return None
        start, end = self._line(pos)
        at = self.data.find(b'"variant_id": "', start, end)
        raw = vid.encode("utf-8")
        if at < 0 or not raw.isascii() or b'"' in raw or b"\\" in raw:
            return None
        at += 15  # len('"variant_id": "')
        if self.data[at : at + len(raw) + 1] != raw + b'"':
            return None
        hit = self._found[vid] = (True, start, end)
        return hit

    def old(self, vids: Iterable[str]) -> dict[str, tuple[bytes, str]]:
        """The current line and mode of each of ``vids`` found (the next of a sorted
        run of changed variants is often on the line after the last one found)."""
        out: dict[str, tuple[bytes, str]] = {}
        lo, after = 0, len(self.data)
        for vid in sorted(vids):
            if vid not in self._old:  # asked twice by an upgrade: read once
                found, start, end = self._next_is(after, vid) or self.find(vid, lo)
                lo, after = start, (end + 1 if found else len(self.data))
                self._old[vid] = (self.data[start:end], self.mode(start, end)) if found else None
            hit = self._old[vid]
            if hit is not None:
                out[vid] = hit
        return out

    def totals(self) -> Counter[str]:
        """Decisions by mode (each line names its mode once as a key); counted once."""
        from ootest.select.rules import MODES

        if self._totals is None:
            self._totals = Counter(
                {m: n for m in MODES if (n := self.data[:].count(f'"mode": "{m}"'.encode()))}
            )
        return Counter(self._totals)

    def trust_totals(self, header: str) -> None:
        """Take the decision counts from the config's header (``# decisions: 3 skip,
        ...``, written with this sidecar) instead of counting 100 MB of lines."""
        from ootest.select.rules import MODES

        m = re.search(r"^# decisions: (.*)$", header, re.M)
        if m is None:
            return
        count: Counter[str] = Counter()
        for part in m[1].split(","):
            n, _, mode = part.strip().partition(" ")
            if not n.isdigit() or mode not in MODES:
                return
            count[mode] = int(n)
        self._totals = count

    def _pieces(self) -> Iterator[tuple[bytes | None, int, int]]:
        """The sidecar with the edits applied, in order: (new bytes, 0, 0) or (None,
        start, end) for a stretch of the old file kept as it is."""
        pos = lo = 0
        for vid in sorted(self.edits):
            found, start, end = self.find(vid, lo)
            lo = start
            if start > pos:
                yield None, pos, start
            new = self.edits[vid]
            if new is not None:
                yield new + b"\n", 0, 0
            pos = end + 1 if found else start
        if len(self.data) > pos:
            yield None, pos, len(self.data)

    def write_to(self, f: BinaryIO) -> None:
        """Write the edited sidecar to ``f`` (unbuffered, when it has a file
        descriptor: kept stretches are copied by the kernel into its position)."""
        with contextlib.ExitStack() as stack:
            src = dst = -1
            try:
                if hasattr(os, "copy_file_range") and self.data:
                    dst = f.fileno()
                    src = stack.enter_context(open(self.path, "rb")).fileno()
                    if os.fstat(src).st_size != len(self.data):  # replaced since: map only
                        dst = -1
            except (OSError, ValueError):  # io.BytesIO and the like
                dst = -1
            self._write(f, src, dst)

    def _write(self, f: BinaryIO, src: int, dst: int) -> None:
        new: list[bytes] = []
        for data, start, end in self._pieces():
            if data is not None:
                new.append(data)
                continue
            if new:
                write_all(f, b"".join(new))
                new = []
            while dst >= 0 and start < end:
                try:
                    n = os.copy_file_range(src, dst, end - start, start)
                except OSError:  # not on this file system: copy through Python
                    dst = -1
                    break
                if n == 0:
                    dst = -1
                    break
                start += n
            if start < end:
                write_all(f, self.data[start:end])
        if new:
            write_all(f, b"".join(new))

    def text(self) -> bytes:
        """The sidecar with the edits applied, as bytes."""
        import io

        out = io.BytesIO()
        self.write_to(out)
        return out.getvalue()

    def close(self) -> None:
        import mmap

        if isinstance(self.data, mmap.mmap):
            self.data.close()
        self.data = b""


def _row(
    ev: Evidence,
    d: Decision,
    fingerprint: str,
    changed: Iterable[str],
    more: Mapping[str, Any] | None = None,
) -> str:
    """The evidence line of a re-decided variant: what ``evidence_row`` writes (the
    same JSON, built without ``dataclasses.asdict``, which costs 20x), and why it
    was decided again."""
    evidence = dict(vars(ev))
    for key in ("cpu", "reference"):
        r = evidence[key]
        evidence[key] = dict(vars(r)) if r is not None else None
    evidence["observed"] = [dict(vars(r)) for r in ev.observed]
    if ev.replay:
        evidence["replay"] = [list(f) for f in ev.replay]
    else:
        del evidence["replay"]  # as evidence_row: only where a replay said something
    for key in (
        "replay_covered",
        "replay_dtypes",
        "replay_raised",
        "replay_presumed",
        "replay_error_only",
        "replay_no_kernel",
    ):
        if evidence[key]:
            evidence[key] = list(evidence[key])
        else:
            del evidence[key]
    row = {
        "changed": list(changed),
        "decision": dict(vars(d)),
        "evidence": evidence,
        "fingerprint": fingerprint,
        **(more or {}),
    }
    return _ENCODE(row)


def _renamed(line: bytes, vid: str) -> dict[str, Any]:
    """An evidence line read, its variant named ``vid`` (a moved variant's line)."""
    row: dict[str, Any] = json.loads(line)
    for part in (row, row.get("decision"), row.get("evidence")):
        if isinstance(part, dict) and "variant_id" in part:
            part["variant_id"] = vid
    return row


def _held(
    line: bytes,
    fingerprint: str,
    changed: Iterable[str],
    vid: str | None = None,
    more: Mapping[str, Any] | None = None,
) -> str:
    """The evidence line of a variant a person's entry decides, after a change: its
    decision and evidence as they were, the new fingerprint, and why it changed
    (``held``: a later upgrade compares with this fingerprint, not a stale one);
    ``vid``: the name it has now (a move); ``more``: keys to add (``moved_from``)."""
    row = json.loads(line) if vid is None else _renamed(line, vid)
    row.update(more or {})
    row["fingerprint"] = fingerprint
    row["changed"] = list(changed)
    row["held"] = "a person's entry decides it; decision and evidence as before the change"
    return _ENCODE(row)


_FILES = re.compile(r"^(\s*)files:[ \t]*(?:#.*)?$", re.M)


def _lists_no_file(text: str) -> bool:
    """Whether the config's ``files:`` (written as a block, as ``select run`` writes
    it) is left with no item: YAML's null, which the schema rejects."""
    m = _FILES.search(text, text.find("test_suite_config:") + 1)
    if m is None:
        return False
    for line in text[m.end() :].splitlines():
        body = line.strip()
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        return indent < len(m[1]) or (indent == len(m[1]) and not body.startswith("-"))
    return True


def _first(error: str, limit: int = 120) -> str:
    """An error's first line, at most ``limit`` characters."""
    line = error.strip().partition("\n")[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _read(config: Path) -> str:
    try:
        return config.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{config}: cannot read it: {e.strerror or e}") from None


def root_var(text: str) -> str:
    """The variable a generated config's paths start with (``${TORCH_ROOT}`` unless
    it names another), its ``path:`` quoted or not."""
    m = re.search(r"path: \"?\$\{(\w+)\}/", text)
    return m[1] if m else "TORCH_ROOT"


def _finish(
    config: Path,
    out: Path,
    side: _Sidecar,
    changes: Mapping[str, tuple[Evidence, Decision, str, tuple[str, ...]]],
    removed: set[str],
    universe: Mapping[str, Iterable[str]],
    provenance: Callable[[str], str],
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    origin: Mapping[str, str] | None = None,
) -> Outcome:
    """Patch the config and the sidecar (Note [Config patches]); the outcome without
    its counts. ``extra``: more keys for a variant's evidence line (``judge``);
    ``origin``: the old ID of each moved variant of ``changes`` (Note [Moves]), whose
    old ID is in ``removed``."""
    text = _read(config)
    side.trust_totals(text.split("test_suite_config:", 1)[0])
    origin = origin or {}
    decided = {vid: d for vid, (_, d, _, _) in changes.items()}
    files = {vid.partition("::")[0] for vid in [*changes, *removed]}
    old = side.old([*changes, *removed])

    def before(vid: str) -> tuple[bytes, str] | None:
        """The line and mode a variant had (a moved one: under its old ID)."""
        hit = old.get(vid)
        return hit if hit is not None or vid not in origin else old.get(origin[vid])

    def evidence_of(vids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """The decision evidence of kept variants (for an entry's comment)."""
        out: dict[str, tuple[str, ...]] = {}
        for vid, (line, _) in side.old(vids).items():
            try:
                out[vid] = tuple(json.loads(line)["decision"]["evidence"])
            except (ValueError, KeyError, TypeError):
                continue
        return out

    of_file: dict[str, list[str]] = defaultdict(list)
    for vid in [*changes, *removed]:
        of_file[vid.partition("::")[0]].append(vid)

    def modes(file: str, held: Collection[str]) -> Counter[str]:
        """The modes of a file's rows after the change (people's variants kept)."""
        count = side.rows_of(file)
        for vid in of_file[file]:
            if vid in held:
                if vid not in old and (was := before(vid)) is not None:
                    count[was[1]] += 1  # moved here: its old line, under its new ID
                continue
            if vid in old:
                count[old[vid][1]] -= 1
            if vid in changes:
                count[decided[vid].mode] += 1
        return +count

    patched = patch(
        text,
        decided,
        removed,
        {f: list(vs) for f, vs in universe.items() if f in files},
        modes,
        root_var(text),
        renames={o: n for n, o in origin.items()},
        evidence=evidence_of,
    )
    if _lists_no_file(patched.text):
        n = len(removed)
        raise UserError(
            f"{out}: every file of {config.name} left (its {n} variants were removed) and "
            "the config would list no file, which 'ootest config validate' rejects; nothing "
            "written. Check --memory (a memory of another tree?), or decide the new tree "
            "with a full 'ootest select run'"
        )
    held = set(patched.held) | {v for v in changes if v.partition("::")[0] in patched.unplaceable}
    total = side.totals()
    for vid in removed:
        side.edits[vid] = None
        if vid in old:
            total[old[vid][1]] -= 1
    for vid, (ev, d, fp, why) in changes.items():
        if vid in held:  # a person decides it: its decision and evidence stay as they were
            was = before(vid)
            if was is not None:  # but the line takes the new fingerprint, and says why
                line = _held(was[0], fp, why, vid, (extra or {}).get(vid))
                side.edits[vid] = line.encode("utf-8")
                if vid not in old:  # moved: its old line left with its old ID
                    total[was[1]] += 1
            continue
        side.edits[vid] = _row(ev, d, fp, why, (extra or {}).get(vid)).encode("utf-8")
        if vid in old:
            total[old[vid][1]] -= 1
        total[d.mode] += 1
    total = +total

    def header(line: str) -> str:
        if line.startswith("# decisions:"):
            return "# decisions: " + ", ".join(f"{n} {m}" for m, n in sorted(total.items()))
        return provenance(line)

    patched.header(header)
    o = Outcome(
        config,
        out,
        patched.text,
        patched.diff(f"a/{config}", f"b/{out}"),
        side,
        0,
        0,
    )
    o.decisions = Counter(d.mode for vid, d in decided.items() if vid not in held)
    o.held, o.unplaceable = sorted(patched.held), patched.unplaceable
    if patched.notes:
        o.notes.append("a person's entry decided these moved variants; it cannot follow them:")
        o.notes += patched.notes
    if o.held:
        o.notes.append(
            f"{len(o.held)} kept as people's entries decide them (their evidence lines "
            "take the new fingerprint); review them:"
        )
        o.notes += [f"  {vid} ({', '.join(changes[vid][3])})" for vid in o.held if vid in changes]
    if o.unplaceable:
        o.notes.append(
            f"files listed only by a glob path, decide them by hand: {', '.join(o.unplaceable)}"
        )
    return o


# ------------------------------------------------------------------ an upgrade
def upgrade(
    old_db: Path,
    config: Path,
    out: Path,
    sources: Sources,
    support: Support,
    scope: Container[str] | None,
    provenance: Callable[[str], str],
    judge: Judging | None = None,
    replay_before: Path | None = None,
) -> Outcome:
    """Re-decide what the memory diff from ``old_db`` to ``sources.memory`` reports
    added or modified (Note [Incremental selection]); ``judge``: the model judge
    for what the rules leave open among them; ``replay_before``: the replay
    ``sources.replay`` is a new run of (the refresh's), whose changed rows name
    variants to decide again too."""
    from ootest.memory import diff_indexes

    new_db = sources.memory
    if new_db is None:
        raise UserError("--since: expected --memory NEW.db, the memory to compare it with")
    if not old_db.is_file():
        raise UserError(
            f"--since {old_db}: no such index; pass the memory the config was decided from"
        )
    side = _Sidecar(config)
    diff = diff_indexes(old_db, new_db)
    dev = device_delta(new_db, diff)
    entered, removed = set(dev.entered), set(dev.left)
    why: dict[str, tuple[str, ...]] = {v: ("added",) for v in diff.added if v in entered}
    why.update((v, ("now a device variant",)) for v in entered if v not in why)
    why.update((m.id, m.reasons) for m in diff.modified)  # not selectable ones go (below)
    # Note [Moves]: the old ID leaves (its line and the names naming exactly it), the
    # new one takes its decision, or is decided again when something else changed
    origin = {new: old for old, new, _ in dev.moved}
    gone = set(removed)  # removed, not moved
    removed |= set(origin.values())
    for _, new, reasons in dev.moved:  # re-checked like any other; its history travels
        why[new] = ("moved", *reasons)
    if sources.replay is not None and sources.ops is not None:
        renamed = {o: n for n, o in origin.items()}
        for v in _replay_moved(config, sources, replay_before):
            v = renamed.get(v, v)
            if v in origin and "replay" not in why[v]:
                why[v] = (*why[v], "replay")
            why.setdefault(v, ("replay",))
    cands = from_memory(new_db, why)
    fps = {c.variant_id: c.fingerprint for c in cands}
    why = {c.variant_id: why[c.variant_id] for c in cands if c.variant_id in why}
    # Note [Evidence of which code]: a record of unknown origin is stale for what changed
    changed = frozenset(v for v, r in why.items() if set(r) - {"moved", "replay"})
    sources = dataclasses.replace(sources, changed=changed)
    evidence = gather(cands, sources, support, scope, origin)
    universe = device_ids(new_db, {v.partition("::")[0] for v in [*why, *removed]})
    kept, priors, dropped, history = _carry(side, evidence, why, origin)
    decided = []
    for ev in evidence:
        d = decide_seen(ev)
        prior = priors.get(ev.variant_id)
        if prior is not None and d.reason == "no_evidence" and not ev.observed:
            d = prior  # the judge's accepted proposal stands, as in refine
        decided.append((ev, d))
    extra: dict[str, dict[str, Any]] = {}
    if judge is not None:  # a citation may name a variant of the files touched
        decided, extra = judge(cands, decided, {v for vs in universe.values() for v in vs})
    for vid, more in kept.items():
        extra[vid] = {**more, **extra.get(vid, {})}  # a new judge record wins
    changes = {ev.variant_id: (ev, d, fps[ev.variant_id], why[ev.variant_id]) for ev, d in decided}
    for new, old in origin.items():
        if new in changes:
            extra[new] = {**extra.get(new, {}), "moved_from": old}
    side.trust_totals(_read(config).split("test_suite_config:", 1)[0])
    rows_before = sum(side.totals().values())
    known = len(side.old([*removed, *why]))  # rows of variants that left or changed
    o = _finish(config, out, side, changes, removed, universe, provenance, extra, origin)
    o.evaluated, o.total = len(evidence), dev.total
    n_added = sum(1 for v in why.values() if v in (("added",), ("now a device variant",)))
    n_replay = sum(1 for v in why.values() if v == ("replay",))
    n_moved = sum(1 for n in origin if n in changes)
    n_modified = len(changes) - n_added - n_replay - n_moved
    o.details = [f"{n_added} added", f"{n_modified} modified"]
    if n_moved:
        other = sum(1 for n in origin if n in changes and why[n] != ("moved",))
        o.details.append(f"{n_moved} moved" + (f" ({other} changed otherwise)" if other else ""))
    if sources.replay is not None:
        o.details.append(f"{n_replay} by the replay")
    o.details.append(f"{len(gone)} removed")
    o.by_replay = n_replay
    skipping = len(re.findall(r"^\s*unlisted_test_mode: *skip\b", o.new_text, re.M))
    if skipping:
        o.notes.append(
            f"{skipping} file blocks skip what they do not list (unlisted_test_mode: skip): "
            "a variant added upstream is skipped undecided there; set it to xfail (as "
            "select run writes it) or rewrite the config with select refine"
        )
    if dropped:
        o.notes.append(
            f"{dropped} re-decided variants lost their observed results: the test body "
            "changed (the next run gives new ones)"
        )
    if history:
        o.notes.append(
            f"{history} re-decided variants keep their observed results as history only: "
            "a change (decorator, device flag, OpInfo entry, helper) can alter whether or "
            "how they run on the device, so those results decide nothing until they run again"
        )
    if diff.not_collected:  # Note [Files not collected]
        files = sorted(diff.not_collected)
        shown = ", ".join(f"{f} ({_first(diff.not_collected[f])})" for f in files[:3])
        rest = f" and {len(files) - 3} more" if len(files) > 3 else ""
        o.notes.append(
            f"not collected: {shown}{rest}: {len(diff.uncollected)} variants keep their "
            "decisions and history until their files collect again"
        )
    # the variants of files not collected keep their rows, the new memory has none
    rows_before -= len(side.old(diff.uncollected))
    unknown = dev.total - (rows_before - known) - len(why)
    if unknown > 0:
        o.notes.append(
            f"at least {unknown} variants of {new_db} have no decision in {config.name} and "
            "did not change: decide them with a full 'ootest select run'"
        )
    return o


#: Changes after which a variant's earlier runs say nothing about it (Note
#: [Incremental selection]): its own code is other code now.
INVALIDATES = ("body",)
#: Changes that cannot alter whether or how a variant runs on the device (Note
#: [History across changes]): its history decides as before.
KEEPS_HISTORY = ("moved", "import", "replay", "added")


def _carry(
    side: _Sidecar,
    evidence: list[Evidence],
    why: Mapping[str, tuple[str, ...]],
    origin: Mapping[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Decision], int, int]:
    """Carry each re-decided variant's history from its old evidence line into its
    new evidence (in place), Note [History across changes]: the results observed
    on the device, the CPU reference and the judge's record decide again only when
    every change is one of ``KEEPS_HISTORY``; after a change in ``INVALIDATES`` they
    are dropped; after any other they are kept in the line's ``history`` and decide
    nothing. Returns the extra keys per variant for its line (``judge``,
    ``history``, or ``dropped``), the judge's accepted decisions, and how many
    variants had results dropped and kept as history only. ``origin``: a moved
    variant's old ID, under which its history was recorded (Note [Moves])."""
    from ootest.select.rules import Result

    origin = origin or {}
    old = side.old([origin.get(ev.variant_id, ev.variant_id) for ev in evidence])
    extra: dict[str, dict[str, Any]] = {}
    priors: dict[str, Decision] = {}
    dropped = demoted = 0
    for ev in evidence:
        hit = old.get(origin.get(ev.variant_id, ev.variant_id))
        if hit is None:
            continue
        try:
            row = json.loads(hit[0])
            raw = row.get("evidence") or {}
            seen = [Result(**r) for r in raw.get("observed") or ()]
            cpu = Result(**raw["cpu"]) if raw.get("cpu") else None
            d = row.get("decision") or {}
            before = row.get("history")
            if before is not None and not isinstance(before, dict):
                before = None
        except (ValueError, TypeError):
            continue  # an unreadable line: nothing to carry
        changes = why.get(ev.variant_id, ())
        stale = [c for c in changes if c.partition(":")[0] in INVALIDATES]
        if stale:
            if seen or cpu is not None:
                what = f"{len(seen)} observed results" + (" and the CPU reference" if cpu else "")
                extra[ev.variant_id] = {"dropped": f"{what}: the test {stale[0]} changed"}
                dropped += 1
            continue
        other = [c for c in changes if c.partition(":")[0] not in KEEPS_HISTORY]
        whys = [f"the test's {', '.join(other)} changed"] if other else []
        if ev.upstream_skip and not raw.get("upstream_skip"):
            # a gate added since never loses to earlier runs (one there before, its
            # text naming another class after a move, is the gate those runs passed)
            whys.append(f"an upstream gate was added ({ev.upstream_skip})")
        if whys:  # kept to read, deciding nothing until the variant runs again
            if seen or cpu is not None or "judge" in row or before:
                kept: dict[str, Any] = {"why": "; ".join(whys)}
                if seen:
                    kept["observed"] = [dict(vars(r)) for r in seen]
                if cpu is not None:
                    kept["cpu"] = dict(vars(cpu))
                if "judge" in row:
                    kept["judge"] = row["judge"]
                if before:
                    kept["before"] = before
                extra[ev.variant_id] = {"history": kept}
                demoted += 1
            continue
        at = {r.at for r in ev.observed if r.at is not None}
        ev.observed = [r for r in seen if r.at is None or r.at not in at] + ev.observed
        if ev.cpu is None:
            ev.cpu = cpu
        more: dict[str, Any] = {}
        if "judge" in row:
            more["judge"] = row["judge"]
        if before:
            more["history"] = before
        if more:
            extra[ev.variant_id] = more
        if d.get("source") == "model":
            priors[ev.variant_id] = Decision(
                ev.variant_id, d["mode"], d["reason"], tuple(d.get("evidence") or ()), "model"
            )
    return extra, priors, dropped, demoted


def _replay_moved(config: Path, sources: Sources, before: Path | None = None) -> set[str]:
    """The variants whose replay evidence the replay file changes (Note [Incremental
    selection]): none when it is the replay the config names in its header.
    ``before``: the replay this one is a new run of; a variant of the config with a
    call whose result differs between the two is decided again too, whatever its
    evidence says (a ``replay_failed`` skip whose call now replays as on the CPU
    comes back: Note [A known failure is re-checked by the replay])."""
    from ootest.select.gather import Replayed, replayed
    from ootest.select.writer import REPLAY_LINE, file_digest

    assert sources.ops is not None and sources.replay is not None
    head = _read(config).split("test_suite_config:", 1)[0]
    if f"# {REPLAY_LINE}{file_digest(sources.replay)}\n" in head:
        return set()
    rows = _rows_changed(sources.ops, before, sources.replay) if before is not None else set()
    if before is not None and f"# {REPLAY_LINE}{file_digest(before)}\n" in head:
        # the config's replay evidence is of ``before``: only a variant with a call
        # whose row changed can have other evidence now (those whose op-map records
        # changed are decided again as the delta); not every variant read again
        return rows
    got = replayed(sources.ops, sources.replay)
    moved: set[str] = set()
    for ev, _d, _fp in iter_sidecar(sidecar_path(config)):
        vid = ev.variant_id
        if vid in rows:
            moved.add(vid)
            continue
        rp = got.get(vid, Replayed())
        undeclared = sorted({*ev.missing_ops, *ev.replay_covered, *ev.replay_error_only})
        # as gather lifts them: an error path met only by another exception class
        # (a missing kernel's) is neither missing nor supported
        covered = [o for o in undeclared if o in rp.ops and o not in rp.by_class]
        error_only = [o for o in undeclared if o in rp.ops and o in rp.by_class]
        if (
            ev.replay != rp.faults
            or sorted(ev.replay_covered) != covered
            or sorted(ev.replay_error_only) != error_only
        ):
            moved.add(vid)
        if ev.replay_presumed != tuple(f"{op} {status}" for status, op in rp.presumed):
            moved.add(vid)  # a call presumed to crash now ran, or the other way round
        if set(ev.replay_no_kernel) != {o for o in (ev.ops or ()) if o in rp.no_kernel} - set(
            ev.missing_ops
        ):
            moved.add(vid)  # a kernel a cross-device call lacked is there now, or gone
        # an undeclared dtype the replay now lifts, or no longer does (its calls
        # written down in that dtype: all working, or not)
        for d in {*ev.missing_dtypes, *ev.replay_dtypes}:
            calls = [c for c in rp.seen if c[1] == d]
            if calls and all(c in rp.pairs for c in calls) != (d in ev.replay_dtypes):
                moved.add(vid)
    return moved


#: what of a replayed call's result is not evidence: its timing
_UNTIMED = ("seconds",)


def _rows_changed(ops: Path, before: Path, after: Path) -> set[str]:
    """The variants of the op map ``ops`` with a recorded call whose result differs
    between the replays ``before`` and ``after`` (a result one of them lacks
    included; its timing aside)."""
    from ootest.opmap.replay import read_replay
    from ootest.opmap.store import OpStore

    old, new = read_replay(before).results, read_replay(after).results

    def bare(rec: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if rec is None else {k: v for k, v in rec.items() if k not in _UNTIMED}

    keys = {k for k in old.keys() | new.keys() if bare(old.get(k)) != bare(new.get(k))}
    if not keys:
        return set()
    with OpStore.open(ops) as store:
        calls = store.example_keys()
    return {vid for vid, ks in calls.items() if not keys.isdisjoint(ks)}


# ------------------------------------------------------------------ an enabled op
def enable_op(op: str, ops_db: Path, config: Path, out: Path) -> tuple[Outcome, str]:
    """Re-decide the variants that waited on ``op`` (Note [Incremental selection]);
    returns the outcome and the rule as a support list writes it."""
    from ootest.opmap.enable import config_name
    from ootest.opmap.names import SupportSet
    from ootest.opmap.store import OpStore

    if not ops_db.is_file():
        raise UserError(f"--ops {ops_db}: no such op map; build it with 'ootest ops capture'")
    with OpStore.open(ops_db) as store:
        parsed, _ = store.resolve_ops(op)
    name = config_name(parsed)
    rule = SupportSet.from_names([str(parsed)], name)
    side = _Sidecar(config)
    changes: dict[str, tuple[Evidence, Decision, str, tuple[str, ...]]] = {}
    still = 0
    rows = read_sidecar(sidecar_path(config))
    for ev, _d, fp in rows:
        if not any(rule.covers(o) for o in ev.missing_ops):
            continue
        ev.missing_ops = tuple(o for o in ev.missing_ops if not rule.covers(o))
        still += bool(ev.missing_ops)
        changes[ev.variant_id] = (ev, decide(ev), fp, (f"enabled:{name}",))
    universe: dict[str, list[str]] = defaultdict(list)
    touched = {v.partition("::")[0] for v in changes}
    for ev, _d, _fp in rows:
        if ev.variant_id.partition("::")[0] in touched:
            universe[ev.variant_id.partition("::")[0]].append(ev.variant_id)

    def provenance(line: str) -> str:
        m = re.match(r"^# backend: (.*?); ootest", line)
        if m is None or not changes:
            return line
        return f"# backend: {m[1]} + {name}{line[m.end(1) :]}"

    o = _finish(config, out, side, changes, set(), universe, provenance)
    o.evaluated, o.total = len(changes), len(rows)
    o.details = [f"the variants waiting on {name}"]
    if still:
        o.notes.append(f"{still} of them still miss other ops")
    if not changes:
        o.notes.append(
            f"no variant of {config.name} waited on {name}: nothing changes "
            "(its evidence lists no missing op the rule covers)"
        )
    return o, name
