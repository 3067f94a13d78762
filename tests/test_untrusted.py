"""ootest.untrusted (Note [Untrusted text]): credentials redacted, control
characters escaped. The hostile strings are gathered here and counted."""

from __future__ import annotations

import pytest
from rich.markup import escape

from ootest.untrusted import for_rich, for_terminal, redact

#: (text, the secret in it); every secret must be gone from redact(text)
CREDENTIALS = [
    ("401 invalid token: Bearer sk-abc123def456ghi", "sk-abc123def456ghi"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "eyJhbGci"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("bearer    opaque-token-value", "opaque-token-value"),
    ('{"api_key": "k-9f8e7d6c5b4a"}', "k-9f8e7d6c5b4a"),
    ("DB_PASSWORD=hunter2", "hunter2"),
    ("password: 'correct horse'", "correct"),
    ("OPENAI_API_KEY=whatever123", "whatever123"),
    ("x-api-key: abcdef123456", "abcdef123456"),
    ("client_secret=s3cr3tvalue&x=1", "s3cr3tvalue"),
    ("access_token=ya29.a0AfH6SMB", "ya29.a0AfH6SMB"),
    ("no label ciflow/ghs_SUPERSECRET1234", "ghs_SUPERSECRET1234"),
    ("ghp_0123456789abcdefABCDEF in a log", "ghp_0123456789abcdefABCDEF"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijkl", "github_pat_11ABCDEFG"),
    ("hf_AbCdEfGhIjKlMnOpQrStUv", "hf_AbCdEfGhIjKlMnOpQrStUv"),
    ("xoxb-123456789012-abcdefghij", "xoxb-123456789012"),
    ("AKIAIOSFODNN7EXAMPLE key", "AKIAIOSFODNN7EXAMPLE"),
    ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "AIzaSyA-1234567890"),
    ("http://admin:pa55word@proxy:3128/v1", "pa55word"),
    ("https://user@host/x", "user@"),
    ("sk-proj-AbC_dEf-0123456789", "sk-proj-AbC_dEf-0123456789"),
]
#: ordinary text that must come out as it went in
PLAIN = [
    "the tokens were 5",
    "token expired",
    "test_password_hashing[dtype=float32]",
    "RuntimeError: expected scalar type Float but found Half",
    "aten::add.Tensor",
    "http://localhost:8000/v1/chat/completions",
    "a basic test",
    "the bearer of bad news",
]


def test_credentials_are_redacted_and_plain_text_is_kept() -> None:
    for text, secret in CREDENTIALS:
        out = redact(text)
        assert secret not in out and "[redacted]" in out, (text, out)
    for text in PLAIN:
        assert redact(text) == text
    # a value the caller knows to be secret, wherever it is
    assert redact("echo: my-own-key-xyz!", ["my-own-key-xyz", None, ""]) == "echo: [redacted]!"
    assert redact("Bearer [redacted]") == "Bearer [redacted]"  # idempotent
    print(f"redact: {len(CREDENTIALS)} credentials and {len(PLAIN)} plain texts tried")


#: (test-derived text, what a terminal may show of it)
CONTROL = [
    ("a\n::error::owned", "a\\n::error::owned"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("back\rover", "back\\rover"),
    ("tab\there", "tab\\there"),
    ("bs\x08\x08", "bs\\x08\\x08"),
    ("c1\x9b31m", "c1\\x9b31m"),
    ("del\x7f", "del\\x7f"),
    ("nul\x00", "nul\\x00"),
    ("rtl\u202eevil\u202c", "rtl\\u202eevil\\u202c"),
    ("iso\u2066x\u2069", "iso\\u2066x\\u2069"),
    ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
    ("lone\ud800surrogate", "lone\\ud800surrogate"),
    ("plain [dtype=float32] é 中", "plain [dtype=float32] é 中"),
]


@pytest.mark.parametrize(("text", "shown"), CONTROL)
def test_control_characters_are_escaped(text: str, shown: str) -> None:
    assert for_terminal(text) == shown
    shown.encode("utf-8")  # printable anywhere
    assert for_rich("[b]" + text) == escape("[b]" + shown)


def test_count() -> None:
    print(f"for_terminal: {len(CONTROL)} hostile texts tried")


def test_the_relay_s_answers_are_printed_redacted_and_escaped() -> None:
    from ootest.relay.report import remote_text

    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOngifQ.c2lnbmF0dXJlLXZhbHVl"
    got = remote_text(f"invalid token {jwt}\n::add-mask::x \x1b[2J Bearer {jwt}")
    assert got == "invalid token [redacted] : :add-mask: :x \\x1b[2J Bearer [redacted]"
