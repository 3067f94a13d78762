"""Text ootest did not write: made safe before it is stored, printed or sent.

Note [Untrusted text]
Test names, error messages, captures, config values and HTTP answers come from
code and servers ootest does not control, and CI logs are public. Two rules:

- **secrets never leave**: :func:`redact` replaces what looks like a credential
  (bearer and basic tokens, ``sk-``/``ghp_``/``github_pat_``/``hf_``/``xox?-``/
  ``AKIA`` keys, JWTs, ``password=``/``token:``-style pairs, the user info of a
  URL) and any value the caller knows to be secret (the API key it sent; as
  sent, JSON-escaped or URL-encoded) with ``[redacted]``, before an error or an
  answer is stored (sidecar, cache) or printed, and before it is cut short (a
  secret cut in two is no longer recognisable);
- **text stays text**: :func:`for_terminal` escapes every control character
  (``\\n``, ``\\x1b``, C1 controls, lone surrogates), the bidirectional
  formatting characters and the Unicode line separators, so a test name cannot
  start a line of its own (a ``::error::`` workflow command), colour or retitle
  a terminal, or reorder what is shown. :func:`for_rich` does that and escapes
  rich's markup. HTML pages have ``htmlpage.esc``, Markdown ``runner.summary.md``.

Note [Secrets in the environment]
A CI job hands ootest the relay's token, the judge's key and GitHub's token in
environment variables (:data:`SECRET_ENV`, every one ootest reads or a workflow
it writes sets). None of them reaches a process that runs test code (a run's
pytest sessions and fork server, an index build's collection, the backend
probe, a replay): :func:`without_secrets`. A test may still find one elsewhere
(``/proc/<ppid>/environ``), so what ootest writes of a run (its terminal
summary, log, reports, step summary, the refresh's ``pr.md``) has the values of
those set in its own environment redacted too: :func:`env_secrets`.

Ground floor: imports nothing of ootest.
"""

from __future__ import annotations

import functools
import io
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "REDACTED",
    "SECRET_ENV",
    "console",
    "env_secrets",
    "for_rich",
    "for_terminal",
    "hide_env_secrets",
    "redact",
    "without_secrets",
]

REDACTED = "[redacted]"

#: Environment variables that hold a secret ootest knows of (Note [Secrets in the environment])
SECRET_ENV = (
    "OOTEST_JUDGE_API_KEY",
    "OOTEST_LLM_API_KEY",
    "OPENAI_API_KEY",
    "OOTEST_RELAY_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_RUNTIME_TOKEN",
)


def without_secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) for a child that runs test code: none of
    :data:`SECRET_ENV` (Note [Secrets in the environment])."""
    e = os.environ if env is None else env
    return {k: v for k, v in e.items() if k not in SECRET_ENV}


def env_secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values of :data:`SECRET_ENV` set in ``env`` (default: this process's),
    at least 8 characters long (a shorter one would redact words, and is no
    credential) (Note [Secrets in the environment])."""
    e = os.environ if env is None else env
    return tuple(v for k in SECRET_ENV if len(v := e.get(k, "")) >= 8)


def hide_env_secrets(text: str) -> str:
    """``text`` with the values of :data:`SECRET_ENV` set in this process
    replaced by ``[redacted]`` (in any form :func:`redact` knows): every escaper
    of test-derived text (:func:`for_terminal`, ``htmlpage.esc``/``md``) applies
    it (Note [Secrets in the environment])."""
    for s in env_secrets():
        text = _known(s).sub(REDACTED, text)
    return text


_TOKENS = re.compile(
    "|".join(
        [
            r"\bsk-[A-Za-z0-9_\-]{6,}",  # OpenAI and compatible keys (sk-proj-...)
            r"\bgh[pousr]_[A-Za-z0-9]{10,}",  # GitHub tokens
            r"\bgithub_pat_[A-Za-z0-9_]{10,}",
            r"\bhf_[A-Za-z0-9]{10,}",  # Hugging Face
            r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack
            r"\bAKIA[0-9A-Z]{16}\b",  # AWS access key ID
            r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API key
            r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}",  # JWT
        ]
    )
)
# "Bearer abc", "Authorization: Basic abc": the scheme stays, the credential goes
_SCHEME = re.compile(
    r"(?i)\b(bearer|basic)(\s+)"
    r"(\[redacted\]|(?=[^\s\"',;)\]}]*[0-9\-_.=+/~])[^\s\"',;)\]}]{8,})"
)
# api_key=abc, "password": "abc", TOKEN: abc, DB_PASSWORD=abc
_PAIR = re.compile(
    r"(?i)([\w.\-]*(?:api[_\-]?key|apikey|secret|password|passwd|pwd|token|credential"
    r"|auth)[\w.\-]*)"
    r"(\"?'?\s*[:=]\s*\"?'?)"
    r"(\[redacted\]|(?i:bearer|basic)\b|[^\s\"'&,;)\]}]+)"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@")


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials replaced by ``[redacted]`` (Note [Untrusted text]);
    ``secrets`` are values known to be secret (at least 4 characters), replaced
    wherever they occur."""
    for s in (*secrets, *env_secrets()):
        if s and len(s) >= 4:
            text = _known(s).sub(REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    text = _USERINFO.sub(lambda m: m[1] + REDACTED + "@", text)
    text = _SCHEME.sub(lambda m: m[1] + m[2] + REDACTED, text)
    return _PAIR.sub(_pair, text)


@functools.lru_cache(maxsize=32)
def _known(secret: str) -> re.Pattern[str]:
    """``secret`` as a server may echo it: verbatim, JSON-escaped (with ``/`` as
    ``\\/`` too, as PHP and some proxies write it) and URL-encoded (either hex
    case, ``+`` for a space or not)."""
    import json
    from urllib.parse import quote, quote_plus

    jsoned = json.dumps(secret)[1:-1]
    forms = {secret, jsoned, jsoned.replace("/", "\\/"), secret.replace("/", "\\/")}
    forms |= {json.dumps(secret, ensure_ascii=False)[1:-1]}
    alternatives = [re.escape(f) for f in sorted(forms, key=len, reverse=True)]
    for url in {quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)}:
        if url != secret:  # %2F as %2f too: hex digits in either case
            parts = re.split(r"(%[0-9A-F]{2})", url)
            alternatives.append(
                "".join(f"%(?i:{p[1:]})" if p.startswith("%") else re.escape(p) for p in parts)
            )
    return re.compile("|".join(alternatives))


def _pair(m: re.Match[str]) -> str:
    value = m[3]
    if value == REDACTED or value.lower() in ("bearer", "basic"):  # done, or _SCHEME's
        return m[0]
    return m[1] + m[2] + REDACTED


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    ch = m[0]
    named = _NAMED.get(ch)
    if named is not None:
        return named
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def for_terminal(text: object) -> str:
    """``text`` on one line with every control, bidirectional-formatting and
    line-separator character escaped (``\\n``, ``\\x1b``, ``\\u202e``): what a
    terminal or a CI log may show of test-derived text (Note [Untrusted text])."""
    return _CONTROL.sub(_escape, hide_env_secrets(str(text)))


def for_rich(text: object) -> str:
    """:func:`for_terminal`, then rich's markup escaped (for ``Console.print``)."""
    from rich.markup import escape

    return escape(for_terminal(text))


class _NoCommands(io.TextIOBase):
    """``sys.stdout`` (or ``sys.stderr``) as it was when made, where no line
    starts with ``::`` (after blanks): a GitHub Actions workflow command. The
    first ``::`` of such a line is written ``: :`` (Note [Untrusted text]).
    Not looked up at each write: a rich progress display points ``sys.stdout``
    and ``sys.stderr`` at its console, which writes here (a loop that hung)."""

    def __init__(self, stderr: bool) -> None:
        self._out = sys.stderr if stderr else sys.stdout
        self._head: str | None = ""  # the current line so far while only blanks and colons

    def _stream(self) -> Any:
        return self._out

    def write(self, text: str) -> int:
        out = []
        for seg in re.split(r"(?<=\n)", text):
            head = self._head
            if head is not None and (head + seg).lstrip().startswith("::"):
                if head.lstrip():  # its first ':' is out already
                    seg = " " + seg
                else:
                    i = seg.index("::")
                    seg = seg[:i] + ": :" + seg[i + 2 :]
            if seg.endswith("\n"):
                self._head = ""
            elif head is not None and not (head + seg).lstrip().strip(":"):
                self._head = head + seg
            else:
                self._head = None
            out.append(seg)
        self._stream().write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        return bool(self._stream().isatty())

    def fileno(self) -> int:
        return int(self._stream().fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._stream(), "encoding", None) or "utf-8")

    def writable(self) -> bool:
        return True


def console(*, stderr: bool = False, min_width: int = 0, **options: Any) -> Console:
    """A rich ``Console`` for text that holds test-derived parts: its lines are
    never wrapped (``soft_wrap``; a table's cells wrap inside their borders), and
    none it writes starts with ``::`` (Note [Untrusted text]). ``min_width``: at
    least this wide (a table is not squeezed in a narrow log)."""
    from rich.console import Console

    if min_width:
        options["width"] = max(Console().width, min_width)
    options.setdefault("soft_wrap", True)
    options.setdefault("emoji", False)  # ":warning:" in a test name stays text
    return Console(file=cast("IO[str]", _NoCommands(stderr)), **options)
