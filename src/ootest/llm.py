"""Asking a model behind an OpenAI-compatible chat API (vLLM, Ollama, llama.cpp's
server, a hosted service): where it is, and one bounded request.

Shared by ``ootest index summarize`` (memory) and the model judge of ``ootest
select run``; each keeps its own cache. The HTTP client is passed in
(``httpx.Client``, with a transport in tests), so nothing here needs a network
to be tested. The API key is sent as a bearer token and never printed or
stored: errors name the URL without its user info, and every error and answer
passes through :func:`ootest.untrusted.redact` (the key itself and anything that
looks like a credential: a server may echo ``Bearer sk-...`` back) before a
caller stores it in a sidecar, a cache or an index (Note [Untrusted text]).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ootest.errors import UserError
from ootest.httpbody import AnswerTooLarge, decoded
from ootest.untrusted import for_terminal, redact

if TYPE_CHECKING:
    import httpx

#: The largest response body read by default; a longer one is an error, not a hang.
MAX_RESPONSE_BYTES = 1 << 20

# Note [One deadline per request]
# httpx's timeouts bound each network operation, not a request: a server that
# sends its status line and headers one byte a second never lets a read wait
# long enough to time out. So a request runs in a worker thread and the caller
# waits for it until one deadline (``LLMSettings.timeout`` from the start:
# connecting, sending, headers and body), then gives up with a ChatError. The
# request asks for ``Connection: close``, so each opens its own connection, whose
# socket the trace hook hands back: at the deadline it is shut down, which wakes
# the worker's blocked read and ends it (a daemon thread either way). Resolving
# the host's name is the one step not cut short.


class ChatError(UserError):
    """The endpoint could not be reached or did not answer with a chat completion."""


@dataclass(frozen=True)
class LLMSettings:
    endpoint: str  # base URL, e.g. http://localhost:8000/v1
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0

    @classmethod
    def resolve(
        cls,
        endpoint: str | None,
        model: str | None,
        api_key: str | None,
        env: Mapping[str, str] | None = None,
        *,
        what: str = "summaries need",
        flags: tuple[str, str] = ("--endpoint", "--model"),
        prefixes: tuple[str, ...] = ("OOTEST_LLM",),
        timeout: float = 60.0,
    ) -> LLMSettings:
        """Options first, then ``<PREFIX>_ENDPOINT`` for each prefix in order and
        ``OPENAI_BASE_URL``; ``<PREFIX>_MODEL``; ``<PREFIX>_API_KEY`` and
        ``OPENAI_API_KEY``."""
        e = os.environ if env is None else env

        def first(suffix: str, *more: str) -> str | None:
            names = [f"{p}_{suffix}" for p in prefixes] + list(more)
            return next((e[n] for n in names if e.get(n)), None)

        url = endpoint or first("ENDPOINT", "OPENAI_BASE_URL")
        name = model or first("MODEL")
        key = api_key or first("API_KEY", "OPENAI_API_KEY")
        if not url:
            raise UserError(
                f"{what} an OpenAI-compatible endpoint: pass {flags[0]} URL or set "
                f"{' or '.join(p + '_ENDPOINT' for p in prefixes)} (e.g. http://localhost:8000/v1)"
            )
        if not name:
            raise UserError(
                f"{what} a model name: pass {flags[1]} NAME or set "
                + " or ".join(p + "_MODEL" for p in prefixes)
            )
        return cls(url.rstrip("/"), name, key or None, timeout)


def public_url(url: str) -> str:
    """``url`` without user info (``http://user:secret@host`` -> ``http://host``)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def chat(
    http: httpx.Client,
    settings: LLMSettings,
    system: str,
    prompt: str,
    *,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> str:
    """The model's answer to ``prompt`` at temperature 0 (raises :class:`ChatError`).

    One deadline covers the whole request (Note [One deadline per request]): the
    body must stay under ``max_bytes``; a server that trickles or floods is cut
    off, not waited for."""
    import httpx

    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    headers["Connection"] = "close"  # a fresh connection: its socket is ours to cut
    headers["Accept-Encoding"] = "identity"  # Note [Bounded answers]
    body = {
        "model": settings.model,
        "temperature": 0,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
    }
    url = f"{settings.endpoint}/chat/completions"
    shown = public_url(url)
    late = f"{shown}: no complete response within {settings.timeout:g} seconds"
    deadline = time.monotonic() + settings.timeout
    sockets: list[socket.socket] = []
    got: dict[str, Any] = {}

    def trace(event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            sock = info["return_value"].get_extra_info("socket")
            if isinstance(sock, socket.socket):
                sockets.append(sock)

    def ask() -> None:
        try:
            with http.stream(
                "POST",
                url,
                json=body,
                headers=headers,
                timeout=settings.timeout,
                extensions={"trace": trace},
            ) as resp:
                got["headers"] = True
                data = bytearray()
                # the raw bytes, decoded here: what httpx decodes is unbounded
                # (Note [Bounded answers])
                encoding = resp.headers.get("Content-Encoding")
                raw: Iterable[bytes] = resp.iter_raw()
                if resp.is_stream_consumed:  # an answer made in memory (a mock transport's)
                    raw, encoding = [resp.content], None
                try:
                    for chunk in decoded(raw, encoding, max_bytes, shown):
                        data += chunk
                        if time.monotonic() > deadline:
                            raise ChatError(late)
                except AnswerTooLarge as e:
                    raise ChatError(str(e)) from None
                got["answer"] = (resp.status_code, bytes(data))
        except BaseException as e:  # handed to the caller's thread
            got["error"] = e

    worker = threading.Thread(target=ask, name="ootest-llm-request", daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0.0))
    if worker.is_alive():
        for sock in sockets:  # wake the worker's blocked read; it ends on its own
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        if got.get("headers"):
            raise ChatError(late)
        raise ChatError(f"{shown}: request failed: no response within {settings.timeout:g} seconds")
    error = got.get("error")
    if isinstance(error, httpx.TimeoutException):
        raise ChatError(
            f"{shown}: request failed: no response within {settings.timeout:g} seconds"
        ) from None
    if isinstance(error, httpx.HTTPError):
        raise ChatError(
            f"{shown}: request failed: {type(error).__name__}: {_safe(str(error), settings, 300)}"
        ) from None
    if error is not None:
        raise error
    status, raw = got["answer"]
    text = raw.decode("utf-8", errors="replace")
    if status != 200:
        raise ChatError(f"{shown}: HTTP {status}: {_safe(text, settings, 300)}")
    try:
        content = str(json.loads(text)["choices"][0]["message"]["content"]).strip()
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        raise ChatError(
            f"{shown}: expected an OpenAI chat completion, found "
            f"{json.dumps(_safe(text, settings, 200))}"
        ) from None
    return redact(content, (settings.api_key,))


def _safe(text: str, settings: LLMSettings, limit: int) -> str:
    """A server's text fit for an error message: credentials redacted (the key we
    sent included, in the forms a server may echo it), URLs without user info, on
    one line, then cut to ``limit`` characters: cut first, a key straddling the
    cut would lose the part that makes it recognisable (Note [Untrusted text])."""
    plain = " ".join(public_url(w) if "://" in w else w for w in text.split())
    return for_terminal(redact(plain, (settings.api_key,))[:limit])
