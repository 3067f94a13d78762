"""An interrupted ``ootest run`` (Ctrl-C or SIGTERM) keeps its results, stops its
pytest child and says how to continue (Note [Interrupted runs])."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import ootest, spawn_ootest, wait_for

WAIT = (
    "import os, time\n"
    "def test_a():\n"
    "    pass\n"
    "def test_wait():\n"
    "    open('started', 'w').write(str(os.getpid()))\n"
    "    end = time.time() + 60\n"
    "    while not os.path.exists('go') and time.time() < end:\n"
    "        time.sleep(0.05)\n"
    "def test_c():\n"
    "    pass\n"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not running anything
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.mark.parametrize(
    ("sig", "fork"), [(signal.SIGTERM, "auto"), (signal.SIGINT, "off")], ids=["TERM", "INT"]
)
def test_an_interrupted_run_says_what_it_kept_and_how_to_resume(
    tmp_path: Path, sig: signal.Signals, fork: str
) -> None:
    # SIGTERM ended the runner silently (exit -15); Ctrl-C said only "interrupted"
    (tmp_path / "test_wait.py").write_text(WAIT)
    (tmp_path / "a.yaml").write_text(
        "test_suite_config:\n  files:\n"
        "    - {path: test_wait.py, unlisted_test_mode: mandatory_success}\n"
    )
    argv = ["run", "a.yaml", "--results", "out/r.jsonl", "--fork", fork, "--", "-x"]
    proc = spawn_ootest(*argv, cwd=tmp_path)
    try:
        wait_for(tmp_path / "started")
        time.sleep(0.2)  # the pid is written
        child = int((tmp_path / "started").read_text())
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    resume = "ootest run a.yaml --resume out/r.jsonl" + (" --fork off" if fork == "off" else "")
    assert err == (
        f"ootest: interrupted; 1 result(s) kept in out/r.jsonl; continue with: {resume} -- -x\n"
    )
    end = time.time() + 10
    while _alive(child) and time.time() < end:
        time.sleep(0.05)
    assert not _alive(child), "the pytest child outlived the runner"
    assert '"outcome": "passed"' in (tmp_path / "out" / "r.jsonl").read_text()

    (tmp_path / "go").touch()
    again = ootest(*shlex.split(err.split("continue with: ")[1])[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "OK: 3 results in out/r.jsonl" in again.stdout + again.stderr


def test_an_interrupt_before_any_result_says_there_is_nothing_to_resume(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(
        "import os, time\nopen('started', 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    (tmp_path / "a.yaml").write_text("test_suite_config:\n  files: [{path: test_a.py}]\n")
    proc = spawn_ootest("run", "a.yaml", "--fork", "off", cwd=tmp_path)
    try:
        wait_for(tmp_path / "started")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert err == "ootest: interrupted; no result was written yet; nothing to resume\n"
