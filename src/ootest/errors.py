"""The ootest exception tree.

    OotestError                 base of every error ootest raises on purpose
    ├── UserError               something the user can fix (exit code 2 in the CLI)
    │   ├── ConfigError         one or more problems in a config file (carries Problems)
    │   └── DeviceError         the requested device cannot be loaded or registered
    └── (anything else)         a bug in ootest (exit code 3)

Every user-facing message says where, what was expected, what was found and how
to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass


class OotestError(Exception):
    """Base class of all deliberate ootest errors."""


class UserError(OotestError):
    """An error the user can fix; shown without a traceback."""


@dataclass(frozen=True)
class Problem:
    """One problem found in a config file."""

    file: str
    line: int  # 1-based; 0 when unknown
    col: int  # 1-based; 0 when unknown
    key_path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}" + (f":{self.col}" if self.col else "")
        path = f" {self.key_path}:" if self.key_path else ""
        return f"{where}:{path} {self.message}"


class ConfigError(UserError):
    """A config file could not be loaded; ``problems`` lists every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class DeviceError(UserError):
    """A device backend could not be loaded or registered."""
