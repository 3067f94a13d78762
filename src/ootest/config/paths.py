"""``files[].path``: ``${VAR}`` expansion and globbing (no pydantic, no PyYAML).

Shared by the loader and by the plugin's plan cache, which re-resolves the
paths of a cached plan to check that it still names the same test files.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ootest.record.identity import FileKeys, template_roots

VAR = re.compile(r"\$\{([^}]*)\}")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
AUTO = ("TORCH_ROOT", "TORCH_DEVICE_ROOT")

# Note [Model suite path]
# ``ootest model record`` targets ootest's own generic model-op test, which lies in
# whatever environment ootest is installed in. A path to it relative to the config
# (the recorder's venv seen from the config's folder) breaks as soon as the config
# is committed and read elsewhere: in CI, by a colleague, after the venv is rebuilt.
# So the recorder writes ``${OOTEST_MODEL_SUITE}/test_ootest_model_ops.py`` and the
# loader fills the variable with the folder of the ootest that reads the config
# (the environment may point it elsewhere, as it may TORCH_ROOT).
MODEL_SUITE_VAR = "OOTEST_MODEL_SUITE"
MODEL_SUITE = Path(__file__).resolve().parent.parent / "model" / "suite"

HOW = {
    "TORCH_ROOT": "export TORCH_ROOT=/path/to/pytorch (a checkout whose test/ folder holds "
    "the upstream tests; PYTORCH_ROOT works too)",
    "TORCH_DEVICE_ROOT": "export TORCH_DEVICE_ROOT=/path/to/your/backend/repo",
}


def auto_vars(config_path: Path) -> dict[str, str]:
    """Values for ${TORCH_ROOT} and ${TORCH_DEVICE_ROOT} when the environment has none."""
    found: dict[str, str] = {}
    spec = importlib.util.find_spec("torch")  # finds torch without importing it
    if spec is not None and spec.origin:
        root = Path(spec.origin).resolve().parent.parent
        if (root / "test").is_dir():  # a source checkout (develop install)
            found["TORCH_ROOT"] = str(root)
    try:
        top = subprocess.run(
            ["git", "-C", str(config_path.parent), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if top.returncode == 0 and top.stdout.strip():
            found["TORCH_DEVICE_ROOT"] = top.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    found.setdefault("TORCH_DEVICE_ROOT", str(config_path.parent.resolve()))
    return found


def environment(
    config_path: Path, templates: Iterable[str], env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables paths are expanded with: the environment, PYTORCH_ROOT as
    TORCH_ROOT (Torch Spyre's runner reads it), ootest's model suite folder as
    OOTEST_MODEL_SUITE, then auto-detected roots, looked for only when a path uses
    one the environment lacks (detection runs git)."""
    environ = dict(os.environ if env is None else env)
    if environ.get("PYTORCH_ROOT") and not environ.get("TORCH_ROOT"):
        environ["TORCH_ROOT"] = environ["PYTORCH_ROOT"]
    used = {name for t in templates for name in VAR.findall(t)}
    if MODEL_SUITE_VAR in used:  # Note [Model suite path]
        environ.setdefault(MODEL_SUITE_VAR, str(MODEL_SUITE))
    if any(name in used and name not in environ for name in AUTO):
        for var, value in auto_vars(config_path).items():
            environ.setdefault(var, value)
    return environ


# Note [Extends roots]
# A config may come from a pull request, and ``extends:`` makes ootest read the
# file it names: ``extends: /etc/shadow`` or ``../../.env`` must not be read, let
# alone quoted in an error. So a config extends only YAML files (.yaml, .yml)
# inside the folder of the config it is asked to load (its subfolders too), the
# roots it may name (``$TORCH_ROOT``/``$PYTORCH_ROOT`` and ``$TORCH_DEVICE_ROOT``,
# from the environment or detected as for paths: torch's source checkout, the git
# top level of the config's folder) and the folders listed in
# ``$OOTEST_EXTENDS_PATH`` (separated by ``os.pathsep``). Symlinks are followed
# first: where the file really is counts. The loader and ``ops enable`` (which
# walks the chain to edit it) apply the same rule; an error about a file that is
# not a config never quotes its content.
EXTENDS_PATH = "OOTEST_EXTENDS_PATH"
EXTENDS_SUFFIXES = (".yaml", ".yml")


class ExtendsRoots:
    """Where the configs read for ``config`` may extend from (Note [Extends roots])."""

    def __init__(self, config: Path, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.env = dict(os.environ if env is None else env)
        self._detected: list[str] | None = None

    def _declared(self) -> list[str]:
        out = [str(self.config.parent)]
        for var in ("TORCH_ROOT", "PYTORCH_ROOT", "TORCH_DEVICE_ROOT"):
            if self.env.get(var):
                out.append(self.env[var])
        out += [p for p in self.env.get(EXTENDS_PATH, "").split(os.pathsep) if p.strip()]
        return out

    def _auto(self) -> list[str]:
        if self._detected is None:  # runs git: only for a target outside the rest
            found = auto_vars(self.config)
            self._detected = [v for k, v in found.items() if not self.env.get(k)]
        return self._detected

    def refusal(self, declaring: Path, target: Path) -> str | None:
        """Why ``declaring`` may not extend ``target`` (resolved), or None."""
        if target.suffix.lower() not in EXTENDS_SUFFIXES:
            return (
                f"expected a YAML config file (.yaml or .yml); found {target}. Extend "
                "only ootest configs"
            )
        if _inside(target, [str(declaring.parent), *self._declared()]) or _inside(
            target, self._auto()
        ):
            return None
        return (
            "expected a config inside the config's folder, ${TORCH_ROOT}, "
            f"${{TORCH_DEVICE_ROOT}} or a folder of ${EXTENDS_PATH}; found {target}, "
            f"outside them. Move it into one, or add its folder to {EXTENDS_PATH}"
        )


def _inside(target: Path, roots: Iterable[str]) -> bool:
    where = os.path.realpath(target)
    for root in roots:
        top = os.path.realpath(root)
        with contextlib.suppress(ValueError):  # different drives
            if os.path.commonpath([where, top]) == top:
                return True
    return False


def file_keys(config_path: Path, templates: Iterable[str]) -> FileKeys:
    """File keys for a config's test files: the environment's roots and the
    ``${VAR}`` roots its paths are written under, else the config's folder (see
    Note [File keys])."""
    templates = list(templates)
    env = environment(config_path, templates)
    return FileKeys.from_env(template_roots(templates, env), env, str(config_path.parent))


def expand(value: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand ``${VAR}``; returns the text and the names that were undefined or invalid."""
    missing: list[str] = []

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if not IDENT.match(name) or name not in env:
            missing.append(name)
            return m.group(0)
        return env[name]

    return VAR.sub(sub, value), missing


def is_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def env_limit(name: str, default: int) -> int:
    """A bound on reading configs, from the environment variable ``name`` (see Note
    [Config bounds] in config/yamlread.py). Raises ValueError saying what was found."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        n = int(value.replace("_", "").replace(",", ""))
    except ValueError:
        n = -1
    if n < 1:
        raise ValueError(f"{name}: expected a whole number; found {value!r}")
    return n


GLOB_LIMIT = ("OOTEST_CONFIG_MAX_GLOB", 100_000)
"""Files and folders one ``files[].path`` glob may look at."""


class GlobLimit(ValueError):
    """A glob looked at more files and folders than its bound allows."""


def glob_prefix(text: str) -> str:
    """The folder a glob searches: its components before the first with a wildcard."""
    parts = text.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if is_glob(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) or (os.sep if text.startswith(os.sep) else os.curdir)


def glob_outside(text: str, root: str) -> str | None:
    """The folder a glob would search when it lies outside ``root`` (absolute
    paths elsewhere, ``..`` escapes), else None."""
    prefix = glob_prefix(text)
    where, top = os.path.abspath(prefix), os.path.abspath(root)
    try:
        inside = os.path.commonpath([where, top]) == top
    except ValueError:  # different drives
        inside = False
    return None if inside else prefix


def matches(text: str, limit: int | None = None) -> list[str]:
    """The test files an expanded path names: its glob hits (sorted), or itself
    if it is a file, or nothing. A glob looks at no more than ``limit`` files
    and folders (default: ``$OOTEST_CONFIG_MAX_GLOB``) or raises GlobLimit."""
    if is_glob(text):
        bound = env_limit(*GLOB_LIMIT) if limit is None else limit
        return sorted(_Glob(bound).iglob(text, dironly=False))
    return [text] if os.path.isfile(text) else []


class _Glob:
    """``glob.glob(pattern, recursive=True)`` (same results) that counts the
    directory entries it reads and stops past a bound: ``/**/*.py`` would read
    the whole file system, and a symlink loop under ``**`` never ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0

    def iglob(self, pattern: str, dironly: bool) -> Iterator[str]:
        dirname, basename = os.path.split(pattern)
        if not is_glob(pattern):
            if (basename and os.path.lexists(pattern)) or (not basename and os.path.isdir(dirname)):
                yield pattern
            return
        if not dirname:
            yield from self._in_dir(dirname, basename, dironly)
            return
        dirs: Iterable[str] = (
            self.iglob(dirname, dironly=True)
            if dirname != pattern and is_glob(dirname)
            else [dirname]
        )
        for d in dirs:
            if is_glob(basename):
                names: Iterable[str] = self._in_dir(d, basename, dironly)
            else:
                names = [basename] if os.path.lexists(os.path.join(d, basename)) else []
            for name in names:
                yield os.path.join(d, name)

    def _in_dir(self, dirname: str, pattern: str, dironly: bool) -> Iterator[str]:
        if pattern == "**":
            yield ""
            yield from self._recurse(dirname, dironly)
            return
        names = [name for name, _ in self._list(dirname, dironly)]
        if not pattern.startswith("."):
            names = [n for n in names if not n.startswith(".")]
        yield from fnmatch.filter(names, pattern)

    def _recurse(self, dirname: str, dironly: bool) -> Iterator[str]:
        for name, is_dir in self._list(dirname, dironly):
            if name.startswith("."):
                continue
            yield name
            if is_dir:
                path = os.path.join(dirname, name) if dirname else name
                for sub in self._recurse(path, dironly):
                    yield os.path.join(name, sub)

    def _list(self, dirname: str, dironly: bool) -> list[tuple[str, bool]]:
        try:
            with os.scandir(dirname or os.curdir) as it:
                entries = [(e.name, _is_dir(e)) for e in it]
        except OSError:
            return []
        self.seen += len(entries) + 1
        if self.seen > self.limit:
            raise GlobLimit(f"looked at more than {self.limit:,} files and folders")
        return [(n, d) for n, d in entries if d or not dironly]


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def norm(p: str | os.PathLike[str]) -> str:
    """One spelling per file (symlinks and case-insensitive file systems)."""
    return os.path.normcase(os.path.realpath(p))
