"""``ootest merge``: results files of one run (e.g. one per shard) into one results
file, JUnit XML and HTML report (``ootest.runner.merge``). Never imports torch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ootest.cache import WORK_DIR


def add_parser(sub: Any) -> None:
    m = sub.add_parser(
        "merge",
        help="combine shard results into one report",
        description="Combine results files (e.g. one per shard) into one JSONL, JUnit XML "
        "and HTML report, and exit like 'ootest run' would have.",
    )
    m.add_argument("inputs", nargs="+", metavar="RESULTS")
    m.add_argument("--results", metavar="PATH", default=str(WORK_DIR / "merged.jsonl"))
    m.add_argument("--junit", metavar="PATH", default=str(WORK_DIR / "merged-junit.xml"))
    m.add_argument("--html", metavar="PATH", default=str(WORK_DIR / "merged-report.html"))
    m.set_defaults(func=merge)


def merge(args: argparse.Namespace) -> int:
    from ootest.atomic import check_output
    from ootest.record.results import blocking
    from ootest.runner.merge import merge as merge_runs
    from ootest.runner.render import print_summary, write_html, write_junit

    out = Path(args.results)
    for what, path in (("--results", out), ("--junit", args.junit), ("--html", args.html)):
        check_output(Path(path), what)
    data = merge_runs([Path(p) for p in args.inputs], out)
    write_junit(data, Path(args.junit))
    write_html(data, Path(args.html), f"ootest: {len(args.inputs)} merged result file(s)")
    print_summary(data, str(out), extra=[f"JUnit: {args.junit}  HTML: {args.html}"])
    return 1 if any(blocking(r) for r in data.results.values()) else 0
