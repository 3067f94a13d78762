"""Selection quality against the truth: decide without running, then run everything.

For each emu profile (default ``young`` and the fault-declaring ``faulty``), over
the example suite or, with ``--torch-file NAME`` (repeatable) and ``$TORCH_ROOT``
set, over those upstream test files under ``$TORCH_ROOT/test`` instead (a
generated config's paths start with one variable, so one tree per run):

  1. capture the op map once on ``emu:full`` (``ootest ops capture``);
  2. replay the op map's recorded calls on the profile's device
     (``ootest ops replay``, Note [Replaying calls]), collect the variants for
     the device and decide every one (``ootest select run --variants ... --ops
     ... --replay ... --device emu:PROFILE``); the same decisions without the
     replay are printed beside them (static evidence only);
  3. the truth: run every variant on the device (``ootest run`` of a config that
     makes all of them mandatory, with a per-test timeout: faulty hangs);
  4. refine until nothing changes (``ootest run`` of the selected config, then
     ``ootest select refine``; at most ``--rounds``), counting every variant a
     round actually executed (not skipped by the config).

Printed per profile, before and after refinement: precision of
``mandatory_success`` (share that really passes; goal >= 99% before, 100% after),
recall (share of the passing variants selected as mandatory; goal >= 95%),
false-skip rate (share of skipped variants that would pass), and the fraction
of variants executed to reach the final config.

Usage: python bench/select_quality.py [--profile young --profile faulty] [--rounds 4]
       [--timeout 15] [--torch-file test_binary_ufuncs.py ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PASS = ("passed", "xpassed")


def sh(args: list[str], env: dict[str, str], cwd: Path, ok: tuple[int, ...] = (0,)) -> str:
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
    if r.returncode not in ok:
        sys.exit(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    print(f"    {time.perf_counter() - t:6.1f} s  {' '.join(a for a in args[2:6])} ...", flush=True)
    return r.stderr


def ootest(*args: str) -> list[str]:
    return [sys.executable, "-m", "ootest.cli", *args]


def outcomes(path: Path) -> dict[str, tuple[str, str | None]]:
    """variant -> (outcome, the config's mode for it)."""
    from ootest.record.results import RunData

    return {
        vid: (str(r["outcome"]), r.get("mode"))
        for vid, r in RunData.load(path).results.items()
        if r.get("phase") != "collect"
    }


def decisions(config: Path) -> dict[str, tuple[str, str]]:
    """variant -> (mode, reason code) from the evidence sidecar."""
    from ootest.select.refine import read_sidecar, sidecar_path

    return {ev.variant_id: (d.mode, d.reason) for ev, d, _ in read_sidecar(sidecar_path(config))}


def quality(
    modes: dict[str, tuple[str, str]],
    truth: dict[str, tuple[str, str | None]],
    under_config: dict[str, tuple[str, str | None]] | None = None,
) -> str:
    """The measures against the truth. A precision edit (a tolerance the config
    sets) is judged by the run under the config (``under_config``): the truth run
    has no tolerance, so the variant fails there by design."""
    ids = [v for v in modes if v in truth]

    def passes(v: str) -> bool:
        if under_config is not None and modes[v][1].startswith("precision_edit:"):
            return under_config.get(v, ("?", None))[0] in PASS
        return truth[v][0] in PASS

    passing = {v for v in ids if passes(v)}
    mand = {v for v in ids if modes[v][0] == "mandatory_success"}
    skip = {v for v in ids if modes[v][0] == "skip"}
    prec = len(mand & passing) / len(mand) if mand else float("nan")
    rec = len(mand & passing) / len(passing) if passing else float("nan")
    fsk = len(skip & passing) / len(skip) if skip else float("nan")
    edits = sum(1 for v in mand if modes[v][1].startswith("precision_edit:"))
    misses = "; ".join(
        f"{v.rpartition('::')[2]} {modes[v][1]} -> {truth[v][0]}" for v in sorted(mand - passing)
    )
    return (
        f"precision(mandatory_success) {prec:6.1%} ({len(mand & passing)}/{len(mand)}"
        + (f", {edits} by a precision edit" if edits else "")
        + f"), recall {rec:6.1%} ({len(mand & passing)}/{len(passing)}), "
        f"false-skip rate {fsk:6.1%} ({len(skip & passing)}/{len(skip)})"
        + (f"\n      mandatory but not passing: {misses}" if misses else "")
    )


def files_block(files: list[str], mode: str) -> str:
    out = ["test_suite_config:", "  files:"]
    for f in files:
        out += [f"    - path: {f}", f"      unlisted_test_mode: {mode}"]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--profile", action="append", default=[])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--timeout", type=int, default=15)
    p.add_argument("--torch-file", action="append", default=[])
    p.add_argument("--keep", type=Path)
    args = p.parse_args()
    profiles = args.profile or ["young", "faulty"]
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-select-quality-"))
    base.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OOTEST_ROOT": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    torch_root = os.environ.get("TORCH_ROOT")
    # a generated config's paths start with one variable (--root-var): the example
    # suite's or torch's test tree, one of them per run
    upstream = bool(torch_root and args.torch_file)
    root_var = "TORCH_ROOT" if upstream else "OOTEST_ROOT"
    targets, paths = [], []
    if not upstream:
        targets = [str(ROOT / "examples" / "suite")]
        paths = [
            f"${{OOTEST_ROOT}}/examples/suite/{f.name}"
            for f in sorted((ROOT / "examples" / "suite").glob("test_*.py"))
        ]
    if torch_root and upstream:
        for name in args.torch_file:
            if (Path(torch_root) / "test" / name).is_file():
                targets.append(str(Path(torch_root) / "test" / name))
                paths.append(f"${{TORCH_ROOT}}/test/{name}")
    print(f"files: {', '.join(paths)}")
    ops = base / "ops.db"
    if not ops.exists():
        print("op map on emu:full:")
        sh(
            ootest("ops", "capture", *targets, "--device", "emu:full", "--db", str(ops), "-q"),
            env,
            base,
        )
    all_yaml = base / "all.yaml"
    all_yaml.write_text(files_block(paths, "mandatory_success"))
    for prof in profiles:
        work = base / prof
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        print(f"emu:{prof}:")
        variants = work / "v.jsonl"
        sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets,
            "--collect-only", "--ootest-device", f"emu:{prof}", "--ootest-variants",
            str(variants)], env, work)  # fmt: skip
        suite, static = work / "suite.yaml", work / "static.yaml"
        decide = ["--variants", str(variants), "--ops", str(ops), "--device", f"emu:{prof}"]
        sh(ootest("select", "run", *decide, "--root-var", root_var, "--out", str(static)),
           env, work)  # fmt: skip
        replay = work / "replay.jsonl"
        t0 = time.perf_counter()
        sh(ootest("ops", "replay", "--db", str(ops), "--device", f"emu:{prof}", "--out",
                  str(replay), "--timeout", "5", "-q"), env, work)  # fmt: skip
        replay_s = time.perf_counter() - t0
        replayed = sum(1 for _ in replay.open()) - 1
        sh(ootest("select", "run", *decide, "--replay", str(replay), "--root-var", root_var,
                  "--out", str(suite)), env, work)  # fmt: skip
        truth_path = work / "truth.jsonl"
        run = ["--device", f"emu:{prof}", "--timeout", str(args.timeout), "-q"]
        sh(ootest("run", str(all_yaml), *run, "--results", str(truth_path)), env, work, (0, 1))
        truth = outcomes(truth_path)
        first = decisions(suite)
        n = len(first)
        executed: set[str] = set()
        rounds = 0
        last: dict[str, tuple[str, str | None]] = {}
        for i in range(args.rounds):
            res = work / f"r{i}.jsonl"
            rounds += 1
            rc = subprocess.run(
                ootest("run", str(suite), "--device", f"emu:{prof}", "--timeout",
                       str(args.timeout), "--results", str(res), "-q"),
                capture_output=True, text=True, env=env, cwd=work,
            ).returncode  # fmt: skip
            last = outcomes(res)
            ran = {v for v, (o, _) in last.items() if o != "skipped"}
            executed |= ran
            print(f"    round {i + 1}: ran {len(ran)} variants, exit {rc}")
            if rc == 0:
                break
            err = sh(ootest("select", "refine", str(suite), "--results", str(res)), env, work)
            m = re.search(r"refine: (\d+) of \d+ decisions changed", err)
            if m is not None and m[1] == "0":
                break
        final = decisions(suite)
        kinds = Counter(o for o, _ in truth.values())
        kinds_text = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(f"  {n} variants; truth (every variant run, no tolerance): {kinds_text}")
        print(f"  before refinement, static evidence only: {quality(decisions(static), truth)}")
        print(f"  replayed {replayed} recorded calls in {replay_s:.1f} s")
        print(f"  before refinement, with the replay: {quality(first, truth)}")
        print(f"  after {rounds} round(s): {quality(final, truth, last)}")
        print(
            f"  executed to reach the final config: {len(executed)}/{n} = "
            f"{len(executed) / n:.1%} of the variants"
        )
    if not args.keep:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
