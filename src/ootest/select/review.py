"""A review of a generated config: its decisions by reason and by file, the ops
that block the most variants, and, against a previous config, what changed and why.

Note [Config review]
A config ``select run`` wrote holds thousands of decisions; a reviewer needs their
shape, not their list. :func:`review` reads the evidence sidecar (Note [Selection
output]) and the config as it is now (people's entries decide their variants:
a variant whose mode the config no longer gives as the sidecar does is counted as
``edited:<bucket>``, as ``select audit`` counts it), and groups:

- **by reason code** (``op_unsupported``...): count, modes, the details after the
  code (``aten::sort 45``), the most common evidence lines, the files, the first IDs;
- **by file**: count per mode and the top reasons;
- **blocking ops**: per op the sidecar's evidence lists as missing, the variants it
  blocks and how many it would *unlock alone* (the variants skipped for missing
  ops whose only missing op it is, and no missing dtype);
- **changes** against a previous config's sidecar (``--previous``): variants added,
  removed, moved (an upgrade carried them to a new ID, Note [Moves]: compared with
  their old line), or decided otherwise (mode or reason), grouped by transition
  (``skip op_unsupported -> mandatory_success ops_supported``) with the new
  evidence as the why.

Everything is bounded by reasons, files, ops and transitions (Note [Bounded HTML]);
the page is self-contained (Note [Self-contained pages]). No torch.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.htmlpage import clipped, esc, filter_box, page
from ootest.record.decisions import reason_code, sidecar_path
from ootest.select.rules import MODES

__all__ = ["Review", "build_review", "review_html"]

IDS = 20  # variant IDs kept per group
TOP = 5  # details, evidence lines, files per group
HTML_REASONS = 300
HTML_FILES = 2000
HTML_OPS = 500
HTML_CHANGES = 300


@dataclass
class ReasonGroup:
    code: str
    modes: Counter[str] = field(default_factory=Counter)
    details: Counter[str] = field(default_factory=Counter)
    evidence: Counter[str] = field(default_factory=Counter)
    files: Counter[str] = field(default_factory=Counter)
    ids: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, vid: str, mode: str, reason: str, evidence: tuple[str, ...]) -> None:
        self.count += 1
        self.modes[mode] += 1
        detail = reason[len(self.code) + 1 :] if reason.startswith(self.code + ":") else ""
        if detail:
            self.details[detail] += 1
        for line in evidence[:3]:
            self.evidence[line] += 1
        self.files[vid.split("::", 1)[0]] += 1
        if len(self.ids) < IDS:
            self.ids.append(vid)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "count": self.count,
            "modes": dict(self.modes.most_common()),
            "details": dict(self.details.most_common(TOP)),
            "more_details": max(0, len(self.details) - TOP),
            "evidence": [{"line": x, "count": n} for x, n in self.evidence.most_common(3)],
            "files": dict(self.files.most_common(TOP)),
            "ids": self.ids,
        }


@dataclass
class FileRow:
    file: str
    modes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "count": sum(self.modes.values()),
            "modes": {m: self.modes[m] for m in MODES},
            "reasons": dict(self.reasons.most_common(TOP)),
        }


@dataclass
class BlockingOp:
    op: str
    blocked: int = 0  # variants whose evidence lists it as missing
    alone: int = 0  # ... whose only obstacle it is
    ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "blocked": self.blocked, "unlocks": self.alone, "ids": self.ids}


@dataclass
class Change:
    kind: str  # changed | moved (decided as before, under its new ID) | added | removed
    before: str  # "mode code" or ""
    after: str
    count: int = 0
    why: Counter[str] = field(default_factory=Counter)
    ids: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.before or '(none)'} -> {self.after or '(none)'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "from": self.before or None,
            "to": self.after or None,
            "count": self.count,
            "why": [{"line": x, "count": n} for x, n in self.why.most_common(3)],
            "ids": self.ids,
        }


@dataclass
class Review:
    config: str
    variants: int
    modes: Counter[str]
    reasons: list[ReasonGroup]
    files: list[FileRow]
    ops: list[BlockingOp]
    edited: Counter[str]  # edited:<bucket> -> variants a person's entry decides otherwise
    previous: str | None = None
    changes: list[Change] | None = None
    note: str | None = None  # why people's entries could not be taken into account

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "note": self.note,
            "variants": self.variants,
            "modes": {m: self.modes[m] for m in MODES},
            "edited": dict(self.edited.most_common()),
            "reasons": [g.to_json() for g in self.reasons],
            "files": [f.to_json() for f in self.files],
            "blocking_ops": [o.to_json() for o in self.ops],
            "previous": self.previous,
            "changes": None if self.changes is None else [c.to_json() for c in self.changes],
        }


Row = tuple[str, str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""(variant ID, mode, reason, evidence, missing ops, missing dtypes)."""


def _rows(config: Path) -> list[Row]:
    from ootest.select.refine import iter_sidecar

    return [
        (d.variant_id, d.mode, d.reason, d.evidence, ev.missing_ops, ev.missing_dtypes)
        for ev, d, _fp in iter_sidecar(sidecar_path(config))
    ]


def _as_configured(config: Path, rows: list[Row]) -> dict[str, tuple[str, str]]:
    """Variant ID -> (mode, ``edited:<bucket>``) for the variants the config as it is
    now gives another mode than the sidecar (a person's entry; see ``select audit``)."""
    from ootest.config.decide import Context, decide
    from ootest.config.load import load_config
    from ootest.config.paths import file_keys
    from ootest.opmap.enable import variant_from_id
    from ootest.select.writer import split_id

    cfg = load_config(config)
    keys = file_keys(cfg.source, (t for t, _ in cfg.resolved))
    by_key = {keys.key(rf.path): rf for rf in cfg.files}
    ctx = Context.current()
    out: dict[str, tuple[str, str]] = {}
    for vid, mode, *_ in rows:
        rf = by_key.get(split_id(vid)[0])
        v = variant_from_id(vid)
        if rf is None or v is None:
            continue
        now = decide(rf, cfg.suite.global_, v, ctx)
        if now.mode != mode:
            out[vid] = (now.mode, f"edited:{now.bucket}")
    return out


def build_review(config: Path, previous: Path | None = None) -> Review:
    """The review of ``config`` (and what changed since ``previous``), Note [Config review]."""
    from ootest.errors import UserError

    rows = _rows(config)
    note = None
    try:
        edits = _as_configured(config, rows)
    except UserError as e:
        # e.g. ${TORCH_ROOT} unset where the review is made: the sidecar still says
        # what was decided; what people changed since cannot be told
        edits = {}
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        note = (
            f"the config could not be resolved here, so entries people wrote are not taken "
            f"into account: {first}"
        )
    reasons: dict[str, ReasonGroup] = {}
    files: dict[str, FileRow] = {}
    ops: dict[str, BlockingOp] = {}
    modes: Counter[str] = Counter()
    edited: Counter[str] = Counter()
    for vid, mode, reason, evidence, missing, missing_dtypes in rows:
        if vid in edits:
            mode, reason = edits[vid]
            evidence = (f"a person's entry decides it: {mode} (the sidecar says {reason})",)
            edited[reason] += 1
        code = reason_code(reason)
        g = reasons.get(code)
        if g is None:
            g = reasons[code] = ReasonGroup(code)
        g.add(vid, mode, reason, evidence)
        modes[mode] += 1
        fr = files.get(vid.split("::", 1)[0])
        if fr is None:
            fr = files[vid.split("::", 1)[0]] = FileRow(vid.split("::", 1)[0])
        fr.modes[mode] += 1
        fr.reasons[code] += 1
        for op in missing:
            b = ops.get(op)
            if b is None:
                b = ops[op] = BlockingOp(op)
            b.blocked += 1
            if len(missing) == 1 and not missing_dtypes and vid not in edits:
                b.alone += 1
                if len(b.ids) < IDS:
                    b.ids.append(vid)
    changes = None
    if previous is not None:
        changes = _changes(_rows(previous), rows, edits, _moved_from(config))
    return Review(
        config=str(config),
        variants=len(rows),
        modes=modes,
        reasons=sorted(reasons.values(), key=lambda g: (-g.count, g.code)),
        files=sorted(files.values(), key=lambda f: f.file),
        ops=sorted(ops.values(), key=lambda o: (-o.alone, -o.blocked, o.op)),
        edited=edited,
        previous=None if previous is None else str(previous),
        changes=changes,
        note=note,
    )


def _moved_from(config: Path) -> dict[str, str]:
    """New ID -> old ID of the variants an upgrade carried across a move (the
    sidecar's ``moved_from``, Note [Moves])."""
    out: dict[str, str] = {}
    from ootest.errors import UserError
    from ootest.select.refine import check_sidecar

    try:
        check_sidecar(sidecar_path(config))  # never a read that blocks on a pipe
        lines = sidecar_path(config).read_text(encoding="utf-8").splitlines()
    except (OSError, UserError):
        return out
    for line in lines:
        if '"moved_from"' not in line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        new, old = row.get("decision", {}).get("variant_id"), row.get("moved_from")
        if isinstance(new, str) and isinstance(old, str):
            out[new] = old
    return out


def _changes(
    old: list[Row],
    new: list[Row],
    edits: dict[str, tuple[str, str]],
    moves: dict[str, str] | None = None,
) -> list[Change]:
    """What differs between two sidecars; a variant that moved (``moves``: new ID ->
    old ID) is compared with its old line, not counted as one added and one removed."""
    before = {r[0]: r for r in old}
    after = {r[0]: r for r in new}
    moves = {n: o for n, o in (moves or {}).items() if o in before and n not in before}
    gone = set(moves.values())
    groups: dict[tuple[str, str, str], Change] = {}

    def put(kind: str, b: str, a: str, vid: str, why: tuple[str, ...]) -> None:
        c = groups.get((kind, b, a))
        if c is None:
            c = groups[(kind, b, a)] = Change(kind, b, a)
        c.count += 1
        for line in why[:1]:
            c.why[line] += 1
        if len(c.ids) < IDS:
            c.ids.append(vid)

    for vid, row in after.items():
        mode, reason = edits.get(vid, (row[1], row[2]))
        now = f"{mode} {reason_code(reason)}"
        prev = before.get(moves.get(vid, vid))
        if prev is None:
            put("added", "", now, vid, row[3])
        elif (prev[1], prev[2]) != (mode, reason):
            put("changed", f"{prev[1]} {reason_code(prev[2])}", now, vid, row[3] or (reason,))
        elif vid in moves:
            put("moved", now, now, vid, (f"moved from {moves[vid]}",))
    for vid, prev in before.items():
        if vid not in after and vid not in gone:
            put("removed", f"{prev[1]} {reason_code(prev[2])}", "", vid, ())
    order = {"changed": 0, "moved": 1, "added": 2, "removed": 3}
    return sorted(groups.values(), key=lambda c: (order[c.kind], -c.count, c.label))


# ----------------------------------------------------------------- renderers
def print_review(r: Review) -> None:
    from ootest.untrusted import console as untrusted_console
    from ootest.untrusted import for_rich as escape  # Note [Untrusted text]
    from ootest.untrusted import hide_env_secrets  # before the cut

    console = untrusted_console(min_width=120)
    modes = ", ".join(f"{r.modes[m]} {m}" for m in MODES if r.modes[m])
    console.print(f"{escape(r.config)}: {r.variants} variants decided ({modes})")
    if r.note:
        console.print(f"[yellow]note:[/yellow] {escape(r.note)}")
    if r.edited:
        n = sum(r.edited.values())
        console.print(f"  {n} decided otherwise by people's entries ({_counts(r.edited)})")
    console.print("[b]decisions by reason[/b]")
    for g in r.reasons[:15]:
        more = ", ".join(f"{d} {n}" for d, n in g.details.most_common(4))
        console.print(
            f"  {g.count:6d}  {escape(g.code)} [dim]({_counts(g.modes)})[/dim]"
            + (f"  {escape(more)}" if more else "")
        )
    if r.ops:
        console.print("[b]ops that block the most variants[/b] (unlocks alone / blocks)")
        for o in r.ops[:10]:
            console.print(f"  {o.alone:6d} / {o.blocked:<6d} {escape(o.op)}")
    if r.changes is not None:
        n = sum(c.count for c in r.changes)
        console.print(f"[b]changes since {escape(str(r.previous))}[/b]: {n} variants")
        for c in r.changes[:15]:
            why = c.why.most_common(1)
            console.print(
                f"  {c.count:6d}  {c.kind}: {escape(c.label)}"
                + (f"  [dim]{escape(hide_env_secrets(why[0][0])[:120])}[/dim]" if why else "")
            )


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{n} {k}" for k, n in c.most_common())


_CSS = """
.modes span{display:inline-block;height:.9em;vertical-align:middle}
.m-mandatory_success{background:#2e9d45}.m-xfail_strict{background:#e377c2}
.m-xfail{background:#9ecfa8}.m-skip{background:#c4c4c4}
.bar{display:inline-flex;width:8em;height:.9em;background:#eee;vertical-align:middle}
td.nw{white-space:nowrap}
.key{display:inline-block;width:.9em;height:.9em;vertical-align:middle;margin:0 .2em 0 .8em}
nav a{margin-right:1em}
"""


def _bar(c: Counter[str]) -> str:
    total = sum(c.values()) or 1
    return (
        "<span class='bar modes'>"
        + "".join(
            f"<span class='m-{m}' style='width:{100 * c[m] / total:.2f}%' "
            f"title='{m} {c[m]}'></span>"
            for m in MODES
            if c[m]
        )
        + "</span>"
    )


def _ul(items: list[tuple[str, int]], more: int = 0) -> str:
    li = "".join(f"<li>{esc(t)} <b>{n}</b></li>" for t, n in items)
    if more > 0:
        li += f"<li><i>+{more} more</i></li>"
    return f"<ul class='tight'>{li}</ul>"


def _ids(ids: list[str], count: int) -> str:
    li = "".join(f"<li>{esc(i)}</li>" for i in ids)
    if count > len(ids):
        li += f"<li><i>... and {count - len(ids)} more (the sidecar has all)</i></li>"
    return f"<details><summary>{count} variant(s)</summary><ul>{li}</ul></details>"


def review_html(r: Review) -> str:
    """One self-contained page (Note [Config review], Note [Self-contained pages])."""
    title = f"ootest select review: {Path(r.config).name}"
    modes = "".join(
        f"<span class='key m-{m}'></span>{m} <b>{r.modes[m]}</b>" for m in MODES if r.modes[m]
    )
    parts = [
        f"<h1>{esc(title)}</h1>",
        f"<p>{esc(r.config)}: <b>{r.variants}</b> variants decided. {modes}</p>",
        "<nav><a href='#reasons'>by reason</a><a href='#files'>by file</a>"
        "<a href='#ops'>blocking ops</a>"
        + ("<a href='#changes'>changes</a>" if r.changes is not None else "")
        + "</nav>",
    ]
    if r.note:
        parts.append(f"<p id='note' class='warn'>Note: {esc(r.note)}</p>")
    if r.edited:
        parts.append(
            f"<p id='edited'>{sum(r.edited.values())} variants are decided otherwise by "
            f"entries people wrote: {esc(_counts(r.edited))} (grouped below as "
            "<code>edited</code>).</p>"
        )
    parts += [
        "<h2 id='reasons'>Decisions by reason</h2>",
        "<p>Every decision's reason code, with the details after the code, the most "
        "common evidence lines and the files.</p>",
        filter_box("review-reasons", "reasons"),
        "<table id='review-reasons' class='sortable'><tr><th>reason</th><th>count</th>"
        "<th class='l'>modes</th><th class='l'>details</th><th class='l'>evidence</th>"
        "<th class='l'>files</th><th class='l'>variants</th></tr>",
    ]
    for g in r.reasons[:HTML_REASONS]:
        ev = "<br>".join(clipped(x) + (f" <b>(x{n})</b>" if n > 1 else "")
                         for x, n in g.evidence.most_common(3))  # fmt: skip
        parts.append(
            f"<tr data-reason='{esc(g.code)}'><td>{esc(g.code)}</td><td>{g.count}</td>"
            f"<td class='l nw'>{_bar(g.modes)} {esc(_counts(g.modes))}</td>"
            f"<td class='l'>{_ul(g.details.most_common(TOP), len(g.details) - TOP)}</td>"
            f"<td class='l'>{ev}</td>"
            f"<td class='l'>{_ul(g.files.most_common(3), len(g.files) - 3)}</td>"
            f"<td class='l'>{_ids(g.ids, g.count)}</td></tr>"
        )
    parts.append("</table>")
    if len(r.reasons) > HTML_REASONS:
        parts.append(f"<p><i>{len(r.reasons) - HTML_REASONS} more reasons (--json)</i></p>")

    parts += [
        f"<h2 id='files'>Decisions by file ({len(r.files)})</h2>",
        filter_box("review-files", "files"),
        "<table id='review-files' class='sortable'><tr><th>file</th><th>count</th>"
        "<th>modes</th>"
        + "".join(f"<th>{m}</th>" for m in MODES)
        + "<th class='l'>top reasons</th></tr>",
    ]
    for f in r.files[:HTML_FILES]:
        parts.append(
            f"<tr><td>{esc(f.file)}</td><td>{sum(f.modes.values())}</td>"
            f"<td class='l'>{_bar(f.modes)}</td>"
            + "".join(f"<td>{f.modes[m]}</td>" for m in MODES)
            + f"<td class='l'>{esc(_counts(Counter(dict(f.reasons.most_common(3)))))}</td></tr>"
        )
    parts.append("</table>")
    if len(r.files) > HTML_FILES:
        parts.append(f"<p><i>{len(r.files) - HTML_FILES} more files (--json)</i></p>")

    parts += [
        "<h2 id='ops'>Ops that block the most variants</h2>",
        "<p>What to implement next: per op the evidence lists as missing, the variants it "
        "would <b>unlock</b> alone (their only missing op, no missing dtype) and all the "
        "variants that miss it.</p>",
    ]
    if r.ops:
        parts += [
            filter_box("review-ops", "ops"),
            "<table id='review-ops' class='sortable'><tr><th>op</th><th>unlocks</th>"
            "<th>blocks</th><th class='l'>variants it unlocks</th></tr>",
        ]
        for o in r.ops[:HTML_OPS]:
            parts.append(
                f"<tr data-op='{esc(o.op)}'><td>{esc(o.op)}</td><td>{o.alone}</td>"
                f"<td>{o.blocked}</td><td class='l'>{_ids(o.ids, o.alone) if o.alone else ''}"
                "</td></tr>"
            )
        parts.append("</table>")
        if len(r.ops) > HTML_OPS:
            parts.append(f"<p><i>{len(r.ops) - HTML_OPS} more ops (--json)</i></p>")
    else:
        parts.append("<p>None: no decision names a missing op.</p>")

    if r.changes is not None:
        n = sum(c.count for c in r.changes)
        parts += [
            f"<h2 id='changes'>Changes since {esc(str(r.previous))} ({n})</h2>",
            "<p>Variants decided otherwise than in the previous config (mode or reason), "
            "added or removed, by transition, with the new evidence as the why.</p>",
        ]
        if r.changes:
            parts += [
                filter_box("review-changes", "changes"),
                "<table id='review-changes' class='sortable'><tr><th>change</th>"
                "<th>kind</th><th>count</th><th class='l'>why</th>"
                "<th class='l'>variants</th></tr>",
            ]
            for c in r.changes[:HTML_CHANGES]:
                why = "<br>".join(clipped(x) + (f" <b>(x{k})</b>" if k > 1 else "")
                                  for x, k in c.why.most_common(3))  # fmt: skip
                parts.append(
                    f"<tr data-kind='{c.kind}'><td>{esc(c.label)}</td><td>{c.kind}</td>"
                    f"<td>{c.count}</td><td class='l'>{why}</td>"
                    f"<td class='l'>{_ids(c.ids, c.count)}</td></tr>"
                )
            parts.append("</table>")
        else:
            parts.append("<p>None.</p>")
    return page(title, "".join(parts), _CSS)
