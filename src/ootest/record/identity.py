"""Identity rules: which file a result belongs to, and how pytest gets a test back.

Note [File keys]
Every record ootest keeps (results, durations, the collection-guard baseline,
the plan cache, the op map, the repository memory) names a test file by its
*file key*: the file's path relative to the deepest *root* that contains it,
with ``/`` separators. The roots are

- the checkouts named by the environment: ``TORCH_ROOT`` (or ``PYTORCH_ROOT``;
  else a source checkout torch is installed from) and ``TORCH_DEVICE_ROOT``;
- the value of every ``${VAR}`` a config's ``files[].path`` starts with (so
  ``${TORCH_ROOT}/test/test_x.py`` is ``test/test_x.py`` and a backend's
  ``${TORCH_DEVICE_ROOT}/tests/test_y.py`` is ``tests/test_y.py``);
- the top of the git checkout (or worktree) the file lives in.

A file under none of them is named relative to the config's folder when it
lies below it, else ``<folder>/<file>``. A key is never
absolute and never starts with ``..``; it depends neither on the working
directory nor on pytest's rootdir nor on where the checkout lies on the disk,
so the same variant has the same ID on every machine. The canonical variant ID
is ``<file key>::<template class>::<method>[axes]`` (see ootest.config.names).

Note [Node IDs]
pytest names a file outside its rootdir by nothing at all when the file is
itself a command-line argument (``::TestFoo::test_x``), so its node ID cannot be
handed back. Results keep a *node ID pytest accepts back*: pytest's own when
the file lies under the rootdir, else the file's path relative to the
directory pytest was started in (or absolute), followed by the rest of the node
ID. It is used only to hand tests back to pytest (``--deselect``, reruns);
records are keyed by the variant ID.

Nothing here imports torch or pytest.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "ROOT_VARS",
    "FileKeys",
    "backend_name",
    "env_roots",
    "file_arg",
    "node_id",
    "reference_id",
    "template_roots",
]

#: Environment variables that name a checkout holding test files.
ROOT_VARS = ("TORCH_ROOT", "TORCH_DEVICE_ROOT")
_LEADING_VAR = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _torch_checkout() -> str | None:
    """The source checkout torch is installed from (develop install), if any."""
    spec = importlib.util.find_spec("torch")  # finds torch without importing it
    if spec is None or not spec.origin:
        return None
    root = Path(spec.origin).resolve().parent.parent
    return str(root) if (root / "test").is_dir() else None


def env_roots(env: Mapping[str, str] | None = None) -> list[str]:
    """The roots the environment names (see Note [File keys])."""
    environ = os.environ if env is None else env
    torch_root = environ.get("TORCH_ROOT") or environ.get("PYTORCH_ROOT") or _torch_checkout()
    return [r for r in (torch_root, environ.get("TORCH_DEVICE_ROOT")) if r]


def template_roots(templates: Iterable[str], env: Mapping[str, str]) -> list[str]:
    """The values of the ``${VAR}`` each ``files[].path`` template starts with."""
    out: list[str] = []
    for t in templates:
        m = _LEADING_VAR.match(t)
        if m is not None and env.get(m[1]):
            out.append(env[m[1]])
    return out


class FileKeys:
    """File keys (see Note [File keys]) for one process, memoized per file and folder."""

    def __init__(
        self, roots: Iterable[str | os.PathLike[str]] = (), fallback: str | None = None
    ) -> None:
        real = {os.path.realpath(os.fspath(r)) for r in roots if os.fspath(r)}
        self.roots: tuple[str, ...] = tuple(sorted(real, key=lambda r: (-len(r), r)))
        self.fallback = os.path.realpath(fallback) if fallback else None
        self._git: dict[str, str | None] = {}
        self._keys: dict[str, str] = {}

    @classmethod
    def from_env(
        cls,
        extra: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        fallback: str | None = None,
    ) -> FileKeys:
        return cls([*env_roots(env), *extra], fallback)

    def key(self, path: str | os.PathLike[str]) -> str:
        text = os.fspath(path)
        found = self._keys.get(text)
        if found is not None:
            return found
        real = os.path.realpath(text)
        folder = os.path.dirname(real)
        candidates = [r for r in self.roots if _is_under(real, r)]
        top = self._git_top(folder)
        if top is not None:
            candidates.append(top)
        if not candidates and self.fallback is not None and _is_under(real, self.fallback):
            candidates.append(self.fallback)
        if candidates:
            root = max(candidates, key=len)
            rel = os.path.relpath(real, root)
        else:
            rel = os.path.join(os.path.basename(folder), os.path.basename(real))
        key = rel.replace(os.sep, "/")
        self._keys[text] = key
        return key

    def _git_top(self, folder: str) -> str | None:
        """The nearest folder at or above ``folder`` holding ``.git`` (a checkout or worktree)."""
        seen: list[str] = []
        top: str | None = None
        cur = folder
        while True:
            if cur in self._git:
                top = self._git[cur]
                break
            seen.append(cur)
            if os.path.exists(os.path.join(cur, ".git")):
                top = cur
                break
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        for s in seen:
            self._git[s] = top
        return top


def node_id(nodeid: str, module_nodeid: str, path: str, rootdir: str, invocation_dir: str) -> str:
    """A node ID pytest accepts back for an item of the module at ``path`` (see
    Note [Node IDs]); ``module_nodeid`` is the node ID pytest gave the module."""
    if not nodeid.startswith(module_nodeid):
        return nodeid  # not an item of that module: nothing to mend
    if module_nodeid and _is_under(os.path.realpath(path), os.path.realpath(rootdir)):
        return nodeid
    return file_arg(path, invocation_dir) + nodeid[len(module_nodeid) :]


def file_arg(path: str, invocation_dir: str) -> str:
    """``path`` as a pytest argument from ``invocation_dir``: relative below it, else absolute."""
    real = os.path.realpath(path)
    base = os.path.realpath(invocation_dir)
    if _is_under(real, base):
        return os.path.relpath(real, base).replace(os.sep, "/")
    return real


def backend_name(device: str) -> str:
    """The privateuse1 backend name a ``--device`` value runs as (``emu[:profile]``
    -> ``emu``, ``torch_spyre:spyre`` -> ``spyre``); pure, no import."""
    text = device.strip()
    if text == "emu" or text.startswith("emu:"):
        return "emu"
    return text.partition(":")[2]


def backend_module(device: str) -> str | None:
    """The module whose import registers the backend a ``--device`` value names
    (``torch_spyre:spyre`` -> ``torch_spyre``, ``emu[:profile]`` -> ``ootest.device.emu``;
    a bare name -> None); pure, no import. Its package is the backend's own code
    (Note [Triage verdict])."""
    text = device.strip()
    if text == "emu" or text.startswith("emu:"):
        return "ootest.device.emu"
    mod, sep, _ = text.partition(":")
    return (mod.strip() or None) if sep else None


_DEVICE_AXIS = re.compile(r"(?:^|,)device=[^,\]]*")


def reference_id(variant_id: str) -> str:
    """The device variant a CPU-reference variant stands for: its ID without the
    ``device=cpu`` axis (Note [Canonical variant IDs])."""
    if "[" not in variant_id:
        return variant_id
    head, _, body = variant_id.partition("[")
    body = _DEVICE_AXIS.sub("", body[:-1]).lstrip(",")
    return f"{head}[{body}]" if body else head
