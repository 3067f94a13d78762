"""The ootest exception tree.

    OotestError                 base of every error ootest raises on purpose
    ├── UserError               something the user can fix (exit code 2 in the CLI)
    │   ├── ConfigError         one or more problems in a config file (carries Problems)
    │   └── DeviceError         the requested device cannot be loaded or registered
    └── (anything else)         a bug in ootest (exit code 70)

Every user-facing message says where, what was expected, what was found and how
to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "EXIT_BUG",
    "EXIT_FAILED",
    "EXIT_GUARD",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "ConfigError",
    "DeviceError",
    "OotestError",
    "Problem",
    "UserError",
]

# The exit codes of every ``ootest`` command (one table; docs and README follow it).
EXIT_OK = 0  # success
EXIT_FAILED = 1  # test failures (a mandatory test did not pass, a strict xfail passed), or
#                  problems found by ``config validate``, or a delivery that failed
EXIT_USAGE = 2  # a usage, config or device error the user can fix (a UserError)
EXIT_GUARD = 3  # ``run``: the collection guard tripped
EXIT_BUG = 70  # a bug in ootest (any exception that is not a UserError)
EXIT_INTERRUPTED = 130  # Ctrl-C, or SIGTERM during ``run``
EXIT_PIPE = 141  # the reader of the output went away (``ootest ... | head``): quietly, as SIGPIPE


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
