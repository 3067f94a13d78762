"""Moved variants: a removed variant and an added one that are the same test.

Note [Moves]
Upstream moves tests without changing them: a device-generic class split into
``TestFooCPU``/``TestFooDevice``, a test moved to another file, a
parametrization or its values renamed. By ID alone such a variant is removed
and another added, and everything known about it (decisions, observed results,
a person's entry) would start from nothing. ``ootest index diff`` therefore
pairs removed variants with added ones that are the same test:

1. **templates**: an added variant's template test (``file::Class::method``) is
   paired with a removed one's whose ``body`` component is the same digest (the
   method's normalized AST, its name included: the same code), preferring the
   same class name, then the same file; each template pairs once. A body that is
   ``unresolved`` (inherited from outside the file) pairs with nothing: nothing
   says it is the same code.
2. **variants** of a template pair: the same axes (``[dtype=float32]``) first;
   then the same inputs under other names: each axis key with the same value,
   in any order, a ``subtest(3, name="three")``'s name read as the value it
   names (the method's decorators on each side say which), so a renamed subtest
   is a move. Nothing less pairs: not the same values under other keys or as a
   multiset (``[m=1,n=64]`` is not ``[m=64,n=1]``), not the one left on each
   side (``[n=2]`` is not ``[n=3]``): two different inputs would share one
   history, so they are one removed and one added. A dtype is an input:
   ``dtype=float32`` never pairs with ``dtype=float64``. A renamed argument
   changes the body: no move.

A pair is a move. What else changed is said as reasons, compared without the
identity that moved: helpers of the class are compared by member name
(``TestFoo.setUp`` and ``TestFooDevice.setUp``), the ``decorator`` component by
the method's and its class's decorators (the ``instantiate_*`` call names the
class and may limit other devices: it does not matter to a variant that exists
on the device on both sides; for a renamed variant, the decorators that make
the variants, ``@parametrize``/``@dtypes``/``@ops``/``@modules``, are left out:
a rename changes their text, and the pairing compared the values they make
for this variant, which are the same),
``import`` only within one file (another file imports other names; what the
test reaches of them is in its helpers), and the device flag (``device``: the
class became, or stopped being, device-generic). A move without reasons is the
same test under another name: ``select run --since`` decides it again from this
run's sources, its history carried; after a move with reasons that history
decides nothing until it runs again (Note [History across changes]).
"""

from __future__ import annotations

import ast
import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ootest.memory._fingerprint import UNRESOLVED, reason_order, variant_components
from ootest.memory._ids import axes_of, file_of, template_of
from ootest.memory._store import chunks


@dataclass(frozen=True)
class Moved:
    old: str
    new: str
    #: what changed besides the identity (empty: the same test under another name)
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Side:
    """What one index knows of some variants and their templates."""

    variants: dict[str, tuple[Any, ...]]  # id -> (op, module, entry_fp, device_variant)
    templates: dict[str, dict[str, str]]  # template key -> components
    methods: dict[str, list[str]]  # template key -> the method's decorators, one a line
    classes: dict[str, str]  # template key -> its class's decorators


def _read(con: sqlite3.Connection, ids: Sequence[str]) -> _Side:
    variants: dict[str, tuple[Any, ...]] = {}
    for part in chunks(sorted(ids)):
        marks = ",".join("?" * len(part))
        for vid, op, module, entry_fp, device in con.execute(
            "SELECT id, op, module, entry_fp, device_variant FROM main.variants "
            f"WHERE id IN ({marks})",
            part,
        ):
            variants[str(vid)] = (op, module, entry_fp, bool(device))
    keys = sorted({template_of(v) for v in variants})
    templates: dict[str, dict[str, str]] = {}
    method_decos: dict[str, str] = {}
    classes: set[tuple[str, str]] = set()
    for part in chunks(keys):
        marks = ",".join("?" * len(part))
        for key, comps in con.execute(
            f"SELECT key, components FROM main.templates WHERE key IN ({marks})", part
        ):
            templates[str(key)] = json.loads(comps)
        for key, decos in con.execute(
            f"SELECT key, decorators FROM main.tests WHERE key IN ({marks})", part
        ):
            method_decos[str(key)] = str(decos)
    for key in keys:
        file, _, rest = key.partition("::")
        if "::" in rest:
            classes.add((file, rest.partition("::")[0]))
    class_decos: dict[tuple[str, str], str] = {}
    for file, cls in sorted(classes):
        row = con.execute(
            "SELECT decorators FROM main.classes WHERE file = ? AND name = ?", (file, cls)
        ).fetchone()
        class_decos[(file, cls)] = str(row[0]) if row else "[]"
    methods = {k: [d for d in method_decos.get(k, "").splitlines() if d] for k in keys}
    classes_of = {k: class_decos.get((file_of(k), _class_of(k)), "[]") for k in keys}
    return _Side(variants, templates, methods, classes_of)


def _class_of(key: str) -> str:
    rest = key.partition("::")[2]
    return rest.partition("::")[0] if "::" in rest else ""


def _pair_templates(
    old: Iterable[str], new: Iterable[str], o: _Side, n: _Side
) -> list[tuple[str, str]]:
    """(old template, new template) pairs with the same body (Note [Moves], 1)."""
    by_body: dict[str, list[str]] = defaultdict(list)
    for key in sorted(old):
        body = o.templates.get(key, {}).get("body")
        if body and body != UNRESOLVED:
            by_body[body].append(key)
    scored: list[tuple[tuple[int, int, str, str], str, str]] = []
    for key in sorted(new):
        body = n.templates.get(key, {}).get("body")
        if not body or body == UNRESOLVED:
            continue
        for cand in by_body.get(body, ()):
            score = (
                0 if _class_of(cand) == _class_of(key) else 1,
                0 if file_of(cand) == file_of(key) else 1,
                cand,
                key,
            )
            scored.append((score, cand, key))
    pairs: list[tuple[str, str]] = []
    used_old: set[str] = set()
    used_new: set[str] = set()
    for _, cand, key in sorted(scored):
        if cand in used_old or key in used_new:
            continue
        used_old.add(cand)
        used_new.add(key)
        pairs.append((cand, key))
    return pairs


def _pair_variants(
    removed: list[str], added: list[str], old_text: str = "", new_text: str = ""
) -> list[tuple[str, str, bool]]:
    """(removed, added, renamed) variants of one template pair that are the same
    variant (Note [Moves], 2); ``old_text``/``new_text``: the method's decorators on
    each side, where a subtest's name is read as the value it names."""
    pairs: list[tuple[str, str, bool]] = []

    def bracket(vid: str) -> str:
        return vid.partition("::")[2].partition("[")[2]

    left_r = sorted(removed)
    left_a = sorted(added)
    # the same axes
    by_axes = {bracket(a): a for a in left_a}
    rest_r = []
    for r in left_r:
        a = by_axes.pop(bracket(r), None)
        if a is None:
            rest_r.append(r)
        else:
            pairs.append((r, a, False))
    rest_a = sorted(by_axes.values())
    # the same inputs under other names: each axis key with the same value, a
    # subtest's name read as the value it names (``subtest(3, name="three")``)
    old_values, new_values = _subtests(old_text), _subtests(new_text)

    def inputs(vid: str, named: Mapping[str, str | None]) -> tuple[tuple[str, str], ...] | None:
        out = []
        for key, value in axes_of(vid):
            if value in named:
                if named[value] is None:
                    return None  # a name two subtests share: nothing says which
                value = f"subtest({named[value]})"
            out.append((key, value))
        return tuple(sorted(out))

    by_inputs: dict[tuple[tuple[str, str], ...], list[str]] = defaultdict(list)
    for a in rest_a:
        got = inputs(a, new_values)
        if got is not None:
            by_inputs[got].append(a)
    for r in rest_r:
        got = inputs(r, old_values)
        cands = by_inputs.get(got) if got is not None else None
        if cands and len(cands) == 1:
            pairs.append((r, cands.pop(), True))
    return pairs


def _subtests(text: str) -> dict[str, str | None]:
    """The values the ``subtest(..., name=N)`` calls of a method's decorators name:
    N -> the subtest's arguments as source (None: two subtests share N)."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        try:
            tree = ast.parse(line.removeprefix("@"), mode="eval")
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _callee(node.func) != "subtest":
                continue
            name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if not isinstance(name, ast.Constant) or not isinstance(name.value, str):
                continue
            rest = [ast.unparse(a) for a in node.args]
            rest += [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords if k.arg != "name"]
            value = ", ".join(rest)
            out[name.value] = value if out.get(name.value, value) == value else None
    return out


def _callee(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


#: decorators that make a test's variants (its inputs): a rename changes their text,
#: and the pairing compared what they make
_PARAMETRIZING = ("parametrize", "dtypes", "dtypesIf", "ops", "modules", "subtest")


def _decorators(side: _Side, key: str, renamed: bool) -> tuple[list[str], str]:
    method = side.methods.get(key, [])
    if renamed:
        method = [d for d in method if not d[1:].rsplit(".", 1)[-1].startswith(_PARAMETRIZING)]
    return method, side.classes.get(key, "[]")


def _portable(comps: Mapping[str, str], same_file: bool) -> dict[str, str]:
    """Components without the identity that moved (Note [Moves]): class members by
    member name, no ``decorator`` (compared apart) and, across files, no ``import``."""
    out: dict[str, str] = {}
    for key, value in comps.items():
        if key == "decorator" or (key == "import" and not same_file):
            continue
        kind, _, name = key.partition(":")
        if kind == "helper" and "." in name:
            key = f"helper:.{name.partition('.')[2]}"
        out[key] = value
    return out


def _reasons(old: str, new: str, o: _Side, n: _Side, renamed: bool) -> tuple[str, ...]:
    ov, nv = o.variants[old], n.variants[new]
    same_file = file_of(old) == file_of(new)
    before = _portable(
        variant_components(o.templates.get(template_of(old), {}), *ov[:3]), same_file
    )
    after = _portable(variant_components(n.templates.get(template_of(new), {}), *nv[:3]), same_file)
    named = {}  # a portable key -> the new (else old) component's name, to report
    for comps in (o.templates.get(template_of(old), {}), n.templates.get(template_of(new), {})):
        for key in comps:
            kind, _, name = key.partition(":")
            if kind == "helper" and "." in name:
                named[f"helper:.{name.partition('.')[2]}"] = key
    out = [named.get(k, k) for k in set(before) | set(after) if before.get(k) != after.get(k)]
    if _decorators(o, template_of(old), renamed) != _decorators(n, template_of(new), renamed):
        out.append("decorator")
    if ov[3] != nv[3]:
        out.append("device")
    return tuple(sorted(set(out), key=reason_order))


def find_moves(
    o: sqlite3.Connection, n: sqlite3.Connection, removed: Sequence[str], added: Sequence[str]
) -> list[Moved]:
    """The moves among ``removed`` (IDs of the old index ``o``) and ``added`` (of the
    new index ``n``), sorted by new ID (Note [Moves])."""
    if not removed or not added:
        return []
    os_, ns = _read(o, removed), _read(n, added)
    r_of: dict[str, list[str]] = defaultdict(list)
    a_of: dict[str, list[str]] = defaultdict(list)
    for r in removed:
        r_of[template_of(r)].append(r)
    for a in added:
        a_of[template_of(a)].append(a)
    out: list[Moved] = []
    for ot, nt in _pair_templates(r_of, a_of, os_, ns):
        texts = "\n".join(os_.methods.get(ot, [])), "\n".join(ns.methods.get(nt, []))
        for r, a, renamed in _pair_variants(r_of[ot], a_of[nt], *texts):
            if r in os_.variants and a in ns.variants:
                out.append(Moved(r, a, _reasons(r, a, os_, ns, renamed)))
    return sorted(out, key=lambda m: m.new)
