"""What the op map's queries answer (plain records: the CLI prints them, selection
reads them); :mod:`ootest.opmap.store` fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class Provenance:
    """One capture: where and with what its ops were recorded."""

    id: int
    torch_version: str
    torch_git: str
    device: str
    profile: str
    ootest_version: str
    time: float
    source: str

    def label(self) -> str:
        where = f"{self.device}:{self.profile}" if self.profile else self.device
        return f"capture {self.id} ({where or '?'}, torch {self.torch_version or '?'})"


@dataclass(frozen=True)
class Flags:
    """What makes a variant's recorded ops less than certain."""

    device_branch: bool
    varies: bool
    partial: bool
    why: str | None

    @property
    def uncertain(self) -> bool:
        """The ops may differ per device: the answer is "run it"."""
        return self.device_branch or self.varies

    def short(self) -> str:
        """A table cell: what to keep in mind, without the why."""
        parts = ["may differ per device: run it"] if self.uncertain else []
        return ", ".join([*parts, "partial op set"] if self.partial else parts)

    def note(self) -> str:
        """One line for people: empty when the recorded ops can be trusted."""
        parts = []
        if self.uncertain:
            parts.append(f"may differ per device: run it ({self.why})")
        if self.partial:
            parts.append("op set may be incomplete (no capture ran it to a pass)")
        return "; ".join(parts)


class VariantHit(NamedTuple):
    """A variant calling a queried op (a tuple: a query may return 250,000)."""

    variant_id: str
    modes: tuple[str, ...]
    calls: int
    flags: Flags


@dataclass(frozen=True)
class TestsFor:
    """``tests-for``: the variants calling an op (or any overload of a packet)."""

    __test__ = False  # not a pytest test class

    query: str
    ops: tuple[str, ...]
    total: int
    variants: list[VariantHit]


@dataclass(frozen=True)
class OpUse:
    op: str
    packet: str
    mode: str
    calls: int
    dtypes: tuple[str, ...] = ()  # what its calls saw on the device (Note [Call dtypes])
    examples: int = 0  # calls written down for ``ops replay`` (Note [Call examples])


@dataclass(frozen=True)
class CaptureEnd:
    """How a variant ended in one capture."""

    capture: Provenance
    outcome: str | None
    stopped_on: str | None
    error: str | None
    n_ops: int
    #: the fingerprint of the code it ran (Note [Evidence of which code]); None: unknown
    code: str | None = None


@dataclass(frozen=True)
class ForTest:
    """``for-test``: one variant's ops."""

    variant_id: str
    nodeid: str | None
    file: str | None
    flags: Flags
    ops: list[OpUse]
    captures: list[CaptureEnd]


@dataclass(frozen=True)
class Stats:
    variants: int
    ops: int
    edges: int
    captures: list[Provenance]
    top_ops: list[tuple[str, int]]
    device_dependent: int
    partial: int


@dataclass
class IngestReport:
    """What one ingest added (printed by the CLI; returned to the capture)."""

    sources: list[str] = field(default_factory=list)
    captures: list[int] = field(default_factory=list)
    records: int = 0
    variants: int = 0
    edges: int = 0
    truncated: list[str] = field(default_factory=list)
    seconds: float = 0.0
