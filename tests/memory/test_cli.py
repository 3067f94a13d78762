"""``ootest index``: user errors are one clear line, read commands never import torch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ootest.memory import BuildOptions, build_index
from tests.conftest import ootest, run
from tests.memory.trees import write_plain


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("cli")
    root = write_plain(base)
    db = base / "memory.db"
    build_index(BuildOptions(roots=(root,), db=db, torch_db=False))
    return db


def error_of(*args: str, cwd: Path | None = None) -> str:
    r = ootest(*args, cwd=cwd)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r.stderr.strip()


def test_a_missing_root(tmp_path: Path) -> None:
    msg = error_of("index", "build", "--root", str(tmp_path / "nope"), "--db", str(tmp_path / "m"))
    assert msg == (
        f"ootest: error: --root {tmp_path / 'nope'}: does not exist; "
        "expected a folder of test files"
    )


def test_a_db_that_is_not_an_index(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("hello, not SQLite\n" * 100)
    msg = error_of("index", "stats", "--db", str(bad))
    assert msg == f"ootest: error: {bad}: not an ootest index (file is not a database)"


def test_a_missing_db(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    assert error_of("index", "query", "x", "--db", str(db)) == (
        f"ootest: error: {db}: no index there; build one with "
        f"'ootest index build --root PATH --db {db}'"
    )


def test_an_unknown_device(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    db = str(tmp_path / "m.db")
    msg = error_of("index", "build", "--root", str(root), "--db", db, "--device", "emu:nope")
    assert msg.startswith("ootest: error: emu: unknown profile 'nope'; expected one of ")
    assert msg.endswith(" or a path to a profile YAML file")
    msg = error_of("index", "build", "--root", str(root), "--db", db, "--device", "no_such_mod:x")
    assert msg == (
        "ootest: error: --device no_such_mod:x: no module 'no_such_mod' in this environment; "
        "install the backend package, or use 'emu[:profile]'"
    )
    msg = error_of("index", "build", "--root", str(root), "--db", db, "--device", "cuda")
    assert msg == (
        "ootest: error: --device cuda: no backend named 'cuda' can be loaded: no package here "
        "declares a 'torch.backends' entry point (torch's autoload); name the module that "
        "registers it: --device <module>:cuda"
    )
    msg = error_of("index", "build", "--root", str(root), "--db", db, "--device", "a b")
    assert msg == (
        "ootest: error: --device: expected 'emu', 'emu:<profile>', '<module>:<backend "
        "name>' (e.g. torch_spyre:spyre) or the name of a backend torch autoloads (e.g. spyre); "
        "found 'a b'"
    )
    assert not (tmp_path / "m.db").exists()


def test_a_bad_opdb_spec(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    msg = error_of(
        "index", "build", "--root", str(root), "--db", str(tmp_path / "m"), "--opdb", "nocolon"
    )
    assert msg == (
        "ootest: error: --opdb: expected 'module:attr' or 'path/to/file.py:attr', found 'nocolon'"
    )


def test_diffing_indexes_of_different_schemes(index: Path, tmp_path: Path) -> None:
    import shutil
    import sqlite3

    other = tmp_path / "other.db"
    shutil.copy(index, other)
    con = sqlite3.connect(other)
    con.execute("UPDATE meta SET value='0' WHERE key='scheme'")
    con.commit()
    con.close()
    assert error_of("index", "diff", str(other), str(index)) == (
        f"ootest: error: {other} uses fingerprint scheme 0, {index} scheme 2: their "
        "fingerprints are not comparable (every variant would differ); build both with the "
        "same ootest, the older one into a new file"
    )
    # nor is it updated in place: its rows would mix two recipes
    root = index.parent / "tests"
    assert error_of("index", "build", "--root", str(root), "--db", str(other), "--static-only") == (
        f"ootest: error: {other}: built with fingerprint scheme 0, this ootest uses scheme 2; "
        f"build into a new file (--db NEW.db) or remove {other}"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["index", "query", "helper", "--json"],
        ["index", "stats"],
        ["index", "diff", "{db}", "{db}"],
    ],
)
def test_read_commands_never_import_torch(index: Path, args: list[str]) -> None:
    argv = [a.replace("{db}", str(index)) for a in args]
    if argv[1] != "diff":
        argv += ["--db", str(index)]
    code = (
        "import sys\n"
        "from ootest.cli.main import main\n"
        f"rc = main({argv!r})\n"
        "assert rc == 0, rc\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    r = run([sys.executable, "-c", code])
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "False"


def test_query_table_keeps_brackets(index: Path) -> None:
    r = ootest("index", "query", "tests/test_a.py::test_many[n=2]", "--db", str(index))
    assert r.returncode == 0, r.stderr
    assert "tests/test_a.py::test_many[n=2]" in r.stdout
    assert "exact:variant id" in r.stdout


def test_query_json(index: Path) -> None:
    r = ootest("index", "query", "kumquat", "--db", str(index), "--json")
    hits = json.loads(r.stdout)
    assert [(h["kind"], h["key"], h["found_by"]) for h in hits] == [
        ("test", "tests/test_a.py::TestPlain::test_one", ["bm25"])
    ]
    assert hits[0]["snippet"].count("[kumquat]") == 1


def test_query_by_symbol_finds_the_tests_that_use_it(index: Path) -> None:
    r = ootest("index", "query", "helper", "--db", str(index), "--json")
    hits = [(h["kind"], h["key"], h["found_by"]) for h in json.loads(r.stdout)]
    # the tests using it are found twice (by name and by text): they come first
    assert hits == [
        ("test", "tests/test_a.py::TestPlain::test_one", ["exact:uses symbol", "bm25"]),
        ("test", "tests/test_a.py::test_many", ["exact:uses symbol", "bm25"]),
        ("symbol", "tests/test_a.py::helper", ["exact:function name"]),
    ]


def test_build_prints_the_summary_line(tmp_path: Path) -> None:
    root = write_plain(tmp_path)
    args = ("index", "build", "--root", str(root), "--db", str(tmp_path / "m.db"), "--no-torch-db")
    r = ootest(*args, "--static-only")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "parsed 3 of 3 files, 0 variants re-fingerprinted"
    r = ootest(*args, "--static-only")
    assert r.stdout.splitlines()[0] == "parsed 0 of 3 files, 0 variants re-fingerprinted"


def test_default_db_is_under_dot_ootest(tmp_path: Path) -> None:
    root = write_plain(tmp_path / "tree")
    r = ootest("index", "build", "--root", str(root), "--static-only", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / ".ootest" / "memory.db").is_file()


LAMBDAS = """
import pytest


@pytest.mark.parametrize("f", [lambda: 1, lambda: 2])
def test_twice(f):
    assert f()


@pytest.mark.parametrize("shape", ["a,b", "a;b", "(2, 3)"])
def test_shapes(shape):
    pass
"""


def test_build_reports_ids_that_do_not_select_exactly_their_variant(tmp_path: Path) -> None:
    """Note [Variant ID grammar]: two lambdas are both ``<lambda>``, ``a,b`` reads as
    ``a;b``: a config naming one would reach the other; index build says so."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "test_ids.py").write_text(LAMBDAS)
    r = ootest("index", "build", "--root", str(root), "--db", str(tmp_path / "m.db"),
               "--no-torch-db")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "2 variant IDs do not select exactly their variant as a config name" in out, out
    assert "test_ids.py::test_twice[f=<lambda>]: 2 variants have this ID" in out
    # the count is printed whatever it is (0 over a whole OpInfo file, issue 33)
    assert "variant IDs not exact as config names: 2 of 5 collected" in r.stdout, r.stdout
