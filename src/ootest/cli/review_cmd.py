"""``ootest select review``: a generated config's decisions, for a person to review
(Note [Config review]). Never imports torch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ootest.errors import UserError


def add_parser(ssub: Any) -> None:
    """Registered under ``ootest select`` (cli/select_cmd.py)."""
    r = ssub.add_parser(
        "review",
        help="a generated config's decisions by reason and file, the ops that block the "
        "most variants, and what changed since a previous config (HTML, table or JSON)",
    )
    r.add_argument("config", type=Path, metavar="SUITE.yaml")
    r.add_argument(
        "--previous", type=Path, metavar="OLD.yaml", help="an earlier config: what changed and why"
    )
    r.add_argument("--html", type=Path, metavar="PATH", help="write the review page here")
    r.add_argument("--json", action="store_true", help="print the review as JSON")
    r.set_defaults(func=review)


def review(args: argparse.Namespace) -> int:
    from ootest.record.decisions import sidecar_path
    from ootest.select.refine import check_sidecar
    from ootest.select.review import build_review, print_review, review_html

    for path in (args.config, args.previous):
        if path is None:
            continue
        if not path.is_file():
            raise UserError(f"{path}: no such config; pass a config 'ootest select run' wrote")
        if sidecar_path(path).exists() or sidecar_path(path).is_symlink():
            check_sidecar(sidecar_path(path))  # a pipe or a folder is named as such
        else:
            raise UserError(
                f"{path}: expected its evidence file {sidecar_path(path)} next to it (written "
                "by 'ootest select run'); found none: a config without it has no decisions "
                "to review"
            )
    if args.html:
        from ootest.atomic import check_output

        check_output(args.html, "--html")
    r = build_review(args.config, args.previous)
    if args.html:
        from ootest.atomic import write_output

        write_output(args.html, review_html(r), "--html")
    if args.json:
        sys.stdout.write(json.dumps(r.to_json(), indent=1) + "\n")
    else:
        print_review(r)
        if args.html:
            print(f"review: {args.html}")
    return 0
