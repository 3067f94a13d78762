"""The decisions behind outcomes: the evidence sidecar, read for a run, and how
results are grouped by the reason their variant was decided for.

Note [Decisions people can see]
``ootest select`` writes each variant's decision (mode, reason code, evidence)
into ``<config>.evidence.jsonl`` next to the config; the config itself holds the
reasons only as YAML comments. So that a run reports a skipped or expected-to-fail
variant under *why* it was decided (``op_unsupported:aten::sort``) rather than
``not listed in the config``, the plugin reads the sidecar when it decides a
variant (once per compiled plan: the decision is kept in the plan cache, which
the sidecar's size and mtime invalidate) and takes the sidecar's reason code
and evidence for a variant that

- no entry names (``unlisted_test_mode`` decides it), or
- a generated entry (tagged ``ootest-select``, no ``reason:`` of its own) names,

when the sidecar's mode is the mode the config gives it. A person's entry keeps
its own ``reason:``; a variant the sidecar does not know, or decided otherwise
than the config does now, is *not decided*: :data:`NOT_DECIDED` when no entry
names it, :data:`NOT_MADE_FOR` when a generated entry does (a decision is never
shown under a variant it was not made for: a generated name reaching a variant
the selection did not decide -- one added upstream later, or a sibling a name
used to reach before Note [Exact op filters] -- says so rather than ``listed as
skip`` with no evidence). The lookup is
by canonical variant ID, so it holds whatever the config lists or leaves
unlisted. Results carry ``code`` and ``evidence``; reports group by
:func:`reason_key`. Nothing here imports torch, PyYAML or pydantic.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "EVIDENCE_LINES",
    "GENERATED_TAG",
    "NOT_DECIDED",
    "NOT_MADE_FOR",
    "Decided",
    "Sidecar",
    "reason_code",
    "reason_key",
    "sidecar_path",
]

#: The tag every entry ``ootest select`` writes carries (Note [Selection output]).
GENERATED_TAG = "ootest-select"
#: How reports name the group of variants no decision explains.
NOT_DECIDED = "not decided: unlisted"
#: How reports name a variant a generated entry reaches but the selection did not decide.
NOT_MADE_FOR = "not decided: a generated entry not made for it"
#: Evidence lines a result carries (each cut to EVIDENCE_CHARS): the sidecar keeps all.
EVIDENCE_LINES = 3
EVIDENCE_CHARS = 300


def sidecar_path(config: Path) -> Path:
    """``suite.yaml`` -> ``suite.evidence.jsonl`` (the decisions of a generated config)."""
    return config.with_name(
        config.name.removesuffix(".yaml").removesuffix(".yml") + ".evidence.jsonl"
    )


def reason_code(reason: str) -> str:
    """The code of a selection reason: ``op_unsupported:aten::sort`` -> ``op_unsupported``."""
    return reason.split(":", 1)[0]


class Decided(NamedTuple):
    """One sidecar line, as a run needs it."""

    mode: str
    reason: str
    evidence: tuple[str, ...]
    source: str


class Sidecar:
    """The decisions of one sidecar by variant ID, read once (lazily)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rows: dict[str, Decided] | None = None
        self.bad = 0  # lines that are not decisions (counted, not fatal: a run goes on)

    @property
    def name(self) -> str:
        return self.path.name

    def rows(self) -> dict[str, Decided]:
        if self._rows is None:
            self._rows = self._read()
        return self._rows

    def get(self, variant_id: str) -> Decided | None:
        return self.rows().get(variant_id)

    def _read(self) -> dict[str, Decided]:
        out: dict[str, Decided] = {}
        try:
            fh = open(self.path, encoding="utf-8", errors="replace")
        except OSError:
            return out
        # Many variants share a reason and evidence lines: one string each (and so
        # one object in the marshalled plan cache, which writes repeats as references).
        seen: dict[str, str] = {}

        def one(text: str) -> str:
            return seen.setdefault(text, text)

        with fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    d = row.get("decision", row)  # select run's shape, or a flat one
                    vid, mode, reason = d["variant_id"], d["mode"], d["reason"]
                    evidence = d.get("evidence") or ()
                    if not (isinstance(vid, str) and isinstance(mode, str)):
                        raise TypeError
                    out[sys.intern(vid)] = Decided(
                        one(mode),
                        one(str(reason)),
                        tuple(
                            one(str(e)[:EVIDENCE_CHARS]) for e in list(evidence)[:EVIDENCE_LINES]
                        ),
                        one(str(d.get("source") or "rules")),
                    )
                except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
                    self.bad += 1
        return out


def reason_key(rec: Mapping[str, Any]) -> tuple[str, str]:
    """How reports group a result by its decision: (group, detail).

    A selection decision groups by its code with the rest as the detail
    (``("op_unsupported", "aten::sort")``); a variant nobody decided is
    :data:`NOT_DECIDED`, one a generated entry reaches without a decision
    :data:`NOT_MADE_FOR`; any other reason (a person's ``reason:``, a capability
    the config does not declare) is its own group."""
    reason = str(rec.get("reason") or "")
    code = rec.get("code")
    if code:
        code = str(code)
        return code, reason[len(code) + 1 :] if reason.startswith(code + ":") else ""
    if (
        rec.get("bucket") == "unlisted"
        or reason.startswith(NOT_DECIDED)
        or reason.startswith("not listed in the config")
    ):
        return NOT_DECIDED, ""
    if reason.startswith(NOT_MADE_FOR):
        return NOT_MADE_FOR, ""
    return reason or "?", ""
