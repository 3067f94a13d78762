"""Which declared calls a test gets, and how their variants are named (no torch).

Note [Model variant names]
An injected op entry is one variant of the ``@ops`` test it is listed under. Its
op axis is the entry's ``name`` (``torch.mul``: config names, marks and capability
gates written for it apply) and its ``entry`` axis says which entry it is: the
suffix of the entry's tag that names it (``torch.mul.1`` -> ``1``,
``torch.mul.2_spyre`` -> ``2_spyre``, as Torch Spyre's generator tags calls) or, for
an untagged entry, ``#`` and its position in the include list. So
``test_model_ops_db[op=torch.mul,dtype=bfloat16,entry=1]``. A module entry's name
(``GraniteRMSNorm_4096``) is already unique and is its module axis. Generated test
names (which upstream requires to be unique per class) get the same suffix.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ootest.config.calls import CallSpec, dtype_name
from ootest.config.model import ModuleInclude, OpInclude, TestSuiteConfig

DEFAULT_SEED = 0
_FLOATING = ("float16", "bfloat16", "float32", "float64")
_NAME_CHARS = re.compile(r"\W+")
_MAX_AXIS = 40  # longer axis values would be shortened in variant IDs


@dataclass(frozen=True)
class ModelOp:
    """One declared op call, as injected into one test."""

    ref: OpInclude
    entry: str  # the variant's entry axis (Note [Model variant names])
    test_name: str  # unique part of the generated test name
    dtype: str  # the variant's dtype axis: the first tensor's dtype
    origin: str  # file:line of the entry


@dataclass(frozen=True)
class ModelModule:
    """One declared module (built once, called with each of its forward inputs)."""

    ref: ModuleInclude
    test_name: str
    dtype: str
    origin: str


@dataclass(frozen=True)
class Inputs:
    """How a config's model inputs are generated."""

    seed: int
    trace_device: str | None  # the device most declared tensors were on


def declared_dtype(calls: Iterable[CallSpec]) -> str:
    """The dtype a call's variant is named by (and its precision looked up by): its
    first floating tensor's dtype (an embedding's table, not its indices), else its
    first tensor's, else a ``dtype`` argument, else float32."""
    calls = list(calls)
    names = [dtype_name(t.dtype or "float32") or "float32" for c in calls for t in c.tensors()]
    names = [n for n in names if n in _FLOATING] + names
    if names:
        return names[0]
    for c in calls:
        arg = c.kwargs.get("dtype")
        if arg is not None and isinstance(arg.value, str) and dtype_name(arg.value):
            return dtype_name(arg.value) or "float32"
    return "float32"


def _ident(text: str) -> str:
    return _NAME_CHARS.sub("_", text).strip("_") or "x"


class _Unique:
    """Unique strings: the wanted one, else ``<wanted><sep><n>`` (n counted per wanted
    string, so many repeats cost no rescans)."""

    def __init__(self, sep: str) -> None:
        self.sep = sep
        self.used: set[str] = set()
        self.next: dict[str, int] = {}

    def take(self, wanted: str) -> str:
        name, n = wanted, self.next.get(wanted, 1)
        while name in self.used:
            n += 1
            name = f"{wanted}{self.sep}{n}"
        self.next[wanted] = n
        self.used.add(name)
        return name


def model_ops(refs: Iterable[tuple[int, OpInclude]]) -> list[ModelOp]:
    """The declared calls among ``(position in the include list, entry)``."""
    out: list[ModelOp] = []
    names = _Unique("_")
    entries: dict[str, _Unique] = {}  # per op: the op axis tells ops apart
    for index, ref in refs:
        call = ref.sample_inputs_func
        if call is None:
            continue
        prefix = ref.name + "."
        tagged = [t[len(prefix) :] for t in ref.tags if t.startswith(prefix) and t != prefix]
        wanted = tagged[0] if tagged and len(tagged[0]) <= _MAX_AXIS else f"#{index}"
        entry = entries.setdefault(ref.name, _Unique("#")).take(wanted)
        test_name = names.take(_ident(f"{ref.name}_{entry}"))
        out.append(ModelOp(ref, entry, test_name, declared_dtype([call]), ref.origin))
    return out


def model_modules(refs: Iterable[ModuleInclude]) -> list[ModelModule]:
    out: list[ModelModule] = []
    names = _Unique("_")
    for ref in refs:
        if ref.module_path is None:
            continue
        fwd = (*(ref.forward_inputs or ()), ref.constructor_inputs)
        calls = [c for c in fwd if c is not None]
        dtype = declared_dtype(calls)
        out.append(ModelModule(ref, names.take(_ident(ref.name)), dtype, ref.origin))
    return out


def inputs_of(suite: TestSuiteConfig) -> Inputs:
    """The seed (``global.input_config.seed``, default 0) and the trace's device."""
    ic = suite.global_.input_config
    seed = ic.seed if ic is not None and ic.seed is not None else DEFAULT_SEED
    return Inputs(seed, trace_device(suite))


def trace_device(suite: TestSuiteConfig) -> str | None:
    """The device most declared tensors were recorded on (None: none says).

    That device stands for the device under test; tensors recorded elsewhere (the
    CPU tensors of a GPU trace) stay where they were (docs/model.md).
    """
    seen: Counter[str] = Counter()
    for f in suite.files:
        for t in f.tests:
            e = t.edits
            if e is None:
                continue
            calls = [o.sample_inputs_func for o in (e.ops.include if e.ops else ())]
            for m in e.modules.include if e.modules else ():
                calls += [m.constructor_inputs, *(m.forward_inputs or ())]
            for c in calls:
                for spec in c.tensors() if c is not None else ():
                    if spec.device:
                        seen[spec.device] += 1
    return seen.most_common(1)[0][0] if seen else None
