"""Which variants a backend change can affect: changed ops -> variants calling them.

The ops come from a list, or from a git diff of the backend's sources: every
changed line is attributed to the kernel registrations it belongs to (see
:mod:`ootest.opmap.registrations`). A changed line that no registration
accounts for (a shared helper, a build file, a header) cannot be mapped, and
then the only safe answer is "run everything", with the files that made it so.
Variants whose ops may differ per device are always kept: the capture cannot
tell whether they call a changed op on the real device.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ootest.errors import UserError
from ootest.opmap.names import OpName
from ootest.opmap.registrations import (
    CPP_SUFFIXES,
    PY_SUFFIXES,
    SourceMap,
    parse_cpp,
    parse_python,
)
from ootest.opmap.store import OpStore

DOC_SUFFIXES = frozenset({".md", ".rst"})


@dataclass(frozen=True)
class Unmapped:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class ChangeMap:
    """What a diff changed, in ops."""

    ops: dict[str, list[str]] = field(default_factory=dict)  # op -> files that changed it
    unmapped: list[Unmapped] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # files whose changes cannot matter


@dataclass
class AffectedReport:
    ops: list[str]  # the changed ops, as asked or as registered
    total: int  # variants in the index
    variants: list[str]  # the variants to run (every indexed one when everything)
    everything: bool
    reasons: list[str] = field(default_factory=list)  # why everything, if so
    per_op: dict[str, int] = field(default_factory=dict)  # op -> variants calling it
    unknown_ops: list[str] = field(default_factory=list)  # ops no captured variant calls
    uncertain_kept: int = 0  # kept only because their ops may differ per device
    change: ChangeMap | None = None


# ------------------------------------------------------------------ diff -> ops
def _git(src: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(src), *args], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"--src {src}: expected a git checkout; running git failed: {e}") from None
    if done.returncode != 0:
        msg = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        raise UserError(f"--src {src}: `git {' '.join(args)}` failed: {msg}")
    return done.stdout


def _revisions(src: Path, spec: str) -> tuple[str, str]:
    """(old, new) commits of ``BASE..HEAD`` (or ``BASE...HEAD``: from the merge base)."""
    three = "..." in spec
    base, sep, head = spec.partition("..." if three else "..")
    if not sep or not base or not head:
        raise UserError(f"--diff {spec!r}: expected BASE..HEAD, e.g. origin/main..HEAD")
    if three:
        base = _git(src, "merge-base", base, head).strip()
    return base, head


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class FileChange:
    """One file of a diff: its path on each side (None: absent) and changed lines."""

    old: str | None
    new: str | None
    hunks: list[tuple[range, range]] = field(default_factory=list)  # old lines, new lines
    binary: bool = False

    @property
    def path(self) -> str:
        return self.new or self.old or "?"


def parse_diff(text: str) -> list[FileChange]:
    """The files of a ``git diff -U0 -M`` and the line numbers each side changed."""
    out: list[FileChange] = []
    cur: FileChange | None = None
    for line in text.splitlines():
        if line.startswith("diff --git "):
            m = re.match(r"diff --git a/(.*) b/(.*)$", line)
            cur = FileChange(m.group(1), m.group(2)) if m else FileChange(None, None)
            out.append(cur)
        elif cur is None:
            continue
        elif line.startswith("new file mode"):
            cur.old = None
        elif line.startswith("deleted file mode"):
            cur.new = None
        elif line.startswith("rename from "):
            cur.old = line[len("rename from ") :]
        elif line.startswith("rename to "):
            cur.new = line[len("rename to ") :]
        elif line.startswith("--- "):
            cur.old = None if line == "--- /dev/null" else line[6:]
        elif line.startswith("+++ "):
            cur.new = None if line == "+++ /dev/null" else line[6:]
        elif line.startswith("Binary files ") or line == "GIT binary patch":
            cur.binary = True
        elif m := _HUNK.match(line):
            o, oc, n, nc = (int(x) if x is not None else 1 for x in m.groups())
            cur.hunks.append((range(o, o + oc), range(n, n + nc)))
    return out


def _source_map(src: Path, rev: str, path: str) -> SourceMap | None:
    """Registrations and kernels of ``path`` at ``rev`` (None: Python that does not parse)."""
    text = _git(src, "show", f"{rev}:{path}")
    suffix = Path(path).suffix
    if suffix in PY_SUFFIXES:
        return parse_python(text)
    return parse_cpp(text)


def ops_from_diff(src: str | Path, spec: str) -> ChangeMap:
    """The ops a diff of the backend's sources changes, and what could not be mapped."""
    root = Path(src)
    base, head = _revisions(root, spec)
    text = _git(root, "diff", "--no-color", "--no-ext-diff", "-U0", "-M", f"{base}..{head}")
    cm = ChangeMap()
    for fc in sorted(parse_diff(text), key=lambda f: f.path):
        suffix = Path(fc.path).suffix
        if suffix in DOC_SUFFIXES:
            cm.ignored.append(f"{fc.path} (documentation)")
        elif fc.binary:
            cm.unmapped.append(Unmapped(fc.path, "binary file changed"))
        elif not fc.hunks:
            cm.ignored.append(f"{fc.path} (renamed or mode changed, content unchanged)")
        elif suffix not in CPP_SUFFIXES | PY_SUFFIXES:
            cm.unmapped.append(
                Unmapped(fc.path, "not a C++ or Python source: its effect on kernels is unknown")
            )
        else:
            found, problems = _map_file(root, base, head, fc)
            if problems:
                cm.unmapped.append(Unmapped(fc.path, "; ".join(problems)))
            for op in found:
                cm.ops.setdefault(op, []).append(fc.path)
    return cm


def _map_file(root: Path, base: str, head: str, fc: FileChange) -> tuple[set[str], list[str]]:
    """The ops one file's hunks touch, and the lines no registration accounts for.

    A hunk whose code is the same on both sides once comments and whitespace
    are dropped changes nothing and is skipped.
    """
    sides = {
        "old": (_source_map(root, base, fc.old) if fc.old else SourceMap(), base, fc.old),
        "new": (_source_map(root, head, fc.new) if fc.new else SourceMap(), head, fc.new),
    }
    problems = [
        f"{path} at {rev} does not parse as Python"
        for sm, rev, path in sides.values()
        if sm is None
    ]
    if problems:
        return set(), problems
    old_sm, new_sm = (sides[k][0] for k in ("old", "new"))
    assert old_sm is not None and new_sm is not None
    found: set[str] = set()
    bad: dict[str, list[int]] = {"old": [], "new": []}
    for old_lines, new_lines in fc.hunks:
        if old_sm.code_of(old_lines) == new_sm.code_of(new_lines):
            continue
        for side, sm, lines in (("old", old_sm, old_lines), ("new", new_sm, new_lines)):
            for n in lines:
                ops = sm.ops_at(n)
                if ops is None:
                    bad[side].append(n)
                else:
                    found.update(ops)
    problems = [
        f"{side} line(s) {_ranges(lines)} change code outside any registered kernel"
        for side, lines in bad.items()
        if lines
    ]
    return found, problems


def _ranges(lines: list[int]) -> str:
    out: list[str] = []
    start = prev = lines[0]
    for n in [*lines[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)


# ------------------------------------------------------------------ ops -> variants
def affected(
    store: OpStore, ops: list[OpName], *, everything_because: list[str] | None = None
) -> AffectedReport:
    """The variants calling any of ``ops`` (packets: every overload), plus the
    device-dependent ones; every variant when ``everything_because`` is given."""
    total = store.variant_count()
    names = [str(o) for o in ops]
    if everything_because:
        return AffectedReport(names, total, store.all_variant_ids(), True, list(everything_because))
    rep = AffectedReport(names, total, [], False)
    kept: set[int] = set()
    for op in ops:
        found = store.op_ids(op)
        if not found:
            rep.unknown_ops.append(str(op))
            continue
        calling: set[int] = set()
        for arr in store.postings(i for i, _ in found).values():
            calling.update(arr)
        rep.per_op[str(op)] = len(calling)
        kept |= calling
    uncertain = set(store.uncertain_variants())
    rep.uncertain_kept = len(uncertain - kept)
    kept |= uncertain
    info = store.variant_info(kept)
    rep.variants = sorted(info[v][0] for v in kept)
    return rep


def registered_op(name: str) -> OpName:
    """A registered name (qualified, default overload when none) as an OpName."""
    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    return OpName(ns, base, overload)


def affected_by(
    store: OpStore, ops: str | None, src: Path | None, diff: str | None
) -> AffectedReport:
    """``ootest ops affected``: the variants ``ops`` (names separated by commas)
    affect, else those the git ``diff`` of the backend checkout ``src`` affects
    (with the change attached)."""
    if ops is not None:
        names = [n for n in (s.strip() for s in ops.split(",")) if n]
        if not names:
            raise UserError("--ops: expected one or more op names, e.g. aten::mm,aten::add")
        return affected(store, [store.parse(n) for n in names])
    if src is None or diff is None:
        raise UserError("--diff needs --src DIR, the backend's git checkout")
    change = ops_from_diff(src, diff)
    reasons = [f"could not map {u}" for u in change.unmapped]
    ops_changed = [registered_op(o) for o in sorted(change.ops)]
    rep = affected(store, ops_changed, everything_because=reasons or None)
    rep.change = change
    return rep
