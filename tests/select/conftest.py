"""The upgrades' delta capture (Note [Fresh evidence for the delta]) in these tests.

The op maps of these fixtures are written as a capture of *both* versions (each
variant's calls in the new version), so a fresh capture of the delta would find
the same ops: by default the delta capture here stamps the records the op map
holds with the variant's new fingerprint instead of running pytest on the
synthetic trees (whose variants are not what pytest would collect). Tests of the
capture itself pass their own capturer (tests/select/test_fresh.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from ootest.opmap.store import OpStore


def same_ops(
    db: Path,
    files: Sequence[Path],
    only: Path,
    code: Mapping[str, str],
    *,
    memory: Path | None,
    device: str,
    timeout: float,
    say: Callable[[str], None],
) -> None:
    """A capture that finds the ops the op map already holds for each variant."""
    with OpStore.open(db, create=True) as s:
        s.connection.executemany(
            "UPDATE variant_capture SET code = ? "
            "WHERE variant = (SELECT id FROM variant WHERE variant_id = ?)",
            [(fp, vid) for vid, fp in code.items()],
        )


# module-scoped: an autouse fixture comes before the other fixtures of its scope
# (the modules' fixtures that refresh), and the patch ends with each module, so
# tests elsewhere that a worker runs later see the real capture
@pytest.fixture(autouse=True, scope="module")
def _fixture_capture() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ootest.select.fresh.capture_variants", same_ops)
        yield
