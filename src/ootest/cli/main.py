"""``ootest`` command line: one module per subcommand, ``main(argv) -> int``.

Exit codes: the table in :mod:`ootest.errors` (0 success; 1 test failures, or config
problems for ``config validate``; 2 usage or config error; 3 collection guard
tripped, ``run``; 70 a bug in ootest; 130 interrupted; 141 the reader of the output
went away, e.g. ``| head``, said nothing).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from collections.abc import Sequence

from ootest.errors import EXIT_BUG, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USAGE, UserError


def _parser() -> argparse.ArgumentParser:
    from ootest.cli import (
        config_cmd,
        index_cmd,
        init_cmd,
        merge_cmd,
        ops_cmd,
        relay_cmd,
        report_cmd,
        run_cmd,
        shards_cmd,
    )

    p = argparse.ArgumentParser(
        prog="ootest",
        description="Run PyTorch's upstream tests on an out-of-tree (privateuse1) device.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_cmd.add_parser(sub)
    shards_cmd.add_parser(sub)
    merge_cmd.add_parser(sub)
    report_cmd.add_parser(sub)
    config_cmd.add_parser(sub)
    relay_cmd.add_parser(sub)
    init_cmd.add_parser(sub)
    index_cmd.add_parser(sub)
    ops_cmd.add_parser(sub)
    from ootest.cli import model_cmd

    model_cmd.add_parser(sub)
    from ootest.cli import select_cmd

    select_cmd.add_parser(sub)
    _bound_ints(p)
    return p


def _int64(text: str) -> int:
    """An integer argument: SQLite and C take at most 64 bits (``--limit
    99999999999999999999`` was an OverflowError traceback)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer; found {text!r}") from None
    if not -(2**63) <= n < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer below 2**63; found {text}")
    return n


def _bound_ints(p: argparse.ArgumentParser) -> None:
    """Every ``type=int`` option of every subcommand takes :func:`_int64` (one place,
    so a new option cannot forget it)."""
    for action in p._actions:
        if action.type is int:
            action.type = _int64
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _bound_ints(child)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Everything after a bare "--" goes to pytest untouched.
    extra: list[str] = []
    if "--" in args_list:
        i = args_list.index("--")
        args_list, extra = args_list[:i], args_list[i + 1 :]
    parser = _parser()
    args = parser.parse_args(args_list)
    args.pytest_args = extra
    try:
        rc: int = args.func(args)
        return rc
    except UserError as e:
        print(f"ootest: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except OSError as e:
        if e.errno not in _USER_ERRNOS or not e.filename:
            traceback.print_exc()
            print("ootest: internal error (a bug in ootest; please report it)", file=sys.stderr)
            return EXIT_BUG
        # a file the user named cannot be written or read (read-only, full disk, no
        # permission): one line, not a traceback (issue 28 item 10)
        print(f"ootest: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        # a command may say what it kept and how to go on (Note [Interrupted runs])
        print(f"ootest: interrupted; {e}" if str(e) else "ootest: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:
        traceback.print_exc()
        print("ootest: internal error (a bug in ootest; please report it)", file=sys.stderr)
        return EXIT_BUG


#: OS errors about a path that the user can fix (permissions, a read-only or full file
#: system); any other OSError is a bug and keeps its traceback.
_USER_ERRNOS = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG}
)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered would raise BrokenPipeError
    again when Python flushes it at exit (the recipe in Python's ``signal`` docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def entry() -> None:
    rc = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        rc = EXIT_PIPE
    sys.exit(rc)
