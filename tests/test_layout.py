"""The package layout the README promises: who may import whom (read from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "ootest"

#: package -> packages of ootest it must never import (at any depth, lazily or not)
FORBIDDEN = {
    "record": {"plugin", "runner", "cli", "config", "relay", "device"},
    "plugin": {"runner", "cli"},
    "runner": {"plugin", "cli"},
    "config": {"plugin", "runner", "cli", "opmap", "select", "memory", "model", "relay"},
    "relay": {"plugin", "cli", "select"},
    "model": {"plugin", "runner", "cli", "select", "opmap", "memory"},
    "opmap": {"plugin", "runner", "cli", "select", "memory"},
    "select": {"plugin", "runner", "cli"},
    "memory": {"plugin", "runner", "cli", "device", "select", "opmap"},
    "device": {"plugin", "runner", "cli", "select", "opmap", "memory", "relay", "config"},
}

#: modules every package may use: they import no ootest package but errors and untrusted
FLOOR = (
    "errors",
    "atomic",
    "cache",
    "timeout",
    "memo",
    "llm",
    "httpbody",
    "htmlpage",
    "version",
    "opname",
    "naming",
    "untrusted",
)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("ootest.")}


def test_packages_import_only_what_the_layout_allows() -> None:
    bad: list[str] = []
    for pkg, banned in FORBIDDEN.items():
        for path in sorted((SRC / pkg).rglob("*.py")):
            for mod in _imports(path):
                top = mod.split(".")[1]
                if top in banned:
                    bad.append(f"{path.relative_to(SRC)} imports {mod}")
    # nothing outside cli imports cli
    for path in sorted(SRC.rglob("*.py")):
        if "cli" not in path.relative_to(SRC).parts:
            found = [m for m in _imports(path) if "cli" in m.split(".")]
            bad += [f"{path.relative_to(SRC)} imports {m}" for m in found]
    assert bad == []


def test_the_ground_floor_imports_nothing_above_it() -> None:
    """docs/architecture.md: floor 0 imports no ootest package but ``errors``,
    ``untrusted`` (which import nothing of ootest) and ``httpbody`` (errors only)."""
    bad: list[str] = []
    for name in FLOOR:
        path = SRC / f"{name}.py"
        for mod in _imports(path):
            if mod.split(".")[1] not in ("errors", "untrusted", "httpbody", name):
                bad.append(f"{name}.py imports {mod}")
    assert bad == []


def test_no_small_plugin_imports_the_core() -> None:
    """Issue 25 item 2: the core registers the small plugins; they read it through
    the ``keys.Core`` protocol and stash keys, never by importing it."""
    users = sorted(
        str(p.relative_to(SRC))
        for p in (SRC / "plugin").glob("*.py")
        if any(m.startswith("ootest.plugin._core") for m in _imports(p))
    )
    assert users == ["plugin/__init__.py"]


def test_the_op_map_store_does_not_know_how_it_is_filled() -> None:
    """Issue 25 item 2: opmap/ingest.py fills the store; the store never imports it."""
    assert not [m for m in _imports(SRC / "opmap" / "store.py") if "ingest" in m]


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from ootest.runner.supervise import Supervisor\n")
    assert _imports(f) == {"ootest.runner.supervise", "ootest.runner.supervise.Supervisor"}
