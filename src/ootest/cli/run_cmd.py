"""``ootest run CONFIG [-- PYTEST_ARGS]``: the main job.

Runs the config's files with the plugin in a supervised pytest subprocess
(torch is never imported here): crashes and hangs are recorded and the run
goes on after them, every result is appended to the JSONL results file as it is
known, and at the end the collection guard, the terminal summary, JUnit XML and
an HTML report are made from that file. The run itself is
:func:`ootest.runner.job.run`; this module maps the arguments onto
:class:`~ootest.runner.job.RunOptions` and shows the progress.

Exit codes: 0 all good; 1 test failures (a mandatory_success test failed,
errored, crashed or timed out, or a strict xfail passed); 2 usage or config
error; 3 collection guard tripped; anything else is a bug.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ootest.runner.job import Outputs, RunOptions


def options(args: argparse.Namespace) -> RunOptions:
    """The run the arguments ask for."""
    from ootest.runner.job import RunOptions

    return RunOptions(
        config=args.config,
        device=args.device,
        results=args.results,
        junit=args.junit,
        html=args.html,
        timeout=args.timeout,
        resume=args.resume,
        shard=args.shard,
        durations=args.durations,
        baseline=args.baseline,
        guard_threshold=args.guard_threshold,
        strict_config=args.strict_config,
        show_output=args.show_output,
        fork=args.fork,
        quiet=args.quiet,
        pytest_args=tuple(getattr(args, "pytest_args", ()) or ()),
    )


def output_paths(args: argparse.Namespace) -> Outputs:
    """Where ``ootest run`` with these arguments writes (the generated CI workflow
    uploads exactly these)."""
    from ootest.runner.job import output_paths as paths

    return paths(options(args))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run a config's test files on the device",
        description="Run a config's test files on the device, surviving crashes and hangs. "
        "Exit: 0 ok, 1 test failures, 2 usage/config error, 3 collection guard tripped.",
    )
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--device", help="override the config's device ('emu[:profile]' or 'mod:name')")
    p.add_argument(
        "--results", metavar="PATH", help="JSONL results (default: .ootest/results.jsonl)"
    )
    p.add_argument(
        "--junit", metavar="PATH", help="JUnit XML (default: junit.xml next to the results)"
    )
    p.add_argument(
        "--html", metavar="PATH", help="HTML report (default: report.html next to the results)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="per-test timeout (default: the config's 'timeout:', else none)",
    )
    p.add_argument(
        "--resume",
        metavar="PATH",
        help="continue an interrupted run: keep PATH's results, run only the tests it lacks",
    )
    p.add_argument("--shard", metavar="I/N", help="run shard I of N (see 'ootest shards')")
    p.add_argument(
        "--durations",
        metavar="PATH",
        action="append",
        help="earlier results whose durations balance --shard (default: the baseline)",
    )
    p.add_argument(
        "--baseline",
        metavar="PATH",
        help="results of an earlier run for the collection guard "
        "(default: the previous run's, kept as .ootest/previous.jsonl)",
    )
    p.add_argument(
        "--guard-threshold",
        type=float,
        default=0.05,
        metavar="FRACTION",
        help="allowed drop of device variants per file before the guard trips (default 0.05)",
    )
    p.add_argument(
        "--strict-config",
        action="store_true",
        help="config names that match no test are an error (exit 2)",
    )
    p.add_argument(
        "--show-output",
        action="store_true",
        help="stream pytest's own output instead of a progress bar (always saved in "
        ".ootest/pytest.log)",
    )
    p.add_argument(
        "--fork",
        choices=("auto", "on", "off"),
        default="auto",
        help="start pytest again after a crash by forking a process that loaded torch and "
        "the device once: auto (default) where the device allows it (emu, or no device), "
        "on also for a backend module you know to be fork-safe, off for a fresh process "
        "every time (see docs/runner.md)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ootest.cli.interrupt import term_as_interrupt
    from ootest.runner.job import run as run_job

    opts = options(args)
    progress = _Progress(enabled=not opts.show_output and not opts.quiet)
    return run_job(opts, progress, term_as_interrupt)


class _Progress:
    """A rich progress bar on a terminal; a line per 10% elsewhere (CI logs)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.task: Any = None
        self.last_decile = -1
        self.said = False

    def __enter__(self) -> _Progress:
        if self.enabled and sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("tests", total=None)
        return self

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total or None)
            return
        if total:
            decile = 10 * done // total
            if decile != self.last_decile:
                self.last_decile = decile
                print(f"ootest: {done}/{total} tests", flush=True)

    def say(self, line: str) -> None:
        self.said = True
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
