"""Per-variant fingerprints and their components (pure functions).

Note [Variant fingerprints]
A variant's fingerprint is the digest of its *components*, each a digest of
one thing the variant's behaviour depends on:

- ``body``: the template method's normalized AST, without its decorators and
  docstring (so reformatting, comments and docstrings do not count);
- ``decorator``: the method's decorators, its class's (and in-file base
  classes') decorators and the ``instantiate_*`` call of its class;
- ``helper:<symbol>``: each module-level name of the file the test reaches,
  transitively through helper functions (``helper:_OPS``), and each member of
  its class or in-file base classes it reaches through ``self.``/``cls.``, plus
  ``setUp``/``tearDown`` and the class attributes (``exact_dtype = True``), which
  act on every test of the class (``helper:TestFoo.setUp``);
- ``import``: the file's module-level import statements;
- ``opinfo:<name>`` / ``moduleinfo:<name>``: the fingerprint of the OpInfo /
  ModuleInfo entry of an ``@ops`` / ``@modules`` variant (``unknown`` when no
  indexed database has it).

The components are stored, so ``ootest index diff`` says which of them changed.
A method inherited from a class outside the file has the component
``body = "unresolved"``: what is not in the index cannot change it.

Note [Entry lookup]
Several databases may hold an entry of one name (``add`` is in ``op_db`` and
in ``njt_op_db``, and in a local database a test tree defines). A variant's
entry is looked up first in the databases whose module the test file imports
(in-tree modules transitively), in the order they were given, then in the
installed torch's databases in their fixed order, then in the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ootest.memory._hashing import digest
from ootest.memory._static import IMPLICIT_HOOKS, FileFacts, Func, Klass

Components = dict[str, str]
_CMI = "torch.testing._internal.common_methods_invocations"
#: The installed torch's test databases, in lookup order (see Note [Entry lookup]).
TORCH_DBS = (
    f"{_CMI}:op_db",
    f"{_CMI}:python_ref_db",
    f"{_CMI}:foreach_unary_op_db",
    f"{_CMI}:foreach_binary_op_db",
    f"{_CMI}:foreach_pointwise_op_db",
    f"{_CMI}:foreach_reduce_op_db",
    f"{_CMI}:foreach_other_op_db",
    "torch.testing._internal.common_modules:module_db",
    "torch.testing._internal.opinfo.definitions.nested:njt_op_db",
    "torch.testing._internal.hop_db:hop_db",
    "torch.testing._internal.autograd_function_db:autograd_function_db",
    "torch.testing._internal.custom_op_db:custom_op_db",
)
UNRESOLVED = "unresolved"
UNKNOWN = "unknown"


def template_components(facts: FileFacts, cls: str, method: str) -> Components:
    """The components of template test ``cls::method`` of a file (Note [Variant fingerprints])."""
    comps: Components = {"import": facts.import_digest}
    mro = class_chain(facts, cls) if cls else []
    func = _find_method(facts, mro, cls, method)
    if func is None:
        comps["body"] = UNRESOLVED
        return comps
    comps["body"] = func.body
    comps["decorator"] = digest(
        [
            func.decorated,
            [[str(d) for d in k.decorators] for k in mro],
            [i.digest for i in mro[0].instantiations] if mro else [],
        ]
    )
    names = list(func.refs)
    for k in mro:
        names += [r for d in k.decorators for r in d.refs]
    if mro:
        names += [r for i in mro[0].instantiations for r in i.refs]
    # Class attributes (exact_dtype, precision ...) configure the framework around
    # every test of the class, like setUp: reached without being named.
    class_attrs = [m.name for k in mro for m in k.members if m.kind == "assign"]
    attrs = [*func.attrs, *IMPLICIT_HOOKS, *class_attrs] if mro else []
    comps.update(_helpers(facts, mro, names, attrs))
    return comps


def class_chain(facts: FileFacts, name: str) -> list[Klass]:
    """``name`` and its in-file base classes, depth first, each once."""
    out: list[Klass] = []
    stack = [name]
    while stack:
        k = facts.klass(stack.pop(0))
        if k is None or k in out:
            continue
        out.append(k)
        stack[0:0] = [b.rsplit(".", 1)[-1] for b in k.bases]
    return out


def _find_method(facts: FileFacts, mro: list[Klass], cls: str, method: str) -> Func | None:
    if not cls:
        return next((f for f in facts.functions if f.name == method), None)
    for k in mro:
        for m in k.methods:
            if m.name == method:
                return m
    return None


def _test_classes(facts: FileFacts) -> set[str]:
    return {k.name for k in facts.classes if k.methods or k.instantiations}


def _helpers(facts: FileFacts, mro: list[Klass], names: list[str], attrs: list[str]) -> Components:
    skip = _test_classes(facts)
    out: Components = {}
    seen_names: set[str] = set()
    seen_attrs: set[str] = set()
    while names or attrs:
        if names:
            name = names.pop()
            if name in seen_names or name in skip:
                continue
            seen_names.add(name)
            sym = facts.symbol(name)
            if sym is not None:
                out[f"helper:{name}"] = sym.digest
                names.extend(sym.refs)
            continue
        attr = attrs.pop()
        if attr in seen_attrs:
            continue
        seen_attrs.add(attr)
        for k in mro:
            member = next((m for m in k.members if m.name == attr), None)
            if member is not None:
                out[f"helper:{k.name}.{attr}"] = member.digest
                names.extend(member.refs)
                attrs.extend(member.attrs)
                break
    return out


# ---------------------------------------------------------------- entries
@dataclass(frozen=True)
class EntryRef:
    db: str
    name: str
    type: str  # opinfo | moduleinfo
    fingerprint: str

    @property
    def key(self) -> str:
        return f"{self.db}:{self.name}"


class EntryIndex:
    """Entries by name, looked up per Note [Entry lookup]."""

    def __init__(self, entries: Iterable[EntryRef], torch_dbs: Sequence[str]) -> None:
        self.by_name: dict[tuple[str, str], list[EntryRef]] = {}
        for e in entries:
            self.by_name.setdefault((e.type, e.name), []).append(e)
        self.torch_order = {db: i for i, db in enumerate(torch_dbs)}

    def find(self, type_: str, name: str, preferred: Sequence[str]) -> EntryRef | None:
        found = self.by_name.get((type_, name))
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        pref = {db: i for i, db in enumerate(preferred)}
        rank = len(pref) + len(self.torch_order)

        def order(e: EntryRef) -> tuple[int, str]:
            if e.db in pref:
                return (pref[e.db], e.db)
            return (len(pref) + self.torch_order.get(e.db, rank), e.db)

        return min(found, key=order)


def preferred_dbs(dbs: Sequence[str], imported_modules: set[str]) -> list[str]:
    """The databases (``module:attr``) whose module a test file imports."""
    return [db for db in dbs if db.rpartition(":")[0] in imported_modules]


def variant_components(
    template: Mapping[str, str], op: str | None, module: str | None, entry_fp: str | None
) -> Components:
    """A template's components plus the fingerprint of the variant's entry."""
    comps = dict(template)
    if op is not None:
        comps[f"opinfo:{op}"] = entry_fp or UNKNOWN
    if module is not None:
        comps[f"moduleinfo:{module}"] = entry_fp or UNKNOWN
    return comps


def fingerprint(components: Mapping[str, str]) -> str:
    return digest(dict(components))


def reasons(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The components that differ (added and removed ones too), sorted by kind."""
    keys = set(old) | set(new)
    changed = [k for k in keys if old.get(k) != new.get(k)]
    return sorted(changed, key=reason_order)


#: what a diff says changed: the fingerprint's components, and the device flag
#: (``device``: the class became, or stopped being, device-generic)
REASON_KINDS = ("opinfo", "moduleinfo", "body", "decorator", "helper", "import", "device")


def reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def reason_order(reason: str) -> tuple[int, str]:
    kind = reason_kind(reason)
    return (REASON_KINDS.index(kind) if kind in REASON_KINDS else len(REASON_KINDS), reason)
