"""Subcommand names: one name per thing, older spellings still accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ootest, spawn_ootest, wait_for


def test_shard_matrix_under_both_spellings(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "suite.yaml").write_text("test_suite_config:\n  files: [{path: test_a.py}]\n")
    new = ootest("shards", "suite.yaml", "--shards", "2", cwd=tmp_path)
    old = ootest("plan", "suite.yaml", "--shards", "2", cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    assert new.stdout == old.stdout
    legs = json.loads(new.stdout)["include"]
    assert [(leg["shard"], leg["job_name"]) for leg in legs] == [
        ("1/2", "ootest suite (plain) shard 1 of 2"),
        ("2/2", "ootest suite (plain) shard 2 of 2"),
    ]


def test_shards_below_one_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text("test_suite_config:\n  files: []\n")
    r = ootest("shards", "suite.yaml", "--shards", "0", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "ootest: error: --shards: expected a number >= 1; found 0\n"


def test_combination_matrix_under_both_spellings() -> None:
    args = ["--sha", "c" * 40, "--suite", "x.yaml", "--shards", "2"]
    new = ootest("relay", "matrix", *args)
    old = ootest("relay", "plan", *args)
    assert new.returncode == 0, new.stderr
    assert new.stdout == old.stdout
    assert len(json.loads(new.stdout)["include"]) == 2


def test_run_output_paths_that_cannot_be_written_are_one_line(tmp_path: Path) -> None:
    # A folder given as --junit or --html was an internal-error traceback after every
    # test had run; a --results under a file, one before any test ran.
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "suite.yaml").write_text("test_suite_config:\n  files: [{path: test_a.py}]\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    for args, message in (
        (["--junit", "adir"], "--junit adir: is a folder; expected a file path"),
        (["--html", "adir"], "--html adir: is a folder; expected a file path"),
        (["--results", "adir"], "--results adir: is a folder; expected a file path"),
        (["--results", "afile/r.jsonl"], "--results afile/r.jsonl: cannot create its folder (a "
         "file is in the way); pass a path in a writable folder"),
        (["--results", "r.jsonl", "--junit", "afile/j.xml"], "--junit afile/j.xml: cannot"),
    ):  # fmt: skip
        r = ootest("run", "suite.yaml", *args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("ootest: error: " + message), r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "r.jsonl").exists()  # no test ran


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "r.jsonl", "--format", "html", "-o", "adir"], "-o adir: is a folder"),
        (["merge", "r.jsonl", "--html", "adir"], "--html adir: is a folder"),
        (["merge", "r.jsonl", "--results", "afile/m.jsonl"], "--results afile/m.jsonl: cannot "
         "create its folder (a file is in the way)"),
        (["index", "build", "--root", ".", "--db", "afile/x.db"], "--db afile/x.db: cannot"),
        (["ops", "capture", "test_a.py", "--db", "afile/x.db"], "--db afile/x.db: cannot"),
        (["select", "run", "--variants", "r.jsonl", "--device", "emu:young", "--out", "adir"],
         "--out adir: is a folder"),
        (["select", "scope", "--device", "emu:young", "--root", ".", "--out", "adir"],
         "--out adir: is a folder"),
        (["model", "record", "--tag", "t", "--out", "adir", "--", "python", "m.py"],
         "--out adir: is a folder"),
    ],
)  # fmt: skip
def test_outputs_that_cannot_be_written_are_one_line_before_any_work(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    # each was an internal-error traceback, most after the work was done (a capture
    # run, an index build, the model script, a backend probe)
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "m.py").write_text("raise SystemExit('the script must not run')\n")
    (tmp_path / "r.jsonl").write_text(
        '{"kind": "result", "variant_id": "a", "outcome": "passed"}\n'
    )
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    r = ootest(*argv, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("ootest: error: " + message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "must not run" not in r.stdout + r.stderr


def test_a_second_run_on_the_same_results_file_stops(tmp_path: Path) -> None:
    # two configs run at once from one folder (both on .ootest/results.jsonl) mixed
    # their records, each reporting the other's tests as its own
    (tmp_path / "test_wait.py").write_text(
        "import os, time\n"
        "def test_wait():\n"
        "    open('started', 'w').close()\n"
        "    end = time.time() + 60\n"
        "    while not os.path.exists('go') and time.time() < end:\n"
        "        time.sleep(0.05)\n"
    )
    (tmp_path / "test_b.py").write_text("def test_b():\n    pass\n")
    (tmp_path / "a.yaml").write_text(
        "test_suite_config:\n  files:\n"
        "    - {path: test_wait.py, unlisted_test_mode: mandatory_success}\n"
    )
    (tmp_path / "b.yaml").write_text("test_suite_config:\n  files: [{path: test_b.py}]\n")
    first = spawn_ootest("run", "a.yaml", "--fork", "off", cwd=tmp_path)
    try:
        wait_for(tmp_path / "started")
        second = ootest("run", "b.yaml", cwd=tmp_path)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr == (
            "ootest: error: --results .ootest/results.jsonl: another ootest run is writing "
            "it; wait for it to end, or give this run its own --results PATH\n"
        )
        # its own --results is fine
        assert ootest("run", "b.yaml", "--results", "b.jsonl", cwd=tmp_path).returncode == 0
    finally:
        (tmp_path / "go").touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, out + err
    assert "OK: 1 results in .ootest/results.jsonl" in out + err
    assert ootest("run", "b.yaml", cwd=tmp_path).returncode == 0  # the lock went with it
