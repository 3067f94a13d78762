"""Op x dtype coverage: a run's results joined with the op map.

Note [Op coverage]
The op map says which aten ops each variant called on the reference device, and
with which dtypes (Note [Call dtype signatures]); the results say how each variant
ended on the device. Joined by canonical variant ID, per op: the variants that
call it, how many passed (or xpassed), failed (failed, error, crashed, timed out,
strict xpass), xfailed, were skipped, or were not run (in the op map, in a file
of the run, without a result); the same per dtype its calls saw (the variant's
dtype axis where the op map has no call dtypes); and the most common failure
causes among its failing and xfailed variants. Variants with results the op map
does not know are counted apart. A variant counts once for each op it calls, so
the rows do not add up to the run. Rows grow with the ops, never the variants.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.htmlpage import esc, filter_box, heat_style
from ootest.record.results import (
    CRASHED,
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    TIMEOUT,
    XFAILED,
    XPASSED,
    XPASSED_STRICT,
    RunData,
)

__all__ = ["COLUMNS", "Coverage", "OpCoverage", "coverage", "load_op_map"]

#: The outcome columns of a coverage row, in order.
COLUMNS = ("passed", "failed", "xfailed", "skipped", "not_run")
_BUCKET = {
    PASSED: "passed",
    XPASSED: "passed",
    FAILED: "failed",
    ERROR: "failed",
    CRASHED: "failed",
    TIMEOUT: "failed",
    XPASSED_STRICT: "failed",
    XFAILED: "xfailed",
    SKIPPED: "skipped",
}
#: HTML bounds (Note [Bounded HTML]): op rows, dtype columns, causes per op.
HTML_OPS = 2000
HTML_DTYPES = 40
CAUSES = 3


@dataclass
class OpCoverage:
    op: str
    counts: Counter[str] = field(default_factory=Counter)
    dtypes: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def variants(self) -> int:
        return sum(self.counts.values())

    def ran(self, c: Counter[str] | None = None) -> int:
        c = self.counts if c is None else c
        return c["passed"] + c["failed"] + c["xfailed"]

    def pass_rate(self) -> float | None:
        ran = self.ran()
        return self.counts["passed"] / ran if ran else None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "variants": self.variants,
            **{k: self.counts[k] for k in COLUMNS},
            "pass_rate": None if (r := self.pass_rate()) is None else round(r, 4),
            "dtypes": {d: {k: c[k] for k in COLUMNS} for d, c in sorted(self.dtypes.items())},
            "failures": [{"cause": t, "count": n} for t, n in self.failures.most_common()],
        }


@dataclass
class Coverage:
    ops: list[OpCoverage]
    dtypes: list[str]
    results: int  # variants with a result in the run
    in_op_map: int  # of them, the op map knows
    not_run: int  # variants of the run's files the op map knows without a result
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "op_map": self.source,
            "variants": {
                "results": self.results,
                "in_op_map": self.in_op_map,
                "not_in_op_map": self.results - self.in_op_map,
                "not_run": self.not_run,
            },
            "dtypes": self.dtypes,
            "ops": [o.to_json() for o in self.ops],
        }


def coverage(
    data: RunData,
    ops_of: Mapping[str, Iterable[str]],
    pairs_of: Mapping[str, Iterable[tuple[str, str]]] | None = None,
    source: str = "",
) -> Coverage:
    """Per op of ``ops_of`` (variant ID -> the ops it calls), its variants' outcomes in
    ``data``; per dtype from ``pairs_of`` (variant ID -> (op, dtype) pairs of its calls)."""
    from ootest.runner.render import cause

    files = {vid.split("::", 1)[0] for vid in data.results}
    rows: dict[str, OpCoverage] = {}
    in_map = not_run = 0
    for vid, ops in ops_of.items():
        rec = data.results.get(vid)
        axis: tuple[str, ...] = ()
        if rec is None:
            if vid.split("::", 1)[0] not in files:
                continue  # a file this run did not run
            b, why = "not_run", None
            not_run += 1
        else:
            in_map += 1
            b = _BUCKET.get(str(rec["outcome"]), "failed")
            axis = tuple(str(rec.get("dtype") or "").split(",")) if rec.get("dtype") else ()
            why = cause(rec) if b in ("failed", "xfailed") else None
        per_op: dict[str, list[str]] = defaultdict(list)
        for op, dt in (pairs_of or {}).get(vid, ()):
            per_op[op].append(dt)
        for op in ops:
            row = rows.get(op)
            if row is None:
                row = rows[op] = OpCoverage(op)
            row.counts[b] += 1
            for dt in per_op.get(op) or axis:
                row.dtypes[dt][b] += 1
            if why is not None:
                row.failures[why] += 1
    dtypes = sorted({d for r in rows.values() for d in r.dtypes})
    ordered = sorted(rows.values(), key=lambda r: (-r.variants, r.op))
    return Coverage(ordered, dtypes, len(data.results), in_map, not_run, source)


def load_op_map(
    db: Path,
) -> tuple[dict[str, frozenset[str]], dict[str, tuple[tuple[str, str], ...]]]:
    """Every variant's ops and call (op, dtype) pairs from an op map index."""
    from ootest.opmap.store import OpStore

    with OpStore.open(db) as store:
        same: dict[frozenset[str], frozenset[str]] = {}  # variants of one op share a set
        ops = {vid: same.setdefault(o, o) for vid, o, _unc, _partial in store.op_sets()}
        pairs = store.call_dtypes()
    return ops, pairs


# ----------------------------------------------------------------- renderers
def _cut(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _rate(passed: int, ran: int) -> str:
    return f"{100 * passed / ran:.0f}%" if ran else "-"


def print_coverage(cov: Coverage, limit: int) -> None:
    """The coverage table in the terminal, the ``limit`` ops with most variants (0: all)."""
    from rich.table import Table

    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_rich as escape  # Note [Untrusted text]

    console = untrusted_console(min_width=120)
    shown = cov.ops if limit == 0 else cov.ops[:limit]
    table = Table(title=f"op coverage ({len(cov.ops)} ops; {escape(cov.source)})")
    table.add_column("op", no_wrap=True)
    table.add_column("variants", justify="right")
    for k in COLUMNS:
        table.add_column(k.replace("_", " "), justify="right")
    table.add_column("pass rate", justify="right")
    table.add_column("dtypes (passed/ran)", overflow="fold")
    table.add_column("top failure", overflow="fold")
    for o in shown:
        dts = ", ".join(f"{d} {c['passed']}/{o.ran(c)}" for d, c in sorted(o.dtypes.items()))
        top = o.failures.most_common(1)
        table.add_row(
            escape(o.op),
            str(o.variants),
            *(str(o.counts[k]) for k in COLUMNS),
            _rate(o.counts["passed"], o.ran()),
            escape(dts),
            escape(f"{top[0][0]} ({top[0][1]})") if top else "",
        )
    console.print(table)
    if len(shown) < len(cov.ops):
        console.print(f"... and {len(cov.ops) - len(shown)} more ops (--limit 0 lists all)")
    console.print(
        f"{cov.results} variants with results: {cov.in_op_map} in the op map, "
        f"{cov.results - cov.in_op_map} not; {cov.not_run} variants of these files in the "
        "op map have no result"
    )


def coverage_html(cov: Coverage) -> str:
    """The coverage section of a report: a sortable, filterable table per op with a
    heat map per dtype (Note [Op coverage], Note [Self-contained pages])."""
    dtypes = cov.dtypes[:HTML_DTYPES]
    parts = [
        "<h2>Op coverage</h2><div id='coverage'>",
        f"<p>From the op map <code>{esc(cov.source)}</code>: {cov.results} variants with "
        f"results, {cov.in_op_map} of them in the op map "
        f"({cov.results - cov.in_op_map} not); {cov.not_run} variants of these files the "
        "op map knows have no result (<i>not run</i>). Per aten op, the variants that call "
        "it and how they ended; per dtype its calls saw, passed / ran (ran = passed, failed, "
        "xfailed), red to green. A variant counts for every op it calls. Click a header to "
        "sort.</p>",
        filter_box("coverage-ops", "ops"),
        "<div class='wide'><table id='coverage-ops' class='sortable'><tr><th>op</th>"
        "<th>variants</th>",
    ]
    parts += [f"<th>{k.replace('_', ' ')}</th>" for k in COLUMNS]
    parts.append("<th>pass rate</th><th class='l'>failure causes</th>")
    parts += [f"<th>{esc(d)}</th>" for d in dtypes]
    parts.append("</tr>")
    for o in cov.ops[:HTML_OPS]:
        rate = o.pass_rate()
        causes = "".join(
            f"<li title='{esc(t)}'>{esc(_cut(t))} <b>{n}</b></li>"
            for t, n in o.failures.most_common(CAUSES)
        )
        parts.append(
            f"<tr data-op='{esc(o.op)}'><td>{esc(o.op)}</td><td>{o.variants}</td>"
            + "".join(f"<td data-col='{k}'>{o.counts[k]}</td>" for k in COLUMNS)
            + f"<td data-v='{'' if rate is None else f'{rate:.4f}'}' "
            f"style='{heat_style(o.counts['passed'], o.ran())}'>"
            f"{_rate(o.counts['passed'], o.ran())}</td>"
            f"<td class='l causes'><ul class='tight'>{causes}</ul></td>"
        )
        for d in dtypes:
            c = o.dtypes.get(d)
            if not c:
                parts.append("<td data-v='-1'></td>")
                continue
            ran = o.ran(c)
            title = ", ".join(f"{k.replace('_', ' ')} {c[k]}" for k in COLUMNS if c[k])
            text = f"{c['passed']}/{ran}" if ran else f"<span class='muted'>{c['skipped']}s</span>"
            parts.append(
                f"<td class='h' data-v='{c['passed'] / ran if ran else -0.5:.4f}' "
                f"style='{heat_style(c['passed'], ran)}' title='{esc(d)}: {esc(title)}'>"
                f"{text}</td>"
            )
        parts.append("</tr>")
    parts.append("</table></div>")
    if len(cov.ops) > HTML_OPS:
        parts.append(f"<p><i>{len(cov.ops) - HTML_OPS} more ops not listed "
                     "(ootest report --format coverage --json has all)</i></p>")  # fmt: skip
    if len(cov.dtypes) > HTML_DTYPES:
        parts.append(f"<p><i>{len(cov.dtypes) - HTML_DTYPES} more dtypes not shown</i></p>")
    parts.append(
        "<p class='muted'>A dtype cell: passed/ran (<i>Ns</i>: only skipped); hover it for "
        "every count.</p></div>"
    )
    return "".join(parts)
