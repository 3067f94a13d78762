"""``when:`` conditions and the context they are evaluated in (no torch import)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no pydantic import for a run without a config
    from ootest.config.model import When


@dataclass(frozen=True)
class Context:
    torch_version: str | None = None
    platform: str = sys.platform

    @classmethod
    def current(cls) -> Context:
        try:
            version: str | None = metadata.version("torch")
        except metadata.PackageNotFoundError:
            version = None
        return cls(torch_version=version)


def holds(when: When | None, ctx: Context) -> bool:
    if when is None:
        return True
    if when.torch is not None:
        if ctx.torch_version is None:
            return False
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        # A local build suffix (+cpu, +git1234) must not hide the release number.
        release = Version(ctx.torch_version).base_version
        if not SpecifierSet(when.torch, prereleases=True).contains(release):
            return False
    if when.platform is not None:
        plats = [when.platform] if isinstance(when.platform, str) else when.platform
        if not any(ctx.platform.startswith(p) for p in plats):
            return False
    return True
