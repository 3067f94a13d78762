"""Re-deciding part of a selected config: an upgrade, an enabled op.

Note [Incremental selection]
Two changes re-decide only the variants they can affect, and land as a diff of
the config (Note [Config patches] says how it is edited):

- **an upgrade** (``select run --since OLD.db --memory NEW.db --config S``):
  the repository memory diff (``ootest index diff``) names the device variants
  added or modified (their fingerprint changed: body, decorator, helper,
  import, OpInfo/ModuleInfo entry) and removed. Only the added and modified are
  decided again, with the same evidence and rules as a full run; a removed one
  leaves the sidecar and the names that named exactly it. Everything else is
  kept as it was, byte for byte, sidecar lines included.
- **an enabled op** (``select enable OP --ops DB --config S``): the variants
  whose evidence lists an op the new rule covers among their missing ops are
  the ones that waited on it; only they are decided again, with those ops
  removed from their missing ops (the rule is the op map's own, as ``ootest
  ops enable`` applies it).

Both keep what people decided (entries without the ``ootest-select`` tag), update
the header's provenance and decision counts, and write each re-decided variant's
new evidence line with ``changed`` saying why it was decided again.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ootest.errors import UserError
from ootest.select.gather import Candidate, Sources, Support, from_memory, gather
from ootest.select.patch import patch
from ootest.select.refine import evidence_row, read_sidecar, sidecar_path
from ootest.select.rules import Decision, Evidence, decide

_VID = re.compile(r'"variant_id": ("(?:[^"\\]|\\.)*")')
_MODE = re.compile(r'"mode": "(\w+)"')


@dataclass
class Outcome:
    """What an incremental change did; nothing is written until :meth:`write`."""

    config: Path
    out: Path
    old_text: str
    new_text: str
    sidecar: str
    evaluated: int
    total: int
    decisions: Counter[str] = field(default_factory=Counter)  # new decisions, by mode
    details: list[str] = field(default_factory=list)  # "3 added", "2 removed"...
    held: list[str] = field(default_factory=list)
    unplaceable: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.old_text.splitlines(True),
                self.new_text.splitlines(True),
                f"a/{self.config}",
                f"b/{self.out}",
            )
        )

    def summary(self) -> str:
        head = f"evaluated {self.evaluated:,} of {self.total:,} variants"
        parts = [*self.details]
        if self.decisions:
            parts.append("now " + ", ".join(f"{n} {m}" for m, n in sorted(self.decisions.items())))
        return head + (f" ({'; '.join(parts)})" if parts else "")

    def write(self) -> None:
        import os

        self.out.parent.mkdir(parents=True, exist_ok=True)
        for path, data in ((self.out, self.new_text), (sidecar_path(self.out), self.sidecar)):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, path)


# ------------------------------------------------------------------ the sidecar
def _raw_rows(config: Path) -> dict[str, str]:
    """The sidecar's lines by variant ID, as written (kept byte for byte)."""
    path = sidecar_path(config)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(
            f"{path}: expected the evidence file 'ootest select run' wrote next to "
            f"{config.name}; cannot read it: {e.strerror or e}"
        ) from None
    out: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        m = _VID.search(line)
        if m is None:
            raise UserError(
                f"{path}:{n}: expected an evidence line written by 'ootest select run'; "
                "found no variant_id"
            )
        out[json.loads(m[1])] = line
    return out


def _row(ev: Evidence, d: Decision, fingerprint: str, changed: Iterable[str]) -> str:
    row = evidence_row(ev, d, fingerprint)
    row["changed"] = list(changed)
    return json.dumps(row, sort_keys=True)


def _modes(rows: Mapping[str, str]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Decisions by mode, in all and per file key."""
    total: Counter[str] = Counter()
    per_file: dict[str, Counter[str]] = defaultdict(Counter)
    for vid, line in rows.items():
        m = _MODE.search(line)
        mode = m[1] if m else "?"
        total[mode] += 1
        per_file[vid.partition("::")[0]][mode] += 1
    return total, per_file


def _read(config: Path) -> str:
    try:
        return config.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"{config}: cannot read it: {e.strerror or e}") from None


def _root_var(text: str) -> str:
    m = re.search(r"path: \"?\$\{(\w+)\}/", text)
    return m[1] if m else "TORCH_ROOT"


def _reheader(text: str, total: Counter[str], edit: Callable[[str], str]) -> str:
    """The header comment with the decision counts of ``total`` and each line passed
    through ``edit`` (provenance); the rest of the text as it was."""
    head, sep, rest = text.partition("test_suite_config:")
    if not sep:
        return text
    lines = head.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("# decisions:"):
            lines[i] = "# decisions: " + ", ".join(f"{n} {m}" for m, n in sorted(total.items()))
        elif line.startswith("#"):
            lines[i] = edit(line)
    return "\n".join(lines) + sep + rest


def _finish(
    config: Path,
    out: Path,
    text: str,
    rows: dict[str, str],
    changes: Mapping[str, tuple[Evidence, Decision, str, tuple[str, ...]]],
    removed: set[str],
    universe: Mapping[str, Iterable[str]],
    provenance: Callable[[str], str],
) -> tuple[Outcome, list[str]]:
    """Patch the config and the sidecar; returns the outcome (without counts) and
    the variants people's entries hold."""
    decided = {vid: d for vid, (_, d, _, _) in changes.items()}
    files = {vid.partition("::")[0] for vid in [*changes, *removed]}
    for vid in removed:
        rows.pop(vid, None)
    new_rows = dict(rows)
    for vid, (ev, d, fp, why) in changes.items():
        new_rows[vid] = _row(ev, d, fp, why)
    total, per_file = _modes(new_rows)
    patched = patch(
        text,
        decided,
        removed,
        {f: list(vs) for f, vs in universe.items() if f in files},
        {f: c for f, c in per_file.items() if f in files},
        _root_var(text),
    )
    held = set(patched.held) | {v for v in changes if v.partition("::")[0] in patched.unplaceable}
    for vid in held:  # a person decides it: its evidence line stays as it was
        if vid in rows:
            new_rows[vid] = rows[vid]
        else:
            new_rows.pop(vid, None)
    if held:
        total, _ = _modes(new_rows)
    new_text = _reheader(patched.text, total, provenance)
    sidecar = "".join(new_rows[v] + "\n" for v in sorted(new_rows))
    o = Outcome(config, out, text, new_text, sidecar, 0, 0)
    o.decisions = Counter(d.mode for vid, d in decided.items() if vid not in held)
    o.held, o.unplaceable = sorted(patched.held), patched.unplaceable
    if o.held:
        o.notes.append(f"{len(o.held)} kept as people's entries decide them")
    if o.unplaceable:
        o.notes.append(
            f"files listed only by a glob path, decide them by hand: {', '.join(o.unplaceable)}"
        )
    return o, sorted(held)


# ------------------------------------------------------------------ an upgrade
def upgrade(
    old_db: Path,
    config: Path,
    out: Path,
    sources: Sources,
    support: Support,
    scope: set[str] | None,
    provenance: Callable[[str], str],
) -> Outcome:
    """Re-decide what the memory diff from ``old_db`` to ``sources.memory`` reports
    added or modified (Note [Incremental selection])."""
    from ootest.memory import diff_indexes

    new_db = sources.memory
    if new_db is None:
        raise UserError("--since: expected --memory NEW.db, the memory to compare it with")
    if not old_db.is_file():
        raise UserError(
            f"--since {old_db}: no such index; pass the memory the config was decided from"
        )
    text = _read(config)
    rows = _raw_rows(config)
    diff = diff_indexes(old_db, new_db)
    new = {c.variant_id: c for c in from_memory(new_db)}
    old = {c.variant_id for c in from_memory(old_db)}
    why: dict[str, tuple[str, ...]] = {v: ("added",) for v in diff.added if v in new}
    why.update((m.id, m.reasons) for m in diff.modified if m.id in new)
    why.update((v, ("now a device variant",)) for v in new.keys() - old if v not in why)
    removed = old - new.keys()
    cands: list[Candidate] = [new[v] for v in sorted(why)]
    evidence = gather(cands, sources, support, scope)
    changes = {
        ev.variant_id: (ev, decide(ev), new[ev.variant_id].fingerprint, why[ev.variant_id])
        for ev in evidence
    }
    universe: dict[str, list[str]] = defaultdict(list)
    for vid in new:
        universe[vid.partition("::")[0]].append(vid)
    unknown = len(new.keys() - rows.keys() - why.keys())
    o, _held = _finish(config, out, text, rows, changes, removed, universe, provenance)
    o.evaluated, o.total = len(changes), len(new)
    n_added = sum(1 for v in why.values() if v == ("added",))
    o.details = [
        f"{n_added} added",
        f"{len(changes) - n_added} modified",
        f"{len(removed)} removed",
    ]
    if unknown:
        o.notes.append(
            f"{unknown} variants of {new_db} have no decision in {config.name} and did not "
            "change: decide them with a full 'ootest select run'"
        )
    return o


# ------------------------------------------------------------------ an enabled op
def enable_op(op: str, ops_db: Path, config: Path, out: Path) -> tuple[Outcome, str]:
    """Re-decide the variants that waited on ``op`` (Note [Incremental selection]);
    returns the outcome and the rule as a support list writes it."""
    from ootest.opmap.enable import config_name
    from ootest.opmap.names import SupportSet
    from ootest.opmap.store import OpStore

    if not ops_db.is_file():
        raise UserError(f"--ops {ops_db}: no such op map; build it with 'ootest ops capture'")
    with OpStore.open(ops_db) as store:
        parsed, _ = store.resolve_ops(op)
    name = config_name(parsed)
    rule = SupportSet.from_names([str(parsed)], name)
    text = _read(config)
    rows = _raw_rows(config)
    changes: dict[str, tuple[Evidence, Decision, str, tuple[str, ...]]] = {}
    still = 0
    for ev, _d, fp in read_sidecar(sidecar_path(config)):
        if not any(rule.covers(o) for o in ev.missing_ops):
            continue
        ev.missing_ops = tuple(o for o in ev.missing_ops if not rule.covers(o))
        still += bool(ev.missing_ops)
        changes[ev.variant_id] = (ev, decide(ev), fp, (f"enabled:{name}",))
    universe: dict[str, list[str]] = defaultdict(list)
    for vid in rows:
        universe[vid.partition("::")[0]].append(vid)

    def provenance(line: str) -> str:
        m = re.match(r"^# backend: (.*?); ootest", line)
        if m is None or not changes:
            return line
        return f"# backend: {m[1]} + {name}{line[m.end(1) :]}"

    o, _held = _finish(config, out, text, rows, changes, set(), universe, provenance)
    o.evaluated, o.total = len(changes), len(rows)
    o.details = [f"the variants waiting on {name}"]
    if still:
        o.notes.append(f"{still} of them still miss other ops")
    if not changes:
        o.notes.append(
            f"no variant of {config.name} waited on {name}: nothing changes "
            "(its evidence lists no missing op the rule covers)"
        )
    return o, name
