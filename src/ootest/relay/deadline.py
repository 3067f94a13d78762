"""An overall deadline for each HTTP attempt, not only for each read.

Note [A deadline per attempt]
httpx's timeouts bound each read, connect and write: a relay that sends its
answer one byte every 9 s keeps a 10 s read timeout satisfied forever (one
attempt of ``relay report`` took 256 s). :func:`client` gives an ``httpx.Client``
whose transport starts a clock at each request and hands every connect, read and
write of that request (its body included) only the time left; when none is left
the attempt ends as a timeout (``httpx.ReadTimeout``...), which the caller
retries or reports as it does any timeout. A request with a bounded number of
attempts then takes bounded time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

__all__ = ["client"]


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def start(self) -> None:
        self.ends = time.monotonic() + self.seconds

    def left(self, timeout: float | None, exc: type[Exception]) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            raise exc(f"the attempt's deadline of {self.seconds:g} s passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, clock: _Clock) -> None:
        self._inner, self._clock = inner, clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._clock.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._clock.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left), self._clock)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend, clock: _Clock) -> None:
        self._inner, self._clock = inner, clock

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        inner = self._inner.connect_tcp(host, port, left, local_address, socket_options)
        return _Stream(inner, self._clock)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options), self._clock)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._clock = _Clock(seconds)
        pool = self._pool
        pool._network_backend = _Backend(pool._network_backend, self._clock)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._clock.start()  # the response's body is read on this clock too
        return super().handle_request(request)


def client(attempt: float, *, timeout: float = 10.0, max_bytes: int | None = None) -> httpx.Client:
    """An ``httpx.Client`` whose every request (with its answer's body) ends within
    ``attempt`` seconds, each read within ``timeout`` (Note [A deadline per attempt]);
    with ``max_bytes``, its answers hold at most that many bytes once decoded (Note
    [Bounded answers])."""
    transport: httpx.BaseTransport = _Transport(attempt)
    if max_bytes is not None:
        from ootest.httpbody import bounded_transport

        transport = bounded_transport(transport, max_bytes)
    return httpx.Client(timeout=httpx.Timeout(timeout), transport=transport)
