"""Issue 28 items 4, 6 and 7: the judge's key never leaves, a model never skips a
test on its own say-so, and a request has one deadline. The hostile inputs are
gathered here; each test prints how many it tried (``-s`` shows it)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from ootest.errors import UserError
from ootest.llm import ChatError, LLMSettings, chat
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


# ------------------------------------------------------------------ item 7
class Trickle:
    """A raw HTTP server on 127.0.0.1 that sends ``head`` one byte every ``gap``
    seconds, or when there is a ``body`` the head at once and the body so; with
    neither it says nothing. For at most ``limit`` seconds: a failing test ends."""

    def __init__(self, head: bytes, body: bytes = b"", gap: float = 0.25, limit: float = 12.0):
        self.head, self.body, self.gap, self.limit = head, body, gap, limit
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(limit)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._one, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _one(self, conn: socket.socket) -> None:
        end = time.monotonic() + self.limit
        try:
            conn.settimeout(self.limit)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            if not self.head:  # says nothing until it gives up
                time.sleep(self.limit)
            if self.body:  # the headers at once, the body byte by byte
                conn.sendall(self.head)
            for b in self.body or self.head:
                if time.monotonic() > end:
                    break
                conn.sendall(bytes([b]))
                time.sleep(self.gap)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


OK_BODY = json.dumps({"choices": [{"message": {"content": "{}"}}]}).encode()
#: (what the server trickles, the error's end): the status line and headers, the
#: body, and a server that answers nothing at all
TRICKLES = [
    (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Padding: "
        + b"a" * 200
        + b"\r\n\r\n",
        b"",
        "request failed: no response within 1 seconds",
    ),
    (
        b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(OK_BODY)).encode() + b"\r\n\r\n",
        b" " * 40 + OK_BODY,
        "no complete response within 1 seconds",
    ),
    (b"", b"", "request failed: no response within 1 seconds"),
]


@pytest.mark.parametrize(("head", "body", "said"), TRICKLES, ids=["headers", "body", "silent"])
def test_one_deadline_covers_headers_and_body(head: bytes, body: bytes, said: str) -> None:
    server = Trickle(head, body, gap=0.05)
    settings = LLMSettings(server.url, "m", "sk-trickle-123456", timeout=1.0)
    try:
        start = time.monotonic()
        with httpx.Client() as http, pytest.raises(ChatError) as e:
            chat(http, settings, "system", "prompt")
        took = time.monotonic() - start
    finally:
        server.close()
    assert took < 2.0, took
    assert str(e.value) == f"{server.url}/chat/completions: {said}"
    print(f"trickle {TRICKLES.index((head, body, said)) + 1} of {len(TRICKLES)}: {took:.2f} s")


def test_the_judge_timeout_holds_against_a_server_trickling_its_headers(
    work: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = Trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"b" * 400 + b"\r\n\r\n", gap=0.02)
    try:
        start = time.monotonic()
        printed = select(capsys, *judged(server.url, "--judge-timeout", "1"))
        took = time.monotonic() - start
    finally:
        server.close()
    # one request for the 10 variants, cut off after 1 s (the headers take 8 s)
    assert took < 5.0, took
    assert "1 requests (0 from the cache, 1 failed); 0 accepted" in printed
    rows = sidecar(work)
    assert {r["judge"]["rejected"] for r in rows.values()} == {
        f"no answer: {server.url}/chat/completions: request failed: no response within 1 seconds"
    }
