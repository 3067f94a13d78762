"""Small upstream-style test trees in two versions, for upgrades (``select run
--since``) and moves (Note [Moves]).

Each tree is written as upstream writes tests (``TestCase`` classes, device-generic
ones instantiated by ``instantiate_device_type_tests``, ``@dtypes``, ``@ops``,
module-level helpers); the repository memory is built by ``ootest index build``
itself (static part, fingerprints, the diff's reasons). Only the variant
enumeration is synthetic (what pytest with the plugin lists for the device, with
each variant's device flag), so no torch is needed; an OpInfo entry's change is
written into the new memory as the entry dump would record it (that dump imports
torch).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ootest.cli.main import main
from ootest.memory import BuildOptions, build_index
from ootest.memory._collect import CollectSettings, FileCollection, VariantRecord
from ootest.memory._files import SourceFile
from ootest.memory._fingerprint import fingerprint, variant_components

HEAD = """import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
)
"""


@dataclass(frozen=True)
class V:
    """One variant as pytest with the plugin lists it for the device."""

    file: str
    cls: str
    method: str
    dtype: str | None = None
    op: str | None = None
    device: bool = True
    params: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        axes = [f"op={self.op}"] if self.op else []
        axes += [f"dtype={self.dtype}"] if self.dtype else []
        axes += [f"{k}={v}" for k, v in self.params]
        bracket = f"[{','.join(axes)}]" if axes else ""
        return f"{self.file}::{self.cls}::{self.method}{bracket}"


def collector(
    spec: Sequence[V],
) -> Callable[..., tuple[dict[str, FileCollection], list[str]]]:
    def collect(
        files: Sequence[SourceFile],
        settings: CollectSettings,
        jobs: int,
        advance: Callable[[int], None],
    ) -> tuple[dict[str, FileCollection], list[str]]:
        out: dict[str, FileCollection] = {}
        for f in files:
            fc = out[f.key] = FileCollection(f.key)
            for v in spec:
                if v.file == f.key:
                    fc.variants.append(
                        VariantRecord(
                            v.id,
                            v.file,
                            v.cls,
                            v.method,
                            v.op,
                            (v.dtype,) if v.dtype else (),
                            None,
                            v.device,
                        )
                    )
            advance(1)
        return out, []

    return collect


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for key, text in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "test"


def build(root: Path, db: Path, files: Mapping[str, str], spec: Sequence[V]) -> None:
    test = write_tree(root, files)
    build_index(BuildOptions(roots=(test,), db=db, torch_db=False), collector=collector(spec))


def change_entry(db: Path, op: str, entry_fp: str) -> list[str]:
    """Give op ``op``'s entry another fingerprint in the memory ``db``, as a build
    whose entry dump saw the OpInfo edited records it; the variants it changed."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT v.id, v.module, t.components FROM variants v JOIN templates t ON "
            "t.key = substr(v.id, 1, instr(v.id || '[', '[') - 1) WHERE v.op = ?",
            (op,),
        ).fetchall()
        for vid, module, comps in rows:
            fp = fingerprint(variant_components(json.loads(comps), op, module, entry_fp))
            con.execute(
                "UPDATE variants SET entry_fp = ?, fingerprint = ? WHERE id = ?",
                (entry_fp, fp, vid),
            )
        con.commit()
        return sorted(r[0] for r in rows)
    finally:
        con.close()


def capture(path: Path, variants: Iterable[V], ops: Mapping[str, Mapping[str, int]]) -> Path:
    """An op capture: each device variant calls its method's ops (``ops``), a plain
    one calls none on the device; every one passed on the reference device."""
    recs: list[dict[str, object]] = [
        {
            "kind": "provenance",
            "torch_version": "2.13.0",
            "torch_git": "abc123",
            "device": "emu",
            "profile": "full",
            "ootest_version": "0.1.0",
            "time": 1733320000.0,
        }
    ]
    for v in sorted(set(variants), key=lambda x: x.id):
        calls = ops.get(v.method, {}) if v.device else {}
        if calls:
            recs.append(
                {
                    "kind": "ops",
                    "variant_id": v.id,
                    "nodeid": v.id,
                    "file": v.file,
                    "mode": "eager",
                    "ops": dict(calls),
                }
            )
        recs.append(
            {"kind": "stop", "variant_id": v.id, "op": None, "outcome": "passed", "error": None}
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["ops", "ingest", str(path), "--db", str(path.with_suffix(".db"))]) == 0
    return path.with_suffix(".db")
