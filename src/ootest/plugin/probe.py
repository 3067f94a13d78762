"""The child process of ``ootest select scope``: which extension points a backend hooks.

Run as ``python -m ootest.plugin.probe DEVICE``; loads the backend as the plugin
does (``emu[:profile]`` or ``module:name``), asks torch what it registered and
prints one JSON object. Only this process imports torch. Modules a backend
never imported (``torch._dynamo``, ``torch._inductor``) are not imported here
either: a backend that registered nothing there left them unloaded, and
importing them would cost seconds for nothing.
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: Dispatch keys whose kernels say which extension points a backend hooks.
KEYS = (
    "PrivateUse1",
    "AutogradPrivateUse1",
    "SparsePrivateUse1",
    "SparseCsrPrivateUse1",
    "QuantizedPrivateUse1",
    "NestedTensorPrivateUse1",
)


def _registrations(torch: Any, key: str) -> list[str] | None:
    try:
        return sorted(torch._C._dispatch_get_registrations_for_dispatch_key(key))
    except (RuntimeError, AttributeError):
        return None  # a key this torch does not know


def _fallback(torch: Any, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, key)))
    except (RuntimeError, AttributeError, TypeError):
        return False


def _compile(name: str) -> list[str]:
    """torch.compile backends for the device: an Inductor codegen registered for it,
    dynamo backends registered from outside torch, and installed entry points."""
    out: list[str] = []
    common = sys.modules.get("torch._inductor.codegen.common")
    if common is not None:
        codegens = getattr(common, "device_codegens", {})
        if name in codegens:
            sched = getattr(codegens[name], "scheduling", None)
            what = getattr(sched, "__qualname__", None) or type(sched).__name__
            out.append(f"inductor: codegen registered for {name!r} ({what})")
    registry = sys.modules.get("torch._dynamo.backends.registry")
    if registry is not None:
        for backend, fn in sorted(getattr(registry, "_COMPILER_FNS", {}).items()):
            module = str(getattr(fn, "__module__", "") or "")
            if module and not module.startswith("torch"):
                out.append(f"dynamo backend {backend!r} (registered by {module})")
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="torch_dynamo_backends"), key=lambda e: e.name):
        out.append(f"dynamo backend {ep.name!r} (entry point {ep.value})")
    return out


def _distributed(torch: Any, name: str) -> str | None:
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available():
        return None
    found = dist.Backend.default_device_backend_map.get(name)
    return str(found) if found else None


def probe(device: str) -> dict[str, Any]:
    from ootest.device.activate import DeviceSpec, activate_device

    spec = DeviceSpec.parse(device)
    activate_device(spec)
    import torch

    name = torch._C._get_privateuse1_backend_name()
    return {
        "device": device,
        "name": name,
        "torch": str(torch.__version__),
        "torch_git": str(getattr(torch.version, "git_version", "") or ""),
        "keys": {k: _registrations(torch, k) for k in KEYS},
        "fallback": _fallback(torch, "PrivateUse1"),
        "compile": _compile(name),
        "distributed": _distributed(torch, name),
    }


def main(argv: list[str]) -> int:
    from ootest.errors import UserError

    try:
        result = probe(argv[0])
    except UserError as e:
        print(str(e), file=sys.stderr)
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
