"""Use case B on real data: what a torch upgrade changed, and whether the index knew.

Not in CI (it installs a second torch, about 5.5 GB). Steps, in one command:

  env      the current interpreter is the *old* torch (the dev pin, 2.13.0+cpu);
           the *new* one lives in ``--venv`` (default ``.cache/venv-torch214``),
           created when missing: ``python -m venv``, ``pip install torch==2.14.0``
           (only the CUDA build is published; it imports and runs on a CPU-only
           machine), ootest's dependencies and ninja/numpy/expecttest. ootest
           itself comes from this checkout (PYTHONPATH), never installed there;
  build    ``ootest index build --device emu:PROFILE`` over the same test tree
           under each torch: the example suite, plus every file under
           ``$TORCH_ROOT/test`` when ``TORCH_ROOT`` is set (a partial copy is
           fine; a full checkout means thousands of files);
  entries  the OpInfo/ModuleInfo entries of the two torch versions: how many
           changed their full fingerprint (every attribute, every device type)
           and their device fingerprint (what emu sees, the one variants
           inherit), were added, were removed, per database;
  diff     ``ootest index diff OLD NEW``: the delta, by reason;
  run      on emu under *both* versions, the delta (modified, added, removed
           variants: ``mandatory_success``, the rest skipped) and its complement
           (the other way round), each an ``ootest run`` (emu is compiled once
           per torch build, Note in ``ootest.device.emu.build_location``);
  check    every variant whose outcome differs between the versions (or that
           exists under one only) must be in the delta: recall 100%, else exit 1;
           and how much of the delta actually changed outcome.

Usage: python bench/upgrade_delta.py [--venv DIR] [--torch 2.14.0] [--profile full]
       [--timeout 120] [--jobs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PROG = "upgrade_delta"
# what torch.testing._internal and the emu build need besides ootest's own dependencies
EXTRA_DEPS = ("ninja", "numpy", "expecttest")
FREE_GB_FOR_TORCH = 8  # the CUDA wheel and its nvidia packages: about 5.5 GB installed


def fail(message: str) -> None:
    """One line, the way every ootest user error reads; no traceback."""
    sys.exit(f"{PROG}: error: {message}")


def child_env() -> dict[str, str]:
    env = {**os.environ, "OOTEST_ROOT": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p
    )
    env.pop("PYTEST_ADDOPTS", None)
    return env


def sh(
    args: list[str], *, what: str, ok: tuple[int, ...] = (0,), cwd: Path = ROOT, fix: str = ""
) -> tuple[str, float]:
    """Run a command; on an unexpected exit, one line naming it and its last output line."""
    t = time.perf_counter()
    try:
        r = subprocess.run(args, capture_output=True, text=True, env=child_env(), cwd=cwd)
    except OSError as e:
        fail(f"{what}: cannot start {args[0]}: {e.strerror}" + (f"; {fix}" if fix else ""))
    wall = time.perf_counter() - t
    if r.returncode not in ok:
        tail = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
        last = tail[-1].strip()[:300] if tail else "no output"
        fail(f"{what} failed (exit {r.returncode}): {last}" + (f"; {fix}" if fix else ""))
    return r.stdout, wall


def torch_version(python: Path) -> str | None:
    r = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        env=child_env(),
    )
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_env(venv: Path, version: str) -> Path:
    """The new torch's interpreter: reused when it has ``version``, else made."""
    python = venv / "bin" / "python"
    fix = f"remove {venv} and run again, or pass --venv DIR"
    if not python.exists():
        try:
            venv.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            fail(f"{venv}: cannot create its folder ({e.strerror}); pass --venv DIR elsewhere")
        free_gb = shutil.disk_usage(venv.parent).free / 1e9
        if free_gb < FREE_GB_FOR_TORCH:
            fail(
                f"{venv.parent}: {free_gb:.1f} GB free; torch {version} needs about "
                f"{FREE_GB_FOR_TORCH} GB; free some space or pass --venv DIR on a larger disk"
            )
        print(f"creating {venv} (torch {version}: a download of about 3 GB) ...", flush=True)
        base = getattr(sys, "_base_executable", sys.executable)
        sh([base, "-m", "venv", str(venv)], what=f"creating the venv {venv}", fix=fix)
    have = torch_version(python)
    if have is None:
        _, wall = sh(
            [str(python), "-m", "pip", "install", "-q", f"torch=={version}"],
            what=f"pip install torch=={version} into {venv}",
            fix="check the network and the disk, then run again",
        )
        print(f"  installed torch {version} in {wall:.0f} s", flush=True)
        have = torch_version(python)
    if have is None or have.split("+")[0] != version:
        fail(f"{venv}: torch {have or 'not importable'} there, expected {version}; {fix}")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    probe = (
        "import ninja, numpy, expecttest, pydantic, yaml, rich, httpx, packaging, re2, ruamel.yaml"
    )
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
        sh(
            [str(python), "-m", "pip", "install", "-q", *deps, *EXTRA_DEPS],
            what=f"pip install ootest's dependencies into {venv}",
            fix="check the network, then run again",
        )
    return python


def build(python: Path, roots: list[Path], db: Path, profile: str, jobs: int) -> float:
    cmd = [str(python), "-m", "ootest.cli", "index", "build", "--db", str(db)]
    for r in roots:
        cmd += ["--root", str(r)]
    cmd += ["--device", f"emu:{profile}", "--jobs", str(jobs), "--json"]
    out, wall = sh(cmd, what=f"ootest index build ({python})")
    report = json.loads(out)
    print(f"    {wall:6.1f} s  {report['summary']}", flush=True)
    return wall


def entries(db: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(database, name) -> (full fingerprint, device fingerprint) of every indexed entry.

    The full fingerprint covers every public attribute, the dtype lists of every
    device type included; the device fingerprint, the one variants inherit, what
    the index's privateuse1 device sees (Note [Device-limited entry fingerprints]
    in ``ootest/memory/_torchdb.py``).
    """
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT db, name, full_fingerprint, fingerprint FROM entries")
        return {(d, n): (full, fp) for d, n, full, fp in rows}
    finally:
        con.close()


def variant_ids(db: Path) -> set[str]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {v for (v,) in con.execute("SELECT id FROM variants")}
    finally:
        con.close()


def entry_table(
    old: dict[tuple[str, str], tuple[str, str]], new: dict[tuple[str, str], tuple[str, str]]
) -> None:
    dbs = sorted({d for d, _ in old} | {d for d, _ in new})
    print(f"  {'database':<50} {'old':>5} {'new':>5} {'full':>8} {'device':>7} {'added':>6} "
          f"{'removed':>8}")  # fmt: skip
    tot = Counter[str]()
    for d in dbs:
        o = {n: v for (dd, n), v in old.items() if dd == d}
        n = {nn: v for (dd, nn), v in new.items() if dd == d}
        both = o.keys() & n.keys()
        row = Counter(
            old=len(o),
            new=len(n),
            full=sum(1 for k in both if o[k][0] != n[k][0]),
            device=sum(1 for k in both if o[k][1] != n[k][1]),
            added=len(n.keys() - o.keys()),
            removed=len(o.keys() - n.keys()),
        )
        tot.update(row)
        print(f"  {d.rpartition('.')[2]:<50} {row['old']:>5} {row['new']:>5} {row['full']:>8} "
              f"{row['device']:>7} {row['added']:>6} {row['removed']:>8}")  # fmt: skip
    print(f"  {'all':<50} {tot['old']:>5} {tot['new']:>5} {tot['full']:>8} {tot['device']:>7} "
          f"{tot['added']:>6} {tot['removed']:>8}")  # fmt: skip
    print("  (full: every attribute of every device type; device: what variants inherit)")


def config_name(vid: str) -> str:
    """``file::Class::method[axes]`` -> the config name addressing that one variant."""
    return vid.split("::", 1)[1]


def write_config(path: Path, files: dict[str, Path], ids: set[str], *, listed: str) -> int:
    """A config running ``ids`` (listed=mandatory_success, the rest skipped) or
    everything but ``ids`` (listed=skip). Returns how many files it names."""
    unlisted = "skip" if listed == "mandatory_success" else "mandatory_success"
    lines = ["test_suite_config:", "  files:"]
    n = 0
    for key, src in sorted(files.items()):
        names = sorted(config_name(v) for v in ids if v.startswith(key + "::"))
        if listed == "mandatory_success" and not names:
            continue  # nothing of this file runs
        n += 1
        lines += [f"    - path: {json.dumps(str(src))}", f"      unlisted_test_mode: {unlisted}"]
        if names:
            lines += ["      tests:", "        - names:"]
            lines += [f"            - {json.dumps(name)}" for name in names]
            lines += [f"          mode: {listed}"]
    path.write_text("\n".join(lines) + "\n")
    return n


def index_id(vid: str, keys: list[str]) -> str:
    """A run's variant ID under the index's name of its file: the run names a file
    relative to pytest's rootdir (``.cache/upstream/test/test_x.py`` when the copy
    is inside this checkout), the index relative to its root's parent (``test/test_x.py``)."""
    path, sep, rest = vid.partition("::")
    for key in keys:
        if path == key or path.endswith("/" + key):
            return key + sep + rest
    return vid


def run(
    python: Path, config: Path, results: Path, profile: str, timeout: int, keys: list[str]
) -> tuple[dict[str, str], float]:
    """Variant -> outcome of the variants the config ran (not those it skipped)."""
    from ootest.record.results import RunData

    cmd = [str(python), "-m", "ootest.cli", "run", str(config), "--device", f"emu:{profile}"]
    cmd += ["--timeout", str(timeout), "--results", str(results), "-q"]
    _, wall = sh(cmd, what=f"ootest run {config.name} ({python})", ok=(0, 1), cwd=config.parent)
    data = RunData.load(results)
    out = {
        index_id(vid, keys): str(r["outcome"])
        for vid, r in data.results.items()
        if r.get("phase") != "collect" and r.get("mode") == "mandatory_success"
    }
    return out, wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--venv", type=Path, default=ROOT / ".cache" / "venv-torch214")
    p.add_argument("--torch", default="2.14.0", metavar="VERSION")
    p.add_argument("--profile", default="full")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--keep", type=Path)
    args = p.parse_args()

    old_py = Path(sys.executable)
    old_v = torch_version(old_py)
    if old_v is None:
        fail(f"{old_py}: torch is not importable; run this script with the dev venv's python")
    roots = [ROOT / "examples" / "suite"]
    files = {f"examples/suite/{f.name}": f for f in sorted(roots[0].glob("test_*.py"))}
    torch_root = os.environ.get("TORCH_ROOT")
    if torch_root:
        upstream = Path(torch_root).absolute() / "test"  # the runs start in another folder
        if not upstream.is_dir():
            fail(f"TORCH_ROOT={torch_root}: no test/ folder there; unset TORCH_ROOT or fix it")
        roots.append(upstream)
        for f in sorted(upstream.rglob("test_*.py")):
            files[f.relative_to(upstream.parent).as_posix()] = f
    new_py = ensure_env(args.venv, args.torch)
    new_v = torch_version(new_py)
    if new_v == old_v:
        fail(f"both interpreters have torch {old_v}; run with the dev venv (torch 2.13.0)")
    print(f"old: torch {old_v} ({old_py})\nnew: torch {new_v} ({new_py})")

    print(f"test tree: {len(files)} files under {', '.join(str(r) for r in roots)}")

    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-upgrade-"))
    base.mkdir(parents=True, exist_ok=True)
    dbs = {"old": base / "old.db", "new": base / "new.db"}
    pys = {"old": old_py, "new": new_py}

    print(f"build (the index under each torch, emu:{args.profile}):", flush=True)
    for side in ("old", "new"):
        print(f"  {side}:", flush=True)
        build(pys[side], roots, dbs[side], args.profile, args.jobs)

    print(f"OpInfo/ModuleInfo entries, torch {old_v} -> {new_v}:")
    old_e, new_e = entries(dbs["old"]), entries(dbs["new"])
    entry_table(old_e, new_e)
    out, _ = sh(
        [
            str(old_py),
            "-m",
            "ootest.cli",
            "index",
            "diff",
            str(dbs["old"]),
            str(dbs["new"]),
            "--json",
        ],
        what="ootest index diff",
    )
    diff = json.loads(out)
    modified = {m["id"]: m["reasons"] for m in diff["modified"]}
    added, removed = set(diff["added"]), set(diff["removed"])
    delta = set(modified) | added | removed
    print(f"delta: {diff['summary']}")
    entries_used = sorted(
        {
            r
            for rs in modified.values()
            for r in rs
            if ":" in r and r.split(":")[0] in ("opinfo", "moduleinfo")
        }
    )
    print(
        f"  reasons naming an entry: {len(entries_used)} ({', '.join(entries_used[:12])}"
        + (" ...)" if len(entries_used) > 12 else ")")
    )

    print(f"run on emu:{args.profile} (delta, then its complement, under each torch):", flush=True)
    outcome: dict[str, dict[str, str]] = {}
    walls: dict[tuple[str, str], float] = {}
    index_ids = {side: variant_ids(dbs[side]) for side in ("old", "new")}
    for side in ("old", "new"):
        here = index_ids[side]
        in_delta = here & delta
        outcome[side] = {}
        for part, ids, listed in (
            ("delta", in_delta, "mandatory_success"),
            ("complement", in_delta, "skip"),
        ):
            cfg = base / f"{side}-{part}.yaml"
            if write_config(cfg, files, ids, listed=listed) == 0:
                got, wall = {}, 0.0  # an empty delta: nothing to run
            else:
                res = base / f"{side}-{part}.jsonl"
                got, wall = run(pys[side], cfg, res, args.profile, args.timeout, list(files))
            walls[(side, part)] = wall
            twice = outcome[side].keys() & got.keys()
            if twice:
                fail(
                    f"{len(twice)} variants ran in both the delta and the complement, "
                    f"e.g. {min(twice)}"
                )
            outcome[side].update(got)
            print(
                f"    {side:<3} {part:<10} {len(got):>6} variants {wall:7.1f} s  "
                f"{dict(sorted(Counter(got.values()).items()))}",
                flush=True,
            )
        unknown = outcome[side].keys() - here
        missing = here - outcome[side].keys()
        if unknown or missing:
            print(
                f"  note ({side}): {len(unknown)} variants ran that the index does not list"
                f"{' e.g. ' + min(unknown) if unknown else ''}; "
                f"{len(missing)} indexed variants did not run"
                f"{' e.g. ' + min(missing) if missing else ''}"
            )

    old_o, new_o = outcome["old"], outcome["new"]
    differs = {v for v in old_o.keys() & new_o.keys() if old_o[v] != new_o[v]}
    only_one = old_o.keys() ^ new_o.keys()
    changed = differs | only_one
    missed = changed - delta
    recall = 1.0 - len(missed) / len(changed) if changed else 1.0
    transitions = Counter(f"{old_o.get(v, '-')} -> {new_o.get(v, '-')}" for v in changed)
    print("check:")
    print(f"  variants run: {len(old_o)} under {old_v}, {len(new_o)} under {new_v}")
    print(
        f"  outcome changed: {len(changed)} ({len(differs)} in both versions, "
        f"{len(only_one)} under one only): {dict(sorted(transitions.items()))}"
    )
    print(
        f"  recall: {len(changed) - len(missed)}/{len(changed)} = {recall:.1%} "
        "of them are in the delta"
    )
    hit = delta & changed
    ran = old_o.keys() | new_o.keys()
    print(
        f"  the delta: {len(hit)} of {len(delta)} variants changed outcome "
        f"({len(hit) / len(delta) if delta else 0.0:.1%}); the complement: "
        f"{len(missed)} of {len(ran - delta)}"
    )
    by_kind: Counter[str] = Counter()
    for v in hit:
        kinds = {r.split(":")[0] for r in modified.get(v, [])} or {
            "added" if v in added else "removed"
        }
        by_kind.update(kinds)
    if by_kind:
        print(
            f"  delta variants that changed outcome, by reason kind: {dict(by_kind.most_common())}"
        )
    for side in ("old", "new"):
        d, c = walls[(side, "delta")], walls[(side, "complement")]
        if d + c:
            print(
                f"  run time under {side}: delta {d:.1f} s + complement {c:.1f} s: "
                f"the delta alone is {d / (d + c):.2f} of both"
            )
    for v in sorted(missed)[:20]:
        print(f"  MISSED {v}: {old_o.get(v, '-')} -> {new_o.get(v, '-')}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"kept {base}")
    return 0 if not missed else 1


if __name__ == "__main__":
    raise SystemExit(main())
