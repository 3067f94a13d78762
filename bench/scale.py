"""The documented selection pipeline on whole real upstream test files: each step's
time and peak memory, and the generated config's quality against the truth.

Given upstream test files (git-ignored copies under ``ROOT/test/``; ``TORCH_ROOT``
is set to ``ROOT``, so their IDs start ``test/``) and target devices, the commands
a user runs, each step as its own processes (``os.wait4``: wall, CPU of the
process tree, peak RSS of its largest process; a step of K shards run side by
side: wall until the last ends, CPU summed, the largest peak):

  index    ``ootest index build --root ROOT/test --device TARGET`` (the memory of
           the variants that exist for the target);
  capture  ``ootest ops capture FILES --device emu:full --shard I/K --tree-commit
           SHA`` for I = 1..K side by side (``--jobs K``), then ``ops merge``;
  replay   ``ootest ops replay --device TARGET`` of the merged op map;
  select   ``ootest select run --memory --ops --replay --device TARGET`` (``--probe``
           for emu: the capabilities a probe of the device declares, never the
           profile the device enforces; ``tiny`` is probed as any backend);
  run      the config's run: ``ootest run suite.yaml --shard I/K`` side by side;
  truth    every variant on the target: ``ootest run`` of a config making each
           variant of the files ``mandatory_success`` (no capability gating, no
           skip), ``--shard I/K`` side by side.

Quality, over the variants of the truth (a variant the test skipped itself is left
out of precision and recall): precision of ``mandatory_success`` (of those that
ran, the share that passed) and recall (of the variants that passed, the share
made mandatory), both as the sidecar decided and as the config's run applied the
config (the ``mode`` each result carries; a difference is a decision applied to a
variant it was not made for: listed), and the share of variants the config runs
on each CI run (not ``skip``) against the share that passes (issue 33 item 4: at
most 10 points more).

``-k EXPR`` restricts every step to a slice (pytest's ``-k``, passed through with
``--``); ``--keep DIR`` keeps the work folder (and a step whose output is there is
not run again with ``--reuse``; ``--score-only`` runs nothing and scores what is
there, a truth run cut short over the variants it reached). Torch runs with
``OMP_NUM_THREADS`` = cores / K in each shard (K shards side by side on one
machine), 1 thread elsewhere unless set.

A torch upgrade (issue 34 item 6): run the pipeline under the new torch (its
interpreter runs this script) with ``--refresh-from OLD``, OLD the ``--keep``
folder of a run under the old torch: after this torch's truth, ``select refresh``
takes each target's config, evidence, memory, op map and replay from OLD (copies)
to this torch, exactly as a team's refresh does (delta capture, re-decide, run the
uncertain, refine), and the refreshed config is scored against this torch's truth;
its time compares with this run's own steps (index, capture, merge, replay,
select: a full pipeline). ``--refresh-only`` runs just the refresh against a kept
truth.

Usage: python bench/scale.py FILE [FILE ...] [--target emu:young] [--target tiny]
       [--jobs 2] [-k EXPR] [--keep DIR [--reuse | --score-only]] [--timeout 300]
       [--tree-commit SHA] [--refresh-from OLD [--refresh-only]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from select_quality import decisions, tinydev
from upgrade_history import PASSED, RAN, score, truth_config

ROOT = Path(__file__).resolve().parent.parent
PROG = "scale"


def fail(message: str) -> None:
    sys.exit(f"{PROG}: error: {message}")


@dataclass
class Step:
    """One step's measurement: wall and CPU seconds, the largest process's peak RSS."""

    name: str
    procs: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    rss_mb: float = 0.0
    note: str = ""
    rcs: list[int] = field(default_factory=list)


def ootest(*args: str) -> list[str]:
    return [sys.executable, "-m", "ootest.cli", *args]


class Runner:
    """Runs each step's processes side by side and measures them."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.env = work, env
        self.steps: list[Step] = []
        (work / "logs").mkdir(parents=True, exist_ok=True)

    def step(
        self,
        name: str,
        commands: list[list[str]],
        *,
        ok: tuple[int, ...] = (0,),
        env: dict[str, str] | None = None,
        cwds: list[Path] | None = None,
    ) -> Step:
        """Start every command at once (each its own log), wait for all."""
        st = Step(name, procs=len(commands))
        procs = []
        t0 = time.perf_counter()
        for i, argv in enumerate(commands):
            cwd = cwds[i] if cwds else self.work
            cwd.mkdir(parents=True, exist_ok=True)
            log = (self.work / "logs" / f"{name.replace(' ', '-')}-{i + 1}.log").open("w")
            procs.append(
                (
                    subprocess.Popen(
                        argv,
                        cwd=cwd,
                        env={**self.env, **(env or {})},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    ),
                    log,
                )
            )
        for p, log in procs:
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            log.close()
            st.cpu += ru.ru_utime + ru.ru_stime
            st.rss_mb = max(st.rss_mb, ru.ru_maxrss / 1024)
            st.rcs.append(p.returncode)
        st.wall = time.perf_counter() - t0
        bad = [(i, rc) for i, rc in enumerate(st.rcs) if rc not in ok]
        if bad:
            i, rc = bad[0]
            log_path = self.work / "logs" / f"{name.replace(' ', '-')}-{i + 1}.log"
            tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
            fail(
                f"{name}: {' '.join(commands[i][2:7])} ... exit {rc}: "
                f"{tail[-1][:300] if tail else 'no output'} (log: {log_path})"
            )
        self.steps.append(st)
        print(
            f"  {name:<22} {st.wall:8.1f} s wall {st.cpu:8.1f} s CPU {st.rss_mb:7.0f} MB "
            f"x{st.procs}",
            flush=True,
        )
        return st

    def log_tail(self, name: str, i: int = 1, n: int = 3) -> list[str]:
        path = self.work / "logs" / f"{name.replace(' ', '-')}-{i}.log"
        return [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()][-n:]


def results(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Variant -> its result record, over the shards' results files."""
    from ootest.record.results import RunData

    return {
        v: r
        for v, r in RunData.load(*[p for p in paths if p.exists()]).results.items()
        if r.get("phase") != "collect"
    }


def quality(
    decided: dict[str, tuple[str, str]],
    run: dict[str, dict[str, Any]],
    truth: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """The measures of one target (see the module's docstring)."""
    outcome = {v: str(r["outcome"]) for v, r in truth.items()}
    ids = sorted(outcome)
    applied = {v: str(run[v].get("mode") or "unlisted") for v in ids if v in run}
    as_decided = {v: decided[v][0] for v in ids if v in decided}
    d_tp, d_pred, _, d_prec, d_rec = score(as_decided, outcome)
    a_tp, a_pred, _, a_prec, a_rec = score(applied, outcome)
    differ = sorted(
        v for v in ids if v in applied and v in as_decided and applied[v] != as_decided[v]
    )
    ran_by_config = sum(1 for v in ids if applied.get(v, "skip") != "skip")
    executed = sum(1 for v in ids if v in run and run[v]["outcome"] != "skipped")
    n_pass = sum(1 for v in ids if outcome[v] in PASSED)
    ran_truth = sum(1 for v in ids if outcome[v] in RAN)
    mand_failed = sorted(
        v
        for v in ids
        if applied.get(v) == "mandatory_success"
        and v in run
        and run[v]["outcome"] not in PASSED
        and run[v]["outcome"] != "skipped"
    )
    missed = Counter(
        decided.get(v, ("unlisted", "undecided"))[1].split(":")[0]
        for v in ids
        if outcome[v] in PASSED and applied.get(v) != "mandatory_success"
    )
    return {
        "variants": len(ids),
        "truth": dict(sorted(Counter(outcome.values()).items())),
        "truth_ran": ran_truth,
        "passing": n_pass,
        "decided": {"tp": d_tp, "mandatory_ran": d_pred, "precision": d_prec, "recall": d_rec},
        "applied": {"tp": a_tp, "mandatory_ran": a_pred, "precision": a_prec, "recall": a_rec},
        "no_decision": sum(1 for v in ids if v not in decided),
        "no_config_result": sum(1 for v in ids if v not in run),
        "applied_otherwise": [(v, as_decided[v], applied[v]) for v in differ],
        "mandatory_not_passing": [(v, run[v]["outcome"], _headline(run[v])) for v in mand_failed],
        "passing_not_mandatory_by_reason": dict(missed.most_common()),
        "config_modes": dict(sorted(Counter(applied.values()).items())),
        "config_outcomes": dict(
            sorted(Counter(str(run[v]["outcome"]) for v in ids if v in run).items())
        ),
        "share_run": ran_by_config / len(ids) if ids else 0.0,
        "share_executed": executed / len(ids) if ids else 0.0,
        "share_passing": n_pass / len(ids) if ids else 0.0,
    }


def _headline(rec: dict[str, Any]) -> str:
    from ootest.record.results import headline

    return headline(rec.get("message"))


def sharded(base: list[str], k: int, res: Path) -> list[list[str]]:
    """K shards of one run, each writing its results, logs and reports into its own
    folder ``res/sI`` (also its working folder: its ``.ootest/``)."""
    shard = (lambda i: ["--shard", f"{i}/{k}"]) if k > 1 else (lambda i: [])
    return [
        [*base, *shard(i), "--results", str(res / f"s{i}" / "results.jsonl")]
        for i in range(1, k + 1)
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("files", nargs="+", type=Path, help="upstream test files under ROOT/test/")
    p.add_argument(
        "--target",
        action="append",
        help="emu:PROFILE or tiny (repeatable; default emu:young and tiny)",
    )
    p.add_argument("--jobs", type=int, default=2, help="shards side by side (capture and runs)")
    p.add_argument("-k", dest="expr", help="pytest -k expression: a slice of the files")
    p.add_argument("--keep", type=Path, help="keep the work folder here")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: skip the capture, index and truth steps whose output is there already",
    )
    p.add_argument("--timeout", type=int, default=300, help="per-test timeout of every run")
    p.add_argument(
        "--tree-commit",
        default="0" * 40,
        help="the commit the files come from (recorded by the shards, checked by the merge)",
    )
    p.add_argument(
        "--score-only",
        action="store_true",
        help="with --keep: run nothing, score the kept config, its run and the truth (a truth "
        "run cut short scores the variants it reached)",
    )
    p.add_argument("--json", type=Path, help="write every measure here")
    p.add_argument(
        "--refresh-from",
        type=Path,
        metavar="OLD",
        help="the work folder (--keep) of a run under the old torch: its config, memory, op "
        "map and replay of each target are refreshed to this torch by `select refresh`, and "
        "the refreshed config scored against this run's truth (issue 34 item 6)",
    )
    p.add_argument(
        "--refresh-only",
        action="store_true",
        help="with --keep and --refresh-from: run only the refresh, scored against the kept truth",
    )
    args = p.parse_args()
    if args.refresh_only and (args.keep is None or args.refresh_from is None):
        fail("--refresh-only needs --keep DIR (with its truth) and --refresh-from OLD")
    if args.score_only and args.keep is None:
        fail("--score-only needs --keep DIR (the work folder of an earlier run)")
    sys.path.insert(0, str(ROOT / "src"))
    files = [f.resolve() for f in args.files]
    for f in files:
        if not f.is_file() or f.parent.name != "test":
            fail(f"{f}: expected an existing test file in a folder named test/")
    troot = files[0].parent.parent
    if any(f.parent.parent != troot for f in files):
        fail("every file must be in the same ROOT/test/ folder")
    targets = args.target or ["emu:young", "tiny"]
    k = max(1, args.jobs)
    work = (args.keep or Path(tempfile.mkdtemp(prefix="ootest-scale-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCH_ROOT": str(troot), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env.pop("PYTEST_ADDOPTS", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    shard_env = {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // k))}
    extra = ["--", "-k", args.expr] if args.expr else []
    tiny_env: dict[str, str] = {}
    if "tiny" in targets:
        folder, variables = tinydev()
        tiny_env = {**variables, "PYTHONPATH": os.pathsep.join([folder, env["PYTHONPATH"]])}
    load = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"{PROG}: {len(files)} file(s) under {troot}, targets {', '.join(targets)}, "
        f"{k} shard(s), slice {args.expr or 'none'}; work {work}; load {load[0]:.1f}",
        flush=True,
    )
    r = Runner(work, env)
    file_args = [str(f) for f in files]
    reuse = args.keep is not None and args.reuse

    ops = work / "ops.db"
    if not args.score_only and not args.refresh_only and not (reuse and ops.exists()):
        cap = work / "capture"
        shutil.rmtree(cap, ignore_errors=True)
        cap.mkdir()
        base = ootest(
            "ops",
            "capture",
            *file_args,
            "--device",
            "emu:full",
            "--timeout",
            str(args.timeout),
            "-q",
        )
        if k == 1:
            cmds = [[*base, "--db", str(cap / "shard-1.db"), *extra]]
        else:
            cmds = [
                [
                    *base,
                    "--db",
                    str(cap / f"shard-{i}.db"),
                    "--shard",
                    f"{i}/{k}",
                    "--tree-commit",
                    args.tree_commit,
                    *extra,
                ]
                for i in range(1, k + 1)
            ]
        r.step("ops capture", cmds, env=shard_env)
        if k == 1:
            shutil.copy(cap / "shard-1.db", ops)
        else:
            ops.unlink(missing_ok=True)
            r.step(
                "ops merge",
                [
                    ootest(
                        "ops",
                        "merge",
                        "--db",
                        str(ops),
                        "--tree-commit",
                        args.tree_commit,
                        *[str(cap / f"shard-{i}.db") for i in range(1, k + 1)],
                    )
                ],
            )
        stats = subprocess.run(
            ootest("ops", "stats", "--db", str(ops), "--json"),
            env=env,
            capture_output=True,
            text=True,
        )
        (work / "ops-stats.json").write_text(stats.stdout)

    report: dict[str, Any] = {
        "files": [str(f.relative_to(troot)) for f in files],
        "slice": args.expr,
        "jobs": k,
        "load_start": load,
        "date": started,
        "targets": {},
    }
    for target in targets:
        tag = target.replace(":", "-")
        tw = work / tag
        tw.mkdir(exist_ok=True)
        t_env = tiny_env if target == "tiny" else {}
        print(f"{target}:", flush=True)
        suite, run_dir, truth_dir = tw / "suite.yaml", tw / "run", tw / "truth"
        if args.refresh_only:
            report["targets"][target] = {
                "refresh": refreshed(
                    r, args.refresh_from / tag, tw, troot, target, args.timeout, t_env, truth_dir
                )
            }
            continue
        if args.score_only:
            q = quality(
                decisions(suite),
                results(sorted(run_dir.glob("s*/results.jsonl"))),
                results(sorted(truth_dir.glob("s*/results.jsonl"))),
            )
            report["targets"][target] = q
            print_quality(target, q)
            continue
        mem = tw / "memory.db"
        if not (reuse and mem.exists()):
            mem.unlink(missing_ok=True)
            r.step(
                f"index build {tag}",
                [
                    ootest(
                        "index",
                        "build",
                        "--root",
                        str(troot / "test"),
                        "--device",
                        target,
                        "--db",
                        str(mem),
                        *extra,
                    )
                ],
                env=t_env,
            )
        replay = tw / "replay.jsonl"
        r.step(
            f"ops replay {tag}",
            [
                ootest(
                    "ops",
                    "replay",
                    "--db",
                    str(ops),
                    "--device",
                    target,
                    "--out",
                    str(replay),
                    "-q",
                )
            ],
            env=t_env,
        )
        probe = ["--probe"] if target.startswith("emu") else []
        r.step(
            f"select run {tag}",
            [
                ootest(
                    "select",
                    "run",
                    "--memory",
                    str(mem),
                    "--ops",
                    str(ops),
                    "--device",
                    target,
                    *probe,
                    "--replay",
                    str(replay),
                    "--save-detected",
                    str(tw / "detected.json"),
                    "--out",
                    str(suite),
                )
            ],
            env=t_env,
        )
        select_note = r.log_tail(f"select run {tag}", n=4)

        def run_all(
            name: str, config: Path, out: Path, target: str = target, t_env: dict[str, str] = t_env
        ) -> None:
            """``ootest run CONFIG`` in K shards side by side, each in ``out/sI``."""
            shutil.rmtree(out, ignore_errors=True)
            base = ootest(
                "run", str(config), "--device", target, "--timeout", str(args.timeout), "-q"
            )
            r.step(
                name,
                [[*c, *extra] for c in sharded(base, k, out)],
                ok=(0, 1, 3),
                env={**shard_env, **t_env},
                cwds=[out / f"s{i}" for i in range(1, k + 1)],
            )

        run_all(f"config run {tag}", suite, run_dir)
        if not (reuse and (truth_dir / "s1" / "results.jsonl").exists()):
            all_yaml = tw / "all.yaml"
            truth_config(all_yaml, [str(f.relative_to(troot)) for f in files])
            run_all(f"truth run {tag}", all_yaml, truth_dir)
        q = quality(
            decisions(suite),
            results(sorted(run_dir.glob("s*/results.jsonl"))),
            results(sorted(truth_dir.glob("s*/results.jsonl"))),
        )
        q["select_note"] = select_note
        report["targets"][target] = q
        print_quality(target, q)
        if args.refresh_from is not None:
            report["targets"][target]["refresh"] = refreshed(
                r, args.refresh_from / tag, tw, troot, target, args.timeout, t_env, truth_dir
            )
    report["steps"] = [s.__dict__ for s in r.steps]
    report["load_end"] = os.getloadavg()
    report["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print()
    print(f"{'step':<24} {'procs':>5} {'wall s':>9} {'CPU s':>9} {'peak MB':>8}")
    for s in r.steps:
        print(f"{s.name:<24} {s.procs:>5} {s.wall:>9.1f} {s.cpu:>9.1f} {s.rss_mb:>8.0f}")
    print(f"load average at the end: {report['load_end'][0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def refreshed(
    r: Runner,
    old: Path,
    tw: Path,
    troot: Path,
    target: str,
    timeout: int,
    t_env: dict[str, str],
    truth_dir: Path,
) -> dict[str, Any]:
    """``select refresh`` of the old torch's config to this one, as a team runs it:
    the config, its evidence, memory, op map and replay as the old run left them,
    copied (the old folder is not changed); the device probed. Its steps' times
    and the refreshed config's quality against this torch's truth."""
    rw = tw / "refresh"
    shutil.rmtree(rw, ignore_errors=True)
    rw.mkdir()
    for name in ("suite.yaml", "suite.evidence.jsonl", "memory.db", "replay.jsonl"):
        shutil.copy(old / name, rw / name)
    shutil.copy(old.parent / "ops.db", rw / "ops.db")
    probe = ["--probe"] if target.startswith("emu") else []
    st = r.step(
        f"select refresh {target.replace(':', '-')}",
        [
            ootest(
                "select",
                "refresh",
                "--config",
                str(rw / "suite.yaml"),
                "--memory",
                str(rw / "memory.db"),
                "--root",
                str(troot / "test"),
                "--ops",
                str(rw / "ops.db"),
                "--replay",
                str(rw / "replay.jsonl"),
                "--device",
                target,
                *probe,
                "--timeout",
                str(timeout),
                "--work",
                str(rw / "work"),
            )
        ],
        env=t_env,
    )
    facts = json.loads((rw / "work" / "state.json").read_text()).get("facts", {})
    decided = decisions(rw / "suite.yaml")
    q = quality(decided, {}, results(sorted(truth_dir.glob("s*/results.jsonl"))))
    q["decided_modes"] = dict(sorted(Counter(m for m, _ in decided.values()).items()))
    d = q["decided"]
    print(f"  refresh from {old}: {st.wall:.1f} s wall, {st.cpu:.1f} s CPU")
    for key in ("memory_diff", "upgrade"):
        fact = facts.get(key)
        if fact:
            print(f"    {key}: {fact if isinstance(fact, str) else fact.get('summary')}")
    print(f"    capture: {(facts.get('capture') or {}).get('summary', 'none')}")
    print(f"    run: {facts.get('run')}")
    print(
        "    steps (s): " + ", ".join(f"{k} {v}" for k, v in (facts.get("seconds") or {}).items())
    )
    print(
        "    steps (CPU s): "
        + ", ".join(f"{k} {v}" for k, v in (facts.get("cpu_seconds") or {}).items())
    )
    print(
        f"    refreshed config, as decided: precision {d['precision']:.1%} "
        f"({d['tp']}/{d['mandatory_ran']}), recall {d['recall']:.1%} ({d['tp']}/{q['passing']}); "
        f"modes {q['decided_modes']}"
    )
    return {"wall": st.wall, "cpu": st.cpu, "rss_mb": st.rss_mb, "facts": facts, "quality": q}


def print_quality(target: str, q: dict[str, Any]) -> None:
    d, a = q["decided"], q["applied"]
    print(f"  {q['variants']} variants; truth {q['truth']}")
    print(f"  config's modes {q['config_modes']}; its run {q['config_outcomes']}")
    for label, m in (("as decided", d), ("as the run applied it", a)):
        print(
            f"  {label}: precision {m['precision']:.1%} ({m['tp']}/{m['mandatory_ran']}), "
            f"recall {m['recall']:.1%} ({m['tp']}/{q['passing']})"
        )
    print(
        f"  the config runs {q['share_run']:.1%} of the variants (executes "
        f"{q['share_executed']:.1%}); {q['share_passing']:.1%} pass"
    )
    print(f"  passing but not mandatory, by reason: {q['passing_not_mandatory_by_reason']}")
    if q["no_decision"] or q["no_config_result"]:
        print(
            f"  {q['no_decision']} without a decision, {q['no_config_result']} without a "
            "result in the config's run"
        )
    if q["applied_otherwise"]:
        print(f"  {len(q['applied_otherwise'])} variants run under another mode than decided:")
        for v, dm, am in q["applied_otherwise"][:15]:
            print(f"    {v}: decided {dm}, applied {am}")
    if q["mandatory_not_passing"]:
        print(f"  {len(q['mandatory_not_passing'])} mandatory variants did not pass:")
        for v, o, h in q["mandatory_not_passing"][:15]:
            print(f"    {v}: {o}: {h[:160]}")


if __name__ == "__main__":
    raise SystemExit(main())
