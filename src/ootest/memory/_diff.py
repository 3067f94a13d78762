"""``ootest index diff OLD NEW``: which variants were added, removed, moved or
modified, and why.

A variant is modified when its fingerprint differs; its reasons are the
fingerprint components that differ (see Note [Variant fingerprints]):
``body``, ``decorator``, ``import``, ``helper:<symbol>``, ``opinfo:<name>``,
``moduleinfo:<name>``; and ``device`` when its device flag flipped (its class
became, or stopped being, device-generic, or the collection's device flag
changed): it still exists, under the same ID, and is modified, never removed.
A removed variant that is an added one under another name is ``moved`` (Note
[Moves]). Both indexes are opened read-only.

Note [Files not collected]
A test file the new index holds but could not collect (its collection failed:
an import error; or it does not parse) has no variants there, yet nothing says
its tests are gone: upstream's next commit, or a missing dependency installed,
brings them back. Its old variants are therefore not ``removed`` (nor paired as
moves) but ``uncollected``, with the file's error in ``not_collected``; ``select
run --since`` keeps their decisions, names and history as they were and says so
in one line (Note [Incremental selection]).

Note [Entry changes that do not reach a variant]
An ``@ops`` variant's fingerprint counts its entry's (Note [Device-limited
entry fingerprints]), skips and DecorateInfos for every class and test
included. When the entry is the only component that changed, the diff looks
closer (Note [Test-limited entry fingerprints]): the entry without its skips and
DecorateInfos (``test_base``), plus those that can reach this variant (its
generic class, template test, the indexed device type and its dtype, as torch's
``DecorateInfo.is_active`` matches them). When that is the same on both sides,
what changed is a skip or decorator of another test: the variant is not
modified but ``unreached`` (old and new fingerprint), so an upgrade neither
decides it again nor loses its history, and its op-map records, stamped with the
old fingerprint, are of the new one (``select.fresh``). An index built before
``entry_bases`` existed cannot tell: its variants stay modified.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.memory._fingerprint import (
    REASON_KINDS,
    reason_kind,
    reasons,
    variant_components,
)
from ootest.memory._hashing import digest
from ootest.memory._ids import file_of, template_of
from ootest.memory._moves import Moved, find_moves
from ootest.memory._store import chunks, connect, read_meta


@dataclass(frozen=True)
class Modified:
    id: str
    reasons: tuple[str, ...]


@dataclass
class IndexDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    modified: list[Modified] = field(default_factory=list)
    #: removed variants that are added ones under another name (Note [Moves]); in
    #: neither ``added`` nor ``removed``
    moved: list[Moved] = field(default_factory=list)
    old_total: int = 0
    new_total: int = 0
    #: The device flag (``device_variant``) of each variant added and moved (in the
    #: new index) and removed and moved away (in the old one), and (ID, flag now) of
    #: the variants in both whose flag flipped (each also modified, ``device``):
    #: found in the same passes, for ``select run --since``.
    device: dict[str, bool] = field(default_factory=dict, repr=False, compare=False)
    flipped: list[tuple[str, bool]] = field(default_factory=list, repr=False, compare=False)
    #: Note [Files not collected]: file -> why the new index has no variants of it
    #: (it does not parse, or its collection failed), and the old variants of those
    #: files, in neither ``removed`` nor ``moved``
    not_collected: dict[str, str] = field(default_factory=dict)
    uncollected: list[str] = field(default_factory=list)
    #: Note [Entry changes that do not reach a variant]: (ID, old fingerprint, new
    #: fingerprint) of the variants whose entry changed only where it does not
    #: reach them; in none of the lists above
    unreached: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Variants in either index (those of files not collected once)."""
        return self.new_total + len(self.removed) + len(self.uncollected)

    @property
    def changed(self) -> int:
        return len(self.added) + len(self.removed) + len(self.modified) + len(self.moved)

    def counts(self) -> Counter[str]:
        """Modified variants per reason kind (a variant counts once per kind), plus
        ``added`` and ``removed``."""
        c: Counter[str] = Counter()
        for m in self.modified:
            c.update({reason_kind(r) for r in m.reasons})
        if self.added:
            c["added"] = len(self.added)
        if self.removed:
            c["removed"] = len(self.removed)
        if self.moved:
            c["moved"] = len(self.moved)
        return c

    def summary(self) -> str:
        """``2,140 of 31,870 variants changed: 1,702 opinfo, 311 body, 98 added``."""
        head = f"{self.changed:,} of {self.total:,} variants changed"
        counts = self.counts()
        if self.not_collected:
            n = len(self.not_collected)
            head += (
                f" ({len(self.uncollected):,} in {n} file{'s' if n > 1 else ''} not "
                "collected, kept as they were)"
            )
        if self.unreached:
            head += (
                f" ({len(self.unreached):,} more whose entry changed only in skips or "
                "decorators of other tests: unchanged for them)"
            )
        if not counts:
            return head
        # "fingerprint": the digest changed and no component says why (another scheme)
        order = [*REASON_KINDS, "fingerprint", "added", "moved", "removed"]
        rank = {kind: i for i, kind in enumerate(order)}
        parts = sorted(counts.items(), key=lambda kv: (-kv[1], rank.get(kv[0], len(order)), kv[0]))
        return head + ": " + ", ".join(f"{n:,} {kind}" for kind, n in parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "old_total": self.old_total,
            "new_total": self.new_total,
            "counts": dict(sorted(self.counts().items())),
            "added": self.added,
            "removed": self.removed,
            "modified": [{"id": m.id, "reasons": list(m.reasons)} for m in self.modified],
            "moved": [{"old": m.old, "new": m.new, "reasons": list(m.reasons)} for m in self.moved],
            "not_collected": dict(sorted(self.not_collected.items())),
            "uncollected": self.uncollected,
            "unreached": [v for v, _, _ in self.unreached],
        }


def diff_indexes(old: Path, new: Path) -> IndexDiff:
    o = connect(old, readonly=True)
    n = connect(new, readonly=True)
    try:
        so, sn = read_meta(o).get("scheme"), read_meta(n).get("scheme")
        if so != sn:
            raise UserError(
                f"{old} uses fingerprint scheme {so}, {new} scheme {sn}: their "
                "fingerprints are not comparable (every variant would differ); build both "
                "with the same ootest, the older one into a new file"
            )
        # the old index joins the new one's connection: SQLite compares the variant
        # tables by key, and only the rows that differ reach Python (an upgrade of
        # 250,000 variants changing 12,500 reads 12,500 rows, not 500,000)
        n.execute("ATTACH DATABASE ? AS old", (_ro_uri(old),))
        try:
            return _diff(o, n)
        finally:
            n.execute("DETACH DATABASE old")
    finally:
        o.close()
        n.close()


def _ro_uri(path: Path) -> str:
    return f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"


def _diff(o: sqlite3.Connection, n: sqlite3.Connection) -> IndexDiff:
    """``n`` has the old index attached as ``old``; ``o`` is the old index itself."""
    count = "SELECT count(*) FROM {}.variants"
    d = IndexDiff(
        old_total=int(n.execute(count.format("old")).fetchone()[0]),
        new_total=int(n.execute(count.format("main")).fetchone()[0]),
    )
    # added, modified and device flags flipped in one pass over the new table (each
    # further pass cost as much)
    rows: list[tuple[Any, ...]] = []
    for r in n.execute(
        "SELECT m.id, v.id IS NULL, v.fingerprint != m.fingerprint, m.device_variant, "
        "v.device_variant, v.op, v.module, v.entry_fp, m.op, m.module, m.entry_fp, "
        "m.cls, m.dtypes, v.fingerprint, m.fingerprint "
        "FROM main.variants m LEFT JOIN old.variants v ON v.id = m.id "
        "WHERE v.id IS NULL OR v.fingerprint != m.fingerprint "
        "OR v.device_variant != m.device_variant ORDER BY m.id"
    ):
        vid = str(r[0])
        if r[1]:
            d.added.append(vid)
            d.device[vid] = bool(r[3])
            continue
        if r[3] != r[4]:
            d.flipped.append((vid, bool(r[3])))
        rows.append((vid, bool(r[2]), r[3] != r[4], *r[5:]))
    # each ID is a key: the old variants matched are the new ones not added, so the
    # old table is scanned for removed ones only when some are
    if d.old_total != d.new_total - len(d.added):
        for vid, device in n.execute(
            "SELECT id, device_variant FROM old.variants "
            "WHERE id NOT IN (SELECT id FROM main.variants) ORDER BY id"
        ):
            d.removed.append(str(vid))
            d.device[str(vid)] = bool(device)
    if d.removed:  # Note [Files not collected]: their variants stay
        d.not_collected = _not_collected(n, {file_of(v) for v in d.removed})
        if d.not_collected:
            d.uncollected = [v for v in d.removed if file_of(v) in d.not_collected]
            d.removed = [v for v in d.removed if file_of(v) not in d.not_collected]
    keys = {template_of(r[0]) for r in rows if r[1]}
    t_old, t_new = _templates(o, keys), _templates(n, keys)
    seen: dict[tuple[Any, ...], tuple[str, ...]] = {}  # variants of one template and entry
    reach = _Reach(o, n)
    for k, changed, flipped, oop, omod, ofp, nop, nmod, nfp, cls, dtypes, was, now in rows:
        why: tuple[str, ...] = ()
        if changed:
            key = (template_of(k), oop, omod, ofp, nop, nmod, nfp)
            hit = seen.get(key)
            if hit is None:
                before = variant_components(t_old.get(key[0], {}), oop, omod, ofp)
                after = variant_components(t_new.get(key[0], {}), nop, nmod, nfp)
                hit = seen[key] = tuple(reasons(before, after)) or ("fingerprint",)
            why = hit
            entry = why == (f"opinfo:{nop}",) or why == (f"moduleinfo:{nmod}",)
            if entry and not flipped and (oop, omod) == (nop, nmod):
                name = str(nop if nop is not None else nmod)
                if reach.same(name, str(ofp), str(nfp), key[0], str(cls), str(dtypes)):
                    d.unreached.append((k, str(was), str(now)))
                    continue
        d.modified.append(Modified(k, (*why, "device") if flipped else why))
    d.moved = find_moves(o, n, d.removed, d.added)
    if d.moved:
        gone = {m.old for m in d.moved}
        came = {m.new for m in d.moved}
        d.removed = [v for v in d.removed if v not in gone]
        d.added = [v for v in d.added if v not in came]
    return d


class _Reach:
    """Note [Entry changes that do not reach a variant]: each side's entries (read
    when first asked) and whether an entry change reaches a variant."""

    def __init__(self, old: sqlite3.Connection, new: sqlite3.Connection) -> None:
        self._cons = (old, new)
        self._sides: tuple[_Side | None, _Side | None] | None = None
        self._memo: dict[tuple[str, ...], bool] = {}

    def same(self, name: str, old_fp: str, new_fp: str, test: str, cls: str, dtypes: str) -> bool:
        """Whether the entry ``name`` of fingerprint ``old_fp`` (old index) and
        ``new_fp`` (new index) is the same for a variant of template ``test``
        (``file::Class::method``), generic class ``cls``, ``dtypes`` (comma-joined)."""
        key = (name, old_fp, new_fp, test, cls, dtypes)
        hit = self._memo.get(key)
        if hit is None:
            if self._sides is None:
                self._sides = (_Side.read(self._cons[0]), _Side.read(self._cons[1]))
            a, b = self._sides
            method = test.rsplit("::", 1)[-1]
            dts = tuple(x for x in dtypes.split(",") if x)
            x = a.limited(name, old_fp, cls, method, dts) if a is not None else None
            y = b.limited(name, new_fp, cls, method, dts) if b is not None else None
            hit = self._memo[key] = x is not None and x == y
        return hit


@dataclass
class _Side:
    """One index's entries as Note [Test-limited entry fingerprints] reads them."""

    #: (name, fingerprint) -> (db, its skips and DecorateInfos)
    entries: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]]
    bases: dict[tuple[str, str], str]  # (db, name) -> test_base
    device_types: tuple[str, ...] | None  # None: an index of every device type

    @classmethod
    def read(cls, con: sqlite3.Connection) -> _Side | None:
        """None: the index has no ``test_base`` of its entries (built before them)."""
        if not con.execute(
            "SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='entry_bases'"
        ).fetchone():
            return None
        rows = con.execute("SELECT db, name, test_base FROM main.entry_bases")
        bases = {(str(d), str(n)): str(b) for d, n, b in rows}
        if not bases:
            return None
        entries: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
        for db, name, fp, decos in con.execute(
            "SELECT db, name, fingerprint, decorators FROM main.entries"
        ):
            try:
                parsed = json.loads(decos)
            except ValueError:
                continue
            if isinstance(parsed, list):
                entries.setdefault((str(name), str(fp)), (str(db), parsed))
        from ootest.record.identity import backend_name

        meta = dict(con.execute("SELECT key, value FROM main.meta").fetchall())
        device = str(meta.get("device") or "")
        types = ("privateuse1", backend_name(device)) if device else None
        return cls(entries, bases, types)

    def limited(
        self, name: str, fp: str, cls: str, method: str, dtypes: tuple[str, ...]
    ) -> str | None:
        """The entry's fingerprint as one variant sees it; None: not known here."""
        found = self.entries.get((name, fp))
        if found is None:
            return None
        db, decos = found
        base = self.bases.get((db, name))
        if base is None:
            return None
        reached = sorted(
            str(d.get("fingerprint"))
            for d in decos
            if isinstance(d, dict) and _reaches(d, cls, method, dtypes, self.device_types)
        )
        return digest([base, reached])


def _reaches(
    d: dict[str, Any],
    cls: str,
    method: str,
    dtypes: tuple[str, ...],
    device_types: tuple[str, ...] | None,
) -> bool:
    """Whether a skip / DecorateInfo (as ``_torchdb.decorate_infos`` describes it)
    can apply to a variant: the names it is limited to are the variant's (torch's
    ``DecorateInfo.is_active``); a variant whose dtype is not known counts every one."""
    c, t, dt, ds = d.get("cls_name"), d.get("test_name"), d.get("device_type"), d.get("dtypes")
    if c is not None and c != cls:
        return False
    if t is not None and t != method:
        return False
    if dt is not None and device_types is not None:
        names = [dt] if isinstance(dt, str) else list(dt) if isinstance(dt, list) else []
        if not any(n in device_types for n in names):
            return False
    if ds is not None and dtypes and isinstance(ds, list):
        return any(x in ds for x in dtypes)
    return True


def _not_collected(n: sqlite3.Connection, files: set[str]) -> dict[str, str]:
    """Of ``files`` (of removed variants), those the new index holds but could not
    collect: file -> why (its parse error, else its collection error)."""
    out: dict[str, str] = {}
    for part in chunks(sorted(files)):
        marks = ",".join("?" * len(part))
        for file, error in n.execute(
            f"SELECT file, error FROM main.collected WHERE error IS NOT NULL AND file IN ({marks})",
            part,
        ):
            out[str(file)] = str(error)
        for key, facts in n.execute(
            f"SELECT key, facts FROM main.facts WHERE key IN ({marks})", part
        ):
            try:
                error = json.loads(facts).get("error")
            except (ValueError, AttributeError):
                continue
            if error:
                out[str(key)] = str(error)  # the cause: collecting it fails too
    return out


def _templates(con: sqlite3.Connection, keys: set[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for part in chunks(sorted(keys)):
        marks = ",".join("?" * len(part))
        for key, comps in con.execute(
            f"SELECT key, components FROM main.templates WHERE key IN ({marks})", part
        ):
            out[key] = json.loads(comps)
    return out
