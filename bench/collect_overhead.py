"""Collection overhead of the ootest plugin, as ratios against plain pytest.

Builds a scaled-up upstream-style suite (one ``@ops(op_db)`` method plus
``@dtypes`` methods: several thousand emu variants) in a temporary folder and
times ``pytest --collect-only`` in one run, alternating:

  baseline   plain pytest, plugin disabled (-p no:ootest), emu registered by a tiny plugin
  ootest     the plugin with a 10,000-entry config (+ marks on every variant),
             and with the device only (marks, no config: the plugin's floor);
             the same config with an evidence sidecar deciding every variant
             (Note [Decisions people can see]): cached plan and no cache
  -k list    plain pytest with a 2,000-name skip list as -k "not a and not b ..."
             (as is: pytest 9 fails with RecursionError; and with the recursion
             limit raised by a one-line plugin, which works) and a 300-name one

Prints the best-of-N wall time of each and the ratios to the baseline
(target for ootest: <= 1.05). Usage: python bench/collect_overhead.py [--repeat N]

With ``$TORCH_ROOT/test/test_view_ops.py`` present (a real upstream file, kept
out of git) and a Torch Spyre config for it (``--config``: the real one is
``../shared/compat/torch-spyre/test_view_ops_config.yaml``; our own copy in
tests/fixtures/torch-spyre by default),
``--real`` times that instead: plain collection of the file on emu against the
plugin with the config, its plan cached and not (issue 28 item 18), cold (a fresh
Python each run, as every run is) and warm (the plan cache filled).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SUITE = """
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, ops)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase


class TestScaled(TestCase):
    @ops(op_db)
    def test_op(self, device, dtype, op):
        pass
"""
for _i in range(20):
    SUITE += f"""
    @dtypes(torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.float64)
    def test_plain_{_i}(self, device, dtype):
        pass
"""
SUITE += "\ninstantiate_device_type_tests(TestScaled, globals())\n"

LOADER = "import ootest.device.emu as e\ne.load('young')\n"


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _pytest(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str | None]:
    """(wall s, CPU s of the pytest process, its output or None/"FAILED: ...")."""
    cpu0 = _cpu()
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    if r.returncode != 0:
        last = (r.stdout + r.stderr).strip().splitlines()[-3:]
        return elapsed, cpu, None if not last else "FAILED: " + " | ".join(last)[-300:]
    return elapsed, cpu, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", help="keep the generated suite and config here")
    ap.add_argument(
        "--only",
        help="comma-separated substrings: time only the runs whose label has one "
        "(the baseline always runs)",
    )
    ap.add_argument("--real", action="store_true", help="the real upstream file and config")
    ap.add_argument("--config", type=Path, help="with --real: the config (Spyre's by default)")
    args = ap.parse_args()
    if args.real:
        real(args)
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(args.workdir or d)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "test_scaled.py").write_text(SUITE)
        (tmp / "bench_emu_loader.py").write_text(LOADER)
        (tmp / "bench_deep.py").write_text("import sys\nsys.setrecursionlimit(100_000)\n")
        env = {
            **os.environ,
            # the suite's helpers, and the ootest under test (a source tree's PYTHONPATH)
            "PYTHONPATH": os.pathsep.join(p for p in (str(tmp), os.environ.get("PYTHONPATH")) if p),
            "PYTORCH_TESTING_DEVICE_ONLY_FOR": "privateuse1",
        }
        base_args = ["-p", "no:ootest", "-p", "bench_emu_loader", "test_scaled.py"]
        _, _, listing = _pytest(base_args, tmp, env)  # warm-up, and the variant names
        assert listing is not None and not listing.startswith("FAILED"), listing
        names = [ln.split("::")[-1] for ln in listing.splitlines() if "::" in ln]
        print(f"suite: {len(names)} emu variants")

        # 10,000 config entries: real variant names first (op/dtype filters), then
        # names of tests that do not exist (stale entries cost matching time too).
        ops_dtypes = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent("""
                from torch.testing._internal.common_methods_invocations import op_db
                for op in op_db:
                    for d in ("float32", "float16", "int64", "bool", "bfloat16", "float64"):
                        print(op.full_name, d)
            """),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        modes = ["mandatory_success", "xfail", "skip", "xfail_strict"]
        lines = [
            "test_suite_config:",
            "  files:",
            "    - path: test_scaled.py",
            "      unlisted_test_mode: mandatory_success",
            "      tests:",
        ]
        n = 0
        for pair in ops_dtypes:
            if not pair.strip() or n >= 9000:
                continue
            op, dt = pair.split()
            lines.append(f"        - names: ['TestScaled::test_op[op={op},dtype={dt}]']")
            lines.append(f"          mode: {modes[n % 4]}")
            n += 1
        while n < 10_000:
            lines.append(f"        - names: [TestScaled::test_gone_{n}]")
            lines.append("          mode: skip")
            n += 1
        lines += [
            "  global:",
            "    supported_dtypes: [{name: float32}, {name: float16}, "
            "{name: int64}, {name: bfloat16}]",
        ]
        (tmp / "big.yaml").write_text("\n".join(lines) + "\n")
        kexpr = " and ".join(f"not {x}" for x in names[:2000])
        if args.repeat == 0:
            return

        cfg_args = ["--ootest-config", "big.yaml", "--ootest-device", "emu", "test_scaled.py"]
        _pytest(cfg_args, tmp, env)  # fills the plan cache
        # The same config with an evidence sidecar deciding every variant as the
        # config does (unlisted ones get its reason code and evidence).
        _pytest([*cfg_args, "--ootest-variants", "variants.jsonl"], tmp, env)
        (tmp / "side.yaml").write_text((tmp / "big.yaml").read_text())
        with open(tmp / "side.evidence.jsonl", "w") as fh:
            for line in (tmp / "variants.jsonl").read_text().splitlines():
                v = json.loads(line)
                if v.get("kind") != "variant" or v.get("mode") is None:
                    continue
                row = {"variant_id": v["variant_id"], "mode": v["mode"],
                       "reason": f"ops_supported:{v['op'] or 'none'}",
                       "evidence": [f"calls {v['op']}; every op declared", "passed on emu:full"],
                       "source": "rules"}  # fmt: skip
                fh.write(json.dumps({"decision": row, "evidence": {}, "fingerprint": ""}) + "\n")
        side_args = ["--ootest-config", "side.yaml", "--ootest-device", "emu", "test_scaled.py"]
        _pytest(side_args, tmp, env)  # fills its plan cache
        runs = {
            "baseline (plain pytest)": base_args,
            # The first run compiles the config into a plan cached in
            # $OOTEST_CACHE_DIR/plans; the later ones reuse it (plugin/plan.py).
            "ootest, 10,000 entries, cached plan": [*cfg_args],
            "ootest, 10,000 entries, no cache": [*cfg_args, "--ootest-no-cache"],
            "ootest, + sidecar, cached plan": [*side_args],
            "ootest, + sidecar, no cache": [*side_args, "--ootest-no-cache"],
            "ootest plugin, device only (no config)": [
                "--ootest-device",
                "emu",
                "test_scaled.py",
            ],
            "-k skip list, 2,000 names": [*base_args, "-k", kexpr],
            # pytest 9 parses -k recursively: 2,000 names need a higher recursion limit.
            "-k 2,000 names, recursion limit up": [*base_args, "-p", "bench_deep", "-k", kexpr],
            "-k skip list, 300 names": [
                *base_args,
                "-k",
                " and ".join(f"not {x}" for x in names[:300]),
            ],
        }
        if args.only:
            wanted = [w.strip() for w in args.only.split(",")]
            runs = {
                k: v
                for i, (k, v) in enumerate(runs.items())
                if i == 0 or any(w in k for w in wanted)
            }
        best = {k: float("inf") for k in runs}
        best_cpu = {k: float("inf") for k in runs}
        paired: dict[str, list[float]] = {k: [] for k in runs}
        failed: dict[str, str] = {}
        for _ in range(args.repeat):
            round_base = None
            for label, a in runs.items():
                if label in failed:
                    continue
                t, cpu, out = _pytest(a, tmp, env)
                if out is None or out.startswith("FAILED"):
                    failed[label] = out or "FAILED"
                    continue
                best[label] = min(best[label], t)
                best_cpu[label] = min(best_cpu[label], cpu)
                round_base = round_base or t  # the baseline runs first in each round
                paired[label].append(t / round_base)
        base = best["baseline (plain pytest)"]
        base_cpu = best_cpu["baseline (plain pytest)"]
        # Three statistics against noise on a shared machine: best-of-N wall time,
        # the median of the wall ratios of runs made back to back in one round, and
        # best-of-N CPU time of the pytest process (least disturbed by neighbours).
        head = ("best s", "ratio", "paired", "CPU s", "ratio")
        print(f"{'run':40s} " + " ".join(f"{h:>7s}" for h in head))
        for label, t in best.items():
            if label in failed:
                print(f"{label:40s} {'-':>7s}  {failed[label]}")
            else:
                med = statistics.median(paired[label])
                c = best_cpu[label]
                print(
                    f"{label:40s} {t:7.2f} {t / base:7.3f} {med:7.3f} {c:7.2f} {c / base_cpu:7.3f}"
                )
        _drop_plan(tmp)


def _table(runs: dict[str, list[str]], cwd: Path, env: dict[str, str], repeat: int) -> None:
    """Best-of-``repeat`` wall and CPU time of each run, and the ratios to the
    first (the baseline), rounds alternating the runs."""
    best = {k: float("inf") for k in runs}
    best_cpu = {k: float("inf") for k in runs}
    paired: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeat):
        round_base = None
        for label, a in runs.items():
            t, cpu, out = _pytest(a, cwd, env)
            if out is None or out.startswith("FAILED"):
                raise SystemExit(f"{label}: {out}")
            best[label] = min(best[label], t)
            best_cpu[label] = min(best_cpu[label], cpu)
            round_base = round_base or t
            paired[label].append(t / round_base)
    first = next(iter(runs))
    base, base_cpu = best[first], best_cpu[first]
    head = ("best s", "ratio", "paired", "CPU s", "ratio")
    print(f"{'run':40s} " + " ".join(f"{h:>7s}" for h in head))
    for label, t in best.items():
        med = statistics.median(paired[label])
        c = best_cpu[label]
        print(f"{label:40s} {t:7.2f} {t / base:7.3f} {med:7.3f} {c:7.2f} {c / base_cpu:7.3f}")


def real(args: argparse.Namespace) -> None:
    """Collection of real upstream test_view_ops.py on emu, plain and with Torch
    Spyre's real config (module docstring)."""
    torch_root = os.environ.get("TORCH_ROOT")
    test = Path(torch_root or "/nonexistent") / "test" / "test_view_ops.py"
    here = Path(__file__).resolve().parent.parent
    cfg = args.config or here / "tests" / "fixtures" / "torch-spyre" / "test_view_ops_config.yaml"
    if not test.is_file() or not cfg.is_file():
        raise SystemExit(f"--real needs $TORCH_ROOT/test/test_view_ops.py ({test}) and {cfg}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(args.workdir or d)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "bench_emu_loader.py").write_text(LOADER)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (str(tmp), os.environ.get("PYTHONPATH")) if p),
            "OOTEST_CACHE_DIR": str(tmp / "cache"),
        }
        base = ["-p", "no:ootest", "-p", "bench_emu_loader", str(test)]
        with_cfg = ["--ootest-config", str(cfg), "--ootest-device", "emu", str(test)]
        _, _, out = _pytest(base, tmp, env)  # warm-up (the OS's file cache)
        assert out is not None and not out.startswith("FAILED"), out
        _, _, out = _pytest(with_cfg, tmp, env)  # fills the plan cache
        assert out is not None and not out.startswith("FAILED"), out
        print(f"{test.name} with {cfg.name}: {sum('::' in ln for ln in out.splitlines())} items")
        runs = {
            "baseline (plain pytest, emu)": base,
            "ootest + Spyre config, cached plan": with_cfg,
            "ootest + Spyre config, no cache": [*with_cfg, "--ootest-no-cache"],
        }
        _table(runs, tmp, env, args.repeat)


def _drop_plan(tmp: Path) -> None:
    """Remove the plan this benchmark cached (its config lives in a temporary folder)."""
    from ootest.plugin.plan import PlanCache

    here = os.getcwd()
    os.chdir(tmp)  # the cache key holds the working folder pytest ran in
    try:
        for cfg in ("big.yaml", "side.yaml"):
            PlanCache.open(cfg, str(tmp), "emu").path.unlink(missing_ok=True)
    finally:
        os.chdir(here)


if __name__ == "__main__":
    main()
