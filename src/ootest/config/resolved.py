"""A loaded config as the rest of ootest reads it: :class:`Config` and one
:class:`ResolvedFile` per test file, with the name index ``decide`` looks names up in.

Kept apart from the loader (:mod:`ootest.config.load`) so that the pure
``decide`` and everything that only reads a config import neither PyYAML nor
pydantic: the schema's classes are named here for the type checker only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ootest.config.names import NamePattern, Variant
from ootest.config.paths import norm
from ootest.errors import Problem

if TYPE_CHECKING:
    from ootest.config.model import FileEntry, TestEntry, TestSuiteConfig
    from ootest.config.relay_policy import RelayPolicy

__all__ = ["Candidate", "Config", "ResolvedFile"]

Candidate = tuple[int, NamePattern]  # (index of the entry in ResolvedFile.patterns, name)


@dataclass
class ResolvedFile:
    """One test file of the config after expansion (a glob gives several)."""

    path: Path
    entry: FileEntry
    patterns: list[tuple[TestEntry, tuple[NamePattern, ...]]]
    _index: dict[tuple[str, ...], list[Candidate]] | None = None
    _regexes: list[Candidate] = field(default_factory=list)
    _filtered: set[str] = field(default_factory=set)  # methods that have filtered names
    # Indexes ``decide`` builds over this file's entries and the capabilities it is
    # decided against: they live and die with the config, not in module globals.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def candidates(self, v: Variant) -> list[Candidate]:
        """Names that may match ``v``, as (entry index, name).

        Names are indexed by method, and names with a variant filter also by their
        first filter, so a 10,000-entry config costs a few dict lookups per
        variant rather than 10,000 comparisons.
        """
        index = self._index
        if index is None:
            index = {}
            for i, (_, patterns) in enumerate(self.patterns):
                for p in patterns:
                    if p.kind in ("regex", "pattern"):
                        self._regexes.append((i, p))
                    elif p.filters:
                        key, value = p.filters[0]
                        index.setdefault((p.method or "", key, value), []).append((i, p))
                        self._filtered.add(p.method or "")
                    else:
                        index.setdefault((p.method or "",), []).append((i, p))
            self._index = index
        found: list[Candidate] = []
        for name in v.names:
            found += index.get((name,), ())
            if name in self._filtered:
                for key, value in v.index_keys():
                    found += index.get((name, key, value), ())
        return found + self._regexes if self._regexes else found


@dataclass
class Config:
    """A loaded, composed and expanded config: what the plugin and runner use."""

    source: Path
    suite: TestSuiteConfig
    files: list[ResolvedFile] = field(default_factory=list)
    relay: RelayPolicy | None = None
    warnings: list[Problem] = field(default_factory=list)
    sources: list[Path] = field(default_factory=list)
    """Every config file read (this one and what it extends)."""
    resolved: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """(``files[].path`` as written, the files it named): what the plan cache re-checks."""

    def file_for(self, path: Path) -> ResolvedFile | None:
        key = norm(path)
        for f in self.files:
            if norm(f.path) == key:
                return f
        return None
