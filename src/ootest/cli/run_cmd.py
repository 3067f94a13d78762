"""``ootest run CONFIG [-- PYTEST_ARGS]``: the main job.

Runs the config's files with the plugin in a pytest subprocess (torch is never
imported here), streams its progress, then prints a summary per file and
outcome from the JSONL results the plugin wrote as it went.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "xpassed_strict", "skipped")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a config's test files on the device")
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--device", help="override the config's device ('emu[:profile]' or 'mod:name')")
    p.add_argument(
        "--results",
        metavar="PATH",
        help="JSONL results file (default: .ootest/results-<time>.jsonl)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="less pytest output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ootest.config.load import load_config

    cfg = load_config(args.config)
    results = Path(args.results or f".ootest/results-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    results.parent.mkdir(parents=True, exist_ok=True)
    if results.exists():
        results.unlink()
    files = list(dict.fromkeys(str(rf.path) for rf in cfg.files))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *files,
        "--ootest-config",
        str(cfg.source),
        "--ootest-results",
        str(results),
        "-p",
        "no:cacheprovider",
        "-q" if args.quiet else "-v",
        "-rN",
        *args.pytest_args,
    ]
    if args.device:
        cmd += ["--ootest-device", args.device]
    env = dict(os.environ)
    print(f"ootest: running {len(files)} file(s) from {cfg.source}", flush=True)
    rc = subprocess.call(cmd, env=env)
    records = read_results(results)
    print_summary(records, results)
    if rc in (2, 3, 4):  # interrupted, internal error, usage error in pytest
        return 2
    if any(blocking(r) for r in records):
        return 1
    return 0


def read_results(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run
    return out


def blocking(rec: dict[str, Any]) -> bool:
    """A result that fails the run: a mandatory test that did not pass, or a strict xpass."""
    if rec["outcome"] == "xpassed_strict":
        return True
    return rec["outcome"] in ("failed", "error") and rec.get("mode") in (None, "mandatory_success")


def print_summary(records: list[dict[str, Any]], results: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    per_file: dict[str, Counter[str]] = defaultdict(Counter)
    skip_reasons: Counter[str] = Counter()
    for r in records:
        per_file[r["file"]][r["outcome"]] += 1
        if r["outcome"] == "skipped":
            skip_reasons[r.get("reason") or r.get("message") or "?"] += 1
    table = Table(title="ootest summary", show_lines=False)
    table.add_column("file", no_wrap=True, overflow="fold")
    labels = {"xpassed_strict": "strict xpass"}
    for o in OUTCOMES:
        table.add_column(labels.get(o, o), justify="right")
    total: Counter[str] = Counter()
    for f in sorted(per_file):
        c = per_file[f]
        total.update(c)
        table.add_row(f, *(_cell(o, c[o]) for o in OUTCOMES))
    table.add_row("[b]total[/b]", *(_cell(o, total[o]) for o in OUTCOMES))
    console.print(table)
    if skip_reasons:
        console.print("[b]top skip reasons[/b]")
        for reason, n in skip_reasons.most_common(5):
            console.print(f"  {n:5d}  {reason}")
    promos = [r for r in records if r["outcome"] == "xpassed"]
    if promos:
        console.print(f"[b]{len(promos)} xfail variant(s) passed[/b] (promotion candidates):")
        for r in promos[:10]:
            console.print(f"  {r['variant_id']}")
    bad = [r for r in records if blocking(r)]
    for r in bad[:20]:
        kind = "strict xfail PASSED (promote it)" if r["outcome"] == "xpassed_strict" else "FAILED"
        console.print(f"[red]{kind}[/red] {r['variant_id']}")
    verdict = "[red]FAILED[/red]" if bad else "[green]OK[/green]"
    console.print(f"{verdict}: {len(records)} results in {results}")


def _cell(outcome: str, n: int) -> str:
    if not n:
        return "[dim]0[/dim]"
    color = {
        "passed": "green",
        "failed": "red",
        "error": "red",
        "xpassed_strict": "red",
        "xpassed": "yellow",
    }.get(outcome)
    return f"[{color}]{n}[/{color}]" if color else str(n)
