"""``ootest ops enable`` end to end on emu:young: the op map's prediction against the device.

The example suite is captured on emu:full. The config copy declares what the
young profile supports (its ops, emu's native kernels, its dtypes). Enabling
an op the profile lacks must list as unblocked exactly the variants that start
passing when a copy of the profile enables it, and edit one line of the YAML.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ootest.device.emu import NATIVE_OPS, read_profile
from tests.conftest import ROOT, ootest, run

pytestmark = pytest.mark.slow  # a capture and two runs on emu: minutes on a shared machine

OP = "cumsum"  # young lacks it (`ootest ops missing --device emu:young` ranks it first)
PASSED = {"passed", "xpassed", "xpassed_strict"}  # the test body passed


def _json(r: Any) -> Any:
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout)


def _outcomes(results: Path) -> dict[str, dict[str, Any]]:
    recs = [json.loads(x) for x in results.read_text().splitlines() if x.strip()]
    return {r["variant_id"]: r for r in recs if r.get("kind") == "result"}


def _configs(tmp: Path) -> tuple[Path, Path]:
    """(suite config, the capabilities file it extends): the example config, its test
    files named where they are (their variant IDs are the captured ones), and the
    young profile's capabilities, with comments."""
    young = read_profile("young")
    assert OP not in young.ops
    suite = (ROOT / "examples" / "emu_young.yaml").read_text()
    suite = suite.replace("path: suite/", f"path: {ROOT / 'examples' / 'suite'}/")
    cfg = tmp / "emu_young.yaml"
    cfg.write_text(suite)
    ops = "\n".join(f"      - {n}" for n in [*young.ops, *sorted(NATIVE_OPS)])
    caps = tmp / "capabilities.yaml"
    caps.write_text(
        "# What the emu young profile supports, declared for the op map.\n"
        "test_suite_config:\n"
        "  global:\n"
        f"    supported_dtypes: [{', '.join(young.dtypes)}]  # the profile's dtypes\n"
        "    supported_ops:  # the profile's ops, then emu's native kernels\n"
        f"{ops}\n"
        "    supported_modules: [nn.Linear, nn.ReLU, nn.GELU]\n"
    )
    return cfg, caps


def _run(cfg: Path, profile: Path, out: Path) -> dict[str, dict[str, Any]]:
    r = ootest(
        "run", str(cfg), "--device", f"emu:{profile}", "--results", str(out), "-q",
        "--", "-k", OP,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    return _outcomes(out)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example suite's op map, captured on emu:full."""
    out = tmp_path_factory.mktemp("capture") / "ops.db"
    cap = ootest("ops", "capture", "examples/suite", "--device", "emu:full", "--db", str(out), "-q")
    assert cap.returncode == 0, cap.stdout[-3000:] + cap.stderr[-3000:]
    return out


def test_enable_lists_what_starts_passing_and_edits_one_line(db: Path, tmp_path: Path) -> None:
    cfg, caps = _configs(tmp_path)
    before_text = caps.read_text()

    rep = _json(ootest("ops", "enable", OP, "--config", str(cfg), "--db", str(db), "--json"))
    unblocked = {u["variant_id"] for u in rep["unblocked"]}
    assert unblocked and not rep["still_blocked"]
    removable = {e["what"].split(" (")[0] for e in rep["entries"]}
    assert removable == {
        "xfail_strict TestTensorBasics::test_cumsum",
        "xfail TestOpConsistency::test_matches_cpu[op=cumsum]",
    }

    # The same answer from the index, variant by variant: callers of the op whose
    # every other op the config supports.
    calling = _json(ootest("ops", "tests-for", OP, "--db", str(db), "--json"))["variants"]
    missing = _json(ootest("ops", "missing", "--config", str(cfg), "--db", str(db), "--json"))
    needs = {n["rule"]: set(n["overloads"]) for n in missing["needs"]}
    assert set(needs) >= {OP}
    others = set().union(*(o for r, o in needs.items() if r != OP))
    want = set()
    for v in calling:
        mine = _json(ootest("ops", "for-test", v["variant_id"], "--db", str(db), "--json"))
        ops = {o["op"] for o in mine["ops"]}
        if not ops & others:
            want.add(v["variant_id"])
    assert unblocked == want

    # The YAML: one line added to the list, comments and everything else unchanged.
    done = ootest("ops", "enable", OP, "--config", str(cfg), "--db", str(db), "--write")
    assert done.returncode == 0, done.stderr
    after_text = caps.read_text()
    changed = [
        line
        for line in difflib.unified_diff(before_text.splitlines(), after_text.splitlines(), n=0)
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    assert changed == [f"+      - {OP}"]
    assert (tmp_path / "emu_young.yaml").read_text() == cfg.read_text()

    # The device's answer: the profile as it is, then a copy that enables the op.
    profile = tmp_path / "young.yaml"
    text = (ROOT / "src/ootest/device/emu/profiles/young.yaml").read_text()
    profile.write_text(text)
    plus = tmp_path / "young_plus.yaml"
    plus.write_text(text.replace("\nops:\n", f"\nops:\n  - {OP}  # enabled for this test\n", 1))
    assert OP in read_profile(str(plus)).ops
    before = _run(cfg, profile, tmp_path / "before.jsonl")
    after = _run(cfg, plus, tmp_path / "after.jsonl")
    assert unblocked <= after.keys()
    ran = {v for v in unblocked if after[v]["outcome"] != "skipped"}
    for v in unblocked - ran:  # a dtype the profile lacks: the config skips it, as it should
        assert "is not supported" in str(after[v]["reason"]), after[v]
    assert ran, after
    started = {
        v for v in after if after[v]["outcome"] in PASSED and before[v]["outcome"] not in PASSED
    }
    assert started == ran


def test_spyre_selectors_on_the_example_suite(db: Path, tmp_path: Path) -> None:
    from ootest.opmap.missing import blocked
    from ootest.opmap.store import OpStore
    from ootest.opmap.support import from_config

    cfg, _ = _configs(tmp_path)
    text = cfg.read_text().replace(
        "  labels: [trunk]\n",
        "  labels: [trunk]\n  test_selectors:\n"
        "    include: [{has_ops: true, ops_in_supported: true}]\n",
    )
    cfg.write_text(text)
    # The query's answer, where the evidence is certain: blocked (an unsupported op
    # was seen), or run to a pass calling no op. Unknowns are kept (Note [Selectors]).
    with OpStore.open(db) as store:
        stuck = blocked(store, from_config(cfg)[0]).missing_count.keys()
        names = {n for n, _ in store.variant_info(stuck).values()}
        facts = list(store.op_sets())
    excluded = {v for v, ops, dep, part in facts if not dep and (v in names or not (ops or part))}
    assert names and excluded and len(excluded) < len(facts)

    out = tmp_path / "variants.jsonl"
    r = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/suite",
         "--collect-only", "--ootest-config", str(cfg), "--ootest-ops", str(db),
         "--ootest-variants", str(out)],
        cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = [json.loads(x) for x in out.read_text().splitlines()]
    lines = {x["variant_id"]: x for x in found if x["kind"] == "variant"}
    left = {v for v, x in lines.items() if str(x["reason"]).startswith("left out by test_sel")}
    other = {v for v, x in lines.items() if x["mode"] == "skip"} - left  # the config's own skips
    assert left == excluded - other
    assert not {v for v, x in lines.items() if x["mode"] != "skip"} & excluded
