"""Finding the files of the test trees, naming them, and what each depends on.

File keys follow Note [File keys] (ootest.record.identity): a file under a
checkout named by the environment or a git checkout is named relative to it,
exactly as the plugin names it. A tree that is in neither (a copy in a
temporary folder) is named relative to the folder *above* its root
(``<root name>/<path below the root>``), so two copies of one tree at different
places give the same keys and can be diffed.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ootest.errors import UserError
from ootest.memory._hashing import digest
from ootest.memory._static import Import
from ootest.record.identity import FileKeys, env_roots

#: Folders never indexed: VCS data, caches, virtual environments, build outputs.
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "venv", "site-packages"})


@dataclass(frozen=True)
class SourceFile:
    key: str
    root: Path
    path: Path  # absolute
    size: int
    mtime_ns: int

    @property
    def is_test(self) -> bool:
        """Collected by pytest's default ``python_files`` (``test_*.py``, ``*_test.py``)."""
        name = self.path.name
        return name.startswith("test_") or name.endswith("_test.py")


def keyer(root: Path) -> Callable[[Path], str]:
    """The file-key function for files under ``root`` (see the module docstring)."""
    plain = FileKeys.from_env()
    probe = root / "__ootest_probe__.py"
    fallback = f"{root.name}/{probe.name}"
    if plain.key(probe) != fallback:
        return plain.key
    above = FileKeys([*env_roots(), str(root.resolve().parent)])
    return above.key


# Note [Only regular files inside the roots]
# A test tree is hostile input: a `.py` name may be a symlink to /dev/zero (read
# forever), a named pipe (blocks on open), a dangling symlink or a loop (an error
# that aborted the build), or a symlink to a secret outside the tree (whose comments
# became searchable). Only regular files inside the roots, up to MAX_FILE_BYTES, are
# read; a symlink is followed only when its target is inside a root. A name that is
# not UTF-8 (it aborted the build: file keys are UTF-8 text in the index, its JSON and
# the configs) is not indexed either. Everything else is one "not indexed" warning of
# the build (the name escaped: Note [Untrusted text]) and the build goes on.

#: The largest file read (upstream's largest, common_methods_invocations.py, is ~1 MB).
MAX_FILE_BYTES = 16 * 2**20


class Unreadable(Exception):
    """A file of a test tree that is not read; the message says why."""


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def check_source(path: Path, roots: Iterable[Path]) -> os.stat_result:
    """The stat of ``path`` when it may be read (Note [Only regular files inside the
    roots]); :class:`Unreadable` otherwise."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            try:
                target = path.resolve(strict=True)
            except FileNotFoundError:
                raise Unreadable("a dangling symlink") from None
            except RuntimeError:  # Python < 3.13 says a loop this way
                raise Unreadable("a symlink loop") from None
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise Unreadable("a symlink loop") from None
                raise
            if not _inside(target, roots):
                raise Unreadable(f"a symlink to {target}, outside the roots")
            st = os.stat(target)
    except OSError as e:
        raise Unreadable(f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable("not a regular file (a device, pipe or socket)")
    if st.st_size > MAX_FILE_BYTES:
        raise Unreadable(f"{st.st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit")
    return st


def read_source(path: Path) -> bytes:
    """The bytes of a file :func:`check_source` accepted, read without blocking on
    a file swapped for a pipe since and never past the size limit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise Unreadable(f"cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("not a regular file (a device, pipe or socket)")
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise Unreadable(f"over the {MAX_FILE_BYTES:,}-byte limit")
    return data


def discover(roots: Iterable[Path], skipped: list[str] | None = None) -> list[SourceFile]:
    """Every ``*.py`` file under the roots, sorted by key; UserError for a missing
    root or two files with one key. A file that may not be read (Note [Only regular
    files inside the roots]) is left out with a line in ``skipped``."""
    out: dict[str, SourceFile] = {}
    roots = list(roots)
    for root in roots:
        if not root.is_dir():
            what = "is not a folder" if root.exists() else "does not exist"
            raise UserError(f"--root {root}: {what}; expected a folder of test files")
    resolved = [r.resolve() for r in roots]
    for root in resolved:
        key_of = keyer(root)
        for path in _walk(root):
            try:
                st = check_source(path, resolved)
            except Unreadable as e:
                if skipped is not None:
                    skipped.append(f"{path}: {e}; not indexed")
                continue
            if not _utf8(str(path)):
                # the index, its JSON and the configs hold file keys as UTF-8 text
                if skipped is not None:
                    skipped.append(f"{path}: its name is not UTF-8; not indexed (rename it)")
                continue
            key = key_of(path)
            other = out.get(key)
            linked = other is not None and (path.is_symlink() or other.path.is_symlink())
            if other is not None and other.path != path and linked:
                # a symlink to a file of the tree is that file: indexed once, by its own path
                link = path if path.is_symlink() else other.path
                if skipped is not None:
                    skipped.append(f"{link}: a symlink to another file of the tree; not indexed")
                if link == path:
                    continue
            elif other is not None and other.path != path:
                raise UserError(
                    f"--root {root}: {path} and {other.path} have the same file key {key!r}; "
                    "index the two trees into separate --db files"
                )
            out[key] = SourceFile(key, root, path, st.st_size, st.st_mtime_ns)
    return [out[k] for k in sorted(out)]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a byte the file system gave as a surrogate escape
        return False
    return True


def _walk(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                yield Path(folder) / f


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


# ---------------------------------------------------------------- dependencies
class Deps:
    """In-tree modules each file imports, transitively, plus the ``conftest.py``
    files above it: a test file's variants are collected again when any of them
    changes (an edited local op database changes the variants of its users)."""

    def __init__(self, files: list[SourceFile], imports: Mapping[str, tuple[Import, ...]]) -> None:
        self.files = {f.key: f for f in files}
        self.by_path = {str(f.path): f.key for f in files}
        self.imports = imports
        self._direct: dict[str, tuple[str, ...]] = {}
        self._closure: dict[str, frozenset[str]] = {}

    def module_file(self, module: str, near: SourceFile) -> str | None:
        """The key of the in-tree file ``import module`` finds from ``near``."""
        for base in self._bases(near):
            found = self._lookup(base, module.split("."))
            if found is not None:
                return found
        return None

    def _bases(self, f: SourceFile) -> list[Path]:
        out = [f.path.parent]
        cur = f.path.parent
        while cur != f.root and f.root in cur.parents:
            cur = cur.parent
            out.append(cur)
        return out

    def _lookup(self, base: Path, parts: list[str]) -> str | None:
        if not parts or not all(parts):
            return None
        stem = base.joinpath(*parts)
        for cand in (f"{stem}.py", str(stem / "__init__.py")):
            key = self.by_path.get(cand)
            if key is not None:
                return key
        return None

    def direct(self, key: str) -> tuple[str, ...]:
        found = self._direct.get(key)
        if found is not None:
            return found
        f = self.files[key]
        out: set[str] = set()
        for imp in self.imports.get(key, ()):
            out.update(self._resolve(imp, f))
        folder = f.path.parent
        while True:
            conftest = self.by_path.get(str(folder / "conftest.py"))
            if conftest is not None and conftest != key:
                out.add(conftest)
            if folder == f.root or f.root not in folder.parents:
                break
            folder = folder.parent
        out.discard(key)
        self._direct[key] = tuple(sorted(out))
        return self._direct[key]

    def _resolve(self, imp: Import, f: SourceFile) -> list[str]:
        parts = imp.module.split(".") if imp.module else []
        if imp.level:
            base = f.path.parent
            for _ in range(imp.level - 1):
                base = base.parent
            bases = [base]
        else:
            bases = self._bases(f)
        out = []
        for base in bases:
            mod = (
                self._lookup(base, parts) if parts else self.by_path.get(str(base / "__init__.py"))
            )
            subs = [self._lookup(base, [*parts, n]) for n in imp.names if n != "*"]
            found = [k for k in (mod, *subs) if k is not None]
            if found:
                out += found
                break
        return out

    def closure(self, key: str) -> frozenset[str]:
        """Every in-tree file ``key`` depends on (itself excluded)."""
        found = self._closure.get(key)
        if found is not None:
            return found
        seen: set[str] = set()
        stack = list(self.direct(key))
        while stack:
            k = stack.pop()
            if k in seen or k == key:
                continue
            seen.add(k)
            known = self._closure.get(k)
            if known is not None:
                seen.update(known)
                continue
            stack.extend(self.direct(k))
        self._closure[key] = frozenset(seen)
        return self._closure[key]


# ---------------------------------------------------------------- stamps
def torch_dir() -> Path | None:
    spec = importlib.util.find_spec("torch")  # finds torch without importing it
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def torch_stamp() -> str:
    """The installed torch and its testing internals (the test database), by
    version and file stat; "" when torch is not installed."""
    base = torch_dir()
    if base is None:
        return ""
    parts: list[object] = []
    version = base / "version.py"
    if version.is_file():
        parts.append(version.read_text(encoding="utf-8", errors="replace"))
    internal = base / "testing" / "_internal"
    for folder, dirs, files in os.walk(internal):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                p = Path(folder) / f
                st = p.stat()
                parts.append([str(p.relative_to(internal)), st.st_size, st.st_mtime_ns])
    return digest(parts)


def ootest_stamp() -> str:
    """The ootest code a collection child runs (plugin, config, record, device)."""
    here = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in ("plugin", "config", "record", "device"):
        for folder, dirs, files in os.walk(here / sub):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith((".py", ".cpp", ".yaml")):
                    p = Path(folder) / f
                    h.update(str(p.relative_to(here)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:32]
