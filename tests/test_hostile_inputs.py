"""The hostile-input suite (issue 28, items 8-16): files written only where asked,
whole or not at all, and indexes that survive what a test tree, a capture, a list
or a second writer throws at them.

Every input is small and bounded (each finishes in seconds, the suite in well under
a minute); ``CASES`` counts the inputs tried and ``test_the_count_of_inputs``
prints it (``-s``) and pins it, so a case cannot go missing quietly.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ootest.cli.main import main

ROOT = Path(__file__).resolve().parent.parent

CASES: dict[str, int] = {}  # section -> inputs tried (filled as tests run)


def tried(section: str, n: int = 1) -> None:
    CASES[section] = CASES.get(section, 0) + n


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


@contextlib.contextmanager
def readonly(folder: Path) -> Iterator[None]:
    """``folder`` read-only for this process: by its mode for a normal user, by a
    read-only tmpfs over it for root (whom modes do not stop); skipped where
    neither works."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    saved = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                       capture_output=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip("cannot make a read-only folder here (root without mount)")
    try:
        for name, data in saved.items():
            (folder / name).write_bytes(data)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


# ---------------------------------------------------------------- item 8: where files go
_VARIANT = {"kind": "variant", "variant_id": "test_a.py::T::test_x[dtype=float32]",
            "device_variant": True, "dtypes": ["float32"]}  # fmt: skip


def _select_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.jsonl").write_text(json.dumps(_VARIANT) + "\n")


@pytest.mark.parametrize("planted", ["s.yaml.tmp", "s.evidence.jsonl.tmp"])
def test_a_planted_tmp_symlink_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    planted: str,
) -> None:  # fmt: skip
    tried("files")
    _select_inputs(tmp_path, monkeypatch)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / planted).symlink_to(victim)
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", "s.yaml")
    assert rc == 0, err
    assert victim.read_text() == "precious\n"
    assert "test_a.py" in (tmp_path / "s.yaml").read_text()


def test_out_as_a_symlink_replaces_the_link_not_its_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("files")
    _select_inputs(tmp_path, monkeypatch)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "s.yaml").symlink_to(victim)
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", "s.yaml")
    assert rc == 0, err
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "s.yaml").is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_out_at_a_device_pipe_or_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:  # fmt: skip
    tried("files")
    _select_inputs(tmp_path, monkeypatch)
    target = tmp_path / "out"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
    else:
        target = Path("/dev/full")
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", str(target))
    assert rc == 2
    assert f"--out {target}: is " in one_line(err)
    assert Path("/dev/full").is_char_device()
    if kind == "fifo":
        assert target.is_fifo()


def test_write_atomic_refuses_a_device_and_leaves_no_temporary(tmp_path: Path) -> None:
    from ootest.atomic import NotRegularFile, write_atomic

    tried("files")
    os.mkfifo(tmp_path / "p")
    with pytest.raises(NotRegularFile):
        write_atomic(tmp_path / "p", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_two_writers_of_one_out_never_share_a_temporary(tmp_path: Path) -> None:
    from ootest.atomic import write_atomic

    tried("files")
    seen: list[str] = []

    def slow(f: Any) -> None:
        seen.extend(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
        f.write(b"a")

    write_atomic(tmp_path / "o", slow)
    write_atomic(tmp_path / "o", slow)
    assert len(set(seen)) == 2  # each write its own temporary


# ---------------------------------------------------------------- item 9: a full disk
_FDOPEN = os.fdopen


class _FullDisk(io.RawIOBase):
    """A file that takes 10 bytes and then says the disk is full."""

    def __init__(self, fd: int) -> None:
        self.fh = _FDOPEN(fd, "wb", buffering=0)
        self.left = 10

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        if len(data) > self.left:
            self.fh.write(data[: self.left])
            self.left = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= len(data)
        return int(self.fh.write(data) or 0)

    def close(self) -> None:
        self.fh.close()
        super().close()


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    import ootest.atomic

    monkeypatch.setattr(ootest.atomic.os, "fdopen", lambda fd, *a, **k: _FullDisk(fd))


def test_ops_enable_write_on_a_full_disk_leaves_the_config_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ootest.errors import UserError
    from ootest.opmap.enable import add_supported_op

    tried("full disk")
    cfg = tmp_path / "caps.yaml"
    old = "test_suite_config:\n  global:\n    supported_ops:\n      - add\n"
    cfg.write_text(old)
    edit = add_supported_op(cfg, "mul.Tensor")
    full_disk(monkeypatch)
    with pytest.raises(UserError) as e:
        edit.write()
    assert str(e.value) == (
        f"ops enable --write {cfg}: cannot write (No space left on device); {cfg} is unchanged"
    )
    assert cfg.read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.yaml"]


def test_select_run_on_a_full_disk_is_one_line_and_keeps_the_old_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("full disk")
    _select_inputs(tmp_path, monkeypatch)
    (tmp_path / "s.yaml").write_text("old\n")
    full_disk(monkeypatch)
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", "s.yaml")
    assert rc == 2
    assert "cannot write (No space left on device)" in one_line(err)
    assert (tmp_path / "s.yaml").read_text() == "old\n"


# ---------------------------------------------------------------- item 10: read-only targets
def test_select_run_into_a_read_only_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("read-only")
    _select_inputs(tmp_path, monkeypatch)
    ro = tmp_path / "ro"
    ro.mkdir()
    with readonly(ro):
        rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", "ro/s.yaml")
    assert rc == 2
    assert one_line(err).startswith("ootest: error: --out ro/s.yaml: ")


def test_scope_out_into_a_read_only_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("read-only")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text("def test_a(): pass\n")
    det = {"device": "x", "name": "x", "ops": {}}
    (tmp_path / "det.json").write_text(json.dumps(det))
    ro = tmp_path / "ro"
    ro.mkdir()
    with readonly(ro):
        rc, _, err = cli(capsys, "select", "scope", "--root", "t", "--detected", "det.json",
                         "--out", "ro/scope.yaml")  # fmt: skip
    assert rc == 2, err
    assert one_line(err).startswith("ootest: error: --out ro/scope.yaml: ")


def test_index_build_into_a_read_only_db_or_folder_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text("def test_a(): pass\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    argv = ["index", "build", "--root", "t", "--static-only"]
    assert cli(capsys, *argv, "--db", "ro/m.db")[0] == 0
    for db in ("ro/m.db", "ro/new.db"):  # an existing db, a new one
        tried("read-only")
        (tmp_path / "t" / "test_b.py").write_text("def test_b(): pass\n")
        with readonly(ro):
            rc, _, err = cli(capsys, *argv, "--db", db)
        assert rc == 2, err
        assert one_line(err).startswith(f"ootest: error: --db {db}: "), err


# ---------------------------------------------------------------- item 15: output to a closed pipe
@pytest.mark.parametrize("argv", [["config", "schema"], ["--help"]])
def test_output_into_a_closed_pipe_exits_quietly(argv: list[str]) -> None:
    tried("pipes")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.Popen([sys.executable, "-m", "ootest.cli", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader went away (`| head` done) before a line was read
    err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert "Traceback" not in err and "internal error" not in err, err
    assert err == "" and rc in (0, 141)


# ---------------------------------------------------------------- items 11, 12: hostile test trees
_GOOD = "def test_good():\n    '''findable words here'''\n"


def _hostile_tree(base: Path) -> tuple[Path, dict[str, str]]:
    """A test tree with one good file and one of each hostile kind; the warning
    each hostile one must give."""
    t = base / "t"
    t.mkdir()
    (t / "test_good.py").write_text(_GOOD)
    secret = base / ".env"
    secret.write_text("# the secret comment\nDB_PASSWORD=hunter2\n")
    (t / "test_zero.py").symlink_to("/dev/zero")
    os.mkfifo(t / "test_fifo.py")
    (t / "test_dangling.py").symlink_to(t / "gone.py")
    (t / "test_loop.py").symlink_to(t / "test_loop.py")
    (t / "test_out.py").symlink_to(secret)
    with open(t / "test_huge.py", "wb") as f:  # sparse: costs no disk
        f.truncate(17 * 2**20)
    expect = {
        "test_zero.py": "outside the roots",
        "test_fifo.py": "not a regular file",
        "test_dangling.py": "a dangling symlink",
        "test_loop.py": "a symlink loop",
        "test_out.py": "outside the roots",
        "test_huge.py": "over the 16,777,216-byte limit",
    }
    return t, expect


def test_index_build_reads_only_regular_files_inside_the_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    t, expect = _hostile_tree(tmp_path)
    (t / "test_inside.py").symlink_to(t / "test_good.py")  # a symlink inside: read
    tried("test trees", len(expect) + 1)
    rc, out, err = cli(capsys, "index", "build", "--root", "t", "--static-only", "--db", "m.db")
    assert rc == 0, err
    warned = {line.split(": ", 2)[1].rpartition("/")[2]: line for line in err.splitlines()
              if line.startswith("warning: ")}  # fmt: skip
    for name, why in expect.items():
        assert why in warned[name] and warned[name].endswith("; not indexed"), warned
    assert "files: 1 " in out  # the good file; the symlink to it is that file
    assert "test_inside.py: a symlink to another file of the tree; not indexed" in err
    rc, out, _ = cli(capsys, "index", "query", "--db", "m.db", "--json", "findable")
    assert rc == 0 and "test_good" in out
    for leak in ("hunter2", "DB_PASSWORD", "secret comment"):
        rc, out, _ = cli(capsys, "index", "query", "--db", "m.db", "--json", leak)
        assert leak not in out


_DEEP = {
    "sum_500": "x = " + "1 + " * 500 + "1\n",
    "unary_100000": "x = " + "-" * 100_000 + "1\n",
    "deep_in_a_test": "def test_deep():\n    x = " + "1 + " * 500 + "1\n",
    "parens_300": "x = " + "(" * 300 + "1" + ")" * 300 + "\n",
    "nul_bytes": "x = 1\0\n",
    "not_utf8": "x = '\udcff'\n",
}


def test_index_build_records_deep_expressions_per_file_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    t = tmp_path / "t"
    t.mkdir()
    (t / "test_good.py").write_text(_GOOD)
    for name, src in _DEEP.items():
        (t / f"test_{name}.py").write_bytes(src.encode("utf-8", "surrogateescape"))
    tried("test trees", len(_DEEP))
    rc, out, err = cli(capsys, "index", "build", "--root", "t", "--static-only", "--db", "m.db")
    assert rc == 0, err
    assert f"files: {len(_DEEP) + 1} " in out
    assert f"{len(_DEEP)} that do not parse" in out
    rc, out, _ = cli(capsys, "index", "query", "--db", "m.db", "--json", "findable")
    assert "test_good" in out


def test_the_parser_pool_survives_deep_files(tmp_path: Path) -> None:
    """More than a handful of changed files are parsed in a process pool: a
    RecursionError there was a crash of the whole pool map."""
    from ootest.memory._build import BuildOptions, build

    t = tmp_path / "t"
    t.mkdir()
    for i in range(20):
        (t / f"test_deep{i}.py").write_text(_DEEP["sum_500"])
    (t / "test_good.py").write_text(_GOOD)
    tried("test trees")
    rep = build(BuildOptions(roots=(t,), db=tmp_path / "m.db", variants=False, jobs=2))
    assert rep.parse_errors == 20 and rep.files_total == 21
