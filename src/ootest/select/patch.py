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
  a generated block whose file has no variant left goes;
- a moved variant (Note [Moves]) that a person's entry decided by its exact or
  template name is named by its new name in that entry, or, moved to another
  file, by a copy of the entry (comment and mode) after that file's entries;
  the old name goes when nothing answers to it any more.

The result is checked before it is returned: every variant of a touched file
must resolve to its new mode (re-decided) or to the mode it had (the rest).

Why not ruamel.yaml's round trip (a dependency already)? Measured with
``bench/patch_roundtrip.py`` (2026-12-06, load 1.7 on 2 cores): with
``indent(mapping=2, sequence=4, offset=2)``, width 4096 and quotes preserved it
kept every line of Torch Spyre's three real configs, a real generated config (668
lines) and a synthetic generated one byte for byte, unchanged and after a one-line
edit; the guarantee holds. The speed does not: the 120,404-line synthetic config
(20,000 entries) took 18.2 s to load and 9.3 s to dump, 15x PyYAML's C composer
over the whole text (1.8 s), while ``--since`` on 250,000 variants takes 5.4 s in
all and composes only the touched blocks. So the line editor stays; ruamel.yaml
stays the writer of ``ops enable``'s small edits.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ootest.config.paths import VAR, is_glob
from ootest.errors import UserError
from ootest.select.rules import MODES, Decision
from ootest.select.writer import MARK, TAG, Placed, entry_lines, render, split_id, template_wide

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
    edits: _Lines
    held: list[str]  # re-decided variants a person's entry decides: unchanged
    unplaceable: list[str]  # files configured by a glob path: decide by hand
    notes: list[str] = field(default_factory=list)  # for review (a move a name cannot follow)

    def header(self, edit: Callable[[str], str]) -> None:
        """Pass each comment line above ``test_suite_config:`` through ``edit``; lines
        after a newline in what it returns are inserted after that line."""
        for i, line in enumerate(self.edits.lines):
            if _TOP.match(line):
                break
            if line.startswith("#"):
                new, *more = edit(line).split("\n")
                if new != line:
                    self.edits.repl[i] = new
                self.edits.after[i].extend(more)

    @property
    def text(self) -> str:
        return self.edits.text()

    def diff(self, a: str, b: str) -> str:
        return self.edits.diff(a, b)


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


_TOP = re.compile(r"^test_suite_config\s*:\s*(#.*)?$")
_TOP_M = re.compile(r"^test_suite_config[ \t]*:[ \t]*(#.*)?$", re.M)
_FILES = re.compile(r"^files\s*:\s*(#.*)?$")
_PATH = re.compile(r"^(\s*)(?:-\s+)?path\s*:\s*(.*)$")


def _lines(text: str) -> list[str]:
    """The text's lines, split at '\\n' only (as the positions are counted)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _split(text: str, lines: list[str]) -> tuple[int | None, list[tuple[int, int]]]:
    """(the line of ``files:``, each files item's (first, one past last) line), read
    from the indentation alone (regular expressions over the text): a config of
    100,000 lines is not composed whole, only the blocks a change touches
    (:func:`_block`). A layout this reading does not expect is read by composing
    the whole document instead."""
    top = _TOP_M.search(text)
    if top is None:
        return _split_composed(lines)
    first_line = text.count("\n", 0, top.start()) + 1
    child: int | None = None
    files: int | None = None
    for i in range(first_line, len(lines)):
        s = lines[i].strip()
        if not s or s.startswith("#"):
            continue
        ind = _indent_of(lines[i])
        if ind == 0:
            break
        child = ind if child is None else child
        if ind == child and _FILES.match(s):
            files = i
            break
    if files is None or child is None:
        return _split_composed(lines)
    dash: int | None = None
    for j in range(files + 1, len(lines)):
        s = lines[j].strip()
        if s and not s.startswith("#"):
            if (s == "-" or s.startswith("- ")) and _indent_of(lines[j]) >= child:
                dash = _indent_of(lines[j])
            break
    if dash is None:
        return files, []
    pos = 0
    for _ in range(files + 1):  # the offset of the line after files:
        pos = text.find("\n", pos) + 1
        if pos == 0:
            return files, []
    # Note: every pattern starts with the newline before its line, not '^' with
    # re.M: a literal first character lets the regex engine skip to the next newline
    # in C, where '^' is tried at every offset of 8 MB (0.08 s a search)
    stop = _stop(dash).search(text, pos - 1)
    endpos = stop.start() + 1 if stop is not None else len(text)
    firsts: list[int] = []
    line, at = files + 1, pos  # line number of offset ``at``
    for m in _item(dash).finditer(text, pos - 1, endpos):
        line += text.count("\n", at, m.start() + 1)
        at = m.start() + 1
        firsts.append(line)
    last = line + text.count("\n", at, endpos) if stop is not None else len(lines)
    items = []
    for k, a in enumerate(firsts):
        b = firsts[k + 1] if k + 1 < len(firsts) else last
        while b > a + 1 and (not lines[b - 1].strip() or lines[b - 1].strip().startswith("#")):
            b -= 1
        items.append((a, b))
    return files, items


@functools.lru_cache(maxsize=8)
def _stop(dash: int) -> re.Pattern[str]:
    """The first line after the files items: indented at most ``dash``, not an item."""
    return re.compile(rf"\n(?! {{{dash}}}-(?: |$)) {{0,{dash}}}[^ \n#]", re.M)


@functools.lru_cache(maxsize=8)
def _item(dash: int) -> re.Pattern[str]:
    """The first line of a files item (its '-' in column ``dash``)."""
    return re.compile(rf"\n {{{dash}}}-(?: |$)", re.M)


def _split_composed(lines: list[str]) -> tuple[int | None, list[tuple[int, int]]]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose("\n".join(lines), Loader=loader)
    except yaml.YAMLError as e:
        raise UserError(f"expected a YAML config; found a syntax error: {e}") from None
    suite = _get(root, "test_suite_config") if isinstance(root, yaml.MappingNode) else None
    if suite is None or not isinstance(suite[1], yaml.MappingNode):
        raise UserError("expected a mapping with key 'test_suite_config' (a selected config)")
    files = _get(suite[1], "files")
    if files is None:
        return None, []
    if not isinstance(files[1], yaml.SequenceNode) or files[1].flow_style:
        return files[0].start_mark.line, []
    return files[0].start_mark.line, [
        (n.start_mark.line, _last_line(n) + 1) for n in files[1].value
    ]


def _path_of(lines: list[str], start: int, end: int) -> str | None:
    """The ``path:`` of the files item on lines [start, end), read without composing
    the block (which blocks a change touches is known before any is composed)."""
    import yaml

    first = lines[start].lstrip(" ")
    key_col = _indent_of(lines[start]) + len(first) - len(first.lstrip("- "))
    for i in range(start, end):
        m = _PATH.match(lines[i])
        if m is None or (i > start and _indent_of(lines[i]) != key_col):
            continue
        if i == start and not lines[i].lstrip(" ").startswith("-"):
            continue
        raw = m[2].strip()
        if raw[:1] not in ("'", '"', "!", "&", "*", "|", ">", "[", "{"):
            plain = raw.split(" #", 1)[0].strip()  # a plain scalar, maybe a comment after it
            return plain or None
        try:
            value = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            return None
        return str(value) if value is not None else None
    return None


def _block(lines: list[str], start: int, end: int) -> _Block | None:
    """One files item, composed on its own (positions offset to the whole text)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose("\n".join(lines[start:end]), Loader=loader)
    except yaml.YAMLError as e:
        raise UserError(
            f"line {start + 1}: expected a files item of a YAML config; found a syntax error: {e}"
        ) from None
    if not isinstance(root, yaml.SequenceNode) or len(root.value) != 1:
        return None
    fnode = root.value[0]
    if not isinstance(fnode, yaml.MappingNode) or fnode.flow_style:
        return None
    path = _get(fnode, "path")
    if path is None or not isinstance(path[1], yaml.ScalarNode):
        return None

    def at(node: Any) -> int:
        return start + int(node.start_mark.line)

    un = _get(fnode, "unlisted_test_mode")
    first = at(fnode)
    b = _Block(
        str(path[1].value),
        first,
        start + _last_line(fnode) + 1,
        _dash_col(lines[first], fnode.start_mark.column),
        fnode.start_mark.column,
        str(un[1].value) if un is not None else "skip",
        None,
        glob=is_glob(str(path[1].value)),
    )
    for ln in range(first, b.end):
        if _SUMMARY.match(lines[ln]):
            b.summary_line = ln
            break
    tests = _get(fnode, "tests")
    if tests is None:
        return b
    b.tests_line = at(tests[0])
    prev_end = b.tests_line + 1
    items = tests[1].value if isinstance(tests[1], yaml.SequenceNode) else []
    for i, enode in enumerate(items):
        if not isinstance(enode, yaml.MappingNode):
            continue
        e_start = at(enode)
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
                    names.append((str(n.value), at(n)))
                    plain = plain and _last_line(n) == n.start_mark.line
        elif names_node is not None and isinstance(names_node[1], yaml.ScalarNode):
            names.append((str(names_node[1].value), at(names_node[1])))
            plain = False
        reason, mark_line = None, None
        for ln in range(head, e_start):
            m = _MARK_LINE.match(lines[ln])
            if m:
                reason, mark_line = m[2], ln
        end_line = start + _last_line(enode) + 1
        b.entries.append(
            _Entry(
                i,
                head,
                e_start,
                end_line,
                _dash_col(lines[e_start], enode.start_mark.column),
                TAG in tag_values,
                str(mode[1].value) if mode is not None else "mandatory_success",
                plain,
                names,
                reason,
                mark_line,
            )
        )
        prev_end = end_line
    return b


class _Config:
    """A config's text split into files items; items composed when first asked for."""

    def __init__(self, text: str) -> None:
        self.lines = _lines(text)
        self.files_line, self.items = _split(text, self.lines)
        self.paths = [_path_of(self.lines, a, b) for a, b in self.items]
        self._blocks: dict[int, _Block | None] = {}
        self._index: dict[str, list[int]] | None = None
        self._globs: list[int] = []

    def block(self, k: int) -> _Block | None:
        if k not in self._blocks:
            self._blocks[k] = _block(self.lines, *self.items[k])
        return self._blocks[k]

    def block_for(self, file: str, root_var: str) -> tuple[_Block | None, bool]:
        """The block listing ``file`` (its exact path first), and whether a glob path
        lists it instead (then nothing is placed: a name there would reach other files)."""
        from ootest.opmap.enable import _file_matches

        if self._index is None:  # file key -> the items whose path may name it
            self._index = defaultdict(list)
            for k, p in enumerate(self.paths):
                if p is None:
                    continue
                if is_glob(p):
                    self._globs.append(k)
                    continue
                parts = VAR.sub("", p).replace(os.sep, "/").split("/")
                for i in range(len(parts)):
                    if parts[i]:
                        self._index["/".join(parts[i:])].append(k)
        exact = sorted(
            set(self._index.get(file, ())), key=lambda k: self.paths[k] != f"${{{root_var}}}/{file}"
        )
        for k in exact:
            b = self.block(k)
            if b is not None:
                return b, False
        globbed = any(_file_matches(self.paths[k] or "", file) for k in self._globs)
        return None, globbed


class _Matcher:
    """Which entry of a block decides a variant, as ``config.decide.match_entry``
    picks it: the most specific matching name, the later entry on a tie (``when:``
    conditions count as holding). ``names`` replaces some entries' names (an edit
    under way). Names are indexed as ``ResolvedFile.candidates`` indexes them (by
    method, and by method and first variant filter): each variant is checked
    against a handful of names, not all."""

    def __init__(self, block: _Block, names: Mapping[int, Collection[str]] | None = None) -> None:
        self.block = block
        self.index: dict[tuple[str, ...], list[tuple[Any, _Entry]]] = defaultdict(list)
        self.filtered: set[str] = set()
        self.loose: list[tuple[Any, _Entry]] = []
        for e in block.entries:
            listed = names[e.index] if names is not None and e.index in names else None
            for p in _patterns(listed if listed is not None else [n for n, _ in e.names]):
                if p.kind not in ("exact", "bare"):
                    self.loose.append((p, e))
                elif p.filters:
                    key, value = p.filters[0]
                    self.index[(p.method, key, value)].append((p, e))
                    self.filtered.add(p.method)
                else:
                    self.index[(p.method,)].append((p, e))

    def winner(self, v: Any) -> tuple[_Entry | None, int]:
        """(the deciding entry or None, the specificity of its name; -1: none)."""
        found = [*self.index.get((v.method,), ()), *self.loose]
        if v.method in self.filtered:
            for key, value in v.index_keys():
                found += self.index.get((v.method, key, value), ())
        best: tuple[int, int] | None = None
        chosen: _Entry | None = None
        for p, e in found:
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
    or after one, append at the end; applied at once so indices never shift."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.repl: dict[int, str | None] = {}
        self.before: dict[int, list[str]] = defaultdict(list)
        self.after: dict[int, list[str]] = defaultdict(list)
        self.tail: list[str] = []

    def drop(self, start: int, end: int | None = None) -> None:
        for i in range(start, start + 1 if end is None else end):
            self.repl[i] = None

    def _at(self, i: int) -> list[tuple[str, str]]:
        """(' ' kept | '-' gone | '+' new, line) of original line ``i`` (``len(lines)``:
        the tail)."""
        if i == len(self.lines):
            return [("+", x) for x in self.tail]
        line = self.lines[i]
        ops = [("+", x) for x in self.before.get(i, ())]
        if i in self.repl:
            r = self.repl[i]
            if r == line:
                ops.append((" ", line))
            else:
                ops.append(("-", line))
                if r is not None:
                    ops.append(("+", r))
        else:
            ops.append((" ", line))
        ops += [("+", x) for x in self.after.get(i, ())]
        return ops

    def _edited(self) -> list[int]:
        idx = {i for i, r in self.repl.items() if r != self.lines[i]}
        idx |= {i for i, xs in self.before.items() if xs} | {
            i for i, xs in self.after.items() if xs
        }
        if self.tail:
            idx.add(len(self.lines))
        return sorted(idx)

    def text(self) -> str:
        """The edited text; untouched stretches are copied as they are."""
        out: list[str] = []
        prev = 0
        for i in self._edited():
            out += self.lines[prev:i]
            out += [x for op, x in self._at(i) if op != "-"]
            prev = i + 1
        out += self.lines[prev:]
        return "\n".join(out) + "\n" if out else ""

    def diff(self, a: str, b: str, context: int = 3) -> str:
        """The edits as a unified diff (what ``diff -u`` prints), built from the
        edits themselves: no comparison of two large texts, no walk over the lines
        no edit touches."""
        edited = self._edited()
        if not edited:
            return ""
        n = len(self.lines)
        clusters: list[list[int]] = []  # [first line, one past last line, edits...]
        for i in edited:
            line_changed = i < n and i in self.repl and self.repl[i] != self.lines[i]
            starts_before = line_changed or bool(self.before.get(i)) or i == n
            ends_after = line_changed or bool(self.after.get(i)) or i == n
            lo = max(0, i - context + (0 if starts_before else 1))
            hi = min(n, i + context + (1 if ends_after else 0))
            if clusters and lo <= clusters[-1][1]:
                clusters[-1][1] = max(clusters[-1][1], hi)
                clusters[-1].append(i)
            else:
                clusters.append([lo, hi, i])
        out = [f"--- {a}\n", f"+++ {b}\n"]
        shift = 0  # new line number - old line number, before the cluster
        for lo, hi, *idx in clusters:
            mine = set(idx)
            ops: list[tuple[str, str]] = []
            run: list[tuple[str, str]] = []  # a run of changes: its removals first
            for j in [*range(lo, hi), *([n] if n in mine else [])]:
                for item in self._at(j) if j in mine else [(" ", self.lines[j])]:
                    if item[0] == " ":
                        ops += [x for x in run if x[0] == "-"] + [x for x in run if x[0] == "+"]
                        run = []
                        ops.append(item)
                    else:
                        run.append(item)
            ops += [x for x in run if x[0] == "-"] + [x for x in run if x[0] == "+"]
            o_len = sum(op != "+" for op, _ in ops)
            n_len = sum(op != "-" for op, _ in ops)
            o_start = lo + (1 if o_len else 0)
            n_start = lo + shift + (1 if n_len else 0)
            out.append(f"@@ -{_range(o_start, o_len)} +{_range(n_start, n_len)} @@\n")
            out += [f"{op}{x}\n" for op, x in ops]
            shift += n_len - o_len
        return "".join(out)


def _range(start: int, length: int) -> str:
    return str(start) if length == 1 else f"{start},{length}"


def _indent(lines: list[str], by: int) -> list[str]:
    if by >= 0:
        return [" " * by + x if x.strip() else x for x in lines]
    return [x[min(-by, len(x) - len(x.lstrip(" "))) :] for x in lines]


def patch(
    text: str,
    changes: Mapping[str, Decision],
    removed: Collection[str],
    universe: Mapping[str, Collection[str]],
    modes: Callable[[str, Collection[str]], Counter[str]] | None,
    root_var: str,
    renames: Mapping[str, str] | None = None,
    evidence: Callable[[list[str]], Mapping[str, tuple[str, ...]]] | None = None,
) -> Patched:
    """The config ``text`` with ``changes`` (variant ID -> its new decision) placed
    and ``removed`` variants' names dropped (Note [Config patches]). ``universe``
    maps each file key to every variant ID it has now; ``modes(file, held)`` counts
    the file's decisions after the change, the held variants' kept (for the summary
    comment of each touched block). ``renames`` maps a moved variant's old ID (in
    ``removed``) to its new one (in ``changes``): a person's entry naming the old
    follows it (Note [Moves]). ``evidence(vids)`` gives the decision evidence of
    kept variants, for the comment of an entry whose names change."""
    cfg = _Config(text)
    lines = cfg.lines
    ed = _Lines(lines)
    by_file: dict[str, list[str]] = defaultdict(list)
    for vid in [*changes, *removed]:
        by_file[vid.partition("::")[0]].append(vid)
    held: list[str] = []
    unplaceable: list[str] = []
    notes: list[str] = []
    checks: list[tuple[str, str, str]] = []  # (file, variant, mode it must resolve to)
    new_blocks: dict[str, list[Placed]] = {}
    variants: dict[str, Any] = {}
    resolved: dict[str, tuple[_Block, dict[str, str]]] = {}  # file -> its modes before
    # a person's entry follows its moved variants first (Note [Moves]): in place, or
    # copied into the block of the file they moved to, before any block is matched
    copies: dict[str, list[_Copy]] = defaultdict(list)

    def placeable(target: str) -> bool:
        """A copy can go to ``target``'s block: after its entries, or in a new block."""
        there, globbed = cfg.block_for(target, root_var)
        return bool(there.entries) if there is not None else not globbed

    for file in sorted(by_file):
        block, _ = cfg.block_for(file, root_var)
        if block is not None and renames:
            more, out = _follow_moves(ed, block, file, renames, universe, variants, placeable)
            notes += more
            for cp in out:
                copies[cp.file].append(cp)
    new_copies: dict[str, list[_Copy]] = {}
    counted: dict[str, Counter[str]] = {}  # a new block's held variants, by mode
    for file in sorted(by_file):
        block, globbed = cfg.block_for(file, root_var)
        if block is None:
            if globbed:
                unplaceable.append(file)
                continue
            placed = []
            moved_in = {cp.new: cp for cp in copies.pop(file, [])}
            for vid in sorted(v for v in by_file[file] if v in changes):
                f, template, axes = split_id(vid)
                if vid in moved_in:  # a person's entry came with it
                    held.append(vid)
                    checks.append((file, vid, moved_in[vid].mode))
                    continue
                placed.append(Placed(changes[vid], f, template, axes))
                checks.append((file, vid, changes[vid].mode))
            if placed or moved_in:
                new_blocks[file] = placed
                new_copies[file] = list(moved_in.values())
                counted[file] = Counter(changes[v].mode for v in moved_in if v in changes)
            continue
        _place_copies(ed, block, copies.pop(file, []))
        h, c, modes_before = _patch_block(
            ed, block, file, by_file[file], changes, removed, universe, variants, evidence
        )
        held += h
        checks += c
        resolved[file] = (block, modes_before)
        dropped = block.summary_line in ed.repl and ed.repl[block.summary_line] is None
        if block.summary_line is not None and modes is not None and not dropped:
            count = modes(file, h)
            m = _SUMMARY.match(lines[block.summary_line])
            assert m is not None
            summary = ", ".join(f"{count[x]} {x}" for x in MODES if count[x])
            ed.repl[block.summary_line] = f"{m[1]}# {sum(count.values())} variants: {summary}"
    if new_blocks:
        _add_blocks(ed, cfg, new_blocks, root_var, new_copies, counted)
    settled: dict[str, dict[str, str]] = {}
    if not new_blocks:
        # Note: a block whose lines no edit touches resolves every variant as it did
        # before the change (the modes are known), and with no block added, the new
        # text lists each file in the block it did: only edited blocks are composed
        # again for the check
        edited = ed._edited()
        for file, (block, modes_before) in resolved.items():
            k = bisect.bisect_left(edited, block.start)
            if k == len(edited) or edited[k] >= block.end:
                settled[file] = modes_before
    _check(ed, checks, root_var, variants, settled)
    return Patched(ed, sorted(held), sorted(unplaceable), notes)


@dataclass(frozen=True)
class _Copy:
    """A person's entry, for a variant that moved to another file (Note [Moves])."""

    old: str
    new: str
    file: str  # where it moved
    name: str  # its name there
    mode: str
    comments: tuple[str, ...]  # the comment lines above the person's entry
    source: str  # the file key it moved from


def _follow_moves(
    ed: _Lines,
    block: _Block,
    file: str,
    renames: Mapping[str, str],
    universe: Mapping[str, Collection[str]],
    variants: dict[str, Any],
    placeable: Callable[[str], bool],
) -> tuple[list[str], list[_Copy]]:
    """A person's entry that decided a moved variant by its exact or template name
    names it by its new name (Note [Moves]): in place within one file; for a move
    to another file, a copy of the entry (its comment, its mode) goes to that
    file's block (returned, placed by :func:`_place_copies`). The old name goes
    when nothing of this file answers to it any more, an entry left without names
    with it. What a name cannot follow (a pattern, an entry with keys beyond
    names, mode and tags) is returned for review."""
    from ootest.opmap.enable import variant_from_id
    from ootest.select.writer import _q

    moved = sorted(o for o in renames if o.partition("::")[0] == file)
    if not moved:
        return [], []
    notes: list[str] = []
    copies: list[_Copy] = []
    away: dict[int, set[str]] = defaultdict(set)  # entry -> names whose variants left
    left = set(universe.get(file, ()))
    of_template = {split_id(v)[1] for v in left}
    matcher = _Matcher(block)
    add: dict[int, dict[str, str]] = defaultdict(dict)  # entry -> old name -> new name
    for old in moved:
        new = renames[old]
        if old not in variants:
            variants[old] = variant_from_id(old)
        if variants[old] is None:
            continue
        e, _ = matcher.winner(variants[old])
        if e is None or e.tagged:
            continue
        exact, template = _name(old), split_id(old)[1]
        named = [n for n, _ in e.names if n in (exact, template)]
        there = new.partition("::")[0]
        if not named or (there != file and not (e.plain and placeable(there))):
            why = (
                "by a pattern"
                if not named
                else "with keys beyond names and mode"
                if not e.plain
                else f"and {there} is listed by a glob or has no entries"
            )
            notes.append(
                f"  {old} -> {new}: a person's entry (line {e.start + 1}) decides it "
                f"{why}; its decision there is the generated one: review it"
            )
            continue
        if there != file:
            head = tuple(ed.lines[i].strip() for i in range(e.head, e.start))
            copies.append(_Copy(old, new, there, _name(new), e.mode, head, file))
            away[e.index].update(named)
            continue
        for n in named:
            add[e.index][n] = _name(new) if n == exact else split_id(new)[1]
    for e in block.entries:
        if away.get(e.index):
            gone = [
                (n, line)
                for n, line in e.names
                if n in away[e.index]
                and not (n in of_template if "[" not in n else f"{file}::{n}" in left)
            ]
            if len(gone) == len(e.names):
                ed.drop(e.head, e.end)  # every name it had moved away: it moved
                e.names.clear()
                continue
            for n, line in gone:
                ed.drop(line)
                e.names.remove((n, line))
        renamed = add.get(e.index)
        if not renamed:
            continue
        have = {n for n, _ in e.names}
        for n, line in list(e.names):
            new_name = renamed.get(n)
            if new_name is None:
                continue
            raw = ed.lines[line]
            if not raw.lstrip().startswith("- "):  # not a block list item: left alone
                notes.append(f"  line {line + 1}: name {n!r} moved to {new_name!r}: rename it")
                continue
            pad = raw[: len(raw) - len(raw.lstrip())]
            if new_name not in have:
                ed.after[line].append(f"{pad}- {_q(new_name)}")
                e.names.append((new_name, line))
                have.add(new_name)
            still = n in of_template if "[" not in n else f"{file}::{n}" in left
            if not still:
                ed.drop(line)
                e.names.remove((n, line))
    return notes, copies


def _copy_entries(copies: list[_Copy], col: int) -> list[tuple[list[str], str, list[str]]]:
    """(lines, mode, names) of the entries copying people's entries for variants that
    moved here, one per source entry and mode, their dash in column ``col``."""
    from ootest.select.writer import _q

    pad = " " * col
    groups: dict[tuple[str, str, tuple[str, ...]], set[str]] = defaultdict(set)
    for c in copies:
        groups[(c.source, c.mode, c.comments)].add(c.name)
    out = []
    for (source, mode, comments), names in sorted(groups.items()):
        lines = [f"{pad}# moved here from {source} with a person's entry there"]
        lines += [f"{pad}{x}" for x in comments]
        lines.append(f"{pad}- names:")
        lines += [f"{pad}    - {_q(n)}" for n in sorted(names)]
        lines.append(f"{pad}  mode: {mode}")
        out.append((lines, mode, sorted(names)))
    return out


def _place_copies(ed: _Lines, block: _Block, copies: list[_Copy]) -> None:
    """The copies of people's entries whose variants moved to this block's file,
    after its last entry (later entries win ties, Note [Moves]); the block's entries
    learn them before it is matched. A block without entries gets no copy: its
    variants keep the generated decision and the run lists them."""
    if not copies or not block.entries:
        return
    last = block.entries[-1]
    anchor = last.end - 1
    for lines, mode, names in _copy_entries(copies, last.dash_col):
        ed.after[anchor].extend(lines)
        block.entries.append(
            _Entry(
                len(block.entries),
                anchor,
                anchor,
                anchor + 1,
                last.dash_col,
                False,
                mode,
                True,
                [(n, anchor) for n in names],
                None,
                None,
            )
        )


def _patch_block(
    ed: _Lines,
    block: _Block,
    file: str,
    touched: list[str],
    changes: Mapping[str, Decision],
    removed: Collection[str],
    universe: Mapping[str, Collection[str]],
    variants: dict[str, Any],
    evidence: Callable[[list[str]], Mapping[str, tuple[str, ...]]] | None = None,
) -> tuple[list[str], list[tuple[str, str, str]], dict[str, str]]:
    """The edits of one file block; (held variants, checks, each variant's mode
    before the edits). ``variants`` caches the config-name view of each variant ID
    (filled here). Each variant is matched against the block's names once; again
    only when its deciding entry lost a name."""
    from ootest.opmap.enable import variant_from_id

    left = set(universe.get(file, ()))
    for key in {*left, *touched}:
        if key not in variants:
            variants[key] = variant_from_id(key)
    original = _Matcher(block)
    first = {k: original.winner(variants[k]) for k in {*left, *touched} if variants[k] is not None}
    before = {k: (e.mode if e is not None else block.unlisted) for k, (e, _) in first.items()}
    names = {e.index: [n for n, _ in e.names] for e in block.entries}
    where: dict[str, list[int]] = defaultdict(list)  # name -> generated entries listing it
    for e in block.entries:
        if e.tagged:
            for n in names[e.index]:
                where[n].append(e.index)
    of_template: dict[str, list[str]] = defaultdict(list)
    for key in left:
        of_template[split_id(key)[1]].append(key)
    gone: dict[int, set[str]] = defaultdict(set)
    todo: dict[str, Decision] = {}
    held: list[str] = []
    for vid in sorted(touched):
        if vid not in first:
            continue
        winner, _ = first[vid]
        if winner is not None and not winner.tagged and vid in changes:
            held.append(vid)
            continue
        # a removed variant leaves the generated entries whoever decided it
        exact_name, template = _name(vid), split_id(vid)[1]
        for i in where.get(exact_name, ()):
            gone[i].add(exact_name)
        if vid in removed and template not in of_template:
            for i in where.get(template, ()):
                gone[i].add(template)
        if vid in changes:
            todo[vid] = changes[vid]
    current = {i: [n for n in ns if n not in gone[i]] for i, ns in names.items()}
    # an entry that keeps all its names still decides what it decided (the others
    # only lose names): only the variants an entry that lost a name decided are
    # matched again, against the names left
    lost = {i for i, ns in gone.items() if ns}
    now = _Matcher(block, current) if lost else original
    then: dict[str, tuple[_Entry | None, int]] = {}
    for vid in todo:
        was = first[vid]
        lost_one = was[0] is not None and was[0].index in lost
        then[vid] = now.winner(variants[vid]) if lost_one else was
    need: dict[str, Decision] = {}
    for vid, d in todo.items():
        hit = then[vid][0]
        if (hit.mode if hit is not None else block.unlisted) != d.mode:
            need[vid] = d
    # a whole template re-decided alike, named by nothing finer: name it once
    by_template: dict[str, list[str]] = defaultdict(list)
    for vid in need:
        by_template[split_id(vid)[1]].append(vid)
    units: list[tuple[str, Decision]] = []
    for template, vids in sorted(by_template.items()):
        every = sorted(of_template.get(template, ()))
        alike = len({(need[v].mode, need[v].reason) for v in vids}) == 1
        coarse = all(then[v][1] < 2 for v in vids)
        wide = template_wide(need[vids[0]].mode, need[vids[0]].reason)
        if len(vids) > 1 and sorted(vids) == every and alike and coarse and wide:
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
            m = _MARK_LINE.match(ed.lines[e.mark_line])
            assert m is not None
            ed.repl[e.mark_line] = f"{m[1]}{MARK} {m[2]} ({count} names)"
            listed = [n for n in names[e.index] if n not in drop] + add
            _rewrite_evidence(ed, e.mark_line, file, listed, of_template, changes, evidence)
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
    return held, checks, before


def _patterns(names: Iterable[str]) -> list[Any]:
    out = []
    for n in names:
        p = _pattern(n)
        if p is not None:
            out.append(p)
    return out


@functools.lru_cache(maxsize=1 << 16)
def _pattern(name: str) -> Any:
    """A config name compiled (None: not a valid name); each name once per run,
    however many times a block is matched."""
    from ootest.config.names import NamePattern, NameSyntaxError

    try:
        return NamePattern.parse(name)
    except NameSyntaxError:
        return None


def _rewrite_evidence(
    ed: _Lines,
    mark: int,
    file: str,
    names: list[str],
    of_template: Mapping[str, list[str]],
    changes: Mapping[str, Decision],
    evidence: Callable[[list[str]], Mapping[str, tuple[str, ...]]] | None,
) -> None:
    """The evidence comment under an entry's mark line, counted again over the names
    it lists now (as ``select run`` counts them: one evidence per name, a template's
    from its first variant), so no count describes names the entry no longer has."""
    from ootest.select.writer import evidence_comments

    if evidence is None:
        return
    rep = {n: f"{file}::{n}" if "[" in n else min(of_template.get(n, [""])) for n in names}
    kept = evidence([v for v in rep.values() if v and v not in changes])
    ev = [changes[v].evidence if v in changes else kept.get(v, ()) for v in rep.values() if v]
    pad = ed.lines[mark][: len(ed.lines[mark]) - len(ed.lines[mark].lstrip())]
    new = [pad + c for c in evidence_comments(ev)]
    end = mark + 1
    while end < len(ed.lines) and ed.lines[end].lstrip().startswith("#   "):
        end += 1
    if ed.lines[mark + 1 : end] == new:
        return
    ed.drop(mark + 1, end)
    ed.after[mark].extend(new)


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
    opened = False
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
                and not e.reason.startswith(("precision_edit:", "precision_proposal:"))
                and e.mode in MODES
                and (MODES.index(e.mode), e.reason) > key
            ),
            None,
        )
        if after is not None:
            ed.before[after.head] += new
        elif block.entries:
            ed.after[block.entries[-1].end - 1] += new
        else:  # a block without tests: gets the key once, before its first new entry
            if not opened:
                ed.after[block.end - 1].append(" " * block.key_col + "tests:")
                opened = True
            ed.after[block.end - 1] += new


def _add_blocks(
    ed: _Lines,
    cfg: _Config,
    new_blocks: Mapping[str, list[Placed]],
    root_var: str,
    copies: Mapping[str, list[_Copy]] | None = None,
    held: Mapping[str, Counter[str]] | None = None,
) -> None:
    """Blocks for files the config does not list, in path order among the rest;
    ``copies``: people's entries that came with variants moved there (Note
    [Moves]), after the generated ones; ``held``: the modes of those variants in
    the evidence, counted in the block's summary as a block's held variants are."""
    lines = cfg.lines
    for file, placed in sorted(new_blocks.items()):
        path = f"${{{root_var}}}/{file}"
        body = _new_block(path, placed, (copies or {}).get(file, []), (held or {}).get(file))
        after = next((k for k, p in enumerate(cfg.paths) if p is not None and p > path), None)
        if after is not None:
            start = cfg.items[after][0]
            ed.before[start] += _indent(body, _indent_of(lines[start]) - 4)
        elif cfg.items:
            start, end = cfg.items[-1]
            ed.after[end - 1] += _indent(body, _indent_of(lines[start]) - 4)
        elif cfg.files_line is not None:
            col = _indent_of(lines[cfg.files_line])
            if lines[cfg.files_line].rstrip().endswith("[]"):
                ed.repl[cfg.files_line] = " " * col + "files:"
            ed.after[cfg.files_line] += _indent(body, col + 2 - 4)
        else:
            ed.tail += ["test_suite_config:", "  files:", *body]


def _new_block(
    path: str, placed: list[Placed], copies: list[_Copy], held: Counter[str] | None
) -> list[str]:
    """A new file block as ``select run`` writes it, people's moved entries after."""
    from ootest.select.writer import UNLISTED, _q

    if placed:
        body = render(placed, {placed[0].file: path}, []).splitlines()[2:]  # no two keys
    else:
        body = [
            f"    - path: {path}",
            "      # 0 variants",
            f"      unlisted_test_mode: {UNLISTED}",
        ]
        body[0] = f"    - path: {_q(path)}"
    if held:
        count = Counter(p.decision.mode for p in placed) + held
        summary = ", ".join(f"{count[m]} {m}" for m in MODES if count[m])
        body[1] = f"      # {sum(count.values())} variants: {summary}"
    if copies:
        if "      tests:" not in body:
            body.append("      tests:")
        for lines, _, _ in _copy_entries(copies, 8):
            body += lines
    return body


def _check(
    ed: _Lines,
    checks: list[tuple[str, str, str]],
    root_var: str,
    variants: dict[str, Any],
    settled: Mapping[str, Mapping[str, str]],
) -> None:
    """Every variant of a touched file resolves to the mode it must have in the
    edited text: ``settled`` gives the modes of the files whose blocks no edit
    touched; the blocks of the rest are composed from the new text (only those)."""
    from ootest.opmap.enable import variant_from_id

    if not checks:
        return
    cfg: _Config | None = None
    matchers: dict[str, _Matcher | None] = {}
    for file, vid, mode in checks:
        known = settled.get(file)
        if known is not None:
            got = known[vid]
            if got == mode:
                continue
        else:
            if file not in matchers:
                if cfg is None:
                    cfg = _Config(ed.text())
                block, _ = cfg.block_for(file, root_var)
                matchers[file] = _Matcher(block) if block is not None else None
            m = matchers[file]
            v = variants.get(vid) or variant_from_id(vid)
            got = m.mode(v) if m is not None else "not listed"
        if got != mode:
            raise UserError(
                f"{file}: cannot express the new decision of {vid} ({mode}) without changing "
                f"entries people wrote (it would be {got}); decide it by hand, or run "
                "'ootest select run' without --since"
            )
