"""The Markdown job summary (``ootest report --format summary``, for ``$GITHUB_STEP_SUMMARY``).

Note [Escaping test-derived text]
Test names, messages and reasons come from the code under test (a PR's tests,
a backend's error text): in a job summary they must stay text. :func:`md` makes
any of them inert in GitHub-flavoured Markdown: control and bidirectional
formatting characters go (newlines become spaces), ``& < > " '`` become HTML
entities (no tag, no comment, no entity of theirs survives), every other ASCII
punctuation character Markdown or a table gives meaning to is backslash-escaped
(so no link, image, emphasis, heading, table cell, autolink or ``::`` workflow
command can start from it: ``::`` is written ``\\:\\:``), ``@`` becomes ``&#64;``
(no mention), and the text is cut to a bound. The summary's size is bounded by
its row counts, not by the run.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote, urlsplit

from ootest.htmlpage import BIDI
from ootest.record.results import RunData, blocking, headline
from ootest.runner.coverage import Coverage
from ootest.runner.reasons import details_text, expected_groups, skip_groups

__all__ = ["job_summary", "md", "missing_ops"]

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "@": "&#64;"}
_PUNCT = "\\`*_{}[]()#+-.!|~:=$%^,;/?"
_TABLE: dict[int, str] = {ord(c): "\\" + c for c in _PUNCT}
_TABLE.update({ord(c): e for c, e in _ENTITIES.items()})
ROWS = 10  # rows per table
CHARS = 200  # characters of one text


def md(text: object, limit: int = CHARS) -> str:
    """``text`` as inert Markdown (Note [Escaping test-derived text])."""
    s = str(text)
    out = []
    for ch in s:
        if ch in "\r\n\t":
            out.append(" ")
        elif ch in BIDI or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            continue
        else:
            out.append(ch)
    s = re.sub(r" {2,}", " ", "".join(out)).strip()
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.translate(_TABLE)


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
