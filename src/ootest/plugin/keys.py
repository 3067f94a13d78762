"""What the ootest plugins share: an item's facts in its stash, the session's
collection in ``config.stash``, and the few derived names every plugin spells alike.

The core plugin decides every item at collection and stashes the result; the
selector (shards, resume), the variant dump, the op capture, result recording
and isolation read it from there, never from each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from ootest.config.decide import Decision
from ootest.plugin.plan import Facts
from ootest.record.crash import worker_id
from ootest.record.identity import FileKeys, node_id

if TYPE_CHECKING:
    from ootest.device.activate import DeviceSpec

__all__ = [
    "COLLECTION",
    "FACTS",
    "OUTCOME",
    "Collection",
    "Core",
    "FileStats",
    "is_controller",
    "is_worker",
    "item_node_id",
    "module_node_id",
    "result_fields",
    "variant_id",
    "worker",
]


class Core(Protocol):
    """What the small plugins (variant dump, op capture) read of the core plugin:
    the device under test and the file keys. They take it as this protocol, so
    none of them imports the core, which registers them (as pytest's own plugins
    talk through hooks and stash keys)."""

    @property
    def device(self) -> DeviceSpec | None: ...

    @property
    def keys(self) -> FileKeys: ...


#: The variant's identity and facts (every collected item).
FACTS = pytest.StashKey[Facts]()
#: The config's decision (items of the files a config lists).
OUTCOME = pytest.StashKey[Decision]()


@dataclass
class FileStats:
    collected: int = 0
    device_variants: int = 0


@dataclass
class Collection:
    """What the core plugin learns while collecting, for the plugins that report it."""

    keys: FileKeys  # see Note [File keys]
    device: str | None  # the backend's name
    module: str | None = None  # the module that registers it (its code: Note [Triage verdict])
    #: the device as ``--ootest-device`` names it (``emu:full``): Note [Evidence origins]
    spec: str | None = None
    stats: dict[str, FileStats] = field(default_factory=dict)  # by file key, config files only
    reused: int = 0  # variants whose record came from the plan cache
    computed: int = 0  # variants derived and decided in this run
    # config names (origin, name) that matched no collected variant: set by the core
    # plugin's tryfirst pytest_collection_finish, read by the later ones
    stale: list[tuple[str, str]] = field(default_factory=list)


#: The session's collection (in ``config.stash``, while the core plugin is registered).
COLLECTION = pytest.StashKey[Collection]()


def variant_id(item: pytest.Item) -> str:
    """The item's variant ID (its node ID when ootest did not derive one)."""
    facts = item.stash.get(FACTS, None)
    return facts.variant_id if facts is not None else item.nodeid


def module_node_id(config: pytest.Config, nodeid: str, module_nodeid: str, path: Path) -> str:
    """A node ID pytest accepts back (see Note [Node IDs])."""
    inv = str(config.invocation_params.dir)
    return node_id(nodeid, module_nodeid, str(path), str(config.rootpath), inv)


def item_node_id(item: pytest.Item) -> str:
    """The item's node ID as results record it (see Note [Node IDs])."""
    mod = item.getparent(pytest.Module)
    if mod is None:
        return item.nodeid
    return module_node_id(item.config, item.nodeid, mod.nodeid, mod.path)


def result_fields(item: pytest.Item) -> dict[str, Any]:
    """The result fields known before a test runs (its variant and its decision)."""
    v = item.stash.get(FACTS, None)
    if v is None:
        return {}
    out: dict[str, Any] = {"nodeid": item_node_id(item), **v._asdict()}
    d = item.stash.get(OUTCOME, None)
    if d is not None:
        out.update(mode=d.mode, bucket=d.bucket, reason=d.reason, issue=d.issue, origin=d.origin)
        if d.capable:
            out["capable"] = True
        if d.code:  # Note [Decisions people can see]
            out["code"] = d.code
            if d.evidence and d.mode != "mandatory_success":  # why it is skipped or xfail
                out["evidence"] = list(d.evidence)
    return out


# Roles under pytest-xdist: the controller reports and never runs tests;
# workers run tests and never write results (the controller gets their reports).
def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def worker(config: pytest.Config) -> str:
    return worker_id(getattr(config, "workerinput", None))


def is_controller(config: pytest.Config) -> bool:
    return not is_worker(config) and getattr(config.option, "dist", "no") != "no"
