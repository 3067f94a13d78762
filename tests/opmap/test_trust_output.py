"""Issue 28 item 5: text from a capture or a run (variant IDs, error messages)
reaches a terminal or a CI log with its control characters escaped: no
``::error::`` line of its own, no terminal escape, no bidi reordering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import PROV, ops, stop, write_capture
from .test_cli import ootest

#: hostile tails of variant IDs and error texts (each a separate variant)
HOSTILE = [
    "\n::error::pwned",
    "\r\n::warning file=x::owned",
    "\x1b[31mRED\x1b[0m",
    "\x1b]0;retitled\x07",
    "\x1b[2J\x1b[H",
    "\x9b31m",
    "back\x08\x08\x08",
    "\u202eevil\u202c",
    "\u2028::error::sep",
    "nul\x00del\x7f",
]
FORBIDDEN = ["\x1b", "\r", "\x07", "\x08", "\x9b", "\u202e", "\u2028", "\x00", "\x7f"]


def _clean(out: str) -> None:
    for ch in FORBIDDEN:
        assert ch not in out, (repr(ch), out)
    for line in out.splitlines():
        assert not line.lstrip(" │┃|").startswith("::"), line


@pytest.fixture
def hostile_db(tmp_path: Path) -> tuple[Path, list[str]]:
    ids = [f"t.py::T::test_{i}[op=add{tail}]" for i, tail in enumerate(HOSTILE)]
    recs = [PROV]
    for vid, tail in zip(ids, HOSTILE, strict=True):
        recs.append(ops(vid, {"aten::add.Tensor": 2, f"aten::x{len(tail)}": 1}))
        recs.append(stop(vid, "failed", "aten::add.Tensor", f"boom{tail}"))
    cap = write_capture(tmp_path / "cap.jsonl", recs)
    done = ootest("ops", "ingest", str(cap), "--db", "ops.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "ops.db", ids


def test_ops_queries_escape_what_a_capture_holds(
    hostile_db: tuple[Path, list[str]], tmp_path: Path
) -> None:
    db, ids = hostile_db
    tried = 0
    out = ootest("ops", "tests-for", "add", "--db", str(db), "--limit", "0", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    _clean(out.stdout + out.stderr)
    assert "::error::pwned" in out.stdout.replace("\\n", "")  # shown, escaped
    tried += 1
    for i in range(len(HOSTILE)):
        out = ootest("ops", "for-test", f"test_{i}[", "--db", str(db), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        _clean(out.stdout + out.stderr)
        tried += 1
    first = ootest("ops", "for-test", "test_0[", "--db", str(db), cwd=tmp_path).stdout
    assert "test_0[op=add\\n::error::pwned]" in first and "boom\\n::error::pwned" in first
    out = ootest("ops", "stats", "--db", str(db), cwd=tmp_path)
    _clean(out.stdout + out.stderr)
    tried += 1
    # --json keeps the data as it is (JSON escapes it)
    data = json.loads(ootest("ops", "for-test", "test_0[", "--db", str(db), "--json",
                             cwd=tmp_path).stdout)  # fmt: skip
    assert data["variant_id"] == ids[0]
    print(f"ops output: {len(HOSTILE)} hostile IDs and errors, {tried} commands, all escaped")


def test_the_run_summary_escapes_test_names_and_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from ootest.record.results import RunData
    from ootest.runner.render import print_summary

    recs = [
        {
            "kind": "result",
            "variant_id": f"t{tail}.py::T::test_{i}{tail}",
            "nodeid": f"t.py::T::test_{i}",
            "file": f"t{tail}.py",
            "outcome": "failed",
            "message": f"E   RuntimeError: boom{tail}",
        }
        for i, tail in enumerate(HOSTILE)
    ]
    print_summary(RunData.from_records(recs), f"r{HOSTILE[0]}.jsonl")
    out = capsys.readouterr().out
    _clean(out)
    assert "RuntimeError: boom\\x1b[31mRED\\x1b[0m" in out.replace("\n", "")


def test_index_listings_escape_variant_ids(capsys: pytest.CaptureFixture[str]) -> None:
    from ootest.cli.index_cmd import _emit

    _emit([f"+ t.py::T::test_x[p={tail}]" for tail in HOSTILE])
    out = capsys.readouterr().out
    _clean(out)
    assert len(out.splitlines()) == len(HOSTILE)  # one line each
