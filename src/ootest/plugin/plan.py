"""What the plugin applies, compiled from a config, and the cache that keeps it.

Note [Plan cache]
~~~~~~~~~~~~~~~~~
Deciding a variant is a pure function of (config, variant), and a variant is a
pure function of the collected item. Both are cheap per variant but not free:
for a 10,000-entry config and 6,000 variants, loading the config (PyYAML,
pydantic, compiling names) and deriving and deciding every variant cost about
0.8 s on top of a 7 s collection. So the plugin compiles what it needs into
plain data -- a :class:`Plan` (device, timeout, warnings, per-file rules, the
config names for stale reports) and one :data:`Record` per collected test (its
variant facts, its outcome, its mark names) -- and keeps it in
``$OOTEST_CACHE_DIR/plans/`` (``marshal``: plain data only, nothing executable).

A cached plan is used only when everything it was computed from is unchanged;
otherwise the config is loaded and decided as if there were no cache:
  - the config file and every file it ``extends`` (their contents' hashes);
  - every ``files[].path`` re-expanded with today's environment and re-globbed
    names the same test files;
  - the context ``when:`` is evaluated in (torch version, platform);
  - ootest's own source files and torch's testing internals (mtime, size);
  - the config's evidence sidecar (mtime, size; Note [Decisions people can see]):
    decisions take their reason code and evidence from it;
  - the rootdir, the working folder, the ``--ootest-device`` value and the
    Python version (all in the cache file name).
A record is used only when its test file is unchanged (mtime, size: what
Python's own bytecode cache checks) and the
same node ID is collected again; a node ID not in the cache is decided from the
config (loaded then) and added. Test IDs carry the op, dtype and module, so an
OpInfo or ``@dtypes`` change elsewhere yields new IDs, not stale records.
A config with selectors (Note [Selectors]) keeps no records: its decisions also
depend on the op map and on marks, so they are made afresh every run.
``--ootest-no-cache`` or ``OOTEST_NO_CACHE=1`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import marshal
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ootest.atomic import write_atomic
from ootest.cache import cache_dir
from ootest.config import paths
from ootest.config.decide import Decision
from ootest.config.when import Context
from ootest.record.decisions import sidecar_path

if TYPE_CHECKING:
    from ootest.config.resolved import Config

FORMAT = 4  # 3: records keep config.decide.Decision; 4: with the sidecar's code and evidence
_DAY = 86400.0


class Facts(NamedTuple):
    """What results report about a variant before it runs."""

    variant_id: str
    file: str
    op: str | None
    dtype: str | None  # dtypes joined with ","
    device_variant: bool


# (facts, decision, mark names); a kept decision's ``matched`` are Plan.patterns ids
# and its tags and labels are in the mark names
Record = tuple[Facts, Decision | None, tuple[str, ...]]


class FileRule(NamedTuple):
    device_restrictions: str  # keep | bypass
    patterns: tuple[int, ...]  # ids of its config names


Stamp = tuple[str, int, int]  # (path, mtime_ns, size); -1, -1 when missing


def stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (path, st.st_mtime_ns, st.st_size)


def digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return ""


@dataclass
class Plan:
    """Everything the plugin needs from a config, as plain data."""

    device: str | None
    timeout: float | None
    labels: tuple[str, ...]
    warnings: tuple[str, ...]
    inject: bool  # the config adds variants (edits.*.include): needs the Config
    files: dict[str, FileRule]  # normalized test file path -> rule, in config order
    patterns: list[tuple[str, str]]  # pattern id -> (origin, name as written)
    # what it was compiled from
    source: str
    sources: tuple[tuple[str, str], ...]  # (config file, hash of its contents)
    resolved: tuple[tuple[str, tuple[str, ...]], ...]
    ctx: tuple[str | None, str]
    selectors: bool  # test_selectors or an entry's selectors: decided afresh every run
    op_map: str | None  # the config's op_map (absolute)
    sidecar: Stamp  # the config's evidence sidecar (Note [Decisions people can see])
    pattern_ids: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    """id(NamePattern) -> pattern id, for deciding with the Config (not stored)."""

    @classmethod
    def compile(cls, cfg: Config, ctx: Context, inject: bool) -> Plan:
        ids: dict[int, int] = {}
        table: list[tuple[str, str]] = []
        files: dict[str, FileRule] = {}
        for rf in cfg.files:
            pids: list[int] = []
            for entry, patterns in rf.patterns:
                for p in patterns:
                    pid = ids.get(id(p))
                    if pid is None:
                        pid = ids[id(p)] = len(table)
                        table.append((entry.origin, p.raw))
                    pids.append(pid)
            key = paths.norm(rf.path)
            if key not in files:  # the first entry for a file decides (as file_for does)
                files[key] = FileRule(rf.entry.device_restrictions, tuple(pids))
        suite = cfg.suite
        return cls(
            device=suite.device,
            timeout=suite.timeout,
            labels=tuple(suite.labels),
            warnings=tuple(str(w) for w in cfg.warnings),
            inject=inject,
            files=files,
            patterns=table,
            source=str(cfg.source),
            sources=tuple((str(p), digest(str(p))) for p in cfg.sources),
            resolved=tuple(cfg.resolved),
            ctx=(ctx.torch_version, ctx.platform),
            selectors=suite.test_selectors is not None
            or any(t.selectors is not None for f in suite.files for t in f.tests),
            op_map=suite.op_map,
            sidecar=stamp(str(sidecar_path(Path(cfg.source)))),
            pattern_ids=ids,
        )

    def still_valid(self, ctx: Context) -> bool:
        """Whether the config would compile to this plan today (see Note [Plan cache])."""
        if self.ctx != (ctx.torch_version, ctx.platform):
            return False
        if any(digest(p) != h for p, h in self.sources):
            return False
        if stamp(self.sidecar[0]) != tuple(self.sidecar):
            return False
        env = paths.environment(Path(self.source), (t for t, _ in self.resolved))
        for template, hits in self.resolved:
            text, missing = paths.expand(template, env)
            try:
                if missing or tuple(paths.matches(text)) != hits:
                    return False
            except ValueError:  # a glob past its bound (or a bad bound): the loader says so
                return False
        return True

    def to_data(self) -> tuple[Any, ...]:
        """The stored fields in order, as plain data ``marshal`` writes."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.compare}
        data["files"] = {k: tuple(v) for k, v in self.files.items()}
        return tuple(data.values())

    @classmethod
    def from_data(cls, data: tuple[Any, ...]) -> Plan:
        """Inverse of :meth:`to_data`; ValueError if the shape differs."""
        kw = dict(zip([f.name for f in fields(cls) if f.compare], data, strict=True))
        kw["files"] = {k: FileRule(*v) for k, v in kw["files"].items()}
        kw["sidecar"] = tuple(kw["sidecar"])
        return cls(**kw)


def _code_stamps() -> tuple[Stamp, ...]:
    """ootest's own sources and torch's testing internals: code a record depends on."""
    out = []
    here = Path(__file__).resolve().parent.parent
    for root, dirs, files in os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [stamp(os.path.join(root, f)) for f in sorted(files) if f.endswith(".py")]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        torch_dir = os.path.dirname(spec.origin)
        for rel in (
            "version.py",
            "testing/_internal/common_device_type.py",
            "testing/_internal/common_methods_invocations.py",
            "testing/_internal/common_modules.py",
            "testing/_internal/common_utils.py",
            "testing/_internal/opinfo/core.py",
        ):
            out.append(stamp(os.path.join(torch_dir, rel)))
    return tuple(out)


def plan_cache_disabled(option: bool) -> bool:
    return option or os.environ.get("OOTEST_NO_CACHE", "") not in ("", "0")


class PlanCache:
    """One config's plan and records, in one file per (config, rootdir, device)."""

    def __init__(self, path: Path, code: tuple[Stamp, ...]) -> None:
        self.path = path
        self.code = code
        self.plan: Plan | None = None
        self.tests: dict[str, tuple[int, int, dict[str, Any]]] = {}
        self._checked: set[str] = set()
        self._dirty = False

    @classmethod
    def open(
        cls, config_path: str, rootdir: str, device: str | None, roots: Iterable[str] = ()
    ) -> PlanCache:
        # The working folder too: relative paths in the config resolve against it;
        # and the roots file keys are made from (Note [File keys]).
        where = (paths.norm(config_path), paths.norm(rootdir), os.getcwd(), device, *roots)
        key = repr((FORMAT, sys.version_info[:2], *where))
        name = hashlib.sha256(key.encode()).hexdigest()[:24]
        return cls(cache_dir() / "plans" / f"{name}.marshal", _code_stamps())

    def load(self, ctx: Context) -> Plan | None:
        """The cached plan, if it is still what the config compiles to."""
        try:
            data = marshal.loads(self.path.read_bytes())
            fmt, code, plan_data, tests = data
            if fmt != FORMAT or code != self.code:
                return None
            plan = Plan.from_data(plan_data)
        except (OSError, EOFError, ValueError, TypeError):
            return None  # no cache, or one written by another version: start afresh
        if not plan.still_valid(ctx):
            return None
        self.plan, self.tests = plan, tests
        with contextlib.suppress(OSError):  # in use: keep it from being pruned (see save)
            if time.time() - self.path.stat().st_mtime > _DAY:
                os.utime(self.path)
        return plan

    def start(self, plan: Plan) -> None:
        """Use a freshly compiled plan; records of an older plan are dropped."""
        self.plan, self.tests, self._dirty = plan, {}, True

    def records(self, key: str) -> dict[str, Any] | None:
        """Cached records of one test file by node ID (raw tuples), if it is unchanged.

        Called once per file; a changed file's records are dropped.
        """
        self._checked.add(key)
        entry = self.tests.get(key)
        if entry is None:
            return None
        _, mtime, size = stamp(key)
        if (mtime, size) != entry[:2]:
            del self.tests[key]
            self._dirty = True
            return None
        return entry[2]

    def add(self, key: str, nodeid: str, record: Record) -> None:
        entry = self.tests.get(key)
        if entry is None:
            _, mtime, size = stamp(key)
            entry = self.tests[key] = (mtime, size, {})
        facts, outcome, marks = record
        entry[2][nodeid] = (tuple(facts), tuple(outcome) if outcome else None, marks)
        self._dirty = True

    def save(self) -> None:
        """Write the plan and records (atomically; a failure only costs the cache)."""
        if not self._dirty or self.plan is None:
            return
        data = (FORMAT, self.code, self.plan.to_data(), self.tests)
        with contextlib.suppress(OSError, ValueError):
            write_atomic(self.path, marshal.dumps(data))
            self._prune()
        self._dirty = False

    def _prune(self) -> None:
        """Drop plans no run has used for a month (configs in deleted folders, old
        checkouts) and temporary files a killed run left."""
        now = time.time()
        for entry in os.scandir(self.path.parent):
            age = now - entry.stat().st_mtime
            if (entry.name.endswith(".marshal") and age > 30 * _DAY) or (
                entry.name.endswith(".tmp") and age > _DAY
            ):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def record_from_data(raw: tuple[Any, ...]) -> Record:
    facts, outcome, marks = raw
    return (Facts(*facts), Decision(*outcome) if outcome is not None else None, marks)
