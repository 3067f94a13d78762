"""Canonical serialization and fingerprints.

Note [Stable fingerprints]
A fingerprint is the sha256 of a canonical JSON serialization, cut to 32 hex
digits (128 bits). Canonical means: keys sorted, sets sorted by their own
canonical text, no ``id()``, no memory address, no ``repr`` of an object that
would print one, no Python-version-dependent AST fields. The same input gives
the same fingerprint in every process, on every machine, under any
``PYTHONHASHSEED``; an index built anywhere can be diffed against one built
elsewhere. Source code is fingerprinted through a normalized AST (see
:func:`ast_digest`), never its raw text, so formatting and comments do not count.

Nothing here imports torch: torch objects (dtypes, devices, functions) are
recognized by duck typing.
"""

from __future__ import annotations

import ast
import enum
import functools
import hashlib
import inspect
import json
import types
from collections.abc import Callable, Mapping
from typing import Any

FINGERPRINT_LEN = 32
#: Bump when any fingerprint's recipe changes: indexes with different schemes are not diffed.
SCHEME = "2"  # 2: entry fingerprints limited to the index's device

Json = Any  # what json.dumps accepts


def digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_LEN]


def digest(value: Json) -> str:
    """Fingerprint of a JSON-able value (see Note [Stable fingerprints])."""
    return digest_text(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str))


# ---------------------------------------------------------------- source code
def norm_ast(node: Any) -> Json:
    """A version-stable structure for an AST: node type and its non-empty fields,
    without line and column attributes (so a 3.12 ``type_params=[]`` or a moved
    line does not change it)."""
    if isinstance(node, ast.AST):
        out: list[Json] = [type(node).__name__]
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or value == []:
                continue
            if isinstance(node, ast.Constant) and name == "kind":
                continue
            out.append([name, norm_ast(value)])
        return out
    if isinstance(node, list):
        return [norm_ast(v) for v in node]
    if isinstance(node, (str, int, float, complex, bytes, bool)) or node is None:
        return [type(node).__name__, repr(node)]
    return repr(node)  # Ellipsis


def ast_digest(*nodes: Any) -> str:
    return digest([norm_ast(n) for n in nodes])


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


# ---------------------------------------------------------------- live objects
_MAX_DEPTH = 8


def canon(obj: Any, canonizer: Canonizer | None = None) -> Json:
    """A canonical JSON-able description of a live Python object (an OpInfo, a
    DecorateInfo, a sample-input function ...); see Note [Stable fingerprints].
    Pass one :class:`Canonizer` to describe many objects that share parts."""
    return (canonizer or Canonizer()).of(obj, 0)


def qualname(obj: Any) -> str:
    mod = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if name is None:
        name = type(obj).__qualname__
    owner = getattr(obj, "__objclass__", None)  # method descriptors: no __module__
    if mod is None and owner is not None:
        mod = f"{owner.__module__}.{owner.__qualname__}"
    return f"{mod}.{name}" if mod else str(name)


@functools.cache
def _code_source(code: types.CodeType) -> str | None:
    try:
        return _dedent(inspect.getsource(code))
    except (OSError, TypeError):
        return None


@functools.cache
def _code_digest(code: types.CodeType) -> str | None:
    src = _code_source(code)
    if src is None:
        return None
    try:
        tree = ast.parse(src)
    except SyntaxError:  # a lambda cut out of a larger expression
        return digest_text(src.strip())
    return ast_digest(tree)


def _dedent(src: str) -> str:
    import textwrap

    return textwrap.dedent(src)


def source_of(fn: Any) -> str | None:
    """The source of a (possibly partial) function, or None."""
    fn = _unwrap(fn)
    code = getattr(fn, "__code__", None)
    return None if code is None else _code_source(code)


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def describe(obj: Any) -> str:
    """A short stable name for a decorator or function: its qualified name, with the
    text values it closes over (``skip.<locals>.decorator('not supported')``)."""
    fn = _unwrap(obj)
    if isinstance(fn, types.FunctionType):
        texts = [
            repr(c.cell_contents)
            for c in fn.__closure__ or ()
            if _cell_filled(c) and isinstance(c.cell_contents, str)
        ]
        name = fn.__qualname__
        return f"{name}({', '.join(texts)})" if texts else name
    if isinstance(fn, type):
        return fn.__qualname__
    return type(fn).__qualname__


def _cell_filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


class Canonizer:
    """Describes objects canonically, remembering the description of every
    object whose description did not depend on where it was reached from (no
    cycle or depth cut inside it), so shared parts are described once."""

    def __init__(self, attrs: Callable[[Any], dict[str, Any] | None] | None = None) -> None:
        #: the attributes to describe an object by, when not all its public ones
        #: (None: all); e.g. an OpInfo as one device sees it
        self.attrs = attrs
        self.active: set[int] = set()
        self.cuts = 0  # cycle and depth cuts made so far
        self.memo: dict[int, tuple[Any, Json]] = {}

    def of(self, obj: Any, depth: int) -> Json:
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return {"float": repr(obj)}
        if isinstance(obj, complex):
            return {"complex": repr(obj)}
        if isinstance(obj, bytes):
            return {"bytes": obj.hex()}
        if isinstance(obj, enum.Enum):
            return {"enum": f"{type(obj).__qualname__}.{obj.name}"}
        special = _torch_like(obj)
        if special is not None:
            return special
        if isinstance(obj, types.ModuleType):
            return {"module": obj.__name__}
        if isinstance(obj, type):
            return {"class": qualname(obj)}
        hit = self.memo.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        if depth >= _MAX_DEPTH or id(obj) in self.active:
            self.cuts += 1
            return {"cut": type(obj).__qualname__}
        self.active.add(id(obj))
        cuts = self.cuts
        try:
            out = self._compound(obj, depth + 1)
        finally:
            self.active.discard(id(obj))
        if self.cuts == cuts:  # the same wherever it is reached from
            self.memo[id(obj)] = (obj, out)
        return out

    def _compound(self, obj: Any, depth: int) -> Json:
        if isinstance(obj, (list, tuple)):
            return [self.of(v, depth) for v in obj]
        if isinstance(obj, (set, frozenset)):
            items = [self.of(v, depth) for v in obj]
            if all(isinstance(i, str) for i in items):
                return {"set": sorted(items)}
            return {"set": sorted(items, key=_sort_key)}
        if isinstance(obj, Mapping):
            pairs = [(_sort_key(self.of(k, depth)), self.of(v, depth)) for k, v in obj.items()]
            return {"map": sorted(pairs, key=lambda p: p[0])}
        if isinstance(obj, functools.partial):
            return {
                "partial": self.of(obj.func, depth),
                "args": self.of(obj.args, depth),
                "kwargs": self.of(obj.keywords, depth),
            }
        if isinstance(obj, types.FunctionType):
            return self._function(obj, depth)
        if isinstance(obj, types.MethodType):
            return {"method": self.of(obj.__func__, depth), "of": type(obj.__self__).__qualname__}
        if callable(obj) and not hasattr(obj, "__dict__") and not _slots(obj):
            return {"builtin": qualname(obj)}  # builtins, method descriptors, ufuncs
        return self._object(obj, depth)

    def _function(self, fn: types.FunctionType, depth: int) -> Json:
        cells = [c.cell_contents for c in fn.__closure__ or () if _cell_filled(c)]
        return {
            "fn": qualname(fn),
            "code": _code_digest(fn.__code__),
            "defaults": self.of(fn.__defaults__, depth),
            "kwdefaults": self.of(fn.__kwdefaults__, depth),
            "closure": [self.of(c, depth) for c in cells],
        }

    def _object(self, obj: Any, depth: int) -> Json:
        attrs: dict[str, Any] = {}
        for name in _slots(obj):
            if hasattr(obj, name):
                attrs[name] = getattr(obj, name)
        attrs.update(getattr(obj, "__dict__", {}))
        public = {k: v for k, v in attrs.items() if not k.startswith("_")}
        chosen = self.attrs(obj) if self.attrs is not None else None
        if chosen is not None:
            public = chosen
        if not public and not attrs:
            return {"obj": qualname(type(obj))}
        return {"obj": qualname(type(obj)), "attrs": {k: self.of(public[k], depth) for k in public}}


def _slots(obj: Any) -> list[str]:
    out: list[str] = []
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        out += [slots] if isinstance(slots, str) else [s for s in slots if s != "__dict__"]
    return out


def _sort_key(value: Json) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _torch_like(obj: Any) -> Json | None:
    t = type(obj)
    mod = t.__module__
    if mod != "torch" and not mod.startswith(("torch.", "numpy")):
        return None
    name = t.__name__
    if name == "dtype":
        return str(obj)  # plain text: sets of dtypes sort fast
    if name in ("device", "layout", "memory_format", "Size"):
        return {name: str(obj)}
    if name in ("Tensor", "Parameter", "ndarray"):
        return {name: repr(obj)}
    if name.startswith("_dispatch_dtypes"):
        return {"dtypes": sorted(str(d) for d in obj)}
    return None
