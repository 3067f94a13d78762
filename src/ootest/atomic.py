"""Writing a file so that readers see the old contents or the new, never a part.

Note [Files written only where asked]: every file ootest writes goes through
:func:`write_atomic`: a unique temporary file created next to the target (``O_EXCL``,
so a planted ``OUT.tmp`` symlink is never written through, and two writers never
share a temporary), then a rename over the target. The rename replaces a symlink at
the target itself, never the file it points to; a target that exists and is not a
regular file (``/dev/full``, a named pipe, a folder) is refused, so a device node is
never replaced by a file. A full disk or a read-only folder leaves the target as it
was and raises ``OSError``; :func:`write_output` turns that into one line for a
command's output flag.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "NotRegularFile",
    "being_written",
    "check_output",
    "decode_text",
    "describe_os_error",
    "exclusive",
    "read_bounded",
    "read_key",
    "read_regular",
    "read_text_bounded",
    "write_atomic",
    "write_output",
]


@functools.cache
def _umask() -> int:
    mask = os.umask(0o022)  # read once: os.umask can only be read by setting it
    os.umask(mask)
    return mask


class NotRegularFile(OSError):
    """The target of a write exists and is not a regular file (or a symlink)."""


def _check_target(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:
        return  # the write itself will say what is wrong
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
    raise NotRegularFile(errno.EEXIST, f"is {kind}; expected a file path", str(path))


def check_output(path: Path, what: str, *, folder: bool = False) -> None:
    """Raise a one-line :class:`~ootest.errors.UserError` when ``path`` (given as
    ``what``, e.g. ``--results``) cannot be written: a folder where a file is meant
    (or a file where a folder is), a device or pipe, or a parent folder that cannot be
    created or written. Checked before a run starts, so a bad path costs no test (it
    was a traceback after all of them, or a pytest INTERNALERROR). Creates the parent
    folders."""
    from ootest.errors import UserError

    if folder and path.exists() and not path.is_dir():
        raise UserError(f"{what} {path}: is a file; expected a folder (or a new path)")
    if not folder and path.is_dir():
        raise UserError(f"{what} {path}: is a folder; expected a file path")
    if not folder:
        try:
            _check_target(path)
        except NotRegularFile as e:
            raise UserError(f"{what} {path}: {e.strerror}") from None
    where = path if folder else path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = e.strerror or str(e)
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            why = "a file is in the way"
        raise UserError(
            f"{what} {path}: cannot create its folder ({why}); pass a path in a writable folder"
        ) from None
    if not os.access(where, os.W_OK | os.X_OK):
        raise UserError(
            f"{what} {path}: its folder {where} is not writable; pass a path in a writable folder"
        )


def write_atomic(path: Path, data: bytes | str | Callable[[BinaryIO], object]) -> None:
    """Write ``data`` to ``path`` through a unique temporary file in the same folder
    and a rename (text as UTF-8; a callable is given the open binary file to write
    to). The folder is created; on any error the temporary file is removed and the
    error raised, ``path`` untouched (Note [Files written only where asked])."""
    write_all_atomic([(path, data)])


Data = bytes | str | Callable[[BinaryIO], object]


def write_all(fh: BinaryIO, data: bytes) -> None:
    """All of ``data`` into ``fh`` (a callable's file is unbuffered: a write may take
    less than asked)."""
    view = memoryview(data)
    while view:
        view = view[fh.write(view) or 0 :]


def write_all_atomic(items: Sequence[tuple[Path, Data]]) -> None:
    """:func:`write_atomic` for files that belong together (a config and its evidence
    sidecar): every one is written to its temporary file first, and only when all
    are whole are they renamed into place, so a full disk or a failing writer leaves
    every target as it was, never a new one beside an old one."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in items:
            staged.append((_stage(path, data), path))
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _stage(path: Path, data: Data) -> str:
    """``data`` whole in a new temporary file next to ``path``; its name."""
    _check_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # unbuffered for a callable: it may write through the descriptor (copy_file_range)
        with os.fdopen(fd, "wb", buffering=0 if callable(data) else -1) as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        with contextlib.suppress(OSError):
            # mkstemp makes 0600; a written file gets the usual mode (umask applied)
            os.chmod(tmp, 0o666 & ~_umask())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def write_output(path: Path, data: bytes | str | Callable[[BinaryIO], object], what: str) -> None:
    """:func:`write_atomic` for a file a command was asked to write (``what`` names
    the flag, e.g. ``--out``): an ``OSError`` (a read-only folder, a full disk, a
    device at the path) becomes one :class:`~ootest.errors.UserError` line and the
    target keeps its old contents."""
    write_outputs([(path, data)], what)


def write_outputs(items: Sequence[tuple[Path, Data]], what: str) -> None:
    """:func:`write_all_atomic` as :func:`write_output` reports errors: one line, every
    target unchanged."""
    from ootest.errors import UserError

    try:
        write_all_atomic(items)
    except OSError as e:
        names = " and ".join(str(p) for p, _ in items)
        verb = "is" if len(items) == 1 else "are"
        raise UserError(
            f"{what} {items[0][0]}: {describe_os_error(e)}; {names} {verb} unchanged"
        ) from None


def describe_os_error(e: OSError) -> str:
    """``cannot write (No space left on device)``: an OS error in a few words."""
    if isinstance(e, NotRegularFile):
        return str(e.strerror)
    why = e.strerror or str(e)
    return f"cannot write ({why})"


# Note [One writer of an index]
# Two `index build`s (or two `ops merge`s) into one file raced: "database is locked"
# tracebacks, a half-created file read as "not an ootest index", a schema inserted
# twice. A writer holds an exclusive flock on the index file itself for as long as
# its connection is open (flock, not SQLite's own fcntl locks: closing any
# descriptor of a file drops a process's fcntl locks, never a flock held on another
# descriptor); the lock is the kernel's, so a writer killed with -9 leaves none
# behind. A reader only asks whether a writer is at work, to say so instead of
# reporting an empty or half-built file as corrupt.


@contextlib.contextmanager
def exclusive(path: Path, busy: str, *, wait: float = 0.0) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created, empty, when missing). When
    another process holds it: wait up to ``wait`` seconds (saying so once on
    stderr), then raise :class:`~ootest.errors.UserError` with ``busy``."""
    import fcntl
    import sys
    import time

    from ootest.errors import UserError

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o666)
    except OSError as e:  # read-only (a file, a folder, a file system), a symlink
        raise UserError(
            f"{path}: cannot open it for writing ({e.strerror or e}); pass a writable path"
        ) from None
    try:
        deadline = time.monotonic() + wait
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UserError(busy) from None
                if not said:
                    print(f"ootest: waiting: {busy}", file=sys.stderr)
                    said = True
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def being_written(path: Path) -> bool:
    """Whether another process holds :func:`exclusive` on ``path`` now."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


# Note [Bounded reads of named files]
# A file a user names (a results file, a supported-ops list, preferences) may be
# /dev/zero, a FIFO fed forever, or not UTF-8: read at most a bound, and say in one
# line what was found instead of a traceback or a hang.

#: Bytes read at most from a file a command was handed (a results file of 23,000
#: variants is ~20 MB).
MAX_INPUT_BYTES = 512 * 2**20


def read_bounded(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of ``path`` (``what`` names it: ``--results``), at most ``limit``;
    one :class:`~ootest.errors.UserError` line for anything unreadable or larger."""
    from ootest.errors import UserError

    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        if isinstance(e, IsADirectoryError):
            raise UserError(f"{what} {path}: is a folder; expected a file") from None
        raise UserError(f"{what} {path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise UserError(
            f"{what} {path}: expected at most {limit:,} bytes; found more (a device or an "
            "endless stream?)"
        )
    return data


def read_regular(path: Path, what: str, *, limit: int) -> bytes:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes
    (a key file): opened without blocking, so a FIFO or a device is one
    :class:`~ootest.errors.UserError` line, never a hang or an endless read."""
    from ootest.errors import UserError

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise UserError(f"{what} {path}: cannot read it ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
            raise UserError(f"{what} {path}: is {kind}; expected a regular file")
        if st.st_size > limit:
            raise UserError(
                f"{what} {path}: expected at most {limit:,} bytes; found {st.st_size:,}"
            )
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise UserError(f"{what} {path}: cannot read it ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while read
        raise UserError(f"{what} {path}: expected at most {limit:,} bytes; found more")
    return data


def read_text_bounded(path: Path, what: str, *, limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_bounded`, decoded as UTF-8 (one line naming the first bad byte)."""
    return decode_text(read_bounded(path, what, limit=limit), f"{what} {path}")


#: The most an API key file may hold (a key is tens of bytes; a token a few KB).
MAX_KEY_BYTES = 64 * 2**10


def read_key(path: Path, flag: str) -> str:
    """The API key in ``path`` (``flag`` names the option), stripped: a regular file
    of at most :data:`MAX_KEY_BYTES` of UTF-8 text (:func:`read_regular`), not empty;
    anything else is one :class:`~ootest.errors.UserError` line."""
    from ootest.errors import UserError

    key = decode_text(read_regular(path, flag, limit=MAX_KEY_BYTES), f"{flag} {path}").strip()
    if not key:
        raise UserError(f"{flag} {path}: expected the API key; the file is empty")
    return key


def decode_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8, or one :class:`~ootest.errors.UserError` line at
    ``where:LINE`` naming the first byte that is not."""
    from ootest.errors import UserError

    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(
            f"{where}:{line}: expected UTF-8 text; found the byte 0x{data[e.start]:02x}, "
            "which is not; save the file as UTF-8"
        ) from None
