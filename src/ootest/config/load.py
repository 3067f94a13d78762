"""Loading, validating, expanding and composing config files.

Every problem is reported as a :class:`~ootest.errors.Problem` with the file,
line and column, the key path, what was expected and what was found. All
problems of a file are collected before raising, so one run of
``ootest config validate`` lists them all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import gc
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ootest.config import paths
from ootest.config.base import set_private
from ootest.config.model import (
    CASES_KEYS,
    MODES,
    CasesDocument,
    Document,
    GlobalCaps,
    Selectors,
    TestSuiteConfig,
)
from ootest.config.names import NamePattern, NameSyntaxError
from ootest.config.relay_policy import RelayPolicy, relay_var
from ootest.config.resolved import Config, ResolvedFile
from ootest.config.when import Context, holds
from ootest.config.yamlread import (
    Loc,
    Origins,
    Tree,
    config_limit,
    key_path,
    node_child,
    position,
    read_yaml,
    shape,
)
from ootest.errors import ConfigError, Problem

_norm = paths.norm


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
    if typ == "finite_number":
        return f"expected a finite number; found {found!r}"
    if typ in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"expected a number {err['msg'].split('should be ', 1)[-1]}; found {found!r}"
    if typ == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']}; found {_yaml_type(found)}"


def _problems(path: Path, node: Any, e: ValidationError, root: type[BaseModel]) -> list[Problem]:
    problems = []
    for err in e.errors():
        loc: Loc = tuple(err["loc"])
        # pydantic reports union members and 'function-before' steps in loc; drop them.
        loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
        line, col = position(node, loc, key=err["type"] == "extra_forbidden")
        problems.append(Problem(str(path), line, col, key_path(loc), _describe(err, loc, root)))
    return problems


def _expand_relay(
    path: Path, tree: Tree, data: Any, env: dict[str, str]
) -> tuple[list[Problem], dict[str, Any]]:
    """``${VAR}`` in the strings of ``relay:`` (and its lists), before validation:
    only the variables of Note [Relay variables]. Returns the problems and, for
    each field the environment gave, what was written."""
    relay = data.get("relay")
    if not isinstance(relay, dict):
        return [], {}
    problems: list[Problem] = []
    written: dict[str, Any] = {}

    def expand(value: Any, loc: Loc) -> Any:
        if isinstance(value, list):
            items = [expand(v, (*loc, i)) for i, v in enumerate(value)]
            # a list with an item left out is left out: only the variable is reported
            lost = any(x is None and v is not None for x, v in zip(items, value, strict=True))
            return None if lost else items
        if not isinstance(value, str) or "${" not in value:
            return value
        refused = [n for n in paths.VAR.findall(value) if paths.IDENT.match(n) and not relay_var(n)]
        text, missing = paths.expand(value, {k: v for k, v in env.items() if relay_var(k)})
        for name in missing:
            if not paths.IDENT.match(name):
                msg = f"expected a variable name in ${{...}}; found {name!r}"
            elif name in refused:
                msg = (
                    f"expected a variable meant for relay: (OOTEST_DEVICE or OOTEST_RELAY_*); "
                    f"found ${{{name}}}. Write the value, or export it under a name "
                    "starting OOTEST_RELAY_"
                )
            else:
                msg = f"undefined variable ${{{name}}}; export {name}=... or remove it"
            line, col = position(tree.node, loc)
            problems.append(Problem(str(path), line, col, key_path(loc), msg))
        if missing:
            return None  # left out when a variable is missing: only the variable is reported
        written[str(loc[1])] = relay[loc[1]]
        return text

    out = {k: expand(v, ("relay", k)) for k, v in relay.items()}
    data["relay"] = {k: v for k, v in out.items() if v is not None or relay[k] is None}
    return problems, written


def _hide_env(problems: list[Problem], written: dict[str, Any]) -> list[Problem]:
    """Problems of relay fields the environment gave, saying what was written
    instead of what was found (Note [Relay variables])."""
    out = []
    for p in problems:
        field = p.key_path.split(".")[1].split("[")[0] if p.key_path.startswith("relay.") else ""
        if field in written:
            head, sep, _ = p.message.partition("found ")
            if sep:
                p = dataclasses.replace(
                    p,
                    message=f"{head}found the value of {written[field]} (not shown: it comes "
                    "from the environment)",
                )
        out.append(p)
    return out


def _compile_names(
    path: Path, tree: Tree, suite: TestSuiteConfig
) -> tuple[dict[int, tuple[NamePattern, ...]], list[Problem]]:
    """Every test entry's names compiled (by ``id`` of the entry), and the problems
    with ``file:line:col`` and the full key path."""
    compiled: dict[int, tuple[NamePattern, ...]] = {}
    problems: list[Problem] = []
    parse = NamePattern.parse
    for i, f in enumerate(suite.files):
        for j, t in enumerate(f.tests):
            try:
                compiled[id(t)] = tuple([parse(name) for name in t.names])
                continue
            except NameSyntaxError:
                pass
            names = []
            for k, name in enumerate(t.names):
                try:
                    names.append(parse(name))
                except NameSyntaxError as e:
                    loc = ("test_suite_config", "files", i, "tests", j, "names", k)
                    line, col = position(tree.node, loc)
                    problems.append(Problem(str(path), line, col, key_path(loc), str(e)))
            compiled[id(t)] = tuple(names)
    return compiled, problems


def _validate(
    path: Path, data: Any, tree: Tree, env: dict[str, str] | None = None
) -> tuple[Document, dict[int, tuple[NamePattern, ...]]]:
    problems, from_env = _expand_relay(path, tree, data, dict(os.environ) if env is None else env)
    cases: CasesDocument | None = None
    if "cases" in data:
        # Torch Spyre's model-case files: top-level model/default(s)/cases, checked on
        # their own; what else the file holds is a config as usual.
        try:
            cases = CasesDocument.model_validate({k: data[k] for k in CASES_KEYS if k in data})
        except ValidationError as e:
            problems += _problems(path, tree.node, e, CasesDocument)
        data = {k: v for k, v in data.items() if k not in CASES_KEYS}
        if not data:
            data = {"test_suite_config": {}}
    try:
        doc = Document.model_validate(data)
    except ValidationError as e:
        problems += _hide_env(_problems(path, tree.node, e, Document), from_env)
    if problems:
        raise ConfigError(problems) from None
    if doc.relay is not None:
        doc.relay._from_env = from_env
    compiled, problems = _compile_names(path, tree, doc.test_suite_config)
    if problems:
        raise ConfigError(problems)
    doc._cases = cases
    if tree.origins is not None:
        with contextlib.suppress(TypeError, ValueError):  # else a cache entry of another shape
            _attach_origins(path, doc, tree.origins)
            return doc, compiled
    tree.origins = _origin_table(tree.node, doc)
    tree.keep()
    _attach_origins(path, doc, tree.origins)
    return doc, compiled


"""Where the entries of a document were written, as plain data (it is cached, Note
[Config cache]): (test_selectors lines, per file (line, path line, path column, per
test entry its line or (line, selectors lines, declared ops' lines, declared modules'
lines)), lines of global's supported_dtypes, supported_ops, supported_modules). Lines
of selectors are (include lines, exclude lines)."""


def _origin_table(node: Any, doc: Document) -> Origins:
    """The lines :func:`_attach_origins` records, found in the node tree (where
    the validated document has something to mark)."""

    def items(parent: Any, key: str) -> list[Any]:
        found = node_child(parent, key) if parent is not None else None
        value = found[1] if found else None
        return list(value.value) if isinstance(value, yaml.SequenceNode) else []

    def lines(nodes: list[Any]) -> list[int]:
        return [n.start_mark.line + 1 for n in nodes]

    def selectors(block: Selectors | None, parent: Any, key: str) -> Any:
        found = node_child(parent, key) if block is not None and parent is not None else None
        if not found:
            return None
        return lines(items(found[1], "include")), lines(items(found[1], "exclude"))

    found = node_child(node, "test_suite_config")
    top = found[1] if found else None
    suite = doc.test_suite_config
    files = []
    for i, (f, fnode) in enumerate(zip(suite.files, items(top, "files"), strict=False)):
        line, col = position(node, ("test_suite_config", "files", i, "path"))
        tests: list[Any] = []
        for t, tnode in zip(f.tests, items(fnode, "tests"), strict=False):
            tline = tnode.start_mark.line + 1
            if t.selectors is None and t.edits is None:
                tests.append(tline)
                continue
            refs: list[Any] = [None, None]
            found = node_child(tnode, "edits") if t.edits is not None else None
            enode = found[1] if found else None
            for k, axis in enumerate(("ops", "modules")):
                edit = getattr(t.edits, axis, None) if t.edits else None
                found = node_child(enode, axis) if enode is not None else None
                if edit is not None and found is not None:
                    refs[k] = lines(items(found[1], "include"))
            tests.append((tline, selectors(t.selectors, tnode, "selectors"), *refs))
        files.append((fnode.start_mark.line + 1, line, col, tests))
    gfound = node_child(top, "global") if top is not None else None
    gnode = gfound[1] if gfound else None
    caps = tuple(
        lines(items(gnode, key)) if getattr(suite.global_, key) else []
        for key in ("supported_dtypes", "supported_ops", "supported_modules")
    )
    return selectors(suite.test_selectors, top, "test_selectors"), files, caps


def _attach_origins(path: Path, doc: Document, table: Origins) -> None:
    """Record ``file:line`` on every file, test entry and capability (for messages),
    as loader-set attributes (Note [Loader-set attributes] in model.py)."""
    at = f"{path}:"

    def mark(models: Any, lines: list[int] | None) -> None:
        for model, line in zip(models or (), lines or (), strict=False):
            set_private(model, "_origin", at + str(line))

    def selectors(block: Selectors | None, lines: Any) -> None:
        if block is not None and lines is not None:
            mark(block.include, lines[0])
            mark(block.exclude, lines[1])

    sel, files, caps = table
    suite = doc.test_suite_config
    selectors(suite.test_selectors, sel)
    for i, (f, (fline, line, col, tests)) in enumerate(zip(suite.files, files, strict=False)):
        set_private(f, "_origin", at + str(fline))
        where = (f.path, str(path), line, col, f"test_suite_config.files[{i}].path")
        set_private(f, "_path_at", where)
        for t, entry in zip(f.tests, tests, strict=False):
            if entry.__class__ is int:
                set_private(t, "_origin", at + str(entry))
                continue
            tline, tsel, ops, modules = entry
            set_private(t, "_origin", at + str(tline))
            selectors(t.selectors, tsel)
            if t.edits is not None:
                mark(t.edits.ops.include if t.edits.ops else None, ops)
                mark(t.edits.modules.include if t.edits.modules else None, modules)
    g = suite.global_
    keys = ("supported_dtypes", "supported_ops", "supported_modules")
    for key, lines in zip(keys, caps, strict=True):
        mark(getattr(g, key), lines)


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


@dataclass
class _Loaded:
    """What reading a config and everything it extends gives."""

    suite: TestSuiteConfig
    doc: Document  # the config's own document
    relay: RelayPolicy | None  # its own, else the last one it extends that has one
    names: dict[int, tuple[NamePattern, ...]]  # compiled names by id() of test entry
    sources: list[Path]


def _load_doc(
    path: Path,
    stack: tuple[str, ...],
    sources: list[Path],
    env: dict[str, str] | None,
    names: dict[int, tuple[NamePattern, ...]],
    roots: paths.ExtendsRoots,
) -> tuple[TestSuiteConfig, Document, RelayPolicy | None]:
    sources.append(path)
    data, tree = read_yaml(path)
    if len(stack) > 1 and not (isinstance(data, dict) and "test_suite_config" in data):
        # an extended file that is not a config: say so, show none of it
        raise ConfigError(
            [
                Problem(
                    str(path),
                    1,
                    1,
                    "",
                    "expected a config (a mapping with key 'test_suite_config'); found "
                    f"{shape(data)} without it (not shown: it is not a config). Extend only "
                    "ootest configs",
                )
            ]
        )
    doc, compiled = _validate(path, data, tree, env)
    names.update(compiled)
    relay = doc.relay
    suite = doc.test_suite_config
    # File paths are relative to the config that declares them.
    for f in suite.files:
        if not f.path.startswith("${") and not os.path.isabs(f.path):
            f.path = str(path.parent / f.path)
    if suite.op_map is not None and not os.path.isabs(suite.op_map):
        suite.op_map = str(path.parent / suite.op_map)
    composed: TestSuiteConfig | None = None
    inherited: RelayPolicy | None = None
    for i, ext in enumerate(suite.extends):
        target = (path.parent / ext).resolve()
        if _norm(target) in stack:
            line, col = position(tree.node, ("test_suite_config", "extends", i))
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
        refused = roots.refusal(path, target)
        if refused is not None:
            line, col = position(tree.node, ("test_suite_config", "extends", i))
            key = f"test_suite_config.extends[{i}]"
            raise ConfigError([Problem(str(path), line, col, key, refused)])
        if not target.is_file():
            line, col = position(tree.node, ("test_suite_config", "extends", i))
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
        if _norm(target) in {_norm(s.resolve()) for s in sources}:
            # reached along another path already (a diamond): applied once, where first
            # reached; read again, a chain of diamonds cost 2**n (issue 28 item 15)
            continue
        base, _, base_relay = _load_doc(target, (*stack, _norm(target)), sources, env, names, roots)
        composed = base if composed is None else _compose(composed, base)
        inherited = base_relay or inherited
    if composed is not None:
        suite = _compose(composed, suite)
    return suite, doc, relay or inherited


# Fields of model-derived entries that ootest accepts but does not apply: one note
# per field and config, however many entries use it (Note [Model call specs]).
_NOT_APPLIED = {
    "device_layout": "Torch Spyre's device layout of a tensor: accepted, not applied "
    "(ootest creates the declared shape, stride and storage offset)",
    "preset": "tensor presets: accepted, not applied",
    "init: file": "tensors loaded from files: accepted, not run (those variants are skipped)",
    "sample_inputs_func": "on a module entry: accepted, not used (a module entry's calls "
    "are its forward_inputs)",
    "kwargs": "keyword arguments beside sample_inputs_func: used as the call's kwargs "
    "(Torch Spyre's runner drops them; Note [Keyword arguments beside the call])",
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
                if op.outer_kwargs:
                    key = f"files[{i}].tests[{j}].edits.ops.include[{k}].kwargs"
                    note("kwargs", op.origin or t.origin, key)
                if op.sample_inputs_func is not None:
                    where = f"files[{i}].tests[{j}].edits.ops.include[{k}].sample_inputs_func"
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


def _load(src: Path, env: dict[str, str] | None) -> _Loaded:
    sources: list[Path] = []
    names: dict[int, tuple[NamePattern, ...]] = {}
    with _no_gc():
        roots = paths.ExtendsRoots(src, env)
        suite, doc, relay = _load_doc(src, (_norm(src),), sources, env, names, roots)
    return _Loaded(suite, doc, relay, names, sources)


class _no_gc:
    """The cyclic GC paused while a config is read: loading allocates millions of
    objects (nodes, dicts, models) and none of them form cycles, yet every 700
    allocations start a collection that walks the young ones, and the older
    generations again and again: 100,000 entries composed in 4.4 s instead of 10."""

    def __enter__(self) -> None:
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was:
            gc.enable()


def load_relay(path: str | os.PathLike[str], env: dict[str, str] | None = None) -> RelayPolicy:
    """The relay policy of a config (its ``relay:``, else the one it extends, else the
    defaults), read by the same loader as the rest: bounds, validation, ``extends``,
    ``${VAR}`` and ``file:line:col`` problems; test files are not looked for."""
    return _load(Path(path), env).relay or RelayPolicy()


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
    loaded = _load(src, env)
    suite = loaded.suite
    environ = paths.environment(src, [f.path for f in suite.files], env)
    cfg = Config(source=src, suite=suite, relay=loaded.relay, sources=loaded.sources)
    glob_limit = config_limit(*paths.GLOB_LIMIT)
    with _no_gc():
        _resolve(src, cfg, loaded, environ, check_paths, ctx, glob_limit)
    return cfg


def _resolve(
    src: Path,
    cfg: Config,
    loaded: _Loaded,
    environ: dict[str, str],
    check_paths: bool,
    ctx: Context | None,
    glob_limit: int,
) -> None:
    """Notes, test entries' compiled names and the test files of every file entry."""
    suite, doc = loaded.suite, loaded.doc
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
        names = loaded.names
        patterns = [(t, names[id(t)]) for t in f.tests]
        for j, t in enumerate(f.tests):
            if t.edits and t.edits.functions:
                tfile, _, tline = (t.origin or where).rpartition(":")
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
        written, pfile, pline, pcol, pkey = f.path_at
        text, missing = paths.expand(f.path, environ)
        for name in missing if check_paths else ():
            how = paths.HOW.get(name, f"export {name}=... or remove it from the path")
            if not paths.IDENT.match(name):
                msg = f"expected a variable name in ${{...}}; found {name!r}"
            else:
                msg = f"undefined variable ${{{name}}} in path {written!r}; {how}"
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
        if missing:
            continue
        if paths.is_glob(text):
            var = paths.VAR.match(f.path)
            root = environ[var.group(1)] if var else str(Path(pfile).parent)
            outside = paths.glob_outside(text, root)
            if outside is not None:
                msg = (
                    "expected a glob inside the config's folder or inside the ${VAR} it "
                    f"starts with; found {written!r}, which would search {outside}. Start it "
                    "with a ${VAR} (e.g. ${TORCH_ROOT}/) or write it relative to the config"
                )
                problems.append(Problem(pfile, pline, pcol, pkey, msg))
                continue
        try:
            hits = paths.matches(text, glob_limit)
        except paths.GlobLimit:
            msg = (
                f"expected the glob {written!r} to look at most at {glob_limit:,} files and "
                f"folders; it looks at more. Narrow it, or raise the limit with "
                f"{paths.GLOB_LIMIT[0]}=<n>"
            )
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
            continue
        if not hits and check_paths:
            if paths.is_glob(text):
                msg = f"expected the glob {text!r} to match test files; it matches none"
            else:
                msg = f"expected an existing test file; found nothing at {text}" + (
                    " (check ${TORCH_ROOT})" if "TORCH_ROOT" in f.path else ""
                )
            problems.append(Problem(pfile, pline, pcol, pkey, msg))
            continue
        if not hits and not paths.is_glob(text):
            hits = [text]  # not checked: kept as written
        cfg.resolved.append((f.path, tuple(hits)))
        for h in hits:
            cfg.files.append(ResolvedFile(Path(h), f, patterns))
    if problems:
        raise ConfigError(problems)
