"""A local CRCR relay + HUD emulator on loopback, for rehearsals and tests.

- ``GET  /.well-known/jwks.json``  the JWKS of a key generated at start-up
- ``POST /token``                  issues a test OIDC-style token (RS256, relay audience)
- ``POST /github/callback``        verifies the bearer token, enforces the state machine
  (none -> in_progress -> completed per (delivery, repo, run_id, run_attempt,
  job_name); duplicates and out-of-order are 400), the per-repo rate limit (429);
  an optional ``workflow.triage`` verdict is checked (malformed: 400), kept and shown
- ``GET  /jobs``                   recorded jobs as JSON; ``GET /`` the same as an HTML page
- ``POST /_faults``                test hook: answer the next N callbacks with a status
  (e.g. 500, 429) or accept them but answer after a delay (a client timeout)

Needs the ``relay-emulator`` extra (PyJWT with cryptography).
"""

from __future__ import annotations

import html
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ootest.errors import UserError
from ootest.relay import limits
from ootest.relay.limits import MAX_DEPTH
from ootest.relay.report import AUDIENCE
from ootest.relay.triage import check as check_verdict

ISSUER = "https://ootest.invalid/relay-emulator"
MAX_BODY = 1_000_000  # bytes of a request body
MAX_FAULTS = 1_000  # faults one /_faults call may queue
_FAULT_RULE = (
    f"expected count 1-{MAX_FAULTS:,}, status an HTTP status (0: none), delay 0-60 seconds"
)
_KEY_RULE = "delivery_id, run_id, run_attempt, job_name, status: expected strings or numbers"


def _jwt() -> Any:
    try:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        raise UserError(
            "the relay emulator needs PyJWT and cryptography: pip install 'ootest[relay-emulator]'"
        ) from None
    return jwt, rsa


@dataclass
class Fault:
    status: int = 0  # answer with this status without recording
    delay: float = 0.0  # record, then answer after this many seconds
    count: int = 1


def _faults(body: dict[str, Any]) -> list[Fault] | None:
    """The faults a ``/_faults`` body asks for, or None when it is malformed."""
    count, status, delay = body.get("count", 1), body.get("status", 0), body.get("delay", 0)
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (count, status))
    if not ints or not 1 <= count <= MAX_FAULTS:
        return None
    if not isinstance(delay, (int, float)) or not 0 <= delay <= 60:
        return None
    return [Fault(status, float(delay)) for _ in range(count)]


@dataclass
class RelayState:
    rate_limit: int = 100  # callbacks per minute per repository
    jobs: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    calls: dict[str, deque[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Emulator:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, rate_limit: int = 100) -> None:
        jwt, rsa = _jwt()
        self._jwt = jwt
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        pub.update({"kid": "ootest-emulator", "alg": "RS256", "use": "sig"})
        self.jwks = {"keys": [pub]}
        self.state = RelayState(rate_limit=rate_limit)
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                return None

            def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    raise ValueError("expected a Content-Length number") from None
                if not 0 <= n <= MAX_BODY:
                    raise ValueError(f"expected at most {MAX_BODY:,} bytes, found {n:,}")
                raw = self.rfile.read(n) or b"{}"
                body = limits.loads(raw, max_bytes=MAX_BODY, max_depth=MAX_DEPTH)
                if not isinstance(body, dict):
                    raise ValueError(f"expected a JSON object, found {limits.describe(body)}")
                return body

            def do_GET(self) -> None:
                if self.path == "/.well-known/jwks.json":
                    self._send(200, emulator.jwks)
                elif self.path == "/jobs":
                    self._send(200, emulator.jobs())
                elif self.path == "/":
                    self._send(200, emulator.page(), "text/html; charset=utf-8")
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                try:
                    body = self._body()
                except ValueError as e:
                    self._send(400, {"error": f"invalid JSON body: {e}"})
                    return
                if self.path == "/token":
                    repo = str(body.get("repository", "example/backend"))
                    self._send(200, {"value": emulator.issue_token(repo)})
                elif self.path == "/_faults":
                    faults = _faults(body)
                    if faults is None:
                        self._send(400, {"error": _FAULT_RULE})
                        return
                    emulator.state.faults.extend(faults)
                    self._send(200, {"queued": len(emulator.state.faults)})
                elif self.path == "/github/callback":
                    code, answer, delay = emulator.callback(
                        self.headers.get("Authorization", ""), body
                    )
                    if delay:
                        time.sleep(delay)
                    self._send(code, answer)
                else:
                    self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{name}:{port}"

    def start(self) -> Emulator:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def issue_token(self, repository: str, *, ttl: int = 600, audience: str = AUDIENCE) -> str:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "iat": now,
            "exp": now + ttl,
            "repository": repository,
            "sub": f"repo:{repository}:ref:refs/heads/main",
        }
        token: str = self._jwt.encode(
            claims, self.key, algorithm="RS256", headers={"kid": "ootest-emulator"}
        )
        return token

    def _verify(self, auth: str) -> dict[str, Any] | None:
        if not auth.lower().startswith("bearer "):
            return None
        try:
            claims: dict[str, Any] = self._jwt.decode(
                auth[7:],
                self.key.public_key(),
                algorithms=["RS256"],
                audience=AUDIENCE,
                issuer=ISSUER,
            )
        except self._jwt.PyJWTError:
            return None
        return claims

    def callback(self, auth: str, body: Any) -> tuple[int, dict[str, Any], float]:
        st = self.state
        claims = self._verify(auth)
        if claims is None:
            return 401, {"error": "missing or invalid bearer token"}, 0.0
        repo = str(claims.get("repository", ""))
        with st.lock:
            fault = st.faults.popleft() if st.faults else None
            if fault and fault.status:
                return fault.status, {"error": f"injected {fault.status}"}, 0.0
            window = st.calls.setdefault(repo, deque())
            now = time.monotonic()
            while window and now - window[0] > 60:
                window.popleft()
            if len(window) >= st.rate_limit:
                return 429, {"error": "rate limit"}, 0.0
            window.append(now)
            wf = body.get("workflow") if isinstance(body, dict) else None
            if not isinstance(wf, dict) or wf.get("schema_version") != "1":
                return 400, {"error": "workflow.schema_version must be '1'"}, 0.0
            missing = [
                k
                for k in ("status", "run_id", "run_attempt", "job_name", "name", "url")
                if k not in wf
            ]
            if missing or "delivery_id" not in body:
                return 400, {"error": f"missing fields: {missing or ['delivery_id']}"}, 0.0
            key = (body["delivery_id"], repo, wf["run_id"], wf["run_attempt"], wf["job_name"])
            if not all(isinstance(k, (str, int)) for k in key) or not isinstance(wf["status"], str):
                return 400, {"error": _KEY_RULE}, 0.0
            current = st.jobs.get(key, {}).get("status", "none")
            allowed = {"none": "in_progress", "in_progress": "completed"}
            if allowed.get(current) != wf["status"]:
                st.log.append({"key": list(key), "status": wf["status"], "accepted": False})
                return 400, {"error": f"invalid transition {current} -> {wf['status']}"}, 0.0
            if wf["status"] == "completed" and not wf.get("conclusion"):
                return 400, {"error": "completed needs a conclusion"}, 0.0
            if "triage" in wf:  # optional (pytorch/test-infra#8673); checked when sent
                problems = check_verdict(wf["triage"])
                if problems:
                    return 400, {"error": f"workflow.triage: {'; '.join(problems)}"}, 0.0
            st.jobs[key] = {
                "delivery_id": body["delivery_id"],
                "repository": repo,
                "event_type": body.get("event_type"),
                **wf,
            }
            st.log.append({"key": list(key), "status": wf["status"], "accepted": True})
            return 200, {"ok": True}, fault.delay if fault else 0.0

    def jobs(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return [dict(v) for v in self.state.jobs.values()]

    def accepted(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return [e for e in self.state.log if e["accepted"]]

    def page(self) -> str:
        rows = "".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(j.get(k, '')))}</td>"
                for k in (
                    "delivery_id",
                    "repository",
                    "job_name",
                    "status",
                    "conclusion",
                    "test_results",
                )
            )
            + f"<td>{_triage_cell(j.get('triage'))}</td>"
            + "</tr>"
            for j in self.jobs()
        )
        return (
            "<!doctype html><meta charset=utf-8><title>ootest relay emulator</title>"
            "<h1>Jobs recorded by the relay emulator</h1><table border=1><tr><th>delivery"
            "</th><th>repository</th><th>job</th><th>status</th><th>conclusion</th>"
            f"<th>test results</th><th>triage</th></tr>{rows}</table>"
        )


def _triage_cell(verdict: Any) -> str:
    """A triage verdict on the jobs page: category, confidence, summary, evidence."""
    if not isinstance(verdict, dict):
        return ""
    head = html.escape(f"{verdict.get('category')} ({verdict.get('confidence')})")
    items = "".join(
        "<li>"
        + html.escape(f"{e.get('category', '')} {e.get('test')}: {e.get('excerpt')}")
        + "</li>"
        for e in verdict.get("evidence") or []
        if isinstance(e, dict)
    )
    return f"<b>{head}</b><br>{html.escape(str(verdict.get('summary')))}<ul>{items}</ul>"
