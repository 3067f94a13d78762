"""Failure signatures: the same bug in 300 variants is one signature.

A signature is the exception type (or the signal of a crash), the message with
everything that varies between variants of one bug normalised away (numbers,
addresses, quoted values, shapes, dtypes, device indices), and the place it was
raised when the record has one. It is printed as ``Type:hash8`` (the reason code
``observed_fail:RuntimeError:1a2b3c4d``) next to the readable normal form.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ootest.record.results import CRASHED, TIMEOUT, headline

_EXC = re.compile(
    r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit|Interrupt|Warning|Failure))\b:?\s*"
)
_NORMALISE = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'?'"),
    (re.compile(r"\((?:\s*-?\d+\s*,?)+\)|\[(?:\s*-?\d+\s*,?)+\]"), "(N)"),
    (re.compile(r"\btorch\.(?:float|int|uint|bfloat|complex|bool|qint|quint)\w*"), "torch.DTYPE"),
    (re.compile(r"\b(?:float|int|uint|bfloat|complex|qint|quint)\d+\b"), "DTYPE"),
    # numbers, not the digits of names (PrivateUse1, BFloat16, float8_e4m3fn)
    (re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?"), "N"),
    (re.compile(r"\s+"), " "),
)


@dataclass(frozen=True)
class Signature:
    kind: str  # exception type, or the signal / "timeout"
    text: str  # the normalised message
    where: str  # "file.py:123" when known

    @property
    def code(self) -> str:
        digest = hashlib.sha1(f"{self.kind}|{self.text}|{self.where}".encode()).hexdigest()
        return f"{self.kind}:{digest[:8]}"

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}" + (f" (at {self.where})" if self.where else "")


def normalise(text: str) -> str:
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return text.strip()[:300]


def signature(rec: dict[str, Any]) -> Signature:
    """The signature of a failed, errored, crashed or timed-out result record."""
    outcome = rec.get("outcome")
    where = str(rec.get("where") or "")
    if outcome == TIMEOUT:
        return Signature("timeout", "per-test timeout", where)
    if outcome == CRASHED:
        return Signature(str(rec.get("signal") or "crash"), "process died", where)
    line = headline(rec.get("message"))
    m = _EXC.match(line)
    kind = m[1].rsplit(".", 1)[-1] if m else "Failure"
    rest = line[m.end() :] if m else line
    return Signature(kind, normalise(rest), where)
