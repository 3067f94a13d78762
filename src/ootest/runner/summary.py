"""The Markdown job summary (``ootest report --format summary``, for ``$GITHUB_STEP_SUMMARY``).

The escaping is :func:`ootest.htmlpage.md` (Note [Escaping test-derived text]).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from ootest.htmlpage import md
from ootest.record.results import RunData, blocking, headline
from ootest.runner.coverage import Coverage
from ootest.runner.reasons import details_text, expected_groups, skip_groups

__all__ = ["job_summary", "md", "missing_ops"]

ROWS = 10  # rows per table


def _url(url: str) -> str | None:
    """An http(s) URL safe inside a Markdown link target, or None."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url.strip()):
        return None
    return quote(url.strip(), safe=":/?#&=%~-._+,;!")


def missing_ops(data: RunData) -> list[tuple[str, int, int]]:
    """Ops whose absence costs the most variants: (op, skipped by an ``op_unsupported``
    decision, failed or xfailed on a missing kernel), the most first."""
    from ootest.runner.render import cause

    skipped: dict[str, int] = {}
    failing: dict[str, int] = {}
    for g in skip_groups(data):
        if g.who == "config" and g.key == "op_unsupported":
            for op, n in g.details.items():
                skipped[op] = skipped.get(op, 0) + n
    for r in data.records():
        if r["outcome"] in ("failed", "error", "xfailed"):
            c = cause(r)
            if c.startswith("missing kernel "):
                op = c.removeprefix("missing kernel ")
                failing[op] = failing.get(op, 0) + 1
    ops = set(skipped) | set(failing)
    rows = [(op, skipped.get(op, 0), failing.get(op, 0)) for op in ops]
    return sorted(rows, key=lambda x: (-(x[1] + x[2]), x[0]))


def job_summary(
    data: RunData,
    where: str,
    coverage: Coverage | None = None,
    artifact_url: str | None = None,
) -> str:
    """The job summary: outcome counts, CRCR counts, top skip reasons, expected
    failures by reason, top missing ops, (op coverage,) the first failures."""
    counts = data.counts()
    bad = [r for r in data.records() if blocking(r)]
    verdict = "FAILED" if bad else "OK"
    lines = [f"## ootest: {md(where)}", ""]
    head = f"**{verdict}**: {len(data.results)} results"
    link = _url(artifact_url) if artifact_url else None
    if link:
        head += f"; [report, JUnit and results]({link})"
    lines.append(head)
    lines += ["", "| outcome | count |", "|---|---:|"]
    lines += [f"| {o} | {n} |" for o, n in sorted(counts.items(), key=lambda x: -x[1]) if n]
    tr = data.test_results()
    lines += [
        "",
        f"CRCR test_results: passed {tr['passed']}, failed {tr['failed']}, "
        f"skipped {tr['skipped']}, total {tr['total']}",
    ]
    skips = skip_groups(data)
    if skips:
        lines += ["", "### Top skip reasons", "", "| count | by | reason | details |",
                  "|---:|---|---|---|"]  # fmt: skip
        for g in skips[:ROWS]:
            lines.append(f"| {g.count} | {g.who} | {md(g.key)} | {md(details_text(g))} |")
        if len(skips) > ROWS:
            lines.append(f"| {sum(g.count for g in skips[ROWS:])} | | "
                         f"{len(skips) - ROWS} more reasons | |")  # fmt: skip
    expected = expected_groups(data)
    if expected:
        lines += ["", "### Expected to fail, by reason", "",
                  "| count | reason | details | outcomes |", "|---:|---|---|---|"]  # fmt: skip
        for g in expected[:ROWS]:
            kinds = ", ".join(f"{k} {v}" for k, v in g.outcomes.most_common())
            lines.append(f"| {g.count} | {md(g.key)} | {md(details_text(g))} | {kinds} |")
    missing = missing_ops(data)
    if missing:
        lines += ["", "### Top missing ops", "",
                  "| op | skipped (op_unsupported) | failing on a missing kernel |",
                  "|---|---:|---:|"]  # fmt: skip
        lines += [f"| {md(op)} | {s} | {f} |" for op, s, f in missing[:ROWS]]
    if coverage is not None and coverage.ops:
        lines += ["", "### Op coverage (the most called ops)", "",
                  "| op | variants | passed | failed | xfailed | skipped | pass rate |",
                  "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for o in coverage.ops[:ROWS]:
            c, rate = o.counts, o.pass_rate()
            pr = "-" if rate is None else f"{100 * rate:.0f}%"
            lines.append(f"| {md(o.op)} | {o.variants} | {c['passed']} | {c['failed']} | "
                         f"{c['xfailed']} | {c['skipped']} | {pr} |")  # fmt: skip
    if bad:
        lines += ["", f"### Failures ({len(bad)})", "", "| outcome | variant | first line |",
                  "|---|---|---|"]  # fmt: skip
        for r in bad[:ROWS]:
            lines.append(f"| {md(r['outcome'])} | {md(r.get('variant_id'))} | "
                         f"{md(headline(r.get('message')))} |")  # fmt: skip
        if len(bad) > ROWS:
            lines.append(f"| | {len(bad) - ROWS} more | |")
    return "\n".join(lines) + "\n"
