"""``ootest index build|diff|query|stats|embed|summarize``: the repository memory.

Only ``build`` starts processes that import torch (the database dump and the
variant collection); this process never imports it, and ``diff``, ``query``,
``stats`` open the index read-only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ootest.cache import MEMORY_DB

DEFAULT_DB = MEMORY_DB


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "index",
        help="the repository memory: test files, variants, fingerprints, text search",
    )
    isub = p.add_subparsers(dest="index_command", required=True, metavar="ACTION")

    b = isub.add_parser(
        "build",
        help="index test trees (incremental); extra arguments after -- go to pytest",
    )
    add_roots(b, "a folder of test files (a PyTorch checkout's test/, a backend's tests)")
    b.add_argument(
        "--device",
        metavar="DEVICE",
        help="collect variants for 'emu[:profile]' or 'module:name' (default: the host only)",
    )
    b.add_argument("--config", type=Path, metavar="FILE", help="test_suite_config deciding modes")
    b.add_argument(
        "--opdb",
        dest="opdbs",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="also index the OpInfo/ModuleInfo list MODULE.ATTR (importable from a --root) "
        "or FILE.py:ATTR",
    )
    b.add_argument(
        "--no-torch-db",
        dest="torch_db",
        action="store_false",
        help="do not index the installed torch's op_db, module_db, ... (only --opdb)",
    )
    b.add_argument(
        "--static-only",
        action="store_true",
        help="the static part only: no variants, no torch needed",
    )
    b.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="processes (default 1)")
    b.add_argument(
        "--group-size",
        type=int,
        default=64,
        metavar="N",
        help="test files per collecting process (default 64)",
    )
    _db_option(b)
    _json_option(b)
    b.set_defaults(func=build)

    d = isub.add_parser("diff", help="variants added, removed and modified between two indexes")
    d.add_argument("old", type=Path, metavar="OLD.db")
    d.add_argument("new", type=Path, metavar="NEW.db")
    _json_option(d)
    d.set_defaults(func=diff)

    q = isub.add_parser("query", help="find variants, tests, symbols and OpInfos")
    q.add_argument("text", metavar="TEXT")
    q.add_argument("--limit", type=int, default=20, metavar="N")
    q.add_argument(
        "--embed",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rank by embeddings too (default: when the index has them and the extra is installed)",
    )
    _db_option(q)
    _json_option(q)
    q.set_defaults(func=query)

    s = isub.add_parser("stats", help="counts by file, class, decorator, op, dtype; import errors")
    s.add_argument("--limit", type=int, default=20, metavar="N", help="rows per table (0: all)")
    _db_option(s)
    _json_option(s)
    s.set_defaults(func=stats)

    e = isub.add_parser(
        "embed",
        help="embed test texts (extra 'ootest[embed]': a model shipped in its wheel)",
    )
    e.add_argument(
        "--model", default=None, metavar="NAME", help="default wordllama/l2_supercat_256"
    )
    _db_option(e)
    e.set_defaults(func=embed)

    m = isub.add_parser("summarize", help="summarize tests through an OpenAI-compatible endpoint")
    m.add_argument("--endpoint", metavar="URL", help="base URL (env OOTEST_LLM_ENDPOINT)")
    m.add_argument("--model", metavar="NAME", help="model (env OOTEST_LLM_MODEL)")
    m.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="read the API key from this file (else env OOTEST_LLM_API_KEY, OPENAI_API_KEY)",
    )
    # a key on the command line is seen by every user of the machine (ps) and kept
    # in shell history: the old flag stays only to say so (issue 35 item 9)
    m.add_argument("--api-key", metavar="KEY", help=argparse.SUPPRESS)
    m.add_argument("--limit", type=int, default=None, metavar="N", help="ask at most N prompts")
    _db_option(m)
    m.set_defaults(func=summarize)


def add_roots(p: argparse.ArgumentParser, help: str) -> None:
    """``--root PATH...`` (one or more, repeatable): the test trees to index."""
    p.add_argument(
        "--root",
        dest="roots",
        action="extend",
        nargs="+",
        required=True,
        type=Path,
        metavar="PATH",
        help=help,
    )


def _db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", type=Path, default=DEFAULT_DB, metavar="PATH", help=f"index file ({DEFAULT_DB})"
    )


def _json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


# ---------------------------------------------------------------- build
class _RichReporter:
    """A rich progress bar on stderr, one task per phase (nothing when not a terminal)."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        from ootest.untrusted import console as untrusted_console

        console = untrusted_console(stderr=True)
        self.progress = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
            transient=False,
        )
        self.started = False

    def phase(self, label: str, total: int) -> Callable[[int], None]:
        if not self.started:
            self.progress.start()
            self.started = True
        task = self.progress.add_task(label, total=total)
        return lambda n: self.progress.advance(task, n)

    def done(self) -> None:
        if self.started:
            self.progress.stop()


def build(args: argparse.Namespace) -> int:
    from ootest.memory import BuildOptions, build_index

    if args.device:
        from ootest.device import check_device

        check_device(args.device)
    from ootest.atomic import check_output

    check_output(args.db, "--db")
    opts = BuildOptions(
        roots=tuple(args.roots),
        db=args.db,
        device=args.device,
        config=args.config,
        opdbs=tuple(args.opdbs),
        torch_db=args.torch_db,
        variants=not args.static_only,
        jobs=args.jobs,
        pytest_args=tuple(getattr(args, "pytest_args", ()) or ()),
        group_size=args.group_size,
    )
    report = build_index(opts, _RichReporter())
    if args.json:
        print(json.dumps({"summary": report.summary(), **report.to_json()}, indent=2))
        return 0
    from ootest.untrusted import for_terminal

    # file names, test IDs and parse errors come from the test tree (Note [Untrusted text])
    print(report.summary())
    for line in report.details().splitlines():
        print(for_terminal(line))
    for w in report.warnings:
        print(f"warning: {for_terminal(w)}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- diff
def diff(args: argparse.Namespace) -> int:
    from ootest.memory import diff_indexes

    d = diff_indexes(args.old, args.new)
    if args.json:
        return _emit([json.dumps(d.to_json(), indent=2)], escape=False)  # JSON escapes itself
    lines = [d.summary()]
    lines += [f"+ {vid}" for vid in d.added]
    lines += [f"- {vid}" for vid in d.removed]
    lines += [f"~ {m.id}  ({', '.join(m.reasons)})" for m in d.modified]
    lines += [
        f"> {m.old} -> {m.new}" + (f"  ({', '.join(m.reasons)})" if m.reasons else "")
        for m in d.moved
    ]
    return _emit(lines)


def _emit(lines: list[str], escape: bool = True) -> int:
    """Print ``lines`` (escaped unless they are JSON); a reader that stops early
    (``| head``) is not an error."""
    import os

    from ootest.untrusted import for_terminal

    try:
        for line in lines:
            print(for_terminal(line) if escape else line)  # IDs from a test tree
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would complain again at exit while flushing: point stdout elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# ---------------------------------------------------------------- query
def query(args: argparse.Namespace) -> int:
    from ootest.memory import query_index

    hits = query_index(args.db, args.text, limit=args.limit, embed=args.embed)
    if args.json:
        print(json.dumps([h.to_json() for h in hits], indent=2))
        return 0
    if not hits:
        print(f"nothing matches {args.text!r}")
        return 0
    from rich.table import Table
    from rich.text import Text

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_terminal, hide_env_secrets

    table = Table("#", "kind", "match", "found by", "text", box=None)
    for i, h in enumerate(hits, start=1):  # Text: IDs hold [brackets] rich would eat
        table.add_row(
            str(i),
            h.kind,
            Text(for_terminal(h.key)),
            Text(", ".join(h.found_by)),
            Text(for_terminal(hide_env_secrets(h.snippet)[:80])),
        )
    untrusted_console(width=200 if not sys.stdout.isatty() else None).print(table)
    return 0


# ---------------------------------------------------------------- stats
def stats(args: argparse.Namespace) -> int:
    from ootest.memory import index_stats

    s = index_stats(args.db, limit=args.limit or None)
    if args.json:
        print(json.dumps(s.to_json(), indent=2))
        return 0
    from rich.table import Table
    from rich.text import Text

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_terminal

    console = untrusted_console(width=200 if not sys.stdout.isatty() else None)
    totals = Table("what", "count", title="index", box=None)
    for name, n in s.totals.items():
        totals.add_row(name, f"{n:,}")
    for k in ("torch", "device", "roots"):
        if s.meta.get(k):
            totals.add_row(k, Text(s.meta[k]))
    console.print(totals)
    for title, rows, what in (
        ("variants by file", s.by_file, "file"),
        ("variants by class", s.by_class, "class"),
        ("tests by decorator", s.by_decorator, "decorator"),
        ("variants by op", s.by_op, "op"),
        ("variants by dtype", s.by_dtype, "dtype"),
    ):
        if not rows:
            continue
        t = Table(what, "count", title=title, box=None)
        for name, n in rows:
            t.add_row(Text(for_terminal(name)), f"{n:,}")
        console.print(t)
    if s.errors:
        t = Table("kind", "where", "error", title="errors", box=None)
        for kind, where, message in s.errors:
            t.add_row(kind, Text(for_terminal(where)), Text(for_terminal(_last_line(message))))
        console.print(t)
    return 0


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


# ---------------------------------------------------------------- optional extras
def embed(args: argparse.Namespace) -> int:
    from ootest.memory import embed_tests

    rep = embed_tests(args.db, model=args.model)
    print(f"embedded {rep.embedded:,} tests, {rep.reused:,} unchanged, {rep.dropped:,} dropped")
    return 0


def summarize(args: argparse.Namespace) -> int:
    from ootest.atomic import read_key
    from ootest.errors import UserError
    from ootest.memory import LLMSettings, summarize_tests

    if args.api_key is not None:
        raise UserError(
            "--api-key: expected no key on the command line (every user of the machine sees "
            "it, and the shell keeps it); put it in a file and pass --api-key-file FILE, or "
            "set OOTEST_LLM_API_KEY"
        )
    key = read_key(args.api_key_file, "--api-key-file") if args.api_key_file else None
    settings = LLMSettings.resolve(args.endpoint, args.model, key)
    rep = summarize_tests(args.db, settings, limit=args.limit)
    print(f"summarized {rep.asked:,} tests, {rep.cached:,} from the cache")
    return 0
