"""``ootest ops capture CONFIG|TESTPATH... --device emu:full``: fill the op map; the
machinery an upgrade's delta capture runs too (Note [Fresh evidence for the delta]).

Runs the variants under the recording dispatch mode (Note [Op capture]) in the
same supervised pytest as ``ootest run`` (a segfault costs one variant, not the
capture; it is recorded with the ops it reached and the last of them as where
it stopped), then ingests the capture into the index. The capture stream and
the results stay next to the index (``<db>.capture/``) for inspection. torch is
imported only in the pytest child.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ootest.atomic import write_atomic
from ootest.cache import OPS_DB
from ootest.errors import UserError
from ootest.opmap.ingest import ingest_records
from ootest.timeout import check_timeout


def add_parser(osub: Any) -> None:
    a = osub.add_parser(
        "capture",
        help="run tests under the op recorder and add what they call to the index",
        description="Run tests (a config's files or test paths) on the device with every aten "
        "op they call recorded per variant; a crash costs one variant. Capture once on "
        "emu:full (every op available) and answer for any backend from its declared ops.",
    )
    a.add_argument("targets", nargs="+", metavar="CONFIG|TESTPATH")
    a.add_argument("--device", default="emu:full", help="the device (default: emu:full)")
    a.add_argument("--db", type=Path, default=OPS_DB)
    a.add_argument("--shard", metavar="I/N", help="capture shard I of N (merge with 'ops merge')")
    a.add_argument(
        "--durations",
        action="append",
        metavar="JSONL",
        help="earlier results (a capture's results.jsonl) whose durations balance --shard",
    )
    a.add_argument(
        "--tree-commit",
        metavar="SHA",
        help="the commit of the test tree, recorded with --shard for 'ops merge' to check "
        "(default: git's HEAD of the first test path's folder when the path is HEAD's, "
        "tracked and unchanged; else unknown)",
    )
    a.add_argument(
        "--resume",
        action="store_true",
        help="go on with the capture in <db>.capture/ where it stopped (the same tests, "
        "device and shard), instead of starting over",
    )
    a.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS")
    a.add_argument(
        "--only",
        type=Path,
        metavar="FILE",
        help="capture only the variants whose IDs FILE lists, one a line",
    )
    a.add_argument(
        "--memory",
        type=Path,
        metavar="DB",
        help="the memory of the tree captured (ootest index build): each record says which "
        "code it ran (the variant's fingerprint), so a later change of the test makes it stale",
    )
    a.add_argument(
        "--replace",
        action="store_true",
        help="the records of the variants captured replace what the index held of them "
        "(their op sets are of this code only) instead of adding to it",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress")
    a.set_defaults(func=capture)


def capture(args: argparse.Namespace) -> int:
    from ootest.cli.run_cmd import _Progress
    from ootest.record.shard import ShardSpec
    from ootest.select.fresh import fingerprints

    if args.shard:
        ShardSpec.parse(args.shard)
    if args.only is not None:
        from ootest.plugin.selector import read_only

        read_only(args.only, "--only")  # one error line here, not a pytest that stops at once
    code = None
    if args.memory is not None:
        code = fingerprints(args.memory)
    got = capture_into(
        args.db,
        list(args.targets),
        device=args.device,
        timeout=args.timeout,
        only=args.only,
        shard=args.shard,
        durations=list(args.durations or []),
        tree_commit=args.tree_commit,
        resume=args.resume,
        code=code,
        replace=args.replace,
        pytest_args=list(args.pytest_args),
        progress=_Progress(enabled=not args.quiet),
    )
    print(
        f"ootest: {got.results} results, {got.variants} variants with ops, "
        f"{got.edges} edges; {got.crashes} crash(es) recovered; index {args.db}"
    )
    return 0


class Progress(Protocol):
    """What shows a capture's progress (``ootest run``'s bar or lines)."""

    def update(self, done: int, total: int) -> None: ...

    def say(self, line: str) -> None: ...


class _Quiet:
    def update(self, done: int, total: int) -> None:
        return None

    def say(self, line: str) -> None:
        return None


def _pytest_command(args: argparse.Namespace, stream: Path) -> list[str]:
    configs = [t for t in args.targets if t.endswith((".yaml", ".yml"))]
    paths = [t for t in args.targets if t not in configs]
    if len(configs) > 1:
        raise UserError("ops capture: give at most one config (or test paths)")
    check_timeout(args.timeout, "--timeout")
    cmd = [sys.executable, "-m", "pytest"]
    if configs:
        from ootest.config.load import load_config

        cfg = load_config(configs[0])
        paths += list(dict.fromkeys(str(rf.path) for rf in cfg.files))
        cmd += ["--ootest-config", str(cfg.source)]
    for p in paths:
        if not Path(p.split("::")[0]).exists():
            raise UserError(f"ops capture: {p}: no such test file or folder")
    cmd += paths
    cmd += ["-p", "no:cacheprovider", "-p", "no:faulthandler", "--continue-on-collection-errors"]
    cmd += ["-q", "-rN", "--ootest-device", args.device, "--ootest-ops-capture", str(stream)]
    cmd += ["--ootest-timeout", str(args.timeout)]
    if args.shard:
        cmd += ["--ootest-shard", args.shard]
    for d in args.durations or []:
        if not Path(d).is_file():
            raise UserError(f"ops capture: --durations {d}: no such results file")
        cmd += ["--ootest-durations", d]
    if args.only is not None:
        cmd += ["--ootest-only", str(args.only)]
    return [*cmd, *args.pytest_args]


@dataclass(frozen=True)
class Captured:
    """What :func:`capture_into` did."""

    results: int  # tests with a result
    variants: int  # variants with records ingested
    edges: int  # edges in the index after it
    crashes: int  # crashes recovered
    seconds: float


def capture_into(
    db: Path,
    targets: list[str],
    *,
    device: str = "emu:full",
    timeout: float = 300.0,
    only: Path | None = None,
    shard: str | None = None,
    durations: Sequence[str] = (),
    tree_commit: str | None = None,
    resume: bool = False,
    code: Mapping[str, str] | None = None,
    replace: bool = False,
    pytest_args: Sequence[str] = (),
    progress: contextlib.AbstractContextManager[Progress] | None = None,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
) -> Captured:
    """Run ``targets`` (test paths, or one config) under the op recorder on ``device``
    in a supervised pytest child and ingest what they call into ``db``. ``only``: a
    file of the variant IDs to run; ``shard``: I/N, recorded with its torch and
    ``tree_commit`` (Note [Shard records]), balanced by ``durations``; ``resume``:
    go on where the same capture stopped; ``code``: each variant's fingerprint, written
    with its records (Note [Evidence of which code]); ``replace``: the records
    replace what ``db`` held of those variants (Note [Fresh evidence for the delta])."""
    import time

    from ootest.atomic import check_output
    from ootest.device import check_device
    from ootest.opmap.store import OpStore
    from ootest.record.results import RunData, read_records, state_dir
    from ootest.runner.supervise import Supervisor

    started = time.perf_counter()
    check_output(db, "--db")  # before the capture runs
    work = db.with_name(db.name + ".capture")
    stream, results = work / "ops.jsonl", work / "results.jsonl"
    ns = argparse.Namespace(
        targets=targets, timeout=timeout, shard=shard, only=only, device=device,
        durations=list(durations), pytest_args=list(pytest_args),
    )  # fmt: skip
    cmd = _pytest_command(ns, stream)
    tree = _tree_commit(tree_commit, targets) if shard else None
    what = {"targets": list(targets), "device": device, "shard": shard, "tree_commit": tree}
    if resume and (work / WHAT).exists():
        _check_resume(work, what, stream)
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        write_atomic(work / WHAT, json.dumps(what, indent=1) + "\n")
    check_device(device)  # emu children run with torch's backend autoload off
    say(f"ootest: capturing ops on {device} into {db}")
    sup = Supervisor(
        pytest_cmd=cmd, results=results, state=state_dir(results), log=work / "pytest.log",
        timeout=timeout,
    )  # fmt: skip
    with progress or contextlib.nullcontext(_Quiet()) as shown:
        sup.on_progress = shown.update
        sup.on_line = shown.say
        last = sup.run()
    data = RunData.from_records(read_records(results))
    if not stream.exists() or (not data.results and not last.finished):
        raise UserError(
            f"ops capture: pytest stopped before running any test (exit {last.returncode}); "
            f"its output is in {work / 'pytest.log'}"
        )
    extra = _stops_of_crashes(stream, data.results.values())
    with OpStore.open(db, create=True) as store:
        rep = ingest_records(
            store, _records(stream, extra), source=str(stream), code=code, replace=replace
        )
        if shard:
            _record_shard(store, db, shard, rep.captures, tree, finished=last.finished)
    crashes = sum(1 for a in sup.attempts if a.crash is not None)
    return Captured(
        len(data.results), rep.variants, rep.edges, crashes, time.perf_counter() - started
    )


#: In the work folder: what it is a capture of, so --resume goes on only with the same.
WHAT = "capture.json"


def _tree_commit(given: str | None, targets: list[str]) -> str | None:
    """``--tree-commit``, else HEAD of the git checkout holding the first test path
    when that path is HEAD's as it is (tracked, unchanged); else unknown (None): a
    git-ignored copy of upstream's file inside a project's checkout is not the
    project's HEAD."""
    if given is not None:
        if not re.fullmatch(r"[0-9a-f]{40}", given):
            raise UserError(
                f"ops capture: --tree-commit: expected a 40-hex git commit, found {given[:60]!r}"
            )
        return str(given)
    first = Path(targets[0].split("::")[0])
    folder = first if first.is_dir() else first.parent
    name = "." if first.is_dir() else first.name

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    sha = (git("rev-parse", "HEAD") or "").strip()
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        return None
    tracked = git("ls-files", "--", name)
    changed = git("status", "--porcelain", "--ignored", "--untracked-files=all", "--", name)
    if not tracked or changed is None or changed.strip():
        return None  # not HEAD's file (untracked, ignored, changed): no commit names it
    return sha


def _check_resume(work: Path, what: dict[str, Any], stream: Path) -> None:
    """Go on only with the capture the folder holds: same tests, device, shard and
    tree, and the torch its stream began with (a stream's lines belong to its first
    provenance line, so another torch's ops would be filed under the old one)."""
    try:
        before = json.loads((work / WHAT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = None
    if before != what:
        raise UserError(
            f"ops capture --resume: {work} holds a capture of {json.dumps(before)}, not of "
            f"{json.dumps(what)}; run without --resume to start over"
        )
    torch_before = _stream_torch(stream)
    try:
        from importlib.metadata import PackageNotFoundError, version

        installed: str | None = version("torch")
    except PackageNotFoundError:
        installed = None
    if torch_before is not None and installed is not None and torch_before != installed:
        raise UserError(
            f"ops capture --resume: {work} was captured with torch {torch_before}, the "
            f"installed torch is {installed}; install {torch_before} or run without --resume"
        )


def _stream_torch(stream: Path) -> str | None:
    try:
        with open(stream, encoding="utf-8", errors="replace") as fh:
            first = fh.readline(1 << 16)
        value = json.loads(first).get("torch_version")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _record_shard(
    store: Any, db: Path, shard: str, captures: list[int], tree: str | None, finished: bool
) -> None:
    """Note [Shard records]: which shard, of which torch and tree, and whether it ended."""
    from ootest.opmap.shards import ShardRecord, torch_versions, write_shard
    from ootest.record.shard import ShardSpec

    found = torch_versions(store.connection, captures)
    if len(found) != 1:  # a stream has one provenance; several means the db held others
        raise UserError(
            f"ops capture: --db {db}: expected one torch version in this shard's capture, "
            f"found {found}; capture each shard into a new --db"
        )
    spec = ShardSpec.parse(shard)
    write_shard(store.connection, ShardRecord(str(spec), found[0], tree, finished))


def _records(stream: Path, extra: list[dict[str, Any]]) -> Any:
    from ootest.opmap.capture import read_capture

    for _, rec, _ in read_capture(stream):
        yield rec
    yield from extra


def _stops_of_crashes(stream: Path, results: Any) -> list[dict[str, Any]]:
    """A test that killed its process wrote no stop line: its result says how it
    ended, and the last op it reached (written before it ran) is where it stopped."""
    last_op: dict[str, str] = {}
    stopped: set[str] = set()
    with open(stream, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "ops" and rec.get("mode") == "eager" and rec.get("ops"):
                last_op[str(rec["variant_id"])] = next(reversed(rec["ops"]))
            elif rec.get("kind") == "stop":
                stopped.add(str(rec.get("variant_id")))
    out = []
    for r in results:
        vid = str(r.get("variant_id"))
        if r.get("outcome") in ("crashed", "timeout") and vid not in stopped:
            out.append(
                {
                    "kind": "stop",
                    "variant_id": vid,
                    "op": last_op.get(vid),
                    "outcome": r["outcome"],
                    "error": r.get("signal"),
                }
            )
    return out
