"""The combination matrix: backend refs x resolved core SHA x suites x shards.

The primary combination is the latest backend against the dispatch's core SHA;
older backend releases (``compat``) reveal forward/backward compatibility. Each
leg is a job of its own with a unique ``job_name`` (the relay keys its state
machine on it) and ``leg``, its position in the matrix: the generated workflow
names each leg's artifact and cache by it, so a later job of the same leg (the
report) finds what the test job left.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ootest.errors import UserError

_SHA = re.compile(r"[0-9a-f]{40}\Z")
_REF = re.compile(r"[A-Za-z0-9._/-]{1,100}\Z")


def plan(
    sha: str,
    suites: list[str],
    *,
    shards: int = 1,
    backend_ref: str = "main",
    compat: list[str] | None = None,
) -> dict[str, Any]:
    if not _SHA.match(sha):
        raise UserError(f"--sha: expected a 40-character lowercase hex SHA, found {sha!r}")
    if shards < 1:
        raise UserError(f"--shards: expected a positive number, found {shards}")
    refs = [backend_ref, *(compat or [])]
    for ref in refs:
        if not _REF.match(ref):
            raise UserError(f"backend ref {ref!r}: expected characters [A-Za-z0-9._/-]")
    if len(set(refs)) != len(refs):
        raise UserError("backend refs must be distinct")
    if not suites:
        raise UserError("--suite: name at least one suite config")
    stems = [Path(s).stem for s in suites]
    if len(set(stems)) != len(stems):
        raise UserError("suite configs must have distinct file names (they name the jobs)")
    include: list[dict[str, Any]] = []
    for ref in refs:
        primary = ref == backend_ref
        for suite, stem in zip(suites, stems, strict=True):
            for i in range(1, shards + 1):
                name = f"{stem} | backend {ref} | torch {sha[:12]}"
                if shards > 1:
                    name += f" | shard {i}/{shards}"
                include.append(
                    {
                        "leg": len(include),
                        "job_name": name,
                        "backend_ref": ref,
                        "primary": primary,
                        "torch_sha": sha,
                        "suite": suite,
                        "shard": f"{i}/{shards}",
                    }
                )
    return {"include": include}
