"""The stateful ootest plugin: device activation, outcomes, marks, results."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import sys
import time
from collections import Counter
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ootest.config.decide import Decision
from ootest.config.paths import file_keys, norm
from ootest.config.when import Context
from ootest.device.activate import DeviceSpec, activate_device
from ootest.plugin import marks as mk
from ootest.plugin.dump import VariantDump
from ootest.plugin.inject import CALL_TAGS, Injector
from ootest.plugin.inject import install as install_injection
from ootest.plugin.keys import FACTS, OUTCOME
from ootest.plugin.plan import (
    Facts,
    FileRule,
    Plan,
    PlanCache,
    Record,
    plan_cache_disabled,
    record_from_data,
)
from ootest.plugin.selector import Selector
from ootest.plugin.variant import variant_from_item
from ootest.record import crash
from ootest.record.crash import die_with_parent
from ootest.record.identity import FileKeys, env_roots, node_id
from ootest.record.results import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    XFAILED,
    XPASSED,
    XPASSED_STRICT,
    Appender,
    result_record,
    state_dir,
)

if TYPE_CHECKING:  # pydantic and PyYAML load only when a config must be read
    from ootest.config.resolved import Config, ResolvedFile
    from ootest.plugin.selection import Selection


_ONLY_FOR = "PYTORCH_TESTING_DEVICE_ONLY_FOR"
_FOR_CUSTOM = "PYTORCH_TESTING_DEVICE_FOR_CUSTOM"


@dataclass
class FileStats:
    collected: int = 0
    device_variants: int = 0


@dataclass(eq=False)  # pluggy needs plugins hashable by identity
class OotestPlugin:
    config: pytest.Config
    cfg_path: str | None
    cfg: Config | None  # loaded only when something must be decided (see plan.py)
    plan: Plan | None
    cache: PlanCache | None
    device: DeviceSpec | None
    keys: FileKeys = field(default_factory=FileKeys)  # see Note [File keys]
    ctx: Context = field(default_factory=Context.current)
    results_path: Path | None = None
    stats: dict[str, FileStats] = field(default_factory=dict)  # by file key
    used_patterns: set[int] = field(default_factory=set)  # Plan pattern ids
    seen_files: set[str] = field(default_factory=set)  # normalized paths
    registered_marks: dict[str, pytest.MarkDecorator] = field(default_factory=dict)
    _resolved: dict[str, ResolvedFile | None] = field(default_factory=dict)
    _marks_by_axes: dict[tuple[Any, ...], tuple[str, ...]] = field(default_factory=dict)
    reused: int = 0  # variants whose record came from the plan cache
    computed: int = 0  # variants derived and decided in this run
    outcomes: Counter[str] = field(default_factory=Counter)
    timeout: float | None = None
    state_dir: Path | None = None
    _out: Appender | None = None
    _fault_fh: Any = None
    _inflight: Path | None = None
    _outcome_marks: dict[tuple[str, str], pytest.MarkDecorator] = field(default_factory=dict)
    _decided: list[pytest.Item] = field(default_factory=list)  # items with stashed records
    op_marks: dict[str, tuple[str, ...]] | None = None  # variant ID -> aten__ marks (--ootest-ops)
    selection: Selection | None = None  # the config's selectors (Note [Selectors])
    # What this session changed outside itself (the environment, torch's parametrizers),
    # undone at unconfigure: see Note [Session-scoped changes].
    restore: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    run_id: str | None = None  # the 'ootest run' this session belongs to
    started: str = "fresh"  # or "forked" from the fork server (Note [Fork server])

    # ------------------------------------------------------------------ setup
    @classmethod
    def create(
        cls, config: pytest.Config, cfg_path: str | None, device: str | None
    ) -> OotestPlugin:
        restore = contextlib.ExitStack()
        config.add_cleanup(restore.close)  # also when the session never configures
        try:
            return cls._create(config, cfg_path, device, restore)
        except BaseException:
            restore.close()
            raise

    # Note [Session-scoped changes]
    # ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    # Anything the plugin changes beyond its own objects (an environment variable,
    # torch's parametrizers for edits.*.include) is registered on ``restore`` when
    # made and undone at pytest_unconfigure, so one pytest session in a process
    # (pytester's in-process runs, an IDE runner) leaves no trace on the next.
    # Registering the device cannot be undone: torch has no way to unregister a
    # privateuse1 backend, and a second session asks for the same one.
    @classmethod
    def _create(
        cls,
        config: pytest.Config,
        cfg_path: str | None,
        device: str | None,
        restore: contextlib.ExitStack,
    ) -> OotestPlugin:
        die_with_parent()
        ns = config.known_args_namespace
        ctx = Context.current()
        cfg = plan = cache = None
        if cfg_path:
            if not plan_cache_disabled(bool(getattr(ns, "ootest_no_cache", False))):
                cache = PlanCache.open(cfg_path, str(config.rootpath), device, env_roots())
                plan = cache.load(ctx)
            if plan is None or plan.inject:
                cfg = _load(cfg_path)
            if plan is None:
                assert cfg is not None
                plan = Plan.compile(cfg, ctx, Injector.needed(cfg))
                if cache is not None:
                    cache.start(plan)
            if plan.selectors:  # decided afresh (Note [Plan cache]), with the config
                cache = None
                if cfg is None or not plan.pattern_ids:
                    cfg = _load(cfg_path)
                    plan = Plan.compile(cfg, ctx, Injector.needed(cfg))
        device = device or (plan.device if plan else None)
        spec = DeviceSpec.parse(device) if device else None
        if spec is not None:
            # Device-generic tests instantiate for the device only (upstream's own switch),
            # unless the user chose otherwise.
            if _ONLY_FOR not in os.environ:
                os.environ[_ONLY_FOR] = "privateuse1"
                restore.callback(os.environ.pop, _ONLY_FOR, None)
            capman = config.pluginmanager.getplugin("capturemanager")
            # pytest already captures output here; a first emu build takes a minute
            # and says so, which a person should see.
            quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
            with quiet:
                activate_device(spec)
            if cfg is not None and plan is not None and plan.inject:
                restore.callback(install_injection(Injector(cfg, spec.name, ctx)))
        results = getattr(ns, "ootest_results", None)
        timeout = getattr(ns, "ootest_timeout", None)
        if timeout is None and plan is not None:
            timeout = plan.timeout
        state = getattr(ns, "ootest_state", None)
        if state is None and results:
            state = str(state_dir(Path(results)))
        if plan is not None:
            keys = file_keys(Path(plan.source), (t for t, _ in plan.resolved))
        else:
            keys = FileKeys.from_env()
        plugin = cls(
            config=config,
            cfg_path=cfg_path,
            cfg=cfg,
            plan=plan,
            cache=cache,
            device=spec,
            keys=keys,
            ctx=ctx,
            results_path=Path(results) if results else None,
            timeout=float(timeout) if timeout else None,
            state_dir=Path(state) if state else None,
            restore=restore,
            # not for grandchildren (pytest-xdist workers): they are started afresh
            run_id=os.environ.get("OOTEST_RUN_ID"),
            started=os.environ.pop("OOTEST_STARTED", "fresh"),
        )
        ops_db, given_by = getattr(ns, "ootest_ops", None), "--ootest-ops"
        if not ops_db and plan is not None and plan.op_map:
            ops_db, given_by = plan.op_map, f"{plan.source}: op_map"
        evidence = None
        if ops_db:
            from ootest.plugin.selection import aten_marks, load_evidence

            evidence = load_evidence(Path(ops_db), given_by)
            plugin.op_marks = aten_marks(evidence)
        if plan is not None and plan.selectors:
            from ootest.plugin.selection import Selection

            assert cfg is not None
            plugin.selection = Selection.create(cfg, evidence)
        dump = getattr(ns, "ootest_variants", None)
        if dump:
            config.pluginmanager.register(VariantDump(Path(dump), plugin), "ootest-variants")
        capture = getattr(ns, "ootest_ops_capture", None)
        if capture:
            from ootest.plugin.opcapture import OpCapture

            config.pluginmanager.register(OpCapture(Path(capture), plugin), "ootest-ops-capture")
        selector = Selector.create(ns, keys, plugin.run_id)
        if selector is not None:
            config.pluginmanager.register(selector, "ootest-selector")
        return plugin

    # Roles under pytest-xdist: the controller reports and never runs tests;
    # workers run tests and never write results (the controller gets their reports).
    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def worker(self) -> str:
        return crash.worker_id(getattr(self.config, "workerinput", None))

    @property
    def is_controller(self) -> bool:
        return not self.is_worker and getattr(self.config.option, "dist", "no") != "no"

    def pytest_configure(self, config: pytest.Config) -> None:
        if self.results_path is not None:
            self._out = Appender(self.results_path)
        if self.is_controller and getattr(config.option, "maxworkerrestart", 0) is None:
            # A young backend may crash many tests; each crash costs one worker.
            config.option.maxworkerrestart = "100000"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.is_controller or self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        wid = self.worker
        self._inflight = crash.inflight_path(self.state_dir, wid)
        self._fault_fh = open(self.state_dir / f"fault-{wid}-{os.getpid()}.log", "w")
        faulthandler.enable(file=self._fault_fh, all_threads=True)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self._out is not None and not self.is_worker:
            self._out.write({"kind": "finish", "exitstatus": int(exitstatus), "time": time.time()})

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # Let reference counting free the config and the per-variant records now:
        # pytest's closing gc.collect() and the interpreter's final one then
        # do not walk tens of thousands of ootest objects.
        for item in self._decided:
            _drop(item.stash, FACTS)
            _drop(item.stash, OUTCOME)
        self._decided = []
        self.cfg = self.plan = self.cache = None
        self._resolved.clear()
        self.restore.close()
        if self._out is not None:
            self._out.close()
        if self._fault_fh is not None:
            faulthandler.disable()
            self._fault_fh.close()
            with contextlib.suppress(OSError):
                if os.path.getsize(self._fault_fh.name) == 0:
                    os.unlink(self._fault_fh.name)

    def _track(self, data: dict[str, Any]) -> None:
        if self._inflight is not None:
            data.update(
                start=time.time(),
                worker=self.worker,
                timeout=self.timeout,
                fault_log=self._fault_fh.name if self._fault_fh is not None else None,
            )
            crash.write_inflight(self._inflight, data)

    # -------------------------------------------------------------- collection
    def _rule(self, key: str) -> FileRule | None:
        """The config's rule for a test file (by normalized path), if it lists the file."""
        return self.plan.files.get(key) if self.plan is not None else None

    def _config(self) -> Config:
        """The loaded config (read on first need when the plan came from the cache)."""
        if self.cfg is None:
            assert self.cfg_path is not None
            self.cfg = _load(self.cfg_path)
            fresh = Plan.compile(self.cfg, self.ctx, self.plan.inject if self.plan else False)
            if self.plan is not None and fresh.patterns == self.plan.patterns:
                self.plan.pattern_ids = fresh.pattern_ids
            else:  # changed since the cached plan was checked: the fresh one wins
                self.plan = fresh
                if self.cache is not None:
                    self.cache.start(fresh)
        return self.cfg

    def _resolved_file(self, key: str, path: Path) -> ResolvedFile | None:
        if key not in self._resolved:
            self._resolved[key] = self._config().file_for(path)
        return self._resolved[key]

    @contextlib.contextmanager
    def _bypass_env(self) -> Iterator[None]:
        assert self.device is not None
        old = os.environ.get(_FOR_CUSTOM)
        # Both spellings: PrivateUse1TestBase.device_type is rewritten from
        # 'privateuse1' to the backend name once a class's setUpClass ran.
        os.environ[_FOR_CUSTOM] = f"privateuse1,{self.device.name}"
        try:
            yield
        finally:
            if old is None:
                os.environ.pop(_FOR_CUSTOM, None)
            else:
                os.environ[_FOR_CUSTOM] = old

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        if not isinstance(collector, pytest.Module):
            return (yield)
        key = self.keys.key(collector.path)
        arg = self._node_id(collector.nodeid, collector.nodeid, collector.path)
        if self._inflight is not None:
            self._track({"phase": "collect", "nodeid": arg, "variant_id": key, "file": key})
        try:
            report = yield from self._collect_module(collector, key)
            # the controller (pytest-xdist) sees only the report: it carries the identity
            report.ootest_file, report.ootest_nodeid = key, arg
            return report
        finally:
            if self._inflight is not None:
                crash.clear_inflight(self._inflight)

    def _node_id(self, nodeid: str, module_nodeid: str, path: Path) -> str:
        """A node ID pytest accepts back (see Note [Node IDs])."""
        inv = str(self.config.invocation_params.dir)
        return node_id(nodeid, module_nodeid, str(path), str(self.config.rootpath), inv)

    def item_node_id(self, item: pytest.Item) -> str:
        mod = item.getparent(pytest.Module)
        if mod is None:
            return item.nodeid
        return self._node_id(item.nodeid, mod.nodeid, mod.path)

    def _collect_module(self, collector: pytest.Collector, key: str) -> Generator[None, Any, Any]:
        rule = self._rule(norm(collector.path))
        if rule is not None:
            self.stats.setdefault(key, FileStats())  # counted even if empty
        if rule is None or rule.device_restrictions != "bypass" or self.device is None:
            return (yield)
        with self._bypass_env():
            report = yield
        mod = getattr(collector, "_obj", None)
        for value in vars(mod).values() if mod is not None else ():
            if isinstance(value, type) and getattr(value, "device_type", None) in (
                "privateuse1",
                self.device.name,
            ):
                # upstream's hook for OOT backends (see onlyOn in common_device_type)
                setattr(value, "bypass_device_restrictions", True)  # noqa: B010
        return report

    def _marks(self, wanted: Iterable[str]) -> None:
        """Register new mark names in one batch, then build their decorators.

        Registering first matters: pytest re-reads every registered marker each
        time an unknown name is looked up, which is quadratic over thousands.
        """
        new = [n for n in wanted if n not in self.registered_marks]
        for name in new:
            self.config.addinivalue_line("markers", f"{name}: {mk.mark_text(name)}")
        for name in new:
            self.registered_marks[name] = getattr(pytest.mark, name)

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        # Thousands of small objects on top of torch's large heap: without this,
        # full cyclic-GC passes over op_db and the collected tree dominate the time
        # spent here. Frozen objects are only skipped by the collector meanwhile.
        gc.freeze()
        try:
            self._decide_all(config, items)
        finally:
            gc.unfreeze()

    def _decide_all(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        names = frozenset({self.device.name} if self.device else ())
        cache = self.cache
        planned: list[tuple[pytest.Item, tuple[str, ...]]] = []
        wanted: dict[str, None] = {}
        # per test file: (normalized path, file key, its rule, its counts, its cached records)
        per_path: dict[Path, tuple[str, str, FileRule | None, FileStats | None, Any]] = {}
        for item in items:
            known = per_path.get(item.path)
            if known is None:
                key = norm(item.path)
                rel = self.keys.key(item.path)
                rule = self._rule(key)
                st = None
                if rule is not None:
                    self.seen_files.add(key)
                    st = self.stats.setdefault(rel, FileStats())
                cached = cache.records(key) if cache is not None else None
                known = per_path[item.path] = (key, rel, rule, st, cached)
            key, rel, rule, st, cached = known
            raw = cached.get(item.nodeid) if cached is not None else None
            if raw is not None:
                rec = record_from_data(raw)
                self.reused += 1
            else:
                self.computed += 1
                rec = self._compute(item, rel, names, key if rule is not None else None)
                if cache is not None and self.plan is not None:
                    cache.add(key, item.nodeid, rec)
            facts, outcome, marks = rec
            item.stash[FACTS] = facts
            self._decided.append(item)
            if st is not None and outcome is not None:
                st.collected += 1
                st.device_variants += facts.device_variant
                item.stash[OUTCOME] = outcome
                self.used_patterns.update(outcome.matched)
                self._apply(item, outcome)
            if self.op_marks is not None:
                marks = (*marks, *self.op_marks.get(facts.variant_id, ()))
            wanted.update(dict.fromkeys(marks))
            planned.append((item, marks))
        self._deselect_by_node_id(config, items)
        self._marks(wanted)
        for item, mark_names in planned:
            for name in mark_names:
                item.add_marker(self.registered_marks[name])
        if cache is not None:
            cache.save()

    def _deselect_by_node_id(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """``--deselect`` also takes the node IDs results record (see Note [Node IDs]):
        pytest's own names a file outside the rootdir by nothing."""
        prefixes = tuple(config.getoption("deselect", None) or ())
        if not prefixes:
            return
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            mod = item.getparent(pytest.Module)
            spellings = [self.item_node_id(item)]
            if mod is not None and item.nodeid.startswith(mod.nodeid):  # the absolute form
                spellings.append(os.path.realpath(mod.path) + item.nodeid[len(mod.nodeid) :])
            hit = any(n.startswith(prefixes) for n in spellings)
            (drop if hit else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    def _compute(
        self, item: pytest.Item, rel: str, names: frozenset[str], key: str | None
    ) -> Record:
        """Derive the variant of ``item`` and, in a config file (``key``), decide it."""
        v = variant_from_item(item, rel, names)
        facts = Facts(v.variant_id, v.file, v.op, ",".join(v.dtypes) or None, v.device_variant)
        axis_key = (v.op_name, v.op, v.dtypes, v.module)
        marks = self._marks_by_axes.get(axis_key)
        if marks is None:
            marks = self._marks_by_axes[axis_key] = mk.axis_marks(v)
        rf = self._resolved_file(key, item.path) if key is not None else None
        if rf is None:
            return facts, None, marks
        from ootest.config.decide import decide, declared

        assert self.cfg is not None and self.plan is not None
        caps = self.cfg.suite.global_
        sel = self.selection
        aten = self.op_marks.get(v.variant_id, ()) if self.op_marks is not None else ()
        admit = None
        if sel is not None and sel.entries:
            # an entry's selectors read the marks known before any entry decides
            known = mk.labels((*self.plan.labels, *rf.entry.labels))
            before = sel.facts(item, v, (*marks, *aten, *known))
            admit = partial(sel.admit, facts=before)
        d = decide(rf, caps, v, self.ctx, admit)
        pids = self.plan.pattern_ids
        # kept as plain data (Note [Plan cache]): names by id, tags and labels as marks
        outcome = d._replace(
            matched=tuple(pids[id(p)] for p in d.matched),
            capable=d.mode == "skip" and d.bucket == "listed" and declared(caps, v, rf),
            tags=(),
            labels=(),
        )
        labels = (*self.plan.labels, *d.labels)  # suite, file, entry
        # a declared call's (or module's) own tags, after its test entry's
        tags = (*d.tags, *getattr(getattr(item, "obj", None), CALL_TAGS, ()))
        if tags or labels:
            marks = mk.unique([*marks, *mk.tags(tags), *mk.labels(labels)])
        if sel is not None and sel.top is not None and outcome.mode != "skip":
            verdict = sel.decide_top(sel.facts(item, v, (*marks, *aten)))
            if not verdict.selected:
                outcome = Decision(
                    "skip",
                    f"left out by test_selectors: {verdict.why}",
                    verdict.origin,
                    bucket="selector",
                    matched=outcome.matched,
                )
        return facts, outcome, marks

    def _apply(self, item: pytest.Item, d: Decision) -> None:
        if d.mode == "mandatory_success":
            return
        key = (d.mode, d.message)
        mark = self._outcome_marks.get(key)
        if mark is None:  # many variants share a reason: build each mark once
            if d.mode == "skip":
                mark = pytest.mark.skip(reason=d.message)
            elif d.mode == "xfail":
                mark = pytest.mark.xfail(reason=d.message, strict=False, run=True)
            else:
                mark = pytest.mark.xfail(
                    reason=f"{d.message}; strict: if it passes, promote it to mandatory_success",
                    strict=True,
                    run=True,
                )
            self._outcome_marks[key] = mark
        item.add_marker(mark)

    def stale_patterns(self) -> list[tuple[str, str]]:
        """Config names (origin, name) that matched no collected variant, in files
        that were collected."""
        out: list[tuple[str, str]] = []
        if self.plan is None:
            return out
        done: set[int] = set()
        for key, rule in self.plan.files.items():
            if key not in self.seen_files:
                continue
            for pid in rule.patterns:
                if pid not in self.used_patterns and pid not in done:
                    done.add(pid)
                    out.append(self.plan.patterns[pid])
        return out

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self._out is None or self.is_controller:
            return
        now = time.time()
        for key, st in sorted(self.stats.items()):
            self._out.write(
                {
                    "kind": "collection",
                    "file": key,
                    "collected": st.collected,
                    "device_variants": st.device_variants,
                    "device": self.device.name if self.device else None,
                    "time": now,
                }
            )
        selector = self.config.pluginmanager.get_plugin("ootest-selector")
        if not (isinstance(selector, Selector) and selector.skipped):
            # A session that left finished files out cannot tell a stale name from one
            # that matched only there; the session that collected them said it.
            for origin, name in self.stale_patterns():
                self._out.write({"kind": "stale", "origin": origin, "name": name, "time": now})
        files = Counter(dict.fromkeys(self.stats, 0))
        files.update(
            f.file if (f := item.stash.get(FACTS, None)) is not None else self.keys.key(item.path)
            for item in session.items
        )
        self._out.write(
            {
                "kind": "session",
                "selected": len(session.items),
                "files": dict(files),
                "plan": {"reused": self.reused, "computed": self.computed},
                "worker": self.worker,
                "pid": os.getpid(),
                "run": self.run_id,
                "started": self.started,
                "time": now,
            }
        )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A file that cannot be imported (e.g. an upstream file needing a newer torch)
        # is one clear error result; one that skips itself at import (a module-level
        # SkipTest, "requires CUDA") one skipped result. The other files still run.
        if self._out is None or self.is_worker or not (report.failed or report.skipped):
            return
        if report.skipped:
            lr = report.longrepr
            why = str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
            outcome, message = (
                SKIPPED,
                "module skipped at import: " + why.removeprefix("Skipped: "),
            )
        else:
            outcome, message = ERROR, "collection failed: " + str(report.longrepr)[-3000:]
        self.outcomes[outcome] += 1
        key = str(getattr(report, "ootest_file", None) or report.fspath)
        self._out.write(
            result_record(
                outcome,
                nodeid=str(getattr(report, "ootest_nodeid", None) or report.nodeid),
                variant_id=key,
                file=key,
                phase="collect",
                mode=None,
                reason=message if outcome == SKIPPED else None,
                message=message,
            )
        )

    # ----------------------------------------------------------------- running
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        if self._inflight is not None:
            self._track({"phase": "run", "pytest_nodeid": item.nodeid, **_fields(item, self)})
        if self.timeout:
            faulthandler.dump_traceback_later(
                self.timeout, exit=True, file=self._fault_fh or sys.stderr
            )
        try:
            return (yield)
        finally:
            if self.timeout:
                faulthandler.cancel_dump_traceback_later()
            if self._inflight is not None:
                crash.clear_inflight(self._inflight)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        d = item.stash.get(OUTCOME, None)
        tc = getattr(item, "_testcase", None)
        if d is None or (d.atol is None and d.rtol is None) or tc is None:
            return (yield)
        if not hasattr(tc, "precision"):
            return (yield)
        saved = (tc.precision, getattr(tc, "rel_tol", 0))
        if d.atol is not None:
            tc.precision = d.atol
        if d.rtol is not None and hasattr(tc, "rel_tol"):
            tc.rel_tol = d.rtol
        try:
            return (yield)
        finally:
            tc.precision = saved[0]
            if hasattr(tc, "rel_tol"):
                tc.rel_tol = saved[1]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        if str(report.when) == "???" and "crashed while running" in str(report.longrepr):
            rec = self._xdist_crash(report)  # a pytest-xdist worker died in this test
        else:
            outcome = classify(report)
            if outcome is None:
                return
            rec = self._record(report, outcome)
        self.outcomes[rec["outcome"]] += 1
        if self._out is not None:
            self._out.write(rec)

    def _xdist_crash(self, report: pytest.TestReport) -> dict[str, Any]:
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        wid = str(getattr(gateway, "id", "?"))
        inflight = None
        if self.state_dir is not None:
            inflight = crash.read_inflight(crash.inflight_path(self.state_dir, wid))
        if inflight is None or inflight.get("pytest_nodeid") != report.nodeid:
            # nothing known about the test beyond what pytest-xdist says
            file = report.fspath or report.nodeid.split("::")[0]
            inflight = {"nodeid": report.nodeid, "variant_id": report.nodeid, "file": file}
            inflight["mode"] = None
        rec = crash.crash_record(inflight)
        rec["message"] = f"pytest-xdist worker {wid}: {rec['message']}"
        return rec

    def _record(self, report: pytest.TestReport, outcome: str) -> dict[str, Any]:
        props = {
            k[len("ootest_") :]: v
            for k, v in report.user_properties
            if isinstance(k, str) and k.startswith("ootest_")
        }
        return result_record(
            outcome,
            nodeid=str(props.get("nodeid", report.nodeid)),
            variant_id=str(props.get("variant_id", report.nodeid)),
            file=str(props.get("file", report.fspath)),
            mode=props.get("mode"),
            bucket=props.get("bucket"),
            reason=props.get("reason"),
            issue=props.get("issue"),
            origin=props.get("origin"),
            op=props.get("op"),
            dtype=props.get("dtype"),
            device_variant=props.get("device_variant", False),
            capable=props.get("capable", False),
            where=_where(report),
            duration=report.duration,
            message=_excerpt(report),
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        fields = _fields(item, self)
        if fields:
            item.user_properties.extend((f"ootest_{k}", v) for k, v in fields.items())

    # ---------------------------------------------------------------- summary
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.plan is None:
            return
        tr = terminalreporter
        if self.config.option.verbose > 0:
            where = f"cached in {self.cache.path}" if self.cache else "not cached"
            tr.write_line(
                f"ootest: plan {where}: {self.reused} variants from the cache, "
                f"{self.computed} derived and decided now"
                + ("" if self.cfg is None else " (config loaded)")
            )
        for w in self.plan.warnings:
            tr.write_line(f"ootest: note: {w}", yellow=True)
        for line in self.selection.summary() if self.selection is not None else ():
            tr.write_line(f"ootest: {line}")
        for key, st in sorted(self.stats.items()):
            if self.device is not None and st.device_variants == 0:
                tr.write_line(
                    f"ootest: WARNING: {key} instantiated no variant for device "
                    f"{self.device.name!r} ({st.collected} other tests); check only_for=, "
                    "device_restrictions: bypass, or the import order of the backend",
                    red=True,
                )
        stale = self.stale_patterns()
        if stale:
            tr.write_sep("-", f"ootest: {len(stale)} config names matched no test")
            shown = stale if self.config.option.verbose > 0 else stale[:_STALE_SHOWN]
            for origin, name in shown:
                tr.write_line(f"  {origin}: {name}")
            if len(shown) < len(stale):
                tr.write_line(f"  ... and {len(stale) - len(shown)} more (-v lists them all)")


_STALE_SHOWN = 20  # stale names listed without -v


def _drop(stash: pytest.Stash, key: pytest.StashKey[Any]) -> None:
    if key in stash:
        del stash[key]


def _load(cfg_path: str) -> Config:
    """Load a config with the cyclic GC paused: a large config builds tens of thousands
    of acyclic objects, and GC passes over the growing graph cost as much as the
    parse itself. Reference counting still frees everything."""
    from ootest.config.load import load_config

    was = gc.isenabled()
    gc.disable()
    try:
        return load_config(cfg_path)
    finally:
        if was:
            gc.enable()


def _fields(item: pytest.Item, plugin: OotestPlugin) -> dict[str, Any]:
    """The result fields known before a test runs (its variant and its decision)."""
    v = item.stash.get(FACTS, None)
    if v is None:
        return {}
    out: dict[str, Any] = {"nodeid": plugin.item_node_id(item), **v._asdict()}
    d = item.stash.get(OUTCOME, None)
    if d is not None:
        out.update(mode=d.mode, bucket=d.bucket, reason=d.reason, issue=d.issue, origin=d.origin)
        if d.capable:
            out["capable"] = True
    return out


def classify(report: pytest.TestReport) -> str | None:
    """One outcome per test: from the call phase, or from setup/teardown when they decide it."""
    wasxfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return XPASSED if wasxfail else PASSED
        if report.skipped:
            return XFAILED if wasxfail else SKIPPED
        text = str(report.longrepr) if report.longrepr is not None else ""
        return XPASSED_STRICT if text.startswith("[XPASS(strict)]") else FAILED
    if report.when == "setup":
        if report.skipped:
            return XFAILED if wasxfail else SKIPPED
        if report.failed:
            return ERROR
        return None
    if report.failed:  # teardown
        return ERROR
    return None


def _where(report: pytest.TestReport) -> str | None:
    """``file.py:line`` where a failure was raised (the innermost frame pytest shows)."""
    crash = getattr(report.longrepr, "reprcrash", None) if report.failed else None
    if crash is None:
        return None
    return f"{os.path.basename(str(crash.path))}:{crash.lineno}"


def _excerpt(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    if report.passed:
        return None
    lr = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])[:500]
    crash = getattr(lr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)[:500]
    return str(lr)[-500:] if lr is not None else None
