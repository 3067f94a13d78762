"""Overhead of the emu device against the CPU, measured side by side in one run.

1. Small ops: N iterations of add/mul/relu on 64-element tensors, emu vs CPU;
   prints the ratio and the fallback's added cost per op (microseconds).
2. Matmul-heavy step: mm of 384x384 matrices, emu vs CPU; ratio.
3. Start-up: `import torch` vs `import torch` + cached `emu.load()`, in fresh
   subprocesses; prints the added load time and its ratio to the torch import.

Usage: python bench/emu_overhead.py [--iters N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def _best(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _startup(code: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    args = ap.parse_args()

    import torch

    import ootest.device.emu as emu

    emu.load("young")
    torch.set_num_threads(1)

    def small(device: str) -> None:
        a = torch.ones(64, device=device)
        b = torch.full((64,), 0.5, device=device)
        for _ in range(args.iters):
            a = torch.relu(a * b + b)

    n_small_ops = 3 * args.iters

    def big(device: str) -> None:
        x = torch.randn(384, 384).to(device)
        for _ in range(5):
            x = torch.mm(x, x).clamp(-1, 1)

    print(f"{'workload':32s} {'cpu s':>9s} {'emu s':>9s} {'ratio':>7s}")
    cpu_s, emu_s = _best(lambda: small("cpu")), _best(lambda: small("emu"))
    print(
        f"{'small ops (' + str(n_small_ops) + ' ops)':32s} {cpu_s:9.4f} {emu_s:9.4f} "
        f"{emu_s / cpu_s:7.2f}"
    )
    print(f"  added cost per op through the fallback: {(emu_s - cpu_s) / n_small_ops * 1e6:.1f} us")
    cpu_b, emu_b = _best(lambda: big("cpu"), 3), _best(lambda: big("emu"), 3)
    print(f"{'matmul-heavy (5 x mm 384^2)':32s} {cpu_b:9.4f} {emu_b:9.4f} {emu_b / cpu_b:7.2f}")

    t_torch = _startup("import torch")
    t_emu = _startup("import torch, ootest.device.emu as e; e.load('young')")
    print(f"{'import torch':32s} {t_torch:9.3f} s")
    print(
        f"{'import torch + emu.load (cached)':32s} {t_emu:9.3f} s  "
        f"(load adds {t_emu - t_torch:.3f} s = {(t_emu - t_torch) / t_torch:.2f}x "
        "of the torch import)"
    )


if __name__ == "__main__":
    main()
