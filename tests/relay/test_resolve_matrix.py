"""Landed-PR resolution in a real local git repository, nightly parsing, the matrix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ootest.errors import UserError
from ootest.relay import resolve as rv
from ootest.relay.matrix import combination_matrix
from tests.conftest import ootest


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "pytorch"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {}
    for msg, key in [
        ("Base commit", "base"),
        (
            "Fix foo (#1234)\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/1234",
            "pr1234",
        ),
        (
            "Fix bar (#12345)\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/12345"
            "\nApproved by: someone",
            "pr12345",
        ),
        (
            "Later commit that landed after (#99)\n\nPull Request resolved: "
            "https://github.com/pytorch/pytorch/pull/99",
            "later",
        ),
    ]:
        git(repo, "commit", "-q", "--allow-empty", "-m", msg)
        shas[key] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def test_landed_pr_resolves_to_its_commit_not_branch_head(upstream) -> None:  # type: ignore[no-untyped-def]
    repo, shas = upstream
    found = rv.resolve_landed(12345, "main", repo=str(repo))
    assert found.sha == shas["pr12345"] != git(repo, "rev-parse", "main")
    # PR 1234 is a prefix of 12345's URL: must not be confused.
    assert rv.resolve_landed(1234, "main", repo=str(repo)).sha == shas["pr1234"]


def test_unknown_pr_is_an_error_unless_fallback(upstream) -> None:  # type: ignore[no-untyped-def]
    repo, shas = upstream
    with pytest.raises(UserError, match="no commit on main carries"):
        rv.resolve_landed(777, "main", repo=str(repo))
    fb = rv.resolve_landed(777, "main", repo=str(repo), fallback="head")
    assert fb.sha == shas["later"] and fb.how.startswith("FALLBACK")


def test_landed_via_api_with_mock_transport() -> None:
    target = "e" * 40

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["sha"] == "main"
        page = int(request.url.params["page"])
        if page == 1:
            return httpx.Response(200, json=[{"sha": "f" * 40, "commit": {"message": "x"}}])
        return httpx.Response(
            200,
            json=[
                {
                    "sha": target,
                    "commit": {
                        "message": "y\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/5"
                    },
                }
            ],
        )

    client = httpx.Client(transport=httpx.MockTransport(handler))
    assert rv.resolve_landed(5, "main", client=client).sha == target


def test_nightly_source() -> None:
    sha = "1234567890abcdef1234567890abcdef12345678"
    assert rv.nightly_source(f"2026-12-01 nightly release ({sha})") == sha
    with pytest.raises(UserError):
        rv.nightly_source("no sha here")


def test_cli_resolve_landed(upstream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo, shas = upstream
    payload = {
        "event_type": "pull_request",
        "delivery_id": "x1",
        "payload": {
            "action": "closed",
            "repository": {"full_name": "pytorch/pytorch"},
            "pull_request": {
                "number": 12345,
                "merged": False,
                "labels": [{"name": "Merged"}],
                "base": {"ref": "main"},
                "head": {"sha": "c" * 40},
            },
        },
    }
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps(payload))
    r = ootest("relay", "resolve", str(ev), "--repo", str(repo))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(shas["pr12345"])


def test_combination_matrix() -> None:
    m = combination_matrix(
        "a" * 40,
        ["suites/view_ops.yaml", "suites/ufuncs.yaml"],
        shards=2,
        backend_ref="main",
        compat=["v1.2"],
    )
    legs = m["include"]
    assert len(legs) == 2 * 2 * 2
    assert len({leg["job_name"] for leg in legs}) == len(legs)
    assert [leg["leg"] for leg in legs] == list(range(len(legs)))
    assert sum(leg["primary"] for leg in legs) == 4
    assert {leg["shard"] for leg in legs} == {"1/2", "2/2"}
    with pytest.raises(UserError, match="40-character"):
        combination_matrix("abc", ["a.yaml"])


def test_cli_matrix_is_json() -> None:
    r = ootest("relay", "matrix", "--sha", "b" * 40, "--suite", "x.yaml", "--shards", "3")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["include"]) == 3
    assert sys.executable
