"""``ootest config validate|schema|show`` (never imports torch)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("config", help="validate, explain and publish the config format")
    csub = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    v = csub.add_parser("validate", help="check config files; one message per problem")
    v.add_argument("files", nargs="+", metavar="FILE")
    v.add_argument(
        "--no-paths",
        action="store_true",
        help="check the schema and names only, not that ${VAR}s are defined and files exist",
    )
    v.set_defaults(func=validate)
    s = csub.add_parser("schema", help="print the JSON Schema (for editor completion)")
    s.set_defaults(func=schema)
    sh = csub.add_parser("show", help="print the resolved config (expanded and composed)")
    sh.add_argument("file", metavar="FILE")
    sh.add_argument("--no-paths", action="store_true", help="do not check that files exist")
    sh.set_defaults(func=show)


def validate(args: argparse.Namespace) -> int:
    from ootest.config.load import load_config
    from ootest.errors import ConfigError

    failed = 0
    for f in args.files:
        try:
            cfg = load_config(f, check_paths=not args.no_paths)
        except ConfigError as e:
            failed += 1
            for p in e.problems:
                print(p, file=sys.stderr)
            continue
        for w in cfg.warnings:
            print(f"{w} (note)", file=sys.stderr)
        n_entries = sum(len(rf.entry.tests) for rf in cfg.files)
        print(f"{f}: ok ({len(cfg.suite.files)} file entries, {n_entries} test entries)")
    return 1 if failed else 0


def schema(args: argparse.Namespace) -> int:
    from ootest.config.model import Document

    doc = Document.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "ootest test_suite_config"
    print(json.dumps(doc, indent=2, sort_keys=True))
    return 0


def show(args: argparse.Namespace) -> int:
    from ootest.config.load import load_config

    cfg = load_config(args.file, check_paths=not args.no_paths)
    suite = cfg.suite.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude_defaults=False
    )
    suite.pop("extends", None)
    out: dict[str, Any] = {"test_suite_config": suite}
    out["resolved_files"] = [
        {"path": str(rf.path), "entries": len(rf.entry.tests), "from": rf.entry.origin}
        for rf in cfg.files
    ]
    if cfg.relay is not None:
        out["relay"] = cfg.relay.shown_dump()  # Note [Relay variables]: no value of the env
    import yaml

    yaml.safe_dump(out, sys.stdout, sort_keys=False, default_flow_style=False)
    return 0
