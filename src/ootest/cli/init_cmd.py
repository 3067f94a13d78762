"""``ootest init``: write a CRCR GitHub Actions workflow and a starter config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("init", help="write a CRCR GitHub Actions workflow and a starter config")
    p.add_argument("--dir", default=".", help="repository root (default: .)")
    p.add_argument("--device", required=True, help="backend name, e.g. spyre")
    p.add_argument(
        "--module", help="Python module that registers the backend (default: torch_<device>)"
    )
    p.add_argument("--shards", type=int, default=1)
    p.add_argument(
        "--runs-on",
        metavar="LABEL,LABEL",
        help="runner labels of the test job, where the hardware is (default: self-hosted,DEVICE)",
    )
    p.add_argument(
        "--refresh",
        action="store_true",
        help="also a scheduled workflow that runs 'ootest select refresh' on the runner and "
        "opens a pull request with the config change",
    )
    p.add_argument(
        "--refresh-schedule",
        metavar="CRON",
        help="when the refresh runs (default weekly: '41 5 * * 1'; implies --refresh)",
    )
    p.add_argument(
        "--capture",
        action="store_true",
        help="also a workflow that captures the op map on emu:full in shards on GitHub-hosted "
        "runners, merges and publishes it as a release asset; the refresh downloads it",
    )
    p.add_argument(
        "--capture-schedule",
        metavar="CRON",
        help="when the capture runs (default weekly: '17 1 * * 1'; implies --capture)",
    )
    p.add_argument(
        "--capture-shards",
        type=int,
        metavar="N",
        help="shards of the capture, 1-256 (default 4; implies --capture)",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=init_cmd)


def init_cmd(args: argparse.Namespace) -> int:
    from ootest.relay.init import CAPTURE_SHARDS, CAPTURE_WEEKLY, WEEKLY, init

    refresh = args.refresh_schedule or (WEEKLY if args.refresh else None)
    wants_capture = args.capture or args.capture_shards is not None
    capture = args.capture_schedule or (CAPTURE_WEEKLY if wants_capture else None)
    written = init(
        Path(args.dir),
        args.device,
        args.module or "torch_" + args.device.replace("-", "_"),
        args.shards,
        args.force,
        runs_on=args.runs_on,
        refresh=refresh,
        capture=capture,
        capture_shards=CAPTURE_SHARDS if args.capture_shards is None else args.capture_shards,
    )
    for path in written:
        print(f"wrote {path}")
    return 0
