"""Use case B across real upstream history: an upgraded config against the truth.

Two versions of real upstream test files (copies kept git-ignored, e.g. under
``.cache/history/{old,new}/test/``; ``--git MIRROR --pair FILE:OLD_REV:NEW_REV``
exports them from a local clone of pytorch or of a fork), under the torch of this
venv. Steps, in one command:

  index    ``ootest index build --device emu:full`` of each version (TORCH_ROOT set
           to the version's folder, so both name their files ``test/...``);
  capture  ``ootest ops capture`` of the old version on emu:full (the team's op
           map); with ``--fresh`` of the new version too (for the comparison only);
  select   ``select run`` of the old version for ``--device`` (the config a team
           has), then ``select refresh`` of it to the new version, exactly as a team
           runs it (its own memory, the delta captured into a copy of the old op
           map, the re-decided variants run on the device, refined with -k 1), and
           with ``--fresh`` a full ``select run`` of the new version; the device's
           ops and dtypes always by probing it (``--probe``), never its profile;
  truth    every variant of each version run on ``--device`` (``ootest run``, all
           mandatory): passed or not;
  score    per config, as ootest resolves it (people's entries and templates
           included): precision (of the variants it makes mandatory that ran, the
           share that passed) and recall (of the variants that passed, the share
           it makes mandatory); variants the test skipped itself are left out.

Printed: variants evaluated / total by the refresh, its delta capture, its run and
the seconds of each step, the diff's moved, added, modified and removed, and the
scores of the old config on the old version, the refreshed config (and the fresh
selection) on the new one, side by side.

Usage: python bench/upgrade_history.py [--git DIR --pair FILE:OLD:NEW ...]
       [--old DIR --new DIR] [--device emu:young] [--timeout 120] [--keep DIR] [--fresh]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROG = "upgrade_history"
PASSED = ("passed", "xpassed")
#: outcomes that say the variant ran (a skip by the test itself says nothing)
RAN = ("passed", "xpassed", "failed", "error", "crashed", "timeout", "xfailed")


def fail(message: str) -> None:
    sys.exit(f"{PROG}: error: {message}")


def sh(
    args: list[str],
    *,
    what: str,
    root: Path,
    cwd: Path,
    ok: tuple[int, ...] = (0,),
    src: Path = ROOT / "src",
) -> str:
    """Run an ootest command line (the ootest of ``src``) with TORCH_ROOT=``root``."""
    env = {**os.environ, "TORCH_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
    env.pop("PYTEST_ADDOPTS", None)
    t = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    if r.returncode not in ok:
        tail = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        fail(f"{what} failed (exit {r.returncode}): {tail[-1][:300] if tail else 'no output'}")
    print(f"    {wall:7.1f} s  {what}", flush=True)
    return r.stderr + r.stdout


def ootest(*args: str) -> list[str]:
    return [sys.executable, "-m", "ootest.cli", *args]


def export(git: Path, pairs: list[str], old: Path, new: Path) -> None:
    """Copies of FILE at OLD_REV and NEW_REV from a local clone (git-ignored folders)."""
    for pair in pairs:
        try:
            file, rev_old, rev_new = pair.split(":")
        except ValueError:
            fail(f"--pair {pair!r}: expected FILE:OLD_REV:NEW_REV")
        for rev, base in ((rev_old, old), (rev_new, new)):
            r = subprocess.run(
                ["git", "-C", str(git), "show", f"{rev}:{file}"], capture_output=True, text=True
            )
            if r.returncode != 0:
                fail(f"--pair {pair}: git show {rev}:{file} failed: {r.stderr.strip()[:200]}")
            dest = base / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(r.stdout)


def truth_config(path: Path, files: list[str]) -> None:
    lines = ["test_suite_config:", "  files:"]
    for key in files:
        lines += [
            f"    - path: ${{TORCH_ROOT}}/{key}",
            "      unlisted_test_mode: mandatory_success",
        ]
    path.write_text("\n".join(lines) + "\n")


def run_all(cfg: Path, root: Path, device: str, timeout: int, work: Path) -> dict[str, str]:
    """Variant -> outcome, every variant of the version run on the device."""
    from ootest.record.results import RunData

    results = work / (cfg.stem + ".jsonl")
    sh(
        ootest(
            "run",
            str(cfg),
            "--device",
            device,
            "--timeout",
            str(timeout),
            "--results",
            str(results),
            "-q",
        ),
        what=f"ootest run {cfg.name} on {device}",
        root=root,
        cwd=work,
        ok=(0, 1, 3),  # 3: the collection guard tripped (a file's collection failed)
    )
    data = RunData.load(results)
    return {
        vid: str(r["outcome"]) for vid, r in data.results.items() if r.get("phase") != "collect"
    }


def resolve(config: Path, root: Path, vids: list[str]) -> dict[str, str]:
    """Each variant's mode as ootest resolves it from ``config``."""
    from ootest.config.decide import decide
    from ootest.config.load import load_config
    from ootest.config.when import Context
    from ootest.opmap.enable import variant_from_id

    cfg = load_config(config, env={"TORCH_ROOT": str(root)}, check_paths=False)
    out: dict[str, str] = {}
    for vid in vids:
        file = vid.partition("::")[0]
        rf = next((f for f in cfg.files if f.path.as_posix().endswith("/" + file)), None)
        v = variant_from_id(vid)
        out[vid] = decide(rf, cfg.suite.global_, v, Context()).mode if rf and v else "unlisted"
    return out


def score(modes: dict[str, str], truth: dict[str, str]) -> tuple[int, int, int, float, float]:
    """(true positives, predicted mandatory that ran, passed, precision, recall)."""
    ran = {v: o for v, o in truth.items() if o in RAN}
    passed = {v for v, o in ran.items() if o in PASSED}
    predicted = {v for v, m in modes.items() if m == "mandatory_success" and v in ran}
    tp = len(predicted & passed)
    precision = tp / len(predicted) if predicted else 1.0
    recall = tp / len(passed) if passed else 1.0
    return tp, len(predicted), len(passed), precision, recall


def variants(db: Path) -> list[str]:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [str(v) for (v,) in con.execute("SELECT id FROM variants ORDER BY id")]
    finally:
        con.close()


def evaluate(
    device: str,
    work: Path,
    roots: dict[str, Path],
    diff: dict[str, Any],
    timeout: int,
    refine: bool = False,
    baseline: Path | None = None,
    capture: str = "emu:full",
    fresh: bool = False,
) -> None:
    """Run both versions on ``device``; select for it (old, upgraded, fresh); score.
    ``refine``: the old config is refined from the old version's run first (its
    observed results are the history an upgrade carries, or drops); ``baseline``:
    another ootest's ``src`` folder, whose upgrade is scored beside (the same
    memories, op maps and truth)."""
    old, new = roots["old"], roots["new"]
    tag = device.replace(":", "-")
    print(f"truth (every variant on {device}):", flush=True)
    truth = {}
    for side, root in roots.items():
        keys = sorted(f.relative_to(root).as_posix() for f in (root / "test").rglob("test_*.py"))
        cfg = work / f"{tag}-truth-{side}.yaml"
        truth_config(cfg, keys)
        if (work / f"{cfg.stem}.jsonl").exists():  # --keep: the run of an earlier call
            from ootest.record.results import RunData

            data = RunData.load(work / f"{cfg.stem}.jsonl").results
            truth[side] = {
                v: str(r["outcome"]) for v, r in data.items() if r.get("phase") != "collect"
            }
        else:
            truth[side] = run_all(cfg, root, device, timeout, work)
        print(f"    {side}: {dict(sorted(Counter(truth[side].values()).items()))}", flush=True)
    rows = []
    for label, src in (("", ROOT / "src"), *((("baseline ", baseline),) if baseline else ())):
        pre = tag + ("-base" if label else "")
        print(f"select for {device}{' with ' + str(src) if label else ''}:", flush=True)
        summary = select_all(
            pre, device, work, roots, src, refine, capture, timeout, fresh and not label
        )
        print(f"  {summary}", flush=True)
        if not label:
            rows.append(("old config, old version", work / f"{pre}-old.yaml", old, "old"))
        rows.append((f"{label}refreshed, new", work / f"{pre}-up.yaml", new, "new"))
        if fresh and not label:
            rows.append(("fresh select run, new", work / f"{pre}-fresh.yaml", new, "new"))
    counts = diff["counts"]
    moved_again = sum(1 for x in diff.get("moved", []) if x["reasons"])
    print(f"result ({device}):")
    print(
        f"  diff: {counts.get('moved', 0)} moved ({moved_again} with another change), "
        f"{counts.get('added', 0)} added, {len(diff['modified'])} modified, "
        f"{counts.get('removed', 0)} removed"
    )
    print(f"  {'config':<26} {'mandatory&ran':>13} {'passed':>7} {'precision':>10} {'recall':>7}")
    for name, cfg, root, side in rows:
        vids = sorted(truth[side])
        tp, pred, passed, prec, rec = score(resolve(cfg, root, vids), truth[side])
        print(f"  {name:<26} {pred:>13} {passed:>7} {prec:>10.1%} {rec:>7.1%}  (tp {tp})")
    ids = variants(work / "new.db")
    other = resolve(work / f"{tag}-fresh.yaml", new, ids) if fresh else {}
    for label, pre in (
        ("refreshed", tag),
        *((("baseline refreshed", f"{tag}-base"),) if baseline else ()),
    ):
        up = resolve(work / f"{pre}-up.yaml", new, ids)
        differ = sorted(v for v in up if other and up[v] != other[v])
        if other:
            print(f"  {label} vs fresh: {len(differ)} of {len(up)} variants resolve otherwise")
        path = work / f"{pre}-up.evidence.jsonl"
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        seen = [r for r in lines if r.get("evidence", {}).get("observed")]
        moved = [r for r in seen if r.get("moved_from")]
        print(
            f"  {label}: {len(lines)} evidence lines, {len(seen)} carry observed results "
            f"({len(moved)} of them moved)"
        )
        for v in differ[:8]:
            print(f"    {v}: {label} {up[v]}, fresh {other[v]}, truth {truth['new'].get(v, '-')}")


def select_all(
    pre: str,
    device: str,
    work: Path,
    roots: dict[str, Path],
    src: Path,
    refine: bool,
    capture: str,
    timeout: int,
    fresh: bool,
) -> str:
    """``{pre}-old.yaml`` (refined from the old run with ``refine``), ``{pre}-up.yaml``
    (what ``select refresh`` makes of it, exactly: its own memory of the new tree,
    the delta captured into a copy of the old op map, the re-decided variants run
    on ``device`` and refined with -k 1) and, with ``fresh``, ``{pre}-fresh.yaml`` (a
    full selection from a capture of the whole new version), selected by the ootest
    in ``src``. The device's ops and dtypes come from probing it (``--probe``),
    never from its profile. Returns the refresh's summary lines."""
    old, new = roots["old"], roots["new"]
    dev = ["--device", device, "--probe"]
    run = functools.partial(sh, cwd=work, src=src)
    run(
        ootest("select", "run", "--memory", "old.db", "--ops", "ops-old.db", *dev,
               "--out", f"{pre}-old.yaml"),
        what="select run (old)",
        root=old,
    )  # fmt: skip
    tag = device.replace(":", "-")
    if refine:  # the old version's run on the device becomes the config's history
        run(
            ootest("select", "refine", f"{pre}-old.yaml", "--results", f"{tag}-truth-old.jsonl"),
            what="select refine (old, from its run)",
            root=old,
        )
    # the team's files as a refresh finds them: the config, its memory, its op map
    shutil.copy(work / f"{pre}-old.yaml", work / f"{pre}-up.yaml")
    shutil.copy(work / f"{pre}-old.evidence.jsonl", work / f"{pre}-up.evidence.jsonl")
    shutil.copy(work / "old.db", work / f"{pre}-up-memory.db")
    shutil.copy(work / "ops-old.db", work / f"{pre}-up-ops.db")
    refresh = work / f"{pre}-up.refresh"
    shutil.rmtree(refresh, ignore_errors=True)
    delta = ["--capture-device", capture, "--capture-timeout", str(timeout)]
    out = run(
        ootest("select", "refresh", "--config", f"{pre}-up.yaml", "--memory",
               f"{pre}-up-memory.db", "--root", str(new / "test"), "--ops", f"{pre}-up-ops.db",
               *dev, *(delta if src == ROOT / "src" else []), "-k", "1", "--timeout",
               str(timeout), "--work", str(refresh)),
        what="select refresh (the upgrade)",
        root=new,
    )  # fmt: skip
    state = json.loads((refresh / "state.json").read_text())
    facts = state.get("facts", {})
    lines = [
        f"{(facts.get('upgrade') or {}).get('summary', '')}",
        f"{(facts.get('capture') or {}).get('summary', 'no capture step')}",
        f"run on {device}: {facts.get('run', {})}",
        "refresh steps (s): "
        + ", ".join(f"{k} {v}" for k, v in (facts.get("seconds") or {}).items()),
    ]
    del out
    if fresh:
        run(
            ootest("select", "run", "--memory", "new.db", "--ops", "ops-new.db", *dev,
                   "--out", f"{pre}-fresh.yaml"),
            what="select run (fresh, new: a capture of the whole new version)",
            root=new,
        )  # fmt: skip
    return "\n  ".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--git", type=Path, help="a local clone to export --pair files from")
    p.add_argument("--pair", action="append", default=[], metavar="FILE:OLD_REV:NEW_REV")
    p.add_argument("--old", type=Path, default=ROOT / ".cache" / "history" / "old")
    p.add_argument("--new", type=Path, default=ROOT / ".cache" / "history" / "new")
    p.add_argument(
        "--device",
        action="append",
        help="a backend decided for and run on (repeatable; default emu:young)",
    )
    p.add_argument("--capture", default="emu:full", help="the device of the op captures")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="SRC",
        help="another ootest's src folder (git archive REV src | tar -x -C DIR): its upgrade "
        "is scored beside this checkout's",
    )
    p.add_argument(
        "--refine", action="store_true", help="refine the old config from the old version's run"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="also capture the whole new version and select it afresh, for comparison (the "
        "refresh itself never captures beyond the delta)",
    )
    p.add_argument("--keep", type=Path)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    old, new = args.old.absolute(), args.new.absolute()
    if args.pair:
        if args.git is None:
            fail("--pair needs --git DIR (a local clone holding both revisions)")
        export(args.git, args.pair, old, new)
    for side in (old, new):
        if not (side / "test").is_dir():
            fail(f"{side}: no test/ folder; pass --old/--new or --git with --pair")
    files = sorted(f.relative_to(new).as_posix() for f in (new / "test").rglob("test_*.py"))
    work = args.keep.absolute() if args.keep else Path(tempfile.mkdtemp(prefix="ootest-history-"))
    work.mkdir(parents=True, exist_ok=True)
    roots = {"old": old, "new": new}
    print(f"old: {old}\nnew: {new}\nfiles: {', '.join(files)}\nwork: {work}", flush=True)

    sides = ("old", "new") if args.fresh else ("old",)
    built = [work / n for n in ("old.db", "new.db", *(f"ops-{side}.db" for side in sides))]
    if args.keep and all(p.exists() for p in built):
        print(f"index and capture: kept from an earlier run in {work}", flush=True)
    else:
        print("index and capture (emu:full):", flush=True)
        for side, root in roots.items():
            sh(
                ootest(
                    "index",
                    "build",
                    "--root",
                    str(root / "test"),
                    "--db",
                    str(work / f"{side}.db"),
                    "--device",
                    args.capture,
                    "--json",
                ),
                what=f"index build ({side})",
                root=root,
                cwd=work,
            )
            if side not in sides:  # the refresh captures the delta of the new version
                continue
            sh(
                ootest(
                    "ops",
                    "capture",
                    str(root / "test"),
                    "--device",
                    args.capture,
                    "--db",
                    str(work / f"ops-{side}.db"),
                    "--timeout",
                    str(args.timeout),
                    "-q",
                ),
                what=f"ops capture ({side})",
                root=root,
                cwd=work,
                ok=(0, 1),
            )
    diff = json.loads(
        sh(
            ootest("index", "diff", str(work / "old.db"), str(work / "new.db"), "--json"),
            what="index diff",
            root=new,
            cwd=work,
        )
    )
    print(f"  diff: {diff['summary']}", flush=True)

    for device in args.device or ["emu:young"]:
        evaluate(
            device, work, roots, diff, args.timeout, args.refine, args.baseline, args.capture,
            args.fresh,
        )  # fmt: skip
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
