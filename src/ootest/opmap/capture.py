"""Reading a capture stream: JSON lines written while the tests run.

The stream format (one object per line; see docs/opmap.md):

- ``{"kind": "provenance", "torch_version", "torch_git", "device", "profile",
  "ootest_version", "time"}`` starts a capture; every later line belongs to it;
- ``{"kind": "ops", "variant_id", "nodeid", "file", "mode": "eager"|"compiled",
  "ops": {"aten::add.Tensor": 3, ...}}``: calls seen (a variant may have several);
- ``{"kind": "stop", "variant_id", "op", "outcome", "error"}``: how it ended;
- ``{"kind": "device_branch", "variant_id"}``: its ops may differ per device;
  with ``"threads": true``: the test started a thread, whose ops the capture
  does not see (Note [Capture sees one thread]): uncertain all the same;
- ``{"kind": "dtypes", "variant_id", "op", "dtypes": ["int64"]}``: the variant
  called ``op`` with device tensors of these dtypes (distinct, sorted; one record
  per signature new to the variant, Note [Call dtypes]);
- ``{"kind": "example", "variant_id", "op", "call": "<JSON text>"}``: one call
  written down so it can be replayed on another device (Note [Call examples]).

A process may die while writing, so an unparseable *last* line is dropped
(and counted); an unparseable line anywhere else is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ootest.errors import UserError

KINDS = ("provenance", "ops", "stop", "device_branch", "dtypes", "example")
MAX_EXAMPLE = 1 << 20  # characters of one call example
MAX_OPS = 32_768  # distinct op names of one variant: sums of their 48-bit hashes fit in int64
MODES = ("eager", "compiled")


@dataclass
class ReadStats:
    """What reading a stream skipped (reported, never silent)."""

    truncated_last_line: bool = False
    blank_lines: int = 0


def read_capture(
    path: str | os.PathLike[str], stats: ReadStats | None = None
) -> Iterator[tuple[int, dict[str, Any], str]]:
    """Yield ``(line number, record, line)`` for every record of a capture file."""
    p = Path(path)
    try:
        fh = p.open("r", encoding="utf-8", errors="replace")
    except OSError as e:
        raise UserError(
            f"{p}: expected a capture file (JSON lines from `ootest ops capture`); "
            f"cannot read it: {e.strerror or e}"
        ) from None
    with fh:
        pending: tuple[int, str] | None = None
        first = 0  # the first line that is not blank
        for n, line in enumerate(fh, 1):
            if not line.strip():
                if stats is not None:
                    stats.blank_lines += 1
                continue
            if pending is not None:
                yield pending[0], _parse(p, *pending), pending[1]
            else:
                first = n
            pending = (n, line)
        if pending is None:
            return
        try:
            rec = json.loads(pending[1])
        except RecursionError:
            raise UserError(_too_deep(p, pending[0])) from None
        except ValueError as e:
            if pending[0] == first:  # no record at all: not a capture cut short
                raise UserError(
                    f"{p}:{pending[0]}: expected a JSON object (a capture record); found "
                    f"{_short(pending[1])} ({e}); is this a capture from `ootest ops capture`?"
                ) from None
            if stats is not None:
                stats.truncated_last_line = True
            return  # the writer died mid-line
        yield pending[0], _object(p, pending[0], rec, pending[1]), pending[1]


def _parse(path: Path, n: int, line: str) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except RecursionError:
        raise UserError(_too_deep(path, n)) from None
    except ValueError as e:
        raise UserError(
            f"{path}:{n}: expected a JSON object (a capture record); found {_short(line)} ({e}); "
            "only the last line of a capture may be cut short, so the file is damaged: "
            "capture again"
        ) from None
    return _object(path, n, rec, line)


def _too_deep(path: Path, n: int) -> str:
    return (
        f"{path}:{n}: expected a capture record (a flat JSON object); found JSON nested too "
        "deeply to read; the file is not a capture from `ootest ops capture`"
    )


def _object(path: Path, n: int, rec: Any, line: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise UserError(f"{path}:{n}: expected a JSON object; found {_short(line)}")
    return rec


def _short(text: str, width: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def check_record(where: str, rec: dict[str, Any]) -> str:
    """Validate one record's fields; return its kind. ``where`` is ``file:line``."""
    kind = str(rec.get("kind"))
    if kind not in KINDS:
        raise UserError(
            f"{where}: kind: expected one of {', '.join(KINDS)}; found {rec.get('kind')!r}; "
            "was the capture written by a newer ootest? Upgrade ootest to read it"
        )
    if kind == "provenance":
        for key in ("torch_version", "torch_git", "device", "profile", "ootest_version"):
            _opt_str(where, rec, key)
        t = rec.get("time")
        if t is not None and not isinstance(t, (int, float)):
            raise UserError(f"{where}: time: expected seconds since the epoch; found {t!r}")
        return kind
    vid = rec.get("variant_id")
    if not isinstance(vid, str) or not vid:
        raise UserError(f"{where}: variant_id: expected a variant ID string; found {vid!r}")
    if kind == "ops":
        _opt_str(where, rec, "nodeid")
        _opt_str(where, rec, "file")
        mode = rec.get("mode", "eager")
        if mode not in MODES:
            raise UserError(f"{where}: mode: expected 'eager' or 'compiled'; found {mode!r}")
        ops = rec.get("ops")
        if not isinstance(ops, dict) or not counts_ok(ops):
            raise UserError(
                f"{where}: ops: expected an object of op name -> call count "
                f'(e.g. {{"aten::add.Tensor": 3}}, counts below 2**63); found '
                f"{_short(json.dumps(ops))}"
            )
        if len(ops) > MAX_OPS:
            raise UserError(
                f"{where}: ops: expected at most {MAX_OPS:,} op names in one variant; "
                f"found {len(ops):,}"
            )
    elif kind == "stop":
        for key in ("op", "outcome", "error"):
            _opt_str(where, rec, key)
    elif kind == "example":
        op, call = rec.get("op"), rec.get("call")
        if not isinstance(op, str) or not op:
            raise UserError(f"{where}: op: expected an op name string; found {op!r}")
        if not isinstance(call, str) or not call.startswith("{") or len(call) > MAX_EXAMPLE:
            raise UserError(
                f"{where}: call: expected the call as JSON text (at most {MAX_EXAMPLE} "
                f"characters, Note [Call examples]); found {_short(json.dumps(call))}"
            )
    elif kind == "dtypes":
        op, dtypes = rec.get("op"), rec.get("dtypes")
        if not isinstance(op, str) or not op:
            raise UserError(f"{where}: op: expected an op name string; found {op!r}")
        if (
            not isinstance(dtypes, list)
            or not dtypes
            or not all(isinstance(d, str) and d and "," not in d for d in dtypes)
        ):
            raise UserError(
                f'{where}: dtypes: expected a list of dtype names (e.g. ["int64"]); '
                f"found {_short(json.dumps(dtypes))}"
            )
    return kind


def counts_ok(ops: dict[Any, Any]) -> bool:
    """Counts are non-negative ints (checked in C: a capture holds millions).

    Names are strings by construction in JSON; records handed to the API are
    checked by the caller (``keys_ok``)."""
    if not ops:
        return True
    values = ops.values()
    return set(map(type, values)) == {int} and min(values) >= 0 and max(values) < 2**63


def keys_ok(ops: dict[Any, Any]) -> bool:
    return not ops or set(map(type, ops)) == {str}


def _opt_str(where: str, rec: dict[str, Any], key: str) -> None:
    v = rec.get(key)
    if v is not None and not isinstance(v, str):
        raise UserError(f"{where}: {key}: expected a string or null; found {v!r}")
