"""Cost of ``ootest run``'s supervision, and of recovering from one crash.

1. The example suite on emu: ``ootest run`` (supervised pytest, per-test timeout
   armed, in-flight tracking, guard, JUnit and HTML written) vs plain ``pytest``
   with the plugin and the same config (same tests, same outcomes, no
   supervision), run alternately in this one command; best of --repeat.
   Target: ratio <= 1.10.
2. Seconds lost per crash: an upstream-style emu file with 20 tests, run once
   with one test that segfaults in the middle and once with that test passing.
   The difference is what the restart costs (a new pytest process: torch import,
   emu load, collection).

Usage: .venv/bin/python bench/run_overhead.py [--repeat N]
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


def crash_suite(d: Path, crash: bool) -> Path:
    tests = []
    for i in range(20):
        body = "os.kill(os.getpid(), signal.SIGSEGV)" if crash and i == 10 else "pass"
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
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain = [py, "-m", "pytest", *FILES, "--ootest-config", str(CONFIG), "-q"]
        plain += ["-p", "no:cacheprovider"]
        ootest = [py, "-m", "ootest.cli", "run", str(CONFIG), "--timeout", "120", "-q"]
        timed(plain, work)  # warm the emu build cache and the page cache
        a, b = [], []
        for _ in range(args.repeat):
            a.append(timed(plain, work))
            b.append(timed(ootest, work))
        print("example suite on emu (59 tests), best of", args.repeat)
        print(f"  pytest + plugin (no supervision)   {min(a):7.2f} s")
        print(f"  ootest run (isolation + reports)   {min(b):7.2f} s")
        print(f"  ratio                              {min(b) / min(a):7.3f}   (target <= 1.10)")

        ok_dir, crash_dir = work / "ok", work / "crash"
        ok_dir.mkdir()
        crash_dir.mkdir()
        ok_cfg, crash_cfg = crash_suite(ok_dir, False), crash_suite(crash_dir, True)
        c, d = [], []
        for _ in range(args.repeat):
            c.append(timed([py, "-m", "ootest.cli", "run", str(ok_cfg), "-q"], ok_dir))
            d.append(timed([py, "-m", "ootest.cli", "run", str(crash_cfg), "-q"], crash_dir))
        print("20 emu tests, best of", args.repeat)
        print(f"  no crash                           {min(c):7.2f} s")
        print(f"  one SIGSEGV at test 11             {min(d):7.2f} s")
        print(f"  seconds lost per crash             {min(d) - min(c):7.2f} s")
        code = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"
        out = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True)
        print(f"  (for scale: import torch           {float(out.stdout):7.2f} s)")


if __name__ == "__main__":
    main()
