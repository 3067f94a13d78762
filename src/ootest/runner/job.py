"""One ``ootest run``: the config's files with the plugin in a supervised pytest
subprocess (torch is never imported here), then the collection guard, the reports
and the exit code. ``cli/run_cmd.py`` maps its arguments onto :class:`RunOptions`
and gives the progress bar; :func:`run` does the rest.

Exit codes: 0 all good; 1 test failures (a mandatory_success test failed,
errored, crashed or timed out, or a strict xfail passed); 2 usage or config
error; 3 collection guard tripped; anything else is a bug.

Note [Interrupted runs]
Ctrl-C and SIGTERM (a CI job cancelled, ``timeout``,
``kill``) during the supervised part of a run. SIGTERM used to end the runner
silently (exit -15) and Ctrl-C said only "interrupted"; neither said that the
results written so far are kept and how to go on from them. Here SIGTERM raises
KeyboardInterrupt like Ctrl-C, so the supervisor stops the pytest child (and the
fork server) the same way, every complete result line stays in the results file,
and the CLI prints one line (``interrupting``'s message, :func:`resume_hint`):
how many results were kept, where, and the exact ``ootest run ... --resume
PATH`` that continues the run (exit 130).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ootest.cache import WORK_DIR
from ootest.errors import EXIT_FAILED, EXIT_GUARD, EXIT_OK, EXIT_USAGE, UserError
from ootest.timeout import check_timeout

if TYPE_CHECKING:
    from ootest.config.resolved import Config
    from ootest.record.results import RunData
    from ootest.record.shard import ShardSpec
    from ootest.runner.supervise import Attempt, Supervisor

__all__ = ["Outputs", "ProgressSink", "RunOptions", "output_paths", "resume_command", "run"]

DEFAULT_DIR = WORK_DIR


@dataclass(frozen=True)
class RunOptions:
    """What ``ootest run`` was asked (its options, docs/runner.md)."""

    config: str
    device: str | None = None
    results: str | None = None
    junit: str | None = None
    html: str | None = None
    timeout: float | None = None
    resume: str | None = None
    shard: str | None = None
    durations: Sequence[str] | None = None
    baseline: str | None = None
    guard_threshold: float = 0.05
    strict_config: bool = False
    show_output: bool = False
    fork: str = "auto"
    quiet: bool = False
    pytest_args: Sequence[str] = ()


class ProgressSink(Protocol):
    """Where a run shows how far it got (a progress bar, lines in a CI log)."""

    said: bool  # a line was shown (then the log's tail is not repeated)

    def __enter__(self) -> ProgressSink: ...

    def __exit__(self, *exc: object) -> None: ...

    def update(self, done: int, total: int) -> None: ...

    def say(self, line: str) -> None: ...


@dataclass(frozen=True)
class Outputs:
    """The files a run writes (the generated CI workflow uploads exactly these)."""

    results: Path
    junit: Path
    html: Path
    log: Path | None  # None with --show-output: pytest's output goes to the terminal


def output_paths(opts: RunOptions) -> Outputs:
    """Where ``ootest run`` with these arguments writes: everything next to its results
    file, so a run given --results writes nowhere else."""
    results = Path(opts.resume or opts.results or DEFAULT_DIR / "results.jsonl")
    return Outputs(
        results=results,
        junit=Path(opts.junit) if opts.junit else results.parent / "junit.xml",
        html=Path(opts.html) if opts.html else results.parent / "report.html",
        log=None if opts.show_output else results.with_name("pytest.log"),
    )


@dataclass
class Prepared:
    """Where a run reads and writes, and how long a test may take."""

    outputs: Outputs
    baseline: Path | None
    state: Path
    timeout: float | None
    shard: ShardSpec | None


def run(
    opts: RunOptions,
    progress: ProgressSink,
    interrupting: Callable[[Callable[[], str]], AbstractContextManager[Any]],
) -> int:
    """Prepare the paths, build the pytest command, supervise it, give the verdict.
    ``progress`` shows how far it got (entered around the supervised part);
    ``interrupting(hint)`` is entered around it too: Note [Interrupted runs]."""
    from ootest.config.load import load_config
    from ootest.device import note
    from ootest.device.activate import is_emu, keep_autoload_out
    from ootest.record.results import RunData, read_records
    from ootest.runner.supervise import ForkPlan, Supervisor

    cfg = load_config(opts.config)
    prep = prepare(opts, cfg)
    files = list(dict.fromkeys(str(rf.path) for rf in cfg.files))
    cmd = pytest_command(opts, cfg, prep, files)

    results, log = prep.outputs.results, prep.outputs.log
    if log is not None and log.exists() and not opts.resume:
        log.unlink()
    what = f"shard {prep.shard} of " if prep.shard else ""
    print(f"ootest: running {what}{len(files)} file(s) from {cfg.source}", flush=True)
    device = opts.device or os.environ.get("OOTEST_DEVICE") or cfg.suite.device
    emu = is_emu(device)
    keep_autoload_out(device, note)  # before the children's environment is taken
    sup = Supervisor(
        pytest_cmd=cmd, results=results, state=prep.state, log=log, timeout=prep.timeout or None
    )
    if opts.fork == "on" or (opts.fork == "auto" and emu):
        sup.fork = ForkPlan(device=device, files=files, force=opts.fork == "on")
    elif opts.fork == "auto":
        sup.fork_note = f"device {device!r} is not declared fork-safe (--fork on declares it)"
    with (
        progress,
        interrupting(lambda: resume_hint(opts, results)),
    ):
        sup.on_progress = progress.update
        sup.on_line = progress.say
        last = sup.run()

    data = RunData.from_records(read_records(results))
    if not last.finished and data.sessions == 0 and not data.results:
        # pytest stopped before it ran anything: a usage, device or conftest problem.
        tail = "" if progress.said or log is None else "\n" + _tail(log)
        where = f"; its output is in {log}" if log is not None else ""
        print(
            f"ootest: error: pytest stopped before running any test (exit status "
            f"{last.returncode}){where}{tail}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return verdict(opts, cfg, prep, sup, last, data)


def prepare(opts: RunOptions, cfg: Config) -> Prepared:
    """Check the options and settle the paths. Everything a run writes (reports,
    log, state folder, baseline) goes next to its results file: a run given
    --results writes nowhere else."""
    from ootest.atomic import check_output
    from ootest.record.results import RunData, read_records, state_dir
    from ootest.record.shard import ShardSpec

    shard = ShardSpec.parse(opts.shard) if opts.shard else None
    if opts.guard_threshold < 0 or opts.guard_threshold >= 1:
        raise UserError(f"--guard-threshold: expected 0 <= F < 1; found {opts.guard_threshold}")
    if opts.resume and opts.results and Path(opts.results) != Path(opts.resume):
        raise UserError("--resume PATH continues PATH itself; do not also pass --results")
    outputs = output_paths(opts)
    results = outputs.results
    named = "--resume" if opts.resume else "--results"
    for what, path in ((named, results), ("--junit", outputs.junit), ("--html", outputs.html)):
        check_output(path, what)  # before any test runs (was a traceback after all of them)
    check_output(state_dir(results), f"{named} (its state folder)", folder=True)
    _lock_results(results, named)
    baseline = Path(opts.baseline) if opts.baseline else None
    if opts.resume:
        if not results.exists():
            raise UserError(f"--resume {results}: no such results file")
    else:
        if results.exists():
            previous = results.with_name("previous.jsonl")
            if not opts.results and RunData.from_records(read_records(results)).results:
                shutil.move(results, previous)  # the default baseline
            else:  # an explicit path is overwritten; a run that never started is no baseline
                results.unlink()
        if baseline is None and not opts.results and results.with_name("previous.jsonl").exists():
            baseline = results.with_name("previous.jsonl")
    if baseline is not None and not baseline.exists():
        raise UserError(f"--baseline {baseline}: no such results file")
    timeout = opts.timeout if opts.timeout is not None else cfg.suite.timeout
    check_timeout(timeout, "--timeout")
    return Prepared(outputs, baseline, state_dir(results), timeout, shard)


_HELD: list[int] = []  # lock descriptors, open until the process ends


def _lock_results(results: Path, named: str) -> None:
    """Note [One run per results file]: two runs writing one results file (two configs
    run at once from one folder, both on the default .ootest/) mixed their records,
    and each reported the other's tests as its own; the second also moved the first's
    results away as its baseline. A run holds an advisory lock in the results' state
    folder until it ends; a second run on the same file stops with one line."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    from ootest.record.results import state_dir

    lock = state_dir(results) / "run.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(
            f"{named} {results}: another ootest run is writing it; wait for it to end, "
            "or give this run its own --results PATH"
        ) from None
    _HELD.append(fd)


def pytest_command(opts: RunOptions, cfg: Config, prep: Prepared, files: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", *files, "--ootest-config", str(cfg.source)]
    cmd += ["-p", "no:cacheprovider", "-p", "no:faulthandler", "--continue-on-collection-errors"]
    cmd += ["-rN", "-v" if opts.show_output else "-q"]
    if opts.device:
        cmd += ["--ootest-device", opts.device]
    if prep.timeout:
        cmd += ["--ootest-timeout", str(prep.timeout)]
    if prep.shard is not None:
        cmd += ["--ootest-shard", str(prep.shard)]
        for d in opts.durations or ([str(prep.baseline)] if prep.baseline else []):
            cmd += ["--ootest-durations", d]
    return cmd + list(opts.pytest_args)


def verdict(
    opts: RunOptions,
    cfg: Config,
    prep: Prepared,
    sup: Supervisor,
    last: Attempt,
    data: RunData,
) -> int:
    """Guard, reports and summary; then the exit code (see the module docstring)."""
    from ootest.config.paths import file_keys
    from ootest.record.results import RunData, blocking, read_records
    from ootest.runner import guard
    from ootest.runner.render import print_summary, write_html, write_junit

    results, log, baseline = prep.outputs.results, prep.outputs.log, prep.baseline
    extra: list[str] = []
    crashes = [a.crash for a in sup.attempts if a.crash is not None]
    if crashes:
        how = "forked" if sup.attempts[-1].forked else "fresh processes"
        extra.append(f"{len(crashes)} crash(es)/timeout(s) recovered by restarting pytest ({how})")
        if sup.fork_note is not None:
            extra.append(f"fork server: {sup.fork_note}")
    if last.finished and last.returncode < 0:
        from ootest.record.crash import signal_name

        extra.append(
            f"note: pytest died of {signal_name(last.returncode)} at exit, "
            "after every result was written"
        )
    if log is not None:
        extra.append(f"pytest output: {log}")
    keys = file_keys(cfg.source, (t for t, _ in cfg.resolved))
    trips = guard.check(
        [guard.GuardFile(keys.key(rf.path), rf.entry.expect) for rf in _unique(cfg.files)],
        data,
        RunData.from_records(read_records(baseline)) if baseline else None,
        device=bool(opts.device or cfg.suite.device),
        threshold=opts.guard_threshold,
    )
    junit, html_path = prep.outputs.junit, prep.outputs.html
    write_junit(data, junit)
    write_html(data, html_path, f"ootest: {cfg.source.name}", trips, coverage=_coverage(cfg, data))
    extra.append(f"JUnit: {junit}  HTML: {html_path}")
    print_summary(data, str(results), trips, extra)

    if last.repeated:
        print(
            f"ootest: error: {last.crash and last.crash.get('nodeid')} crashed again after "
            f"the run resumed past it; stopped instead of looping (a bug: please report it "
            f"with {results})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not last.finished:
        tail = _tail(log) if log is not None else ""
        print(
            f"ootest: error: pytest exited with status {last.returncode} outside any test "
            f"(device registration, conftest or ootest itself); {len(data.results)} results "
            f"kept in {results}\n{tail}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if last.returncode in (3, 4):  # pytest internal error or usage error
        print(f"ootest: error: pytest exited with status {last.returncode}", file=sys.stderr)
        if log is not None:
            print(_tail(log), file=sys.stderr)
        return EXIT_USAGE
    if opts.strict_config and data.stale:
        print(
            f"ootest: error: --strict-config: {len(data.stale)} config name(s) matched no test",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if trips:
        return EXIT_GUARD
    if any(blocking(r) for r in data.results.values()):
        return EXIT_FAILED
    return EXIT_OK


def resume_hint(opts: RunOptions, results: Path) -> str:
    """What an interrupted run kept and the command that continues it."""
    from ootest.record.results import RunData, read_records

    if not results.exists():
        return "no result was written yet; nothing to resume"
    kept = len(RunData.from_records(read_records(results)).results)
    return f"{kept} result(s) kept in {results}; continue with: {resume_command(opts, results)}"


def resume_command(opts: RunOptions, results: Path) -> str:
    """The ``ootest run`` command line that continues this run from ``results``."""
    import shlex

    argv = ["ootest", "run", opts.config, "--resume", str(results)]
    for flag, value in (
        ("--device", opts.device),
        ("--junit", opts.junit),
        ("--html", opts.html),
        ("--timeout", opts.timeout),
        ("--shard", opts.shard),
        ("--baseline", opts.baseline),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for d in opts.durations or []:
        argv += ["--durations", d]
    if opts.guard_threshold != 0.05:
        argv += ["--guard-threshold", str(opts.guard_threshold)]
    if opts.fork != "auto":
        argv += ["--fork", opts.fork]
    argv += [flag for flag, on in (("--strict-config", opts.strict_config),
             ("--show-output", opts.show_output), ("-q", opts.quiet)) if on]  # fmt: skip
    if opts.pytest_args:
        argv += ["--", *opts.pytest_args]
    return shlex.join(argv)


def _unique(files: list[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for rf in files:
        seen.setdefault(os.path.realpath(rf.path), rf)
    return list(seen.values())


def _tail(path: Path, n: int = 30) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _coverage(cfg: Any, data: Any) -> Any:
    """Op coverage for the HTML report when the config names an op map (``op_map:``)
    that exists; a missing or unreadable one costs the section, not the run."""
    db = cfg.suite.op_map
    if not db or not Path(db).is_file():
        return None
    from ootest.runner.coverage import coverage, load_op_map

    try:
        return coverage(data, *load_op_map(Path(db)), source=str(db))
    except UserError:
        return None
