"""The hostile-input suite (issue 28, items 8-16): files written only where asked,
whole or not at all, and indexes that survive what a test tree, a capture, a list
or a second writer throws at them; (issue 35) servers that answer with bombs or
echo a key, tests that print secrets or workflow commands.

Every input is small and bounded (each finishes in seconds, the suite in about a
minute). Each test says what it tries, ``tried(SECTION, N)`` with N a literal or
a name of this module; ``test_the_count_of_inputs`` adds those up from the
source (times each test's parametrize cases), prints the sum (``-s``) and pins
it, in every process, xdist workers included, so a case cannot go missing
quietly. ``CASES`` counts what this process tried, for the print.
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
from tests.conftest import ctrl_c_works

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
    else:  # a /dev/full of our own: a bug here must not replace the machine's
        import stat

        try:
            os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except OSError:
            pytest.skip("cannot make a device node here (not root)")
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", str(target))
    assert rc == 2
    assert f"--out {target}: is " in one_line(err)
    if kind == "device":
        assert target.is_char_device()
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


def test_a_config_and_its_sidecar_are_written_both_or_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills while the sidecar is written, after the config was: neither is
    replaced (a new config beside an old sidecar would give its skips old reasons)."""
    import ootest.atomic

    tried("full disk")
    _select_inputs(tmp_path, monkeypatch)
    (tmp_path / "s.yaml").write_text("old\n")
    (tmp_path / "s.evidence.jsonl").write_text("old sidecar\n")
    real = ootest.atomic.os.fdopen
    opened: list[int] = []

    def second_fills(fd: int, *a: Any, **k: Any) -> Any:
        opened.append(fd)
        return _FullDisk(fd) if len(opened) == 2 else real(fd, *a, **k)

    monkeypatch.setattr(ootest.atomic.os, "fdopen", second_fills)
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--out", "s.yaml")
    assert rc == 2 and len(opened) == 2
    assert "s.yaml and s.evidence.jsonl are unchanged" in one_line(err)
    assert (tmp_path / "s.yaml").read_text() == "old\n"
    assert (tmp_path / "s.evidence.jsonl").read_text() == "old sidecar\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


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
    tried("read-only", 2)
    for db in ("ro/m.db", "ro/new.db"):  # an existing db, a new one
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
    tried("test trees", 7)  # the six hostile files and a symlink inside the roots
    assert len(expect) + 1 == 7
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


def test_index_build_warnings_escape_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file name from the tree is text: a newline in it cannot start a workflow
    command of its own, an escape cannot colour the log (Note [Untrusted text])."""
    monkeypatch.chdir(tmp_path)
    t = tmp_path / "t"
    t.mkdir()
    (t / "test_good.py").write_text(_GOOD)
    (t / "test_x\n::error::pwned\x1b[31m.py").symlink_to(t / "gone.py")
    tried("test trees", 1)
    rc, _, err = cli(capsys, "index", "build", "--root", "t", "--static-only", "--db", "m.db")
    assert rc == 0, err
    assert "\x1b" not in err and not any(line.startswith("::") for line in err.splitlines())
    assert "test_x\\n::error::pwned\\x1b[31m.py" in err


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


# ------------------------------------------------------------ items 13, 14: kills, second writers
_STALLED_BUILD = """
import sys, time
from pathlib import Path
from ootest.memory._build import BuildOptions, build

def stall(files, settings, jobs, advance):
    Path(sys.argv[3]).write_text("collecting")
    time.sleep(120)
    raise AssertionError("not killed")

opts = BuildOptions(roots=(Path(sys.argv[1]),), db=Path(sys.argv[2]), torch_db=False)
build(opts, collector=stall)
"""


def _wait_for(path: Path, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build did not reach its variant part"
        time.sleep(0.05)


def test_a_killed_build_leaves_an_index_that_says_so_and_a_second_writer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    t = tmp_path / "t"
    t.mkdir()
    (t / "test_a.py").write_text(_GOOD)
    static = ["--root", "t", "--static-only", "--db", "m.db"]
    assert cli(capsys, "index", "build", *static)[0] == 0
    (t / "test_a.py").write_text(_GOOD + "def test_more(): pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", _STALLED_BUILD, "t", "m.db", "started"],
                            env=env, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _wait_for(tmp_path / "started", proc)
        tried("concurrency", 3)
        # a second build while the first writes: refused, in one line
        rc, _, err = cli(capsys, "index", "build", *static)
        assert rc == 2
        assert one_line(err) == (
            "ootest: error: --db m.db: another index build is writing it; wait for it to "
            "finish, or build into another --db"
        )
        # readers say a build is at work, not that the file is no index
        readers = (
            ["stats", "--db", "m.db"],
            ["query", "x", "--db", "m.db"],
            ["diff", "m.db", "m.db"],
        )
        for argv in readers:
            rc, _, err = cli(capsys, "index", *argv)
            assert rc == 2 and "an index build is writing it now" in one_line(err), err
    finally:
        proc.kill()
        proc.wait()
    tried("kills", 2)
    # killed: the index says it is incomplete instead of looking empty
    for argv in (["stats", "--db", "m.db"], ["diff", "m.db", "m.db"]):
        rc, _, err = cli(capsys, "index", *argv)
        assert rc == 2
        line = one_line(err)
        assert line.startswith("ootest: error: m.db: incomplete: the index build that started at ")
        assert line.endswith("did not finish (killed or crashed); build it again with "
                             "'ootest index build ... --db m.db'")  # fmt: skip
    assert cli(capsys, "index", "build", *static)[0] == 0  # built again: whole
    rc, _, err = cli(capsys, "index", "stats", "--db", "m.db")
    assert rc == 0, err


_SLOW_MODULE = """
import os, time
from pathlib import Path
Path(os.environ["OOTEST_TEST_MARK"]).write_text(str(os.getpid()))
time.sleep(120)

def test_x():
    pass
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_collection_children_die_with_a_killed_build(tmp_path: Path) -> None:
    import importlib.util
    import time

    if importlib.util.find_spec("torch") is None or not sys.platform.startswith("linux"):
        pytest.skip("the variant part needs torch; PR_SET_PDEATHSIG needs Linux")
    tried("kills")
    t = tmp_path / "t"
    t.mkdir()
    (t / "test_slow.py").write_text(_SLOW_MODULE)
    mark = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OOTEST_TEST_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-m", "ootest.cli", "index", "build", "--root",
                             str(t), "--db", str(tmp_path / "m.db"), "--no-torch-db"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _wait_for(mark, proc, 120)
        time.sleep(0.2)
        child = int(mark.read_text())
        assert _alive(child)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the collection child outlived the killed build"


def test_concurrent_ops_merges_into_one_new_db_serialize(tmp_path: Path) -> None:
    from ootest.opmap.ingest import ingest_records
    from ootest.opmap.store import OpStore
    from tests.opmap.conftest import PROV, ops, stop

    srcs = []
    for i in range(3):
        db = tmp_path / f"s{i}.db"
        with OpStore.open(db, create=True) as s:
            vid = f"test_a.py::T::test_{i}"
            ingest_records(s, [PROV, ops(vid, {"aten::add.Tensor": 1}), stop(vid)], source="t")
        srcs.append(str(db))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    n = 4
    tried("concurrency", 4)
    procs = [subprocess.Popen([sys.executable, "-m", "ootest.cli", "ops", "merge", *srcs, "--db",
                               "m.db"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(n)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        assert b"Traceback" not in err and b"UNIQUE" not in err
    with OpStore.open(tmp_path / "m.db") as s:
        rows = s.connection.execute("SELECT count(*) FROM variant").fetchone()[0]
    assert rows == 3


# ---------------------------------------------------------------- item 15: captures, lists, limits
_PROV = {"kind": "provenance", "torch_version": "2.13.0", "torch_git": "a", "device": "emu",
         "profile": "full", "ootest_version": "0", "time": 1.0}  # fmt: skip
_OPS_LINE = {"kind": "ops", "variant_id": "a.py::T::t", "ops": {"aten::add.Tensor": 1}}

_MANY_OPS = {f"aten::op{i}": 1 for i in range(200_000)}
_CAPTURES: dict[str, tuple[str, str]] = {  # name -> (file text, what the one error line says)
    "deep_line": (
        json.dumps(_PROV) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n" + json.dumps(_PROV) + "\n",
        "capture.jsonl:2: expected a capture record (a flat JSON object); found JSON nested too "
        "deeply to read",
    ),
    "deep_last_line": (
        json.dumps(_PROV) + "\n" + '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n",
        "capture.jsonl:2: expected a capture record (a flat JSON object); found JSON nested too "
        "deeply to read",
    ),
    "200000_op_names": (
        json.dumps(_PROV) + "\n" + json.dumps({**_OPS_LINE, "ops": _MANY_OPS}),
        "capture.jsonl:2: ops: expected at most 32,768 op names in one variant; found 200,000",
    ),
    "count_2_63": (
        json.dumps(_PROV) + "\n" + json.dumps({**_OPS_LINE, "ops": {"aten::add.Tensor": 2**63}}),
        "counts below 2**63",
    ),
    "count_float": (
        json.dumps(_PROV) + "\n" + json.dumps({**_OPS_LINE, "ops": {"aten::add.Tensor": 1e20}}),
        "counts below 2**63",
    ),
    "garbage_one_line": (
        "hello world\n",
        "capture.jsonl:1: expected a JSON object (a capture record); found 'hello world'",
    ),
}


@pytest.mark.parametrize("name", sorted(_CAPTURES))
def test_ops_ingest_refuses_hostile_captures_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    tried("captures")
    monkeypatch.chdir(tmp_path)
    text, expect = _CAPTURES[name]
    (tmp_path / "capture.jsonl").write_text(text)
    rc, _, err = cli(capsys, "ops", "ingest", "capture.jsonl", "--db", "ops.db")
    assert rc == 2
    assert expect in one_line(err)


def test_many_op_names_over_several_records_are_refused(tmp_path: Path) -> None:
    from ootest.errors import UserError
    from ootest.opmap.ingest import ingest_records
    from ootest.opmap.store import OpStore

    tried("captures")
    recs = [_PROV] + [
        {**_OPS_LINE, "ops": {f"aten::op{i}_{j}": 1 for j in range(20_000)}} for i in range(2)
    ]
    with OpStore.open(tmp_path / "o.db", create=True) as s, pytest.raises(UserError) as e:
        ingest_records(s, recs)
    assert "expected at most 32,768 op names in one variant; found 40,000" in str(e.value)


_BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
ops: [*g,*g,*g,*g,*g,*g,*g,*g,*g]
"""

_LISTS: dict[str, tuple[bytes, str]] = {  # name -> (bytes, what the error line says)
    "alias_bomb.yaml": (_BOMB.encode(), "once YAML aliases are expanded; found more"),
    "latin1.txt": ("aten::add.Tensor\n# caf\xe9\n".encode("latin-1"),
                   "latin1.txt:2: expected UTF-8 text; found the byte 0xe9"),
    "latin1.yaml": ("ops: [add]  # caf\xe9\n".encode("latin-1"),
                    "latin1.yaml:1: expected UTF-8 text; found the byte 0xe9"),
    "deep.yaml": (b"ops: " + b"[" * 5000 + b"]" * 5000, "expected YAML; found a syntax error"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_LISTS))
def test_supported_lists_are_bounded_and_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    tried("lists")
    _select_inputs(tmp_path, monkeypatch)
    data, expect = _LISTS[name]
    (tmp_path / name).write_bytes(data)
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--supported", name,
                     "--dtypes", "float32", "--out", "s.yaml")  # fmt: skip
    assert rc == 2, err
    assert expect in one_line(err)


_PREFS: dict[str, tuple[bytes, str]] = {
    "latin1": ("notes: caf\xe9\n".encode("latin-1"), "expected UTF-8 text; found the byte 0xe9"),
    "duplicate_key": (b"notes: one\nnotes: two\n",
                      "prefs.yaml:2: duplicate key 'notes' (first at line 1); keep one"),
    "alias_bomb": (_BOMB.encode(), "once YAML aliases are expanded; found more"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_PREFS))
def test_prefs_are_decoded_bounded_and_keys_unique(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    tried("lists")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text("def test_a(): pass\n")
    (tmp_path / "det.json").write_text(json.dumps({"device": "x", "name": "x", "ops": {}}))
    data, expect = _PREFS[name]
    (tmp_path / "prefs.yaml").write_bytes(data)
    rc, _, err = cli(capsys, "select", "scope", "--root", "t", "--detected", "det.json",
                     "--prefs", "prefs.yaml")  # fmt: skip
    assert rc == 2, err
    assert expect in one_line(err)


@pytest.mark.parametrize("limit", ["99999999999999999999", "-99999999999999999999"])
def test_huge_integer_options_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    tried("limits")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["index", "query", "--limit", limit, "x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --limit: expected an integer below 2**63; found {limit}" in err
    assert "Traceback" not in err


_RESULTS: dict[str, tuple[str, str]] = {
    "latin1.xml": ("xml", "not valid JUnit XML"),
    "zero": ("/dev/zero", "found more (a device or an endless stream?)"),
    "folder": ("folder", "is a folder; expected a file"),
}


@pytest.mark.parametrize("name", sorted(_RESULTS))
def test_relay_report_results_are_bounded(tmp_path: Path, name: str) -> None:
    from ootest.atomic import read_bounded
    from ootest.errors import UserError
    from ootest.relay.report import test_results

    tried("results")
    kind, expect = _RESULTS[name]
    if kind == "xml":
        path = tmp_path / name
        path.write_bytes('<?xml version="1.0" encoding="utf-8"?><a b="caf\xe9"/>'.encode("latin-1"))
    elif kind == "folder":
        path = tmp_path
    else:
        path = Path(kind)
    with pytest.MonkeyPatch.context() as m:  # a small bound: /dev/zero is endless anyway
        m.setattr(read_bounded, "__kwdefaults__", {"limit": 1 << 20})
        with pytest.raises(UserError) as e:
            test_results(path)
    assert expect in str(e.value)


def test_relay_report_results_not_utf8_jsonl_counts_the_good_lines(tmp_path: Path) -> None:
    from ootest.relay.report import test_results

    tried("results")
    good = {"kind": "result", "variant_id": "a.py::t", "nodeid": "a.py::t", "outcome": "passed",
            "phase": "call", "file": "a.py"}  # fmt: skip
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(good).encode() + b"\n\xff\xfe torn\n")
    assert test_results(path)["total"] >= 0  # no traceback; the torn line is skipped


def _diamonds(folder: Path, levels: int) -> Path:
    for i in range(levels):
        ext = [f"f{i + 1}a.yaml", f"f{i + 1}b.yaml"] if i < levels - 1 else []
        for s in "ab":
            (folder / f"f{i}{s}.yaml").write_text(
                f"test_suite_config:\n  extends: {json.dumps(ext)}\n  labels: [l{i}{s}]\n"
            )
    return folder / "f0a.yaml"


def test_a_chain_of_extends_diamonds_is_read_once_per_file(tmp_path: Path) -> None:
    import time

    from ootest.config.load import load_config

    tried("configs")
    top = _diamonds(tmp_path, 18)  # 2**17 reads before: minutes, then MemoryError
    started = time.perf_counter()
    cfg = load_config(top)
    assert time.perf_counter() - started < 10
    assert len(cfg.sources) == 35  # every file once
    assert len(cfg.suite.labels) == 35


# ---------------------------------------------------------------- item 16: a recording that dies
_DIES = """\
import os, signal, sys, time
import torch
x = torch.ones(3)
for _ in range(4):
    y = x * 2
time.sleep(1.1)  # a snapshot of the counts goes to the journal at the next call
y = x * 2
z = torch.cat([x, y])
sys.stdout.flush()
{death}
"""


@pytest.mark.parametrize("death", ["segfault", "sigkill", "sigterm", "sigint"])
def test_model_record_keeps_the_calls_of_a_script_that_dies(tmp_path: Path, death: str) -> None:
    import importlib.util
    import signal as sig

    if importlib.util.find_spec("torch") is None:
        pytest.skip("recording needs torch")
    tried("recordings")
    how = {
        "segfault": "import ctypes; ctypes.string_at(0)",
        "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
        "sigterm": "os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)",
        "sigint": "os.killpg(0, signal.SIGINT); time.sleep(5)",  # Ctrl-C: the group gets it
    }[death]
    (tmp_path / "m.py").write_text(_DIES.format(death=how))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-m", "ootest.cli", "model", "record", "--tag", "model__x",
                        "--", sys.executable, "m.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120, start_new_session=True,
                       preexec_fn=ctrl_c_works)  # fmt: skip
    assert "Traceback" not in r.stderr or death in ("sigint",), r.stderr
    assert r.returncode == (130 if death == "sigint" else 1), r.stderr
    expect = {
        "segfault": "ootest: the script died (SIGSEGV): ops.yaml holds the calls recorded",
        "sigkill": "ootest: the script died (SIGKILL): ops.yaml holds the calls recorded",
        "sigterm": f"ootest: the script exited with {128 + sig.SIGTERM}: ops.yaml holds",
        "sigint": "ootest: the script exited with 1: ops.yaml holds",
    }[death]
    assert expect in r.stderr, r.stderr
    import yaml

    doc = yaml.safe_load((tmp_path / "ops.yaml").read_text())
    calls = doc["test_suite_config"]["files"][0]["tests"][0]["edits"]["ops"]["include"]
    by_name = {c["name"]: c for c in calls}
    assert set(by_name) == {"torch.ones", "torch.Tensor.mul", "torch.cat"}
    assert by_name["torch.Tensor.mul"]["count"] >= 4  # counts as of the last snapshot


# ---------------------------------------------------------------- issue 35 items 1-4, 9
class Loopback:
    """An HTTP server on 127.0.0.1 that gives every request one fixed answer
    (status, headers, body), and keeps the headers it was sent."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.seen = []  # type: list[dict[str, str]]

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append(dict(self.headers))
                n = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
                self.rfile.read(n)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up, as it should

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, compresslevel=9, mtime=0)


# 64 MiB of zeros: what the old code decoded in one piece (a real bomb is larger,
# but this one is enough to tell a bounded reader from an unbounded one here)
_INNER = 64 << 20
_BOMBS = {
    "gzip": ("gzip", lambda: _gzip(bytes(_INNER))),
    "gzip, gzip": ("gzip, gzip", lambda: _gzip(_gzip(bytes(_INNER)))),
}
_PEAK = 8 << 20  # what "a few MB" means here: the answers may hold 1 MiB


def _peak(call: Any) -> tuple[int, Any]:
    """(peak bytes Python allocated while ``call`` ran, what it returned)."""
    import tracemalloc

    tracemalloc.start()
    try:
        out = call()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {name: make() for name, (_, make) in _BOMBS.items()}


@pytest.mark.parametrize("bomb", sorted(_BOMBS))
def test_a_gzip_bomb_from_the_judge_endpoint_is_cut_at_its_bound(
    bombs: dict[str, bytes], tmp_path: Path, bomb: str
) -> None:
    from ootest.llm import LLMSettings
    from ootest.select.judge import AnswerCache, Case, judge

    tried("answers")
    server = Loopback(200, {"Content-Encoding": _BOMBS[bomb][0]}, bombs[bomb])
    try:
        case = Case("test/test_a.py::T::test_x", ("float32",), (), None, None, None, "open")
        settings = LLMSettings(server.url + "/v1", "tiny", "k3y-of-the-judge", timeout=20)
        peak, (verdicts, _) = _peak(
            lambda: judge([case], set(), settings, AnswerCache(tmp_path / "cache"))
        )
    finally:
        server.close()
    why = verdicts[case.variant_id].record["rejected"]
    assert "the response is larger than 262144 bytes" in why, why
    assert server.seen[0]["Accept-Encoding"] == "identity"
    assert peak < _PEAK, f"peak {peak:,} bytes"


@pytest.mark.parametrize("bomb", sorted(_BOMBS))
def test_a_gzip_bomb_from_the_summaries_endpoint_is_one_line(
    bombs: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str], bomb: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from ootest.memory import BuildOptions, build_index
    from tests.memory.trees import write_plain

    tried("answers")
    db = tmp_path / "memory.db"
    build_index(BuildOptions(roots=(write_plain(tmp_path),), db=db, torch_db=False, variants=False))
    for name in ("OOTEST_LLM_API_KEY", "OPENAI_API_KEY", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = Loopback(200, {"Content-Encoding": _BOMBS[bomb][0]}, bombs[bomb])
    try:
        argv = ["index", "summarize", "--db", str(db), "--endpoint", server.url + "/v1",
                "--model", "tiny", "--limit", "1"]  # fmt: skip
        peak, rc = _peak(lambda: main(argv))
    finally:
        server.close()
    err = capsys.readouterr().err
    assert rc == 2
    assert one_line(err) == (
        f"ootest: error: {server.url}/v1/chat/completions: the response is larger than "
        "1048576 bytes"
    )
    assert peak < _PEAK, f"peak {peak:,} bytes"


_JOB_ENV = {"GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "o/r", "GITHUB_JOB": "j",
            "OOTEST_RELAY_TOKEN": "relay-t0ken-value"}  # fmt: skip


@pytest.mark.parametrize("bomb", sorted(_BOMBS))
@pytest.mark.parametrize("where", ["relay", "oidc"])
def test_a_gzip_bomb_from_the_relay_or_the_token_service_is_one_line(
    bombs: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str], bomb: str,
    where: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    tried("answers")
    monkeypatch.chdir(tmp_path)
    for k, v in _JOB_ENV.items():
        monkeypatch.setenv(k, v)
    status = 400 if where == "relay" else 200
    server = Loopback(status, {"Content-Encoding": _BOMBS[bomb][0]}, bombs[bomb])
    if where == "oidc":
        monkeypatch.delenv("OOTEST_RELAY_TOKEN")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", server.url + "/token")
        monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "req-t0ken-value")
    try:
        argv = ["relay", "report", "--relay-url", server.url, "--nightly", "a" * 40,
                "--status", "completed", "--conclusion", "success", "--attempts", "1",
                "--state-dir", str(tmp_path / "state")]  # fmt: skip
        peak, rc = _peak(lambda: main(argv))
    finally:
        server.close()
    err = capsys.readouterr().err
    assert rc == 1, err
    path = "/github/callback" if where == "relay" else "/token"
    assert "Traceback" not in err, err
    assert err.splitlines()[-1] == (
        f"ootest relay: {server.url}{path}: the response is larger than 1048576 bytes"
    )
    assert peak < _PEAK, f"peak {peak:,} bytes"


_KEY = "k3y/of+the=judge/0123456789"  # looks like no known credential: only its value tells
_ECHOES = {  # name -> (status, body): how a server may give the key back
    "json_escaped_slash": (401, b'{"error": "who is ' + _KEY.replace("/", "\\/").encode() + b'?"}'),
    "url_encoded": (401, b"see https://llm.test/keys?u=k3y%2fof%2Bthe%3Djudge%2F0123456789"),
    "straddles_300": (401, b"x" * 295 + _KEY.encode()),
    "straddles_200": (200, b"y" * 195 + _KEY.encode()),
}


@pytest.mark.parametrize("echo", sorted(_ECHOES))
def test_the_judge_key_echoed_in_any_form_is_not_stored(tmp_path: Path, echo: str) -> None:
    from ootest.llm import LLMSettings
    from ootest.select.judge import AnswerCache, Case, judge

    tried("secrets")
    status, body = _ECHOES[echo]
    server = Loopback(status, {"Content-Type": "application/json"}, body)
    try:
        case = Case("test/test_a.py::T::test_x", ("float32",), (), None, None, None, "open")
        settings = LLMSettings(server.url + "/v1", "tiny", _KEY, timeout=20)
        verdicts, _ = judge([case], set(), settings, AnswerCache(tmp_path / "cache"))
    finally:
        server.close()
    why = verdicts[case.variant_id].record["rejected"]  # what the sidecar gets
    assert "[reda" in why, why
    for part in (_KEY[:5], "k3y\\/of", "k3y%2f"):
        assert part not in why, why


@pytest.mark.parametrize("cut", [190, 195, 199])
def test_a_relay_token_straddling_the_cut_is_not_printed(cut: int) -> None:
    from ootest.relay.report import remote_text

    tried("secrets")
    token = "relay/t0ken+value=0123456789"
    got = remote_text("z" * cut + token.replace("/", "\\/"), secrets=(token,))
    assert "relay" not in got and got.endswith("z[redacted]"[: 200 - cut + 1]), got


_LEAKY = """\
import os

NAMES = ("OOTEST_JUDGE_API_KEY", "OOTEST_RELAY_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")


def test_no_secret_in_my_environment():
    assert [k for k in NAMES if k in os.environ] == []


def _found_elsewhere():
    pid = os.getppid()  # an ancestor's environment is readable: the token is there
    while pid > 1:
        for x in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0"):
            if x.startswith(b"OOTEST_RELAY_TOKEN="):
                return x.split(b"=", 1)[1].decode()
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    return "none found"


def test_a_secret_found_elsewhere_is_printed():
    tok = _found_elsewhere()
    print("the token:", tok)
    assert False, "the token is " + tok
"""
_SECRETS = {"OOTEST_RELAY_TOKEN": "relay-t0ken-0123456789", "GH_TOKEN": "gh-t0ken-0123456789",
            "OOTEST_JUDGE_API_KEY": "judge-k3y-0123456789",
            "GITHUB_TOKEN": "ghs_gh1thub0token0123456789"}  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_run_hands_no_secret_to_its_tests_and_writes_none(tmp_path: Path) -> None:
    from tests.conftest import ootest

    tried("secrets")
    (tmp_path / "test_leak.py").write_text(_LEAKY)
    (tmp_path / "cfg.yaml").write_text(
        "test_suite_config:\n  files:\n    - path: ./test_leak.py\n"
        "      unlisted_test_mode: mandatory_success\n"
    )
    r = ootest("run", "cfg.yaml", cwd=tmp_path, env=_SECRETS)
    assert r.returncode == 1, r.stdout + r.stderr
    outs = [r.stdout + r.stderr]
    for fmt in ("table", "summary", "html"):
        got = ootest("report", ".ootest/results.jsonl", "--format", fmt, cwd=tmp_path, env=_SECRETS)
        assert got.returncode == 0, got.stderr
        outs.append(got.stdout)
    written = {p.name: p.read_text(errors="replace") for p in (tmp_path / ".ootest").iterdir()
               if p.is_file()}  # fmt: skip
    recs = [json.loads(x) for x in written["results.jsonl"].splitlines()]
    by = {r["nodeid"].rsplit("::", 1)[-1]: r for r in recs if r.get("kind") == "result"}
    assert by["test_no_secret_in_my_environment"]["outcome"] == "passed"
    assert "the token is [redacted]" in by["test_a_secret_found_elsewhere_is_printed"]["message"]
    assert "the token: [redacted]" in written["pytest.log"]
    assert set(written) >= {"results.jsonl", "pytest.log", "report.html", "junit.xml"}
    for name, text in [*written.items(), *(("output", o) for o in outs)]:
        assert "t0ken-0123" not in text and "k3y-0123" not in text, name


def test_the_pull_request_body_keeps_no_secret_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ootest.select.refresh import pr_body

    tried("secrets")
    for k, v in _SECRETS.items():
        monkeypatch.setenv(k, v)
    tok = _SECRETS["OOTEST_RELAY_TOKEN"]
    before = "test_suite_config:\n  files: []\n"
    after = f"test_suite_config:\n  files: []  # reason: {tok}\n"
    body = pr_body("suite.yaml", before, after, {"memory_diff": f"saw {tok}"}, [])
    assert tok not in body and "[redacted]" in body


_PWN = "::error::pwned_" + "z" * 20
_WRAPPED = {  # a failure message rich wrapped at a space in a log with no TTY
    "after_40": "x" * 40 + " " + _PWN,
    "after_100": "y" * 100 + " " + _PWN,
    "after_blanks": "w" * 60 + "    " + _PWN,
}


def _no_line_starts_with_test_text(out: str) -> None:
    for line in out.splitlines():
        assert not line.lstrip().startswith("::"), line
        assert not line.lstrip().startswith(("xxxx", "yyyy", "wwww", "zzzz")), line


def _failed_results(folder: Path) -> Path:
    recs = [{"kind": "result", "variant_id": f"test_w.py::test_{n}",
             "nodeid": f"test_w.py::test_{n}", "file": "test_w.py", "outcome": "failed",
             "phase": "call", "message": "AssertionError: " + msg}
            for n, msg in sorted(_WRAPPED.items())]  # fmt: skip
    path = folder / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_a_report_table_starts_no_line_with_a_failure_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("wrapping", len(_WRAPPED))
    rc, out, _ = cli(capsys, "report", str(_failed_results(tmp_path)), "--format", "table")
    assert rc == 0 and _PWN in out
    _no_line_starts_with_test_text(out)


def test_a_run_prints_no_line_that_starts_with_a_failure_message(tmp_path: Path) -> None:
    from tests.conftest import ootest

    tried("wrapping")
    (tmp_path / "test_w.py").write_text(
        "".join(
            f"def test_{n}():\n    raise AssertionError({m!r})\n\n" for n, m in _WRAPPED.items()
        )
    )
    (tmp_path / "cfg.yaml").write_text(
        "test_suite_config:\n  files:\n    - path: ./test_w.py\n"
        "      unlisted_test_mode: mandatory_success\n"
    )
    r = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count(_PWN) >= 3
    _no_line_starts_with_test_text(r.stdout + r.stderr)


def test_select_review_starts_no_line_with_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tried("wrapping")
    monkeypatch.chdir(tmp_path)
    vid = "test/test_w.py::TestW::test_w"
    row = {
        "decision": {"variant_id": vid, "mode": "skip", "reason": "op_unsupported:" + "x" * 90
                     + " " + _PWN, "evidence": [_WRAPPED["after_100"]], "source": "rules"},
        "evidence": {"variant_id": vid, "dtypes": [], "ops": [], "missing_ops": [],
                     "missing_dtypes": [], "cpu": None, "reference": None, "observed": []},
        "fingerprint": "",
    }  # fmt: skip
    (tmp_path / "s.yaml").write_text("test_suite_config:\n  files: []\n")
    (tmp_path / "s.evidence.jsonl").write_text(json.dumps(row) + "\n")
    rc, out, err = cli(capsys, "select", "review", "s.yaml")
    assert rc == 0, err
    assert "pwned_" in out
    _no_line_starts_with_test_text(out + err)


def test_a_progress_display_on_a_terminal_still_ends(tmp_path: Path) -> None:
    """The guarded console under a rich progress display, on a terminal: the
    display points sys.stderr at the console, which must not write back to it."""
    import pty

    tried("wrapping")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text("def test_a(): pass\n")
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        r = subprocess.run([sys.executable, "-m", "ootest.cli", "index", "build", "--root", "t",
                            "--static-only", "--db", "m.db"], cwd=tmp_path, env=env,
                           stdin=follower, stdout=follower, stderr=follower,
                           timeout=60)  # fmt: skip
    finally:
        os.close(follower)
        os.close(leader)
    assert r.returncode == 0


def test_no_console_line_starts_with_a_workflow_command() -> None:
    from rich.table import Table

    from ootest.untrusted import console, for_rich

    tried("wrapping")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        c = console(width=40)
        t = Table(title=for_rich("x" * 30 + " " + _PWN), box=None, show_header=False)
        t.add_column("a")
        t.add_row(for_rich(_PWN))
        c.print(t)
        c.print(":", end="")
        c.print(for_rich(":warning::split over two writes"))
    out = buf.getvalue()
    assert "pwned_" in out and "warning" in out
    # a borderless table's cells and a wrapped title may start a line: never a command
    assert [x for x in out.splitlines() if x.lstrip().startswith("::")] == [], out


def test_the_probe_error_repeats_no_secret_of_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ootest.errors import UserError
    from ootest.select.scope import detect

    tried("item 9")
    (tmp_path / "leaky_backend.py").write_text(
        "import os\nraise RuntimeError('login failed for ' + os.environ.get('LEAK', '?') + "
        "' ghp_abcdefghijklmnop1234')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("LEAK", "relay-t0ken-0123456789")  # the token, found elsewhere
    monkeypatch.setenv("OOTEST_RELAY_TOKEN", "relay-t0ken-0123456789")
    with pytest.raises(UserError) as e:
        detect("leaky_backend:foo", timeout=300)
    msg = str(e.value)
    assert "RuntimeError: login failed for [redacted] [redacted]" in msg, msg
    assert "t0ken" not in msg and "ghp_" not in msg


@pytest.mark.parametrize("argv", [["select", "refine", "s.yaml", "--results", "r.jsonl"],
                                  ["select", "audit", "s.yaml", "--sample", "2"],
                                  ["select", "review", "s.yaml"]])  # fmt: skip
def test_an_evidence_sidecar_that_is_a_pipe_is_named_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:  # fmt: skip
    tried("item 9")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("test_suite_config:\n  files: []\n")
    (tmp_path / "r.jsonl").write_text("")
    os.mkfifo(tmp_path / "s.evidence.jsonl")
    rc, _, err = cli(capsys, *argv)
    assert rc == 2
    assert one_line(err) == (
        "ootest: error: s.evidence.jsonl: expected the evidence file 'ootest select run' wrote "
        "next to the config (a regular file); found a pipe, device or socket"
    )


@pytest.mark.parametrize("shards", ["-1", "0", "257"])
def test_init_refuses_a_shards_value_the_matrix_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shards: str
) -> None:
    from ootest.relay.matrix import MAX_JOBS

    tried("item 9")
    rc, _, err = cli(capsys, "init", "--dir", str(tmp_path), "--device", "foo", "--shards", shards)
    assert rc == 2
    assert one_line(err) == (
        f"ootest: error: --shards: expected a number from 1 to {MAX_JOBS} (GitHub runs at most "
        f"{MAX_JOBS} jobs of one matrix), found {shards}; pass e.g. 1"
    )
    assert list(tmp_path.iterdir()) == []


def test_init_writes_the_largest_shards_value_the_matrix_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ootest.relay.matrix import MAX_JOBS, combination_matrix

    tried("item 9")
    rc, _, err = cli(capsys, "init", "--dir", str(tmp_path), "--device", "foo", "--shards",
                     str(MAX_JOBS))  # fmt: skip
    assert rc == 0, err
    workflow = next((tmp_path / ".github" / "workflows").glob("*.yml")).read_text()
    assert f"--shards {MAX_JOBS}" in workflow
    assert len(combination_matrix("a" * 40, ["ootest.yaml"], shards=MAX_JOBS)["include"]) == 256


@pytest.mark.parametrize("fmt", ["coverage", "table"])
def test_report_writes_every_format_to_o(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    tried("item 9")
    monkeypatch.chdir(tmp_path)
    vid = "a.py::T::t"
    (tmp_path / "cap.jsonl").write_text(
        json.dumps(_PROV) + "\n" + json.dumps({**_OPS_LINE, "variant_id": vid}) + "\n"
    )
    assert cli(capsys, "ops", "ingest", "cap.jsonl", "--db", "ops.db")[0] == 0
    (tmp_path / "r.jsonl").write_text(json.dumps(
        {"kind": "result", "variant_id": vid, "nodeid": vid, "file": "a.py", "outcome": "passed",
         "phase": "call", "op": "aten::add.Tensor"}) + "\n")  # fmt: skip
    rc, out, err = cli(capsys, "report", "r.jsonl", "--format", fmt, "--ops", "ops.db",
                       "-o", "out.txt")  # fmt: skip
    assert rc == 0, err
    assert out == ""
    written = (tmp_path / "out.txt").read_text()
    assert ("aten::add.Tensor" if fmt == "coverage" else "ootest summary") in written
    assert "\x1b[" not in written  # plain text, no terminal colours


def test_index_summarize_takes_no_key_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tried("item 9")
    for name in ("OOTEST_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    rc, _, err = cli(capsys, "index", "summarize", "--db", str(tmp_path / "m.db"), "--endpoint",
                     "http://127.0.0.1:9/v1", "--model", "m", "--api-key", "sk-x")  # fmt: skip
    assert rc == 2
    assert one_line(err) == (
        "ootest: error: --api-key: expected no key on the command line (every user of the "
        "machine sees it, and the shell keeps it); put it in a file and pass --api-key-file "
        "FILE, or set OOTEST_LLM_API_KEY"
    )


@pytest.mark.parametrize("kind", ["file", "fifo", "empty"])
def test_index_summarize_reads_the_key_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from ootest.memory import BuildOptions, build_index
    from tests.memory.trees import write_plain

    tried("item 9")
    for name in ("OOTEST_LLM_API_KEY", "OPENAI_API_KEY", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    db = tmp_path / "memory.db"
    build_index(BuildOptions(roots=(write_plain(tmp_path),), db=db, torch_db=False, variants=False))
    key = tmp_path / "key.txt"
    if kind == "fifo":
        os.mkfifo(key)
    else:
        key.write_text("" if kind == "empty" else "k3y-from-a-file\n")
    answer = json.dumps({"choices": [{"message": {"content": "Checks a thing."}}]}).encode()
    server = Loopback(200, {"Content-Type": "application/json"}, answer)
    try:
        rc, _, err = cli(capsys, "index", "summarize", "--db", str(db), "--endpoint",
                           server.url + "/v1", "--model", "m", "--limit", "1",
                           "--api-key-file", str(key))  # fmt: skip
    finally:
        server.close()
    if kind == "file":
        assert rc == 0, err
        assert server.seen[0]["Authorization"] == "Bearer k3y-from-a-file"
        return
    assert rc == 2 and server.seen == []
    found = (
        "is a device, pipe or socket; expected a regular file"
        if kind == "fifo"
        else "expected the API key; the file is empty"
    )
    assert one_line(err) == f"ootest: error: --api-key-file {key}: {found}"


def test_two_capture_lines_of_the_most_calls_add_up_to_an_integer(tmp_path: Path) -> None:
    import sqlite3

    tried("item 9")
    line = json.dumps({**_OPS_LINE, "ops": {"aten::add.Tensor": 2**63 - 1}})
    (tmp_path / "cap.jsonl").write_text(json.dumps(_PROV) + f"\n{line}\n{line}\n")
    assert main(["ops", "ingest", str(tmp_path / "cap.jsonl"), "--db", str(tmp_path / "o.db")]) == 0
    con = sqlite3.connect(tmp_path / "o.db")
    rows = con.execute("SELECT calls, typeof(calls) FROM edge").fetchall()
    con.close()
    assert rows == [(2**63 - 1, "integer")]  # saturated, never a float


_BAD_OPS = {
    "ops": ({**_OPS_LINE, "ops": {"not an op!": 1}}, "ops", "not an op!"),
    "dtypes": ({"kind": "dtypes", "variant_id": "a.py::T::t", "op": "bad op",
                "dtypes": ["int64"]}, "op", "bad op"),
    "stop": ({"kind": "stop", "variant_id": "a.py::T::t", "op": "bad op", "outcome": "failed"},
             "op", "bad op"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(_BAD_OPS))
def test_a_bad_op_name_in_a_capture_says_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    tried("item 9")
    monkeypatch.chdir(tmp_path)
    rec, field, name = _BAD_OPS[kind]
    (tmp_path / "capture.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in (_PROV, _OPS_LINE, rec))
    )
    rc, _, err = cli(capsys, "ops", "ingest", "capture.jsonl", "--db", "ops.db")
    assert rc == 2
    assert one_line(err) == (
        f"ootest: error: capture.jsonl:3: {field}: expected an op name such as "
        f"'aten::add.Tensor', 'aten::add' or 'add'; found {name!r}"
    )


# ---------------------------------------------------------------- the count
#: Inputs the whole suite tries (each section's cases; raise it with a new case).
EXPECTED_INPUTS = 109  # 67 of issue 28 + 42 of issue 35 items 1-4, 9


def declared_inputs() -> dict[str, int]:
    """Section -> the inputs this module's tests declare, read from the source:
    each test's ``tried(SECTION, N)`` calls times the cases of its parametrize
    marks. Known without running a test, so any process (an xdist worker with
    its share, a ``-k`` subset) checks the whole suite against the pin."""
    import ast

    out: dict[str, int] = {}
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        if node.name == "test_the_count_of_inputs":
            continue
        calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Name) and c.func.id == "tried"]  # fmt: skip
        assert calls, f"{node.name}: a hostile test says what it tries: tried(SECTION, N)"
        cases = 1
        for mark in getattr(globals()[node.name], "pytestmark", []):
            if mark.name == "parametrize":
                cases *= len(mark.args[1])
        for call in calls:  # literals, or names of this module (len(_WRAPPED))
            args = [ast.unparse(a) for a in call.args] + ["1"]
            section, n = (eval(a, globals()) for a in args[:2])
            out[section] = out.get(section, 0) + int(n) * cases
    return out


def test_the_count_of_inputs() -> None:
    """The inputs every test declares add up to the pinned number, whichever tests
    this process runs (under xdist too: a dropped case or test changes the sum
    in every worker); prints them, and, when tests ran here, how many did."""
    declared = declared_inputs()
    total = sum(declared.values())
    parts = ", ".join(f"{k} {v}" for k, v in sorted(declared.items()))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    ran = sum(CASES.values())
    print(f"\nhostile inputs: {total} ({parts}); tried{f' by {worker}' if worker else ''}: {ran}")
    assert total == EXPECTED_INPUTS, parts
