"""``ootest shards`` (older spelling ``ootest plan``): the shard matrix of a config
(``ootest.runner.shards``) as GitHub Actions matrix JSON. Never imports torch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "shards",
        aliases=["plan"],  # the older spelling
        help="split a config's tests into N shards; print a GitHub Actions matrix",
        description="Print a GitHub Actions matrix (JSON) with one leg per shard. Each leg runs "
        "'ootest run CONFIG --shard I/N --durations RESULTS'; the split itself is made by "
        "the run from the same durations, greedy longest-first, so every test is in one shard.",
    )
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--shards", type=int, required=True, metavar="N")
    p.add_argument(
        "--durations",
        metavar="PATH",
        action="append",
        help="results of earlier runs (JSONL); their durations estimate each shard's load",
    )
    p.set_defaults(func=shards)


def shards(args: argparse.Namespace) -> int:
    from ootest.config.load import load_config
    from ootest.runner.shards import shard_matrix

    cfg = load_config(args.config)
    print(json.dumps(shard_matrix(cfg, args.shards, [Path(p) for p in args.durations or []])))
    return 0
