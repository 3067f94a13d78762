"""Writing a file so that readers see the old contents or the new, never a part."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["check_output", "write_atomic"]


def check_output(path: Path, what: str, *, folder: bool = False) -> None:
    """Raise a one-line :class:`~ootest.errors.UserError` when ``path`` (given as
    ``what``, e.g. ``--results``) cannot be written: a folder where a file is meant
    (or a file where a folder is), or a parent folder that cannot be created. Checked
    before a run starts, so a bad path costs no test (it was a traceback after all of
    them, or a pytest INTERNALERROR). Creates the parent folders."""
    from ootest.errors import UserError

    if folder and path.exists() and not path.is_dir():
        raise UserError(f"{what} {path}: is a file; expected a folder (or a new path)")
    if not folder and path.is_dir():
        raise UserError(f"{what} {path}: is a folder; expected a file path")
    try:
        (path if folder else path.parent).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = e.strerror or str(e)
        if isinstance(e, (FileExistsError, NotADirectoryError)):
            why = "a file is in the way"
        raise UserError(
            f"{what} {path}: cannot create its folder ({why}); pass a path in a writable folder"
        ) from None


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a unique temporary file in the same folder
    and a rename (text as UTF-8). The folder is created; on any error the temporary
    file is removed and the error raised, ``path`` untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
