"""The relay policy: the ``relay:`` section of a config, which dispatches are worth
a build. Its own module so that ``ootest relay gate`` reads it without building
the whole config schema (start-up, see bench/relay_startup.py); the config schema
(``ootest.config.model``) includes it, and one loader validates both."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from ootest import naming as names

__all__ = ["LABEL_PLACEHOLDERS", "RELAY_VARS", "RelayPolicy", "check_device_name", "relay_var"]
# The device-name rule is defined once, in ootest.naming (Note [Device names]).

# Note [Relay variables]
# ``${VAR}`` in a ``relay:`` section expands only variables meant for it:
# OOTEST_DEVICE and the names starting OOTEST_RELAY_ (RELAY_VARS). A config
# comes from a pull request and ``relay gate`` prints what the policy holds in a
# public log: ``pr_label: ciflow/${GITHUB_TOKEN}`` must not put the token there.
# And what the environment gave is never printed either: the policy keeps the
# written ``${VAR}`` of each field it expanded, and messages (the gate's reason,
# a validation problem, ``config show``) show that instead of the value.
RELAY_VARS = ("OOTEST_DEVICE", "OOTEST_RELAY_*")


def relay_var(name: str) -> bool:
    """Whether ``${name}`` may expand in ``relay:`` (Note [Relay variables])."""
    return name == "OOTEST_DEVICE" or (
        name.startswith("OOTEST_RELAY_") and len(name) > len("OOTEST_RELAY_")
    )


# Note [Label placeholders]
# ``pr_label`` is a fixed text with placeholders, never a format string:
# ``str.format`` evaluated ``{device.__class__}`` and crashed ``relay gate`` on
# ``{x}``. The one placeholder is ``{device}``; any other ``{`` or ``}`` is a
# problem ``config validate`` reports.
LABEL_PLACEHOLDERS = ("{device}",)
_PLACEHOLDER = re.compile(r"\{[^{}]*\}|[{}]")


def check_label(text: str) -> str:
    """``text`` if its placeholders are all known (Note [Label placeholders])."""
    for m in _PLACEHOLDER.finditer(text):
        if m[0] not in LABEL_PLACEHOLDERS:
            found = m[0] if len(m[0]) <= 40 else m[0][:37] + "..."
            raise ValueError(
                f"expected a label whose only placeholder is {{device}}; found {found!r}. "
                "Remove it (braces are not allowed otherwise)"
            )
    return text


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

    #: the fields whose value came from the environment, with the ``${VAR}``
    #: text written for each (Note [Relay variables]); set by the loader
    _from_env: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return check_device_name(v)

    @field_validator("pr_label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return check_label(v) if v is not None else None

    def label(self) -> str | None:
        """The label a PR must carry (Note [Label placeholders])."""
        return self.pr_label.replace("{device}", self.device) if self.pr_label else None

    def shown(self, field: str) -> Any:
        """What a message may show of ``field``: its value, or the ``${VAR}`` it
        was written as when the environment gave it (Note [Relay variables])."""
        return self._from_env.get(field, getattr(self, field))

    def label_shown(self) -> str | None:
        """:meth:`label` as a message may show it (Note [Relay variables])."""
        if self.pr_label is None:
            return None
        if "pr_label" in self._from_env:
            return str(self._from_env["pr_label"])
        return self.pr_label.replace("{device}", str(self.shown("device")))

    def with_device(self, device: str) -> RelayPolicy:
        """A copy with ``device`` (``--device``): no longer from the environment."""
        out = self.model_copy(update={"device": device})
        out._from_env = {k: v for k, v in self._from_env.items() if k != "device"}
        return out

    def shown_dump(self) -> dict[str, Any]:
        """The policy as ``config show`` prints it: what came from the environment
        as the ``${VAR}`` written."""
        return {**self.model_dump(mode="json"), **self._from_env}

    def tracked(self, branch: str) -> bool:
        return branch in self.branches or (
            self.release_branches and _RELEASE.match(branch) is not None
        )
