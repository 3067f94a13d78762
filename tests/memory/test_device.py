"""Variants for a device, with the config's decisions: the example suite on emu."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import ROOT, ootest

pytestmark = pytest.mark.slow  # builds (or loads) emu and imports torch in the children


def test_example_suite_on_emu_with_its_config(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    r = ootest(
        "index",
        "build",
        "--root",
        str(ROOT / "examples" / "suite"),
        "--device",
        "emu:young",
        "--config",
        str(ROOT / "examples" / "emu_young.yaml"),
        "--no-torch-db",
        "--db",
        str(db),
        "--jobs",
        "2",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert (report["test_files"], report["collect_errors"]) == (2, 0)
    con = sqlite3.connect(db)
    rows = dict(
        (vid, (dv, mode))
        for vid, dv, mode in con.execute("SELECT id, device_variant, mode FROM variants")
    )
    con.close()
    assert rows[
        "examples/suite/test_tensor_basics.py::TestTensorBasics::test_cumsum[dtype=float32]"
    ] == (
        1,
        "xfail_strict",
    )
    assert all(dv == 1 for dv, _ in rows.values())  # the device's variants only
    assert not any("device=" in vid for vid in rows)
    assert {mode for _, mode in rows.values()} >= {"mandatory_success", "xfail", "skip"}
