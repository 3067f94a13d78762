"""Editing a selected config in place: only the lines a change touches.

Note [Config patches]
``select run --since`` (an upgrade) and ``select enable`` (an op) re-decide a
few variants of a config ``select run`` wrote, which people may have edited
since. The new text is the old one with line edits, so every line no change
touches stays byte for byte: comments, order, quoting, people's entries. The
positions come from PyYAML's composer (its C version reads a config of 100,000
lines in about a second); nothing is re-serialised. Per file of the config:

- a variant whose deciding entry is a person's (no ``ootest-select`` tag) is
  *held*: nothing about it changes;
- the exact name (``Class::test[axes]``) of a re-decided or removed variant
  leaves the generated entry that lists it; a template name (``Class::test``)
  leaves only when no variant of the template is left; an entry left without
  names goes, with the comment above it;
- a re-decided variant whose mode the config already gives (through a name
  covering it, or ``unlisted_test_mode``) needs no name; else it is named
  exactly (a variant filter outranks a template name, see
  ``config.decide.match_entry``) in the generated entry of its file with the
  same mode and reason code (the count in its comment updated), or in a new
  entry placed where ``select run`` would put it. When every variant of a
  template is re-decided alike and nothing names them more precisely, the
  template is named once instead;
- a file the config does not list gets a block as ``select run`` writes it;
  a generated block whose file has no variant left goes.

The result is checked before it is returned: every variant of a touched file
must resolve to its new mode (re-decided) or to the mode it had (the rest).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ootest.errors import UserError
from ootest.select.rules import MODES, Decision
from ootest.select.writer import MARK, TAG, Placed, entry_lines, render, split_id

_MARK_LINE = re.compile(r"^(\s*)# ootest select: (.*) \((\d+) names?\)\s*$")
_SUMMARY = re.compile(r"^(\s*)# \d+ variants: .*$")
_PLAIN_KEYS = {"names", "mode", "tags"}


@dataclass
class _Entry:
    index: int
    head: int  # first line of the comment block above it
    start: int  # the line of its '-'
    end: int  # one past its last line
    dash_col: int
    tagged: bool
    mode: str
    plain: bool  # only names/mode/tags, names a block list of one-line scalars
    names: list[tuple[str, int]]  # (name, line)
    patterns: list[Any]  # NamePattern per name (None: a name that does not parse)
    reason: str | None  # from the comment above it
    mark_line: int | None


@dataclass
class _Block:
    path: str
    start: int
    end: int
    dash_col: int
    key_col: int
    unlisted: str
    tests_line: int | None
    entries: list[_Entry] = field(default_factory=list)
    summary_line: int | None = None
    glob: bool = False


@dataclass
class Patched:
    text: str
    held: list[str]  # re-decided variants a person's entry decides: unchanged
    unplaceable: list[str]  # files configured by a glob path: decide by hand


def _last_line(node: Any) -> int:
    """The last line a node's text occupies (0-based)."""
    import yaml

    while True:
        if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
            end = node.end_mark
            return int(
                end.line - 1 if end.column == 0 and end.line > node.start_mark.line else end.line
            )
        if isinstance(node, yaml.MappingNode) and node.value:
            node = node.value[-1][1]
        elif isinstance(node, yaml.SequenceNode) and node.value:
            node = node.value[-1]
        else:
            return int(node.start_mark.line)


def _dash_col(line: str, col: int) -> int:
    head = line[:col].rstrip()
    return len(head) - 1 if head.endswith("-") else col


def _get(node: Any, key: str) -> Any:
    for k, v in node.value:
        if getattr(k, "value", None) == key:
            return k, v
    return None


def _parse(text: str, lines: list[str]) -> tuple[list[_Block], int | None]:
    """The file blocks of a config, and the line of ``files:`` (None: none)."""
    import yaml

    from ootest.config.names import NamePattern, NameSyntaxError
    from ootest.config.paths import is_glob

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as e:
        raise UserError(f"expected a YAML config; found a syntax error: {e}") from None
    suite = _get(root, "test_suite_config") if isinstance(root, yaml.MappingNode) else None
    if suite is None or not isinstance(suite[1], yaml.MappingNode):
        raise UserError("expected a mapping with key 'test_suite_config' (a selected config)")
    files = _get(suite[1], "files")
    if files is None or not isinstance(files[1], yaml.SequenceNode) or files[1].flow_style:
        return [], (files[0].start_mark.line if files is not None else None)
    blocks = []
    for fnode in files[1].value:
        if not isinstance(fnode, yaml.MappingNode) or fnode.flow_style:
            continue
        path = _get(fnode, "path")
        if path is None or not isinstance(path[1], yaml.ScalarNode):
            continue
        un = _get(fnode, "unlisted_test_mode")
        start = fnode.start_mark.line
        b = _Block(
            str(path[1].value),
            start,
            _last_line(fnode) + 1,
            _dash_col(lines[start], fnode.start_mark.column),
            fnode.start_mark.column,
            str(un[1].value) if un is not None else "skip",
            None,
            glob=is_glob(str(path[1].value)),
        )
        for ln in range(start, b.end):
            if _SUMMARY.match(lines[ln]):
                b.summary_line = ln
                break
        tests = _get(fnode, "tests")
        if tests is not None:
            b.tests_line = tests[0].start_mark.line
            prev_end = b.tests_line + 1
            seq = tests[1]
            items = seq.value if isinstance(seq, yaml.SequenceNode) else []
            for i, enode in enumerate(items):
                if not isinstance(enode, yaml.MappingNode):
                    continue
                e_start = enode.start_mark.line
                head = e_start
                while head > prev_end and lines[head - 1].strip().startswith("#"):
                    head -= 1
                keys = {str(k.value) for k, _ in enode.value}
                tags = _get(enode, "tags")
                tag_values = (
                    [str(t.value) for t in tags[1].value]
                    if tags is not None and isinstance(tags[1], yaml.SequenceNode)
                    else []
                )
                mode = _get(enode, "mode")
                names_node = _get(enode, "names")
                names: list[tuple[str, int]] = []
                plain = keys <= _PLAIN_KEYS and not enode.flow_style
                if names_node is not None and isinstance(names_node[1], yaml.SequenceNode):
                    plain = plain and not names_node[1].flow_style
                    for n in names_node[1].value:
                        if isinstance(n, yaml.ScalarNode):
                            names.append((str(n.value), n.start_mark.line))
                            plain = plain and _last_line(n) == n.start_mark.line
                elif names_node is not None and isinstance(names_node[1], yaml.ScalarNode):
                    names.append((str(names_node[1].value), names_node[1].start_mark.line))
                    plain = False
                pats: list[Any] = []
                for n, _ in names:
                    try:
                        pats.append(NamePattern.parse(n))
                    except NameSyntaxError:
                        pats.append(None)
                reason, mark_line = None, None
                for ln in range(head, e_start):
                    m = _MARK_LINE.match(lines[ln])
                    if m:
                        reason, mark_line = m[2], ln
                end = _last_line(enode) + 1
                b.entries.append(
                    _Entry(
                        i,
                        head,
                        e_start,
                        end,
                        _dash_col(lines[e_start], enode.start_mark.column),
                        TAG in tag_values,
                        str(mode[1].value) if mode is not None else "mandatory_success",
                        plain,
                        names,
                        pats,
                        reason,
                        mark_line,
                    )
                )
                prev_end = end
        blocks.append(b)
    return blocks, files[0].start_mark.line


class _Matcher:
    """Which entry of a block decides a variant, as ``config.decide.match_entry``
    picks it: the most specific matching name, the later entry on a tie (``when:``
    conditions count as holding). ``names`` replaces some entries' names (an edit
    under way). Names are indexed by method: a block of thousands of names answers
    each variant from a handful."""

    def __init__(self, block: _Block, names: Mapping[int, Collection[str]] | None = None) -> None:
        self.block = block
        self.by_method: dict[str, list[tuple[Any, _Entry]]] = defaultdict(list)
        self.loose: list[tuple[Any, _Entry]] = []
        for e in block.entries:
            pats = (
                _patterns(names[e.index])
                if names is not None and e.index in names
                else [p for p in e.patterns if p is not None]
            )
            for p in pats:
                if p.kind in ("exact", "bare"):
                    self.by_method[p.method].append((p, e))
                else:
                    self.loose.append((p, e))

    def winner(self, v: Any) -> tuple[_Entry | None, int]:
        """(the deciding entry or None, the specificity of its name; -1: none)."""
        best: tuple[int, int] | None = None
        chosen: _Entry | None = None
        for p, e in [*self.by_method.get(v.method, ()), *self.loose]:
            if p.matches(v):
                key = (p.specificity, e.index)
                if best is None or key >= best:
                    best, chosen = key, e
        return chosen, (best[0] if best is not None else -1)

    def mode(self, v: Any) -> str:
        e, _ = self.winner(v)
        return e.mode if e is not None else self.block.unlisted


def _name(vid: str) -> str:
    _, template, axes = split_id(vid)
    return f"{template}[{axes}]" if axes else template


class _Lines:
    """Line edits against the original text: replace or drop a line, insert before
    or after one; applied at once so indices never shift."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.repl: dict[int, str | None] = {}
        self.before: dict[int, list[str]] = defaultdict(list)
        self.after: dict[int, list[str]] = defaultdict(list)

    def drop(self, start: int, end: int | None = None) -> None:
        for i in range(start, start + 1 if end is None else end):
            self.repl[i] = None

    def text(self, tail: list[str]) -> str:
        out: list[str] = []
        for i, line in enumerate(self.lines):
            out += self.before.get(i, [])
            r = self.repl.get(i, line)
            if r is not None:
                out.append(r)
            out += self.after.get(i, [])
        out += tail
        return "".join(x if x.endswith("\n") else x + "\n" for x in out)


def _indent(lines: list[str], by: int) -> list[str]:
    if by >= 0:
        return [" " * by + x if x.strip() else x for x in lines]
    return [x[min(-by, len(x) - len(x.lstrip(" "))) :] for x in lines]


def patch(
    text: str,
    changes: Mapping[str, Decision],
    removed: Collection[str],
    universe: Mapping[str, Collection[str]],
    modes: Mapping[str, Counter[str]],
    root_var: str,
) -> Patched:
    """The config ``text`` with ``changes`` (variant ID -> its new decision) placed
    and ``removed`` variants' names dropped (Note [Config patches]). ``universe``
    maps each file key to every variant ID it has now; ``modes`` the per-file count
    of the sidecar's modes after the change (for each touched block's summary)."""
    lines = text.splitlines()
    blocks, files_line = _parse(text, lines)
    ed = _Lines(lines)
    tail: list[str] = []
    by_file: dict[str, list[str]] = defaultdict(list)
    for vid in [*changes, *removed]:
        by_file[vid.partition("::")[0]].append(vid)
    held: list[str] = []
    unplaceable: list[str] = []
    checks: list[tuple[str, str, str]] = []  # (file, variant, mode it must resolve to)
    new_blocks: dict[str, list[Placed]] = {}
    for file in sorted(by_file):
        block, globbed = _block_for(blocks, file, root_var)
        if block is None:
            if globbed:
                unplaceable.append(file)
                continue
            placed = []
            for vid in sorted(v for v in by_file[file] if v in changes):
                f, template, axes = split_id(vid)
                placed.append(Placed(changes[vid], f, template, axes))
                checks.append((file, vid, changes[vid].mode))
            if placed:
                new_blocks[file] = placed
            continue
        h, c = _patch_block(ed, lines, block, file, by_file[file], changes, removed, universe)
        held += h
        checks += c
        if block.summary_line is not None and file in modes:
            count = modes[file]
            m = _SUMMARY.match(lines[block.summary_line])
            assert m is not None
            summary = ", ".join(f"{count[x]} {x}" for x in MODES if count[x])
            ed.repl[block.summary_line] = f"{m[1]}# {sum(count.values())} variants: {summary}"
    if new_blocks:
        _add_blocks(ed, lines, blocks, files_line, new_blocks, root_var, tail)
    out = ed.text(tail)
    _check(out, checks, root_var)
    return Patched(out, sorted(held), sorted(unplaceable))


def _block_for(blocks: list[_Block], file: str, root_var: str) -> tuple[_Block | None, bool]:
    """The block listing ``file`` (its exact path first), and whether a glob path
    lists it instead (then nothing is placed: a name there would reach other files)."""
    from ootest.opmap.enable import _file_matches

    matching = [b for b in blocks if _file_matches(b.path, file)]
    exact = [b for b in matching if not b.glob]
    exact.sort(key=lambda b: b.path != f"${{{root_var}}}/{file}")
    return (exact[0] if exact else None), bool(matching) and not exact


def _patch_block(
    ed: _Lines,
    lines: list[str],
    block: _Block,
    file: str,
    touched: list[str],
    changes: Mapping[str, Decision],
    removed: Collection[str],
    universe: Mapping[str, Collection[str]],
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The edits of one file block; (held variants, checks)."""
    from ootest.opmap.enable import variant_from_id

    left = set(universe.get(file, ()))
    variants = {v: variant_from_id(v) for v in sorted({*left, *touched})}
    original = _Matcher(block)
    before = {v: original.mode(x) for v, x in variants.items() if x is not None}
    names = {e.index: [n for n, _ in e.names] for e in block.entries}
    templates_left = {split_id(v)[1] for v in left}
    gone: dict[int, set[str]] = defaultdict(set)
    todo: dict[str, Decision] = {}
    held: list[str] = []
    for vid in sorted(touched):
        v = variants.get(vid)
        if v is None:
            continue
        winner, _ = original.winner(v)
        if winner is not None and not winner.tagged:
            if vid in changes:
                held.append(vid)
            continue
        exact_name, template = _name(vid), split_id(vid)[1]
        for e in block.entries:
            if e.tagged:
                for n in names[e.index]:
                    if n == exact_name or (
                        vid in removed and n == template and template not in templates_left
                    ):
                        gone[e.index].add(n)
        if vid in changes:
            todo[vid] = changes[vid]
    current = {i: [n for n in ns if n not in gone[i]] for i, ns in names.items()}
    now = _Matcher(block, current)
    need = {vid: d for vid, d in todo.items() if now.mode(variants[vid]) != d.mode}
    # a whole template re-decided alike, named by nothing finer: name it once
    by_template: dict[str, list[str]] = defaultdict(list)
    for vid in need:
        by_template[split_id(vid)[1]].append(vid)
    units: list[tuple[str, Decision]] = []
    for template, vids in sorted(by_template.items()):
        every = sorted(v for v in left if split_id(v)[1] == template)
        alike = len({(need[v].mode, need[v].reason) for v in vids}) == 1
        coarse = all(now.winner(variants[v])[1] < 2 for v in vids)
        if len(vids) > 1 and sorted(vids) == every and alike and coarse:
            units.append((template, need[vids[0]]))
        else:
            units += [(_name(v), need[v]) for v in sorted(vids)]
    added: dict[int, list[str]] = defaultdict(list)
    fresh: dict[tuple[str, str], list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for name, d in units:
        target = next(
            (
                e
                for e in block.entries
                if e.tagged and e.plain and e.mode == d.mode and e.reason == d.reason
            ),
            None,
        )
        if target is not None:
            added[target.index].append(name)
        else:
            fresh[(d.mode, d.reason)].append((name, d.evidence))
    for e in block.entries:
        drop = gone[e.index] - set(added[e.index])  # dropped and added back: unchanged
        add = [n for n in added[e.index] if n not in names[e.index]]
        if not drop and not add:
            continue
        count = len(current[e.index]) + len(added[e.index])
        if count == 0:
            ed.drop(e.head, e.end)
            continue
        if not e.plain:
            raise UserError(
                f"line {e.start + 1}: expected the generated entry's names as a block list "
                "(one '- name' a line); rewrite it so, or remove its ootest-select tag to pin it"
            )
        for n, ln in e.names:
            if n in drop:
                ed.drop(ln)
        _insert_names(ed, e, add)
        if e.mark_line is not None:
            m = _MARK_LINE.match(lines[e.mark_line])
            assert m is not None
            ed.repl[e.mark_line] = f"{m[1]}{MARK} {m[2]} ({count} names)"
    emptied = all(not current[e.index] and not added[e.index] for e in block.entries)
    generated = all(e.tagged for e in block.entries)
    if fresh:
        _add_entries(ed, block, fresh)
    elif block.tests_line is not None and block.entries and emptied and generated:
        ed.drop(block.tests_line)
    if not left and generated and (emptied or not block.entries):
        ed.drop(block.start, block.end)  # the file has no variant left
    checks = [
        (file, vid, todo[vid].mode if vid in todo else mode)
        for vid, mode in before.items()
        if vid not in removed
    ]
    return held, checks


def _patterns(names: Iterable[str]) -> list[Any]:
    from ootest.config.names import NamePattern, NameSyntaxError

    out = []
    for n in names:
        try:
            out.append(NamePattern.parse(n))
        except NameSyntaxError:
            continue
    return out


def _insert_names(ed: _Lines, e: _Entry, add: list[str]) -> None:
    """Insert ``add`` into the entry's names list, before the first name sorting
    after each (the generated lists are sorted)."""
    from ootest.select.writer import _q

    if not add:
        return
    first = ed.lines[e.names[0][1]]
    pad = first[: len(first) - len(first.lstrip())]
    for name in sorted(add):
        text = f"{pad}- {_q(name)}"
        nxt = next((ln for n, ln in e.names if n > name), None)
        if nxt is not None:
            ed.before[nxt].append(text)
        else:
            ed.after[e.names[-1][1]].append(text)


def _add_entries(
    ed: _Lines,
    block: _Block,
    fresh: Mapping[tuple[str, str], list[tuple[str, tuple[str, ...]]]],
) -> None:
    """New generated entries in a file block, where ``select run`` orders them."""
    if block.entries:
        shift = block.entries[0].dash_col - 8
    else:
        shift = block.key_col + 2 - 8
    for (mode, reason), members in sorted(
        fresh.items(), key=lambda kv: (MODES.index(kv[0][0]), kv[0][1])
    ):
        new = _indent(entry_lines(mode, reason, members), shift)
        key = (MODES.index(mode), reason)
        after = next(
            (
                e
                for e in block.entries
                if e.tagged
                and e.reason is not None
                and not e.reason.startswith("precision_edit:")
                and e.mode in MODES
                and (MODES.index(e.mode), e.reason) > key
            ),
            None,
        )
        if after is not None:
            ed.before[after.head] += new
        elif block.entries:
            ed.after[block.entries[-1].end - 1] += new
        else:
            tests = [" " * block.key_col + "tests:"]
            ed.after[block.end - 1] += tests + new


def _add_blocks(
    ed: _Lines,
    lines: list[str],
    blocks: list[_Block],
    files_line: int | None,
    new_blocks: Mapping[str, list[Placed]],
    root_var: str,
    tail: list[str],
) -> None:
    """Blocks for files the config does not list, in file-key order among the rest."""
    for file, placed in sorted(new_blocks.items()):
        path = f"${{{root_var}}}/{file}"
        body = render(placed, {file: path}, []).splitlines()[2:]  # without the two keys
        after = next((b for b in blocks if not b.glob and b.path > path), None)
        if after is not None:
            ed.before[after.start] += _indent(body, after.dash_col - 4)
        elif blocks:
            ed.after[blocks[-1].end - 1] += _indent(body, blocks[-1].dash_col - 4)
        elif files_line is not None:
            col = len(lines[files_line]) - len(lines[files_line].lstrip())
            if lines[files_line].rstrip().endswith("[]"):
                ed.repl[files_line] = " " * col + "files:"
            ed.after[files_line] += _indent(body, col + 2 - 4)
        else:
            tail += ["test_suite_config:", "  files:", *body]


def _check(text: str, checks: list[tuple[str, str, str]], root_var: str) -> None:
    """Every variant of a touched file resolves to the mode it must have."""
    from ootest.opmap.enable import variant_from_id

    if not checks:
        return
    lines = text.splitlines()
    blocks, _ = _parse(text, lines)
    matchers: dict[str, _Matcher | None] = {}
    for file, vid, mode in checks:
        if file not in matchers:
            block, _ = _block_for(blocks, file, root_var)
            matchers[file] = _Matcher(block) if block is not None else None
        m = matchers[file]
        got = m.mode(variant_from_id(vid)) if m is not None else "not listed"
        if got != mode:
            raise UserError(
                f"{file}: cannot express the new decision of {vid} ({mode}) without changing "
                f"entries people wrote (it would be {got}); decide it by hand, or run "
                "'ootest select run' without --since"
            )
