"""Which functional aten ops a backend serves by registering only their ``out=``
overload, for the installed torch (the finding in tests/backends/tinydev/README.md).

For every aten operator group with a functional and an ``out=`` overload whose
``out=`` has backend kernels (a CPU one), this asks torch's dispatcher what a
PrivateUse1 call of the functional overload runs when the backend registered no
kernel for it (``_dispatch_get_computed_kernel_for_dispatch_key``):

- ``structured``: the default-backend kernel torchgen generates for a structured
  op (``CompositeExplicitAutogradNonFunctional``): meta function, an
  ``empty_strided`` on the device, then the ``out=`` overload. Served.
- ``explicit``: a ``CompositeExplicitAutograd`` kernel: served when what it calls
  is (``abs`` calls ``abs.out``; a few call other ops).
- ``implicit``: a ``CompositeImplicitAutograd`` decomposition into other ops.
- ``none``: only backend kernels: the backend must register the functional
  overload itself; its ``out=`` does not help (``index_select``).

Run: ``TORCH_DEVICE_BACKEND_AUTOLOAD=0 python tests/backends/out_overloads.py [-v]``
(torch is imported; no backend is needed).
"""

from __future__ import annotations

import collections
import os
import sys


def classify() -> dict[str, list[tuple[str, str, bool]]]:
    """kind -> [(functional overload, out overload, in-place overload served too)]."""
    import torch
    import torchgen
    from torchgen.gen import get_grouped_native_functions, parse_native_yaml
    from torchgen.model import DispatchKey, NativeFunctionsGroup

    where = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native")
    parsed = parse_native_yaml(
        os.path.join(where, "native_functions.yaml"), os.path.join(where, "tags.yaml")
    )
    cpu = parsed.backend_indices[DispatchKey.CPU]
    kinds = {
        "CompositeExplicitAutogradNonFunctional": "structured",
        "CompositeExplicitAutograd": "explicit",
        "CompositeImplicitAutograd": "implicit",
    }

    def kind(name: str) -> str:
        if not torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "PrivateUse1"):
            return "none"
        debug = str(torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, "PrivateUse1"))
        return next((v for k, v in kinds.items() if f"Register{k}_" in debug), "other")

    out: dict[str, list[tuple[str, str, bool]]] = collections.defaultdict(list)
    for g in get_grouped_native_functions(parsed.native_functions):
        if not isinstance(g, NativeFunctionsGroup) or not cpu.has_kernel(g.out):
            continue
        functional = f"aten::{g.functional.func.name}"
        inplace = f"aten::{g.inplace.func.name}" if g.inplace is not None else None
        k = kind(functional)
        inplace_too = inplace is not None and kind(inplace) != "none"
        out[k].append((functional, f"aten::{g.out.func.name}", inplace_too))
    return out


def main(argv: list[str]) -> int:
    import torch

    found = classify()
    total = sum(map(len, found.values()))
    print(f"torch {torch.__version__}: {total} functional ops whose out= has a CPU kernel")
    for k in ("structured", "explicit", "implicit", "other", "none"):
        rows = found.get(k, [])
        names = ", ".join(f.removeprefix("aten::") for f, _, _ in rows[:8])
        print(f"  {k:10} {len(rows):4}  e.g. {names}")
        if "-v" in argv:
            for f, o, inplace in rows:
                print(f"    {f} <- {o}{'  (in-place too)' if inplace else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
