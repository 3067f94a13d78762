"""A clone on its own runs every test: shared data is an extra layer, never the
only coverage (Note [Own fixtures first] in tests/conftest.py)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from tests.conftest import (
    OWN_ENVELOPES,
    OWN_SPYRE,
    SHARED_ENVELOPES,
    SHARED_SPYRE,
    Envelopes,
    SpyreConfigs,
    run,
)

ROOT = Path(__file__).resolve().parent.parent
SKIPS = {"skip", "skipif", "importorskip", "xfail"}


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _shared_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Where a module names the shared data or skips over it (docstrings aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    where = f"{path.relative_to(root)}"
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out += [f"{where}:{node.lineno}: imports {a.name}" for a in node.names
                    if a.name.startswith("SHARED")]  # fmt: skip
        elif isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name.startswith("SHARED"):
                out.append(f"{where}:{node.lineno}: uses {name}")
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        ):
            v = node.value
            if v == "shared" or "shared/" in v or "/shared" in v:
                out.append(f"{where}:{node.lineno}: names the shared folder ({v[:40]!r})")
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            text = " ".join(
                a.value
                for a in ast.walk(node)
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            )
            if name in SKIPS and "shared" in text:
                out.append(f"{where}:{node.lineno}: {name}(...) over shared data")
    return out


def test_only_conftest_knows_where_shared_data_lives() -> None:
    """A test that reads shared data goes through the `crcr`/`spyre` fixtures (or
    spyre_params), which always start with our own set: a module naming the shared
    folder itself, or skipping for its absence, would make a shared-only test."""
    mine = Path(__file__).resolve()
    files = [
        p
        for p in sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))
        if p.resolve() not in {mine, ROOT / "tests" / "conftest.py"}
    ]
    assert len(files) > 50
    found = [u for p in files for u in _shared_uses(p)]
    assert found == [], "write an own fixture under tests/fixtures instead:\n" + "\n".join(found)


def test_the_guard_sees_a_shared_only_test(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "import pytest\nfrom pathlib import Path\nfrom tests.conftest import SHARED\n"
        "def test_a():\n    if not (Path('..') / 'shared').is_dir():\n"
        "        pytest.skip('no shared data')\n"
    )
    uses = sorted(_shared_uses(bad, tmp_path), key=lambda u: int(u.split(":")[1]))
    got = [u.split(": ", 1)[1] for u in uses]
    assert got == [
        "imports SHARED",
        "names the shared folder ('shared')",
        "skip(...) over shared data",
    ]


def test_own_sets_hold_every_file_and_shared_only_adds() -> None:
    for own, shared, kind in (
        (OWN_ENVELOPES, SHARED_ENVELOPES, Envelopes),
        (OWN_SPYRE, SHARED_SPYRE, SpyreConfigs),
    ):
        assert own.folder.is_relative_to(ROOT / "tests" / "fixtures")
        assert sorted(p.name for p in own.folder.iterdir() if p.suffix != ".md") == sorted(
            kind.FILES
        )
        if shared.folder.is_dir():  # the real data, when here, has the same files
            assert set(kind.FILES) <= {p.name for p in shared.folder.iterdir()}


def test_data_sets_without_and_with_shared_data(tmp_path: Path) -> None:
    """$OOTEST_SHARED_DIR moves the shared location: empty, only our own sets are
    parametrized (and nothing waits on the rest); with data, the shared set follows."""
    code = (
        "import json; from tests import conftest as c; print(json.dumps("
        "[[s.origin for s in c.ENVELOPES], [s.origin for s in c.SPYRE_CONFIGS],"
        " c.pytest_report_header(None)]))"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    full = tmp_path / "full"
    (full / "fixtures" / "crcr").mkdir(parents=True)
    (full / "compat" / "torch-spyre").mkdir(parents=True)
    got = {}
    for where in (empty, full):
        r = run([sys.executable, "-c", code], env={"OOTEST_SHARED_DIR": str(where)})
        assert r.returncode == 0, r.stderr
        got[where.name] = json.loads(r.stdout)
    assert got["empty"][:2] == [["own"], ["own"]]
    assert (
        got["empty"][2] == f"shared data: none at {empty} (own fixtures under tests/fixtures only)"
    )
    assert got["full"][:2] == [["own", "shared"], ["own", "shared"]]
    assert str(full / "fixtures" / "crcr") in got["full"][2]
