"""``edits.*.include``: variants upstream did not instantiate, added for the device.

Torch Spyre's format defines ``include`` as *injection*: ``edits.ops.include``
adds an OpInfo to the test's ``@ops`` list (e.g. an op that a pre-filtered list
such as ``binary_ufuncs_with_references`` leaves out), ``edits.modules.include``
a ModuleInfo to its ``@modules`` list, and ``edits.dtypes.include`` a dtype to
its ``@dtypes`` set or ``@ops(allowed_dtypes=...)``. Upstream has no hook that
adds variants (``op_allowlist`` and ``op_overrides`` only filter and decorate),
so the parametrizers are wrapped, only when a config has such an include:

- ``ops._parametrize_test`` and ``modules._parametrize_test`` get the extra
  OpInfos/ModuleInfos (looked up by name in ``op_db``/``module_db``; those
  databases are read, never changed) and the extra allowed dtypes for the
  duration of one call, for the privateuse1 device class only. ``op_db`` is
  imported only to look up an included op, and ``common_modules`` (which imports
  ``op_db`` too) only when an entry includes a module: a config that includes
  dtypes alone (Torch Spyre's ``test_view_ops``) costs a file that uses neither
  database nothing (0.5 s a process otherwise);
- ``PrivateUse1TestBase._get_dtypes`` returns the ``@dtypes`` set plus the
  extra dtypes for the tests the config names.

The outcome of an injected variant is decided like any other (the include also
lets it past the capability gates). Tests are matched by template class and
method, since the variant does not exist yet.

Model-derived entries (docs/model.md) are injected the same way: an
``ops.include`` entry with ``sample_inputs_func`` is one variant of the ``@ops``
test with exactly the declared call (an ``ootest.model.infos.ModelOpInfo``; its
dtype is the call's, whatever dtypes the test allows, and an ``entry`` axis says
which entry it is, see Note [Model variant names]); a ``modules.include`` entry
with ``module_path`` one ModuleInfo whose class is imported at collection: a class
that cannot be imported gives variants skipped with the import error, never a
collection error. The ``tags`` of a declared call or module ride on its generated
test function (:data:`CALL_TAGS`); the plugin makes them marks ``tag__<tag>`` like
a test entry's tags, so ``-m 'not tag__constant'`` leaves out Torch Spyre's calls
tagged ``constant``.
"""

from __future__ import annotations

import functools
import sys
import unittest
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ootest.config.when import Context, holds

# Attribute of a generated test function: the tags of the declared call or module it
# runs. cdt's instantiation wraps it with functools.wraps, which copies __dict__, so
# the collected item's function carries it too.
CALL_TAGS = "__ootest_call_tags__"

if TYPE_CHECKING:  # pydantic loads only when a config must be read (see _core)
    from ootest.config.model import ModuleInclude, OpInclude
    from ootest.config.resolved import Config
    from ootest.model.entries import Inputs, ModelModule, ModelOp


def _norm_module(name: str) -> str:
    return name.removeprefix("torch.")


@dataclass
class Extra:
    ops: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    model_ops: list[ModelOp] = field(default_factory=list)  # declared calls
    model_modules: list[ModelModule] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ops or self.modules or self.dtypes or self.model_ops or self.model_modules)


@dataclass
class Injector:
    cfg: Config
    backend: str
    ctx: Context
    _cache: dict[tuple[str, str, str], Extra] = field(default_factory=dict)
    _inputs: Inputs | None = None

    @property
    def inputs(self) -> Inputs:
        """Seed and trace device of the config's model entries (once)."""
        if self._inputs is None:
            from ootest.model.entries import inputs_of

            self._inputs = inputs_of(self.cfg.suite)
        return self._inputs

    @staticmethod
    def needed(cfg: Config) -> bool:
        for rf in cfg.files:
            for entry, _ in rf.patterns:
                e = entry.edits
                if e is not None and any(
                    x is not None and x.include for x in (e.ops, e.dtypes, e.modules)
                ):
                    return True
        return False

    @property
    def modules(self) -> bool:
        """Whether an entry includes a ModuleInfo: only then is ``common_modules``
        (and with it ``common_methods_invocations``, 0.5 s) imported and wrapped."""
        for rf in self.cfg.files:
            for entry, _ in rf.patterns:
                e = entry.edits
                if e is not None and e.modules is not None and e.modules.include:
                    return True
        return False

    def is_device(self, device_cls: Any) -> bool:
        return getattr(device_cls, "device_type", None) in ("privateuse1", self.backend)

    def extra(self, test: Any, cls_name: str | None) -> Extra:
        """What the config adds to this template test (empty when nothing)."""
        method = getattr(test, "__name__", "")
        if cls_name is None:
            cls_name = getattr(test, "__qualname__", "").rpartition(".")[0].rpartition(".")[2]
        mod = sys.modules.get(getattr(test, "__module__", ""), None)
        file = getattr(mod, "__file__", None) or ""
        key = (file, cls_name, method)
        if key in self._cache:
            return self._cache[key]
        out = Extra()
        rf = self.cfg.file_for(Path(file)) if file else None
        calls: list[tuple[int, OpInclude]] = []
        modules: list[ModuleInclude] = []
        for entry, patterns in rf.patterns if rf is not None else ():
            e = entry.edits
            if e is None or not holds(entry.when, self.ctx):
                continue
            if not any(p.matches_template(cls_name, method) for p in patterns):
                continue
            for i, op in enumerate(e.ops.include if e.ops else ()):
                if op.sample_inputs_func is not None:
                    calls.append((i, op))
                else:
                    out.ops.append(op.name)
            for ref in e.modules.include if e.modules else ():
                if ref.module_path is not None:
                    modules.append(ref)
                else:
                    out.modules.append(_norm_module(ref.name))
            out.dtypes += [r.name for r in (e.dtypes.include if e.dtypes else [])]
        if calls or modules:
            from ootest.model.entries import model_modules, model_ops

            out.model_ops = model_ops(calls)
            out.model_modules = model_modules(modules)
        self._cache[key] = out
        return out


def _dtypes(names: list[str]) -> list[Any]:
    import torch

    out = []
    for n in names:
        d = getattr(torch, n, None)
        if isinstance(d, torch.dtype):
            out.append(d)
    return out


def install(inj: Injector) -> Callable[[], None]:
    """Wrap the parametrizers; call after the device is registered, before tests import.

    Returns the function that puts upstream's parametrizers back: the plugin calls
    it at ``pytest_unconfigure``, so the injection lasts one pytest session and a
    later session in the same process (pytester, an IDE runner) sees plain torch.
    """
    from torch.testing._internal import common_device_type as cdt

    # common_modules imports op_db (0.5 s a process): a file that needs neither,
    # under a config that injects no module, does not pay for it (issue 28 item 18)
    cm: Any = None
    if inj.modules:
        from torch.testing._internal import common_modules as cm

    orig_ops: Any = cdt.ops._parametrize_test
    orig_modules: Any = cm.modules._parametrize_test if cm is not None else None
    own_get_dtypes = vars(cdt.PrivateUse1TestBase).get("_get_dtypes")  # a torch that overrides it
    orig_get_dtypes: Any = (own_get_dtypes or vars(cdt.DeviceTypeTestBase)["_get_dtypes"]).__func__

    def extended(orig: Any, list_attr: str, find: Any, declared: Any) -> Any:
        """``orig`` (a parametrizer's ``_parametrize_test``) with the config's extra
        entries in ``self.<list_attr>`` and extra allowed dtypes, for one call; then
        the declared (model-derived) entries ``declared(extra)`` gives."""

        def parametrize(self: Any, test: Any, generic_cls: Any, device_cls: Any) -> Iterator[Any]:
            extra = inj.extra(test, getattr(generic_cls, "__name__", None))
            if not extra or not inj.is_device(device_cls):
                if getattr(self, list_attr) or not extra:
                    yield from orig(self, test, generic_cls, device_cls)
                return  # a list only the config fills (ootest's model test) is empty elsewhere
            saved = (getattr(self, list_attr), self.allowed_dtypes)
            have = {id(x) for x in saved[0]}
            added = [x for x in find(extra) if id(x) not in have]
            setattr(self, list_attr, list(saved[0]) + added)
            if self.allowed_dtypes is not None:
                self.allowed_dtypes = set(self.allowed_dtypes) | set(_dtypes(extra.dtypes))
            try:
                if getattr(self, list_attr):
                    yield from orig(self, test, generic_cls, device_cls)
            finally:
                setattr(self, list_attr, saved[0])
                self.allowed_dtypes = saved[1]
            yield from declared(self, orig, test, generic_cls, device_cls, extra)

        return parametrize

    def find_ops(extra: Extra) -> list[Any]:
        if not extra.ops:  # a dtype include alone: op_db is not read
            return []
        from torch.testing._internal.common_methods_invocations import op_db

        wanted = set(extra.ops)
        return [op for op in op_db if op.name in wanted or op.full_name in wanted]

    def find_modules(extra: Extra) -> list[Any]:
        if not extra.modules:
            return []
        wanted = set(extra.modules)
        return [m for m in cm.module_db if m.name in wanted]

    def declared_ops(
        self: Any, orig: Any, test: Any, generic_cls: Any, device_cls: Any, extra: Extra
    ) -> Iterator[Any]:
        if not extra.model_ops:
            return
        from ootest.model.infos import model_op_info

        infos = [model_op_info(m, inj.inputs) for m in extra.model_ops]
        saved = (self.op_list, self.opinfo_dtypes, self.allowed_dtypes)
        self.op_list = infos
        # The call's own dtype, whatever the test allows (a dtype-less test stays so).
        if self.opinfo_dtypes != cdt.OpDTypes.none:
            self.opinfo_dtypes = cdt.OpDTypes.supported
        self.allowed_dtypes = None
        try:
            for fn, name, kwargs, decorators in orig(self, test, generic_cls, device_cls):
                model = kwargs["op"].model
                test_fn = _tagged(_with_entry(fn), model.ref.tags)
                yield (test_fn, name, {**kwargs, "entry": model.entry}, decorators)
        finally:
            self.op_list, self.opinfo_dtypes, self.allowed_dtypes = saved

    def declared_modules(
        self: Any, orig: Any, test: Any, generic_cls: Any, device_cls: Any, extra: Extra
    ) -> Iterator[Any]:
        if not extra.model_modules:
            return
        from ootest.model.infos import ModelModuleInfo

        infos = [ModelModuleInfo(m, inj.inputs) for m in extra.model_modules]
        saved = (self.module_info_list, self.allowed_dtypes)
        self.module_info_list, self.allowed_dtypes = infos, None
        try:
            for fn, name, kwargs, decorators in orig(self, test, generic_cls, device_cls):
                info = kwargs["module_info"]
                why = info.import_error
                test_fn = _tagged(_skipped(fn, why) if why else fn, info.model.ref.tags)
                yield (test_fn, name, kwargs, decorators)
        finally:
            self.module_info_list, self.allowed_dtypes = saved

    ops_parametrize = extended(orig_ops, "op_list", find_ops, declared_ops)
    ops_parametrize.__ootest_injection__ = True

    def get_dtypes(cls: Any, test: Any) -> Any:
        found = orig_get_dtypes(cls, test)
        if found is None:
            return None
        extra = inj.extra(test, None)
        more = [d for d in _dtypes(extra.dtypes) if d not in found]
        return list(found) + more if more else found

    get_dtypes.__ootest_injection__ = True  # type: ignore[attr-defined]
    setattr(cdt.ops, "_parametrize_test", ops_parametrize)  # noqa: B010
    if cm is not None:
        wrapped = extended(orig_modules, "module_info_list", find_modules, declared_modules)
        setattr(cm.modules, "_parametrize_test", wrapped)  # noqa: B010
    setattr(cdt.PrivateUse1TestBase, "_get_dtypes", classmethod(get_dtypes))  # noqa: B010

    def uninstall() -> None:
        setattr(cdt.ops, "_parametrize_test", orig_ops)  # noqa: B010
        if cm is not None:
            setattr(cm.modules, "_parametrize_test", orig_modules)  # noqa: B010
        if own_get_dtypes is not None:
            setattr(cdt.PrivateUse1TestBase, "_get_dtypes", own_get_dtypes)  # noqa: B010
        else:
            delattr(cdt.PrivateUse1TestBase, "_get_dtypes")

    return uninstall


def _with_entry(fn: Any) -> Any:
    """The test without the ``entry`` argument: it is an axis of the variant ID (read
    from the bound ``param_kwargs``), not a parameter the test takes."""

    @functools.wraps(fn)
    def test(*args: Any, entry: str = "", **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return test


def _tagged(fn: Any, tags: tuple[str, ...]) -> Any:
    """``fn`` carrying a declared call's tags: a function of its own around it, since
    variants of one test may share ``fn``."""
    if not tags:
        return fn

    @functools.wraps(fn)
    def test(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    setattr(test, CALL_TAGS, tags)
    return test


def _skipped(fn: Any, reason: str) -> Any:
    """The test, skipped with ``reason`` (a declared module that cannot be imported)."""

    @functools.wraps(fn)
    def test(*args: Any, **kwargs: Any) -> Any:
        raise unittest.SkipTest(reason)

    return test
