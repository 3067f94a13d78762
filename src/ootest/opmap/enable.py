"""Enabling an op: the config change, and the variants it unblocks.

The edit is a ruamel.yaml round trip of the one file that declares
``global.supported_ops`` (the config itself or a file it ``extends:``), so
comments, key order and quoting stay as they were; the new text is then
checked to differ from the old only inside that list. Anything else (a file
that mixes indentations, say) is refused with the line to add by hand,
rather than rewriting lines nobody asked to change.
"""

from __future__ import annotations

import difflib
import functools
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.config.paths import ExtendsRoots
from ootest.errors import UserError
from ootest.opmap.answers import Flags
from ootest.opmap.missing import blocked, rule_of
from ootest.opmap.names import OpName, SupportSet
from ootest.opmap.store import OpStore
from ootest.opmap.support import from_config

# ------------------------------------------------------------------ locating


def config_chain(
    path: Path, _stack: tuple[Path, ...] = (), _roots: ExtendsRoots | None = None
) -> list[Path]:
    """The config and every file it extends, in composition order (bases first);
    only files the loader would read (Note [Extends roots])."""
    roots = _roots or ExtendsRoots(path)
    data = _read(path)
    suite = data.get("test_suite_config") if isinstance(data, dict) else None
    ext: Any = suite.get("extends", []) if isinstance(suite, dict) else []
    out: list[Path] = []
    for e in [ext] if isinstance(ext, str) else list(ext or []):
        target = (path.parent / str(e)).resolve()
        if target in _stack or roots.refusal(path, target) or not target.is_file():
            continue  # the loader reports these; here they only end the walk
        out += config_chain(target, (*_stack, path.resolve()), roots)
    out.append(path)
    return out


def _read(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"{path}: expected a readable YAML config; {e}") from None


def declares_supported_ops(path: Path) -> bool:
    data = _read(path)
    suite = data.get("test_suite_config") if isinstance(data, dict) else None
    glob = suite.get("global") if isinstance(suite, dict) else None
    return isinstance(glob, dict) and "supported_ops" in glob


def declaring_files(config: Path) -> list[Path]:
    """Files of the chain that declare ``supported_ops``, nearest first (the
    config itself, then what it extends, last-extended first)."""
    return [p for p in reversed(config_chain(config)) if declares_supported_ops(p)]


# ------------------------------------------------------------------ editing


@dataclass(frozen=True)
class ConfigEdit:
    path: Path
    old: str
    new: str
    line: str  # the list item added, as written

    @property
    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.old.splitlines(True),
                self.new.splitlines(True),
                f"a/{self.path}",
                f"b/{self.path}",
            )
        )

    def write(self) -> None:
        from ootest.atomic import write_output

        write_output(self.path, self.new, "ops enable --write")


def config_name(op: OpName) -> str:
    """How a rule is written in ``supported_ops``: without ``aten::``, as the
    config's other names are."""
    text = str(op)
    return text.removeprefix("aten::")


def add_supported_op(path: Path, name: str) -> ConfigEdit:
    """The text of ``path`` with ``name`` appended to ``global.supported_ops``."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.error import YAMLError

    old = path.read_text(encoding="utf-8")
    y = YAML()  # round trip
    y.preserve_quotes = True
    y.width = 1 << 16  # never re-wrap a long line
    y.brace_single_entry_mapping_in_flow_sequence = True  # keep [{name: x}] as written
    try:
        doc = y.load(old)
    except YAMLError as e:
        raise UserError(f"{path}: expected YAML; found a syntax error: {e}") from None
    suite = doc["test_suite_config"]
    glob = suite["global"]
    seq = glob["supported_ops"]
    key_line, key_col = glob.lc.key("supported_ops")
    if seq is None:
        seq = glob["supported_ops"] = CommentedSeq()
    if not isinstance(seq, CommentedSeq):
        raise UserError(
            f"{path}:{key_line + 1}: global.supported_ops: expected a list; "
            f"found {type(seq).__name__}"
        )
    item: Any = name
    if len(seq) and all(isinstance(x, dict) for x in seq) and not seq.fa.flow_style():
        item = CommentedMap([("name", name)])  # the list writes every item as {name: ...}
    seq.append(item)
    if len(seq) > 1 and not seq.fa.flow_style():
        dash_col = seq.lc.item(0)[1] - 2
        glob_col = suite.lc.key("global")[1]
        top_col = doc.lc.key("test_suite_config")[1]
        y.indent(
            mapping=max(glob_col - top_col, 2),
            sequence=max(seq.lc.item(0)[1] - key_col, 2),
            offset=max(dash_col - key_col, 0),
        )
    out = io.StringIO()
    y.dump(doc, out)
    new = out.getvalue()
    line = f"- name: {name}" if isinstance(item, dict) else f"- {name}"
    edit = ConfigEdit(path, old, new, line)
    _check_only_list_changed(edit, key_line, key_col)
    return edit


def _check_only_list_changed(edit: ConfigEdit, key_line: int, key_col: int) -> None:
    """Refuse an edit that changes lines outside the ``supported_ops`` list."""
    old_lines = edit.old.splitlines()
    end = key_line + 1  # first line after the list: less indented than its items
    while end < len(old_lines):
        text = old_lines[end]
        stripped = text.lstrip()
        if stripped and not stripped.startswith("#"):
            indent = len(text) - len(stripped)
            if indent < key_col or (indent == key_col and not stripped.startswith("-")):
                break
        end += 1
    sm = difflib.SequenceMatcher(a=old_lines, b=edit.new.splitlines(), autojunk=False)
    changed = [op for op in sm.get_opcodes() if op[0] != "equal"]
    ok = len(changed) == 1 and key_line <= changed[0][1] <= end and changed[0][2] <= end
    if changed and not ok:
        raise UserError(
            f"{edit.path}:{key_line + 1}: global.supported_ops: adding the op would also "
            "re-format other lines of the file (it mixes indentation styles); add this item "
            f"to the list by hand: {edit.line}"
        )


# ------------------------------------------------------------------ deciding


@dataclass(frozen=True)
class StillBlocked:
    variant_id: str
    missing: tuple[str, ...]  # rules still missing
    flags: Flags


@dataclass(frozen=True)
class Unblocked:
    variant_id: str
    flags: Flags


@dataclass(frozen=True)
class EntryNote:
    """A config entry that may be removable once the op is enabled."""

    origin: str
    what: str
    reason: str
    mentions_op: bool


@dataclass
class EnableReport:
    op: str  # the rule, as written into the config
    config: Path
    target: Path | None  # the file edited (None: nothing to change)
    edit: ConfigEdit | None
    already: str | None  # why nothing changes, if so
    covers: tuple[str, ...]  # recorded overloads the rule newly supports
    unblocked: list[Unblocked] = field(default_factory=list)
    still_blocked: list[StillBlocked] = field(default_factory=list)
    entries: list[EntryNote] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def enable(
    store: OpStore,
    config: str | os.PathLike[str],
    op: str,
    target: str | os.PathLike[str] | None = None,
) -> EnableReport:
    """What enabling ``op`` in ``config`` changes: the edit, and the variants
    it unblocks or leaves blocked (pure: nothing is written)."""
    cfg = Path(config)
    parsed = store.parse(op)
    name = config_name(parsed)
    before, notes = from_config(cfg)
    after = before.with_rule(str(parsed))
    ops = store.all_ops()
    newly = [(i, n) for i, n in ops if after.covers(n) and not before.covers(n)]
    rep = EnableReport(name, cfg, None, None, None, tuple(n for _, n in newly), notes=notes)
    if not newly:
        matching = [n for _, n in ops if SupportSet.from_names([str(parsed)], "").matches(n)]
        if not matching:
            # An op the op map never recorded (a typo, most often): one error with the
            # nearest recorded names, as every other op query says it, rather than a
            # diff that adds the typo and "0 variant(s) waited".
            try:
                store.resolve_ops(op)
            except UserError as e:
                raise UserError(
                    f"{e}; to list it in supported_ops anyway, add '- {name}' by hand"
                ) from None
        rep.already = (
            f"every recorded op {name} covers is already supported by {cfg}"
            if matching
            else f"no captured variant calls an op {name} covers ({store.path}); "
            "nothing the op map knows of changes"
        )
        if matching:
            return rep
    files = declaring_files(cfg)
    if target is not None:
        tp = Path(target)
        if tp.resolve() not in {f.resolve() for f in files}:
            listed = ", ".join(str(f) for f in files) or "none"
            raise UserError(
                f"--in {tp}: expected a file of {cfg}'s extends chain that declares "
                f"global.supported_ops ({listed}); found one that does not"
            )
        files = [tp]
    rep.target = files[0]
    rep.edit = add_supported_op(files[0], name)
    if len(files) > 1 and target is None:
        others = ", ".join(str(f) for f in files[1:])
        rep.notes.append(f"{others} also declare supported_ops; --in FILE to edit another")
    _classify(store, after, newly, rep)
    rep.entries = removable_entries(cfg, [u.variant_id for u in rep.unblocked], name)
    return rep


def _classify(
    store: OpStore, after: SupportSet, newly: list[tuple[int, str]], rep: EnableReport
) -> None:
    """Split the variants calling a newly supported op into unblocked and still blocked."""
    calling: set[int] = set()
    for arr in store.postings(i for i, _ in newly).values():
        calling.update(arr)
    remaining = blocked(store, after).sets(only=calling)
    info = store.variant_info(calling)
    rep.unblocked = sorted(
        (Unblocked(*info[v]) for v in calling if v not in remaining),
        key=lambda u: u.variant_id,
    )
    rep.still_blocked = sorted(
        (StillBlocked(info[v][0], tuple(sorted(r)), info[v][1]) for v, r in remaining.items()),
        key=lambda s: s.variant_id,
    )


def removable_entries(config: Path, variant_ids: list[str], op: str) -> list[EntryNote]:
    """Entries that skip or xfail an unblocked variant, and op exclusions naming
    ``op``: candidates to remove (reported, never edited: only a run can tell)."""
    from ootest.config.load import load_config
    from ootest.config.names import NamePattern, NameSyntaxError

    cfg = load_config(config, check_paths=False)
    variants = [v for v in map(variant_from_id, variant_ids) if v is not None]
    base = rule_of(f"aten::{op}") if "::" not in op else rule_of(op)
    out: list[EntryNote] = []
    for f in cfg.suite.files:
        mine = [v for v in variants if _file_matches(f.path, v.file)]
        for t in f.tests:
            reason = t.reason or t.description or ""
            if mine and t.mode != "mandatory_success":
                pats = []
                for n in t.names:
                    try:
                        pats.append(NamePattern.parse(n))
                    except NameSyntaxError:
                        continue
                hits = [v for v in mine if any(p.matches(v) for p in pats)]
                if hits:
                    out.append(
                        EntryNote(
                            t.origin,
                            f"{t.mode} {', '.join(t.names)} ({len(hits)} unblocked variant(s))",
                            reason,
                            _mentions(reason, base),
                        )
                    )
            excl = t.edits.ops.exclude if t.edits and t.edits.ops else []
            for ref in excl:
                if ref.name.partition(".")[0] in (op, base):
                    why = ref.reason or ref.description or ""
                    out.append(
                        EntryNote(
                            t.origin,
                            f"edits.ops.exclude {ref.name} of {', '.join(t.names)}",
                            why,
                            True,
                        )
                    )
    return out


def _mentions(text: str, op: str) -> bool:
    import re

    return re.search(rf"(?<![\w.]){re.escape(op)}(?![\w])", text) is not None


def _file_matches(template: str, key: str) -> bool:
    """Whether a ``files[].path`` (``${VAR}/...``, relative to its config, or a
    glob) names the file of a variant ID (its file key, Note [File keys])."""
    from fnmatch import fnmatchcase

    from ootest.config.paths import VAR

    parts = VAR.sub("", template).replace(os.sep, "/").split("/")
    return any(fnmatchcase(key, "/".join(parts[i:])) for i in range(len(parts)) if parts[i])


def variant_from_id(vid: str) -> Any:
    """A :class:`ootest.config.names.Variant` from a canonical variant ID, for
    matching config names (None when the ID does not have that shape)."""
    from ootest.config.names import Variant

    file, sep, rest = vid.partition("::")
    if not sep or not rest:
        return None
    body = ""
    if rest.endswith("]") and "[" in rest:
        rest, _, body = rest[:-1].partition("[")
    names = rest.split("::")
    op, dtypes, module, params = _axes(body)
    return Variant(
        file=file,
        cls=names[0] if len(names) > 1 else "",
        method=names[-1],
        op=op,
        dtypes=dtypes,
        module=module,
        params=params,
    )


@functools.lru_cache(maxsize=1 << 14)
def _axes(
    body: str,
) -> tuple[str | None, tuple[str, ...], str | None, tuple[tuple[str, str], ...]]:
    """(op, dtypes, module, other axes) of a variant ID's bracket; each bracket read
    once (thousands of variants share ``op=add,dtype=float32``)."""
    axes: dict[str, str] = {}
    key = ""
    for part in body.split(",") if body else []:
        k, eq, v = part.partition("=")
        if eq:
            key = k
            axes[key] = v
        elif key:
            axes[key] += "," + part  # several dtypes: dtype=float32,float64
    op = axes.pop("op", None)
    dtypes = tuple(axes.pop("dtype").split(",")) if "dtype" in axes else ()
    module = axes.pop("module", None)
    return op, dtypes, module, tuple(sorted(axes.items()))
