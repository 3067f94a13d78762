"""Model-derived calls as data (Note [Model call specs]): the tensors, arguments
and calls of ``edits.ops.include`` and ``edits.modules.include`` entries, checked
without torch. Part of the config schema (``ootest.config.model``)."""

from __future__ import annotations

import ast
import math
from typing import Any

from pydantic import Field, field_validator, model_validator

from ootest.config.base import Strict as _Strict

# Note [Model call specs]
# Torch Spyre's model configs describe each argument of a recorded call as data,
# never as tensor contents: a tensor is its shape, stride, storage offset, dtype
# and how to fill it. ootest builds such tensors on the device under test
# (ootest.model.build). Validation here needs no torch: dtypes come from a table,
# ``py:`` expressions are parsed (never evaluated) by py_literal, and storage is
# bounded before anything could be allocated.

DTYPES = frozenset(
    {
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "complex32",
        "complex64",
        "complex128",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
    }
)
DTYPE_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "chalf": "complex32",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "bf16": "bfloat16",
}


def dtype_name(text: str) -> str | None:
    """The torch dtype name a spelling stands for (``torch.bfloat16``, ``bf16`` and
    ``bfloat16`` are ``bfloat16``), or None when it names no dtype."""
    bare = text.strip().removeprefix("torch.")
    if bare in DTYPES:
        return bare
    return DTYPE_ALIASES.get(bare)


INITS: tuple[str, ...] = ("rand", "randn", "randint", "uniform", "normal", "xavier", "zeros")
INITS += ("ones", "full", "arange", "eye", "empty")
"""How ootest fills a tensor (see docs/model.md)."""
INITS_NOT_RUN = ("file",)
"""Accepted (Torch Spyre's format has them) but not implemented: the variant is skipped."""

MAX_ELEMENTS = 2**32
"""Storage elements one declared tensor may need; a bigger one is a config error."""
MAX_DIMS = 64


def storage_size(shape: tuple[int, ...], stride: tuple[int, ...] | None, offset: int) -> int:
    """Elements of storage a tensor of this layout needs (offset included)."""
    if any(s == 0 for s in shape):
        return offset
    if stride is None:
        return offset + math.prod(shape)
    return offset + sum((s - 1) * st for s, st in zip(shape, stride, strict=True)) + 1


_PY_NAMES: dict[str, Any] = {
    "None": None,
    "True": True,
    "False": False,
    "Ellipsis": Ellipsis,
    "inf": math.inf,
    "nan": math.nan,
}


def py_literal(text: str) -> Any:
    """The value of a ``py:`` expression: numbers, strings, None, True/False,
    Ellipsis, inf, nan, ``slice(...)``, and tuples and lists of them.

    Parsed, never evaluated; anything else raises ValueError saying what it found.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not a Python expression ({e.msg})") from None

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and not isinstance(node.value, bytes):
            return node.value
        if isinstance(node, ast.Name) and node.id in _PY_NAMES:
            return _PY_NAMES[node.id]
        if isinstance(node, ast.Tuple):
            return tuple(value(e) for e in node.elts)
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = value(node.operand)
            if isinstance(inner, int | float) and not isinstance(inner, bool):
                return -inner if isinstance(node.op, ast.USub) else inner
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "slice"
            and not node.keywords
            and 1 <= len(node.args) <= 3
        ):
            return slice(*(value(a) for a in node.args))
        raise ValueError(f"{ast.unparse(node)!r} is not allowed")

    return value(tree.body)


class InitArgs(_Strict):
    low: int | float | None = Field(default=None, description="randint/uniform: lower bound.")
    high: int | float | None = Field(default=None, description="randint/uniform: upper bound.")
    fill_value: int | float | None = Field(default=None, description="full: the value.")
    mean: int | float | None = Field(default=None, description="normal: mean (default 0).")
    std: int | float | None = Field(default=None, description="normal: standard deviation.")
    gain: int | float | None = Field(default=None, description="xavier: gain (default 1).")
    path: str | None = Field(default=None, description="file (Torch Spyre): not run by ootest.")
    key: str | None = Field(default=None, description="file (Torch Spyre): not run by ootest.")


class TensorSpec(_Strict):
    """One tensor argument, described (its data is generated, never stored)."""

    shape: tuple[int, ...] = Field(description="Sizes, e.g. [1, 41, 4096].")
    stride: tuple[int, ...] | None = Field(
        default=None, description="Strides in elements; null: contiguous."
    )
    storage_offset: int = Field(default=0, ge=0, description="Offset into the storage.")
    dtype: str | None = Field(
        default=None, description="torch dtype, e.g. torch.bfloat16 (default: float32)."
    )
    device: str | None = Field(
        default=None,
        description="Where the trace ran (e.g. cuda:0); ootest creates the tensor on the "
        "device under test.",
    )
    init: str = Field(default="rand", description="How to fill it: " + ", ".join(INITS) + ".")
    init_args: InitArgs | None = None
    device_layout: dict[str, Any] | None = Field(
        default=None, description="Torch Spyre device layout: accepted, not applied (noted)."
    )
    preset: str | None = Field(
        default=None, description="Torch Spyre model cases: accepted, not applied (noted)."
    )
    preset_args: dict[str, Any] | None = None

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str | None) -> str | None:
        if v is not None and dtype_name(v) is None:
            raise ValueError(
                f"expected a torch dtype such as torch.float32, bfloat16 or int64; found {v!r}"
            )
        return v

    @field_validator("init")
    @classmethod
    def _init(cls, v: str) -> str:
        if v not in INITS and v not in INITS_NOT_RUN:
            raise ValueError(f"expected one of {', '.join(INITS + INITS_NOT_RUN)}; found {v!r}")
        return v

    @model_validator(mode="after")
    def _layout(self) -> TensorSpec:
        shape, stride = self.shape, self.stride
        if len(shape) > MAX_DIMS:
            raise ValueError(f"expected at most {MAX_DIMS} dimensions; found {len(shape)}")
        if any(s < 0 for s in shape):
            raise ValueError(f"expected sizes >= 0; found shape {list(shape)}")
        if stride is not None:
            if len(stride) != len(shape):
                raise ValueError(
                    f"expected one stride per dimension ({len(shape)}); found stride "
                    f"{list(stride)} for shape {list(shape)}"
                )
            if any(s < 0 for s in stride):
                raise ValueError(f"expected strides >= 0; found {list(stride)}")
        need = storage_size(shape, stride, self.storage_offset)
        if need > MAX_ELEMENTS:
            raise ValueError(
                f"shape {list(shape)} (stride {list(stride) if stride else 'contiguous'}, "
                f"offset {self.storage_offset}) needs {need:,} elements of storage; ootest "
                f"creates at most {MAX_ELEMENTS:,} (2**32) per tensor: declare a smaller call"
            )
        a = self.init_args or InitArgs()
        if self.init == "randint" and a.high is None:
            raise ValueError("init: randint needs init_args.high (the exclusive upper bound)")
        if self.init == "full" and a.fill_value is None:
            raise ValueError("init: full needs init_args.fill_value")
        if self.init == "eye" and (len(shape) != 2 or shape[0] != shape[1]):
            raise ValueError(f"init: eye needs a square 2-D shape; found {list(shape)}")
        if self.init == "file" and a.path is None:
            raise ValueError("init: file needs init_args.path")
        return self

    @property
    def storage(self) -> int:
        return storage_size(self.shape, self.stride, self.storage_offset)


ARG_KEYS = ("tensor", "tensor_list", "value", "py")


class Arg(_Strict):
    """One argument: exactly one of ``tensor``, ``tensor_list``, ``value``, ``py``.

    A plain YAML value (``-1``, ``torch.float32``, ``cuda:0``) is short for
    ``{value: ...}``. String values that name a dtype (``torch.float16``) become
    that dtype, device strings other than ``cpu`` the device under test and
    ``<config:module.Class>`` an instance of that class (docs/model.md).
    """

    tensor: TensorSpec | None = None
    tensor_list: list[TensorSpec] | None = None
    value: Any = None
    py: str | None = Field(
        default=None, description="A Python literal: slice(...), Ellipsis, tuples, numbers."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return v if isinstance(v, dict) else {"value": v}

    @classmethod
    def __get_pydantic_json_schema__(cls, core: Any, handler: Any) -> Any:
        # Editors must accept the shorthand too: a plain value (not a mapping).
        mapping = handler(core)
        return {"anyOf": [mapping, {"not": {"type": "object"}}]}

    @field_validator("py")
    @classmethod
    def _py(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                py_literal(v)
            except ValueError as e:
                raise ValueError(
                    "expected a Python literal (numbers, strings, None, Ellipsis, inf, nan, "
                    f"slice(...), tuples and lists of them); found {v!r}: {e}"
                ) from None
        return v

    @model_validator(mode="after")
    def _one(self) -> Arg:
        given = [k for k in ARG_KEYS if k in self.model_fields_set]
        if len(given) != 1:
            found = ", ".join(repr(k) for k in given) if given else "none"
            raise ValueError(
                f"expected exactly one of 'tensor', 'tensor_list', 'value', 'py'; found {found}"
            )
        return self

    def tensors(self) -> list[TensorSpec]:
        if self.tensor is not None:
            return [self.tensor]
        return list(self.tensor_list or ())


class CallSpec(_Strict):
    """The inputs of one call: positional ``args`` and keyword ``kwargs``."""

    args: list[Arg] = Field(default_factory=list)
    kwargs: dict[str, Arg] = Field(default_factory=dict)

    @field_validator("args", mode="before")
    @classmethod
    def _no_args(cls, v: Any) -> Any:
        return [] if v is None else v

    @field_validator("kwargs", mode="before")
    @classmethod
    def _no_kwargs(cls, v: Any) -> Any:
        return {} if v is None else v

    def items(self) -> list[tuple[str, Arg]]:
        """(``args[i]`` / ``kwargs.name``, argument) in call order."""
        out = [(f"args[{i}]", a) for i, a in enumerate(self.args)]
        return out + [(f"kwargs.{k}", a) for k, a in self.kwargs.items()]

    def tensors(self) -> list[TensorSpec]:
        return [t for _, a in self.items() for t in a.tensors()]


class InputConfig(_Strict):
    seed: int | None = Field(
        default=None,
        description="Seed of every generated model input (default 0): each run is identical.",
    )
