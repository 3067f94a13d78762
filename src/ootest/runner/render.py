"""Reports made from a run's results: terminal summary, JUnit XML, HTML.

All three are built from the results file alone (see :mod:`ootest.record.results`),
so a merged set of shard results renders exactly like one run. Nothing here
imports torch.
"""

from __future__ import annotations

import html
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.record.results import (
    BAD,
    CRASHED,
    ERROR,
    FAILED,
    OUTCOMES,
    PASSED,
    SKIPPED,
    TIMEOUT,
    XFAILED,
    XPASSED,
    XPASSED_STRICT,
    Record,
    RunData,
    blocking,
    headline,
    skip_cause,
)
from ootest.runner.guard import Trip

LABELS = {XPASSED_STRICT: "strict xpass"}
RAN_OK = (PASSED, XPASSED)


@dataclass
class Promotions:
    xpassed: list[Record] = field(default_factory=list)
    strict: list[Record] = field(default_factory=list)
    # skip entries (by origin) whose variants' capabilities are all declared now
    capable: dict[str, list[Record]] = field(default_factory=dict)

    @classmethod
    def of(cls, data: RunData) -> Promotions:
        p = cls()
        for r in data.records():
            if r["outcome"] == "xpassed":
                p.xpassed.append(r)
            elif r["outcome"] == "xpassed_strict":
                p.strict.append(r)
            elif r["outcome"] == SKIPPED and r.get("capable"):
                p.capable.setdefault(str(r.get("origin") or r.get("reason")), []).append(r)
        return p

    def __bool__(self) -> bool:
        return bool(self.xpassed or self.strict or self.capable)


_MISSING = re.compile(r"Could not run '(aten::[\w.]+)'")
_DTYPE = re.compile(r"(aten::[\w.]+) does not support dtype (\w+)")
FAILING = (FAILED, ERROR, CRASHED, TIMEOUT, XFAILED)


def cause(rec: Record) -> str:
    """What made a test fail, grouped: a missing kernel, an unsupported dtype, a signal."""
    msg = str(rec.get("message") or "")
    m = _MISSING.search(msg)
    if m:
        return f"missing kernel {m[1]}"
    m = _DTYPE.search(msg)
    if m:
        return f"{m[1]}: dtype {m[2]} not supported"
    if rec["outcome"] in (CRASHED, TIMEOUT):
        return f"{rec['outcome']}" + (f" ({rec['signal']})" if rec.get("signal") else "")
    return headline(msg)[:120] or rec["outcome"]


def failure_causes(data: RunData) -> list[tuple[str, int, Counter[str]]]:
    """(cause, count, outcomes) over failures, errors, crashes and expected failures."""
    by: dict[str, Counter[str]] = defaultdict(Counter)
    for r in data.records():
        if r["outcome"] in FAILING:
            by[cause(r)][r["outcome"]] += 1
    rows = [(c, sum(n.values()), n) for c, n in by.items()]
    return sorted(rows, key=lambda x: (-x[1], x[0]))


def per_file(data: RunData) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in data.records():
        out[str(r.get("file"))][r["outcome"]] += 1
    return dict(sorted(out.items()))


def _axis_rates(data: RunData) -> tuple[dict[str, list[int]], dict[str, list[int]], Any]:
    """Per op, per dtype and per (op, dtype): [passed, ran] over tests that ran."""
    ops: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    dts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in data.records():
        o = r["outcome"]
        if o == "skipped":
            continue
        good = int(o in RAN_OK or o == XFAILED)
        op = r.get("op")
        dtypes = str(r.get("dtype") or "").split(",") if r.get("dtype") else []
        targets: list[list[int]] = []
        if op:
            targets.append(ops[op])
        targets += [dts[d] for d in dtypes]
        if op:
            targets += [cells[(op, d)] for d in dtypes]
        for t in targets:
            t[0] += good
            t[1] += 1
    return dict(ops), dict(dts), dict(cells)


# ------------------------------------------------------------------ terminal
def print_summary(
    data: RunData,
    where: str,
    trips: list[Trip] | None = None,
    extra: list[str] | None = None,
) -> None:
    from rich.console import Console
    from rich.markup import escape as esc
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    table = Table(title="ootest summary")
    table.add_column("file", no_wrap=True, overflow="fold")
    present = [o for o in OUTCOMES if o not in (CRASHED, TIMEOUT, ERROR)]
    present += [o for o in (ERROR, CRASHED, TIMEOUT) if data.counts()[o]]
    for o in present:
        table.add_column(LABELS.get(o, o), justify="right")
    total: Counter[str] = Counter()
    for f, c in per_file(data).items():
        total.update(c)
        table.add_row(esc(f), *(_cell(o, c[o]) for o in present))
    table.add_row("[b]total[/b]", *(_cell(o, total[o]) for o in present))
    console.print(table)
    reasons = Counter(skip_cause(r) for r in data.records() if r["outcome"] == SKIPPED)
    if reasons:
        console.print("[b]top skip reasons[/b] (who skipped: the config or the test itself)")
        for reason, n in reasons.most_common(5):
            console.print(f"  {n:5d}  {esc(reason)}")
    causes = failure_causes(data)
    if causes:
        console.print("[b]top failure causes[/b] (failed, errors, crashes and expected failures)")
        for text, n, outcomes in causes[:8]:
            kinds = ", ".join(f"{k} {v}" for k, v in outcomes.most_common())
            console.print(f"  {n:5d}  {esc(text)}  [dim]({kinds})[/dim]")
    promos = Promotions.of(data)
    if promos.xpassed:
        console.print(f"[b]{len(promos.xpassed)} xfail variant(s) passed[/b] (promote them):")
        for r in promos.xpassed[:10]:
            console.print(f"  {esc(str(r['variant_id']))}")
    for origin, recs in list(promos.capable.items())[:10]:
        console.print(
            f"[yellow]skip entry {esc(origin)}[/yellow]: {len(recs)} variant(s) skipped although "
            "their op/dtype are declared supported now (run them?)"
        )
    if data.stale:
        console.print(f"[yellow]{len(data.stale)} config name(s) matched no test[/yellow]:")
        for rec in list(data.stale.values())[:20]:
            console.print(f"  {esc(str(rec.get('origin')))}: {esc(str(rec.get('name')))}")
        if len(data.stale) > 20:
            console.print(
                f"  ... and {len(data.stale) - 20} more (all of them: the HTML report, or "
                "the results file's 'stale' records)"
            )
    bad = [r for r in data.records() if blocking(r)]
    for r in bad[:20]:
        o = r["outcome"]
        kind = {XPASSED_STRICT: "strict xfail PASSED (promote it)"}.get(o, o.upper())
        first = headline(r.get("message"))
        text = esc(str(r["variant_id"])) + (f": {esc(first)}" if first else "")
        console.print(f"[red]{kind}[/red] {text}")
    for t in trips or ():
        console.print(f"[red]collection guard:[/red] {esc(t.message)}")
    for line in extra or ():
        console.print(esc(line))
    verdict = "[red]FAILED[/red]" if bad or trips else "[green]OK[/green]"
    console.print(f"{verdict}: {len(data.results)} results in {esc(where)}")


def _cell(outcome: str, n: int) -> str:
    if not n:
        return "[dim]0[/dim]"
    color = "green" if outcome == PASSED else None
    if outcome in BAD or outcome == "xpassed_strict":
        color = "red"
    elif outcome == "xpassed":
        color = "yellow"
    return f"[{color}]{n}[/{color}]" if color else str(n)


# --------------------------------------------------------------------- JUnit
PROPS = ("variant_id", "bucket", "mode", "reason", "issue", "op", "dtype", "outcome", "signal")


def junit(data: RunData, name: str = "ootest") -> ET.ElementTree[ET.Element]:
    root = ET.Element("testsuites", name=name)
    by_file: dict[str, list[Record]] = defaultdict(list)
    for r in data.records():
        by_file[str(r.get("file"))].append(r)
    totals: Counter[str] = Counter()
    for file, recs in sorted(by_file.items()):
        suite = ET.SubElement(root, "testsuite", name=file)
        c: Counter[str] = Counter()
        duration = 0.0
        for r in recs:
            # the file key names the file (the node ID may hold an absolute path)
            parts = [file, *str(r.get("nodeid") or r["variant_id"]).split("::")[1:]]
            module = file.removesuffix(".py").replace("/", ".")
            classname = ".".join([module, *parts[1:-1]])
            case = ET.SubElement(
                suite,
                "testcase",
                classname=classname,
                name=parts[-1],
                file=file,
                time=f"{float(r.get('duration') or 0):.3f}",
            )
            props = ET.SubElement(case, "properties")
            for key in PROPS:
                if r.get(key) not in (None, ""):
                    ET.SubElement(props, "property", name=f"ootest.{key}", value=str(r[key]))
            o, msg = r["outcome"], str(r.get("message") or "")
            first = headline(msg) or o
            if o in (FAILED, XPASSED_STRICT):
                ET.SubElement(case, "failure", message=first, type=o).text = msg
                c["failures"] += 1
            elif o in (ERROR, CRASHED, TIMEOUT):
                ET.SubElement(case, "error", message=first, type=o).text = msg
                c["errors"] += 1
            elif o in (SKIPPED, XFAILED):
                why = str(r.get("reason") or first)
                ET.SubElement(case, "skipped", message=why, type=o)
                c["skipped"] += 1
            c["tests"] += 1
            duration += float(r.get("duration") or 0)
        for k in ("tests", "failures", "errors", "skipped"):
            suite.set(k, str(c[k]))
        suite.set("time", f"{duration:.3f}")
        totals.update(c)
    for k in ("tests", "failures", "errors", "skipped"):
        root.set(k, str(totals[k]))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(data: RunData, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit(data).write(path, encoding="utf-8", xml_declaration=True)


# ---------------------------------------------------------------------- HTML
_CSS = """
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}
.bad{color:#b00020;font-weight:bold}.good{color:#1b7f2a}.warn{color:#a06000}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;max-height:12em;overflow:auto}
.m td{min-width:3.5em}
"""


def _rate_cell(v: list[int] | None) -> str:
    if not v or not v[1]:
        return "<td></td>"
    rate = v[0] / v[1]
    hue = int(120 * rate)  # red -> green
    return (
        f'<td style="background:hsl({hue},70%,85%)" data-passed="{v[0]}" data-ran="{v[1]}">'
        f"{v[0]}/{v[1]}</td>"
    )


def html_report(data: RunData, title: str, trips: list[Trip] | None = None) -> str:
    e = html.escape
    counts = data.counts()
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
        f"<p>Generated {e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}. "
        f"{len(data.results)} results.</p>",
    ]
    bad = [r for r in data.records() if blocking(r)]
    verdict = "FAILED" if bad or trips else "OK"
    parts.append(
        f"<p id='verdict' class='{'bad' if verdict == 'FAILED' else 'good'}'>{verdict}</p>"
    )
    parts.append("<h2>Totals</h2><table id='totals'><tr>")
    parts += [f"<th>{e(LABELS.get(o, o))}</th>" for o in OUTCOMES] + ["<th>total</th></tr><tr>"]
    parts += [f"<td data-outcome='{o}'>{counts[o]}</td>" for o in OUTCOMES]
    parts.append(f"<td data-outcome='total'>{len(data.results)}</td></tr></table>")

    if trips:
        parts.append("<h2>Collection guard</h2><ul id='guard'>")
        parts += [f"<li class='bad'>{e(t.message)}</li>" for t in trips]
        parts.append("</ul>")

    parts.append("<h2>Per file</h2><table id='files'><tr><th>file</th>")
    parts += [f"<th>{e(LABELS.get(o, o))}</th>" for o in OUTCOMES] + ["</tr>"]
    for f, c in per_file(data).items():
        parts.append(f"<tr><td>{e(f)}</td>")
        parts += [f"<td data-outcome='{o}'>{c[o]}</td>" for o in OUTCOMES]
        parts.append("</tr>")
    parts.append("</table>")

    ops, dts, cells = _axis_rates(data)
    if ops or dts:
        dtypes = sorted(dts)
        parts.append(
            "<h2>Pass rate per op and dtype</h2><p>passed (incl. expected failures) / ran; "
            "skipped variants are not counted.</p><table id='matrix' class='m'><tr><th>op</th>"
            "<th>all</th>"
        )
        parts += [f"<th>{e(d)}</th>" for d in dtypes] + ["</tr>"]
        parts.append("<tr><td><i>all</i></td><td></td>")
        parts += [_rate_cell(dts[d]) for d in dtypes] + ["</tr>"]
        for op in sorted(ops):
            parts.append(f"<tr><td>{e(op)}</td>{_rate_cell(ops[op])}")
            parts += [_rate_cell(cells.get((op, d))) for d in dtypes] + ["</tr>"]
        parts.append("</table>")

    causes = failure_causes(data)
    if causes:
        parts.append(
            "<h2>Failure causes</h2><p>failed, errors, crashes and expected failures, "
            "grouped (a missing kernel, an unsupported dtype, a signal, else the error)</p>"
            "<table id='causes'><tr><th>cause</th><th>count</th><th>outcomes</th></tr>"
        )
        for text, n, outcomes in causes:
            kinds = ", ".join(f"{k} {v}" for k, v in outcomes.most_common())
            parts.append(f"<tr><td>{e(text)}</td><td>{n}</td><td>{e(kinds)}</td></tr>")
        parts.append("</table>")
    if bad:
        parts.append("<h2>Failures, errors, crashes</h2><div id='failures'>")
        for r in bad:
            parts.append(
                f"<h3><span class='bad'>{e(r['outcome'])}</span> {e(str(r['variant_id']))}</h3>"
                f"<pre>{e(str(r.get('message') or ''))}</pre>"
            )
        parts.append("</div>")
    other = [r for r in data.records() if r["outcome"] in BAD and not blocking(r)]
    if other:
        parts.append("<h2>Failures in tests expected to fail</h2><ul>")
        parts += [f"<li>{e(r['outcome'])}: {e(str(r['variant_id']))}</li>" for r in other]
        parts.append("</ul>")

    promos = Promotions.of(data)
    parts.append("<h2>Promotions</h2><div id='promotions'>")
    if not promos:
        parts.append("<p>None.</p>")
    for label, recs in (
        ("xfail variants that passed", promos.xpassed),
        ("xfail_strict variants that passed (failing the run)", promos.strict),
    ):
        if recs:
            parts.append(f"<p>{e(label)}: {len(recs)}</p><ul>")
            parts += [f"<li>{e(str(r['variant_id']))}</li>" for r in recs]
            parts.append("</ul>")
    if promos.capable:
        parts.append("<p>skip entries whose op/dtype are declared supported now:</p><ul>")
        for origin, recs in promos.capable.items():
            parts.append(f"<li>{e(origin)}: {len(recs)} variant(s)</li>")
        parts.append("</ul>")
    parts.append("</div><h2>Stale config entries</h2><div id='stale'>")
    if data.stale:
        parts.append("<ul>")
        parts += [
            f"<li>{e(str(r.get('origin')))}: <code>{e(str(r.get('name')))}</code></li>"
            for r in data.stale.values()
        ]
        parts.append("</ul>")
    else:
        parts.append("<p>None.</p>")
    parts.append("</div></body></html>\n")
    return "".join(parts)


def write_html(data: RunData, path: Path, title: str, trips: list[Trip] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html_report(data, title, trips), encoding="utf-8")
