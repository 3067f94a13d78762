"""Test name patterns and canonical variant IDs.

Note [Canonical variant IDs]
A variant is identified by what the test *is*, never by the class or method
name PyTorch generates for it (``TestFooPRIVATEUSE1`` vs ``TestFooEMU`` depends
on import order)::

    path::TemplateClass::test_method[op=add,dtype=float32]

The bracket holds the variant's axes in a fixed order (op, dtype, module, then
any other parametrized argument, sorted). Config names are written against the
template class and method; a bracket filter addresses single variants.

Note [Variant ID grammar]
Every variant ID must be a config name that selects exactly its variant (a
person copies IDs from reports, ``select audit`` and generated configs write
them back)::

    id     := file "::" [Class "::"] method ["[" axis ("," axis)* "]"]
    axis   := key "=" value            (op, dtype, module, then params sorted)
    value  := dtype ("," dtype)*       for dtype (a variant of several dtypes)
            | text                     else: no "," "[" "]"; may be empty

A parametrized value's text (``plugin/variant.py``) has ``,`` ``[`` ``]`` read as
``;`` ``(`` ``)``, control characters and leading/trailing spaces as ``\\xNN``,
and a text over 40 characters cut to 32 plus ``~`` and 6 hex digits of its
digest. A part without ``=`` continues the value before it (Note [Dtype tuples
in names]). What the grammar cannot make exact is reported, never silent:
``inexact_ids`` finds the IDs that select another variant too (two lambdas both
named ``<lambda>``, ``a,b`` and ``a;b``; ``dtype=float32`` next to a
``float32,float64`` tuple); collection writes ``id_exact: false`` on them and
``index build`` counts them.

Note [Exact op filters]
In a variant filter, ``op=`` names the OpInfo by its full name, exactly as the
variant ID writes it: ``op=norm`` is the OpInfo ``norm`` and not ``norm.nuc``,
``op=gcd`` is ``gcd`` and not the Python reference ``_refs.gcd`` (whose
``torch_opinfo_name`` is ``gcd``). It used to reach both (the OpInfo-family rule
below), so over upstream ``test_unary_ufuncs.py`` 10,520 of 23,523 IDs also named
a sibling, and a generated entry written for ``[op=nn.functional.hardtanh,...]``
decided ``[op=_refs.nn.functional.hardtanh,...]`` too (263 variants selected as
``mandatory_success`` ran as another variant's ``skip``). The family rule -- an
op is also known by its OpInfo ``name`` and a Python reference by the op it refers
to (``Variant.op_name``) -- stays where Torch Spyre's format defines ops by name:
``edits.ops`` and ``global.supported_ops`` (``config/decide.py``), and ``op__``
marks (``plugin/marks.py``). Torch Spyre's configs never write a bracket filter
(it is ootest's own form), so no config in its format changes meaning; a filter a
person wrote with a family name (``[op=div]`` for ``div.trunc_rounding``) now
matches no variant and is reported as a config name that matched no test.

Names in configs (see docs/config.md, "Test names"):

- ``Class::test_method`` / ``test_method``: the template method, or the
  parametrized name upstream generates before the device and dtype suffixes
  (``test_mean_3d_dim0_keepdim``, ``test_scalar_support_add``), as Torch Spyre's
  configs use them;
- ``Class::test_method[op=add,dtype=float32]``: single variants;
- names copied from a pytest listing (``TestFooPRIVATEUSE1::test_x_emu_float32``,
  or ``TestFooEMU::...``): aliases of that variant;
- ``re:<regex>``: searched in the variant ID and ``Class::name`` (all name forms);
- anything else is a pattern in the style of Torch Spyre's configs
  (``TestOps::test_min_keepdim.*``, ``TestOps::test_(sqrt|rsqrt).*``) and must
  match one of those names in full; a pattern that is not a valid regular
  expression but has ``*``/``?`` is a shell-style glob (``*TestModule*::test_forward``).

Note [Linear-time names]
A config is data from anyone who can open a pull request, and its patterns are
matched against every collected variant: ``re:(a+)+$`` took 2.5 s per match with
Python's backtracking engine. Every pattern must therefore be valid RE2 syntax (no
backreferences, no lookaround) and is matched by RE2 (linear time), except patterns
with at most one quantifier applied to a single character, class or ``.`` (and no
group under it), which Python's ``re`` matches in O(n) per start position and about
ten times faster per call than RE2's Python binding, provided there is at most
one ``|`` (alternatives multiply the ways to try). That covers the common forms
(``TestOps::test_min_keepdim.*``, ``TestOps::test_(sqrt|rsqrt).*``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import re2

AXES = ("op", "dtype", "module")
_META = re.compile(r"[.*+?()\[\]|^$\\{}]")  # a name with these is a pattern
_PLAIN = re.compile(r"^(?:(?P<cls>[A-Za-z_][A-Za-z0-9_]*)::)?(?P<meth>[A-Za-z_][A-Za-z0-9_]*)$")


# The most common name of a large config, 'Class::method[k=v,...]', in one match, as
# NamePattern.parse's general path reads it: not 're:', no surrounding space, one '='
# in each part, no empty part (anything else takes the general path).
_PAIR = r"[^\[\]=,\s]+=[^\[\]=,\s]+"
_FILTERED = re.compile(
    rf"(?!re:)(?:([A-Za-z_][A-Za-z0-9_]*)::)?([A-Za-z_][A-Za-z0-9_]*)\[({_PAIR}(?:,{_PAIR})*)\]"
).fullmatch


@functools.lru_cache(maxsize=4096)
def _filters(body: str) -> tuple[tuple[str, str], ...]:
    """The pairs of a filter body matched by _FILTERED; the same few bodies
    (``dtype=float32``) recur across thousands of names: built once, shared."""
    return tuple(
        (key, value) for key, _, value in (part.partition("=") for part in body.split(","))
    )


class NameSyntaxError(ValueError):
    pass


class Regex(Protocol):
    """What NamePattern needs of a compiled pattern (``re`` and RE2 both provide it)."""

    def search(self, text: str) -> Any: ...

    def fullmatch(self, text: str) -> Any: ...


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print every rejected pattern to stderr


def compile_name_regex(text: str) -> Regex:
    """A pattern of a config name, compiled for linear-time matching (Note
    [Linear-time names]). Raises ``re.error`` for invalid syntax and
    :class:`NameSyntaxError` for syntax only a backtracking engine runs."""
    rx = re.compile(text)  # invalid syntax: Python's error text, as before
    try:
        linear: Regex = re2.compile(text, _RE2_OPTIONS)
    except re2.error as e:
        why = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise NameSyntaxError(
            "expected a regular expression without backreferences or lookaround (names are "
            f"matched in linear time); found {text!r} ({why})"
        ) from None
    return rx if _backtracks_little(text) else linear


def _backtracks_little(text: str) -> bool:
    """At most one ``|`` (``(a|a)(a|a)...`` tries 2**k ways) and at most one of
    ``* + ? {``, not after a group: then a backtracking engine does O(n) work per
    start position. Counted on the raw text (escaped or in a class too), which
    only sends more patterns to RE2."""
    if text.count("|") > 1:
        return False
    quantifiers = [i for i, c in enumerate(text) if c in "*+?{"]
    if not quantifiers:
        return True
    return len(quantifiers) == 1 and text[quantifiers[0] - 1 : quantifiers[0]] != ")"


def glob_to_regex(text: str) -> str:
    """A shell-style glob as a regular expression for fullmatch (``*``, ``?``,
    ``[...]``, ``[!...]``), without the lookarounds :func:`fnmatch.translate` emits."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + (1 if text[i : i + 1] == "!" else 0)
            j += 1 if text[j : j + 1] == "]" else 0
            end = text.find("]", j)
            if end < 0:
                out.append(re.escape(c))
                continue
            body = text[i:end].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
    return "".join(out)  # names hold no newline: no (?s) needed


@dataclass(frozen=True)
class Variant:
    """What ootest knows about one collected test variant."""

    file: str  # path as written relative to the run (display only)
    cls: str  # template class
    method: str  # template method
    op: str | None = None  # OpInfo full name, e.g. div.floor_rounding
    # OpInfo name (div), or the op a Python reference refers to (gcd for _refs.gcd):
    # the family capability lists and marks use, never a filter (Note [Exact op filters])
    op_name: str | None = None
    dtypes: tuple[str, ...] = ()
    module: str | None = None
    params: tuple[tuple[str, str], ...] = ()
    device_variant: bool = False  # instantiated for the privateuse1 device
    name: str = ""  # generated name without device/dtype suffixes, if not the method
    # Names as pytest prints them (TestFooPRIVATEUSE1::test_x_emu_float32): aliases
    # that config names copied from a pytest listing may use; never the identity.
    gen_name: str = field(default="", compare=False)
    cls_aliases: tuple[str, ...] = field(default=(), compare=False)

    # Derived once at construction (read for every candidate name of every variant).
    names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The method names config names may use: template, then parametrized."""
    axes: dict[str, str] = field(init=False, repr=False, compare=False)
    """The variant's axes in canonical order: op, dtype (joined), module, params."""

    classes: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The template class, then the generated class names that stand for it."""

    def __post_init__(self) -> None:
        names = tuple(dict.fromkeys(n for n in (self.method, self.name, self.gen_name) if n))
        object.__setattr__(self, "names", names or (self.method,))
        object.__setattr__(self, "classes", (self.cls, *self.cls_aliases))
        axes: dict[str, str] = {}
        if self.op is not None:
            axes["op"] = self.op
        if self.dtypes:
            axes["dtype"] = ",".join(self.dtypes)
        if self.module is not None:
            axes["module"] = self.module
        if self.params:
            axes.update(sorted(self.params))
        object.__setattr__(self, "axes", axes)

    def index_keys(self) -> tuple[tuple[str, str], ...]:
        """(axis, value) pairs a variant filter may name, each once; see
        ResolvedFile.candidates."""
        keys = list(self.axes.items())
        keys += [("dtype", d) for d in self.dtypes]
        return tuple(dict.fromkeys(keys))

    @cached_property
    def test_id(self) -> str:
        """``TemplateClass::test_method[axes]`` (no file)."""
        axes = self.axes
        body = ",".join(f"{k}={v}" for k, v in axes.items())
        name = f"{self.cls}::{self.method}" if self.cls else self.method
        return name + (f"[{body}]" if body else "")

    @cached_property
    def variant_id(self) -> str:
        return f"{self.file}::{self.test_id}"


@dataclass(frozen=True, slots=True)
class NamePattern:
    """One compiled config name (slots: one object per name for the cyclic GC
    to walk, not two; see Note [GC-light config] in config/yamlread.py)."""

    raw: str
    kind: str  # "exact" | "bare" | "regex" | "pattern"
    cls: str | None = None
    method: str | None = None
    regex: Regex | None = None
    filters: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, raw: str) -> NamePattern:
        fm = _FILTERED(raw)
        if fm is not None:  # 'Class::method[k=v,...]', the common form of large configs
            name, method, body = fm.groups()
            return cls(raw, "exact" if name else "bare", name, method, None, _filters(body))
        return cls._parse(raw)

    @classmethod
    def _parse(cls, raw: str) -> NamePattern:
        """Every form of name (``parse`` takes a shortcut for the most common one)."""
        text = raw.strip()
        pm = None if text.endswith("]") else _PLAIN.match(text)
        if pm is not None:  # most names: Class::method or method
            name = pm.group("cls")
            return cls(raw, "exact" if name else "bare", cls=name, method=pm.group("meth"))
        filters: tuple[tuple[str, str], ...] = ()
        if text.startswith("re:"):
            try:
                rx = compile_name_regex(text[3:])
            except re.error as e:
                raise NameSyntaxError(
                    f"expected a valid regular expression after 're:'; found {text[3:]!r} ({e})"
                ) from None
            return cls(raw, "regex", regex=rx)
        # a variant filter: the last [...] (holding no bracket) that ends the name
        start = text.rfind("[") if text.endswith("]") else -1
        body = text[start + 1 : -1] if start >= 0 else "]"
        if "]" in body and _META.search(text):
            return cls._pattern(raw, text)
        if "]" not in body:
            text = text[:start]
            pairs: list[tuple[str, str]] = []
            for part in body.split(","):
                key, eq, value = part.partition("=")
                key, value = key.strip(), value.strip()
                if not eq and key and pairs:
                    # Note [Dtype tuples in names]: a variant of several dtypes at once
                    # has the ID '...[dtype=complex64,float64]' (its axis joined with
                    # ','), so a part without '=' continues the value before it
                    pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]},{key}")
                    continue
                if not eq or not key:
                    if not (key or eq or value):
                        continue  # an empty part: "[op=add,]"
                    raise NameSyntaxError(
                        f"expected 'key=value' pairs in the variant filter of {raw!r}; "
                        f"found {part.strip()!r}"
                    )
                pairs.append((key, value))
            filters = tuple(pairs)
        pm = _PLAIN.match(text)
        if not pm:
            raise NameSyntaxError(
                f"expected 'Class::test_method', 'test_method' or 're:<regex>'; found {raw!r}"
            )
        kind = "exact" if pm.group("cls") else "bare"
        return cls(raw, kind, cls=pm.group("cls"), method=pm.group("meth"), filters=filters)

    @classmethod
    def _pattern(cls, raw: str, text: str) -> NamePattern:
        try:
            rx = compile_name_regex(text)
        except re.error as e:
            if "*" not in text and "?" not in text:
                raise NameSyntaxError(
                    f"expected a pattern matching the whole 'Class::test_method' "
                    f"(a regular expression); found {raw!r} ({e})"
                ) from None
            rx = compile_name_regex(glob_to_regex(text))
        return cls(raw, "pattern", regex=rx)

    @property
    def specificity(self) -> int:
        """Higher wins when several entries match one variant."""
        base = {"regex": 0, "pattern": 0, "bare": 1, "exact": 2}[self.kind]
        return base + (10 if self.filters else 0)

    def matches_template(self, cls: str, method: str) -> bool:
        """Whether the name addresses the template test ``cls::method`` (filters aside)."""
        if self.kind == "regex":
            assert self.regex is not None
            return self.regex.search(f"{cls}::{method}") is not None
        if self.kind == "pattern":
            assert self.regex is not None
            return bool(self.regex.fullmatch(f"{cls}::{method}") or self.regex.fullmatch(method))
        return self.method == method and self.cls in (None, cls)

    def matches(self, v: Variant) -> bool:
        kind = self.kind
        if kind == "regex":
            assert self.regex is not None
            search = self.regex.search
            return search(v.test_id) is not None or any(
                search(f"{c}::{n}") is not None for c in v.classes for n in v.names
            )
        if kind == "pattern":
            assert self.regex is not None
            full = self.regex.fullmatch
            return any(full(n) for n in v.names) or any(
                full(f"{c}::{n}") for c in v.classes for n in v.names
            )
        if self.method not in v.names or (self.cls is not None and self.cls not in v.classes):
            return False
        if not self.filters:
            return True
        axes = v.axes
        for key, value in self.filters:
            have = axes.get(key)
            if have is None:
                return False
            if value == have:
                continue
            # Note [Exact op filters]: 'op=' is the full name, never the family
            if key != "dtype" or value not in v.dtypes:
                return False
        return True


def inexact_ids(variants: Iterable[Variant]) -> dict[str, str]:
    """The variants of one collection whose ID, used as a config name, does not
    select exactly them (Note [Variant ID grammar]), each with why: it does not
    parse or match back, another variant has the same ID, or it also selects
    another variant of the test (``dtype=float32`` is also in a
    ``dtype=float32,float64`` variant; ``op=`` is exact, Note [Exact op filters]).
    Linear in the variants (no pairwise matching)."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    groups: dict[tuple[str, str], list[Variant]] = {}
    for v in variants:
        tid = v.test_id
        seen[tid] = seen.get(tid, 0) + 1
        groups.setdefault((v.cls, v.method), []).append(v)
        try:
            ok = NamePattern.parse(tid).matches(v)
        except NameSyntaxError as e:
            out[tid] = f"does not parse as a name: {e}"
            continue
        if not ok:
            out[tid] = "does not select its own variant"
    for tid, n in seen.items():
        if n > 1:
            out.setdefault(tid, f"{n} variants have this ID")
    for group in groups.values():
        in_tuple: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        for w in group:
            if len(w.dtypes) > 1:
                rest = _without(w.axes, "dtype")
                in_tuple.update((d, rest) for d in w.dtypes)
        if not in_tuple:
            continue
        for v in group:
            if len(v.dtypes) == 1 and (v.dtypes[0], _without(v.axes, "dtype")) in in_tuple:
                out.setdefault(v.test_id, f"dtype={v.dtypes[0]} is also in a dtype tuple")
    return out


def op_filter_note(stale: Iterable[str]) -> str | None:
    """The line a list of config names that matched no test ends with when some
    name an op in a variant filter (Note [Exact op filters]): a filter written with
    an OpInfo family before ``op=`` was exact (``[op=div]`` for its variants) is
    one of them now. Parses each name once: linear in the names listed."""
    n = 0
    for raw in stale:
        try:
            if any(key == "op" for key, _ in NamePattern.parse(raw).filters):
                n += 1
        except NameSyntaxError:
            continue
    if not n:
        return None
    return (
        f"{n} of them name an op in a variant filter: op= is the OpInfo's full name, "
        "exactly as the variant ID writes it (op=div.trunc_rounding, op=_refs.gcd), not "
        "its family (op=div); edits.ops and supported_ops keep the family (docs/config.md)"
    )


def _without(axes: dict[str, str], key: str) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in axes.items() if k != key)


def reason_message(reason: str, issue: str | None, origin: str) -> str:
    """How an outcome's reason is shown: ``reason [issue] (file:line)``."""
    text = reason
    if issue:
        text += f" [{issue}]"
    if origin:
        text += f" ({origin})"
    return text
