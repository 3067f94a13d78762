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

Ground floor: imports nothing of ootest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["REDACTED", "for_rich", "for_terminal", "redact"]

REDACTED = "[redacted]"

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
    for s in secrets:
        if s and len(s) >= 4:
            text = _known(s).sub(REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    text = _USERINFO.sub(lambda m: m[1] + REDACTED + "@", text)
    text = _SCHEME.sub(lambda m: m[1] + m[2] + REDACTED, text)
    return _PAIR.sub(_pair, text)


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
    return _CONTROL.sub(_escape, str(text))


def for_rich(text: object) -> str:
    """:func:`for_terminal`, then rich's markup escaped (for ``Console.print``)."""
    from rich.markup import escape

    return escape(for_terminal(text))
