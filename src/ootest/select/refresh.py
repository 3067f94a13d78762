"""A whole upgrade cycle in one call: ``ootest select refresh``.

Note [Refresh]
``select refresh --config S --memory OLD.db --root TREE`` does what a person
does after a PyTorch upgrade, each step the call the command of that step makes:

1. ``index``: the memory of the installed torch and ``TREE`` (``ootest index
   build``, into the work folder);
2. ``diff``: the memory diff from ``OLD.db`` (``ootest index diff``), kept for the
   pull request's body;
   ``capture``: with ``--ops``, the added and modified variants (only those) captured
   on the reference device into a copy of the op map in the work folder
   (``ops.db``; Note [Fresh evidence for the delta]), moved variants' records
   following them; ``--no-capture`` makes the copy without capturing;
   ``replay``: with ``--replay``, the calls of the op map step 3 decides from
   (the copy, else ``--ops``) replayed again on the device (``ootest ops replay``
   in a child process, into ``replay.jsonl`` in the work folder): a known
   failure is re-checked here, not by running its test on every CI run (Note [A
   known failure is re-checked by the replay]); ``--no-replay`` keeps the old
   replay (the ``replay_failed`` skips are then not re-checked); a ``--replay``
   file not there yet is written (the first replay: the config's evidence is
   what it is compared with); only the calls that can change a decision are
   replayed (Note [A refresh replays what can change a decision]; ``--replay-all``:
   every call);
3. ``decide``: only what changed decided again (``select run --since``:
   :func:`ootest.select.pipeline.upgrade`), into a staged config next to ``S``
   (``S.refresh.yaml``: ``path:`` values and file keys resolve the same), and,
   with the new replay, every variant with a call whose result it changed;
4. ``run``: the variants step 3 decided again, unless it skips them, run on the
   device by ``ootest run`` in a child process (supervised: crashes and hangs are
   results), as ``select audit`` runs its sample;
5. ``refine``: the staged config refined from that run (``select refine``);
6. ``write``: the staged config and its evidence over ``S``, the new memory over
   ``OLD.db``, the work folder's op map over ``--ops`` and its replay over
   ``--replay`` (what the config is now decided from; all only when a decision
   changed, all or none), the review page
   (``select review --previous``) and a Markdown pull-request body (the counts,
   the decisions that changed and why, the config's diff) into the work folder.

Each step's end is recorded in ``state.json`` in the work folder (default
``S.refresh/`` next to ``S``) before the next starts, and each step can be done
again from its start: a refresh that was killed resumes, with the same command,
at the step it was in (the run continues with ``ootest run --resume``). Nothing
is written over ``S`` or ``OLD.db`` before step 6, and there the config, its
evidence and the memory are written together (every one whole in its temporary
file before any is renamed), after every place written was checked writable
before step 1. A config, or any input the steps depend on (the memory, the
roots, the op map, the replay, the backend's sources, the options that decide),
changed by someone while a refresh waits is an error (``--fresh`` starts over).

Note [One refresh at a time]
A refresh holds two kernel locks (flock) for as long as it runs: one for the
config, in the user's cache (``refresh-locks/``, named by the config's path:
two refreshes of one config with other work folders would write the same staged
files and the config), one on ``.lock`` in the work folder (a second refresh
there, even with ``--fresh``, would delete the first one's files). The lock
files hold the holder's pid and start time, which a refused second refresh
names; a refresh killed with -9 holds no lock any more (the kernel drops it), so
the next one takes the files over.
The work folder is never followed: a symlink there, or at its ``run`` folder, is
refused (the refresh replaces files by name in it).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import shutil
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from ootest.atomic import write_atomic
from ootest.errors import UserError
from ootest.select.pipeline import Inputs

if TYPE_CHECKING:
    from ootest.memory import Collector

__all__ = [
    "STEPS",
    "Refresh",
    "Refreshed",
    "Replayer",
    "Runner",
    "pr_body",
    "refresh",
    "work_dir",
]

#: The steps, in order (Note [Refresh]); ``begin`` keeps the config as it was.
STEPS = ("begin", "index", "diff", "capture", "replay", "decide", "run", "refine", "write")
FORMAT = 1
#: The files a refresh writes into its work folder (besides new.db*, ops.db* and run/).
_OURS = (
    "state.json",
    "diff.json",
    "before.yaml",
    "before.evidence.jsonl",
    "review.html",
    "pr.md",
    "replay.jsonl",
)
#: What the pull-request body shows at the most: GitHub takes 65,536 characters.
BODY_CHARS = 60_000
CHANGE_ROWS = 30


class Runner(Protocol):
    """Runs ``config`` on the device, its results to ``results`` (``ootest run``)."""

    def __call__(
        self,
        config: Path,
        results: Path,
        *,
        device: str | None,
        timeout: float,
        pytest_args: list[str],
        resume: bool,
    ) -> None: ...


class Replayer(Protocol):
    """Replays the call examples of the op map ``ops`` on ``device`` against the
    CPU into ``out`` (``ootest ops replay``, Note [Replaying calls]), each call
    given ``timeout`` seconds."""

    def __call__(
        self,
        ops: Path,
        out: Path,
        *,
        device: str,
        timeout: float,
        say: Callable[[str], None],
        keep: Path | None = None,
    ) -> None: ...


@dataclass(frozen=True)
class Refresh:
    """What to refresh, and from what."""

    config: Path
    memory: Path  # the memory the config was decided from (OLD.db)
    roots: tuple[Path, ...]  # the test trees of the installed torch
    inputs: Inputs = field(default_factory=Inputs)  # select run's sources (memory: unused)
    work: Path | None = None  # default: <config>.refresh/ next to the config
    k: int = 2  # clean passes before mandatory (refine)
    max_rtol: float | None = None
    timeout: float | None = None  # per test (default: the config's, else 300 s)
    torch_db: bool | None = None  # index the installed torch's op_db (default: as OLD.db)
    jobs: int = 1
    pytest_args: tuple[str, ...] = ()
    fresh: bool = False  # start over, whatever the work folder holds
    #: with ``inputs.replay``: replay the op map's calls again (False: ``--no-replay``)
    replay_again: bool = True
    #: replay every call, those that replayed ok before too (``--replay-all``; Note
    #: [A refresh replays what can change a decision])
    replay_all: bool = False


@dataclass
class Refreshed:
    """What a refresh did (also kept in ``state.json``)."""

    work: Path
    done: list[str]
    resumed_at: str | None = None
    changed: bool = False  # the config is another file now
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def pr_body(self) -> Path:
        return self.work / "pr.md"

    @property
    def review(self) -> Path:
        return self.work / "review.html"


def _stem(config: Path) -> str:
    return config.name.removesuffix(".yaml").removesuffix(".yml")


def work_dir(config: Path) -> Path:
    """The default work folder: ``SUITE.refresh/`` next to ``SUITE.yaml``."""
    return config.with_name(f"{_stem(config)}.refresh")


def _staged(config: Path, what: str) -> Path:
    """A file next to the config (``path:`` values resolve the same from it)."""
    return config.with_name(f"{_stem(config)}.{what}.yaml")


def _digest(path: Path) -> str:
    from ootest.select.writer import file_digest

    return file_digest(path)


def refresh(
    job: Refresh,
    *,
    say: Callable[[str], None] = lambda _: None,
    runner: Runner | None = None,
    collector: Collector | None = None,
    replayer: Replayer | None = None,
) -> Refreshed:
    """Do the steps of Note [Refresh] that the work folder has not done yet.
    ``runner`` runs a config on the device (default ``ootest run`` in a child
    process); ``collector`` collects variants for the memory (default: pytest in
    child processes, as ``index build``); ``replayer`` replays the op map's calls
    on the device (default ``ootest ops replay`` in a child process)."""
    from ootest.select.refine import sidecar_path

    config, memory = job.config, job.memory
    if not config.is_file():
        raise UserError(f"--config {config}: no such config; pass the config 'select run' wrote")
    if not sidecar_path(config).is_file():
        raise UserError(
            f"--config {config}: expected its evidence file {sidecar_path(config)} next to it "
            "(written by 'ootest select run'); refresh a config ootest selected"
        )
    if not memory.is_file():
        raise UserError(
            f"--memory {memory}: no such index; pass the memory the config was decided from "
            "(ootest index build)"
        )
    if job.k < 1:
        raise UserError(f"-k: expected at least 1 clean pass; found {job.k}")
    work = job.work or work_dir(config)
    _check_outputs(job, work)
    with _locked(job, work):
        return _refresh(job, work, say, runner, collector, replayer)


def _refresh(
    job: Refresh,
    work: Path,
    say: Callable[[str], None],
    runner: Runner | None,
    collector: Collector | None,
    replayer: Replayer | None = None,
) -> Refreshed:
    state = _State.open(work, job)
    out = Refreshed(work, state.done, changed=bool(state.facts.get("changed")), facts=state.facts)
    todo = [s for s in STEPS if s not in state.done]
    if not todo:
        say(f"ootest: refresh: {work} is done (pass --fresh to start another)")
        return out
    if state.done:
        out.resumed_at = todo[0]
        say(f"ootest: refresh: resuming at step {todo[0]} ({', '.join(state.done)} done)")
    steps: dict[str, Callable[[_Ctx], None]] = {
        "begin": _begin,
        "index": _index,
        "diff": _diff,
        "capture": _capture,
        "replay": _replay,
        "decide": _decide,
        "run": _run,
        "refine": _refine,
        "write": _write,
    }
    ctx = _Ctx(job, work, state, say, runner or _ootest_run, collector, replayer or _ootest_replay)
    _new_replay(ctx)  # a resumed refresh goes on only from the replay its replay step made
    for step in todo:
        say(f"ootest: refresh: {step}")
        started, cpu = time.perf_counter(), _cpu_seconds()
        steps[step](ctx)
        state.facts.setdefault("seconds", {})[step] = round(time.perf_counter() - started, 2)
        state.facts.setdefault("cpu_seconds", {})[step] = round(_cpu_seconds() - cpu, 2)
        state.finish(step)
    out.changed = bool(state.facts.get("changed"))
    return out


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children waited for (a step's child
    processes: the capture, the replay, the run; each waits for its own)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        use = resource.getrusage(who)
        total += use.ru_utime + use.ru_stime
    return total


# ------------------------------------------------------------------ state
@dataclass
class _State:
    path: Path
    done: list[str]
    facts: dict[str, Any]

    @classmethod
    def open(cls, work: Path, job: Refresh) -> _State:
        path = work / "state.json"
        ident = {"config": str(job.config.resolve()), "memory": str(job.memory.resolve())}
        if job.fresh or not path.exists():
            for name in (_staged(job.config, "refresh"), _staged(job.config, "refresh-run")):
                _unlink(name)
            for child in work.iterdir():  # only what a refresh writes there
                if child.name == "run":
                    shutil.rmtree(child)  # a real folder: _check_work refused anything else
                elif child.name == "ops.db.capture" and child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name in _OURS or child.name.startswith(("new.db", "ops.db")):
                    child.unlink()
            st = cls(path, [], {**ident, "format": FORMAT, "inputs": _inputs_of(job)})
            st.save()
            return st
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            done = [str(s) for s in data["done"]]
            facts = dict(data["facts"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(
                f"{path}: expected the state of a refresh; cannot read it ({e}); "
                "pass --fresh to start over"
            ) from None
        for key, value in ident.items():
            if facts.get(key) != value:
                raise UserError(
                    f"--work {work}: holds a refresh of {key} {facts.get(key)}, not {value}; "
                    "pass another --work, or --fresh to start over"
                )
        st = cls(path, done, facts)
        if "begin" in done and "write" not in done:
            now = _digest(job.config)
            staged = _staged(job.config, "refresh")
            ours = staged.is_file() and now == _digest(staged)  # the write step's copy
            if now != facts.get("config_digest") and not ours:
                raise UserError(
                    f"--config {job.config}: changed since the refresh in {work} started "
                    f"({facts.get('config_digest')}, now {now}); pass --fresh to start over "
                    "from the config as it is"
                )
        if "write" not in done:
            _check_inputs(job, work, facts)
        return st

    def finish(self, step: str) -> None:
        self.done.append(step)
        self.save()

    def save(self) -> None:
        data = {"done": self.done, "facts": self.facts}
        write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n")


# ------------------------------------------------------------------ before any step
def _check_outputs(job: Refresh, work: Path) -> None:
    """Every place the refresh writes, checked before it does any work: a memory
    in a read-only folder was found only in the last step, after the config was
    replaced (config and memory then out of step)."""
    from ootest.atomic import check_output
    from ootest.select.refine import sidecar_path

    check_output(job.config, "--config")
    check_output(sidecar_path(job.config), "--config")
    check_output(job.memory, "--memory")
    if job.inputs.replay is not None and job.replay_again:
        check_output(job.inputs.replay, "--replay")  # the write step puts the new one there
    _check_work(work)


def _check_work(work: Path) -> None:
    """The work folder and its ``run`` folder: real folders or nothing, never a
    link followed (Note [One refresh at a time])."""
    from ootest.atomic import check_output

    for path, what in ((work, "is"), (work / "run", "holds a 'run' that is")):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            raise UserError(f"--work {work}: cannot read it ({e.strerror or e})") from None
        if stat.S_ISLNK(mode):
            raise UserError(
                f"--work {work}: {what} a symlink; expected a folder of its own (a refresh "
                "replaces files by name in it and never follows a link); pass another --work"
            )
        if not stat.S_ISDIR(mode):
            raise UserError(
                f"--work {work}: {what} not a folder; expected the folder a refresh makes "
                "(or nothing); remove it or pass another --work"
            )
    check_output(work, "--work", folder=True)


def _lock_text(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            text = fh.read(200).decode("utf-8", "replace")
    except OSError:
        return ""
    return " ".join(text.split())


@contextlib.contextmanager
def _locked(job: Refresh, work: Path) -> Iterator[None]:
    """Note [One refresh at a time]: the config's lock, then the work folder's."""
    with contextlib.ExitStack() as stack:
        for path, what in (
            (_config_lock(job.config), f"--config {job.config}"),
            (work / ".lock", f"--work {work}"),
        ):
            stack.enter_context(_lock(path, what))
        yield


def _config_lock(config: Path) -> Path:
    """The config's lock, in the user's cache: nothing is added next to the config."""
    import hashlib

    from ootest.cache import cache_dir

    key = hashlib.sha256(str(config.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir() / "refresh-locks" / f"{key[:24]}.lock"


@contextlib.contextmanager
def _lock(path: Path, what: str) -> Iterator[None]:
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as e:
        raise UserError(
            f"{what}: cannot open its lock {path} ({e.strerror or e}); remove it"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_text(path) or "another process"
            raise UserError(
                f"{what}: another refresh is at work on it ({holder}); wait for it to end, "
                "or end it"
            ) from None
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {when}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # the kernel drops the lock with the last descriptor


def _input_files(job: Refresh) -> list[tuple[str, Path | None]]:
    inp, be = job.inputs, job.inputs.backend
    return [
        ("--memory", job.memory),
        ("--ops", inp.ops),
        ("--replay", inp.replay),
        ("--scope", inp.scope),
        ("--supported", be.supported),
        ("--detected", be.detected),
        *(("--reference", p) for p in inp.reference),
        *(("--results", p) for p in inp.results),
    ]


def _inputs_of(job: Refresh) -> dict[str, str]:
    """What the steps depend on besides the config: each input file by its digest,
    the options that decide by their values (a resumed refresh compares them)."""
    out: dict[str, str] = {}
    for flag, path in _input_files(job):
        if path is not None:
            key = f"{flag} {path}"
            out[key] = _digest(path) if path.is_file() else "not a file"
    be, judge = job.inputs.backend, job.inputs.judge
    values: dict[str, object] = {
        "--root": " ".join(str(r.resolve()) for r in job.roots),
        "--device": be.device,
        "--dtypes": be.dtypes,
        "--probe": be.probe,
        "-k": job.k,
        "--max-rtol": job.max_rtol,
        "--torch-db": job.torch_db,
        "--judge-endpoint": judge.llm.endpoint if judge else None,
        "--judge-model": judge.llm.model if judge else None,
    }
    for flag, value in values.items():
        out[flag] = "-" if value is None else str(value)
    if not job.replay_again:
        out["--no-replay"] = "given"  # (absent otherwise: as refreshes begun before it)
    if job.replay_all:
        out["--replay-all"] = "given"
    return out


def _check_inputs(job: Refresh, work: Path, facts: dict[str, Any]) -> None:
    """A resumed refresh goes on only from the inputs it started from."""
    was = facts.get("inputs")
    if not isinstance(was, dict):
        raise UserError(
            f"--work {work}: holds a refresh that did not record its inputs (an older "
            "ootest); pass --fresh to start over"
        )
    now = _inputs_of(job)
    # what the write step puts over an input (a refresh killed there: the renames
    # of one write are not one act)
    written = {"--memory ": work / "new.db", "--ops ": work / "ops.db"}
    written["--replay "] = work / "replay.jsonl"
    for key in sorted(set(was) | set(now)):
        old, new = was.get(key, "not given"), now.get(key, "not given")
        if old == new:
            continue
        ours = next((p for flag, p in written.items() if key.startswith(flag)), None)
        if ours is not None and ours.is_file() and new == _digest(ours):
            continue  # the write step's copy of the work folder's file
        raise UserError(
            f"{key}: changed since the refresh in {work} started ({old}, now {new}); pass "
            "--fresh to start over from the inputs as they are, or give them as they were"
        )


@dataclass
class _Ctx:
    job: Refresh
    work: Path
    state: _State
    say: Callable[[str], None]
    runner: Runner
    collector: Collector | None
    replayer: Replayer

    @property
    def facts(self) -> dict[str, Any]:
        return self.state.facts

    @property
    def replay(self) -> Path:
        return self.work / "replay.jsonl"

    @property
    def new_db(self) -> Path:
        return self.work / "new.db"

    @property
    def ops_db(self) -> Path:
        return self.work / "ops.db"

    @property
    def before(self) -> Path:
        return self.work / "before.yaml"

    @property
    def staged(self) -> Path:
        return _staged(self.job.config, "refresh")

    @property
    def results(self) -> Path:
        return self.work / "run" / "results.jsonl"


def _unlink(path: Path) -> None:
    from ootest.select.refine import sidecar_path

    for p in (path, sidecar_path(path)):
        p.unlink(missing_ok=True)


def _copy(src: Path, dst: Path, *more: tuple[Path, Path]) -> None:
    """``src`` over ``dst`` (and each further pair), through unique temporary files
    renamed only when all are whole (Note [Files written only where asked])."""
    from ootest.atomic import write_all_atomic

    def copier(source: Path) -> Callable[[BinaryIO], object]:
        def put(fh: BinaryIO) -> None:
            with open(source, "rb") as f:
                shutil.copyfileobj(f, fh)

        return put

    write_all_atomic([(d, copier(s)) for s, d in ((src, dst), *more)])


# ------------------------------------------------------------------ the steps
def _begin(c: _Ctx) -> None:
    from ootest.select.refine import sidecar_path

    _copy(c.job.config, c.before, (sidecar_path(c.job.config), sidecar_path(c.before)))
    c.facts["config_digest"] = _digest(c.job.config)


def _meta(db: Path) -> dict[str, str]:
    from ootest.memory import index_stats

    return index_stats(db, limit=1).meta


def _index(c: _Ctx) -> None:
    from ootest.memory import BuildOptions, build_index

    old = _meta(c.job.memory)
    device = c.job.inputs.backend.device or old.get("device") or None
    torch_db = c.job.torch_db if c.job.torch_db is not None else old.get("torch_db") != "0"
    if device:
        from ootest.device import check_device

        check_device(device)
    opts = BuildOptions(
        roots=c.job.roots,
        db=c.new_db,
        device=device,
        torch_db=torch_db,
        jobs=c.job.jobs,
        pytest_args=c.job.pytest_args,
    )
    report = build_index(opts, collector=c.collector) if c.collector else build_index(opts)
    c.say(f"  {report.summary()}")
    for w in report.warnings:
        c.say(f"  warning: {w}")
    new = _meta(c.new_db)
    c.facts["torch"] = [old.get("torch", "?"), new.get("torch", "?")]


def _diff(c: _Ctx) -> None:
    from ootest.memory import diff_indexes

    d = diff_indexes(c.job.memory, c.new_db)
    write_atomic(c.work / "diff.json", json.dumps(d.to_json(), indent=1) + "\n")
    c.facts["memory_diff"] = d.summary()
    c.say(f"  {d.summary()}")


def _capture(c: _Ctx) -> None:
    from ootest.select.fresh import delta, fresh_ops

    inputs = c.job.inputs
    if inputs.ops is None:
        c.say("  no --ops: no op evidence to make fresh")
        return
    if "decide" in c.state.done:  # a refresh begun before this step existed
        return
    d = delta(c.job.memory, c.new_db)
    if d.empty():
        c.say("  nothing added, modified or moved: the op map stays as it is")
        return
    how = inputs.capture
    f = fresh_ops(
        inputs.ops, c.ops_db, d, capture=how.enabled is not False, device=how.device,
        timeout=how.timeout, capturer=how.capturer, say=c.say,
    )  # fmt: skip
    c.facts["capture"] = {
        "summary": f.summary(timed=False),  # the PR body's: the same for the same refresh
        "delta": f.delta,
        "asked": f.asked,
        "captured": f.captured,
        "moved": f.moved,
        "restamped": f.restamped,
        "seconds": round(f.seconds, 2),
    }
    c.say(f"  {f.summary()}")


def _replay(c: _Ctx) -> None:
    """Note [A known failure is re-checked by the replay]: the op map's calls
    replayed again on the device, so that what failed there before is checked again
    at each refresh (and what works now comes back).

    Note [A refresh replays what can change a decision]
    A call that replayed ok before decides nothing by itself: its variants run, as
    mandatory or by the rest of their evidence. Replaying it again could only turn
    a test that worked into a skip, and a backend that broke what worked should
    see that test fail in CI (what the config is for), not have it skipped by the
    refresh. So a refresh replays the calls the previous replay (``--replay``, on
    the same device, complete) did not replay ok -- the known failures, crashes,
    mismatches, the calls it could not use -- and the calls it does not hold (the
    delta's new calls); the calls that replayed ok keep that row (``ootest ops
    replay --keep-ok``). On the whole of ``test_unary_ufuncs.py`` that is about
    half of the calls (bench/README). ``--replay-all`` replays every call (after a
    change to the backend whose breakage should become skips).
    """
    from ootest.opmap.replay import read_replay

    inputs = c.job.inputs
    if inputs.replay is None:
        c.say("  no --replay: no replayed calls to check again")
        return
    if not c.job.replay_again:
        c.say(
            f"  --no-replay: {inputs.replay} is kept as it is; the variants it skips "
            "(replay_failed) are not re-checked"
        )
        c.facts["replay"] = {"kept": True}
        return
    if "decide" in c.state.done:  # a refresh begun before this step existed
        return
    ops = c.ops_db if "capture" in c.facts else inputs.ops
    if ops is None:
        return  # the decide step says what --replay needs
    from ootest.select.pipeline import target_of

    device = target_of(inputs.backend, c.job.config)
    if device is None:
        c.say(
            "  no --device, and the config names none: a replay cannot be checked against "
            "the device the decisions are for; not replayed"
        )
        return
    # no replay yet (a scheduled refresh's first, or its cache lost): this one is
    # the first; the decide step compares the config's evidence with it
    old = read_replay(inputs.replay).header if inputs.replay.is_file() else {}
    try:
        timeout = float(old.get("timeout") or DEFAULT_REPLAY_TIMEOUT)
    except (TypeError, ValueError):
        timeout = DEFAULT_REPLAY_TIMEOUT
    c.replay.unlink(missing_ok=True)
    started = time.perf_counter()
    keep = None
    if not c.job.replay_all and old.get("device") == device and old.get("complete"):
        keep = inputs.replay  # Note [A refresh replays what can change a decision]
    c.replayer(ops, c.replay, device=device, timeout=timeout, say=c.say, keep=keep)
    rep = read_replay(c.replay)
    if not rep.header.get("complete"):
        raise UserError(
            f"--replay: the replay on {device} into {c.replay} stopped before its last call; "
            "run the same command again to replay again"
        )
    counts = ", ".join(f"{n} {k}" for k, n in rep.counts().items() if n)
    kept = int(rep.header.get("kept_ok") or 0)
    n = len(rep.results)
    what = f"{n - kept} of {n} recorded calls" if kept else f"{n} recorded calls"
    again = f" ({kept} that replayed ok before kept as they were)" if kept else ""
    c.facts["replay"] = {
        "device": device,
        "calls": n,
        "kept_ok": kept,
        "summary": f"replayed {what} on {device}{again}: {counts}",
        "seconds": round(time.perf_counter() - started, 2),
        "digest": _digest(c.replay),
    }
    c.say(f"  {c.facts['replay']['summary']}")


#: seconds per call when the old replay's header does not say (``ops replay``'s default)
DEFAULT_REPLAY_TIMEOUT = 10.0


def _new_replay(c: _Ctx) -> Path | None:
    """The replay the replay step wrote (None: it wrote none), as it wrote it: a
    file changed since is an error (the decisions would not be of the replay that
    the write step puts over ``--replay``)."""
    done = c.facts.get("replay") or {}
    if not done.get("digest"):
        return None
    if not c.replay.is_file() or _digest(c.replay) != done["digest"]:
        raise UserError(
            f"--work {c.work}: its replay.jsonl changed since the replay step wrote it "
            f"({done['digest']}); pass --fresh to start over"
        )
    return c.replay


def _ootest_replay(
    ops: Path,
    out: Path,
    *,
    device: str,
    timeout: float,
    say: Callable[[str], None],
    keep: Path | None = None,
) -> None:
    """The default :class:`Replayer`: ``ootest ops replay --db OPS --device D --out
    OUT [--keep-ok KEEP]`` in a child process (torch is imported only in its workers)."""
    from ootest.select.fresh import ootest_child

    more = ["--keep-ok", str(keep)] if keep is not None else []
    ootest_child(
        ["ops", "replay", "--db", str(ops), "--device", device, "--out", str(out),
         "--timeout", str(timeout), "-q", *more],
        f"the replay on {device} failed (ootest ops replay exit status {{rc}}; pass "
        "--no-replay to keep the replay you have)",
    )  # fmt: skip


def _decide(c: _Ctx) -> None:
    from dataclasses import replace

    from ootest.select.pipeline import upgrade

    _unlink(c.staged)
    ops = c.ops_db if "capture" in c.facts else c.job.inputs.ops
    new_replay = _new_replay(c)
    # the capture step made the delta's evidence fresh already (or there was none)
    how = replace(c.job.inputs.capture, enabled=None)
    inputs = replace(c.job.inputs, memory=c.new_db, ops=ops, capture=how)
    if new_replay is not None:
        inputs = replace(inputs, replay=new_replay)
    said: list[str] = []
    o = upgrade(
        inputs,
        c.job.memory,
        c.job.config,
        c.staged,
        say=said.append,
        replay_before=c.job.inputs.replay
        if new_replay is not None
        and c.job.inputs.replay is not None
        and c.job.inputs.replay.is_file()
        else None,
    )
    o.write()
    c.facts["upgrade"] = {
        "summary": o.summary(),
        "notes": [*said, *o.notes],
        "by_replay": o.by_replay,
    }
    c.say(f"  {o.summary()}")
    for note in o.notes:
        c.say(f"  {note}")


def _changed_rows(before: Path, after: Path) -> dict[str, dict[str, Any]]:
    """The evidence rows of ``after`` that ``before`` does not hold as they are (the
    variants the upgrade decided again), but those a person's entry decides."""
    from ootest.select.refine import sidecar_path

    def lines(path: Path) -> dict[str, str]:
        out = {}
        with open(sidecar_path(path), encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    out[str(row["decision"]["variant_id"])] = line
        return out

    old, new = lines(before), lines(after)
    rows = {}
    for vid, line in new.items():
        if old.get(vid) != line:
            row = json.loads(line)
            if "held" not in row:
                rows[vid] = row
    return rows


def _run(c: _Ctx) -> None:
    from ootest.select.audit import Member, audit_config, config_files
    from ootest.select.writer import split_id

    changed = _changed_rows(c.before, c.staged)
    cfg, by_key = config_files(c.staged)
    chosen = [
        Member(vid, row["decision"]["mode"], row["decision"]["reason"])
        for vid, row in sorted(changed.items())
        if row["decision"]["mode"] != "skip" and split_id(vid)[0] in by_key
    ]
    c.facts["run"] = {"changed": len(changed), "ran": len(chosen)}
    if not chosen:
        c.say(f"  nothing to run: {len(changed)} variants decided again, none that runs")
        return
    path = _staged(c.job.config, "refresh-run")
    header = [
        f"Generated by `ootest select refresh`: runs the {len(chosen)} variants the upgrade",
        "decided again (and does not skip) as mandatory_success.",
    ]
    write_atomic(path, audit_config(cfg, by_key, chosen, header))
    timeout = c.job.timeout or cfg.suite.timeout or 300.0
    resume = c.results.is_file()
    c.say(
        f"  {'continuing' if resume else 'running'} {len(chosen)} of {len(changed)} variants "
        f"decided again on {c.job.inputs.backend.device or cfg.suite.device or 'the device'}"
    )
    c.results.parent.mkdir(parents=True, exist_ok=True)
    # only those variants: the file's others are not even reported (23,000 skipped
    # results of a whole OpInfo file cost more than the 100 that run)
    only = c.work / "run-only.txt"
    write_atomic(only, "".join(f"{m.variant_id}\n" for m in chosen))
    c.runner(
        path,
        c.results,
        device=c.job.inputs.backend.device,
        timeout=timeout,
        pytest_args=[*c.job.pytest_args, "--ootest-only", str(only)],
        resume=resume,
    )
    _unlink(path)
    from ootest.record.results import RunData

    ran = {m.variant_id for m in chosen}
    got = RunData.load(c.results).results
    counts = Counter(r["outcome"] for vid, r in got.items() if vid in ran)
    c.facts["run"]["outcomes"] = dict(sorted(counts.items()))


def _ootest_run(
    config: Path,
    results: Path,
    *,
    device: str | None,
    timeout: float,
    pytest_args: list[str],
    resume: bool,
) -> None:
    from ootest.select.audit import run_sample

    what = "select refresh: running the variants decided again"
    run_sample(config, results, device=device, timeout=timeout, pytest_args=pytest_args,
               resume=resume, what=what)  # fmt: skip


def _refine(c: _Ctx) -> None:
    from ootest.select.pipeline import refine, write

    if not c.results.is_file():
        c.say("  nothing ran: nothing to refine")
        return
    sel = refine(c.staged, [c.results], c.job.k, c.job.max_rtol)
    write(sel, c.staged)
    c.facts["refine"] = sel.notes
    for note in sel.notes:
        c.say(f"  {note.removeprefix('ootest: ')}")


def _write(c: _Ctx) -> None:
    from ootest.select.refine import sidecar_path
    from ootest.select.review import build_review, review_html

    config = c.job.config
    if c.staged.is_file():
        same = sidecar_path(c.staged).read_bytes() == sidecar_path(c.before).read_bytes()
        c.facts["decided_otherwise"] = not same
    if c.facts.get("decided_otherwise"):
        # the config, its evidence, the memory it is decided from and the op map it
        # names now: all or none (a killed write leaves the staged config, and is done
        # again whole)
        pairs = [(c.new_db, c.job.memory)]
        ops = c.job.inputs.ops
        if "capture" in c.facts and ops is not None:
            pairs.append((c.ops_db, ops))
        replayed = _new_replay(c)
        if replayed is not None and c.job.inputs.replay is not None:
            pairs.append((replayed, c.job.inputs.replay))
        if c.staged.is_file():
            pairs += [(c.staged, config), (sidecar_path(c.staged), sidecar_path(config))]
        try:
            _copy(*pairs[0], *pairs[1:])
        except OSError as e:
            from ootest.atomic import describe_os_error

            raise UserError(
                f"--config {config}: {describe_os_error(e)}; the config, its evidence, "
                f"--memory {c.job.memory} and the op map and replay it names are unchanged; "
                "run the same command again to write them"
            ) from None
    # else every decision and its evidence is as it was: the config, and the memory
    # its header names, stay (the next refresh compares with that memory)
    before = c.before.read_text(encoding="utf-8")
    after = config.read_text(encoding="utf-8")
    c.facts["changed"] = before != after
    r = build_review(config, c.before)
    write_atomic(c.work / "review.html", review_html(r))
    body = pr_body(config.name, before, after, c.facts, r.changes or [])
    write_atomic(c.work / "pr.md", body)
    _unlink(c.staged)
    c.say(f"  {config}: {'changed' if c.facts['changed'] else 'unchanged'}; {c.work / 'pr.md'}")


# ------------------------------------------------------------------ the PR body
def pr_body(
    name: str,
    before: str,
    after: str,
    facts: dict[str, Any],
    changes: list[Any],
) -> str:
    """The pull request's Markdown: counts, the decisions that changed and why, the
    config's diff. The body is public: test-derived text is escaped (Note [Escaping
    test-derived text]) and credentials in it redacted (Note [Untrusted text]); the
    diff is in a fence longer than any run of backticks in it."""
    from ootest.htmlpage import md as escape
    from ootest.untrusted import redact

    def md(text: object, limit: int = 200) -> str:
        return escape(redact(str(text)), limit)

    old_torch, new_torch = facts.get("torch") or ["?", "?"]
    up = facts.get("upgrade") or {}
    run = facts.get("run") or {}
    lines = [
        f"## ootest select refresh: {md(name)}",
        "",
        f"torch {md(old_torch)} -> {md(new_torch)}. Every decision below says why; the "
        "review page (`review.html`, in the run's artifact) shows all of them.",
        "",
        f"- **tests**: {md(facts.get('memory_diff', ''), 500)}",
    ]
    if facts.get("capture"):
        lines.append(f"- **op evidence**: {md(facts['capture'].get('summary', ''), 500)}")
    replay = facts.get("replay") or {}
    if replay.get("kept"):
        lines.append(
            "- **replay**: not replayed again (`--no-replay`): the variants skipped for a "
            "call that failed in the replay (`replay_failed`) are not re-checked"
        )
    elif replay.get("summary"):
        n = up.get("by_replay", 0)
        lines.append(
            f"- **replay**: {md(replay['summary'], 500)}; {n} variants decided again by it"
        )
    lines += [f"- **decisions**: {md(up.get('summary', ''), 500)}"]
    if run:
        outcomes = ", ".join(f"{n} {o}" for o, n in (run.get("outcomes") or {}).items())
        lines.append(
            f"- **run on the device**: {run.get('ran', 0)} of the {run.get('changed', 0)} "
            f"variants decided again" + (f": {md(outcomes)}" if outcomes else "")
        )
    for note in facts.get("refine") or []:
        lines.append(f"- **refined**: {md(note.removeprefix('ootest: refine: '), 500)}")
    for note in up.get("notes") or []:
        lines.append(f"- note: {md(note.removeprefix('ootest: '), 500)}")
    lines += ["", "### Decisions that changed", ""]
    if changes:
        lines += ["| change | variants | why (most common) |", "|---|---:|---|"]
        for ch in changes[:CHANGE_ROWS]:
            why = Counter(ch.why).most_common(1)
            label = f"{ch.kind}: {ch.label}"
            lines.append(f"| {md(label)} | {ch.count} | {md(why[0][0]) if why else ''} |")
        if len(changes) > CHANGE_ROWS:
            lines.append(f"\n{len(changes) - CHANGE_ROWS} more kinds of change on the page")
    else:
        lines.append("none")
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            f"a/{name}",
            f"b/{name}",
        )
    )
    diff = redact(diff)
    room = BODY_CHARS - sum(len(x) + 1 for x in lines) - 200
    shown = diff if len(diff) <= room else diff[: max(0, room)].rsplit("\n", 1)[0] + "\n"
    fence = "`" * max(3, _longest_backticks(shown) + 1)
    n = diff.count("\n")
    lines += [
        "",
        f"<details><summary>The config's diff ({n} lines"
        + ("" if shown == diff else ", cut: the PR's files show all")
        + ")</summary>",
        "",
        f"{fence}diff",
        shown.rstrip("\n"),
        fence,
        "",
        "</details>",
        "",
        "Made by `ootest select refresh` (docs/select.md, Refresh).",
    ]
    return "\n".join(lines) + "\n"


def _longest_backticks(text: str) -> int:
    import re

    return max((len(m) for m in re.findall(r"`+", text)), default=0)
