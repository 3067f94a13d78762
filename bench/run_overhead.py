"""Cost of ``ootest run``'s supervision, and of recovering from one crash.

1. The example suite on emu: ``ootest run`` (supervised pytest, per-test timeout
   armed, in-flight tracking, guard, JUnit and HTML written) vs plain ``pytest``
   with the plugin and the same config (same tests, same outcomes, no
   supervision), run alternately in this one command; best of --repeat.
   Target: ratio <= 1.10.
2. Seconds lost per crash: an upstream-style emu file with 20 tests, run once
   with --crashes of them segfaulting and once with them passing; the
   difference divided by the crashes is what one restart costs. Measured with
   the fork server (the default, Note [Fork server]: pytest forked from a
   process that imported torch and loaded emu once) and with ``--fork off`` (a
   fresh pytest process per restart: torch import, emu load, collection),
   alternately in this one command. Target: <= 1.5 s per crash.

Usage: .venv/bin/python bench/run_overhead.py [--repeat N] [--crashes K] [--only-crash]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "emu_young.yaml"
FILES = [
    str(ROOT / "examples" / "suite" / f)
    for f in ("test_tensor_basics.py", "test_op_consistency.py")
]

CRASH_FILE = """
import os, signal
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestCrash(TestCase):
{tests}


instantiate_device_type_tests(TestCrash, globals())
"""


def timed(cmd: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False)
    return time.perf_counter() - t


def crash_suite(d: Path, crashes: int) -> Path:
    """20 tests, ``crashes`` of them (spread out, the first at test 11) segfaulting."""
    crashing = {(10 + 20 * k // max(crashes, 1)) % 20 for k in range(crashes)}
    tests = []
    for i in range(20):
        body = "os.kill(os.getpid(), signal.SIGSEGV)" if i in crashing else "pass"
        tests.append(
            f"    def test_{i:02d}(self, device):\n"
            f"        x = torch.ones(4, device=device)\n"
            f"        self.assertEqual((x + x).cpu().sum().item(), 8.0)\n"
            f"        {body}\n"
        )
    (d / "test_crash.py").write_text(CRASH_FILE.format(tests="\n".join(tests)))
    cfg = d / "cfg.yaml"
    cfg.write_text(
        "test_suite_config:\n  device: emu\n  files:\n    - path: ./test_crash.py\n"
        "      unlisted_test_mode: mandatory_success\n"
    )
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--crashes", type=int, default=5, help="crashing tests of the 20")
    ap.add_argument("--only-crash", action="store_true", help="skip the example-suite part")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if not args.only_crash:
            example_suite(py, work, args.repeat)
        ok_dir, crash_dir = work / "ok", work / "crash"
        ok_dir.mkdir()
        crash_dir.mkdir()
        ok_cfg, crash_cfg = crash_suite(ok_dir, 0), crash_suite(crash_dir, args.crashes)
        modes = {"forked (default)": [], "fresh (--fork off)": ["--fork", "off"]}
        times: dict[tuple[str, str], list[float]] = {}
        run = [py, "-m", "ootest.cli", "run"]
        timed([*run, str(ok_cfg), "-q"], ok_dir)  # warm the emu build and the page cache
        for _ in range(args.repeat):
            for mode, extra in modes.items():
                for kind, cfg, d in (("ok", ok_cfg, ok_dir), ("crash", crash_cfg, crash_dir)):
                    t = timed([*run, str(cfg), "-q", *extra], d)
                    times.setdefault((mode, kind), []).append(t)
        print(f"20 emu tests, {args.crashes} of them SIGSEGV, best of {args.repeat}")
        lost: dict[str, float] = {}
        for mode in modes:
            ok, bad = min(times[(mode, "ok")]), min(times[(mode, "crash")])
            lost[mode] = (bad - ok) / args.crashes
            print(
                f"  {mode:20} no crash {ok:6.2f} s  crashes {bad:6.2f} s  "
                f"lost per crash {lost[mode]:5.2f} s"
            )
        forked, fresh = lost["forked (default)"], lost["fresh (--fork off)"]
        print(
            f"  per crash, forked / fresh          {forked / fresh:7.3f}x (target: forked <= 1.5 s)"
        )
        code = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True)
        print(f"  (for scale: import torch           {float(out.stdout):7.2f} s)")


def example_suite(py: str, work: Path, repeat: int) -> None:
    plain = [py, "-m", "pytest", *FILES, "--ootest-config", str(CONFIG), "-q"]
    plain += ["-p", "no:cacheprovider"]
    ootest = [py, "-m", "ootest.cli", "run", str(CONFIG), "--timeout", "120", "-q"]
    timed(plain, work)  # warm the emu build cache and the page cache
    a, b = [], []
    for _ in range(repeat):
        a.append(timed(plain, work))
        b.append(timed(ootest, work))
    print("example suite on emu (59 tests), best of", repeat)
    print(f"  pytest + plugin (no supervision)   {min(a):7.2f} s")
    print(f"  ootest run (isolation + reports)   {min(b):7.2f} s")
    print(f"  ratio                              {min(b) / min(a):7.3f}   (target <= 1.10)")


if __name__ == "__main__":
    main()
