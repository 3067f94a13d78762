"""The relay policy: the ``relay:`` section of a config, which dispatches are worth
a build. Its own module so that ``ootest relay gate`` reads it without building
the whole config schema (start-up, see bench/relay_startup.py); the config schema
(``ootest.config.model``) includes it, and one loader validates both."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ootest import naming as names

__all__ = ["RelayPolicy", "check_device_name"]
# The device-name rule is defined once, in ootest.naming (Note [Device names]).

_RELEASE = re.compile(r"release/\d+\.\d+\Z")


def check_device_name(name: str) -> str:
    if not names.is_device_name(name):
        raise ValueError(f"expected {names.DEVICE_NAME_RULE}; found {name!r}")
    return name


class RelayPolicy(BaseModel):
    """The ``relay:`` section of an ootest config: which dispatches are worth a build."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    device: str = Field(
        default="emu",
        description="names the label ciflow/crcr/<device>",
        json_schema_extra={"pattern": names.DEVICE_NAME_PATTERN},
    )
    pr_actions: list[str] = Field(default_factory=lambda: ["opened", "reopened", "synchronize"])
    pr_label: str | None = Field(
        default="ciflow/crcr/{device}",
        description="label a PR must carry to run (L3); null runs every PR (L4)",
    )
    landed: bool = Field(default=True, description="build PRs when they land")
    branches: list[str] = Field(default_factory=lambda: ["main"])
    release_branches: bool = Field(default=True, description="also track release/X.Y")
    push_branches: list[str] = Field(default_factory=lambda: ["main"])
    push_tags: list[str] = Field(default_factory=lambda: ["ciflow/*"])

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return check_device_name(v)

    def label(self) -> str | None:
        return self.pr_label.format(device=self.device) if self.pr_label else None

    def tracked(self, branch: str) -> bool:
        return branch in self.branches or (
            self.release_branches and _RELEASE.match(branch) is not None
        )
