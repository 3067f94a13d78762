"""Recorded calls -> a ``test_suite_config`` with one ``edits.ops.include`` entry per
distinct call (no torch: the CLI writes it from the recording process's JSON)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ootest.config.paths import MODEL_SUITE, MODEL_SUITE_VAR
from ootest.errors import UserError

SUITE = MODEL_SUITE / "test_ootest_model_ops.py"
DEFAULT_TEST = f"{SUITE}::TestModelOps::test_model_op"


@dataclass(frozen=True)
class TestRef:
    """Where the entries go: a test file and its ``Class::method`` (an ``@ops`` test)."""

    __test__ = False

    path: Path
    name: str

    @classmethod
    def parse(cls, text: str) -> TestRef:
        path, sep, name = text.partition("::")
        if not sep or "::" not in name or not path.endswith(".py"):
            raise UserError(
                f"--test: expected FILE.py::Class::test_method (an @ops test); found {text!r}"
            )
        return cls(Path(path), name)


class _Flow(list[Any]):
    """A list YAML writes on one line (shapes, strides, short value lists)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def _flow(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _flow(x) for k, x in v.items()}
    if isinstance(v, list):
        if all(not isinstance(x, dict | list) for x in v):
            return _Flow(v)
        return [_flow(x) for x in v]
    return v


def _description(locations: dict[str, int]) -> str:
    sites = list(locations)
    if not sites:
        return "recorded call"
    more = len(sites) - 1
    return sites[0] + (f" (and {more} other call site{'s' if more > 1 else ''})" if more else "")


def _plain(arg: dict[str, Any]) -> Any:
    value = arg.get("value")
    if list(arg) == ["value"] and not isinstance(value, dict | list):
        return value
    return arg


def entries(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``edits.ops.include`` entry per recorded call, tagged ``<name>.<n>``."""
    out: list[dict[str, Any]] = []
    seen: Counter[str] = Counter()
    for c in calls:
        name = str(c["name"])
        seen[name] += 1
        func: dict[str, Any] = {"args": c["args"]}
        if c["kwargs"]:  # plain values written plainly, as Torch Spyre's configs do
            func["kwargs"] = {k: _plain(v) for k, v in c["kwargs"].items()}
        out.append(
            {
                "name": name,
                "sample_inputs_func": func,
                "description": _description(c.get("locations") or {}),
                "tags": [f"{name}.{seen[name]}"],
                "count": int(c["count"]),
            }
        )
    return out


def _path_for(test: Path, out_dir: Path) -> str:
    """The test file as the config names it: ootest's own model test through the
    variable the loader fills (Note [Model suite path]), any other relative to the
    config when possible (the loader reads ``files[].path`` relative to its config)."""
    real = test.resolve()
    if real.is_relative_to(MODEL_SUITE):
        return f"${{{MODEL_SUITE_VAR}}}/{real.relative_to(MODEL_SUITE).as_posix()}"
    try:
        return os.path.relpath(real, out_dir.resolve())
    except ValueError:  # another drive
        return str(test.resolve())


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ootest")
    except PackageNotFoundError:
        return "?"


def config_text(
    data: dict[str, Any],
    *,
    tag: str,
    test: TestRef,
    out_dir: Path,
    seed: int,
    command: list[str] | None = None,
) -> str:
    """The YAML config for a recording (``data``: what the recording process wrote)."""
    calls = data.get("calls") or []
    entry = {
        "names": [test.name],
        "mode": "mandatory_success",
        "tags": [tag],
        "edits": {"ops": {"include": entries(calls)}},
    }
    doc = {
        "test_suite_config": {
            "global": {"input_config": {"seed": seed}},
            "files": [
                {
                    "path": _path_for(test.path, out_dir),
                    "unlisted_test_mode": "skip",
                    "tests": [entry],
                }
            ],
        }
    }
    shown = command if command is not None else data.get("command") or []
    line = " ".join(str(x) for x in shown).replace("\n", " ")
    left_out = data.get("left_out") or {}
    head = [
        f"# Recorded by `ootest model record` (ootest {_version()}, "
        f"torch {data.get('torch', '?')}) from: {line}",
        f"# {len(calls)} distinct calls of {data.get('total', 0)} recorded; tensors are "
        "described (shape, stride, offset, dtype, value range), never stored.",
    ]
    if left_out:
        head.append(
            f"# {sum(left_out.values())} calls left out (arguments the format cannot hold):"
        )
        head += [f"#   {n} x {why}" for why, n in list(left_out.items())[:20]]
    body = yaml.dump(_flow(doc), Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return "\n".join(head) + "\n" + body
