"""The variant part: concrete variants, enumerated by pytest with the ootest plugin.

Each group of test files is collected by one child process (test bodies never
run)::

    python -m pytest --collect-only -q -p no:cacheprovider -p no:unraisableexception
        --continue-on-collection-errors
        --ootest-variants OUT.jsonl [--ootest-device D] [--ootest-config C] [ARGS] FILE...

The plugin writes one ``{"kind": "variant", ...}`` line per collected item and one
``{"kind": "collect_error", ...}`` line per file that fails to import. A child
that dies (a segfault while importing a file) loses its group's lines: the
files without lines are collected again in halves until the culprit is alone,
and it is recorded with the exit code and the end of its error output. The
build goes on either way.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.memory._files import SourceFile
from ootest.record.identity import FileKeys
from ootest.untrusted import without_secrets

#: pytest exit codes after which missing lines mean "no tests", not "crashed".
_NORMAL_EXITS = (0, 1, 2, 5)
_USAGE_EXIT = 4
_COLLECTED = re.compile(r"(\d+)(?:/\d+)? tests? collected|no tests collected")
_TAIL = 2000


@dataclass(frozen=True)
class VariantRecord:
    id: str
    file: str  # file key
    cls: str
    method: str
    op: str | None = None
    dtypes: tuple[str, ...] = ()
    module: str | None = None
    device_variant: bool = False
    mode: str | None = None
    reason: str | None = None
    #: why its ID does not select exactly it as a config name (Note [Variant ID
    #: grammar]); None: it does (or a collection from before the check)
    id_problem: str | None = None


@dataclass
class FileCollection:
    key: str
    variants: list[VariantRecord] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class CollectSettings:
    device: str | None = None
    config: Path | None = None
    pytest_args: tuple[str, ...] = ()
    group_size: int = 64
    timeout: float = 3600.0


@dataclass
class GroupResult:
    files: dict[str, FileCollection]
    missing: list[SourceFile]  # no line at all after a crash
    crash: str | None  # why the child died
    expected: int | None  # items pytest reported collected
    seen: int  # variant lines read


def command(files: Sequence[SourceFile], out: Path, settings: CollectSettings) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        # nothing runs, so no exception goes unraised; its collections at the end
        # cost a second or more over the heap of a whole OpInfo file's items
        "-p",
        "no:unraisableexception",
        "--continue-on-collection-errors",
        "--ootest-variants",
        str(out),
    ]
    if settings.device:
        cmd += ["--ootest-device", settings.device]
    if settings.config is not None:
        cmd += ["--ootest-config", str(settings.config)]
    return [*cmd, *settings.pytest_args, *(str(f.path) for f in files)]


def collect(
    files: Sequence[SourceFile],
    settings: CollectSettings,
    jobs: int,
    advance: Callable[[int], None] = lambda n: None,
) -> tuple[dict[str, FileCollection], list[str]]:
    """Variants of ``files`` by file key, and warnings (count mismatches)."""
    out: dict[str, FileCollection] = {}
    warnings: list[str] = []
    groups = _groups(files, jobs, settings.group_size)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pending = [pool.submit(_run, g, settings) for g in groups]
        while pending:
            fut = pending.pop(0)
            res = fut.result()
            out.update(res.files)
            if res.expected is not None and res.expected != res.seen and not res.missing:
                warnings.append(
                    f"pytest collected {res.expected} items but the plugin listed {res.seen} "
                    f"variants (files {', '.join(sorted(res.files))[:200]})"
                )
            advance(len(res.files))
            if not res.missing:
                continue
            if len(res.missing) == 1:
                only = res.missing[0]
                out[only.key] = FileCollection(only.key, error=res.crash)
                advance(1)
                continue
            half = len(res.missing) // 2
            for part in (res.missing[:half], res.missing[half:]):
                pending.append(pool.submit(_run, part, settings))
    return out, warnings


def _groups(files: Sequence[SourceFile], jobs: int, size: int) -> list[list[SourceFile]]:
    by_root: dict[Path, list[SourceFile]] = {}
    for f in files:
        by_root.setdefault(f.root, []).append(f)
    groups: list[list[SourceFile]] = []
    for fs in by_root.values():
        n = max(1, min(size, -(-len(fs) // max(1, jobs))))
        groups += [fs[i : i + n] for i in range(0, len(fs), n)]
    return groups


def _run(files: Sequence[SourceFile], settings: CollectSettings) -> GroupResult:
    root = files[0].root
    with tempfile.TemporaryDirectory(prefix="ootest-index-") as tmp:
        out = Path(tmp) / "variants.jsonl"
        log_out, log_err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        # upstream's test files are imported there: no secret of ours (Note [Secrets in the
        # environment]), and nothing written into the tree
        env = {**without_secrets(), "PYTHONDONTWRITEBYTECODE": "1"}
        env["OOTEST_PARENT_PID"] = str(os.getpid())  # the plugin ties the child to this build
        with open(log_out, "wb") as so, open(log_err, "wb") as se:
            try:
                rc = subprocess.run(
                    command(files, out, settings),
                    cwd=root,
                    env=env,
                    stdout=so,
                    stderr=se,
                    stdin=subprocess.DEVNULL,
                    timeout=settings.timeout,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = -9
        stdout_tail, stderr_tail = _tail(log_out), _tail(log_err)
        if rc == _USAGE_EXIT:
            raise UserError(
                "collecting variants failed: pytest rejected the command line "
                f"(exit code 4):\n{(stderr_tail or stdout_tail).strip()}"
            )
        lines = _read_lines(out)
    result = _attribute(files, lines)
    seen = sum(len(c.variants) for c in result.values())
    missing = [f for f in files if f.key not in result]
    crash = None
    if rc not in _NORMAL_EXITS:
        crash = crash_message(rc, stderr_tail or stdout_tail, files)
    else:
        for f in missing:
            result[f.key] = FileCollection(f.key)
        missing = []
    return GroupResult(result, missing, crash, _expected(stdout_tail), seen)


def crash_message(rc: int, output: str, files: Sequence[SourceFile]) -> str:
    """``collection crashed (exit code -11, SIGSEGV)`` and the lines of the child's
    output that say where: the fatal error and the frames in the files collected."""
    head = f"collection crashed (exit code {rc}"
    if rc < 0:
        try:
            head += f", {signal.Signals(-rc).name}"
        except ValueError:
            pass
    lines = output.strip().splitlines()
    paths = [str(f.path) for f in files]
    where = [
        ln.strip() for ln in lines if "Fatal Python error" in ln or any(p in ln for p in paths)
    ]
    excerpt = where or lines[-10:]
    return head + ")" + (":\n" + "\n".join(excerpt)[-_TAIL:] if excerpt else "")


def _tail(path: Path) -> str:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - 32 * _TAIL))
        return fh.read().decode("utf-8", errors="replace")


def _expected(stdout_tail: str) -> int | None:
    found = _COLLECTED.findall(stdout_tail)
    if not found:
        return None
    last = found[-1]
    return int(last) if last else 0


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
    return out


def _attribute(
    files: Sequence[SourceFile], lines: list[dict[str, Any]]
) -> dict[str, FileCollection]:
    """Lines by file key: the plugin names files by its own file keys (the same as
    ours for trees in a checkout); map them back through the files we gave it."""
    plugin_keys = FileKeys.from_env()
    ours: dict[str, SourceFile] = {}
    by_name: dict[str, list[SourceFile]] = {}
    for sf in files:
        ours[plugin_keys.key(sf.path)] = sf
        ours.setdefault(sf.key, sf)
        by_name.setdefault(sf.path.name, []).append(sf)
    result: dict[str, FileCollection] = {}
    for rec in lines:
        pkey = str(rec.get("file") or "")
        f = ours.get(pkey)
        if f is None:
            same = by_name.get(pkey.rsplit("/", 1)[-1], [])
            f = same[0] if len(same) == 1 else None
        if f is None:
            continue
        fc = result.setdefault(f.key, FileCollection(f.key))
        kind = rec.get("kind")
        if kind == "collect_error":
            fc.error = str(rec.get("message") or "collection error")
        elif kind == "variant":
            fc.variants.append(_variant(rec, pkey, f.key))
    return result


def _variant(rec: dict[str, Any], plugin_key: str, key: str) -> VariantRecord:
    vid = str(rec["variant_id"])
    if vid.startswith(plugin_key + "::"):
        vid = key + vid[len(plugin_key) :]
    dtypes = rec.get("dtypes") or ()
    return VariantRecord(
        id=vid,
        file=key,
        cls=str(rec.get("cls") or ""),
        method=str(rec.get("method") or ""),
        op=rec.get("op"),
        dtypes=tuple(str(d) for d in dtypes),
        module=rec.get("module"),
        device_variant=bool(rec.get("device_variant")),
        mode=rec.get("mode"),
        reason=rec.get("reason"),
        id_problem=None if rec.get("id_exact", True) else str(rec.get("id_problem") or "inexact"),
    )
