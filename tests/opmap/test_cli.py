"""``ootest ops`` end to end, in subprocesses: outputs, files written, exit codes,
and that no command imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import SUITE, A, B, C, D, write_capture

# Runs the CLI in a fresh interpreter and reports whether torch got imported.
PROBE = (
    "import sys\n"
    "from ootest.cli.main import main\n"
    "rc = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print('TORCH=%s' % ('torch' in sys.modules), file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def ootest(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["COLUMNS"] = "200"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, env=env
    )
    assert done.stderr.rstrip().endswith("TORCH=False"), done.stderr
    return done


@pytest.fixture
def db(tmp_path: Path) -> Path:
    cap = write_capture(tmp_path / "cap.jsonl", SUITE)
    done = ootest("ops", "ingest", str(cap), "--db", "idx/ops.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ingested 1 file(s) into idx/ops.db in ")
    assert done.stdout.rstrip().endswith("4 variant(s) touched, captures [1], 13 edges in all")
    return tmp_path / "idx" / "ops.db"


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_queries(db: Path, tmp_path: Path) -> None:
    out = as_json(
        ootest("ops", "tests-for", "aten.mul.Tensor", "--db", str(db), "--json", cwd=tmp_path)
    )
    assert (out["op"], out["total"]) == ("aten::mul.Tensor", 2)
    assert [(v["variant_id"], v["device_dependent"]) for v in out["variants"]] == [
        (D, True),
        (B, False),
    ]
    out = as_json(ootest("ops", "for-test", "op=cumsum", "--db", str(db), "--json", cwd=tmp_path))
    assert out["variant_id"] == C
    assert [(o["op"], o["mode"], o["calls"]) for o in out["ops"]][:2] == [
        ("aten::cumsum", "eager", 1),
        ("aten::cumsum", "compiled", 4),
    ]
    table = ootest("ops", "tests-for", "add", "--db", str(db), cwd=tmp_path)
    assert table.returncode == 0 and A in table.stdout and "aten::add: 2 variant(s)" in table.stdout
    stats = as_json(ootest("ops", "stats", "--db", str(db), "--json", "--top", "1", cwd=tmp_path))
    assert (stats["variants"], stats["edges"], stats["top_ops"]) == (
        4,
        13,
        [{"op": "aten::empty_strided", "variants": 4}],
    )


def test_missing_against_emu_young(db: Path, tmp_path: Path) -> None:
    out = as_json(
        ootest("ops", "missing", "--device", "emu:young", "--db", str(db), "--json", cwd=tmp_path)
    )
    assert (out["source"], out["variants"], out["blocked"]) == ("emu:young", 4, 2)
    assert [(n["rule"], n["alone"]) for n in out["needs"]] == [("_scaled_mm", 1), ("cumsum", 1)]
    assert [(p["rule"], p["cumulative"]) for p in out["plan"]] == [("_scaled_mm", 1), ("cumsum", 2)]


def test_enable_prints_the_diff_then_writes(db: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    text = "test_suite_config:\n  global:\n    supported_ops:\n      - add  # first\n      - mul\n"
    cfg.write_text(text)
    done = ootest("ops", "enable", "cumsum", "--config", str(cfg), "--db", str(db), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "+      - cumsum\n" in done.stdout
    assert f"would write (--write to apply) {cfg}" in done.stdout
    assert cfg.read_text() == text
    done = ootest(
        "ops", "enable", "cumsum", "--config", str(cfg), "--db", str(db), "--write", cwd=tmp_path
    )
    assert done.returncode == 0 and cfg.read_text() == text + "      - cumsum\n"


def test_enable_an_op_not_in_the_op_map_is_one_line(db: Path, tmp_path: Path) -> None:
    # it printed a diff adding the typo and "0 variant(s) waited only on cumsun", exit 0
    cfg = tmp_path / "cfg.yaml"
    text = "test_suite_config:\n  global:\n    supported_ops:\n      - add\n"
    cfg.write_text(text)
    for op, found, hint in (
        ("cumsun", "no packet aten::cumsun; similar: aten::cumsum", "'- cumsun'"),
        ("nosuchop", "no packet aten::nosuchop", "'- nosuchop'"),
    ):
        for argv in (
            ["ops", "enable", op, "--config", str(cfg), "--db", str(db), "--write"],
            ["select", "enable", op, "--config", str(cfg), "--ops", str(db)],
        ):
            done = ootest(*argv, cwd=tmp_path)
            assert (done.returncode, done.stdout) == (2, ""), done.stderr
            err = done.stderr.removesuffix("TORCH=False\n")
            expected = (
                f"ootest: error: op {op!r}: expected an op the op map recorded (7 overloads in "
                f"{db}); found {found}. No captured variant calls it (or the capture predates "
                "it: capture again)"
            )
            if argv[0] == "ops":
                expected += f"; to list it in supported_ops anyway, add {hint} by hand"
            assert err == expected + "\n"
    assert cfg.read_text() == text


def test_affected_writes_the_variant_list(db: Path, tmp_path: Path) -> None:
    out = as_json(
        ootest(
            "ops",
            "affected",
            "--ops",
            "aten::add.Tensor",
            "--db",
            str(db),
            "--out",
            "sel/run.txt",
            "--json",
            cwd=tmp_path,
        )
    )
    # A and B call add; D is kept because its ops may differ per device
    assert (out["kept"], out["total"], out["uncertain_kept"]) == (3, 4, 1)
    assert (tmp_path / "sel" / "run.txt").read_text() == "".join(
        f"{v}\n" for v in sorted([A, B, D])
    )


def test_merge(db: Path, tmp_path: Path) -> None:
    done = ootest("ops", "merge", str(db), "--db", "merged.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    same = ootest("ops", "merge", "merged.db", "--db", "merged.db", cwd=tmp_path)
    assert same.returncode == 2
    assert "merge: --db merged.db is also a source; merge into another file" in same.stderr


def test_user_errors_exit_2_without_traceback(tmp_path: Path, db: Path) -> None:
    done = ootest("ops", "stats", "--db", "nowhere.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "ootest: error: nowhere.db: expected an op map index; found no file there. Build one "
        "with `ootest ops ingest CAPTURE.jsonl --db nowhere.db` (or pass --db PATH)"
    )
    assert "Traceback" not in done.stderr
    done = ootest("ops", "tests-for", "nn.functional.relu", "--db", str(db), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "found 'nn.functional.relu'" in done.stderr
