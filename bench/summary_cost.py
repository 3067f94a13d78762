"""pytest's terminal summary after many failures, with and without ootest's
linear index (Note [Linear terminal summary]), measured side by side.

A generated test file holds N failing tests, each with a teardown that prints (so
every failure has a teardown section to find). Each run is a pytest subprocess with
``--ootest-results`` (which registers the ootest plugin, no torch, no device); the
baseline run blocks that part of the plugin (``-p no:ootest-summary``) and so
leaves pytest's own lookup in place. A conftest prints the seconds from the end of
the test loop to the end of the session: the summary's cost. At N and 4N a
linear summary grows about 4x, a quadratic one about 16x.

Usage: python bench/summary_cost.py [--n 2000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CONFTEST = """
import time, pytest
T = {}
@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    try:
        return (yield)
    finally:
        T["end"] = time.perf_counter()
def pytest_unconfigure(config):
    if "end" in T:
        print(f"\\nSUMMARY_SECONDS={time.perf_counter() - T['end']:.3f}")
"""

_TESTS = """
import pytest
@pytest.fixture
def noisy():
    yield
    print("teardown says something")
@pytest.mark.parametrize("i", range({n}))
def test_fails(noisy, i):
    assert i < 0
"""


def one(folder: Path, n: int, linear: bool) -> tuple[float, float, str]:
    (folder / "conftest.py").write_text(_CONFTEST)
    (folder / "test_many.py").write_text(_TESTS.replace("{n}", str(n)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOTEST_")}
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN",
         "--ootest-results", str(folder / "r.jsonl"), "test_many.py",
         *([] if linear else ["-p", "no:ootest-summary"])],
        cwd=folder, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    wall = time.perf_counter() - t
    m = re.search(r"SUMMARY_SECONDS=([\d.]+)", r.stdout)
    if m is None:
        raise SystemExit(f"no summary time in the output:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return float(m.group(1)), wall, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="failures in the small run (4x large)")
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-summary-"))
    print(f"{'failures':>9} {'summary':>12} {'pytest own':>11} {'ratio':>7}")
    outs: dict[tuple[int, bool], str] = {}
    for n in (args.n, 4 * args.n):
        row = []
        for linear in (True, False):
            d = base / f"{n}-{'linear' if linear else 'pytest'}"
            d.mkdir(parents=True, exist_ok=True)
            secs, _, out = one(d, n, linear)
            outs[(n, linear)] = re.sub(r"SUMMARY_SECONDS=.*|in [\d.]+s", "", out)
            row.append(secs)
        print(f"{n:>9} {row[0]:>11.2f}s {row[1]:>10.2f}s {row[1] / max(row[0], 1e-3):>6.1f}x")
        if outs[(n, True)] != outs[(n, False)]:
            raise SystemExit(f"the printed summary differs at {n} failures")
    print("printed summaries identical with and without the index")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
