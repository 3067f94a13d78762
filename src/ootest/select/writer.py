"""Writing decisions as a reviewable config and its evidence sidecar.

Note [Selection output]
The config is valid for ootest and keeps to the keys Torch Spyre's format knows
(``path``, ``unlisted_test_mode``, ``tests[].names``, ``mode``, ``edits``):
the reasons are YAML comments above each entry, as Spyre's generated configs
have them, and, machine-readable, one JSON line per variant in the sidecar
``<config>.evidence.jsonl`` (variant ID, mode, reason code, evidence, source,
fingerprint). Per file:

- a template whose variants all got the same decision is named once
  (``TestFoo::test_bar``; a skip only for ``TEMPLATE_SKIPS`` reasons), else each variant by its axes
  (``TestFoo::test_bar[op=add,dtype=float32]``);
- entries are grouped by mode and reason code, names sorted;
- ``unlisted_test_mode`` is ``xfail`` (Note [Undecided variants run]): what
  no entry names runs; every other decision is listed, and a skip names its
  variants exactly unless its reason holds for the whole test.

The text is built directly (not by a YAML library) so that the same decisions
always give the same bytes; it is checked to load back as the same config.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ootest.record.decisions import GENERATED_TAG
from ootest.select.rules import MODES, Decision

MARK = "# ootest select:"  # begins the comment above every generated entry
#: The tag every generated entry carries: refinement rewrites only entries with it.
#: An entry without it (written by a person, or a generated one whose tag was
#: removed to pin it) is kept as it is, and its names are not decided again.
TAG = GENERATED_TAG


#: Note [Undecided variants run]
#: The ``unlisted_test_mode`` of every generated file block. A variant no entry
#: names is one nothing decided: a test added upstream after the selection, a
#: variant a collection missed. It must run, and not break CI: ``xfail`` (it
#: runs, a failure is expected, a pass is reported as XPASS, a promotion
#: candidate). So every decision other than ``xfail`` is listed, skips included,
#: and no generated config skips what it did not decide.
UNLISTED = "xfail"
#: Skip reasons that hold for every variant of a test, present or future (a
#: decorator of the test, its file's scope): such a skip may name the template.
#: Any other skip names its variants exactly, so that a variant added later (a
#: new dtype) is not skipped by a name written before it existed. A template
#: name of another mode does cover a variant added upstream later, on purpose
#: (issue 36, kept): ``mandatory_success`` or ``xfail_strict`` given to a variant
#: nothing decided is loud (it fails, or XPASSes strictly, in the next run) where
#: a skip would be silent, ``select run --since``/``select refresh`` decide the
#: added variants, and naming every variant of every mandatory template would
#: make a config thousands of lines longer for no decision it does not make.
TEMPLATE_SKIPS = ("upstream_skip", "out_of_scope")


def template_wide(mode: str, reason: str) -> bool:
    """Whether a decision shared by every variant of a template may be written as
    the template's name (Note [Undecided variants run])."""
    return mode != "skip" or reason.split(":", 1)[0] in TEMPLATE_SKIPS


@dataclass(frozen=True)
class Precision:
    """A tolerance proposed for one name: the observed mismatch, with headroom."""

    dtype: str
    atol: float
    rtol: float
    why: str


@dataclass(frozen=True)
class Placed:
    """A decision with where its variant lives."""

    decision: Decision
    file: str  # file key
    template: str  # Class::method
    axes: str  # "op=add,dtype=float32" or ""


def file_digest(path: Path | None) -> str:
    """How a config's header names an input file (``sha256:`` and 16 hex digits;
    ``-``: none)."""
    import hashlib

    if path is None or not path.is_file():
        return "-"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()[:16]


#: The header line naming the replay a config was decided with (Note [Replaying calls]).
REPLAY_LINE = "replayed calls "


def split_id(variant_id: str) -> tuple[str, str, str]:
    """(file key, Class::method, axes) of a canonical variant ID."""
    file, _, rest = variant_id.partition("::")
    template, _, axes = rest.partition("[")
    return file, template, axes[:-1] if axes.endswith("]") else axes


def _q(text: str) -> str:
    """A YAML scalar: plain when safe, else double-quoted JSON (valid YAML)."""
    safe = (
        text
        and text[0] not in "!&*?|>'\"%@`#[]{},-"
        and all(c.isalnum() or c in "_.:/=$(){}+-" for c in text)
    )
    return text if safe and not text.endswith(":") and ": " not in text else json.dumps(text)


def _comment(text: str) -> str:
    """One line of a YAML comment: whitespace folded, and what YAML refuses even in
    a comment (control characters: a test's message may carry a terminal's colour
    codes, ``\\x1b[1m``) written as ``\\xNN``."""
    text = " ".join(text.split())
    if not text.isprintable():
        text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text[:240]


def render(
    placed: Iterable[Placed],
    paths: Mapping[str, str],
    header: list[str],
    precision: Mapping[tuple[str, str], Precision] | None = None,
    device: str | None = None,
) -> str:
    """The config text for ``placed`` decisions; ``paths`` maps file key -> the
    ``path:`` to write (e.g. ``${TORCH_ROOT}/test/test_x.py``); ``precision`` maps
    (file key, name) -> a tolerance that makes it pass (refinement proposes them);
    ``device`` is the device the decisions were made for (written as ``device:``, so
    a plain ``ootest run`` runs on it rather than on no device)."""
    by_file: dict[str, list[Placed]] = defaultdict(list)
    for p in placed:
        by_file[p.file].append(p)
    out = [f"# {h}" if h else "#" for h in header]
    out += ["test_suite_config:"]
    out += [f"  device: {device}"] if device else []
    out += ["  files:"]
    for file in sorted(by_file):
        precs = {n: v for (f, n), v in (precision or {}).items() if f == file}
        out += _file(paths.get(file, file), by_file[file], precs)
    return "\n".join(out) + "\n"


def _file(path: str, placed: list[Placed], precision: Mapping[str, Precision]) -> list[str]:
    by_template: dict[str, list[Placed]] = defaultdict(list)
    for p in placed:
        by_template[p.template].append(p)
    names: list[tuple[str, str, str, tuple[str, ...]]] = []  # (mode, reason, name, evidence)
    for template in sorted(by_template):
        group = by_template[template]
        kinds = {(p.decision.mode, p.decision.reason) for p in group}
        if len(kinds) == 1 and (not group[0].axes or template_wide(*next(iter(kinds)))):
            d = group[0].decision
            names.append((d.mode, d.reason, template, d.evidence))
        else:
            for p in sorted(group, key=lambda x: x.axes):
                name = f"{template}[{p.axes}]" if p.axes else template
                names.append((p.decision.mode, p.decision.reason, name, p.decision.evidence))
    unlisted = UNLISTED
    lines = [f"    - path: {_q(path)}"]
    count = Counter(p.decision.mode for p in placed)
    summary = ", ".join(f"{count[m]} {m}" for m in MODES if count[m])
    lines.append(f"      # {len(placed)} variants: {summary}")
    lines.append(f"      unlisted_test_mode: {unlisted}")
    groups: dict[tuple[str, str], list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for mode, reason, name, evidence in names:
        if name in precision:
            continue
        if mode != unlisted:
            groups[(mode, reason)].append((name, evidence))
    if not groups and not precision:
        return lines
    lines.append("      tests:")
    for (mode, reason), members in sorted(
        groups.items(), key=lambda kv: (MODES.index(kv[0][0]), kv[0][1])
    ):
        lines += entry_lines(mode, reason, members)
    for name in sorted(precision):
        pr = precision[name]
        # a proposal (Note [Refinement]): it runs with the tolerance, not required to pass
        lines.append(f"        {MARK} precision_proposal:{pr.dtype} (1 name)")
        lines.append(f"        #   {_comment(pr.why)}")
        lines.append("        - names:")
        lines.append(f"            - {_q(name)}")
        lines.append("          mode: xfail")
        lines.append(f"          tags: [{TAG}]")
        lines.append("          edits:")
        lines.append("            dtypes:")
        lines.append("              include:")
        lines.append(f"                - name: {pr.dtype}")
        atol, rtol = _num(pr.atol), _num(pr.rtol)
        lines.append(f"                  precision: {{atol: {atol}, rtol: {rtol}}}")
    return lines


def _num(x: float) -> str:
    """A float YAML 1.1 reads as one (``4e-05`` is a string there: ``4.0e-05``)."""
    text = f"{x:.3g}"
    mant, e, exp = text.partition("e")
    return f"{mant}.0e{exp}" if e and "." not in mant else text


def entry_lines(
    mode: str, reason: str, members: Iterable[tuple[str, tuple[str, ...]]]
) -> list[str]:
    """One generated entry (its comment, names, mode and tag), indented as
    :func:`render` places it under a file's ``tests:``; ``members`` are
    (name, evidence) pairs. ``select run --since`` adds entries with it too."""
    members = list(members)
    lines = [f"        {MARK} {reason} ({len(members)} names)"]
    lines += [f"        {c}" for c in evidence_comments(ev for _, ev in members)]
    lines.append("        - names:")
    lines += [f"            - {_q(n)}" for n, _ in sorted(members)]
    lines.append(f"          mode: {mode}")
    lines.append(f"          tags: [{TAG}]")
    return lines


def evidence_comments(evidence: Iterable[tuple[str, ...]]) -> list[str]:
    """The comment lines under an entry's mark: its names' three most common
    evidence lines (one evidence per name), each with how many names give it."""
    evid = Counter(e for ev in evidence for e in ev)
    return [f"#   {_comment(e)}" + (f" (x{n})" if n > 1 else "") for e, n in evid.most_common(3)]


def evidence_lines(placed: Iterable[Placed], fingerprints: Mapping[str, str]) -> str:
    """The sidecar: one JSON line per variant, sorted by variant ID."""
    rows = []
    for p in sorted(placed, key=lambda x: x.decision.variant_id):
        d = p.decision
        row: dict[str, Any] = {
            "variant_id": d.variant_id,
            "mode": d.mode,
            "reason": d.reason,
            "evidence": list(d.evidence),
            "source": d.source,
        }
        fp = fingerprints.get(d.variant_id)
        if fp:
            row["fingerprint"] = fp
        rows.append(json.dumps(row, sort_keys=True))
    return "\n".join(rows) + ("\n" if rows else "")
