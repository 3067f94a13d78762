"""Which files a restart may leave out (Note [Restarts skip finished files])."""

from __future__ import annotations

from ootest.record.results import Record, finished_files


def _session(run: str | None, **files: int) -> Record:
    return {"kind": "session", "run": run, "files": {f"{k}.py": n for k, n in files.items()}}


def _result(file: str, vid: str, phase: str = "call") -> Record:
    return {
        "kind": "result",
        "file": f"{file}.py",
        "variant_id": vid,
        "outcome": "passed",
        "phase": phase,
    }


def test_a_file_is_finished_when_every_test_its_last_session_selected_has_a_result() -> None:
    recs = [
        _session("r", a=2, b=2, c=0),
        _result("a", "a1"),
        _result("a", "a2"),
        _result("b", "b1"),
    ]
    assert finished_files(recs, "r") == {"a.py", "c.py"}
    # b restarted: its last session selected one test, which now has a result
    recs += [_session("r", b=1), _result("b", "b2")]
    assert finished_files(recs, "r") == {"a.py", "b.py", "c.py"}


def test_results_count_once_and_only_after_the_session() -> None:
    recs = [
        _result("a", "a0"),  # from before this session (an earlier run)
        _session("r", a=2),
        _result("a", "a1"),
        _result("a", "a1"),  # the same variant twice is one test
        _result("a", "a.py", phase="collect"),  # a collection record is no test
    ]
    assert finished_files(recs, "r") == set()


def test_only_sessions_of_the_same_run_count() -> None:
    recs = [_session("old", a=1), _result("a", "a1"), _session(None, b=0)]
    assert finished_files(recs, "new") == set()
    assert finished_files(recs, "old") == {"a.py"}
