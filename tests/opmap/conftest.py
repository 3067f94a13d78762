"""Helpers for op map tests: captures written as records, indexes in tmp_path."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ootest.opmap.ingest import ingest_records
from ootest.opmap.store import OpStore

PROV = {
    "kind": "provenance",
    "torch_version": "2.13.0",
    "torch_git": "abc123",
    "device": "emu",
    "profile": "full",
    "ootest_version": "0.1.0",
    "time": 1733320000.0,
}


def prov(**changes: Any) -> dict[str, Any]:
    return {**PROV, **changes}


def ops(vid: str, counts: dict[str, int], mode: str = "eager", **extra: Any) -> dict[str, Any]:
    file = vid.split("::", 1)[0]
    return {
        "kind": "ops",
        "variant_id": vid,
        "nodeid": vid,
        "file": file,
        "mode": mode,
        "ops": counts,
        **extra,
    }


def stop(
    vid: str, outcome: str = "passed", op: str | None = None, error: str | None = None
) -> dict[str, Any]:
    return {"kind": "stop", "variant_id": vid, "op": op, "outcome": outcome, "error": error}


def write_capture(path: Path, records: Iterable[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def dump(db: Path) -> dict[str, Any]:
    """The index's rows by name (ids differ between equivalent indexes)."""
    c = sqlite3.connect(db)
    try:
        return {
            "variants": sorted(
                c.execute(
                    "SELECT variant_id, nodeid, file, device_branch, varies, partial, why "
                    "FROM variant"
                )
            ),
            "ops": sorted(c.execute("SELECT name, packet FROM op")),
            "edges": sorted(
                c.execute(
                    "SELECT v.variant_id, o.name, e.mode, e.calls FROM edge e "
                    "JOIN variant v ON v.id = e.variant JOIN op o ON o.id = e.op"
                )
            ),
            "variant_capture": sorted(
                c.execute(
                    "SELECT v.variant_id, c.device, c.time, vc.n_ops, vc.opset, vc.outcome, "
                    "vc.stopped_on, vc.error, vc.device_branch FROM variant_capture vc "
                    "JOIN variant v ON v.id = vc.variant JOIN capture c ON c.id = vc.capture"
                )
            ),
            "postings": sorted(
                (name, tuple(sorted(vid for vid in _posting(c, i))))
                for i, name in c.execute("SELECT id, name FROM op")
            ),
        }
    finally:
        c.close()


def _posting(c: sqlite3.Connection, op_id: int) -> list[str]:
    from ootest.opmap.schema import unpack_ids

    (blob,) = c.execute("SELECT variants FROM op WHERE id = ?", (op_id,)).fetchone()
    ids = list(unpack_ids(blob))
    names = dict(c.execute("SELECT id, variant_id FROM variant"))
    return [names[i] for i in ids]


@pytest.fixture
def make_index(tmp_path: Path) -> Any:
    """``make_index(records, name="ops.db")`` -> the path of a fresh index holding them."""

    def make(records: list[dict[str, Any]], name: str = "ops.db") -> Path:
        db = tmp_path / name
        with OpStore.open(db, create=True) as store:
            ingest_records(store, records, source="test")
        return db

    return make


# A small suite: four variants over add, mul, cumsum, _scaled_mm and the native copy.
A = "test/test_ops.py::TestCommon::test_out[op=add,dtype=float32]"
B = "test/test_ops.py::TestCommon::test_out[op=mul,dtype=float32]"
C = "test/test_ops.py::TestCommon::test_out[op=cumsum,dtype=float32]"
D = "test/test_matmul.py::TestMatmul::test_scaled_mm[dtype=float16]"

SUITE = [
    PROV,
    ops(A, {"aten::add.Tensor": 3, "aten::empty_strided": 2, "aten::copy_": 1}),
    stop(A),
    ops(B, {"aten::mul.Tensor": 1, "aten::add.Tensor": 1, "aten::empty_strided": 1}),
    stop(B),
    ops(C, {"aten::cumsum": 1, "aten::cumsum.out": 2, "aten::empty_strided": 1}),
    ops(C, {"aten::cumsum": 4}, mode="compiled"),
    stop(C),
    ops(D, {"aten::_scaled_mm": 1, "aten::mul.Tensor": 2, "aten::empty_strided": 1}),
    stop(D, "failed", op="aten::_scaled_mm", error="NotImplementedError"),
    {"kind": "device_branch", "variant_id": D},
]
