"""``ootest plan``, ``ootest merge`` and ``ootest report``: shards and reports.

None of them imports torch: they work from configs and results files only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ootest.errors import UserError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="split a config's tests into N shards; print a GitHub Actions matrix",
        description="Print a GitHub Actions matrix (JSON) with one leg per shard. Each leg runs "
        "'ootest run CONFIG --shard I/N --durations RESULTS'; the split itself is made by "
        "the run from the same durations, greedy longest-first, so every test is in one shard.",
    )
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--shards", type=int, required=True, metavar="N")
    p.add_argument(
        "--durations",
        metavar="PATH",
        action="append",
        help="results of earlier runs (JSONL); their durations estimate each shard's load",
    )
    p.set_defaults(func=plan)

    m = sub.add_parser(
        "merge",
        help="combine shard results into one report",
        description="Combine results files (e.g. one per shard) into one JSONL, JUnit XML "
        "and HTML report, and exit like 'ootest run' would have.",
    )
    m.add_argument("inputs", nargs="+", metavar="RESULTS")
    m.add_argument("--results", metavar="PATH", default=".ootest/merged.jsonl")
    m.add_argument("--junit", metavar="PATH", default=".ootest/merged-junit.xml")
    m.add_argument("--html", metavar="PATH", default=".ootest/merged-report.html")
    m.set_defaults(func=merge)

    r = sub.add_parser(
        "report",
        help="print or write a report from results; --trend: what changed between runs",
        description="Render results: 'json' prints CRCR test_results {passed, failed, "
        "skipped, total}; 'table' the terminal summary; 'junit' and 'html' write files. "
        "Several RESULTS are shards of one run and are merged, unless --trend says they "
        "are successive runs.",
    )
    r.add_argument("inputs", nargs="+", metavar="RESULTS")
    r.add_argument("--format", choices=("json", "table", "junit", "html"))
    r.add_argument("-o", "--output", metavar="PATH", help="file for junit/html (default: stdout)")
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
        help="with --trend: print the trend as JSON instead of a report",
    )
    r.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="with --trend: variant IDs listed per change (default 50; 0 lists all)",
    )
    r.set_defaults(func=report)


def plan(args: argparse.Namespace) -> int:
    from ootest.config.load import load_config
    from ootest.config.paths import file_keys
    from ootest.record.shard import assign, durations_from

    if args.shards < 1:
        raise UserError(f"--shards: expected a number >= 1; found {args.shards}")
    cfg = load_config(args.config)
    keys = file_keys(cfg.source, (t for t, _ in cfg.resolved))
    files = {keys.key(rf.path) for rf in cfg.files}
    durations = durations_from([Path(p) for p in args.durations or []], files)
    _, load = assign(durations, durations, args.shards)
    name = cfg.source.stem
    device = cfg.suite.device or "plain"
    include = []
    for i in range(args.shards):
        include.append(
            {
                "shard": f"{i + 1}/{args.shards}",
                "index": i + 1,
                "total": args.shards,
                "job_name": f"ootest {name} ({device}) shard {i + 1} of {args.shards}",
                "artifact": f"ootest-{name}-shard-{i + 1}-of-{args.shards}",
                "estimated_seconds": round(load[i], 1) if durations else None,
            }
        )
    print(json.dumps({"include": include}))
    return 0


def _load(inputs: list[str]) -> Any:
    from ootest.record.results import RunData, read_records

    recs = []
    for p in inputs:
        recs.extend(read_records(Path(p), missing_ok=False))
    return RunData.from_records(recs), recs


def merge(args: argparse.Namespace) -> int:
    from ootest.record.results import Appender, blocking
    from ootest.runner.render import print_summary, write_html, write_junit

    data, recs = _load(args.inputs)
    out = Path(args.results)
    if out.resolve() in {Path(p).resolve() for p in args.inputs}:
        raise UserError(f"--results {out}: is also an input; choose another output file")
    if out.exists():
        out.unlink()
    w = Appender(out)
    for rec in recs:
        if rec.get("kind") != "result":
            w.write(rec)  # collection, stale and session records, as they were
    for rec in data.results.values():
        w.write(rec)
    w.close()
    write_junit(data, Path(args.junit))
    write_html(data, Path(args.html), f"ootest: {len(args.inputs)} merged result file(s)")
    print_summary(data, str(out), extra=[f"JUnit: {args.junit}  HTML: {args.html}"])
    return 1 if any(blocking(r) for r in data.results.values()) else 0


def report(args: argparse.Namespace) -> int:
    from ootest.runner.render import html_report, junit, print_summary, print_trend

    if args.limit < 0:
        raise UserError(f"--limit: expected a number >= 0 (0 lists all); found {args.limit}")
    if args.json and not args.trend:
        raise UserError(
            "--json: prints the trend of successive runs; add --trend and give two or more "
            "results files, oldest first (for CRCR test_results use --format json)"
        )
    if args.json and args.format:
        raise UserError(f"--json: replaces --format {args.format}; give only one of them")
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
    if args.json and trend is not None:
        text = json.dumps(trend.to_json(args.limit), indent=1)
    elif fmt == "json":
        text = json.dumps(data.test_results())
    elif fmt == "table":
        print_summary(data, where)
        if trend is not None:
            print_trend(trend, args.limit)
        return 0
    elif fmt == "junit":
        import xml.etree.ElementTree as ET

        text = ET.tostring(junit(data).getroot(), encoding="unicode")
    else:
        title = f"ootest: {where}" + (f" (trend over {len(args.inputs)} runs)" if trend else "")
        text = html_report(data, title, trend=trend, trend_limit=args.limit)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
    return 0
