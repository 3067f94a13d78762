"""The ``test_suite_config`` schema, declared as pydantic models.

Compatible with the format Torch Spyre published (every key it uses is accepted
unchanged) plus backward-compatible additions: ``reason``/``issue`` on entries,
``when`` conditions, ``extends`` composition, ``device``, ``device_restrictions``
and ``expect`` on files.

Model-derived tests (see docs/model.md) declare calls as data: an
``edits.ops.include`` entry with ``sample_inputs_func`` (a ``CallSpec`` of
``ootest.config.calls``, where tensors, arguments and calls are checked without
torch), an ``edits.modules.include`` entry with ``module_path``,
``constructor_inputs`` and ``forward_inputs``. What every model shares (strict
fields, loader-set attributes) is ``ootest.config.base``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    StrictBool,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from ootest.config.base import Strict as _Strict
from ootest.config.base import set_private
from ootest.config.calls import Arg, CallSpec, InputConfig
from ootest.config.relay_policy import RelayPolicy
from ootest.timeout import MAX_TIMEOUT

Mode = Literal["mandatory_success", "xfail", "xfail_strict", "skip"]
MODES: tuple[str, ...] = ("mandatory_success", "xfail", "xfail_strict", "skip")


# What `pytest -m` accepts in a mark name (tags become marks 'tag__<tag>').
_MARK = re.compile(r"[\w:+\-./]+")


def mark_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` if each is a valid pytest mark name, else a ValueError naming the first."""
    for name in names:
        if not _MARK.fullmatch(name):
            raise ValueError(
                f"expected a valid pytest mark name (letters, digits, _ - . : + /); found {name!r}"
            )
    return names


class _Documented(_Strict):
    """Fields every entry may carry: free text that ends up in reports."""

    @property
    def origin(self) -> str:
        """``file:line`` of the entry, set by the loader (Note [Loader-set attributes]);
        read for every decided variant."""
        private = self.__pydantic_private__
        return str(private.get("_origin", "")) if private else ""

    description: str | None = Field(default=None, description="Free text for humans.")
    reason: str | None = Field(
        default=None, description="Why this entry exists; carried into skip/xfail messages."
    )
    issue: str | None = Field(
        default=None, description="Issue URL or id tracking this entry; carried into reports."
    )


# YAML 1.1 (PyYAML) reads `1e-3` as a string, which the models accept as a number;
# the JSON Schema says so too (Torch Spyre's configs write tolerances that way).
_NUMBER_TEXT = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
Number = Annotated[
    float,
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string", "pattern": _NUMBER_TEXT}]}),
]


class Precision(_Strict):
    atol: Number | None = Field(default=None, description="Absolute tolerance override.")
    rtol: Number | None = Field(default=None, description="Relative tolerance override.")


class When(_Strict):
    """An entry applies only when every given condition holds."""

    torch: str | None = Field(
        default=None, description="PEP 440 version specifier for torch, e.g. '>=2.12,<2.14'."
    )
    platform: str | list[str] | None = Field(
        default=None, description="sys.platform value(s), e.g. 'linux'."
    )

    @field_validator("torch")
    @classmethod
    def _specifier(cls, v: str | None) -> str | None:
        if v is not None:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                SpecifierSet(v)
            except InvalidSpecifier:
                raise ValueError(
                    f"expected a version specifier like '>=2.12,<2.14', found {v!r}"
                ) from None
        return v


class _Named(_Documented):
    """An entry with a ``name``; a plain string is short for ``{name: ...}``
    (``supported_ops: [add, mul]``), in every list of such entries."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v

    @classmethod
    def __get_pydantic_json_schema__(cls, core: Any, handler: Any) -> Any:
        return {"anyOf": [handler(core), {"type": "string"}]}


class DtypeRef(_Named):
    name: str = Field(description="dtype name as in torch, e.g. float16, bfloat16, int64.")
    precision: Precision | None = None
    force_xfail: bool = Field(default=False, description="Variants of this dtype become xfail.")


class OpRef(_Named):
    name: str = Field(description="OpInfo name, e.g. add or nn.functional.relu.")
    dtypes: list[DtypeRef] | None = Field(
        default=None, description="dtypes supported for this op (replaces the global list)."
    )
    force_xfail: bool = Field(default=False, description="Variants of this op become xfail.")


class ModuleRef(_Named):
    name: str = Field(description="ModuleInfo name, e.g. nn.Linear.")
    force_xfail: bool = False


class _AxisEdit(_Strict):
    pass


class DtypeEdit(_AxisEdit):
    include: list[DtypeRef] = Field(default_factory=list)
    exclude: list[DtypeRef] = Field(default_factory=list)


class OpInclude(OpRef):
    """An op added to a test's ``@ops`` list: an OpInfo by name, or, with
    ``sample_inputs_func``, one declared call (a model-derived variant)."""

    sample_inputs_func: CallSpec | None = Field(
        default=None,
        description="The exact call to test: one variant with exactly these inputs.",
    )
    tags: tuple[str, ...] = Field(
        default=(),
        description="Labels of the call, each a pytest mark 'tag__<tag>' on its variant "
        "(e.g. -m 'not tag__constant'); the one named '<name>.<n>' (e.g. torch.mul.1) "
        "also identifies the variant (its 'entry' axis).",
    )
    count: int | None = Field(
        default=None, ge=1, description="How often the recorded run made this call (ootest)."
    )
    kwargs: dict[str, Arg] | None = Field(
        default=None,
        description="Keyword arguments of the call written beside sample_inputs_func (some "
        "generated Torch Spyre configs): the call's kwargs, as if under sample_inputs_func "
        "(noted; a name in both places is an error).",
    )

    @field_validator("tags")
    @classmethod
    def _mark_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return mark_names(v)

    @model_validator(mode="after")
    def _outer_kwargs(self) -> OpInclude:
        # Note [Keyword arguments beside the call]
        # Some generated Torch Spyre configs (e.g. model_ops_tests/Qwen2.5-7B-Instruct.yaml
        # at b6506df) write a call's keyword arguments as the entry's `kwargs`, beside
        # sample_inputs_func, where others write sample_inputs_func.kwargs. They are the
        # recorded call's arguments (the trace's code line names them), so they join the
        # call here; the entry keeps a mark for the loader's note. Torch Spyre's own
        # loader (OpsNamedItem) has no such field and drops them.
        if self.kwargs is None:
            return self
        if self.sample_inputs_func is None:
            raise ValueError("kwargs needs sample_inputs_func (the call they belong to)")
        both = sorted(set(self.kwargs) & set(self.sample_inputs_func.kwargs))
        if both:
            raise ValueError(
                "expected each keyword argument once; found "
                f"{', '.join(repr(k) for k in both)} in kwargs and in sample_inputs_func.kwargs"
            )
        self.sample_inputs_func.kwargs.update(self.kwargs)
        self.kwargs = None
        set_private(self, "_outer_kwargs", True)
        return self

    @property
    def outer_kwargs(self) -> bool:
        """Whether the call's kwargs were written beside sample_inputs_func
        (Note [Keyword arguments beside the call])."""
        private = self.__pydantic_private__
        return bool(private.get("_outer_kwargs")) if private else False


def _or_one_item(schema: dict[str, Any]) -> None:
    """JSON Schema of a list field that also takes one item in its place."""
    options = list(schema.get("anyOf", ()))
    schema["anyOf"] = options + [o["items"] for o in options if o.get("type") == "array"]


class ModuleInclude(ModuleRef):
    """A module added to a test's ``@modules`` list: a ModuleInfo by name, or, with
    ``module_path``, a module class built and called as declared."""

    module_path: str | None = Field(
        default=None,
        description="Import path of the module class, e.g. "
        "transformers.models.granite.modeling_granite.GraniteRMSNorm.",
    )
    constructor_inputs: CallSpec | None = Field(
        default=None,
        description="Constructor arguments; '<config:module.ConfigClass>' values are "
        "instances of that class built with its defaults.",
    )
    forward_inputs: list[CallSpec] | None = Field(
        default=None,
        description="One forward call per item; a single {args, kwargs} mapping (Torch "
        "Spyre's earlier module configs) is one call.",
        json_schema_extra=_or_one_item,
    )
    sample_inputs_func: CallSpec | None = Field(
        default=None, description="Torch Spyre (module entries): accepted, not used (noted)."
    )
    tags: tuple[str, ...] = Field(
        default=(), description="Pytest marks 'tag__<tag>' on the module's variants."
    )

    @field_validator("forward_inputs", mode="before")
    @classmethod
    def _one_call(cls, v: Any) -> Any:
        # Torch Spyre's first module configs wrote one call as a mapping; the loader
        # places errors inside it as if it were the list's item 0 (see _position).
        return [v] if isinstance(v, dict) else v

    @field_validator("tags")
    @classmethod
    def _mark_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return mark_names(v)

    @model_validator(mode="after")
    def _complete(self) -> ModuleInclude:
        if self.module_path is None and (self.constructor_inputs or self.forward_inputs):
            raise ValueError(
                "constructor_inputs and forward_inputs need module_path (the class to build)"
            )
        return self


class OpEdit(_AxisEdit):
    include: list[OpInclude] = Field(default_factory=list)
    exclude: list[OpRef] = Field(default_factory=list)


class ModuleEdit(_AxisEdit):
    include: list[ModuleInclude] = Field(default_factory=list)
    exclude: list[ModuleRef] = Field(default_factory=list)


class FunctionRef(_Documented):
    name: str


class Edits(_Strict):
    dtypes: DtypeEdit | None = None
    ops: OpEdit | None = None
    modules: ModuleEdit | None = None
    functions: dict[str, list[FunctionRef]] | None = Field(
        default=None,
        description=(
            "Torch Spyre's function rewrites (e.g. cpu_move). Accepted for compatibility; "
            "ootest needs none: TestCase.assertEqual already compares across devices."
        ),
    )


# ------------------------------------------------------------------ selectors
# Note [Selectors]
# Torch Spyre's test selectors (torch-spyre issue #1161): a block of
# ``include`` and ``exclude`` lists; OR between the items of a list, AND between
# the keys of one item. ``has_ops`` and ``ops_in_supported`` need evidence of
# the ops a variant calls: ootest reads them from the op map (docs/opmap.md).
# Evidence the op map cannot give (a variant it never captured, one whose ops
# may differ per device, a partial op set that cannot prove a negative) makes
# a key *unknown*, and an unknown match keeps the variant: missing evidence
# means "run more", never "skip more". ootest.opmap.selectors decides.
SELECTOR_KEYS = ("has_ops", "ops_in_supported", "markers", "name_patterns")


class SelectorItem(_Strict):
    """One selector: every key given must hold (AND)."""

    has_ops: StrictBool | tuple[str, ...] | None = Field(
        default=None,
        description="true: the variant calls at least one aten op (op map evidence); false: "
        "it calls none; a list (ootest): it calls any of these ops (overload or packet, as "
        "`ootest ops tests-for` takes them).",
    )
    ops_in_supported: StrictBool | None = Field(
        default=None,
        description="true: every op the variant calls is in global.supported_ops (emu's rule, "
        "as `ootest ops missing --config`); false: at least one is not.",
    )
    markers: tuple[str, ...] | None = Field(
        default=None, description="The variant carries any of these pytest marks."
    )
    name_patterns: tuple[str, ...] | None = Field(
        default=None,
        description="Shell-style globs; the test's name (test_conv2d_emu_float32) or "
        "'Class::name' matches any of them.",
    )

    @property
    def origin(self) -> str:
        """``file:line`` of the item (Note [Loader-set attributes])."""
        private = self.__pydantic_private__
        return str(private.get("_origin", "")) if private else ""

    @property
    def needs_evidence(self) -> bool:
        return self.has_ops is not None or self.ops_in_supported is not None

    @field_validator("has_ops", mode="before")
    @classmethod
    def _op_names(cls, v: Any) -> Any:
        # One message for the two accepted shapes (not one per union member).
        from ootest.errors import UserError
        from ootest.opname import parse_op

        if v is None or isinstance(v, bool):
            return v
        if not isinstance(v, list | tuple) or not v or not all(isinstance(n, str) for n in v):
            shown = "[]" if v == [] else repr(v)
            raise ValueError(f"expected true, false or a list of op names; found {shown}")
        for name in v:
            try:
                parse_op(name)
            except UserError as e:
                raise ValueError(str(e)) from None
        return tuple(v)

    @field_validator("markers")
    @classmethod
    def _mark_names(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in v or ():
            if not _MARK.fullmatch(name):
                raise ValueError(
                    f"expected a pytest mark name (letters, digits, _ - . : + /); found {name!r}"
                )
        return v

    @model_validator(mode="after")
    def _some(self) -> SelectorItem:
        if not self.model_fields_set:
            raise ValueError(f"expected at least one of {', '.join(SELECTOR_KEYS)}; found none")
        return self


class Selectors(_Strict):
    """Which variants a config (``test_selectors``) or an entry (``selectors``) takes:
    those matching any ``include`` item (all, when there is none) and no ``exclude``
    item."""

    include: list[SelectorItem] = Field(default_factory=list)
    exclude: list[SelectorItem] = Field(default_factory=list)

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _none(cls, v: Any) -> Any:
        return [] if v is None else v

    def items(self) -> list[tuple[str, int, SelectorItem]]:
        """(``include``/``exclude``, index, item) in order."""
        return [("include", i, s) for i, s in enumerate(self.include)] + [
            ("exclude", i, s) for i, s in enumerate(self.exclude)
        ]


class TestEntry(_Documented):
    __test__ = False  # not a pytest test class

    # Tuples, not lists: a config of 10,000 entries then leaves far fewer objects
    # for the cyclic GC to walk (see Note [GC-light config] in config/yamlread.py).
    names: tuple[str, ...] = Field(
        min_length=1,
        description=(
            "Tests this entry applies to: 'Class::method', bare 'method', or 're:<regex>' "
            "(matched against 'Class::method'); optional variant filter '[op=add,dtype=float32]'. "
            "Parametrized names and names copied from a pytest listing work too."
        ),
    )
    mode: Mode = Field(
        default="mandatory_success",
        description="Outcome for the matched variants (default, as in Torch Spyre's format: "
        "mandatory_success).",
    )
    tags: tuple[str, ...] = Field(
        default=(), description="Pytest marks 'tag__<tag>' on every matched variant."
    )
    labels: tuple[str, ...] = Field(default=())
    edits: Edits | None = None
    force_xfail: bool = False
    when: When | None = None
    selectors: Selectors | None = Field(
        default=None,
        description="Torch Spyre: the entry applies only to the variants these select "
        "(see Note [Selectors]); the others fall to other entries or unlisted_test_mode.",
    )

    @field_validator("tags", "labels")
    @classmethod
    def _mark_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return mark_names(v)


class FileEntry(_Documented):
    path: str = Field(description="Test file; ${VAR} expanded, globs allowed.")
    unlisted_test_mode: Mode = Field(
        default="skip", description="Outcome for every test no entry names (default: skip)."
    )
    tests: list[TestEntry] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    device_restrictions: Literal["keep", "bypass"] = Field(
        default="keep",
        description=(
            "'bypass' runs tests gated to other devices (@onlyCUDA, only_for='cuda') on the "
            "device, through upstream's bypass_device_restrictions and "
            "PYTORCH_TESTING_DEVICE_FOR_CUSTOM."
        ),
    )
    expect: int | None = Field(
        default=None, ge=0, description="Expected number of device variants (collection guard)."
    )
    when: When | None = None

    @property
    def path_at(self) -> tuple[str, str, int, int, str]:
        """(``path`` as written, file, line, col, full key path): where problems point,
        set by the loader (Note [Loader-set attributes])."""
        private = self.__pydantic_private__
        found = private.get("_path_at") if private else None
        return found if found is not None else (self.path, "", 0, 0, "path")


class GlobalCaps(_Strict):
    supported_dtypes: list[DtypeRef] | None = None
    supported_ops: list[OpRef] | None = None
    supported_modules: list[ModuleRef] | None = None
    devices: list[str] | None = Field(
        default=None,
        description="Torch Spyre (planned): accepted and not used; the device comes from "
        "'device:' or --ootest-device.",
    )
    input_config: InputConfig | None = Field(
        default=None, description="How model-derived inputs are generated (seed)."
    )


class TestSuiteConfig(_Strict):
    __test__ = False

    extends: Annotated[
        list[str],
        WithJsonSchema(
            {
                "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                "description": "Config files (one, or a list) whose content this one builds on.",
            }
        ),
    ] = Field(default_factory=list)
    device: str | None = Field(
        default=None, description="Device to run on: 'emu[:profile]' or 'module:name'."
    )
    labels: list[str] = Field(default_factory=list)
    files: list[FileEntry] = Field(default_factory=list)
    global_: GlobalCaps = Field(default_factory=GlobalCaps, alias="global")
    timeout: float | None = Field(
        default=None,
        gt=0,
        lt=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Per-test timeout, seconds.",
    )
    test_selectors: Selectors | None = Field(
        default=None,
        description="Torch Spyre: variants of the config's files these do not select are "
        "skipped, with the reason (see Note [Selectors]).",
    )
    op_map: str | None = Field(
        default=None,
        description="ootest: the op map index (ops.db) that aten__ marks and selectors read "
        "and ootest run's HTML report takes its op coverage from, relative to this file; "
        "--ootest-ops overrides it.",
    )

    @field_validator("extends", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class ModelCase(_Strict):
    """One case of Torch Spyre's earlier model-case files (top-level ``cases``):
    validated, not run (ootest runs model calls declared as ``edits.ops.include``)."""

    name: str | None = None
    op: str | None = None
    description: str | None = None
    inputs: list[Arg] = Field(default_factory=list)
    attrs: dict[str, Arg] = Field(default_factory=dict)
    marks: tuple[str, ...] = ()
    dtype: str | None = None
    seed: int | None = None
    atol: float | None = None
    rtol: float | None = None
    expects_error: dict[str, Any] | None = None
    skip_if: list[dict[str, Any]] | None = None


class CasesDocument(_Strict):
    """A file of model cases (``model``, ``default(s)``, ``cases``)."""

    model: str | None = None
    default: dict[str, Any] | None = None
    defaults: dict[str, Any] | None = None
    cases: list[ModelCase] = Field(default_factory=list)


CASES_KEYS = ("model", "default", "defaults", "cases")


# --------------------------------------------------------------- relay policy
# RelayPolicy lives in ootest.config.relay_policy (the gate reads it without this schema).


class Document(_Strict):
    test_suite_config: TestSuiteConfig
    relay: RelayPolicy | None = Field(
        default=None, description="CRCR relay policy (see `ootest relay`)."
    )
    # Torch Spyre's model-case part of the file (top-level `cases`), if it has one.
    _cases: CasesDocument | None = PrivateAttr(default=None)

    @property
    def cases(self) -> CasesDocument | None:
        private = self.__pydantic_private__
        return private["_cases"] if private else None
