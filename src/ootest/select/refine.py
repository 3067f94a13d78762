"""Stage 4: re-deciding from real runs, and keeping what people wrote.

Note [Refinement]
``ootest select refine`` reads the evidence sidecar ``select run`` wrote, adds
the results of real runs to each variant's history and decides again with the
same rules (Note [Selection rules]), plus:

- ``no_evidence`` becomes ``mandatory_success`` only after ``k`` clean passes in
  a row (``observed_pass:<k>``; default k = 2);
- a model judge's decision (``judge:<bucket>``, Note [Model judge]) is kept while
  the rules still find no evidence and the device has no result for it;
- a failure that is a numerical mismatch (``Tensor-likes are not close``) whose
  greatest relative difference is within ``max_rtol`` becomes a precision edit
  (the observed differences with 2x headroom) instead of an xfail;
- a failure is ``xfail_strict`` with its signature, a crash or timeout ``skip``
  with its signal (the rules).

Entries without the ``ootest-select`` tag (written by a person, or pinned by
removing the tag) are kept as they are, comments included, and their names are
never decided again.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ootest.errors import UserError
from ootest.record.decisions import sidecar_path as sidecar_path
from ootest.record.results import RunData
from ootest.select.rules import Decision, Evidence, Result, decide, promotable
from ootest.select.signature import signature
from ootest.select.writer import TAG, Precision

_CLOSE = re.compile(r"Tensor-likes are not close")
_ABS = re.compile(r"Greatest absolute difference: ([0-9.eE+-]+|nan|inf)")
_REL = re.compile(r"Greatest relative difference: ([0-9.eE+-]+|nan|inf)")


def evidence_row(ev: Evidence, d: Decision, fingerprint: str) -> dict[str, Any]:
    evidence = asdict(ev)
    for key in ("replay", "replay_covered"):
        if not evidence[key]:
            del evidence[key]  # written only where a replay said something
    return {"decision": asdict(d), "evidence": evidence, "fingerprint": fingerprint}


def read_sidecar(path: Path) -> list[tuple[Evidence, Decision, str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(
            f"{path}: expected the evidence file 'ootest select run' wrote next to the "
            f"config; cannot read it: {e.strerror or e}"
        ) from None
    out = []
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
            raw = row["evidence"]
            ev = Evidence(
                **{
                    **raw,
                    "dtypes": tuple(raw["dtypes"]),
                    "ops": tuple(raw["ops"]) if raw["ops"] is not None else None,
                    "missing_ops": tuple(raw["missing_ops"]),
                    "missing_dtypes": tuple(raw["missing_dtypes"]),
                    "cpu": Result(**raw["cpu"]) if raw["cpu"] else None,
                    "reference": Result(**raw["reference"]) if raw["reference"] else None,
                    "observed": [Result(**r) for r in raw["observed"]],
                    "replay": tuple(tuple(f) for f in raw.get("replay", ())),
                    "replay_covered": tuple(raw.get("replay_covered", ())),
                }
            )
            d = row["decision"]
            dec = Decision(
                d["variant_id"], d["mode"], d["reason"], tuple(d["evidence"]), d["source"]
            )
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(
                f"{path}:{n}: expected an evidence line written by 'ootest select run'; {e}"
            ) from None
        out.append((ev, dec, str(row.get("fingerprint") or "")))
    return out


@dataclass(frozen=True)
class Refined:
    decision: Decision
    precision: Precision | None = None


def observe(evidence: Iterable[Evidence], results: list[Path]) -> dict[str, dict[str, Any]]:
    """Append the results of ``results`` to each variant's history (in place);
    returns the last raw result record per variant (for precision proposals)."""
    by_id = {ev.variant_id: ev for ev in evidence}
    last: dict[str, dict[str, Any]] = {}
    for p in results:
        for rec in RunData.load(p).results.values():
            ev = by_id.get(str(rec.get("variant_id")))
            if ev is None or rec.get("phase") == "collect":
                continue
            outcome = str(rec["outcome"])
            at = rec.get("time")
            if at is not None and any(r.at == at for r in ev.observed):
                continue  # this result was observed by an earlier refinement
            if outcome in ("failed", "error", "crashed", "timeout", "xpassed_strict", "xfailed"):
                sig = signature(rec)  # an expected failure is a failure all the same
                ev.observed.append(Result(outcome, sig.code, str(sig), at))
            elif outcome in ("passed", "xpassed"):
                ev.observed.append(Result(outcome, at=at))
            last[ev.variant_id] = rec
    return last


def refine_one(
    ev: Evidence,
    last: dict[str, Any] | None,
    k: int,
    max_rtol: float,
    prior: Decision | None = None,
) -> Refined:
    d = decide(ev)
    runs = [r.outcome for r in ev.observed]
    if prior is not None and prior.source == "model" and d.reason == "no_evidence" and not runs:
        # the judge's accepted proposal stands until the device says otherwise
        return Refined(prior)
    if (
        promotable(d.reason)
        and len(runs) >= k
        and all(o in ("passed", "xpassed") for o in runs[-k:])
    ):
        return Refined(
            Decision(ev.variant_id, "mandatory_success", f"observed_pass:{k}",
                     (f"passed the last {k} runs on the device",), "refine")
        )  # fmt: skip
    if d.mode == "xfail_strict" and last is not None:
        prec = _precision(last, ev.dtypes, max_rtol)
        if prec is not None:
            return Refined(
                Decision(ev.variant_id, "mandatory_success", f"precision_edit:{prec.dtype}",
                         (prec.why,), "refine"),
                prec,
            )  # fmt: skip
    return Refined(
        Decision(d.variant_id, d.mode, d.reason, d.evidence, "refine" if runs else d.source)
    )


def _precision(rec: dict[str, Any], dtypes: tuple[str, ...], max_rtol: float) -> Precision | None:
    msg = str(rec.get("message") or "")
    if not _CLOSE.search(msg) or len(dtypes) != 1:
        return None
    a, r = _ABS.search(msg), _REL.search(msg)
    if a is None or r is None:
        return None
    try:
        atol, rtol = float(a[1]), float(r[1])
    except ValueError:
        return None
    if not (0 <= rtol <= max_rtol) or atol != atol or atol == float("inf"):
        return None
    why = (
        f"numerical mismatch within bounds: greatest abs diff {atol:.3g}, rel diff {rtol:.3g} "
        f"(<= --max-rtol {max_rtol:g}); tolerance set to 2x"
    )
    return Precision(dtypes[0], 2 * atol, 2 * rtol, why)


def people_entries(config_text: str) -> tuple[dict[str, list[Any]], set[tuple[str, str]]]:
    """Per ``path:``, the entries without the generated tag (round-trip objects,
    comments included), and the (path, name) pairs they name."""
    from ruamel.yaml import YAML

    data = YAML().load(config_text)
    kept: dict[str, list[Any]] = {}
    names: set[tuple[str, str]] = set()
    files = ((data or {}).get("test_suite_config") or {}).get("files") or []
    for f in files:
        path = str(f.get("path"))
        for entry in f.get("tests") or []:
            if TAG in (entry.get("tags") or []):
                continue
            kept.setdefault(path, []).append(entry)
            names.update((path, str(n)) for n in entry.get("names") or [])
    return kept, names


def splice(generated: str, kept: dict[str, list[Any]]) -> str:
    """The generated config with people's entries put first in their files."""
    if not kept:
        return generated
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096
    data = yaml.load(generated)
    files = data["test_suite_config"]["files"]
    for f in files:
        mine = kept.get(str(f["path"]))
        if mine:
            tests = f.get("tests")
            if tests is None:
                f["tests"] = tests = []
            for i, entry in enumerate(mine):
                tests.insert(i, entry)
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()
