"""The ``test_suite_config`` schema, declared as pydantic models.

Compatible with the format Torch Spyre published (every key it uses is accepted
unchanged) plus backward-compatible additions: ``reason``/``issue`` on entries,
``when`` conditions, ``extends`` composition, ``device``, ``device_restrictions``
and ``expect`` on files.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

Mode = Literal["mandatory_success", "xfail", "xfail_strict", "skip"]
MODES: tuple[str, ...] = ("mandatory_success", "xfail", "xfail_strict", "skip")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Documented(_Strict):
    """Fields every entry may carry: free text that ends up in reports."""

    # "file:line" of the entry, filled in by the loader; used in reasons.
    _origin: str = PrivateAttr(default="")

    @property
    def origin(self) -> str:
        """``file:line`` of the entry (read for every decided variant: no pydantic lookup)."""
        private = self.__pydantic_private__
        return str(private["_origin"]) if private else ""

    description: str | None = Field(default=None, description="Free text for humans.")
    reason: str | None = Field(
        default=None, description="Why this entry exists; carried into skip/xfail messages."
    )
    issue: str | None = Field(
        default=None, description="Issue URL or id tracking this entry; carried into reports."
    )


class Precision(_Strict):
    atol: float | None = Field(default=None, description="Absolute tolerance override.")
    rtol: float | None = Field(default=None, description="Relative tolerance override.")


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


class DtypeRef(_Documented):
    name: str = Field(description="dtype name as in torch, e.g. float16, bfloat16, int64.")
    precision: Precision | None = None
    force_xfail: bool = Field(default=False, description="Variants of this dtype become xfail.")


class OpRef(_Documented):
    name: str = Field(description="OpInfo name, e.g. add or nn.functional.relu.")
    dtypes: list[DtypeRef] | None = Field(
        default=None, description="dtypes supported for this op (replaces the global list)."
    )
    force_xfail: bool = Field(default=False, description="Variants of this op become xfail.")

    @field_validator("dtypes", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _named_list(v)


class ModuleRef(_Documented):
    name: str = Field(description="ModuleInfo name, e.g. nn.Linear.")
    force_xfail: bool = False


class _AxisEdit(_Strict):
    pass


class DtypeEdit(_AxisEdit):
    include: list[DtypeRef] = Field(default_factory=list)
    exclude: list[DtypeRef] = Field(default_factory=list)

    @field_validator("include", "exclude", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _named_list(v)


class OpEdit(_AxisEdit):
    include: list[OpRef] = Field(default_factory=list)
    exclude: list[OpRef] = Field(default_factory=list)


class ModuleEdit(_AxisEdit):
    include: list[ModuleRef] = Field(default_factory=list)
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


# What `pytest -m` accepts in a mark name (tags become marks 'tag__<tag>').
_MARK = re.compile(r"[\w:+\-./]+")


class TestEntry(_Documented):
    __test__ = False  # not a pytest test class

    # Tuples, not lists: a config of 10,000 entries then leaves far fewer objects
    # for the cyclic GC to walk (see Note [GC-light config] in config/load.py).
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
    selectors: dict[str, Any] | None = Field(
        default=None,
        description="Torch Spyre (planned): accepted with a warning, not applied yet.",
    )

    @field_validator("tags", "labels")
    @classmethod
    def _mark_names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if not _MARK.fullmatch(name):
                raise ValueError(
                    f"expected a valid pytest mark name (letters, digits, _ - . : + /); "
                    f"found {name!r}"
                )
        return v


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


def _named(value: Any) -> Any:
    # Lists of dtypes, ops and modules accept a plain name as shorthand for {name: ...}.
    if isinstance(value, str):
        return {"name": value}
    return value


def _named_list(value: Any) -> Any:
    return [_named(x) for x in value] if isinstance(value, list) else value


class GlobalCaps(_Strict):
    supported_dtypes: list[DtypeRef] | None = None
    supported_ops: list[OpRef] | None = None
    supported_modules: list[ModuleRef] | None = None
    devices: list[str] | None = Field(
        default=None,
        description="Torch Spyre (planned): accepted and not used; the device comes from "
        "'device:' or --ootest-device.",
    )

    @field_validator("supported_dtypes", "supported_ops", "supported_modules", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return _named_list(v)


class TestSuiteConfig(_Strict):
    __test__ = False

    extends: list[str] = Field(
        default_factory=list, description="Config files whose content this one builds on."
    )
    device: str | None = Field(
        default=None, description="Device to run on: 'emu[:profile]' or 'module:name'."
    )
    labels: list[str] = Field(default_factory=list)
    files: list[FileEntry] = Field(default_factory=list)
    global_: GlobalCaps = Field(default_factory=GlobalCaps, alias="global")
    timeout: float | None = Field(default=None, gt=0, description="Per-test timeout, seconds.")

    @field_validator("extends", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Document(_Strict):
    test_suite_config: TestSuiteConfig
    relay: dict[str, Any] | None = Field(
        default=None, description="CRCR relay policy (see `ootest relay`)."
    )
