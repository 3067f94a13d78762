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

Where the declared ops and dtypes come from (``--source``, all by default) —
the benchmark must not flatter, so not only from the profile the device enforces:

- ``profile``: ``--device emu:PROFILE``, the ops and per-op dtypes the device
  enforces (right by construction: the numbers of earlier runs);
- ``probe``: ``--device emu:PROFILE --probe``, what a real team gets from the
  backend: a child process lists its PrivateUse1 registrations plus the ops
  torch's composite kernels serve (``select/backend.py``); per-op dtypes and
  faults are invisible to it, and emu declares no dtypes;
- ``hand``: a hand-written list (``--supported``) with omissions and extras:
  every 4th of the profile's ops left out, and the first 5 ops the op map
  recorded that the device lacks added, the profile's dtypes declared.

A backend other than emu (``--backend MODULE:NAME`` or ``--backend NAME``, with
``--backend-path DIR`` put on the children's ``PYTHONPATH`` when it is installed
there; ``--tinydev`` installs and uses the test backend of tests/backends) is
measured through the documented commands alone: ``select run --device BACKEND
--replay ...`` (source ``backend``: the probe, no ``--supported``, no ``--dtypes``).

The ``subtle`` profile's faults depend on context one call does not show
(non-contiguous operands, state across calls; docs/emu.md).

Printed per profile and source, before and after refinement: precision of
``mandatory_success`` (share that really passes at the test's own tolerance;
goal >= 99% before, 100% after), recall (share of the passing variants, decided
or not, selected as mandatory; goal >= 95%), false-skip rate (share of skipped variants that
would pass), precision proposals (xfail with a proposed tolerance: never
counted as mandatory), the variants without a truth result (counted, never
dropped: a mandatory one counts as not passing), and the fraction of variants
executed to reach the final config; then one table of all of them side by side.

Usage: python bench/select_quality.py [--profile young --profile faulty --profile subtle]
       [--source profile --source probe --source hand] [--rounds 4]
       [--backend MODULE:NAME [--backend-path DIR]] [--tinydev]
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
SOURCES = ("profile", "probe", "hand")


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


def measures(
    modes: dict[str, tuple[str, str]], truth: dict[str, tuple[str, str | None]]
) -> dict[str, float | int]:
    """The measures against the truth (every variant run as it is, at its own
    tolerance: a precision edit never makes a variant pass here). A variant
    without a truth result is counted, not dropped: it never counts as passing.
    Recall is over every variant that passes in the truth, decided or not: one the
    config does not decide at all is a passing variant it does not require."""
    ids = list(modes)
    passing = {v for v in ids if truth.get(v, ("?", None))[0] in PASS}
    passing |= {v for v, (o, _) in truth.items() if o in PASS}  # decided or not
    mand = {v for v in ids if modes[v][0] == "mandatory_success"}
    skip = {v for v in ids if modes[v][0] == "skip"}
    nan = float("nan")
    return {
        "precision": len(mand & passing) / len(mand) if mand else nan,
        "good": len(mand & passing),
        "mandatory": len(mand),
        "recall": len(mand & passing) / len(passing) if passing else nan,
        "passing": len(passing),
        "false_skip": len(skip & passing) / len(skip) if skip else nan,
        "false_skips": len(skip & passing),
        "skips": len(skip),
        "proposals": sum(1 for v in ids if modes[v][1].startswith("precision_proposal:")),
        "no_truth": sum(1 for v in ids if v not in truth),
        "no_truth_mandatory": sum(1 for v in mand if v not in truth),
        "undecided_passing": len(passing - set(ids)),
    }


def quality(modes: dict[str, tuple[str, str]], truth: dict[str, tuple[str, str | None]]) -> str:
    m = measures(modes, truth)
    misses = "; ".join(
        f"{v.rpartition('::')[2]} {modes[v][1]} -> {truth.get(v, ('no result', None))[0]}"
        for v in sorted(modes)
        if modes[v][0] == "mandatory_success" and truth.get(v, ("?", None))[0] not in PASS
    )
    return (
        f"precision(mandatory_success) {_pct(m['precision'])} ({m['good']}/{m['mandatory']}), "
        f"recall {m['recall']:6.1%} ({m['good']}/{m['passing']}), "
        f"false-skip rate {m['false_skip']:6.1%} ({m['false_skips']}/{m['skips']})"
        + (f", {m['proposals']} precision proposals" if m["proposals"] else "")
        + (f", {m['no_truth']} without a truth result" if m["no_truth"] else "")
        + (
            f", {m['undecided_passing']} passing variants the config does not decide"
            if m["undecided_passing"]
            else ""
        )
        + (f"\n      mandatory but not passing: {misses}" if misses else "")
    )


def hand_list(prof: str, ops_db: Path, out: Path) -> str:
    """A hand-written support list with omissions and extras (see the docstring);
    returns what it left out and added."""
    from ootest.device.emu import read_profile
    from ootest.opmap.store import OpStore
    from ootest.opmap.support import from_emu

    own = sorted(set(read_profile(prof).ops))
    omitted = own[3::4]
    enforced = from_emu(f"emu:{prof}")
    with OpStore.open(ops_db) as store:
        recorded = sorted({name for _, name in store.all_ops()})
    lacking = sorted(
        {o.removeprefix("aten::").split(".")[0] for o in recorded if not enforced.covers(o)}
    )
    extras = [o for o in lacking if o not in own][:5]
    out.write_text("\n".join(o for o in [*own, *extras] if o not in omitted) + "\n")
    return f"{len(omitted)} of {len(own)} ops left out, {len(extras)} extra: {', '.join(extras)}"


def _pct(x: float) -> str:
    return "   -  " if x != x else f"{x:6.1%}"


def tinydev() -> tuple[str, dict[str, str]]:
    """Install the test backend ``tiny`` (tests/backends/tinydev, cached; never into
    the venv: Note [Test backends stay out of .venv]): the folder a child needs on
    its ``PYTHONPATH`` for ``import torch`` to autoload it, and the other variables
    it needs (its build cache)."""
    sys.path.insert(0, str(ROOT))
    from ootest.cache import cache_dir
    from tests.backends import TINYDEV, install

    found = install(TINYDEV, cache_dir() / "test-backends")
    return str(found.path), {k: v for k, v in found.env().items() if k != "PYTHONPATH"}


def files_block(files: list[str], mode: str) -> str:
    out = ["test_suite_config:", "  files:"]
    for f in files:
        out += [f"    - path: {f}", f"      unlisted_test_mode: {mode}"]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--profile", action="append", default=[])
    p.add_argument("--source", action="append", default=[], choices=SOURCES)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--timeout", type=int, default=15)
    p.add_argument("--torch-file", action="append", default=[])
    p.add_argument("--keep", type=Path)
    p.add_argument("--backend", action="append", default=[], help="a device other than emu")
    p.add_argument("--backend-path", action="append", default=[], type=Path)
    p.add_argument("--tinydev", action="store_true", help="the test backend tiny")
    args = p.parse_args()
    backends = list(args.backend)
    paths_extra = [str(x.resolve()) for x in args.backend_path]
    if args.tinydev:
        folder, variables = tinydev()
        paths_extra.append(folder)
        os.environ.update(variables)
        backends.append("tiny")
    profiles = args.profile or (
        [] if backends and not args.profile else ["young", "faulty", "subtle"]
    )
    sources = args.source or list(SOURCES)
    table: list[tuple[str, str, str, str, str]] = []
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-select-quality-"))
    base.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OOTEST_ROOT": str(ROOT)}
    # the children measure this tree's ootest, whatever the environment installed
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *paths_extra, *filter(None, [env.get("PYTHONPATH")])]
    )
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
    devices = [(f"emu:{prof}", prof) for prof in profiles] + [(b, "") for b in backends]
    for device, prof in devices:
        work = base / re.sub(r"[^A-Za-z0-9_.-]", "_", device)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        print(f"{device}:")
        variants = work / "v.jsonl"
        sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets,
            "--collect-only", "--ootest-device", device, "--ootest-variants",
            str(variants)], env, work)  # fmt: skip
        replay = work / "replay.jsonl"
        t0 = time.perf_counter()
        sh(ootest("ops", "replay", "--db", str(ops), "--device", device, "--out",
                  str(replay), "--timeout", "5", "-q"), env, work)  # fmt: skip
        replay_s = time.perf_counter() - t0
        replayed = sum(1 for _ in replay.open()) - 1
        truth_path = work / "truth.jsonl"
        run = ["--device", device, "--timeout", str(args.timeout), "-q"]
        sh(ootest("run", str(all_yaml), *run, "--results", str(truth_path)), env, work, (0, 1))
        truth = outcomes(truth_path)
        kinds = Counter(o for o, _ in truth.values())
        kinds_text = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        print(f"  truth (every variant run, no tolerance): {kinds_text}")
        print(f"  replayed {replayed} recorded calls in {replay_s:.1f} s")
        from ootest.device.emu import read_profile

        for source in sources if prof else ["backend"]:
            declared = ["--device", device]
            if source == "probe":
                declared += ["--probe", "--save-detected", str(work / "detected.json")]
            elif source == "hand":
                note = hand_list(prof, ops, work / "hand.txt")
                dts = ",".join(read_profile(prof).dtypes)
                declared += ["--supported", str(work / "hand.txt"), "--dtypes", dts]
                print(f"  hand list: {note}")
            suite = work / f"{source}.yaml"
            static = work / f"{source}-static.yaml"
            decide = ["--variants", str(variants), "--ops", str(ops), *declared]
            sh(ootest("select", "run", *decide, "--root-var", root_var, "--out", str(static)),
               env, work)  # fmt: skip
            sh(ootest("select", "run", *decide, "--replay", str(replay), "--root-var",
                      root_var, "--out", str(suite)), env, work)  # fmt: skip
            first = decisions(suite)
            n = len(first)
            executed: set[str] = set()
            rounds = 0
            for i in range(args.rounds):
                res = work / f"{source}-r{i}.jsonl"
                rounds += 1
                rc = subprocess.run(
                    ootest("run", str(suite), "--device", device, "--timeout",
                           str(args.timeout), "--results", str(res), "-q"),
                    capture_output=True, text=True, env=env, cwd=work,
                ).returncode  # fmt: skip
                last = outcomes(res)
                ran = {v for v, (o, _) in last.items() if o != "skipped"}
                executed |= ran
                print(f"    {source} round {i + 1}: ran {len(ran)} variants, exit {rc}")
                if rc == 0:
                    break
                err = sh(ootest("select", "refine", str(suite), "--results", str(res)), env, work)
                m = re.search(r"refine: (\d+) of \d+ decisions changed", err)
                if m is not None and m[1] == "0":
                    break
            final = decisions(suite)
            stat = decisions(static)
            print(f"  [{source}] {n} variants")
            print(f"    before refinement, static evidence only: {quality(stat, truth)}")
            print(f"    before refinement, with the replay: {quality(first, truth)}")
            print(f"    after {rounds} round(s): {quality(final, truth)}")
            print(
                f"    executed to reach the final config: {len(executed)}/{n} = "
                f"{len(executed) / n:.1%} of the variants"
            )
            a, b, c = measures(stat, truth), measures(first, truth), measures(final, truth)
            table.append((
                f"{prof or device:7} {source:7}",
                f"{_pct(a['precision'])} {_pct(a['recall'])} {a['false_skips']:3}/{a['skips']:<3}",
                f"{_pct(b['precision'])} {_pct(b['recall'])} {b['false_skips']:3}/{b['skips']:<3}",
                f"{_pct(c['precision'])} {_pct(c['recall'])} {c['false_skips']:3}/{c['skips']:<3}"
                f" {c['proposals']:2}",
                f"{len(executed)}/{n} {c['no_truth']}",
            ))  # fmt: skip
    print()
    print(
        "profile source  | static: prec   recall false-skips | replay: prec   recall "
        "false-skips | refined: prec  recall false-skips proposals | executed no-truth"
    )
    for row in table:
        print(" | ".join(row))
    if not args.keep:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
