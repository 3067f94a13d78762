"""Start-up cost of `ootest relay gate` vs `import torch`, measured in one run.

Target: the gate answers in under 0.3 s and never imports torch.
Usage: python bench/relay_startup.py [FIXTURE]
FIXTURE is a dispatch envelope (a ``client_payload``); the default is the repository's
own tests/fixtures/crcr/push_ciflow_tag.json, so a clone needs nothing else.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests" / "fixtures" / "crcr" / "push_ciflow_tag.json"


def best(cmd: list[str], repeat: int = 7) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out = min(out, time.perf_counter() - t)
    return out


def main() -> int:
    fixture = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT)
    if not Path(fixture).is_file():
        print(
            f"relay_startup.py: FIXTURE {fixture}: expected a dispatch envelope (JSON file), "
            f"found no file; pass one, or none for {DEFAULT.relative_to(ROOT)}",
            file=sys.stderr,
        )
        return 1
    gate = [sys.executable, "-m", "ootest.cli", "relay", "gate", fixture]
    first = subprocess.run(gate, capture_output=True, text=True)
    if first.returncode != 0:  # a rejected envelope times the error path, not the gate
        why = (first.stderr.strip().splitlines() or ["no message"])[-1]
        print(
            f"relay_startup.py: FIXTURE {fixture}: expected an envelope the gate accepts, "
            f"found exit {first.returncode} ({why}); pass another",
            file=sys.stderr,
        )
        return 1
    probe = (
        "import sys, runpy; sys.argv=['ootest','relay','gate',"
        + repr(fixture)
        + "]\ntry:\n    runpy.run_module('ootest.cli', run_name='__main__')\n"
        + "except SystemExit:\n    pass\n"
        + "print('torch' in sys.modules)"
    )
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    t_gate = best(gate)
    t_python = best([sys.executable, "-c", "pass"])
    t_torch = best([sys.executable, "-c", "import torch"], repeat=3)
    print(f"fixture: {fixture}")
    print(f"{'command':32s} {'best s':>8s}")
    print(f"{'python -c pass':32s} {t_python:8.3f}")
    print(f"{'ootest relay gate FIXTURE':32s} {t_gate:8.3f}  (target < 0.3 s)")
    label = 'python -c "import torch"'
    print(f"{label:32s} {t_torch:8.3f}")
    print(f"ratio gate / import torch: {t_gate / t_torch:.3f}")
    print(f"torch imported by the gate: {imported.stdout.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
