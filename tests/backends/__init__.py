"""Test backends: small privateuse1 backends shaped like third-party ones.

Note [Test backends stay out of .venv]
A backend packaged with a ``torch.backends`` entry point loads itself on every
``import torch`` of the environment it is installed in, and then holds the
privateuse1 slot: emu could no longer load in any test process. So a test
backend is installed as its own distribution (``pip install --no-deps
--no-build-isolation --target``) into a cached folder, never into ``.venv``, and
only the tests that want it put that folder on ``PYTHONPATH`` of their children
(:meth:`Installed.env`); ``importlib.metadata`` finds the entry point there.

The folder is ``<cache>/test-backends/<name>-<key>``, ``<cache>`` being ootest's
cache folder (tests/conftest.py links ``test-backends`` to the user's, like the
emu build), the key the digest of the backend's sources, the torch version and
the Python ABI. It holds the installed distribution; the backend's compiled
extension goes to ``<name>-builds`` next to it (keyed by the backend itself by its
C++ source and torch build), built by one ``import torch`` right after the
install, so a Python-only change reinstalls in a second without recompiling. An
``installed`` file marks a folder complete. Installs are serialised by an fcntl lock,
so two xdist workers asking at once install once.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
_MARKER = "installed"
_SKIP = {"build", "dist", "__pycache__"}


def _ignored(name: str) -> bool:
    return name in _SKIP or name.endswith(".egg-info")


def source_digest(src: Path) -> str:
    """A digest of the files a backend installs from (paths and bytes)."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not _ignored(d))
        for f in sorted(files):
            path = Path(folder, f)
            h.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Backend:
    """A test backend's sources: a Python distribution with a ``torch.backends`` entry point."""

    distribution: str  # its name in pyproject.toml
    src: Path
    cache_var: str  # the variable naming the folder where it caches its compiled extension


TINYDEV = Backend("ootest-tinydev", HERE / "tinydev", "TINYDEV_CACHE_DIR")


@dataclass(frozen=True)
class Installed:
    """A test backend installed into its own folder."""

    backend: Backend
    path: Path  # the --target folder: put it on PYTHONPATH to have the backend autoload

    def env(self) -> dict[str, str]:
        """The variables a child process needs (to be laid over ``os.environ``):
        ``PYTHONPATH`` with the backend's folder first (the current value kept
        after it), and the backend's build cache next to that folder (shared by
        its installs: the backend keys its builds by its C++ source and torch)."""
        path = [str(self.path), *filter(None, [os.environ.get("PYTHONPATH")])]
        return {
            "PYTHONPATH": os.pathsep.join(path),
            self.backend.cache_var: str(self.path.parent / f"{self.backend.distribution}-builds"),
        }


def install(backend: Backend, cache: Path, *, warm: bool = True) -> Installed:
    """Install ``backend`` into a folder under ``cache`` (once per key).

    ``warm``: also import torch once with it, so that its extension is compiled
    here, under the lock, and not by the first test (about 30 s on 2 cores).
    """
    src, distribution = backend.src, backend.distribution
    torch_id = f"{importlib.metadata.version('torch')} {sys.implementation.cache_tag}"
    key = hashlib.sha256(f"{source_digest(src)} {torch_id}".encode()).hexdigest()[:16]
    target = cache / f"{distribution}-{key}"
    done = Installed(backend, target)
    if (target / _MARKER).is_file():
        return done
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if we die
        if (target / _MARKER).is_file():
            return done  # another process installed it meanwhile
        shutil.rmtree(target, ignore_errors=True)  # what a dead installer left
        print(f"tests: installing {distribution} into {target}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix=f"{distribution}-src-") as tmp:
            # setuptools writes build/ and *.egg-info next to the sources: copy them
            # out of the checkout first.
            copy = Path(tmp) / "src"
            shutil.copytree(src, copy, ignore=lambda _d, names: [n for n in names if _ignored(n)])
            _check([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                    "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                    "--target", str(target), str(copy)], {})  # fmt: skip
        if warm:
            code = "import torch; print(torch._C._get_privateuse1_backend_name())"
            _check([sys.executable, "-c", code], done.env())
        (target / _MARKER).write_text(torch_id + "\n")
        return done


def _check(cmd: list[str], env: dict[str, str]) -> None:
    full = {**os.environ, **env}
    full.pop("PYTEST_ADDOPTS", None)
    r = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({r.returncode}):\n{r.stderr[-4000:]}")
