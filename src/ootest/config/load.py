"""Loading, validating, expanding and composing config files.

Every problem is reported as a :class:`~ootest.errors.Problem` with the file,
line and column, the key path, what was expected and what was found. All
problems of a file are collected before raising, so one run of
``ootest config validate`` lists them all.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ootest.config import paths
from ootest.config.model import (
    CASES_KEYS,
    MODES,
    CasesDocument,
    Document,
    FileEntry,
    GlobalCaps,
    Selectors,
    TestEntry,
    TestSuiteConfig,
)
from ootest.config.names import NamePattern, NameSyntaxError, Variant
from ootest.config.when import Context, holds
from ootest.errors import ConfigError, Problem

# libyaml's C loader when available: a 10,000-entry config loads in well under a second.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Loc = tuple[int | str, ...]

# Note [GC-light config]
# A config is loaded before torch is imported and stays alive while the test
# modules are: every full pass of the cyclic GC (a dozen while torch and op_db
# load) walks it again. So the structures kept per entry hold few container
# objects: names, tags and labels are tuples (a tuple of strings is untracked
# after one pass), NamePattern has slots (one object, not two), and the YAML
# node tree is dropped after loading. 10,000 entries: 90k tracked objects
# before, 67k now.

Candidate = tuple[int, NamePattern]  # (index of the entry in ResolvedFile.patterns, name)


@dataclass
class ResolvedFile:
    """One test file of the config after expansion (a glob gives several)."""

    path: Path
    entry: FileEntry
    patterns: list[tuple[TestEntry, tuple[NamePattern, ...]]]
    _index: dict[tuple[str, ...], list[Candidate]] | None = None
    _regexes: list[Candidate] = field(default_factory=list)
    _filtered: set[str] = field(default_factory=set)  # methods that have filtered names

    def candidates(self, v: Variant) -> list[Candidate]:
        """Names that may match ``v``, as (entry index, name).

        Names are indexed by method, and names with a variant filter also by their
        first filter, so a 10,000-entry config costs a few dict lookups per
        variant rather than 10,000 comparisons.
        """
        index = self._index
        if index is None:
            index = {}
            for i, (_, patterns) in enumerate(self.patterns):
                for p in patterns:
                    if p.kind in ("regex", "pattern"):
                        self._regexes.append((i, p))
                    elif p.filters:
                        key, value = p.filters[0]
                        index.setdefault((p.method or "", key, value), []).append((i, p))
                        self._filtered.add(p.method or "")
                    else:
                        index.setdefault((p.method or "",), []).append((i, p))
            self._index = index
        found: list[Candidate] = []
        for name in v.names:
            found += index.get((name,), ())
            if name in self._filtered:
                for key, value in v.index_keys():
                    found += index.get((name, key, value), ())
        return found + self._regexes if self._regexes else found


@dataclass
class Config:
    """A loaded, composed and expanded config: what the plugin and runner use."""

    source: Path
    suite: TestSuiteConfig
    files: list[ResolvedFile] = field(default_factory=list)
    relay: dict[str, Any] | None = None
    warnings: list[Problem] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)
    """Every config file read (this one and what it extends)."""
    resolved: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """(``files[].path`` as written, the files it named): what the plan cache re-checks."""

    def file_for(self, path: Path) -> ResolvedFile | None:
        key = _norm(path)
        for f in self.files:
            if _norm(f.path) == key:
                return f
        return None


_norm = paths.norm


# ----------------------------------------------------------------- positions
def _child(node: Any, part: int | str) -> tuple[Any, Any] | None:
    """(key node or None, value node) of ``part`` under a composed YAML node."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                return k, v
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return None, node.value[part]
    return None


def _position(root: Any, loc: Loc, *, key: bool = False) -> tuple[int, int]:
    """1-based (line, col) of the node at ``loc``; the deepest known node on failure."""
    node = root
    best = (1, 1)
    for part in loc:
        found = _child(node, part)
        if found is None:
            break
        knode, node = found
        use_key = knode is not None and (key or not isinstance(node, yaml.ScalarNode))
        mark = (knode if use_key else node).start_mark
        best = (mark.line + 1, mark.column + 1)
    return best


def _duplicate_keys(path: Path, node: Any, trail: Loc = ()) -> list[Problem]:
    """YAML loaders keep the last of two equal keys silently; we refuse them."""
    out: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            name = str(k.value)
            if name in seen:
                out.append(
                    Problem(
                        str(path),
                        k.start_mark.line + 1,
                        k.start_mark.column + 1,
                        _key_path((*trail, name)),
                        f"duplicate key {name!r} (first at line {seen[name]}); keep one",
                    )
                )
            else:
                seen[name] = k.start_mark.line + 1
            out += _duplicate_keys(path, v, (*trail, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out += _duplicate_keys(path, v, (*trail, i))
    return out


def _key_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --------------------------------------------------- schema walk for messages
def _model_at(loc: Loc, root: type[BaseModel] = Document) -> type[BaseModel] | None:
    """The pydantic model that owns the mapping at ``loc`` (for 'expected keys')."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        fld = next(
            (f for n, f in model.model_fields.items() if (f.alias or n) == part),
            None,
        )
        if fld is None:
            return None
        model = _unwrap(fld.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin in (list, typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
            if models:
                tp = models[0]
                continue
            lists = [a for a in args if typing.get_origin(a) is list]
            if lists:
                tp = lists[0]
                continue
            return args[0] if args else tp
        if origin is dict:
            return typing.get_args(tp)[1]
        return tp


def _yaml_type(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"a boolean ({v})"
    if isinstance(v, int | float):
        return f"a number ({v})"
    text = str(v)
    if len(text) > _EXCERPT:
        # never echo a whole file (extends: /etc/passwd): a short excerpt only
        return f"text of {len(text):,} characters starting {text[:_EXCERPT]!r}"
    return f"{v!r}"


_EXCERPT = 40  # characters of a found value an error message may quote


def _describe(err: Any, loc: Loc, root: type[BaseModel] = Document) -> str:
    typ = err["type"]
    found = err.get("input")
    if typ == "extra_forbidden":
        name = str(loc[-1])
        model = _model_at(loc[:-1], root)
        allowed = sorted((f.alias or n) for n, f in model.model_fields.items()) if model else []
        hint = difflib.get_close_matches(name, allowed, n=1)
        msg = f"unknown key {name!r}"
        if allowed:
            msg += f"; expected one of: {', '.join(allowed)}"
        if hint:
            msg += f". Did you mean {hint[0]!r}?"
        return msg
    if typ == "missing":
        return f"missing required key {loc[-1]!r}"
    if typ == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        msg = f"expected one of {expected}; found {_yaml_type(found)}"
        if isinstance(found, str):
            hint = difflib.get_close_matches(found, MODES, n=1)
            if hint:
                msg += f". Did you mean {hint[0]!r}?"
        return msg
    if typ in ("list_type", "tuple_type", "too_short"):
        if typ == "too_short":
            return f"expected a non-empty list; found {_yaml_type(found)}"
        return f"expected a list; found {_yaml_type(found)}"
    if typ in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping; found {_yaml_type(found)}"
    if typ == "string_type":
        return f"expected a string; found {_yaml_type(found)}"
    if typ in ("bool_type", "bool_parsing"):
        return f"expected true or false; found {_yaml_type(found)}"
    if typ in ("float_type", "float_parsing", "int_type", "int_parsing"):
        return f"expected a number; found {_yaml_type(found)}"
    if typ in ("greater_than", "greater_than_equal"):
        return f"expected a number {err['msg'].split('should be ', 1)[-1]}; found {found!r}"
    if typ == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']}; found {_yaml_type(found)}"


# ----------------------------------------------------------------- read YAML
def _read_yaml(path: Path) -> tuple[Any, Any]:
    """(data, composed node tree); the node tree gives every value's line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [Problem(str(path), 0, 0, "", "config file not found; check the path")]
        ) from None
    except OSError as e:
        raise ConfigError([Problem(str(path), 0, 0, "", f"cannot read: {e.strerror}")]) from None
    loader = _Loader(text)
    dups = False
    try:
        node = loader.get_single_node()
        try:
            data, dups = _construct(loader, node) if node is not None else (None, False)
        except _Unusual:  # merge keys, tags, complex keys: PyYAML's own constructor
            data, dups = loader.construct_document(node), True
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        what = (e.problem or "invalid YAML").strip()
        raise ConfigError(
            [Problem(str(path), line, col, "", f"YAML syntax error: {what}; fix the syntax")]
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(
            [
                Problem(
                    str(path),
                    1,
                    1,
                    "",
                    f"expected a mapping with key 'test_suite_config'; found {_yaml_type(data)}",
                )
            ]
        )
    if dups and (found := _duplicate_keys(path, node)):
        raise ConfigError(found)
    return data, node


_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"


class _Unusual(Exception):
    """A node the fast builder leaves to PyYAML's constructor."""


def _construct(loader: Any, root: Any) -> tuple[Any, bool]:
    """(data, whether some mapping repeats a key) of a composed document.

    The same values as ``loader.construct_document``, built by one tight walk:
    plain strings, lists and dicts (nearly all of a config) directly, other
    scalars (ints, bools, nulls, ...) by PyYAML's resolver-driven constructors.
    About three times faster on a 10,000-entry config. Anything unusual (merge
    keys, explicit tags, complex keys) raises :class:`_Unusual`.
    """
    memo: dict[int, Any] = {}  # aliases share their node: build each once
    dup = False
    scalar, sequence, mapping = yaml.ScalarNode, yaml.SequenceNode, yaml.MappingNode

    def build(node: Any) -> Any:
        nonlocal dup
        kind = node.__class__
        if kind is scalar:
            return node.value if node.tag == _STR else loader.construct_object(node, deep=True)
        done = memo.get(id(node))
        if done is not None:
            return done
        if kind is sequence and node.tag == _SEQ:
            items: list[Any] = []
            memo[id(node)] = items
            items.extend([build(v) for v in node.value])
            return items
        if kind is mapping and node.tag == _MAP:
            out: dict[Any, Any] = {}
            memo[id(node)] = out
            for k, v in node.value:
                if k.__class__ is not scalar or k.tag not in (_STR, _INT, _BOOL, _NULL):
                    raise _Unusual
                key = k.value if k.tag == _STR else loader.construct_object(k)
                if key in out:
                    dup = True
                out[key] = build(v)
            return out
        raise _Unusual

    return build(root), dup


_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"


def _problems(path: Path, node: Any, e: ValidationError, root: type[BaseModel]) -> list[Problem]:
    problems = []
    for err in e.errors():
        loc: Loc = tuple(err["loc"])
        # pydantic reports union members and 'function-before' steps in loc; drop them.
        loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
        line, col = _position(node, loc, key=err["type"] == "extra_forbidden")
        problems.append(Problem(str(path), line, col, _key_path(loc), _describe(err, loc, root)))
    return problems


def _validate(path: Path, data: Any, node: Any) -> Document:
    problems: list[Problem] = []
    cases: CasesDocument | None = None
    if "cases" in data:
        # Torch Spyre's model-case files: top-level model/default(s)/cases, checked on
        # their own; what else the file holds is a config as usual.
        try:
            cases = CasesDocument.model_validate({k: data[k] for k in CASES_KEYS if k in data})
        except ValidationError as e:
            problems += _problems(path, node, e, CasesDocument)
        data = {k: v for k, v in data.items() if k not in CASES_KEYS}
        if not data:
            data = {"test_suite_config": {}}
    try:
        doc = Document.model_validate(data)
    except ValidationError as e:
        problems += _problems(path, node, e, Document)
    if problems:
        raise ConfigError(problems) from None
    doc._cases = cases
    _attach_origins(path, node, doc)
    return doc


def _attach_origins(path: Path, node: Any, doc: Document) -> None:
    """Record ``file:line`` on every file, test entry and capability (for messages)."""

    def items(parent: Any, key: str) -> list[Any]:
        found = _child(parent, key) if parent is not None else None
        value = found[1] if found else None
        return list(value.value) if isinstance(value, yaml.SequenceNode) else []

    found = _child(node, "test_suite_config")
    top = found[1] if found else None
    suite = doc.test_suite_config

    def selectors(block: Selectors | None, parent: Any, key: str) -> None:
        found = _child(parent, key) if block is not None and parent is not None else None
        for side in ("include", "exclude"):
            nodes = items(found[1], side) if found else []
            for item, inode in zip(getattr(block, side, ()), nodes, strict=False):
                item._origin = f"{path}:{inode.start_mark.line + 1}"

    selectors(suite.test_selectors, top, "test_selectors")
    for f, fnode in zip(suite.files, items(top, "files"), strict=False):
        f._origin = f"{path}:{fnode.start_mark.line + 1}"
        for t, tnode in zip(f.tests, items(fnode, "tests"), strict=False):
            t._origin = f"{path}:{tnode.start_mark.line + 1}"
            selectors(t.selectors, tnode, "selectors")
            found = _child(tnode, "edits")
            enode = found[1] if found else None
            for axis in ("ops", "modules"):
                edit = getattr(t.edits, axis, None) if t.edits else None
                found = _child(enode, axis) if enode is not None else None
                if edit is None or found is None:
                    continue
                for ref, rnode in zip(edit.include, items(found[1], "include"), strict=False):
                    ref._origin = f"{path}:{rnode.start_mark.line + 1}"
    gfound = _child(top, "global") if top is not None else None
    gnode = gfound[1] if gfound else None
    g = suite.global_
    for key in ("supported_dtypes", "supported_ops", "supported_modules"):
        for ref, rnode in zip(getattr(g, key) or [], items(gnode, key), strict=False):
            ref._origin = f"{path}:{rnode.start_mark.line + 1}"


# --------------------------------------------------------------- composition
def _merge_named(base: list[Any] | None, child: list[Any] | None) -> list[Any] | None:
    if base is None:
        return child
    if child is None:
        return base
    merged = {ref.name: ref for ref in base}
    merged.update({ref.name: ref for ref in child})
    return list(merged.values())


def _compose(base: TestSuiteConfig, child: TestSuiteConfig) -> TestSuiteConfig:
    g = GlobalCaps(
        supported_dtypes=_merge_named(
            base.global_.supported_dtypes, child.global_.supported_dtypes
        ),
        supported_ops=_merge_named(base.global_.supported_ops, child.global_.supported_ops),
        supported_modules=_merge_named(
            base.global_.supported_modules, child.global_.supported_modules
        ),
        input_config=child.global_.input_config or base.global_.input_config,
    )
    return TestSuiteConfig(
        extends=[],
        device=child.device or base.device,
        labels=list(dict.fromkeys([*base.labels, *child.labels])),
        files=[*base.files, *child.files],
        **{"global": g},
        timeout=child.timeout if child.timeout is not None else base.timeout,
        test_selectors=child.test_selectors or base.test_selectors,
        op_map=child.op_map or base.op_map,
    )


def _load_doc(
    path: Path, stack: tuple[str, ...], sources: list[Path]
) -> tuple[TestSuiteConfig, Document, Any]:
    sources.append(path)
    data, node = _read_yaml(path)
    doc = _validate(path, data, node)
    suite = doc.test_suite_config
    # File paths are relative to the config that declares them.
    for f in suite.files:
        if not f.path.startswith("${") and not os.path.isabs(f.path):
            f.path = str(path.parent / f.path)
    if suite.op_map is not None and not os.path.isabs(suite.op_map):
        suite.op_map = str(path.parent / suite.op_map)
    composed: TestSuiteConfig | None = None
    for i, ext in enumerate(suite.extends):
        target = (path.parent / ext).resolve()
        if _norm(target) in stack:
            line, col = _position(node, ("test_suite_config", "extends", i))
            chain = " -> ".join([*stack, _norm(target)])
            raise ConfigError(
                [
                    Problem(
                        str(path),
                        line,
                        col,
                        f"test_suite_config.extends[{i}]",
                        f"circular extends: {chain}; remove one of the links",
                    )
                ]
            )
        if not target.is_file():
            line, col = _position(node, ("test_suite_config", "extends", i))
            raise ConfigError(
                [
                    Problem(
                        str(path),
                        line,
                        col,
                        f"test_suite_config.extends[{i}]",
                        f"expected an existing config file; found no file at {target}",
                    )
                ]
            )
        base, _, _ = _load_doc(target, (*stack, _norm(target)), sources)
        composed = base if composed is None else _compose(composed, base)
    if composed is not None:
        suite = _compose(composed, suite)
    return suite, doc, data


# Fields of model-derived entries that ootest accepts but does not apply: one note
# per field and config, however many entries use it (Note [Model call specs]).
_NOT_APPLIED = {
    "device_layout": "Torch Spyre's device layout of a tensor: accepted, not applied "
    "(ootest creates the declared shape, stride and storage offset)",
    "preset": "tensor presets: accepted, not applied",
    "init: file": "tensors loaded from files: accepted, not run (those variants are skipped)",
    "sample_inputs_func": "on a module entry: accepted, not used (a module entry's calls "
    "are its forward_inputs)",
    "tags": "tags of a declared call: the one naming it (<name>.<n>) is its variant's "
    "'entry' axis; the others (e.g. bf16operation) are kept as data, not made marks "
    "(select with the test entry's tags: -m tag__<tag>)",
}


def _model_notes(src: Path, suite: TestSuiteConfig, doc: Document) -> list[Problem]:
    """Notes on model-derived entries: fields accepted but not applied, and the
    devices their traces came from (mapped to the device under test)."""
    out: list[Problem] = []
    if doc.cases is not None:
        out.append(
            Problem(
                str(src),
                0,
                0,
                "cases",
                f"{len(doc.cases.cases)} model cases (Torch Spyre's model-case format): "
                "validated, not run; ootest runs model calls declared as edits.ops.include "
                "entries with sample_inputs_func (docs/model.md)",
            )
        )
    seen: dict[str, tuple[int, str, str]] = {}  # field -> (count, origin, key path)
    devices: dict[str, None] = {}

    def note(what: str, origin: str, key: str) -> None:
        n, first, path = seen.get(what, (0, origin, key))
        seen[what] = (n + 1, first, path)

    for i, f in enumerate(suite.files):
        for j, t in enumerate(f.tests):
            if t.edits is None:
                continue
            calls = []
            for k, op in enumerate(t.edits.ops.include if t.edits.ops else ()):
                if op.sample_inputs_func is not None:
                    where = f"files[{i}].tests[{j}].edits.ops.include[{k}]"
                    if any(not tag.startswith(op.name + ".") for tag in op.tags):
                        note("tags", op.origin or t.origin, f"{where}.tags")
                    where += ".sample_inputs_func"
                    calls.append((op.origin or t.origin, where, op.sample_inputs_func))
            for k, mod in enumerate(t.edits.modules.include if t.edits.modules else ()):
                where = f"files[{i}].tests[{j}].edits.modules.include[{k}]"
                origin = mod.origin or t.origin
                if mod.sample_inputs_func is not None:
                    note("sample_inputs_func", origin, f"{where}.sample_inputs_func")
                if mod.constructor_inputs is not None:
                    calls.append((origin, f"{where}.constructor_inputs", mod.constructor_inputs))
                for m, fwd in enumerate(mod.forward_inputs or ()):
                    calls.append((origin, f"{where}.forward_inputs[{m}]", fwd))
            for origin, where, call in calls:
                for item, arg in call.items():
                    specs = [("tensor", arg.tensor)] if arg.tensor is not None else []
                    specs += [(f"tensor_list[{n}]", x) for n, x in enumerate(arg.tensor_list or ())]
                    for name, spec in specs:
                        key = f"{where}.{item}.{name}"
                        if spec.device is not None:
                            devices[spec.device] = None
                        if spec.device_layout is not None:
                            note("device_layout", origin, f"{key}.device_layout")
                        if spec.preset is not None:
                            note("preset", origin, f"{key}.preset")
                        if spec.init == "file":
                            note("init: file", origin, f"{key}.init")
    for what, (n, origin, key) in seen.items():
        file, _, line = origin.rpartition(":")
        many = f" ({n} times; the first is here)" if n > 1 else ""
        out.append(Problem(file or str(src), int(line or 0), 0, key, _NOT_APPLIED[what] + many))
    if devices:
        out.append(
            Problem(
                str(src),
                0,
                0,
                "",
                f"model entries were recorded on {', '.join(devices)}: ootest creates their "
                "tensors on the device under test (and maps device arguments other than 'cpu' "
                "to it)",
            )
        )
    return out


def load_config(
    path: str | os.PathLike[str],
    *,
    env: dict[str, str] | None = None,
    check_paths: bool = True,
    ctx: Context | None = None,
) -> Config:
    """Load, validate, compose and expand a config file.

    Raises :class:`ConfigError` listing every problem found.
    """
    src = Path(path)
    sources: list[Path] = []
    suite, doc, _ = _load_doc(src, (_norm(src),), sources)
    environ = paths.environment(src, [f.path for f in suite.files], env)
    cfg = Config(source=src, suite=suite, relay=doc.relay, sources=sources)
    problems: list[Problem] = []
    if suite.global_.devices is not None:
        cfg.warnings.append(
            Problem(
                str(src),
                0,
                0,
                "global.devices",
                "accepted for Torch Spyre compatibility and not used: the device comes from "
                "'device:' or --ootest-device",
            )
        )
    cfg.warnings += _model_notes(src, suite, doc)
    for i, f in enumerate(suite.files):
        where = f.origin or f"{src}:0"
        fname, _, fline = where.rpartition(":")
        patterns: list[tuple[TestEntry, tuple[NamePattern, ...]]] = []
        for j, t in enumerate(f.tests):
            tfile, _, tline = (t.origin or where).rpartition(":")
            compiled = []
            for k, name in enumerate(t.names):
                try:
                    compiled.append(NamePattern.parse(name))
                except NameSyntaxError as e:
                    problems.append(
                        Problem(tfile, int(tline), 0, f"files[{i}].tests[{j}].names[{k}]", str(e))
                    )
            patterns.append((t, tuple(compiled)))
            if t.edits and t.edits.functions:
                cfg.warnings.append(
                    Problem(
                        tfile,
                        int(tline),
                        0,
                        f"files[{i}].tests[{j}].edits.functions",
                        "accepted for Torch Spyre compatibility and has no effect: "
                        "assertEqual already compares tensors across devices",
                    )
                )
        if not holds(f.when, ctx or Context.current()):
            cfg.warnings.append(
                Problem(fname, int(fline), 0, f"files[{i}]", "left out: its 'when:' does not hold")
            )
            continue
        text, missing = paths.expand(f.path, environ)
        for name in missing if check_paths else ():
            how = paths.HOW.get(name, f"export {name}=... or remove it from the path")
            if not paths.IDENT.match(name):
                msg = f"expected a variable name in ${{...}}; found {name!r}"
            else:
                msg = f"undefined variable ${{{name}}} in path {f.path!r}; {how}"
            problems.append(Problem(fname, int(fline), 0, f"files[{i}].path", msg))
        if missing:
            continue
        hits = paths.matches(text)
        if not hits and check_paths:
            if paths.is_glob(text):
                msg = f"expected the glob {text!r} to match test files; it matches none"
            else:
                msg = f"expected an existing test file; found nothing at {text}" + (
                    " (check ${TORCH_ROOT})" if "TORCH_ROOT" in f.path else ""
                )
            problems.append(Problem(fname, int(fline), 0, f"files[{i}].path", msg))
            continue
        if not hits and not paths.is_glob(text):
            hits = [text]  # not checked: kept as written
        cfg.resolved.append((f.path, tuple(hits)))
        for h in hits:
            cfg.files.append(ResolvedFile(Path(h), f, patterns))
    if problems:
        raise ConfigError(problems)
    return cfg
