"""Reports made from a run's results: terminal summary, JUnit XML, HTML.

All three are built from the results file alone (see :mod:`ootest.record.results`),
so a merged set of shard results renders exactly like one run. Nothing here
imports torch.
"""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ootest.htmlpage import CSP, SORT_FILTER_JS, WIDGET_CSS, clipped, esc
from ootest.record.results import (
    BAD,
    CRASHED,
    ERROR,
    FAILED,
    OUTCOMES,
    PASSED,
    SKIPPED,
    SKIPPED_BY,
    TIMEOUT,
    XFAILED,
    XPASSED,
    XPASSED_STRICT,
    Record,
    RunData,
    blocking,
    headline,
)
from ootest.runner.guard import Trip
from ootest.runner.reasons import Group, details_text, expected_groups, skip_groups
from ootest.runner.trend import Trend, shown

if TYPE_CHECKING:
    from ootest.runner.coverage import Coverage

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


def class_of(rec: Record) -> str:
    """The test class a result belongs to, from its variant ID (``file::Class::test[axes]``):
    nested classes joined with ``::``; ``""`` for a module-level test function."""
    vid = str(rec.get("variant_id") or rec.get("nodeid") or "")
    return "::".join(vid.split("[", 1)[0].split("::")[1:-1])


def per_class(data: RunData) -> dict[str, dict[str, Counter[str]]]:
    """file -> class -> outcome counts, both sorted."""
    out: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for r in data.records():
        out[str(r.get("file"))][class_of(r)][r["outcome"]] += 1
    return {f: dict(sorted(c.items())) for f, c in sorted(out.items())}


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
        # a variant has a few dtypes; a forged line with thousands would make as many cells
        dtypes = str(r.get("dtype") or "").split(",", 8)[:8] if r.get("dtype") else []
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
    from rich.table import Table

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_rich as esc  # Note [Untrusted text]

    console = untrusted_console(min_width=120)
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
    skips = skip_groups(data)
    if skips:
        n_by = Counter({w: 0 for w in SKIPPED_BY})
        for g in skips:
            n_by[g.who] += g.count
        console.print(
            f"[b]top skip reasons[/b] ({n_by['config']} skipped by the config, "
            f"{n_by['test']} by the test itself)"
        )
        for g in skips[:8]:
            more = details_text(g)
            console.print(
                f"  {g.count:5d}  {esc(g.who)}: {esc(g.key)}" + (f" ({esc(more)})" if more else "")
            )
        if len(skips) > 8:
            console.print(
                f"  [dim]... and {len(skips) - 8} more reasons (the HTML report has them)[/dim]"
            )
    expected = expected_groups(data)
    if expected:
        n = sum(g.count for g in expected)
        console.print(
            f"[b]expected to fail, by reason[/b] ({n} variant(s) the config runs as xfail)"
        )
        for g in expected[:8]:
            more = details_text(g)
            kinds = ", ".join(f"{k} {v}" for k, v in g.outcomes.most_common())
            console.print(
                f"  {g.count:5d}  {esc(g.key)}"
                + (f" ({esc(more)})" if more else "")
                + f"  [dim]({kinds})[/dim]"
            )
        if len(expected) > 8:
            console.print(f"  [dim]... and {len(expected) - 8} more reasons[/dim]")
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
        from ootest.config.names import op_filter_note

        note = op_filter_note(str(r.get("name")) for r in data.stale.values())
        if note:
            console.print(f"  {esc(note)}")
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


def print_trend(t: Trend, limit: int) -> None:
    """Outcome counts per run and the variants that changed between the last two."""
    from rich.table import Table

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_rich as esc  # Note [Untrusted text]

    console = untrusted_console(min_width=120)
    runs = Table(title="outcomes per run (oldest first)")
    runs.add_column("run", overflow="fold")
    present = [o for o in OUTCOMES if any(r.counts[o] for r in t.runs)]
    for o in present:
        runs.add_column(LABELS.get(o, o), justify="right")
    runs.add_column("total", justify="right")
    runs.add_column("changed", justify="right")
    for r in t.runs:
        changed = "" if r.changed is None else str(r.changed)
        runs.add_row(esc(r.label), *(_cell(o, r.counts[o]) for o in present), str(r.total), changed)
    console.print(runs)
    if not t.changes:
        console.print(f"no variant changed outcome between {esc(t.before)} and {esc(t.after)}")
        return
    table = Table(title=f"changed outcome: {esc(t.before)} → {esc(t.after)}")
    table.add_column("change", no_wrap=True)
    table.add_column("kind")
    table.add_column("count", justify="right")
    table.add_column("variants", overflow="fold")
    for c in t.changes:
        ids = shown(c.ids, limit)
        text = "\n".join(esc(i) for i in ids)
        if len(c.ids) > len(ids):
            text += f"\n[dim]... and {len(c.ids) - len(ids)} more (--limit 0 lists all)[/dim]"
        color = {"regressed": "red", "fixed": "green"}.get(c.kind)
        kind = f"[{color}]{c.kind}[/{color}]" if color else c.kind
        table.add_row(esc(c.label), kind, str(len(c.ids)), text)
    console.print(table)
    console.print(
        f"{t.changed()} variant(s) changed outcome between {esc(t.before)} and {esc(t.after)}"
    )


# --------------------------------------------------------------------- JUnit
PROPS = (
    "variant_id", "bucket", "mode", "reason", "code", "issue", "op", "dtype", "outcome", "signal",
)  # fmt: skip


#: Characters XML 1.0 does not allow (a test's message may hold a terminal escape):
#: a JUnit file with one is not well-formed, and CI parsers reject all of it.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text: object) -> str:
    return _NOT_XML.sub("", str(text))


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
                classname=_x(classname),
                name=_x(parts[-1]),
                file=file,
                time=f"{float(r.get('duration') or 0):.3f}",
            )
            props = ET.SubElement(case, "properties")
            for key in PROPS:
                if r.get(key) not in (None, ""):
                    ET.SubElement(props, "property", name=f"ootest.{key}", value=_x(r[key]))
            for line in r.get("evidence") or ():  # Note [Decisions people can see]
                ET.SubElement(props, "property", name="ootest.evidence", value=_x(line))
            o, msg = r["outcome"], _x(r.get("message") or "")
            first = headline(msg) or o
            if o in (FAILED, XPASSED_STRICT):
                ET.SubElement(case, "failure", message=first, type=o).text = msg
                c["failures"] += 1
            elif o in (ERROR, CRASHED, TIMEOUT):
                ET.SubElement(case, "error", message=first, type=o).text = msg
                c["errors"] += 1
            elif o in (SKIPPED, XFAILED):
                why = _x(r.get("reason") or first)
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
    from ootest.atomic import write_output

    write_output(
        path, lambda f: junit(data).write(f, encoding="utf-8", xml_declaration=True), "--junit"
    )


# ---------------------------------------------------------------------- HTML
# Note [Bounded HTML]
# The HTML report is what people open instead of reading 23,000 rows, so it must
# stay small and quick at any size of run: outcome bars per file and per class
# carry the shape, messages are shown for the first HTML_MESSAGES failures only,
# and every list of variant IDs shows at most a fixed number with a count of the
# rest (the results file and the JUnit XML keep them all). Its size then grows
# with the number of files, classes and distinct reasons, not of variants
# (bench/html_report.py measures it). Files, classes, ops and dtypes come from the
# results, which anyone may forge (12 MB of results with an op and a dtype of
# their own per line made a 3.6 GB page): each table lists at most a fixed number
# of rows (and the op x dtype table of columns), those with the most variants,
# and says how many it left out, as the review page does.
HTML_MESSAGES = 300
HTML_IDS = 2000
#: Rows of the per-class tables (all files together) and of the failure causes.
HTML_CLASSES = 2000
HTML_CAUSES = 300
#: Reasons listed per who skipped, and variant IDs listed under each reason.
HTML_SKIP_REASONS = 200
HTML_SKIP_IDS = 20
#: Rows of the per-file table; rows (ops) and columns (dtypes) of the op x dtype table.
HTML_FILES = 2000
HTML_OPS = 500
HTML_DTYPES = 40

_FAILING = BAD | {XPASSED_STRICT}
_COLORS = {
    PASSED: "#2e9d45",
    FAILED: "#d62728",
    ERROR: "#8c1c13",
    CRASHED: "#7b2cbf",
    TIMEOUT: "#ff7f0e",
    XFAILED: "#9ecfa8",
    XPASSED: "#e6c200",
    XPASSED_STRICT: "#e377c2",
    SKIPPED: "#c4c4c4",
}
_CSS = (
    """
body{font:14px system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child,td.l{text-align:left}
.bad{color:#b00020;font-weight:bold}.good{color:#1b7f2a}.warn{color:#a06000}
pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;max-height:12em;overflow:auto}
.m td{min-width:3.5em}
.bar{display:inline-flex;width:20em;height:.9em;background:#eee;vertical-align:middle}
.bar span{display:block;height:100%;min-width:2px}
.key{display:inline-block;width:.9em;height:.9em;vertical-align:middle;margin:0 .2em 0 .8em}
summary{cursor:pointer}details ul{margin:.2em 0;text-align:left}
"""
    + "".join(f".o-{o}{{background:{c}}}" for o, c in _COLORS.items())
    + WIDGET_CSS
)


def _rate_cell(v: list[int] | None) -> str:
    if not v or not v[1]:
        return "<td></td>"
    rate = v[0] / v[1]
    hue = int(120 * rate)  # red -> green
    return (
        f'<td style="background:hsl({hue},70%,85%)" data-passed="{v[0]}" data-ran="{v[1]}">'
        f"{v[0]}/{v[1]}</td>"
    )


def _bar(group: str, c: Counter[str]) -> str:
    """A stacked outcome bar (pure CSS); each part's title says the outcome and count."""
    total = sum(c.values()) or 1
    segs = "".join(
        f"<span class='o-{o}' style='width:{100 * c[o] / total:.2f}%' "
        f"title='{LABELS.get(o, o)} {c[o]} ({100 * c[o] / total:.1f}%)'></span>"
        for o in OUTCOMES
        if c[o]
    )
    return f"<span class='bar' data-of='{esc(group)}'>{segs}</span>"


def _legend() -> str:
    return (
        "<p class='legend'>"
        + "".join(f"<span class='key o-{o}'></span>{esc(LABELS.get(o, o))}" for o in OUTCOMES)
        + "</p>"
    )


def _outcome_row(name: str, group: str, c: Counter[str]) -> str:
    cells = "".join(f"<td data-outcome='{o}'>{c[o]}</td>" for o in OUTCOMES)
    return (
        f"<tr><td>{esc(name)}</td><td class='l'>{_bar(group, c)}</td>{cells}"
        f"<td data-outcome='total'>{sum(c.values())}</td></tr>"
    )


def _outcome_head(first: str) -> str:
    heads = "".join(f"<th>{esc(LABELS.get(o, o))}</th>" for o in OUTCOMES)
    return f"<tr><th>{first}</th><th>outcomes</th>{heads}<th>total</th></tr>"


def _ids(ids: Sequence[str], limit: int, why_cut: str = "the results file has all") -> str:
    """A list of variant IDs, at most ``limit`` (0: all), then a count of the rest."""
    head = shown(ids, limit)
    items = "".join(f"<li>{esc(str(i))}</li>" for i in head)
    if len(ids) > len(head):
        items += f"<li><i>... and {len(ids) - len(head)} more ({why_cut})</i></li>"
    return f"<ul>{items}</ul>"


def _ids_folded(ids: Sequence[str], limit: int, why_cut: str = "the results file has all") -> str:
    return f"<details><summary>{len(ids)} variant(s)</summary>{_ids(ids, limit, why_cut)}</details>"


def _trend_html(t: Trend, limit: int) -> list[str]:
    e = esc
    parts = [
        "<h2>Trend</h2><div id='trend'><p>Runs oldest first; the rest of this report is "
        "the newest. <i>changed</i>: variants whose outcome differs from the run before "
        "(added and removed ones included).</p><table id='trend-runs'><tr><th>run</th>"
    ]
    parts += [f"<th>{e(LABELS.get(o, o))}</th>" for o in OUTCOMES]
    parts.append("<th>total</th><th>changed</th></tr>")
    for r in t.runs:
        parts.append(f"<tr><td>{e(r.label)}</td>")
        parts += [f"<td data-outcome='{o}'>{r.counts[o]}</td>" for o in OUTCOMES]
        changed = "" if r.changed is None else str(r.changed)
        parts.append(f"<td data-outcome='total'>{r.total}</td><td>{changed}</td></tr>")
    parts.append(f"</table><h3>Changed outcome: {e(t.before)} → {e(t.after)} ({t.changed()})</h3>")
    if not t.changes:
        parts.append("<p>None.</p>")
    else:
        parts.append(
            "<table id='trend-changes'><tr><th>change</th><th>kind</th><th>count</th>"
            "<th>variants</th></tr>"
        )
        for c in t.changes:
            cls = {"regressed": " class='bad'", "fixed": " class='good'"}.get(c.kind, "")
            parts.append(
                f"<tr data-from='{e(c.before or '')}' data-to='{e(c.after or '')}'>"
                f"<td>{e(c.label)}</td><td{cls}>{c.kind}</td><td>{len(c.ids)}</td>"
                f"<td class='l'>{_ids_folded(c.ids, limit, '--limit 0 lists all')}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</div>")
    return parts


def _group_rows(groups: list[Group], head: str, outcomes: bool) -> list[str]:
    """One row per reason: count, details (the op of ``op_unsupported``...), the most
    common evidence lines, (outcomes,) and the first variant IDs folded."""
    e = esc
    parts = [f"<tr><th>{head}</th><th>count</th><th class='l'>details</th>"]
    parts.append("<th class='l'>evidence</th>")
    parts.append("<th class='l'>outcomes</th>" if outcomes else "")
    parts.append("<th class='l'>variants</th></tr>")
    for g in groups[:HTML_SKIP_REASONS]:
        details = "".join(
            f"<li>{e(d)} <b>{n}</b></li>" for d, n in g.details.most_common(HTML_SKIP_IDS)
        )
        if len(g.details) > HTML_SKIP_IDS:
            details += f"<li><i>+{len(g.details) - HTML_SKIP_IDS} more</i></li>"
        ev = [clipped(x) + (f" (x{n})" if n > 1 else "") for x, n in g.evidence.most_common(3)]
        ev += [f"entry {e(o)}" + (f" (x{n})" if n > 1 else "") for o, n in g.origins.most_common(2)]
        parts.append(
            f"<tr data-reason='{e(g.key)}'><td>{e(g.key)}</td><td>{g.count}</td>"
            f"<td class='l'><ul class='tight'>{details}</ul></td>"
            f"<td class='l'>{'<br>'.join(ev)}</td>"
        )
        if outcomes:
            kinds = ", ".join(f"{k} {v}" for k, v in g.outcomes.most_common())
            parts.append(f"<td class='l'>{e(kinds)}</td>")
        parts.append(f"<td class='l'>{_ids_folded(g.ids, HTML_SKIP_IDS)}</td></tr>")
    rest = groups[HTML_SKIP_REASONS:]
    if rest:
        parts.append(
            f"<tr><td><i>{len(rest)} more reasons</i></td>"
            f"<td>{sum(g.count for g in rest)}</td><td></td><td></td>"
            + ("<td></td>" if outcomes else "")
            + "<td></td></tr>"
        )
    return parts


def _skips_html(data: RunData) -> list[str]:
    skips = skip_groups(data)
    n_by = Counter({w: 0 for w in SKIPPED_BY})
    for g in skips:
        n_by[g.who] += g.count
    parts = [
        "<h2>Skips</h2><div id='skips'>",
        f"<p>{sum(n_by.values())} skipped: <b>{n_by['config']}</b> by the config, by the "
        "reason its decision was made for (a selection reason code with its evidence, "
        "a person's <code>reason:</code>, or <i>not decided</i>), "
        f"<b>{n_by['test']}</b> by the test itself (its own message, such as "
        "<i>Only runs on cuda</i>).</p>",
    ]
    titles = {"config": "Skipped by the config", "test": "Skipped by the test itself"}
    for who in SKIPPED_BY:
        groups = [g for g in skips if g.who == who]
        if not groups:
            continue
        head = "reason" if who == "config" else "the test's message"
        parts.append(f"<h3>{titles[who]} ({n_by[who]})</h3><table id='skips-{who}'>")
        parts += _group_rows(groups, head, outcomes=False)
        parts.append("</table>")
    parts.append("</div>")
    return parts


def _expected_html(groups: list[Group]) -> list[str]:
    if not groups:
        return []
    n = sum(g.count for g in groups)
    parts = [
        f"<h2>Expected to fail, by reason ({n})</h2><div id='expected'><p>Variants the "
        "config runs as <code>xfail</code> or <code>xfail_strict</code>, by the reason "
        "they were decided for, with what they did.</p><table id='expected-reasons'>"
    ]
    parts += _group_rows(groups, "reason", outcomes=True)
    parts.append("</table></div>")
    return parts


def _toc(
    data: RunData,
    trips: list[Trip] | None,
    trend: Trend | None,
    coverage: Coverage | None,
    expected: bool,
) -> str:
    """Links to the sections this page has (in-page anchors only)."""
    counts = data.counts()
    have = [
        ("guard", "collection guard", bool(trips)),
        ("trend", "trend", trend is not None),
        ("files", "per file", True),
        ("coverage", "op coverage", coverage is not None),
        ("skips", "skips by reason", bool(counts[SKIPPED])),
        ("expected", "expected failures by reason", expected),
        ("causes", "failure causes", any(counts[o] for o in FAILING)),
        ("promotions", "promotions", True),
    ]
    links = "".join(f"<a href='#{a}'>{t}</a>" for a, t, ok in have if ok)
    return f"<nav class='toc'>{links}</nav>"


def html_report(
    data: RunData,
    title: str,
    trips: list[Trip] | None = None,
    trend: Trend | None = None,
    trend_limit: int = 50,
    coverage: Coverage | None = None,
) -> str:
    """One self-contained page (no external resources, Note [Self-contained pages]; an
    inline script only to sort and filter the op coverage; see Note [Bounded HTML])."""
    e = esc
    counts = data.counts()
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{e(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>",
        f"<p>Generated {e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}. "
        f"{len(data.results)} results.</p>",
    ]
    bad = [r for r in data.records() if blocking(r)]
    verdict = "FAILED" if bad or trips else "OK"
    parts.append(
        f"<p id='verdict' class='{'bad' if verdict == 'FAILED' else 'good'}'>{verdict}</p>"
    )
    expected = expected_groups(data)
    parts.append(_toc(data, trips, trend, coverage, bool(expected)))
    parts.append(f"<h2>Totals</h2>{_legend()}<table id='totals'>{_outcome_head('')}")
    parts.append(_outcome_row("all", "all", counts))
    parts.append("</table>")

    if trips:
        parts.append("<h2>Collection guard</h2><ul id='guard'>")
        parts += [f"<li class='bad'>{e(t.message)}</li>" for t in trips]
        parts.append("</ul>")
    if trend is not None:
        parts += _trend_html(trend, trend_limit)

    files = per_file(data)
    parts.append(f"<h2>Per file ({len(files)})</h2><table id='files'>{_outcome_head('file')}")
    parts += [_outcome_row(f, f, c) for f, c in list(files.items())[:HTML_FILES]]
    parts.append("</table>")
    if len(files) > HTML_FILES:
        parts.append(
            f"<p><i>{len(files) - HTML_FILES} more files not listed (the results file and "
            "the JUnit XML have every test)</i></p>"
        )

    classes = per_class(data)
    n_classes = sum(map(len, classes.values()))
    cut = (
        f" The first {HTML_CLASSES} are listed; the JUnit XML has every test."
        if n_classes > HTML_CLASSES
        else ""
    )
    parts.append(
        f"<h2>Per class</h2><p>{n_classes} classes in {len(classes)} files; files with "
        f"failures are open.{cut}</p><div id='classes'>"
    )
    budget = HTML_CLASSES
    for i, (f, by_cls) in enumerate(classes.items()):
        if budget == 0:
            parts.append(f"<p><i>{len(classes) - i} more files not listed</i></p>")
            break
        fc = files[f]
        opened = " open" if any(fc[o] for o in _FAILING) else ""
        parts.append(
            f"<details{opened}><summary>{_bar(f, fc)} {e(f)}: {sum(fc.values())} variants, "
            f"{len(by_cls)} classes</summary><table>{_outcome_head('class')}"
        )
        rows = list(by_cls.items())
        parts += [
            _outcome_row(cls or "(module-level tests)", f"{f}::{cls}", c)
            for cls, c in rows[:budget]
        ]
        parts.append("</table>")
        if len(rows) > budget:
            parts.append(f"<p><i>{len(rows) - budget} more classes not listed</i></p>")
        budget = max(0, budget - len(rows))
        parts.append("</details>")
    parts.append("</div>")

    ops, dts, cells = _axis_rates(data)
    if ops or dts:
        dtypes = sorted(_most_ran(dts, HTML_DTYPES))
        shown_ops = sorted(_most_ran(ops, HTML_OPS))
        left = [
            f"{n} {what}"
            for n, what in ((len(ops) - len(shown_ops), "ops"), (len(dts) - len(dtypes), "dtypes"))
            if n
        ]
        cut = (
            f" The {len(shown_ops)} ops and {len(dtypes)} dtypes that ran the most variants "
            f"are shown; {' and '.join(left)} are not (the results file has them)."
            if left
            else ""
        )
        parts.append(
            "<h2>Pass rate per op and dtype</h2><p>passed (incl. expected failures) / ran; "
            f"skipped variants are not counted.{cut}</p><table id='matrix' class='m'><tr>"
            "<th>op</th><th>all</th>"
        )
        parts += [f"<th>{e(d)}</th>" for d in dtypes] + ["</tr>"]
        parts.append("<tr><td><i>all</i></td><td></td>")
        parts += [_rate_cell(dts[d]) for d in dtypes] + ["</tr>"]
        for op in shown_ops:
            parts.append(f"<tr><td>{e(op)}</td>{_rate_cell(ops[op])}")
            parts += [_rate_cell(cells.get((op, d))) for d in dtypes] + ["</tr>"]
        parts.append("</table>")

    if coverage is not None:
        from ootest.runner.coverage import coverage_html

        parts.append(coverage_html(coverage))
    if counts[SKIPPED]:
        parts += _skips_html(data)
    parts += _expected_html(expected)

    causes = failure_causes(data)
    if causes:
        parts.append(
            "<h2>Failure causes</h2><p>failed, errors, crashes and expected failures, "
            "grouped (a missing kernel, an unsupported dtype, a signal, else the error)</p>"
            "<table id='causes'><tr><th>cause</th><th>count</th><th>outcomes</th></tr>"
        )
        for text, n, outcomes in causes[:HTML_CAUSES]:
            kinds = ", ".join(f"{k} {v}" for k, v in outcomes.most_common())
            parts.append(f"<tr><td>{e(text)}</td><td>{n}</td><td>{e(kinds)}</td></tr>")
        unlisted = causes[HTML_CAUSES:]
        if unlisted:
            parts.append(
                f"<tr><td><i>{len(unlisted)} more causes</i></td>"
                f"<td>{sum(n for _, n, _ in unlisted)}</td><td></td></tr>"
            )
        parts.append("</table>")
    if bad:
        parts.append(f"<h2>Failures, errors, crashes ({len(bad)})</h2><div id='failures'>")
        for r in bad[:HTML_MESSAGES]:
            parts.append(
                f"<h3><span class='bad'>{e(r['outcome'])}</span> {e(str(r['variant_id']))}</h3>"
                f"<pre>{e(str(r.get('message') or ''))}</pre>"
            )
        rest = bad[HTML_MESSAGES:]
        if rest:
            parts.append(
                f"<p>{len(rest)} more, without their messages (the results file and the "
                "JUnit XML have them):</p>"
                + _ids([f"{r['outcome']}: {r['variant_id']}" for r in rest], HTML_IDS)
            )
        parts.append("</div>")
    other = [r for r in data.records() if r["outcome"] in BAD and not blocking(r)]
    if other:
        parts.append(f"<h2>Failures in tests expected to fail ({len(other)})</h2>")
        parts.append(_ids([f"{r['outcome']}: {r['variant_id']}" for r in other], HTML_IDS))

    promos = Promotions.of(data)
    parts.append("<h2>Promotions</h2><div id='promotions'>")
    if not promos:
        parts.append("<p>None.</p>")
    for label, recs in (
        ("xfail variants that passed", promos.xpassed),
        ("xfail_strict variants that passed (failing the run)", promos.strict),
    ):
        if recs:
            parts.append(f"<p>{e(label)}: {len(recs)}</p>")
            parts.append(_ids([str(r["variant_id"]) for r in recs], HTML_IDS))
    if promos.capable:
        parts.append("<p>skip entries whose op/dtype are declared supported now:</p><ul>")
        for origin, recs in promos.capable.items():
            parts.append(f"<li>{e(origin)}: {len(recs)} variant(s)</li>")
        parts.append("</ul>")
    parts.append(f"</div><h2>Stale config entries ({len(data.stale)})</h2><div id='stale'>")
    if data.stale:
        stale = list(data.stale.values())
        parts.append("<ul>")
        parts += [
            f"<li>{e(str(r.get('origin')))}: <code>{e(str(r.get('name')))}</code></li>"
            for r in stale[:HTML_IDS]
        ]
        if len(stale) > HTML_IDS:
            parts.append(
                f"<li><i>... and {len(stale) - HTML_IDS} more (the results file has all)</i></li>"
            )
        parts.append("</ul>")
    else:
        parts.append("<p>None.</p>")
    parts.append("</div>")
    if coverage is not None:
        parts.append(f"<script>{SORT_FILTER_JS}</script>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _most_ran(rates: dict[str, list[int]], n: int) -> list[str]:
    """The ``n`` keys that ran the most variants (ties by name)."""
    if len(rates) <= n:
        return list(rates)
    return [k for k, _ in sorted(rates.items(), key=lambda kv: (-kv[1][1], kv[0]))[:n]]


def write_html(
    data: RunData,
    path: Path,
    title: str,
    trips: list[Trip] | None = None,
    trend: Trend | None = None,
    coverage: Coverage | None = None,
) -> None:
    from ootest.atomic import write_output

    write_output(path, html_report(data, title, trips, trend, coverage=coverage), "--html")
