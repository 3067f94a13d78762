"""The static part: what one test file says, read with ``ast`` (no import, no torch).

:func:`parse_file` is pure (bytes in, :class:`FileFacts` out) and runs in worker
processes. Facts round-trip through JSON (:func:`dump_facts`, :func:`load_facts`)
so an unchanged file is never parsed again: its stored facts are reused.
"""

from __future__ import annotations

import ast
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ootest.memory._hashing import ast_digest, digest, without_docstring

#: Methods unittest calls around every test of a class: reached by every test.
IMPLICIT_HOOKS = ("setUp", "tearDown", "setUpClass", "tearDownClass")


@dataclass(frozen=True)
class Decorator:
    name: str  # dotted callee: "ops", "dtypes", "unittest.skipIf"
    args: str  # "(op_db, dtypes=OpDTypes.supported)", "" when not called
    refs: tuple[str, ...] = ()  # names its arguments reference

    def __str__(self) -> str:
        return f"@{self.name}{self.args}"


@dataclass(frozen=True)
class Func:
    """A test method, or a module-level function."""

    name: str
    line: int
    end: int
    decorators: tuple[Decorator, ...] = ()
    doc: str = ""
    comments: str = ""
    body: str = ""  # digest of the normalized AST without decorators and docstring
    decorated: str = ""  # digest of the decorators
    refs: tuple[str, ...] = ()  # names it loads (body and decorators)
    attrs: tuple[str, ...] = ()  # self.X / cls.X it uses


@dataclass(frozen=True)
class Symbol:
    """A module-level binding other than an import (or a class-level one)."""

    name: str
    kind: str  # function | class | assign
    line: int
    digest: str
    refs: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Instantiation:
    call: str  # instantiate_device_type_tests | instantiate_parametrized_tests | ...
    args: str  # source of the arguments
    digest: str
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Klass:
    name: str
    line: int
    end: int
    bases: tuple[str, ...] = ()
    decorators: tuple[Decorator, ...] = ()
    doc: str = ""
    comments: str = ""
    methods: tuple[Func, ...] = ()
    members: tuple[Symbol, ...] = ()  # class-level assignments and non-test methods
    instantiations: tuple[Instantiation, ...] = ()

    @property
    def tests(self) -> tuple[Func, ...]:
        return tuple(m for m in self.methods if m.name.startswith("test"))

    @property
    def form(self) -> str:
        """How the class becomes tests: device | parametrized | plain."""
        calls = [i.call for i in self.instantiations] + [d.name for d in self.decorators]
        if any(c.endswith("instantiate_device_type_tests") for c in calls):
            return "device"
        if any(c.endswith("instantiate_parametrized_tests") for c in calls):
            return "parametrized"
        return "plain"


@dataclass(frozen=True)
class Import:
    module: str  # as written, without the leading dots
    names: tuple[str, ...] = ()  # from-import names ("*" for a star import)
    level: int = 0  # relative import level


@dataclass(frozen=True)
class FileFacts:
    key: str
    doc: str = ""
    comments: str = ""  # module-level comments
    imports: tuple[Import, ...] = ()
    import_digest: str = ""
    symbols: tuple[Symbol, ...] = ()
    classes: tuple[Klass, ...] = ()
    functions: tuple[Func, ...] = ()  # module-level functions (tests are test_*)
    error: str | None = None  # why the file could not be parsed
    _by_name: dict[str, Symbol] = field(default_factory=dict, init=False, compare=False, repr=False)

    def symbol(self, name: str) -> Symbol | None:
        if not self._by_name and self.symbols:
            self._by_name.update((s.name, s) for s in self.symbols)
        return self._by_name.get(name)

    def klass(self, name: str) -> Klass | None:
        for k in self.classes:
            if k.name == name:
                return k
        return None


# ---------------------------------------------------------------- parsing
def parse_file(key: str, data: bytes) -> FileFacts:
    """Facts of one Python file; a file that does not parse gets ``error``, and so
    does one too deeply nested to walk: ``1+1+...`` with 500 terms is a
    RecursionError in the digest, 100,000 unary minus a MemoryError in the parser
    (a per-file error; the build goes on)."""
    try:
        return _parse_file(key, data)
    except (RecursionError, MemoryError) as e:
        why = "nested too deeply to read" if isinstance(e, RecursionError) else "too large to parse"
        return FileFacts(key=key, error=f"{type(e).__name__}: {why}")


def _parse_file(key: str, data: bytes) -> FileFacts:
    try:
        text = data.decode("utf-8")
        tree = ast.parse(text)
    except (SyntaxError, ValueError, UnicodeDecodeError) as e:
        return FileFacts(key=key, error=f"{type(e).__name__}: {e}")
    comments = _comments(text, tree)
    owner = _Owners(len(text.splitlines()) + 2)
    stmts = list(_module_statements(tree.body))
    imports = [s for s in stmts if isinstance(s, (ast.Import, ast.ImportFrom))]
    class_nodes = [s for s in stmts if isinstance(s, ast.ClassDef)]
    func_nodes = [s for s in stmts if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in [*class_nodes, *func_nodes]:
        owner.claim(node)
        for sub in node.body if isinstance(node, ast.ClassDef) else ():
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                owner.claim(sub)
    by_owner = owner.split(comments)
    inst = _instantiations(stmts, {c.name for c in class_nodes})
    klasses = {id(c): _klass(c, by_owner, inst.get(c.name, ())) for c in class_nodes}
    funcs = {id(f): _func(f, by_owner) for f in func_nodes}
    return FileFacts(
        key=key,
        doc=ast.get_docstring(tree) or "",
        comments=by_owner.get(0, ""),
        imports=tuple(i for node in imports for i in _imports(node)),
        import_digest=ast_digest(*sorted(imports, key=lambda n: ast.dump(n))),
        symbols=_symbols(stmts, klasses, funcs),
        classes=tuple(klasses[id(c)] for c in class_nodes),
        functions=tuple(funcs[id(f)] for f in func_nodes if f.name.startswith("test")),
    )


def _module_statements(body: list[ast.stmt]) -> Any:
    """Module-level statements, looking into ``if``/``try``/``with`` blocks
    (``if TEST_CUDA: class ...``) but not into functions or classes."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _module_statements(stmt.body)
            yield from _module_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _module_statements(block)
            for handler in stmt.handlers:
                yield from _module_statements(handler.body)
        elif isinstance(stmt, ast.With):
            yield from _module_statements(stmt.body)


def _comments(text: str, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every ``#`` comment. Python's tokenize is the exact way and
    is slow before 3.12; this scans the lines with a ``#`` instead, skipping the
    lines inside multi-line strings (from the AST) and quoted text."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            end = getattr(node, "end_lineno", None) or node.lineno
            if end > node.lineno:  # its later lines are string, the last one may hold code
                inside.update(range(node.lineno + 1, end + 1))
    out: list[tuple[int, str]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if "#" not in line or i in inside:
            continue
        at = _comment_start(line)
        if at >= 0:
            out.append((i, line[at + 1 :].strip()))
    return out


def _comment_start(line: str) -> int:
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return i
    return -1


class _Owners:
    """Which definition (by its first line; 0 = module) owns each source line."""

    def __init__(self, n_lines: int) -> None:
        self.owner = [0] * n_lines

    def claim(self, node: ast.AST) -> None:
        start = getattr(node, "lineno", 0)
        end = getattr(node, "end_lineno", None) or start
        for deco in getattr(node, "decorator_list", ()):
            start = min(start, deco.lineno)
        for line in range(start, min(end, len(self.owner) - 1) + 1):
            self.owner[line] = node.lineno  # type: ignore[attr-defined]

    def split(self, comments: list[tuple[int, str]]) -> dict[int, str]:
        out: dict[int, list[str]] = {}
        for line, text in comments:
            if text:
                out.setdefault(self.owner[min(line, len(self.owner) - 1)], []).append(text)
        return {k: "\n".join(v) for k, v in out.items()}


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return type(node).__name__


def _refs(*nodes: ast.AST) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names read, self./cls. attributes used) anywhere under ``nodes``. A name
    the nodes themselves bind (a parameter, a local variable, a loop or
    comprehension variable) is local, not a reference to a module-level symbol."""
    loads: set[str] = set()
    bound: set[str] = set()
    attrs: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                (loads if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
            elif isinstance(sub, ast.arg):
                bound.add(sub.arg)
            elif isinstance(sub, ast.ExceptHandler) and sub.name:
                bound.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in sub.names)
            elif (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id in ("self", "cls")
            ):
                attrs.add(sub.attr)
    return tuple(sorted(loads - bound)), tuple(sorted(attrs))


def _decorator(node: ast.expr) -> Decorator:
    if isinstance(node, ast.Call):
        parts = [ast.unparse(a) for a in node.args]
        parts += [
            f"{k.arg}={ast.unparse(k.value)}" if k.arg else f"**{ast.unparse(k.value)}"
            for k in node.keywords
        ]
        args = f"({', '.join(parts)})"
        refs, _ = _refs(*node.args, *(k.value for k in node.keywords))
    else:
        args, refs = "", ()
    return Decorator(dotted(node), args, refs)


def _func(node: ast.FunctionDef | ast.AsyncFunctionDef, comments: dict[int, str]) -> Func:
    body = without_docstring(node.body)
    refs, attrs = _refs(node.args, *body, *node.decorator_list)
    return Func(
        name=node.name,
        line=node.lineno,
        end=node.end_lineno or node.lineno,
        decorators=tuple(_decorator(d) for d in node.decorator_list),
        doc=ast.get_docstring(node) or "",
        comments=comments.get(node.lineno, ""),
        body=ast_digest(type(node).__name__, node.name, node.args, body, node.returns),
        decorated=ast_digest(node.decorator_list),
        refs=refs,
        attrs=attrs,
    )


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    names: list[str] = []
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def _func_digest(f: Func) -> str:
    """A function's definition: its body and its decorators."""
    return digest([f.body, f.decorated])


def _class_part(k: Klass) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(digest, refs, attrs) of a class as a symbol, from the parts already computed."""
    methods = [_func_digest(m) for m in k.methods]
    members = [(m.name, m.digest) for m in k.members]
    refs = {r for d in k.decorators for r in d.refs} | set(k.bases)
    attrs: set[str] = set()
    for m in k.methods:
        refs.update(m.refs)
        attrs.update(m.attrs)
    for sym in k.members:
        refs.update(sym.refs)
        attrs.update(sym.attrs)
    parts = [k.name, k.bases, [str(d) for d in k.decorators], methods, members]
    return digest(parts), tuple(sorted(refs)), tuple(sorted(attrs))


def _symbols(
    stmts: list[ast.stmt], klasses: dict[int, Klass], funcs: dict[int, Func]
) -> tuple[Symbol, ...]:
    """One symbol per module-level name: a name bound several times (``op_db +=
    ...``) gets the digest of all its statements in order."""
    parts: dict[str, list[tuple[str, str, tuple[str, ...], tuple[str, ...], int]]] = {}
    for node in stmts:
        names = _bound_names(node)
        if not names:
            continue
        if id(node) in klasses:
            d, refs, attrs = _class_part(klasses[id(node)])
            kind = "class"
        elif id(node) in funcs:
            f = funcs[id(node)]
            d, refs, attrs, kind = _func_digest(f), f.refs, f.attrs, "function"
        else:
            d = ast_digest(node)
            refs, attrs = _refs(node)
            kind = "assign"
        for name in names:
            parts.setdefault(name, []).append((kind, d, refs, attrs, node.lineno))
    out = []
    for name, found in parts.items():
        refs = tuple(sorted({r for p in found for r in p[2]} - {name}))
        attrs = tuple(sorted({a for p in found for a in p[3]}))
        out.append(
            Symbol(name, found[0][0], found[0][4], digest([p[1] for p in found]), refs, attrs)
        )
    return tuple(sorted(out, key=lambda s: s.name))


def _instantiations(stmts: list[ast.stmt], classes: set[str]) -> dict[str, list[Instantiation]]:
    out: dict[str, list[Instantiation]] = {}
    for node in stmts:
        call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
        if not isinstance(call, ast.Call) or not call.args:
            continue
        name = dotted(call.func)
        first = call.args[0]
        if not name.rsplit(".", 1)[-1].startswith("instantiate") or not isinstance(first, ast.Name):
            continue
        if first.id not in classes:
            continue
        rest = [*call.args[1:], *(k.value for k in call.keywords)]
        refs, _ = _refs(*rest)
        args = ", ".join(
            [ast.unparse(a) for a in call.args]
            + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords if k.arg]
        )
        refs = tuple(r for r in refs if r != "globals")
        out.setdefault(first.id, []).append(Instantiation(name, args, ast_digest(call), refs))
    return out


def _klass(
    node: ast.ClassDef, comments: dict[int, str], inst: list[Instantiation] | tuple[()]
) -> Klass:
    methods: list[Func] = []
    members: list[Symbol] = []
    for sub in node.body:
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            f = _func(sub, comments)
            if sub.name.startswith("test"):
                methods.append(f)
            else:
                members.append(
                    Symbol(sub.name, "function", sub.lineno, _func_digest(f), f.refs, f.attrs)
                )
        else:
            names = _bound_names(sub)
            if names:
                refs, attrs = _refs(sub)
                d = ast_digest(sub)
                members += [Symbol(n, "assign", sub.lineno, d, refs, attrs) for n in names]
    return Klass(
        name=node.name,
        line=node.lineno,
        end=node.end_lineno or node.lineno,
        bases=tuple(dotted(b) for b in node.bases),
        decorators=tuple(_decorator(d) for d in node.decorator_list),
        doc=ast.get_docstring(node) or "",
        comments=comments.get(node.lineno, ""),
        methods=tuple(methods),
        members=tuple(members),
        instantiations=tuple(inst),
    )


def _imports(node: ast.Import | ast.ImportFrom) -> list[Import]:
    if isinstance(node, ast.Import):
        return [Import(a.name) for a in node.names]
    return [Import(node.module or "", tuple(a.name for a in node.names), node.level)]


# ---------------------------------------------------------------- JSON round trip
def dump_facts(facts: FileFacts) -> str:
    data = asdict(facts)
    data.pop("_by_name", None)
    return json.dumps(data, separators=(",", ":"))


def load_facts(text: str) -> FileFacts:
    d = json.loads(text)
    d.pop("_by_name", None)
    return FileFacts(
        key=d["key"],
        doc=d["doc"],
        comments=d["comments"],
        imports=tuple(Import(i["module"], tuple(i["names"]), i["level"]) for i in d["imports"]),
        import_digest=d["import_digest"],
        symbols=tuple(_symbol(s) for s in d["symbols"]),
        classes=tuple(_load_klass(k) for k in d["classes"]),
        functions=tuple(_load_func(f) for f in d["functions"]),
        error=d["error"],
    )


def _symbol(s: dict[str, Any]) -> Symbol:
    return Symbol(s["name"], s["kind"], s["line"], s["digest"], tuple(s["refs"]), tuple(s["attrs"]))


def _deco(d: dict[str, Any]) -> Decorator:
    return Decorator(d["name"], d["args"], tuple(d["refs"]))


def _load_func(f: dict[str, Any]) -> Func:
    return Func(
        name=f["name"],
        line=f["line"],
        end=f["end"],
        decorators=tuple(_deco(d) for d in f["decorators"]),
        doc=f["doc"],
        comments=f["comments"],
        body=f["body"],
        decorated=f["decorated"],
        refs=tuple(f["refs"]),
        attrs=tuple(f["attrs"]),
    )


def _load_klass(k: dict[str, Any]) -> Klass:
    return Klass(
        name=k["name"],
        line=k["line"],
        end=k["end"],
        bases=tuple(k["bases"]),
        decorators=tuple(_deco(d) for d in k["decorators"]),
        doc=k["doc"],
        comments=k["comments"],
        methods=tuple(_load_func(m) for m in k["methods"]),
        members=tuple(_symbol(s) for s in k["members"]),
        instantiations=tuple(
            Instantiation(i["call"], i["args"], i["digest"], tuple(i["refs"]))
            for i in k["instantiations"]
        ),
    )
