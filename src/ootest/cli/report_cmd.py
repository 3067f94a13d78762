"""``ootest report``: print or write a report (table, CRCR JSON, JUnit, HTML, trend)
from results files. Never imports torch."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ootest.errors import UserError


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "report",
        help="print or write a report from results; --trend: what changed between runs",
        description="Render results: 'json' prints CRCR test_results {passed, failed, "
        "skipped, total}; 'table' the terminal summary; 'junit' and 'html' write files. "
        "Several RESULTS are shards of one run and are merged, unless --trend says they "
        "are successive runs. 'coverage' (with --ops DB) prints per aten op the variants "
        "that call it and how they ended, per dtype; 'summary' writes the Markdown job "
        "summary for $GITHUB_STEP_SUMMARY.",
    )
    r.add_argument(
        "--artifact-url",
        metavar="URL",
        help="with --format summary: the URL of the run's artifacts (report.html ...), linked",
    )
    r.add_argument("inputs", nargs="+", metavar="RESULTS")
    r.add_argument("--format", choices=("json", "table", "junit", "html", "coverage", "summary"))
    r.add_argument(
        "-o", "--output", metavar="PATH", help="file for the report, any format (default: stdout)"
    )
    r.add_argument(
        "--trend",
        action="store_true",
        help="the RESULTS are successive runs, oldest first (merge each run's shards with "
        "'ootest merge' first): the newest is reported, and the table and HTML add outcome "
        "counts per run and the variants whose outcome changed between the last two",
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="with --trend: print the trend as JSON instead of a report; with --format "
        "coverage: the coverage as JSON",
    )
    r.add_argument(
        "--ops",
        type=Path,
        metavar="DB",
        help="op map index (ootest ops capture/ingest): op x dtype coverage in --format "
        "coverage, html and summary",
    )
    r.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="with --trend: variant IDs listed per change; with --format coverage: ops "
        "listed (default 50; 0 lists all)",
    )
    r.set_defaults(func=report)


def _load(inputs: list[str]) -> Any:
    from ootest.runner.merge import read_runs

    return read_runs(Path(p) for p in inputs)


def report(args: argparse.Namespace) -> int:
    from ootest.runner.render import html_report, junit, print_summary, print_trend

    if args.limit < 0:
        raise UserError(f"--limit: expected a number >= 0 (0 lists all); found {args.limit}")
    coverage_json = args.json and args.format == "coverage"
    if args.json and not args.trend and not coverage_json:
        raise UserError(
            "--json: prints the trend of successive runs (add --trend and give two or more "
            "results files, oldest first) or the coverage (--format coverage --ops DB); "
            "for CRCR test_results use --format json"
        )
    if args.json and args.format and not coverage_json:
        raise UserError(f"--json: replaces --format {args.format}; give only one of them")
    if args.format == "coverage" and args.ops is None:
        raise UserError(
            "--format coverage: needs the op map the coverage is read from; add --ops DB "
            "(built by 'ootest ops capture' or 'ootest ops ingest')"
        )
    if args.output:
        from ootest.atomic import check_output

        check_output(Path(args.output), "-o")
    fmt = args.format or "table"
    trend = None
    if args.trend:
        if len(args.inputs) < 2:
            raise UserError(
                f"--trend: expected two or more results files, oldest first; found "
                f"{len(args.inputs)} ({args.inputs[0]}); add an earlier run's results"
            )
        from ootest.runner.trend import trend as make_trend

        runs = [(p, _load([p])[0]) for p in args.inputs]
        trend = make_trend(runs)
        data, where = runs[-1][1], args.inputs[-1]
    else:
        data, where = _load(args.inputs)[0], ", ".join(args.inputs)
    cov = None
    if args.ops is not None:
        from ootest.runner.coverage import coverage, load_op_map

        cov = coverage(data, *load_op_map(args.ops), source=str(args.ops))
    text: str | None
    if coverage_json:
        assert cov is not None
        text = json.dumps(cov.to_json(), indent=1)
    elif fmt == "coverage":
        from ootest.runner.coverage import print_coverage

        assert cov is not None
        text = _printed(lambda: print_coverage(cov, args.limit), args.output)
    elif fmt == "summary":
        from ootest.runner.summary import job_summary

        text = job_summary(data, where, coverage=cov, artifact_url=args.artifact_url)
    elif args.json and trend is not None:
        text = json.dumps(trend.to_json(args.limit), indent=1)
    elif fmt == "json":
        text = json.dumps(data.test_results())
    elif fmt == "table":

        def table() -> None:
            print_summary(data, where)
            if trend is not None:
                print_trend(trend, args.limit)

        text = _printed(table, args.output)
    elif fmt == "junit":
        import xml.etree.ElementTree as ET

        text = ET.tostring(junit(data).getroot(), encoding="unicode")
    else:
        title = f"ootest: {where}" + (f" (trend over {len(args.inputs)} runs)" if trend else "")
        text = html_report(data, title, trend=trend, trend_limit=args.limit, coverage=cov)
    if args.output:
        from ootest.atomic import write_output

        write_output(Path(args.output), (text or "") + "\n", "-o")
    elif text is not None:
        sys.stdout.write(text + "\n")
    return 0


def _printed(show: Callable[[], None], output: str | None) -> str | None:
    """What ``show`` prints, when it goes to ``-o`` (None: it went to the terminal)."""
    if not output:
        show()
        return None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        show()
    return buf.getvalue().rstrip("\n")
