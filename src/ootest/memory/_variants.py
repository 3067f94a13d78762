"""Rows of the variant part: collected variants, fingerprinted and written where they differ."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ootest.memory._collect import FileCollection, VariantRecord
from ootest.memory._fingerprint import (
    TORCH_DBS,
    EntryIndex,
    EntryRef,
    fingerprint,
    preferred_dbs,
    template_components,
    variant_components,
)
from ootest.memory._ids import file_of, template_of
from ootest.memory._rows import id_range, test_key
from ootest.memory._static import FileFacts

_COLUMNS = "id, cls, op, dtypes, module, device_variant, mode, reason, entry_fp, fingerprint"
_FP = 9  # index of the fingerprint in a row


@dataclass
class VariantCounts:
    fingerprinted: int = 0
    added: int = 0
    removed: int = 0
    changed: int = 0  # fingerprint changed
    written: int = 0
    duplicates: int = 0  # collected items whose variant ID another item has


class VariantWriter:
    """Fingerprints variants (Note [Variant fingerprints]) and writes those that differ."""

    def __init__(
        self,
        con: sqlite3.Connection,
        dbs: Sequence[str],
        imported_modules: Callable[[str], set[str]],
    ) -> None:
        self.con = con
        self.dbs = list(dbs)
        self.imported_modules = imported_modules
        rows = con.execute("SELECT db, name, type, fingerprint FROM entries").fetchall()
        self.index = EntryIndex((EntryRef(*r) for r in rows), TORCH_DBS)
        self._preferred: dict[str, list[str]] = {}
        self.counts = VariantCounts()

    def entry(self, file: str, op: str | None, module: str | None) -> EntryRef | None:
        """The entry of an ``@ops`` / ``@modules`` variant (Note [Entry lookup])."""
        if op is None and module is None:
            return None
        pref = self._preferred.get(file)
        if pref is None:
            pref = self._preferred[file] = preferred_dbs(self.dbs, self.imported_modules(file))
        if op is not None:
            return self.index.find("opinfo", op, pref)
        return self.index.find("moduleinfo", str(module), pref)

    def write_file(self, fc: FileCollection, stamp: str, facts: FileFacts) -> None:
        """Replace one collected file's variants and templates where they differ."""
        templates: dict[str, dict[str, str]] = {}
        fps: dict[tuple[str, str | None, str | None, str | None], str] = {}
        rows: dict[str, tuple[Any, ...]] = {}
        unique = _dedupe(fc.variants)
        self.counts.duplicates += len(fc.variants) - len(unique)
        for v in unique:
            key = test_key(fc.key, v.cls, v.method)
            comps = templates.get(key)
            if comps is None:
                comps = templates[key] = template_components(facts, v.cls, v.method)
            ref = self.entry(fc.key, v.op, v.module)
            efp = ref.fingerprint if ref is not None else None
            memo = (key, v.op, v.module, efp)  # the dtypes do not enter the fingerprint
            fp = fps.get(memo)
            if fp is None:
                fp = fps[memo] = fingerprint(variant_components(comps, v.op, v.module, efp))
            rows[v.id] = (
                v.id,
                v.cls,
                v.op,
                ",".join(v.dtypes),
                v.module,
                int(v.device_variant),
                v.mode,
                v.reason,
                efp,
                fp,
            )
        self.counts.fingerprinted += len(rows)
        self._replace_variants(fc.key, rows)
        self._replace_templates(fc.key, templates)
        before = self.con.execute(
            "SELECT stamp, error FROM collected WHERE file=?", (fc.key,)
        ).fetchone()
        if before is None or tuple(before) != (stamp, fc.error):
            self.con.execute(
                "INSERT OR REPLACE INTO collected VALUES(?,?,?)", (fc.key, stamp, fc.error)
            )

    def _replace_variants(self, file: str, rows: dict[str, tuple[Any, ...]]) -> None:
        con = self.con
        old = {
            r[0]: tuple(r)
            for r in con.execute(
                f"SELECT {_COLUMNS} FROM variants WHERE id >= ? AND id < ?", id_range(file)
            )
        }
        removed = sorted(old.keys() - rows.keys())
        con.executemany("DELETE FROM variants WHERE id=?", [(k,) for k in removed])
        changed = [row for vid, row in rows.items() if old.get(vid) != row]
        con.executemany(
            f"INSERT OR REPLACE INTO variants({_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?)", changed
        )
        for row in changed:
            before = old.get(row[0])
            if before is None:
                self.counts.added += 1
            elif before[_FP] != row[_FP]:
                self.counts.changed += 1
        self.counts.removed += len(removed)
        self.counts.written += len(removed) + len(changed)

    def _replace_templates(self, file: str, templates: dict[str, dict[str, str]]) -> None:
        con = self.con
        old = dict(con.execute("SELECT key, components FROM templates WHERE file=?", (file,)))
        new = {k: json.dumps(c, sort_keys=True) for k, c in templates.items()}
        gone = sorted(old.keys() - new.keys())
        con.executemany("DELETE FROM templates WHERE key=?", [(k,) for k in gone])
        for k, text in new.items():
            if old.get(k) != text:
                con.execute(
                    "INSERT OR REPLACE INTO templates VALUES(?,?,?,?)",
                    (k, file, text, fingerprint(templates[k])),
                )
                self.counts.written += 1
        self.counts.written += len(gone)

    def refingerprint(self, names: set[str], skip_files: set[str]) -> None:
        """Fingerprint again the variants whose entry (op or module name) changed."""
        con = self.con
        marks = ",".join("?" * len(names))
        rows = con.execute(  # a scan: entries change rarely, an index would cost megabytes
            f"SELECT id, op, module, entry_fp, fingerprint FROM variants "
            f"WHERE op IN ({marks}) OR module IN ({marks})",
            [*sorted(names), *sorted(names)],
        ).fetchall()
        templates: dict[str, dict[str, str]] = {}
        for vid, op, module, entry_fp, fp in rows:
            file = file_of(vid)
            if file in skip_files:
                continue
            key = template_of(vid)
            if key not in templates:
                t = con.execute("SELECT components FROM templates WHERE key=?", (key,)).fetchone()
                templates[key] = json.loads(t[0]) if t else {}
            ref = self.entry(file, op, module)
            efp = ref.fingerprint if ref is not None else None
            new_fp = fingerprint(variant_components(templates[key], op, module, efp))
            self.counts.fingerprinted += 1
            if (new_fp, efp) != (fp, entry_fp):
                con.execute(
                    "UPDATE variants SET fingerprint=?, entry_fp=? WHERE id=?", (new_fp, efp, vid)
                )
                self.counts.changed += new_fp != fp
                self.counts.written += 1


def _dedupe(variants: Sequence[VariantRecord]) -> list[VariantRecord]:
    """One record per variant ID; a device variant wins over a host one (IDs do not
    name the device, see Note [Canonical variant IDs])."""
    out: dict[str, VariantRecord] = {}
    for v in variants:
        have = out.get(v.id)
        if have is None or (v.device_variant and not have.device_variant):
            out[v.id] = v
    return list(out.values())
