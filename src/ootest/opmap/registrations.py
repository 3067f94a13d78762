"""Kernel registrations in a backend's sources, and which lines belong to which op.

C++: ``TORCH_LIBRARY_IMPL(ns, Key, m) { m.impl("op.overload", kernel); }``
(also ``TORCH_LIBRARY``/``TORCH_LIBRARY_FRAGMENT`` blocks). Python:
``torch.library.Library("aten", "IMPL", ...)`` objects and their
``lib.impl("op", fn, "PrivateUse1")``, and decorators such as
``@torch.library.impl("aten::add.Tensor", "privateuse1")``.

A line belongs to an op when it is part of the registration statement, of the
registered kernel function, or of the registration block's header (which all
its registrations depend on). A registered name without overload
(``m.impl("add", ...)``) is the default overload ``aten::add``, as in torch.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

CPP_SUFFIXES = frozenset({".cpp", ".cc", ".cxx", ".c", ".cu", ".h", ".hh", ".hpp", ".cuh", ".mm"})
PY_SUFFIXES = frozenset({".py"})


@dataclass(frozen=True)
class Registration:
    op: str  # qualified: aten::add.Tensor, or aten::add for the default overload
    symbol: str | None  # the kernel function's name, when it is a named function
    first: int  # 1-based line span of the statement (or decorated function)
    last: int


@dataclass
class SourceMap:
    """One version of one file: its registrations and the functions it defines."""

    registrations: list[Registration] = field(default_factory=list)
    functions: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # name -> spans
    headers: list[tuple[int, int, list[str]]] = field(default_factory=list)  # span -> ops
    neutral: set[int] = field(default_factory=set)  # comments, blank, includes, braces
    code: list[str] = field(default_factory=list)  # each line without comments

    def code_of(self, lines: range) -> list[str]:
        """The code of ``lines`` (1-based) as tokens split on whitespace, comments dropped."""
        return " ".join(self.code[n - 1] for n in lines if 0 < n <= len(self.code)).split()

    def ops_at(self, line: int) -> list[str] | None:
        """The ops a change on ``line`` may affect; [] for a neutral line; None
        when the line is code no registration accounts for."""
        if line in self.neutral:
            return []
        found: list[str] = []
        for r in self.registrations:
            if r.first <= line <= r.last:
                found.append(r.op)
        for first, last, ops in self.headers:
            if first <= line <= last:
                found += ops
        by_symbol: dict[str, list[str]] = {}
        for r in self.registrations:
            if r.symbol:
                by_symbol.setdefault(r.symbol, []).append(r.op)
        for name, spans in self.functions.items():
            if name in by_symbol and any(a <= line <= b for a, b in spans):
                found += by_symbol[name]
        return sorted(set(found)) if found else None


def qualify(name: str, ns: str) -> str:
    if "::" not in name:
        name = f"{ns}::{name}"
    return name.removesuffix(".default")


# ------------------------------------------------------------------ C++
_CPP_BLOCK = re.compile(
    r"\bTORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*(\w+)\s*,(?:\s*(\w+)\s*,)?\s*(\w+)\s*\)\s*\{"
)
_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_IDENT = re.compile(r"[A-Za-z_]\w*")
_CPP_NEUTRAL = re.compile(
    r"^\s*(#\s*(include|pragma)\b.*|namespace\s+[\w:]*\s*\{|\}\s*;?|\{|using\s+[^;]+;)?\s*$"
)
_NOT_SYMBOLS = frozenset({"TORCH_FN", "at", "native", "c10", "torch", "std", "const", "auto"})


def _blank_cpp(text: str, strings: bool = True) -> str:
    """The text with comments (and string/char literals, unless ``strings`` is
    False) replaced by spaces, newlines kept: braces and names are then found
    by position."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and strings:
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at ``i`` (in blanked text), or len."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def parse_cpp(text: str) -> SourceMap:
    blank = _blank_cpp(text)
    line_at = _line_index(text)
    sm = SourceMap(code=_blank_cpp(text, strings=False).splitlines())
    for n, (raw, bl) in enumerate(zip(text.splitlines(), blank.splitlines(), strict=False), 1):
        if not bl.strip() or _CPP_NEUTRAL.match(bl) or raw.lstrip().startswith("#include"):
            sm.neutral.add(n)
    for m in _CPP_BLOCK.finditer(blank):
        ns, var = m.group(1), m.group(3)
        open_at = m.end() - 1
        close_at = _match(blank, open_at, "{", "}")
        body = blank[open_at:close_at]
        block_ops: list[str] = []
        for im in re.finditer(rf"\b{re.escape(var)}\s*\.\s*impl\s*\(", body):
            start = open_at + im.start()
            paren = open_at + im.end() - 1
            end = _match(blank, paren, "(", ")")
            args = text[paren + 1 : end]
            name_m = _STRING.search(args)
            if name_m is None:
                continue
            op = qualify(name_m.group(1), ns)
            block_ops.append(op)
            rest = blank[paren + 1 + name_m.end() : end]
            sm.registrations.append(
                Registration(op, _cpp_symbol(rest), line_at(start), line_at(end))
            )
        head = line_at(m.start())
        sm.headers.append((head, line_at(open_at), block_ops))
        sm.neutral.discard(head)
    for name, spans in _cpp_functions(blank, line_at).items():
        sm.functions[name] = spans
    return sm


def _cpp_symbol(rest: str) -> str | None:
    """The kernel's name in ``, &at::native::foo)`` / ``, TORCH_FN(foo))``; None
    for a lambda (its body is inside the statement)."""
    if "[" in rest and "]" in rest:
        return None
    names = [n for n in _IDENT.findall(rest) if n not in _NOT_SYMBOLS]
    return names[-1] if names else None


_CPP_DEF = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_CPP_NOT_FUNCS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch"})


def _cpp_functions(blank: str, line_at: _LineAt) -> dict[str, list[tuple[int, int]]]:
    """Function definitions: ``name(...) [qualifiers] {`` followed by a body."""
    out: dict[str, list[tuple[int, int]]] = {}
    for m in _CPP_DEF.finditer(blank):
        name = m.group(1)
        if name in _CPP_NOT_FUNCS:
            continue
        close = _match(blank, m.end() - 1, "(", ")")
        after = re.match(r"[\s\w:&*<>,\->]*?\{", blank[close + 1 : close + 200])
        if after is None or ";" in after.group(0) or "=" in after.group(0):
            continue
        brace = close + 1 + after.end() - 1
        end = _match(blank, brace, "{", "}")
        # the definition starts at the line holding its name (return type above is neutral)
        out.setdefault(name, []).append((line_at(m.start()), line_at(end)))
    return out


# ------------------------------------------------------------------ Python
def parse_python(text: str) -> SourceMap | None:
    """None when the file does not parse (then no line of it can be mapped)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    sm = SourceMap(code=_python_code(text))
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            sm.neutral.add(n)
    libs: dict[str, tuple[str, int, int]] = {}  # variable -> (namespace, span)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _call_name(node.value).endswith("Library") and node.value.args:
                ns = _str(node.value.args[0])
                for t in node.targets:
                    if isinstance(t, ast.Name) and ns:
                        libs[t.id] = (ns, node.lineno, node.end_lineno or node.lineno)
    lib_ops: dict[str, list[str]] = {}
    decorators = {
        id(d)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for d in f.decorator_list
    }
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            last = node.end_lineno or node.lineno
            sm.functions.setdefault(node.name, []).append((first, last))
            for d in node.decorator_list:
                if isinstance(d, ast.Call):
                    op, lib = _py_op(d, libs)
                    if op:
                        sm.registrations.append(Registration(op, node.name, first, last))
                        if lib:
                            lib_ops.setdefault(lib, []).append(op)
        elif isinstance(node, ast.Call) and id(node) not in decorators:
            op, lib = _py_op(node, libs)
            if op:
                sym = _py_kernel(node, libs)
                last = node.end_lineno or node.lineno
                sm.registrations.append(Registration(op, sym, node.lineno, last))
                if lib:
                    lib_ops.setdefault(lib, []).append(op)
    for var, (_, a, b) in libs.items():
        sm.headers.append((a, b, lib_ops.get(var, [])))
    return sm


def _call_name(call: ast.Call) -> str:
    f = call.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _py_op(call: ast.Call, libs: dict[str, tuple[str, int, int]]) -> tuple[str | None, str | None]:
    """(qualified op, library variable) of a registration call, else (None, None)."""
    name = _call_name(call)
    last = name.rsplit(".", 1)[-1]
    if last not in ("impl", "register_kernel", "register_autograd", "register_fake"):
        return None, None
    owner = name.rsplit(".", 1)[0] if "." in name else ""
    if owner in libs:  # lib.impl("add.Tensor", fn, "PrivateUse1")
        op = _str(call.args[0]) if call.args else None
        return (qualify(op, libs[owner][0]), owner) if op else (None, None)
    args = list(call.args)
    lib: str | None = None
    if args and isinstance(args[0], ast.Name) and args[0].id in libs:  # impl(lib, "add", ...)
        lib = args[0].id
        args = args[1:]
    op = _str(args[0]) if args else None
    if op is None:
        for kw in call.keywords:
            if kw.arg in ("qualname", "op_name", "op"):
                op = _str(kw.value)
    if not op:
        return None, None
    return qualify(op, libs[lib][0] if lib else "aten"), lib


def _py_kernel(call: ast.Call, libs: dict[str, tuple[str, int, int]]) -> str | None:
    """The named function a registration call registers (None for a lambda)."""
    args = [a for a in call.args if not isinstance(a, ast.Constant)]
    for a in [*args, *(k.value for k in call.keywords if k.arg in ("fn", "func"))]:
        if isinstance(a, ast.Name) and a.id not in libs:
            return a.id
        if isinstance(a, ast.Attribute):
            return a.attr
    return None


def _python_code(text: str) -> list[str]:
    """Each line with its comment removed (found by the tokenizer, not by ``#``)."""
    import io
    import tokenize

    lines = text.splitlines()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col]
    except (tokenize.TokenError, SyntaxError):
        pass
    return lines


# ------------------------------------------------------------------ helpers
class _LineAt:
    def __init__(self, text: str) -> None:
        self.starts = [0]
        for i, c in enumerate(text):
            if c == "\n":
                self.starts.append(i + 1)

    def __call__(self, offset: int) -> int:
        import bisect

        return bisect.bisect_right(self.starts, offset)


def _line_index(text: str) -> _LineAt:
    return _LineAt(text)
