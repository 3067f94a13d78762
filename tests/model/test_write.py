"""Where a recorded config points: a ``files[].path`` that resolves wherever the
config is read (Note [Model suite path]; no torch)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ootest.config.load import load_config
from ootest.config.paths import file_keys
from ootest.model.write import DEFAULT_TEST, SUITE, TestRef, config_text

DATA = {"calls": [], "total": 0, "torch": "2.x"}


def _write(out: Path, test: str = DEFAULT_TEST) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(config_text(DATA, tag="model__m", test=TestRef.parse(test), out_dir=out.parent,
                               seed=0, command=["python", "m.py"]))  # fmt: skip
    return out


def test_the_bundled_test_is_named_through_a_variable_the_loader_fills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it was written relative to the recorder's own install (../../../venv/...ootest/
    # model/suite/...), which no longer resolves once the config moves (committed,
    # read in CI, another checkout)
    monkeypatch.delenv("OOTEST_MODEL_SUITE", raising=False)
    cfg = _write(tmp_path / "rec" / "deep" / "ops.yaml")
    assert "  - path: ${OOTEST_MODEL_SUITE}/test_ootest_model_ops.py\n" in cfg.read_text()
    moved = tmp_path / "elsewhere" / "ops.yaml"
    moved.parent.mkdir()
    shutil.copy(cfg, moved)
    other = tmp_path / "cwd"
    other.mkdir()
    monkeypatch.chdir(other)
    for path in (cfg, moved):
        loaded = load_config(path)
        assert [Path(f.path).resolve() for f in loaded.files] == [SUITE]
        keys = file_keys(loaded.source, (t for t, _ in loaded.resolved))
        assert keys.key(SUITE) == "test_ootest_model_ops.py"  # the same on every install


def test_a_test_of_the_users_is_named_relative_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    cfg = _write(Path("configs") / "ops.yaml", "tests/test_mine.py::TestX::test_op")
    assert "  - path: ../tests/test_mine.py\n" in cfg.read_text()
    monkeypatch.chdir(tmp_path / "tests")
    loaded = load_config(tmp_path / "configs" / "ops.yaml")
    assert [Path(f.path).resolve() for f in loaded.files] == [tmp_path / "tests" / "test_mine.py"]
