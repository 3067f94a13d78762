"""Issue 28 items 4, 6 and 7: the judge's key never leaves, a model never skips a
test on its own say-so, and a request has one deadline. The hostile inputs are
gathered here; each test prints how many it tried (``-s`` shows it)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ootest.errors import UserError
from ootest.llm import LLMSettings
from ootest.memory import summarize_tests
from tests.select.test_judge import (
    KEY,
    LoopbackLLM,
    Reply,
    completion,
    judged,
    memory,  # noqa: F401  (a fixture)
    select,
    sidecar,
    work,  # noqa: F401  (a fixture)
)

# ------------------------------------------------------------------ item 4
#: answers of a server that leaks credentials: the key we sent, others like it
LEAKS: list[Reply] = [
    (401, f'{{"error": "invalid token: Bearer {KEY}"}}'.encode()),
    (403, f"Authorization: Bearer {KEY} is not allowed".encode()),
    (500, b"upstream rejected api_key=sk-proj-Zq8uT1d0ssEcret and ghs_SUPERSECRET12345"),
    (502, b"proxy http://admin:hunter2pass@10.0.0.1/ refused; DB_PASSWORD=hunter2pass"),
    completion(f"I cannot help. Your key {KEY} works fine."),  # garbage, cached
    completion(
        json.dumps(
            {
                "proposals": [
                    {
                        "variant_id": "test/test_alpha.py::TestAlpha::test_gate",
                        "bucket": "xfail",
                        "citations": [f"decorator:{KEY}"],
                        "why": f"Bearer {KEY} says so; password: hunter2pass",
                    }
                ]
            }
        )
    ),
    (200, json.dumps({"detail": f"x-api-key: {KEY}"}).encode()),  # not a completion
]
SECRETS = (KEY, "sk-proj-Zq8uT1d0ssEcret", "ghs_SUPERSECRET12345", "hunter2pass")


@pytest.mark.parametrize("reply", LEAKS, ids=[f"leak{i}" for i in range(len(LEAKS))])
def test_no_credential_reaches_the_sidecar_the_cache_or_the_terminal(
    work: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    reply: Reply,
) -> None:
    server = LoopbackLLM(lambda body: reply)
    try:
        printed = select(capsys, *judged(server.url))
    finally:
        server.close()
    assert server.requests and server.requests[0]["auth"] == f"Bearer {KEY}"
    files = [p for p in work.rglob("*") if p.is_file() and p.name != "key.txt"]
    assert any(p.name.endswith(".evidence.jsonl") for p in files)
    for path in files:
        text = path.read_text(errors="replace")
        for s in SECRETS:
            assert s not in text, (path, s)
    for s in SECRETS:
        assert s not in printed
    rows = sidecar(work)
    judged_rows = [r["judge"] for r in rows.values() if "judge" in r]
    assert any("[redacted]" in json.dumps(j) for j in judged_rows), judged_rows
    print(f"leaking answer {LEAKS.index(reply) + 1} of {len(LEAKS)}: nothing leaked")


def test_index_summarize_stores_no_credential(tmp_path: Path) -> None:
    """The memory's summaries share the client: a summary echoing the key is
    stored redacted, and an error quoting it is one redacted line."""
    from ootest.memory import BuildOptions, build_index
    from tests.memory.trees import write_plain

    db = tmp_path / "memory.db"
    build_index(BuildOptions(roots=(write_plain(tmp_path),), db=db, torch_db=False, variants=False))
    settings = LLMSettings("http://llm.test/v1", "tiny", "sk-summary-0123456789")

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"Checks things. (sent with {request.headers['authorization']})"
        return httpx.Response(200, json={"choices": [{"message": {"content": said}}]})

    summarize_tests(db, settings, client=httpx.Client(transport=httpx.MockTransport(echo)))
    assert b"sk-summary-0123456789" not in db.read_bytes()
    assert b"Bearer [redacted]" in db.read_bytes()

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, text=f"bad {request.headers['authorization']}\n::error::x")

    fresh = tmp_path / "fresh.db"
    build_index(BuildOptions(roots=(tmp_path / "tests",), db=fresh, torch_db=False, variants=False))
    with pytest.raises(UserError) as e:
        summarize_tests(fresh, settings, client=httpx.Client(transport=httpx.MockTransport(refuse)))
    assert str(e.value) == (
        "http://llm.test/v1/chat/completions: HTTP 401: bad Bearer [redacted] ::error::x"
    )
