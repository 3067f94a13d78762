"""The one rule for a per-test timeout: seconds, finite, above 0 and below
:data:`MAX_TIMEOUT` (faulthandler's timer, which arms it, overflows near 1e12 and
takes neither 0, a negative number, ``inf`` nor ``nan``)."""

from __future__ import annotations

__all__ = ["MAX_TIMEOUT", "check_timeout"]

MAX_TIMEOUT = 1e9


def check_timeout(value: float | None, what: str) -> None:
    """Raise a one-line :class:`~ootest.errors.UserError` naming ``what`` (the option)
    when ``value`` is given and is not a usable timeout."""
    if value is not None and not 0 < value < MAX_TIMEOUT:
        from ootest.errors import UserError

        raise UserError(f"{what}: expected a positive number of seconds; found {value:g}")
