"""``files[].path``: ``${VAR}`` expansion and globbing (no pydantic, no PyYAML).

Shared by the loader and by the plugin's plan cache, which re-resolves the
paths of a cached plan to check that it still names the same test files.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from ootest.record.identity import FileKeys, template_roots

VAR = re.compile(r"\$\{([^}]*)\}")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
AUTO = ("TORCH_ROOT", "TORCH_DEVICE_ROOT")

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
    TORCH_ROOT (Torch Spyre's runner reads it), then auto-detected roots, looked
    for only when a path uses one the environment lacks (detection runs git)."""
    environ = dict(os.environ if env is None else env)
    if environ.get("PYTORCH_ROOT") and not environ.get("TORCH_ROOT"):
        environ["TORCH_ROOT"] = environ["PYTORCH_ROOT"]
    used = {name for t in templates for name in VAR.findall(t)}
    if any(name in used and name not in environ for name in AUTO):
        for var, value in auto_vars(config_path).items():
            environ.setdefault(var, value)
    return environ


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


def matches(text: str) -> list[str]:
    """The test files an expanded path names: its glob hits (sorted), or itself
    if it is a file, or nothing."""
    if is_glob(text):
        return sorted(glob.glob(text, recursive=True))
    return [text] if os.path.isfile(text) else []


def norm(p: str | os.PathLike[str]) -> str:
    """One spelling per file (symlinks and case-insensitive file systems)."""
    return os.path.normcase(os.path.realpath(p))
