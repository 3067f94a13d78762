"""``ootest ops capture CONFIG|TESTPATH... --device emu:full``: fill the op map.

Runs the variants under the recording dispatch mode (Note [Op capture]) in the
same supervised pytest as ``ootest run`` (a segfault costs one variant, not the
capture; it is recorded with the ops it reached and the last of them as where
it stopped), then ingests the capture into the index. The capture stream and
the results stay next to the index (``<db>.capture/``) for inspection. torch is
imported only in the pytest child.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
        "(default: git's HEAD of the first test path's folder)",
    )
    a.add_argument(
        "--resume",
        action="store_true",
        help="go on with the capture in <db>.capture/ where it stopped (the same tests, "
        "device and shard), instead of starting over",
    )
    a.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress")
    a.set_defaults(func=capture)


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
    return [*cmd, *args.pytest_args]


def capture(args: argparse.Namespace) -> int:
    from ootest.cli.run_cmd import _Progress
    from ootest.device import check_device
    from ootest.opmap.store import OpStore
    from ootest.record.results import RunData, read_records, state_dir
    from ootest.record.shard import ShardSpec
    from ootest.runner.supervise import Supervisor

    if args.shard:
        ShardSpec.parse(args.shard)
    from ootest.atomic import check_output

    check_output(args.db, "--db")  # before the capture runs
    work = args.db.with_name(args.db.name + ".capture")
    stream, results = work / "ops.jsonl", work / "results.jsonl"
    cmd = _pytest_command(args, stream)
    tree = _tree_commit(args) if args.shard else None
    what = {"targets": list(args.targets), "device": args.device, "shard": args.shard}
    what["tree_commit"] = tree
    if args.resume and (work / WHAT).exists():
        _check_resume(work, what, stream)
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        write_atomic(work / WHAT, json.dumps(what, indent=1) + "\n")
    check_device(args.device)  # emu children run with torch's backend autoload off
    print(f"ootest: capturing ops on {args.device} into {args.db}", flush=True)
    sup = Supervisor(
        pytest_cmd=cmd, results=results, state=state_dir(results), log=work / "pytest.log",
        timeout=args.timeout,
    )  # fmt: skip
    with _Progress(enabled=not args.quiet) as progress:
        sup.on_progress = progress.update
        sup.on_line = progress.say
        last = sup.run()
    data = RunData.from_records(read_records(results))
    if not stream.exists() or (not data.results and not last.finished):
        raise UserError(
            f"ops capture: pytest stopped before running any test (exit {last.returncode}); "
            f"its output is in {work / 'pytest.log'}"
        )
    extra = _stops_of_crashes(stream, data.results.values())
    with OpStore.open(args.db, create=True) as store:
        rep = ingest_records(store, _records(stream, extra), source=str(stream))
        if args.shard:
            _record_shard(store, args, rep.captures, tree, finished=last.finished)
    crashes = sum(1 for a in sup.attempts if a.crash is not None)
    print(
        f"ootest: {len(data.results)} results, {rep.variants} variants with ops, "
        f"{rep.edges} edges; {crashes} crash(es) recovered; index {args.db}"
    )
    return 0


#: In the work folder: what it is a capture of, so --resume goes on only with the same.
WHAT = "capture.json"


def _tree_commit(args: argparse.Namespace) -> str | None:
    """``--tree-commit``, else HEAD of the git checkout holding the first test path."""
    if args.tree_commit is not None:
        if not re.fullmatch(r"[0-9a-f]{40}", args.tree_commit):
            raise UserError(
                f"ops capture: --tree-commit: expected a 40-hex git commit, found "
                f"{args.tree_commit[:60]!r}"
            )
        return str(args.tree_commit)
    first = Path(args.targets[0].split("::")[0])
    folder = first if first.is_dir() else first.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else None


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
    store: Any, args: argparse.Namespace, captures: list[int], tree: str | None, finished: bool
) -> None:
    """Note [Shard records]: which shard, of which torch and tree, and whether it ended."""
    from ootest.opmap.shards import ShardRecord, torch_versions, write_shard
    from ootest.record.shard import ShardSpec

    found = torch_versions(store.connection, captures)
    if len(found) != 1:  # a stream has one provenance; several means the db held others
        raise UserError(
            f"ops capture: --db {args.db}: expected one torch version in this shard's capture, "
            f"found {found}; capture each shard into a new --db"
        )
    spec = ShardSpec.parse(args.shard)
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
