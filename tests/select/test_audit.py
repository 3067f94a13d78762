"""``ootest select audit``: the Wilson interval, the sample, and a config with
planted false skips (a plain pytest suite: no torch)."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest

from ootest.select.audit import Member, draw, matches_reason, population, wilson
from ootest.select.refine import evidence_row
from ootest.select.rules import Decision, Evidence
from ootest.select.writer import Placed, render, split_id
from tests.conftest import ootest


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (score, no
        # continuity correction)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        # symmetric around 1/2, and at the ends
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
    ],
)
def test_wilson_matches_published_values(k: int, n: int, low: float, high: float) -> None:
    ci = wilson(k, n)
    assert ci is not None
    assert (round(ci[0], 4), round(ci[1], 4)) == (low, high)


def test_wilson_covers_95_percent_on_average_and_rejects_nonsense() -> None:
    # exact coverage (binomial sums, no simulation) averaged over p in 0.01..0.99:
    # Wilson's is close to nominal where the textbook normal interval's is far below
    n = 30
    coverage = []
    for j in range(1, 100):
        p = j / 100
        cis = [wilson(k, n) or (1.0, 0.0) for k in range(n + 1)]
        inside = [k for k, (lo, hi) in enumerate(cis) if lo <= p <= hi]
        coverage.append(sum(comb(n, k) * p**k * (1 - p) ** (n - k) for k in inside))
    assert 0.94 <= sum(coverage) / len(coverage) <= 0.96
    assert wilson(0, 0) is None
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_sample_is_seeded_and_reason_codes_match_by_family() -> None:
    members = [Member(f"t.py::test_x[i={i}]", "skip", "op_unsupported:aten::mm") for i in range(50)]
    a, b = draw(members, 10, seed=3), draw(list(reversed(members)), 10, seed=3)
    assert a == b and len(set(a)) == 10 and set(a) <= set(members)
    assert draw(members, 10, seed=4) != a
    assert draw(members, 99, seed=3) == sorted(members, key=lambda m: m.variant_id)
    assert matches_reason("op_unsupported:aten::mm", "op_unsupported")
    assert matches_reason("op_unsupported:aten::mm", "op_unsupported:aten::mm")
    assert not matches_reason("op_unsupported:aten::mm", "op_unsupported:aten::m")
    assert not matches_reason("op_unsupported_x", "op_unsupported")


# The planted suite: 45 variants of one test; which pass is known.
_PASS = {0, 4, 8, 12, 16, 20, 22, 24, 26, 28, 30, 31, 32, 33, 34, 35, 36, 40, 41, 42, 43, 44}
_SUITE = f"""
import pytest

PASS = {sorted(_PASS)}


@pytest.mark.parametrize("i", range(45))
def test_case(i):
    if i not in PASS:
        raise RuntimeError(f"kernel missing for case {{i}}")
"""


def _decision(i: int) -> Decision:
    vid = f"test_planted.py::test_case[i={i}]"
    if i < 20:
        return Decision(vid, "skip", "op_unsupported:aten::foo", ("not declared: aten::foo",))
    if i < 30:
        return Decision(vid, "skip", "dtype_unsupported:float64", ("float64",))
    if i < 40:
        return Decision(vid, "xfail", "no_evidence", ("not in the op map",))
    return Decision(vid, "mandatory_success", "ops_supported", ("all ops declared",))


def test_audit_finds_planted_false_skips(tmp_path: Path) -> None:
    (tmp_path / "test_planted.py").write_text(_SUITE)
    decisions = [_decision(i) for i in range(45)]
    placed = [Placed(d, *split_id(d.variant_id)) for d in decisions]
    text = render(placed, {"test_planted.py": "test_planted.py"}, ["planted"])
    # a person skipped one of the mandatory variants after selection: the config decides
    # (last in the file's tests: among names equally specific the later entry wins)
    assert text.endswith("          tags: [ootest-select]\n")
    text += "        - names: ['test_case[i=41]']\n          mode: skip\n"
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    (tmp_path / "suite.evidence.jsonl").write_text(
        "".join(json.dumps(evidence_row(Evidence(d.variant_id), d, "")) + "\n" for d in decisions)
    )
    skipped = {i for i in range(45) if i < 40 or i == 41}
    planted = len(skipped & _PASS) / len(skipped)  # 18 of 41

    r = ootest("select", "audit", str(suite), "--sample", "25", "--seed", "0", "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads(r.stdout)
    assert rep["mandatory"] == 4 and rep["variants_in_evidence"] == 45
    pops = {k: v["population"] for k, v in rep["by_reason"].items()}
    assert pops == {"op_unsupported": 20, "dtype_unsupported": 10, "no_evidence": 10, "edited": 1}
    assert {k: v["population"] for k, v in rep["by_mode"].items()} == {"skip": 31, "xfail": 10}

    sampled = {int(v["variant_id"].split("i=")[1][:-1]): v for v in rep["variants"]}
    assert len(sampled) == 25 and set(sampled) <= skipped
    # every sampled variant ran, and each planted false skip is reported as one
    assert all(v["outcome"] in ("passed", "failed") for v in sampled.values())
    assert {i for i, v in sampled.items() if v["false_skip"]} == set(sampled) & _PASS
    failed = [v for v in sampled.values() if not v["false_skip"]]
    assert len({v["signature"] for v in failed}) == 1  # one bug, one signature
    overall = rep["overall"]
    assert overall["passed"] == len(set(sampled) & _PASS) and overall["measured"] == 25
    low, high = overall["ci95"]
    assert low <= planted <= high
    assert overall["false_skip_rate"] == pytest.approx(overall["passed"] / 25)
    if 41 in sampled:
        assert sampled[41]["reason"] == "edited:listed"

    # exactly the sample ran; everything else was skipped by the audit config
    out = tmp_path / "suite.audit"
    res = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    # the run's own reports stay in that folder, not next to the user's config
    assert (out / "junit.xml").is_file() and not (tmp_path / "junit.xml").exists()
    ran = {
        int(x["variant_id"].split("i=")[1][:-1])
        for x in res
        if x.get("kind") == "result" and x["outcome"] != "skipped"
    }
    assert ran == set(sampled)

    # --reason narrows the population (read in-process: no second run)
    pop, _, _ = population(suite)
    dtype = [m for m in pop.members if matches_reason(m.reason, "dtype_unsupported")]
    assert len(dtype) == 10 and draw(dtype, 50, seed=0) == dtype


def test_audit_errors_are_one_line(tmp_path: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("test_suite_config:\n  files: []\n")
    r = ootest("select", "audit", str(suite), "--sample", "5")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"ootest: error: {tmp_path / 'suite.evidence.jsonl'}: expected the evidence file "
        "'ootest select run' wrote next to the config; cannot read it: No such file or directory"
    ]
    r = ootest("select", "audit", str(suite), "--sample", "0")
    assert r.returncode == 2 and "--sample: expected at least 1 variant; found 0" in r.stderr


def test_report_counts_and_table() -> None:
    import io

    from rich.console import Console

    from ootest.select.audit import Population, print_report, tally

    members = [
        Member(f"t.py::T::test_a[i={i}]", "skip", "op_unsupported:aten::mm") for i in range(6)
    ] + [Member("t.py::T::test_b", "xfail", "no_evidence")]
    pop = Population(members, variants=9, mandatory=2)
    outcomes = {0: "passed", 1: "failed", 2: "crashed", 3: "skipped"}  # 4, 5: no result
    results = {
        f"t.py::T::test_a[i={i}]": {"outcome": o, "message": "E   RuntimeError: x"}
        for i, o in outcomes.items()
    } | {"t.py::T::test_b": {"outcome": "xpassed"}}
    rep = tally(pop, members, members, results, seed=1, requested=7)
    op = rep.by_reason["op_unsupported"]
    assert (op.population, op.sampled, op.passed, op.failed, op.not_measured) == (6, 6, 1, 2, 3)
    assert op.rate == pytest.approx(1 / 3)
    assert (rep.overall.passed, rep.overall.measured) == (2, 4)
    assert rep.by_mode["xfail"].passed == 1
    crashed = next(v for v in rep.variants if v["outcome"] == "crashed")
    assert crashed["false_skip"] is False and crashed["signature"].startswith("crash")
    assert next(v for v in rep.variants if v["outcome"] == "not_run")["false_skip"] is None

    out = io.StringIO()
    print_report(rep, Console(file=out, width=160))
    text = out.getvalue()
    assert "op_unsupported" in text and "33.3%" in text and "mode xfail" in text
    lo, hi = wilson(1, 3) or (0, 0)
    assert f"{100 * lo:.1f}% - {100 * hi:.1f}%" in text
    assert "false skips (2)" in text and "t.py::T::test_b" in text


def test_an_unknown_reason_code_is_one_line(tmp_path: Path) -> None:
    # a mistyped --reason was an empty audit table and exit 0
    (tmp_path / "test_planted.py").write_text(_SUITE)
    decisions = [_decision(i) for i in range(45)]
    placed = [Placed(d, *split_id(d.variant_id)) for d in decisions]
    suite = tmp_path / "suite.yaml"
    suite.write_text(render(placed, {"test_planted.py": "test_planted.py"}, ["planted"]))
    (tmp_path / "suite.evidence.jsonl").write_text(
        "".join(json.dumps(evidence_row(Evidence(d.variant_id), d, "")) + "\n" for d in decisions)
    )
    r = ootest("select", "audit", str(suite), "--sample", "5", "--reason", "op_unsuported")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"ootest: error: --reason op_unsuported: no skipped or xfailed variant of {suite} has "
        "that reason code; expected one of: dtype_unsupported, no_evidence, op_unsupported"
    ]
    assert not (tmp_path / "suite.audit.yaml").exists()
