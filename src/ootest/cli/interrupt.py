"""SIGTERM treated as Ctrl-C while a command supervises children (Note [Interrupted runs])."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def term_as_interrupt(say: Callable[[], str] | None = None) -> Iterator[None]:
    """Inside, SIGTERM (a cancelled CI job, ``timeout``, ``kill``) raises
    KeyboardInterrupt like Ctrl-C, so the code that stops children runs; an
    interrupt leaves with ``say()`` as its message (what was kept, how to go on).
    Outside the main thread SIGTERM is left alone."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:
        previous = None
    try:
        yield
    except KeyboardInterrupt:
        if say is None:
            raise
        raise KeyboardInterrupt(say()) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
