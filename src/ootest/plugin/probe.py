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


# Note [Composites the probe cannot see through]
# A CompositeExplicitAutograd kernel with no ``out=`` overload of the same
# argument types builds its result from other ops: views (``detach``, ``t``)
# from the tensor's metadata, factories (``full``: ``empty`` then ``fill_``,
# ``_to_copy``: ``empty`` then ``copy_``) from kernels the backend has under
# other names. Which ops it calls is C++ the probe cannot read, so such an op
# counts as ``composite``; leaving it out would skip every variant that moves a
# tensor to the device (``_to_copy``) on a guess. It is the probe's weakest
# claim: ``--replay`` checks each recorded call of it, and a run corrects it.
# (Measured on emu:young, torch 2.13, ``python -m ootest.plugin.probe emu:young``:
# 2,013 ops, 1,470 of them composite, 295 generated ``out=`` wrappers served
# through their functional overload (``via=``); before those wrappers were tied
# to it, 2,281 ops, 2,033 composite: 268 wrappers of ops emu:young lacks among them.)


#: Unary ops one of which the fallback check calls (the first the backend has no
#: kernel of its own for, so that the call reaches the fallback).
_FALLBACK_PROBES = ("aten::neg", "aten::abs", "aten::sin", "aten::exp", "aten::sqrt")


def _fallback_works(torch: Any, name: str, own: set[str]) -> str | None:
    """None when the boxed PrivateUse1 fallback computes: one tiny call of an op
    the backend has no kernel for, on a tensor made on the device, read back;
    else why not. A fallback that only raises (a backend's "not implemented yet"
    hook) is no support (Note [What a backend supports])."""
    op = next((o for o in _FALLBACK_PROBES if o not in own), None)
    if op is None:
        return None  # every probe op has a kernel: nothing reaches the fallback to try
    try:
        x = torch.ones(2, device=name)
        y = getattr(torch.ops.aten, op.partition("::")[2]).default(x)
        y.cpu()
    except Exception as e:
        return f"{op} through it raised {type(e).__name__}: {str(e).strip()[:200]}"
    return None


def _runnable(torch: Any, name: str = "") -> tuple[dict[str, str], str | None]:
    """Note [What a backend supports]: every op a call of which can reach a kernel
    on the device, and how: ``kernel`` (registered for PrivateUse1),
    ``fallback`` (a boxed PrivateUse1 fallback that computes: a fallback that
    raises on one tiny call is no support), ``composite`` (torch's
    CompositeImplicitAutograd kernel, or a CompositeExplicitAutograd one of an op
    with no ``out=`` overload of its argument types, ``detach``, ``t``, ``full``,
    ``_to_copy``: Note [Composites the probe cannot see through]), or
    ``out=<overload>`` (a composite kernel
    that computes through the op's ``out=`` overload, as torch's structured ops and
    many others do: served when the backend registered that overload, as young
    backends with ``*.out`` kernels only do), or ``via=<overload>`` (an ``out=``
    overload whose kernel is torch's generated wrapper of the functional overload:
    served when that is). The ``out=`` overload is the one of
    the op's packet whose arguments have the op's types in order (names are not
    compared: ``input`` for ``self``); an op whose ``out=`` kernel the backend
    lacks is left out, as is one with kernels for other devices only, and an
    ``out=`` overload whose functional overload is not served. An
    ``AutogradPrivateUse1`` registration alone is no kernel: it wraps the
    backend's (or torch's) kernel for autograd and computes nothing itself.
    Returns the ops, and why a fallback there is no support (None: none, or it
    works)."""
    C = torch._C
    names = set(C._dispatch_get_all_op_names())
    own = set(_registrations(torch, "PrivateUse1") or ())
    fallback = _fallback(torch, "PrivateUse1")
    broken = _fallback_works(torch, name, own) if fallback and name else None
    if broken is not None:
        fallback = False
    packets: dict[str, list[str]] = {}
    for n in names:
        packets.setdefault(n.partition(".")[0], []).append(n)

    def has(op: str, key: str) -> bool:
        try:
            return bool(C._dispatch_has_kernel_for_dispatch_key(op, key))
        except RuntimeError:
            return False

    def composite(op: str) -> bool:
        return has(op, "CompositeImplicitAutograd") or has(op, "CompositeExplicitAutograd")

    def args(op: str, *, out: bool) -> list[str] | None:
        """The types of ``op``'s arguments, but its ``out=`` ones (None: not an
        ``out=`` overload when ``out``). Types, not names: an ``out=`` overload
        may call ``self`` ``input``."""
        head, _, overload = op.partition(".")
        try:
            schema = C._get_schema(head, overload)
        except RuntimeError:
            return None
        if out and not any(a.is_out for a in schema.arguments):
            return None
        return [str(a.type) for a in schema.arguments if not a.is_out]

    def out_of(op: str) -> str | None:
        """The ``out=`` overload taking the same arguments (in-place ops: of the
        functional packet, ``add_.Tensor`` -> ``add.out``)."""
        mine = args(op, out=False)
        head = op.partition(".")[0]
        for packet in dict.fromkeys((head, head.removesuffix("_"))):
            for other in sorted(packets.get(packet, ())):
                if other != op and args(other, out=True) == mine:
                    return other
        return None

    out: dict[str, str] = {}
    wrappers: list[str] = []  # CompositeExplicit out= overloads, decided last
    for op in sorted(names):
        if op in own:
            out[op] = "kernel"
        elif fallback:
            out[op] = "fallback"
        elif has(op, "CompositeImplicitAutograd"):
            out[op] = "composite"
        elif has(op, "CompositeExplicitAutograd") or has(
            op, "CompositeExplicitAutogradNonFunctional"
        ):
            target = out_of(op)
            if target is None:
                if args(op, out=True) is not None:
                    wrappers.append(op)  # an out= overload itself
                else:
                    # Note [Composites the probe cannot see through]
                    out[op] = "composite"
            elif composite(target):
                out[op] = "composite"
            elif target in own:
                out[op] = f"out={target}"
    # an out= overload whose kernel is torch's generated wrapper computes through
    # the functional overload taking the same arguments: served when that is
    for op in wrappers:
        mine = args(op, out=False)
        head = op.partition(".")[0]
        for other in sorted(packets.get(head, ())):
            if other in out and args(other, out=True) is None and args(other, out=False) == mine:
                out[op] = f"via={other}"
                break
    return out, broken


def _dtypes(torch: Any, name: str) -> list[str] | None:
    """The dtypes the device module declares, if it declares any (no standard
    attribute exists: ``supported_dtypes`` as a collection or a function)."""
    mod = getattr(torch, name, None)
    for attr in ("supported_dtypes", "get_supported_dtypes", "_supported_dtypes"):
        found = getattr(mod, attr, None)
        if callable(found):
            try:
                found = found()
            except Exception:
                continue
        if isinstance(found, (list, tuple, set, frozenset)) and found:
            names = [str(d).removeprefix("torch.") for d in found]
            return sorted(n for n in names if n.isidentifier())
    return None


def stage(what: str) -> None:
    """What the probe does now, for the parent (Note [The probe's deadline])."""
    from ootest.device.activate import STAGE

    print(f"{STAGE}{what}", file=sys.stderr, flush=True)


def probe(device: str) -> dict[str, Any]:
    from ootest.device.activate import DeviceSpec, activate_device

    spec = DeviceSpec.parse(device)
    activate_device(spec, stage)
    import torch

    stage(f"listing the ops {spec.name!r} registered")

    name = torch._C._get_privateuse1_backend_name()
    ops, broken = _runnable(torch, name)
    return {
        "device": device,
        "name": name,
        "torch": str(torch.__version__),
        "torch_git": str(getattr(torch.version, "git_version", "") or ""),
        "keys": {k: _registrations(torch, k) for k in KEYS},
        "fallback": _fallback(torch, "PrivateUse1"),
        "fallback_broken": broken,
        "compile": _compile(name),
        "distributed": _distributed(torch, name),
        "ops": ops,
        "dtypes": _dtypes(torch, name),
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
