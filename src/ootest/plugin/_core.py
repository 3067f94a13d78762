"""The stateful ootest plugin: deciding every collected variant (outcome marks,
axis marks, precision), and registering the plugins for the other jobs a session
asks for (results, isolation, shards and resume, the variant dump, op capture)."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ootest.atomic import check_output
from ootest.config.decide import Decision
from ootest.config.names import op_filter_note
from ootest.config.paths import file_keys, norm
from ootest.config.when import Context
from ootest.device.activate import DeviceSpec, activate_device
from ootest.plugin import marks as mk
from ootest.plugin import reportcost
from ootest.plugin.dump import VariantDump
from ootest.plugin.explain import explain
from ootest.plugin.inject import CALL_TAGS, Injector
from ootest.plugin.inject import install as install_injection
from ootest.plugin.isolation import Isolation
from ootest.plugin.keys import (
    COLLECTION,
    FACTS,
    OUTCOME,
    Collection,
    FileStats,
    is_controller,
    item_node_id,
    module_node_id,
    result_fields,
)
from ootest.plugin.plan import (
    Facts,
    FileRule,
    Plan,
    PlanCache,
    Record,
    plan_cache_disabled,
    record_from_data,
)
from ootest.plugin.recorder import Recorder
from ootest.plugin.selector import Selector
from ootest.plugin.summary import LinearSummary
from ootest.plugin.variant import variant_from_item
from ootest.record.crash import die_with_parent
from ootest.record.identity import FileKeys, backend_module, env_roots
from ootest.record.results import state_dir
from ootest.timeout import check_timeout

if TYPE_CHECKING:  # pydantic and PyYAML load only when a config must be read
    from ootest.config.resolved import Config, ResolvedFile
    from ootest.plugin.selection import Selection
    from ootest.record.decisions import Sidecar


_ONLY_FOR = "PYTORCH_TESTING_DEVICE_ONLY_FOR"
_FOR_CUSTOM = "PYTORCH_TESTING_DEVICE_FOR_CUSTOM"


def _adopt(plan: Plan | None, cfg: Config, ctx: Context, cache: PlanCache | None) -> Plan:
    """The plan to decide with the loaded ``cfg``: a cached plan takes the config's
    pattern ids (``Plan.pattern_ids``, never stored: every decision names its matched
    patterns through them); one the config no longer compiles to gives way to a
    fresh plan (changed since the cached plan was checked)."""
    fresh = Plan.compile(cfg, ctx, plan.inject if plan is not None else Injector.needed(cfg))
    if plan is not None and fresh.patterns == plan.patterns:
        plan.pattern_ids = fresh.pattern_ids
        return plan
    if cache is not None:
        cache.start(fresh)
    return fresh


@dataclass(eq=False)  # pluggy needs plugins hashable by identity
class OotestPlugin:
    config: pytest.Config
    cfg_path: str | None
    cfg: Config | None  # loaded only when something must be decided (see plan.py)
    plan: Plan | None
    cache: PlanCache | None
    device: DeviceSpec | None
    collection: Collection  # also in config.stash[COLLECTION], for the other plugins
    ctx: Context = field(default_factory=Context.current)
    used_patterns: set[int] = field(default_factory=set)  # Plan pattern ids
    seen_files: set[str] = field(default_factory=set)  # normalized paths
    registered_marks: dict[str, pytest.MarkDecorator] = field(default_factory=dict)
    _resolved: dict[str, ResolvedFile | None] = field(default_factory=dict)
    _marks_by_axes: dict[tuple[Any, ...], tuple[str, ...]] = field(default_factory=dict)
    _outcome_marks: dict[tuple[str, str], pytest.MarkDecorator] = field(default_factory=dict)
    _decided: list[pytest.Item] = field(default_factory=list)  # items with stashed records
    op_marks: dict[str, tuple[str, ...]] | None = None  # variant ID -> aten__ marks (--ootest-ops)
    selection: Selection | None = None  # the config's selectors (Note [Selectors])
    _sidecar: Sidecar | None = None  # the config's evidence sidecar, read on first need
    # What this session changed outside itself (the environment, torch's parametrizers),
    # undone at unconfigure: see Note [Session-scoped changes].
    restore: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

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
        given = getattr(ns, "ootest_timeout", None)
        # before the device is built (it was an INTERNALERROR at the first test)
        check_timeout(given, "--ootest-timeout")
        for opt, flag in (
            ("ootest_results", "--ootest-results"),
            ("ootest_variants", "--ootest-variants"),
            ("ootest_ops_capture", "--ootest-ops-capture"),
            ("ootest_state", "--ootest-state"),
        ):
            if getattr(ns, opt, None):  # a bad path was an INTERNALERROR at configure
                check_output(Path(getattr(ns, opt)), flag, folder=opt == "ootest_state")
        if getattr(ns, "ootest_results", None) and not getattr(ns, "ootest_state", None):
            where = state_dir(Path(ns.ootest_results))
            check_output(where, "--ootest-results (its state folder)", folder=True)
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
            elif cfg is not None:  # a cached plan, and the config loaded for injection
                plan = _adopt(plan, cfg, ctx, cache)
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
        collection = Collection(
            keys,
            spec.name if spec else None,
            module=backend_module(device) if device else None,
            spec=str(spec) if spec else None,
        )
        config.stash[COLLECTION] = collection
        config.pluginmanager.register(LinearSummary(), "ootest-summary")
        reportcost.install()  # Note [The cost of a failing test]
        plugin = cls(
            config=config,
            cfg_path=cfg_path,
            cfg=cfg,
            plan=plan,
            cache=cache,
            device=spec,
            collection=collection,
            ctx=ctx,
            restore=restore,
        )
        run_id = os.environ.get("OOTEST_RUN_ID")
        # not for grandchildren (pytest-xdist workers): they are started afresh
        started = os.environ.pop("OOTEST_STARTED", "fresh")
        state_path = Path(state) if state else None
        if results:
            recorder = Recorder(Path(results), state_path, run_id, started)
            config.pluginmanager.register(recorder, "ootest-results")
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
        selector = Selector.create(ns, keys, run_id)
        if selector is not None:
            config.pluginmanager.register(selector, "ootest-selector")
        if state_path is not None or timeout:
            # registered after the op capture: its timeout covers the capture's work too
            isolation = Isolation(state_path, float(timeout) if timeout else None, keys)
            config.pluginmanager.register(isolation, "ootest-isolation")
        return plugin

    @property
    def keys(self) -> FileKeys:  # see Note [File keys]
        return self.collection.keys

    def pytest_configure(self, config: pytest.Config) -> None:
        if is_controller(config) and getattr(config.option, "maxworkerrestart", 0) is None:
            # A young backend may crash many tests; each crash costs one worker.
            config.option.maxworkerrestart = "100000"

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

    # -------------------------------------------------------------- collection
    def _rule(self, key: str) -> FileRule | None:
        """The config's rule for a test file (by normalized path), if it lists the file."""
        return self.plan.files.get(key) if self.plan is not None else None

    def _config(self) -> Config:
        """The loaded config (read on first need when the plan came from the cache)."""
        if self.cfg is None:
            assert self.cfg_path is not None
            self.cfg = _load(self.cfg_path)
            self.plan = _adopt(self.plan, self.cfg, self.ctx, self.cache)
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
        arg = module_node_id(self.config, collector.nodeid, collector.nodeid, collector.path)
        report = yield from self._collect_module(collector, key)
        # the controller (pytest-xdist) sees only the report: it carries the identity
        report.ootest_file, report.ootest_nodeid = key, arg
        return report

    def _collect_module(self, collector: pytest.Collector, key: str) -> Generator[None, Any, Any]:
        rule = self._rule(norm(collector.path))
        if rule is not None:
            self.collection.stats.setdefault(key, FileStats())  # counted even if empty
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
                    st = self.collection.stats.setdefault(rel, FileStats())
                cached = cache.records(key) if cache is not None else None
                known = per_path[item.path] = (key, rel, rule, st, cached)
            key, rel, rule, st, cached = known
            raw = cached.get(item.nodeid) if cached is not None else None
            if raw is not None:
                rec = record_from_data(raw)
                self.collection.reused += 1
            else:
                self.collection.computed += 1
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
            spellings = [item_node_id(item)]
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
        d = explain(decide(rf, caps, v, self.ctx, admit), v.variant_id, self._decisions())
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

    def _decisions(self) -> Sidecar | None:
        """The config's evidence sidecar, if it has one (Note [Decisions people can see])."""
        if self._sidecar is None and self.plan is not None:
            from ootest.record.decisions import Sidecar, sidecar_path

            path = sidecar_path(Path(self.plan.source))
            if not path.is_file():
                return None
            self._sidecar = Sidecar(path)
        return self._sidecar

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

    @pytest.hookimpl(tryfirst=True)  # before the plugins that report stale names
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collection.stale = self.stale_patterns()
        if reportcost.enabled():  # frozen modules the test files imported
            reportcost.map_frozen_frames()

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

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # on the report, for the results file and for a pytest-xdist controller
        fields = result_fields(item)
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
                f"ootest: plan {where}: {self.collection.reused} variants from the cache, "
                f"{self.collection.computed} derived and decided now"
                + ("" if self.cfg is None else " (config loaded)")
            )
        for w in self.plan.warnings:
            tr.write_line(f"ootest: note: {w}", yellow=True)
        for line in self.selection.summary() if self.selection is not None else ():
            tr.write_line(f"ootest: {line}")
        for key, st in sorted(self.collection.stats.items()):
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
            note = op_filter_note(name for _, name in stale)
            if note:
                tr.write_line(f"  {note}")


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
