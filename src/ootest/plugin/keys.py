"""What the ootest plugins share about a collected item, in its stash.

The core plugin decides every item at collection and stashes the result; the
selector (shards, resume), the variant dump, the op capture and result
recording read it from there, never from each other.
"""

from __future__ import annotations

import pytest

from ootest.config.decide import Decision
from ootest.plugin.plan import Facts

__all__ = ["FACTS", "OUTCOME", "variant_id"]

#: The variant's identity and facts (every collected item).
FACTS = pytest.StashKey[Facts]()
#: The config's decision (items of the files a config lists).
OUTCOME = pytest.StashKey[Decision]()


def variant_id(item: pytest.Item) -> str:
    """The item's variant ID (its node ID when ootest did not derive one)."""
    facts = item.stash.get(FACTS, None)
    return facts.variant_id if facts is not None else item.nodeid
