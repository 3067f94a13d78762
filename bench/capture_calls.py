"""What the op capture's recorder costs per call (Note [Capture cost]), in one process.

The same calls on ``emu:full``, best of 15 each, without a mode, under a dispatch mode
that only calls the kernel (torch's wrapper of ``__torch_dispatch__`` included), and
under the capture's recorder (``ootest.plugin.opcapture._make_mode``, writing
nothing):

- ``add`` of two small device tensors, 200 times (an op with a kernel of emu's own);
- ``add`` of two CPU tensors, 200 times (off the device: neither recorded nor followed);
- ``abs`` of a small device tensor, 200 times (composite on emu: followed, 3 calls);
- ``unbind`` of a 1,024-row device tensor (1,024 ``select``, each followed into
  ``as_strided``: 2,049 calls reach the recorder).

Run it with another checkout's ``src`` first on ``PYTHONPATH`` to compare recorders.

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/capture_calls.py
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any


def main() -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import ootest.plugin.opcapture as oc
    from ootest.device.activate import DeviceSpec, activate_device

    activate_device(DeviceSpec.parse("emu:full"))

    class Nop(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            return func(*args, **(kwargs or {}))

    capture = types.SimpleNamespace(
        core=types.SimpleNamespace(device=types.SimpleNamespace(name="emu")),
        first_call=lambda name: None,
        first_dtypes=lambda name, dtypes: None,
        example=lambda name, spec: None,
    )
    recorder = oc._make_mode(capture)
    a, c = torch.ones(3, device="emu"), torch.ones(3)
    b = torch.randn(1024, 4, device="emu")
    works: dict[str, Callable[[], Any]] = {
        "add on emu x200": lambda: [torch.add(a, a) for _ in range(200)],
        "add on CPU x200": lambda: [torch.add(c, c) for _ in range(200)],
        "abs on emu x200": lambda: [torch.abs(a) for _ in range(200)],
        "unbind 1024 rows": lambda: b.unbind(),
    }

    def best(mode: Any, work: Callable[[], Any]) -> float:
        out = float("inf")
        for _ in range(15):
            t = time.perf_counter()
            if mode is None:
                work()
            else:
                if hasattr(mode, "start"):
                    mode.start()
                with mode:
                    work()
            out = min(out, time.perf_counter() - t)
        return out * 1e3

    print(f"recorder of {oc.__file__}")
    print(f"{'':18s} {'plain ms':>9s} {'nop mode':>9s} {'recorder':>9s} {'ratio':>6s}")
    for name, work in works.items():
        p, n, r = best(None, work), best(Nop(), work), best(recorder, work)
        print(f"{name:18s} {p:9.2f} {n:9.2f} {r:9.2f} {r / p:6.1f}")


if __name__ == "__main__":
    main()
