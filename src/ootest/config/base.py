"""What every model of the config schema shares: strict fields, and the attributes
the loader sets after validation (Note [Loader-set attributes])."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict", "set_private"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# Note [Loader-set attributes]
# Where an entry came from (``file:line`` of each entry, where a file's ``path:`` is)
# is not config data: the loader sets it after validation, with set_private, in the
# model's ``__pydantic_private__`` dict, and properties read it. Not declared as
# PrivateAttr: pydantic then runs Python code for every instance it builds to fill
# in the defaults (a third of validating 100,000 test entries); a model the loader
# did not set has None there, and the properties give their defaults.


def set_private(model: BaseModel, name: str, value: Any) -> None:
    """Set a loader-set attribute (Note [Loader-set attributes])."""
    private = model.__pydantic_private__
    if private is None:
        object.__setattr__(model, "__pydantic_private__", {name: value})
    else:
        private[name] = value
