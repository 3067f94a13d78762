"""Subprocess tier: the ``tiny`` test backend, installed as its own distribution
(Note [Test backends stay out of .venv]) and autoloaded by ``import torch``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.backends import TINYDEV, install, source_digest
from tests.conftest import ROOT, run


def test_tiny_behaviour(tinydev_env: dict[str, str]) -> None:
    checks = ROOT / "tests/backends/tinydev_checks.py"
    cmd = [sys.executable, "-m", "pytest", str(checks), "-q", "-p", "no:cacheprovider"]
    r = run([*cmd, "-p", "no:xdist"], env=tinydev_env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith(("10 passed in", "10 passed, ")), summary
    assert not any(w in summary for w in ("failed", "skipped", "error", "deselected")), summary


def test_autoload_can_be_turned_off(tinydev_env: dict[str, str]) -> None:
    code = (
        "import importlib.metadata as m, torch\n"
        "print([e.name for e in m.entry_points(group='torch.backends')])\n"
        "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'tiny'))\n"
    )
    r = run([sys.executable, "-c", code], env={**tinydev_env, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["['tiny']", "privateuseone False"]


def test_pinning_host_memory_kills_the_process(tinydev_env: dict[str, str], tmp_path: Path) -> None:
    # Bug [tiny pinned host memory]: a CPU tensor, no tiny op involved
    code = "import torch\nx = torch.ones(3)\nprint('alive', flush=True)\nx.pin_memory()\n"
    r = run([sys.executable, "-c", code], cwd=tmp_path, env=tinydev_env)  # a core file lands there
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])
    assert r.stdout == "alive\n"


def test_importing_the_backend_before_torch_fails(tinydev_env: dict[str, str]) -> None:
    # As with real backends: torch's autoload meets the half-imported package.
    r = run([sys.executable, "-c", "import ootest_tinydev"], env=tinydev_env)
    assert r.returncode == 1
    assert "Failed to load the backend extension: tiny." in r.stderr
    assert "partially initialized module 'ootest_tinydev'" in r.stderr


def test_other_processes_do_not_see_it(tinydev_env: dict[str, str]) -> None:
    installed = tinydev_env["PYTHONPATH"].split(os.pathsep)[0]
    assert installed not in os.environ.get("PYTHONPATH", "")
    code = "import importlib.metadata as m; print(list(m.entry_points(group='torch.backends')))"
    r = run([sys.executable, "-c", code])
    assert r.returncode == 0 and r.stdout == "[]\n", r.stdout + r.stderr[-2000:]


def test_parallel_installs_install_once(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from tests.backends import TINYDEV, install\n"
        "print(install(TINYDEV, Path(sys.argv[1]), warm=False).path)\n"
    )
    env = {**os.environ}
    env.pop("PYTEST_ADDOPTS", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)],
            cwd=ROOT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    (path,) = {o.strip() for o, _ in outs}
    assert sum(e.count("tests: installing ootest-tinydev") for _, e in outs) == 1
    dist = Path(path)
    assert (dist / "ootest_tinydev" / "csrc" / "tiny.cpp").is_file()
    entry_points = next(dist.glob("ootest_tinydev-*.dist-info")) / "entry_points.txt"
    assert entry_points.read_text().split() == [
        "[torch.backends]",
        "tiny",
        "=",
        "ootest_tinydev:_autoload",
    ]
    # a second run finds it installed
    again = install(TINYDEV, tmp_path, warm=False)
    assert str(again.path) == path


def test_the_install_key_follows_the_sources(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "tinydev"
    shutil.copytree(TINYDEV.src, copy)
    assert source_digest(copy) == source_digest(TINYDEV.src)
    (copy / "build").mkdir()  # what setuptools leaves behind does not count
    (copy / "build" / "x").write_text("x")
    assert source_digest(copy) == source_digest(TINYDEV.src)
    cpp = copy / "ootest_tinydev" / "csrc" / "tiny.cpp"
    cpp.write_text(cpp.read_text() + "\n")
    assert source_digest(copy) != source_digest(TINYDEV.src)
