"""A results file the user names: JSON Lines of something else is one error that
names the file and line, not a run of 0 results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.errors import UserError
from ootest.record.results import RunData

EXPECTED = (
    "expected a line of a results file 'ootest run' writes, such as "
    '{"kind": "result", "variant_id": "test/test_x.py::TestX::test_y[...]", '
    '"outcome": "passed", ...}; found '
)
HOW = (
    " and no result in the file; pass the results .jsonl file (.ootest/results.jsonl or "
    "run --results PATH)"
)


@pytest.mark.parametrize(
    ("text", "line", "found"),
    [
        ('{"a": 1}\n{"b": 2}\n', 1, "an object with keys 'a'"),
        ('\n{"kind": "provenance", "torch_version": "2.13"}\n{"kind": "ops", "ops": {}}\n', 2,
         "a record of kind 'provenance'"),  # an op capture
        ("not json\n[1, 2]\n", 2, "a JSON list"),
        ("{}\n", 1, "an empty object"),
        ('{"kind": "result", "variant_id": "a"}\n', 1, "a record of kind 'result'"),
    ],
)  # fmt: skip
def test_json_lines_that_are_no_results_are_one_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    line: int,
    found: str,
) -> None:
    # each was read as a results file with 0 results (merge, report, select refine
    # --results, select run --results/--reference: all read through RunData.load)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text(text)
    message = f"x.jsonl:{line}: {EXPECTED}{found}{HOW}"
    with pytest.raises(UserError) as e:
        RunData.load(Path("x.jsonl"))
    assert str(e.value) == message
    for argv in (["merge", "x.jsonl", "--results", "m.jsonl"], ["report", "x.jsonl"]):
        assert main(argv) == 2, argv
        assert capsys.readouterr().err == f"ootest: error: {message}\n"
    assert not (tmp_path / "m.jsonl").exists()


def test_results_files_with_foreign_lines_or_no_result_yet_are_still_read(tmp_path: Path) -> None:
    # a run that stopped before its first result, and a file with a line a later
    # ootest may write: read as they were
    started = tmp_path / "started.jsonl"
    started.write_text(json.dumps({"kind": "session", "selected": 3}) + "\n")
    assert RunData.load(started).sessions == 1
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        '{"kind": "newer", "x": 1}\n{"kind": "result", "variant_id": "a", "outcome": "passed"}\n'
    )
    assert list(RunData.load(mixed).results) == ["a"]
    (tmp_path / "empty.jsonl").write_text("")
    assert RunData.load(tmp_path / "empty.jsonl").results == {}
