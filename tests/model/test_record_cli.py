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


def test_a_python_without_torch_is_one_line(tmp_path: Path) -> None:
    # the recorder's "ModuleNotFoundError: No module named 'torch'" traceback came
    # first, then a line that did not say why (exit 1)
    import os

    from ootest import errors

    (tmp_path / "m.py").write_text("open('ran', 'w').close()\n")
    bare = tmp_path / "bin" / "python3"
    bare.parent.mkdir()
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages: no torch
    bare.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(Path(errors.__file__).resolve().parents[1])}
    r = ootest("model", "record", "--tag", "model__x", "--", str(bare), "m.py",
                   cwd=tmp_path, env=env)  # fmt: skip
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr == (
        f"ootest: error: {bare} cannot import torch; record with the Python your model runs "
        "with (one that has torch and ootest installed)\n"
    )
    assert not (tmp_path / "ran").exists() and not (tmp_path / "ops.yaml").exists()
