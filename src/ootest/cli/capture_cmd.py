"""``ootest ops capture CONFIG|TESTPATH... --device emu:full``: fill the op map
(the machinery: :mod:`ootest.opmap.capturing`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ootest.cache import OPS_DB


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
    a.add_argument("-q", "--quiet", action="store_true", help="no progress")
    a.set_defaults(func=capture)


def capture(args: argparse.Namespace) -> int:
    from ootest.cli.run_cmd import _Progress
    from ootest.opmap.capturing import capture_into, fingerprints
    from ootest.record.shard import ShardSpec

    if args.shard:
        ShardSpec.parse(args.shard)
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
        code=code,
        pytest_args=list(args.pytest_args),
        progress=_Progress(enabled=not args.quiet),
    )
    print(
        f"ootest: {got.results} results, {got.variants} variants with ops, "
        f"{got.edges} edges; {got.crashes} crash(es) recovered; index {args.db}"
    )
    return 0
