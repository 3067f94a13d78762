"""``ootest model record``: what it refuses, with one clear message (no torch)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ootest


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--tag", "model__x"],
            "ootest: error: give the command to record after --, e.g. "
            "ootest model record --tag model__mlp -- python my_model.py",
        ),
        (
            ["--tag", "model__x", "--", "torchrun", "train.py"],
            "ootest: error: expected a Python command after -- (python SCRIPT [ARGS] or "
            "python -m MODULE [ARGS]); found 'torchrun'",
        ),
        (
            ["--tag", "model__x", "--", sys.executable, "missing.py"],
            "ootest: error: script not found: missing.py (looked in {cwd})",
        ),
        (
            ["--tag", "model__x", "--", sys.executable, "-c", "print(1)"],
            "ootest: error: python -c is not supported: put the code in a script and record that",
        ),
        (
            ["--tag", "model x", "--", sys.executable, "m.py"],
            "ootest: error: --tag: expected a valid pytest mark name (letters, digits, "
            "_ - . : + /), e.g. model__my-model; found 'model x'",
        ),
        (
            ["--tag", "model__x", "--test", "tests.py::test_x", "--", sys.executable, "m.py"],
            "ootest: error: --test: expected FILE.py::Class::test_method (an @ops test); "
            "found 'tests.py::test_x'",
        ),
    ],
)
def test_record_refuses_with_one_message(tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "m.py").write_text("")
    r = ootest("model", "record", *argv, cwd=tmp_path)
    assert (r.returncode, r.stderr.strip()) == (2, message.format(cwd=tmp_path))
    assert not (tmp_path / "ops.yaml").exists()
