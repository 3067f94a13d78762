"""OpInfo and ModuleInfo objects for declared model calls (what the plugin injects).

An op entry becomes a :class:`ModelOpInfo`: its ``op`` is the callable the entry
names, its one sample input is the declared call built on the device the test
asks for, its only dtype is the call's (Note [Model variant names]). A module
entry becomes a :class:`ModelModuleInfo`: its ``module_cls`` is imported from
``module_path`` and ``module_inputs_func`` gives one ``ModuleInput`` per forward
call, each with a CPU reference (the same module copied to the CPU, the same
inputs), so upstream's ``test_forward`` compares the device against the CPU.

Imported only by the plugin once torch and ``torch.testing._internal`` are loaded.
"""

from __future__ import annotations

import copy
import functools
import importlib
import operator
import unittest
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ootest.config.calls import CallSpec
from ootest.model.build import Target, build_call, check_size, import_object, torch_dtype
from ootest.model.entries import Inputs, ModelModule, ModelOp

# torch's testing internals are untyped: used through Any.
_core: Any = importlib.import_module("torch.testing._internal.opinfo.core")
_modules: Any = importlib.import_module("torch.testing._internal.common_modules")
OpInfo, SampleInput = _core.OpInfo, _core.SampleInput
ModuleInfo, ModuleInput, FunctionInput = (
    _modules.ModuleInfo,
    _modules.ModuleInput,
    _modules.FunctionInput,
)

# Names Torch Spyre's traces use for Python operators.
_OPERATORS: dict[str, Callable[..., Any]] = {
    "torch.getitem": operator.getitem,
    "torch.setitem": operator.setitem,
    "getitem": operator.getitem,
    "setitem": operator.setitem,
}


def resolve_op(name: str) -> Callable[..., Any] | None:
    """The callable an entry's ``name`` stands for, or None.

    A dotted path from ``torch`` (``torch.nn.functional.embedding``,
    ``torch.Tensor.expand``, ``torch.ops.aten.view``) or any importable module;
    a ``torch.<x>`` that is no function (``torch.float`` is a dtype, ``torch.to``
    does not exist) is the Tensor method ``<x>``, as traces name methods.
    """
    if name in _OPERATORS:
        return _OPERATORS[name]
    obj: Any = None
    parts = name.split(".")
    if parts[0] == "torch":
        obj = torch
        for part in parts[1:]:
            obj = getattr(obj, part, None)
            if obj is None:
                break
    else:
        try:
            obj = import_object(name)
        except (ImportError, AttributeError):
            obj = None
    if obj is None or isinstance(obj, torch.dtype) or not callable(obj):
        obj = getattr(torch.Tensor, parts[-1], None)
    return obj if callable(obj) else None


def _to_cpu(x: Any) -> Any:
    return tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, x)


class ModelOpInfo(OpInfo):  # type: ignore[misc,valid-type]
    """One declared call as an OpInfo: ``op.sample_inputs(device, dtype)`` yields
    exactly that call, built on ``device``. Make them with :func:`model_op_info`."""

    def __init__(self, model: ModelOp, inputs: Inputs) -> None:
        fn = resolve_op(model.ref.name)
        call = model.ref.sample_inputs_func or CallSpec()
        self.model = model
        self.model_inputs = inputs
        op: Callable[..., Any] = fn if fn is not None else _unresolved(model.ref.name)
        if not call.args:  # OpInfo calls op(sample.input, ...): no positional input here
            op = functools.partial(_without_input, op)
        super().__init__(
            model.ref.name,
            op=op,
            dtypes=(torch_dtype(model.dtype),),
            sample_inputs_func=_declared_samples,
            supports_out=False,
            supports_autograd=False,
        )

    @property
    def formatted_name(self) -> str:
        return str(self.model.test_name)

    def sample(self, device: str) -> Any:
        """The declared call as a ``SampleInput`` with its tensors on ``device``."""
        call = self.model.ref.sample_inputs_func or CallSpec()
        check_size(call, f"entry {self.model.ref.name} ({self.model.origin})")
        target = Target(device, self.model_inputs.trace_device, self.model_inputs.seed)
        args, kwargs = build_call(call, target)
        first = args[0] if args else None
        return SampleInput(first, args=tuple(args[1:]), kwargs=kwargs)


def _declared_samples(
    op: Any, device: Any, dtype: Any, requires_grad: bool = False, **kwargs: Any
) -> Iterator[Any]:
    yield op.sample(str(device))


# OpInfo.__post_init__ costs milliseconds (it deep-copies its fields); a model config
# has thousands of calls over a few hundred (op, dtype) pairs: one full OpInfo per
# pair, shallow copies for the calls.
_PROTOTYPES: dict[tuple[str, str, bool], ModelOpInfo] = {}


def model_op_info(model: ModelOp, inputs: Inputs) -> ModelOpInfo:
    """The OpInfo of one declared call."""
    call = model.ref.sample_inputs_func or CallSpec()
    key = (model.ref.name, model.dtype, bool(call.args))
    proto = _PROTOTYPES.get(key)
    if proto is None:
        proto = _PROTOTYPES[key] = ModelOpInfo(model, inputs)
    info = copy.copy(proto)
    info.model, info.model_inputs = model, inputs
    return info


def _without_input(fn: Callable[..., Any], _input: Any, *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _unresolved(name: str) -> Callable[..., Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise unittest.SkipTest(
            f"op name {name!r} names no callable in this torch (tried it as a path from "
            "torch or an importable module, and as a Tensor method)"
        )

    return missing


@functools.cache
def import_module_class(path: str) -> tuple[type | None, str | None]:
    """(class, None) or (None, why it cannot be imported); once per path."""
    try:
        obj = import_object(path)
    except Exception as e:  # an import may fail in any way (a missing dependency...)
        return None, f"cannot import {path}: {type(e).__name__}: {e}"
    if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
        return None, f"{path} is not a torch.nn.Module class (found {type(obj).__name__})"
    return obj, None


class ModelModuleInfo(ModuleInfo):  # type: ignore[misc,valid-type]
    """One declared module; ``import_error`` is set when its class cannot be imported
    (the plugin then skips its variant with that reason)."""

    def __init__(self, model: ModelModule, inputs: Inputs) -> None:
        path = model.ref.module_path or ""
        cls, self.import_error = import_module_class(path)
        self.model = model
        self.model_inputs = inputs
        placeholder = type(path.rpartition(".")[2] or "Missing", (torch.nn.Module,), {})
        super().__init__(
            cls or placeholder,
            module_inputs_func=self._module_inputs,
            dtypes=(torch_dtype(model.dtype),),
            train_and_eval_differ=False,
        )

    @property
    def name(self) -> str:
        return str(self.model.ref.name)

    @property
    def formatted_name(self) -> str:
        return str(self.model.test_name)

    def _module_inputs(
        self,
        module_info: Any,
        device: Any,
        dtype: Any,
        requires_grad: bool = False,
        training: bool = True,
        **kw: Any,
    ) -> list[Any]:
        if self.import_error is not None:
            raise unittest.SkipTest(self.import_error)
        ref = self.model.ref
        target = Target(str(device), self.model_inputs.trace_device, self.model_inputs.seed)
        cargs, ckwargs = build_call(ref.constructor_inputs or CallSpec(), target, "constructor.")
        out = []
        for i, call in enumerate(ref.forward_inputs or ()):
            fargs, fkwargs = build_call(call, target, f"forward[{i}].")
            out.append(
                ModuleInput(
                    constructor_input=FunctionInput(*cargs, **ckwargs),
                    forward_input=FunctionInput(*fargs, **fkwargs),
                    desc=f"forward_inputs[{i}]",
                    reference_fn=_cpu_reference,
                )
            )
        return out


def _cpu_reference(m: Any, parameters: Any, *args: Any, **kwargs: Any) -> Any:
    """The same module and inputs, run on the CPU."""
    cpu = copy.deepcopy(m).to("cpu")
    with torch.no_grad():
        return cpu(*_to_cpu(args), **_to_cpu(kwargs))
