"""The combination matrix: backend refs x resolved core SHA x suites x shards.

The primary combination is the latest backend against the dispatch's core SHA;
older backend releases (``compat``) reveal forward/backward compatibility. Each
leg is a job of its own with a unique ``job_name`` (the relay keys its state
machine on it) and ``leg``, its position in the matrix: the generated workflow
names each leg's artifact and cache by it, so a later job of the same leg (the
report) finds what the test job left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ootest import naming as names
from ootest.errors import UserError
from ootest.relay.limits import describe

__all__ = [
    "MAX_JOBS",
    "check_shards",
    "combination_matrix",
]

MAX_JOBS = 256  # GitHub Actions runs at most 256 jobs from one matrix


def check_shards(shards: int) -> None:
    """``--shards`` as :func:`combination_matrix` takes it for one suite of one
    backend ref (what ``ootest init`` writes): at least 1, and that many legs at
    most :data:`MAX_JOBS`, so a workflow init wrote never fails on it."""
    if not 1 <= shards <= MAX_JOBS:
        raise UserError(
            f"--shards: expected a number from 1 to {MAX_JOBS} (GitHub runs at most {MAX_JOBS} "
            f"jobs of one matrix), found {shards}; pass e.g. 1"
        )


def combination_matrix(
    sha: str,
    suites: list[str],
    *,
    shards: int = 1,
    backend_ref: str = "main",
    compat: list[str] | None = None,
) -> dict[str, Any]:
    if not names.is_sha(sha):
        raise UserError(
            f"--sha: expected {names.SHA_RULE}, found {describe(sha)}; pass the resolved "
            "PyTorch commit (the sha output of `ootest relay resolve`)"
        )
    if shards < 1:
        raise UserError(f"--shards: expected a positive number, found {shards}; pass e.g. 1")
    refs = [backend_ref, *(compat or [])]
    for ref in refs:
        why = names.ref_problem(ref)
        if why or not names.is_safe_ref(ref):
            raise UserError(
                f"backend ref {describe(ref)}: expected {names.SAFE_REF_RULE} and "
                f"{names.REF_RULE}{f', found one with {why}' if why else ''}; pass a branch "
                "or tag of the backend repository (--backend-ref, --compat)"
            )
    if len(set(refs)) != len(refs):
        raise UserError("backend refs must be distinct")
    if not suites:
        raise UserError("--suite: name at least one suite config")
    stems = [Path(s).stem for s in suites]
    if len(set(stems)) != len(stems):
        raise UserError("suite configs must have distinct file names (they name the jobs)")
    legs = len(refs) * len(suites) * shards
    if legs > MAX_JOBS:
        raise UserError(
            f"--shards/--suite/--compat: expected at most {MAX_JOBS} matrix jobs (GitHub's cap "
            f"per workflow run), found {len(refs)} refs x {len(suites)} suites x {shards} "
            f"shards = {legs:,}; use fewer shards, suites or compat refs"
        )
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
