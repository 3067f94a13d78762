"""Resolve the exact PyTorch commit a gated dispatch should build.

- open PR: its head SHA (already in the gate result);
- landed PR: the commit on the base branch whose message carries
  ``Pull Request resolved: https://github.com/pytorch/pytorch/pull/<N>`` — not the
  branch head, which may already contain later commits;
- push: ``after``;
- nightly: the source SHA named in the nightly branch's commit message.

When a landed PR's commit cannot be found, the default is an error; the explicit
fallback ``--fallback head`` builds the branch head instead and says so.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from ootest import naming as names
from ootest.errors import UserError

API = "https://api.github.com"
_NIGHTLY = re.compile(rf"nightly release \(({names.SHA_PATTERN})\)")


class ResolveError(UserError):
    pass


@dataclass
class Resolved:
    sha: str
    how: str  # human-readable provenance


def _resolved_line(pr_number: int) -> re.Pattern[str]:
    return re.compile(
        rf"^Pull Request resolved: https://github\.com/pytorch/pytorch/pull/{pr_number}\s*$",
        re.MULTILINE,
    )


def _first_match(commits: Iterable[tuple[str, str]], pr_number: int) -> str | None:
    line = _resolved_line(pr_number)
    for sha, message in commits:
        if line.search(message) and names.is_sha(sha):
            return sha
    return None


def landed_from_git(repo: str, base: str, pr_number: int, *, max_count: int = 5000) -> str | None:
    """Newest commit on ``base`` in a local clone that resolved PR ``pr_number``."""
    ref = base
    for candidate in (f"origin/{base}", base):
        ok = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--verify", "-q", candidate],
            capture_output=True,
            text=True,
        )
        if ok.returncode == 0:
            ref = candidate
            break
    else:
        raise ResolveError(f"{repo}: no branch {base!r} (nor origin/{base}); fetch it first")
    out = subprocess.run(
        [
            "git",
            "-C",
            repo,
            "log",
            ref,
            f"--max-count={max_count}",
            "--format=%H%x00%B%x1e",
            f"--grep=Pull Request resolved: https://github.com/pytorch/pytorch/pull/{pr_number}",
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise ResolveError(f"git log in {repo} failed: {out.stderr.strip()}")
    commits = []
    for rec in out.stdout.split("\x1e"):
        rec = rec.strip("\n")
        if "\x00" in rec:
            sha, msg = rec.split("\x00", 1)
            commits.append((sha.strip(), msg))
    return _first_match(commits, pr_number)


def landed_from_api(
    client: httpx.Client, base: str, pr_number: int, *, pages: int = 3, token: str | None = None
) -> str | None:
    """Search the newest ``pages`` x 100 commits of ``base`` through the REST API."""
    headers = {"Accept": "application/vnd.github+json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    for page in range(1, pages + 1):
        r = client.get(
            f"{API}/repos/pytorch/pytorch/commits",
            params={"sha": base, "per_page": 100, "page": page},
            headers=headers,
        )
        if r.status_code != 200:
            raise ResolveError(f"GitHub API: listing commits of {base} failed ({r.status_code})")
        items = r.json()
        if not isinstance(items, list) or not items:
            return None
        found = _first_match(
            ((str(c.get("sha", "")), str(c.get("commit", {}).get("message", ""))) for c in items),
            pr_number,
        )
        if found:
            return found
    return None


def branch_head(repo: str, base: str) -> str:
    for candidate in (f"origin/{base}", base):
        r = subprocess.run(
            ["git", "-C", repo, "rev-parse", candidate], capture_output=True, text=True
        )
        if r.returncode == 0 and names.is_sha(r.stdout.strip()):
            return r.stdout.strip()
    raise ResolveError(f"{repo}: cannot read the head of {base!r}")


def nightly_source(message: str) -> str:
    m = _NIGHTLY.search(message)
    if not m:
        raise ResolveError(
            "nightly commit message does not name its source as 'nightly release (<40-hex sha>)'"
        )
    return m.group(1)


def resolve_landed(
    pr_number: int,
    base: str,
    *,
    repo: str | None = None,
    client: httpx.Client | None = None,
    token: str | None = None,
    fallback: str = "fail",
) -> Resolved:
    sha = None
    if repo:
        sha = landed_from_git(repo, base, pr_number)
    elif client is not None:
        sha = landed_from_api(client, base, pr_number, token=token)
    else:
        raise ResolveError("resolving a landed PR needs --repo DIR (a clone) or --api")
    if sha:
        return Resolved(sha, f"commit on {base} that resolved PR #{pr_number}")
    if fallback == "head" and repo:
        return Resolved(
            branch_head(repo, base),
            f"FALLBACK: head of {base}; no commit resolved PR #{pr_number} "
            "(it may contain later commits)",
        )
    raise ResolveError(
        f"no commit on {base} carries 'Pull Request resolved: "
        f"https://github.com/pytorch/pytorch/pull/{pr_number}'; the landing may not be "
        "fetched yet (fetch and retry), or pass --fallback head to build the branch head"
    )
