"""Hostile inputs of issue 35, items 6-8 (a second round after issue 28): a
refresh's work folder planted with links, files and read-only folders, inputs
changed under a resumed refresh, two refreshes at once; unbounded emu profiles,
judge key files, test file names and forged results; a backend whose import
hangs and a relay that trickles its answer.

Every test tries one hostile input (parametrized cases one each), asserts the
one line a user sees (no traceback) and ends in bounded time;
``test_the_count_of_inputs`` prints how many inputs the file tries and pins it
when the file is collected whole (so under xdist too: every worker collects all).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.errors import UserError
from ootest.select.refresh import Refresh, refresh
from tests.select import suites
from tests.select import test_refresh as tr
from tests.test_hostile_inputs import readonly

ROOT = Path(__file__).resolve().parent.parent


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------- item 6: the refresh
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suites.build_inputs(tmp_path_factory.mktemp("refresh35"))


@pytest.fixture
def at(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A config selected from the old memory, ready to be refreshed."""
    monkeypatch.setenv("TORCH_ROOT", str(built / "new"))
    return tr._setup(built, tmp_path / "a", capsys)


def _go(built: Path, job: Refresh, device: tr.Device | None = None) -> object:
    return refresh(job, runner=device or tr.Device(), collector=suites.collector(suites.V2))


def _refused(built: Path, job: Refresh, device: tr.Device | None = None) -> str:
    with pytest.raises(UserError) as e:
        _go(built, job, device)
    return one_line(str(e.value))


@pytest.mark.parametrize("planted", ["symlink", "file"])
def test_refresh_run_in_the_work_folder_planted_is_one_line(
    built: Path, at: Path, tmp_path: Path, planted: str
) -> None:
    work = at / "suite.refresh"
    work.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.jsonl").write_text("precious\n")
    if planted == "symlink":
        (work / "run").symlink_to(elsewhere)
        what = "holds a 'run' that is a symlink; expected a folder of its own (a refresh "
        what += "replaces files by name in it and never follows a link); pass another --work"
    else:
        (work / "run").write_text("a file\n")
        what = "holds a 'run' that is not a folder; expected the folder a refresh makes (or "
        what += "nothing); remove it or pass another --work"
    line = _refused(built, tr._job(built, at))
    assert line == f"--work {work}: {what}"
    assert (elsewhere / "results.jsonl").read_text() == "precious\n"


def test_refresh_into_a_symlinked_work_folder_is_refused(
    built: Path, at: Path, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    for name in ("pr.md", "review.html", "diff.json"):
        (target / name).write_text("precious\n")
    (at / "suite.refresh").symlink_to(target)
    line = _refused(built, tr._job(built, at))
    assert line == (
        f"--work {at / 'suite.refresh'}: is a symlink; expected a folder of its own (a refresh "
        "replaces files by name in it and never follows a link); pass another --work"
    )
    assert sorted(p.name for p in target.iterdir()) == ["diff.json", "pr.md", "review.html"]
    assert {p.read_text() for p in target.iterdir()} == {"precious\n"}


def test_refresh_with_a_memory_in_a_read_only_folder_writes_nothing(built: Path, at: Path) -> None:
    ro = at / "ro"
    ro.mkdir()
    (at / "old.db").rename(ro / "old.db")
    job = replace(tr._job(built, at), memory=ro / "old.db")
    before = (at / "suite.yaml").read_bytes()
    with readonly(ro):
        line = _refused(built, job)
    assert line == (
        f"--memory {ro / 'old.db'}: its folder {ro} is not writable; pass a path in a "
        "writable folder"
    )
    assert (at / "suite.yaml").read_bytes() == before  # config and memory stay in step
    assert not (at / "suite.refresh" / "state.json").exists()  # no step was done


def _ops_changed(built: Path, at: Path) -> Refresh:
    with open(at / "ops.db", "ab") as fh:
        fh.write(b"\0" * 512)
    return tr._job(built, at)


def _memory_changed(built: Path, at: Path) -> Refresh:
    with open(at / "old.db", "ab") as fh:
        fh.write(b"\0" * 512)
    return tr._job(built, at)


def _dtypes_changed(built: Path, at: Path) -> Refresh:
    job = tr._job(built, at)
    backend = replace(job.inputs.backend, dtypes="float32")
    return replace(job, inputs=replace(job.inputs, backend=backend))


def _k_changed(built: Path, at: Path) -> Refresh:
    return replace(tr._job(built, at), k=3)


def _root_changed(built: Path, at: Path) -> Refresh:
    return replace(tr._job(built, at), roots=(built / "old" / "test",))


_CHANGES = {
    "ops": (_ops_changed, "--ops {at}/ops.db: changed since the refresh in {work} started "
            "(sha256:"),
    "memory": (_memory_changed, "--memory {at}/old.db: changed since the refresh in {work} "
               "started (sha256:"),
    "dtypes": (_dtypes_changed, "--dtypes: changed since the refresh in {work} started "
               "(float32,float16, now float32); "),
    "k": (_k_changed, "-k: changed since the refresh in {work} started (1, now 3); "),
    "root": (_root_changed, "--root: changed since the refresh in {work} started ("),
}  # fmt: skip


@pytest.mark.parametrize("change", sorted(_CHANGES))
def test_a_resumed_refresh_refuses_changed_inputs(built: Path, at: Path, change: str) -> None:
    with pytest.raises(tr.Killed):  # killed in the middle of the run on the device
        _go(built, tr._job(built, at), tr.Device(kill_after=1))
    make, text = _CHANGES[change]
    work = at / "suite.refresh"
    line = _refused(built, make(built, at))
    assert line.startswith(text.format(at=at, work=work)), line
    assert line.endswith(
        "pass --fresh to start over from the inputs as they are, or give them as they were"
    )


_HOLD = """
import sys, time
from pathlib import Path
from ootest.select.refresh import Refresh, _locked
work = Path(sys.argv[2])
with _locked(Refresh(Path(sys.argv[1]), Path("m"), ()), work):
    print("held", flush=True)
    time.sleep(60)
"""


def _holder(config: Path, work: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(config), str(work)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.parametrize("other", ["work", "config"])
def test_a_second_refresh_is_refused_naming_the_holder_and_a_dead_ones_lock_taken_over(
    built: Path, at: Path, tmp_path: Path, other: str
) -> None:
    work = at / "suite.refresh"
    # the same work folder with another config, or the same config with another work folder
    held = (
        (tmp_path / "other.yaml", work) if other == "work" else (at / "suite.yaml", tmp_path / "w")
    )
    proc = _holder(*held)
    try:
        line = _refused(built, tr._job(built, at))
        flag = f"--work {work}" if other == "work" else f"--config {at / 'suite.yaml'}"
        assert line.startswith(f"{flag}: another refresh is at work on it (pid {proc.pid}, since ")
        assert line.endswith("); wait for it to end, or end it")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    done = _go(built, tr._job(built, at))  # the dead holder's lock is taken over
    assert (work / "pr.md").is_file() and done is not None


# ---------------------------------------------------------------- item 7: unbounded inputs
def test_index_build_warns_of_a_file_name_that_is_not_utf8_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    t = tmp_path / "t"
    t.mkdir()
    (t / "test_good.py").write_text("def test_good():\n    '''findable words here'''\n")
    bad = os.fsencode(t) + b"/test_\xff\n::error::x.py"
    with open(bad, "w") as fh:
        fh.write("def test_bad():\n    pass\n")
    rc, out, err = cli(capsys, "index", "build", "--root", "t", "--static-only", "--db", "m.db")
    assert rc == 0, err
    assert one_line(err) == (
        f"warning: {tmp_path}/t/test_\\udcff\\n::error::x.py: its name is not UTF-8; not "
        "indexed (rename it)"
    )
    assert "files: 1 " in out


_VARIANT = {"kind": "variant", "variant_id": "test_a.py::T::test_x[dtype=float32]",
            "device_variant": True, "dtypes": ["float32"]}  # fmt: skip

_BOMB = (
    b"a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + b"".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n".encode() for i in range(1, 9))
    + b"ops: *a8\n"
)

_PROFILES: dict[str, tuple[bytes, str]] = {
    "alias_bomb": (_BOMB, "p.yaml:6: expected at most 200,000 values once YAML aliases are "
                   "expanded; found more (an alias bomb?); write the values out"),
    "deep_block_mapping": (b"ops:\n" + b"".join(b" " * (i + 1) + b"a:\n" for i in range(200)),
                           "p.yaml:65: expected at most 64 levels of nesting; found more"),
    "deep_flow_sequence": (b"ops: " + b"[" * 10_000 + b"]" * 10_000 + b"\n",
                           "p.yaml:1:1005: YAML syntax error: exceeded maximum nesting depth; "
                           "fix the syntax"),
    "deep_flow_mapping": (b"ops: " + b"{a: " * 10_000 + b"1" + b"}" * 10_000 + b"\n",
                          "p.yaml:1:4002: YAML syntax error: exceeded maximum nesting depth; "
                          "fix the syntax"),
    "not_utf8": (b"ops: [aten::add.Tensor]\nname: \xff\xfe\n",
                 "p.yaml:2: expected UTF-8 text; found the byte 0xff, which is not; save the "
                 "file as UTF-8"),
    "five_megabytes": (b"ops:\n" + b"  - aten::add.Tensor\n" * 250_000,
                       "emu: profile {path}: expected at most 4,194,304 bytes; found more (a "
                       "device or an endless stream?)"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_PROFILES))
def test_an_emu_profile_is_bounded_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    data, message = _PROFILES[name]
    (tmp_path / "p.yaml").write_bytes(data)
    (tmp_path / "v.jsonl").write_text(json.dumps(_VARIANT) + "\n")
    started = time.monotonic()
    rc, _, err = cli(capsys, "select", "run", "--variants", "v.jsonl", "--device",
                     f"emu:{tmp_path / 'p.yaml'}", "--out", "s.yaml")  # fmt: skip
    assert time.monotonic() - started < 20
    assert rc == 2
    text = message.format(path=tmp_path / "p.yaml")
    want = text if text.startswith("emu:") else f"{tmp_path}/{text}"
    assert one_line(err) == f"ootest: error: {want}"


def _ootest(*argv: str, cwd: Path, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``ootest ARGV`` in a child process, killed with all its children at
    ``timeout`` (a hang fails the test instead of hanging it)."""
    proc = subprocess.Popen([sys.executable, "-m", "ootest.cli", *argv], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"ootest {' '.join(argv)} still ran after {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


_KEY_FILES = {
    "dev_zero": "is a device, pipe or socket; expected a regular file",
    "fifo": "is a device, pipe or socket; expected a regular file",
    "fifty_megabytes": "expected at most 65,536 bytes; found 52,428,800",
    "not_utf8": None,
}


@pytest.mark.parametrize("name", sorted(_KEY_FILES))
def test_the_judge_key_file_is_a_regular_file_read_bounded(tmp_path: Path, name: str) -> None:
    (tmp_path / "v.jsonl").write_text(json.dumps(_VARIANT) + "\n")
    key = tmp_path / "key"
    if name == "dev_zero":
        key = Path("/dev/zero")
    elif name == "fifo":
        os.mkfifo(key)  # no writer: opening it to read blocks forever
    elif name == "fifty_megabytes":
        with open(key, "wb") as fh:  # sparse: costs no disk
            fh.truncate(50 * 2**20)
    else:
        key.write_bytes(b"sk-\xff\xfe\n")
    r = _ootest("select", "run", "--variants", "v.jsonl", "--out", "s.yaml", "--judge",
                "--judge-endpoint", "http://127.0.0.1:9/v1", "--judge-model", "m",
                "--judge-key-file", str(key), cwd=tmp_path, timeout=30)  # fmt: skip
    why = _KEY_FILES[name]
    want = (
        f"--judge-key-file {key}: {why}"
        if why
        else (
            f"--judge-key-file {key}:1: expected UTF-8 text; found the byte 0xff, which is not; "
            "save the file as UTF-8"
        )
    )
    assert (r.returncode, one_line(r.stderr)) == (2, f"ootest: error: {want}")
    assert not (tmp_path / "s.yaml").exists()


def test_forged_results_make_a_bounded_report_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """3,000 ops x 600 dtypes of forged results: the op x dtype table was every op
    by every dtype (a 21 MB page here, 3.6 GB from 12 MB of results)."""
    monkeypatch.chdir(tmp_path)
    with open("r.jsonl", "w") as fh:
        for i in range(3000):
            rec = {
                "kind": "result",
                "variant_id": f"test/t{i}.py::C::test_{i}",
                "file": f"test/t{i}.py",
                "outcome": "passed",
                "op": f"op{i}",
                "dtype": f"d{i % 600}",
                "time": 1.0,
            }
            fh.write(json.dumps(rec) + "\n")  # fmt: skip
    rc, _, err = cli(capsys, "report", "r.jsonl", "--format", "html", "-o", "r.html")
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    assert len(page) < 4_000_000, len(page)  # the bounds give ~3 MB at most
    assert (
        "The 500 ops and 40 dtypes that ran the most variants are shown; 2500 ops and 560 "
        "dtypes are not (the results file has them).</p>"
    ) in page
    assert (
        "<p><i>1000 more files not listed (the results file and the JUnit XML have every " in page
    )


# ---------------------------------------------------------------- item 8: deadlines
def _hanging_backend(base: Path) -> dict[str, str]:
    """A backend module whose import never returns, beside a torch stand-in that
    imports at once (the probe imports torch first): the environment of a child."""
    fake = base / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("__version__ = '0+stand-in'\n")
    (fake / "hangmod.py").write_text("import time\ntime.sleep(3600)\n")
    return {**os.environ, "PYTHONPATH": str(fake), "OOTEST_PROBE_TIMEOUT": "3"}


@pytest.mark.parametrize("argv", [
    ["select", "run", "--variants", "v.jsonl", "--out", "s.yaml"],
    ["ops", "missing"],
], ids=["select_run", "ops_missing"])  # fmt: skip
def test_a_backend_whose_import_hangs_meets_the_probes_deadline(
    tmp_path: Path, argv: list[str]
) -> None:
    (tmp_path / "v.jsonl").write_text(json.dumps(_VARIANT) + "\n")
    env = _hanging_backend(tmp_path)
    started = time.monotonic()
    r = _ootest(*argv, "--device", "hangmod:hang", cwd=tmp_path, env=env, timeout=60)
    took = time.monotonic() - started
    assert r.returncode == 2 and took < 30, (took, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == (
        "ootest: probing the backend hangmod:hang in a child process (deadline 3 s: "
        "OOTEST_PROBE_TIMEOUT=3)"
    )
    assert "ootest: probe: still importing the backend module 'hangmod' (1 s of 3 s)" in lines
    assert lines[-1] == (
        "ootest: error: --device hangmod:hang: the probe gave no answer within 3 s; it was "
        "still importing the backend module 'hangmod'; check that it returns (python -c "
        "'import torch, hangmod'), or give it longer with OOTEST_PROBE_TIMEOUT=SECONDS"
    )


class _Trickle:
    """A loopback relay that answers every request with its headers one line at
    a time, a line every 0.3 s, for at most 30 s (bounded: the test never hangs
    longer, whatever the client does)."""

    def __init__(self, body_too: bool) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.5)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.body_too, self.requests, self.stop = body_too, 0, False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:

        ends = time.monotonic() + 30
        while not self.stop and time.monotonic() < ends:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.requests += 1
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    if self.body_too:  # whole headers at once, then a body without end
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                    else:
                        conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    while not self.stop and time.monotonic() < ends:
                        conn.sendall(b"x" if self.body_too else b"X-Slow: 1\r\n")
                        time.sleep(0.3)
                except OSError:
                    continue

    def close(self) -> None:
        self.stop = True
        self.thread.join(10)
        self.sock.close()


@pytest.mark.parametrize("body_too", [False, True], ids=["headers", "body"])
def test_relay_report_against_a_trickling_relay_ends_at_the_attempts_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    body_too: bool,
) -> None:  # fmt: skip
    for k, v in {"OOTEST_RELAY_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "1",
                 "RUNNER_TEMP": str(tmp_path)}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    relay = _Trickle(body_too)
    started = time.monotonic()
    try:
        rc, _, err = cli(capsys, "relay", "report", "--relay-url", relay.url, "--status",
                         "completed", "--conclusion", "success", "--nightly", "a" * 40,
                         "--job-name", "j",
                         "--attempts", "2", "--attempt-timeout", "1.5")  # fmt: skip
    finally:
        took = time.monotonic() - started
        relay.close()
    assert took < 12, took  # two attempts of 1.5 s and a backoff of at most 2 s
    assert rc == 1 and relay.requests == 2
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[1].startswith("ootest relay: callback attempt 1 failed (timeout); retrying in ")
    assert lines[-1] == (
        "ootest relay: callback 'completed' not delivered after 2 attempts (last: timeout)"
    )


# ---------------------------------------------------------------- the count
#: Inputs this file tries: one per test item (raise it with a new case).
EXPECTED_INPUTS = 27


def test_the_count_of_inputs(request: pytest.FixtureRequest) -> None:
    """Prints how many hostile inputs this file tries (``-s``) and pins the number
    when the file was collected whole. Counted from the collection, not from what
    ran in this process: under xdist every worker collects every item, so a
    dropped case fails each worker, not only the one that would have run it."""
    here = request.node.path
    mine = [i for i in request.session.items if i.path == here and i is not request.node]
    names = {getattr(i, "originalname", i.name) for i in mine}
    print(f"\nhostile inputs of issue 35 items 6-8: {len(mine)}")
    if names >= _ALL_TESTS:  # not a -k subset
        assert len(mine) == EXPECTED_INPUTS, sorted(i.name for i in mine)


_ALL_TESTS = {
    n for n in dict(globals()) if n.startswith("test_") and n != "test_the_count_of_inputs"
}
