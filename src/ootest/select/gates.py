"""What upstream's gating decorators do on a privateuse1 device (pure, no torch).

Note [Device gates]
A decorator of a device-generic test is a skip on our device only when the
installed torch's ``torch/testing/_internal/common_device_type.py`` (2.13)
makes it one for ``self.device_type`` = the privateuse1 backend's name:

- **skip**: ``onlyCPU``/``onlyCUDA``/``onlyMPS``/``onlyXPU``/``onlyHPU`` and
  ``onlyOn(d)`` without the device (``onlyOn`` raises ``SkipTest`` unless
  ``bypass_device_restrictions``); ``skipPRIVATEUSE1``,
  ``skipPRIVATEUSE1If(True, ...)``; ``largeTensorTest(size)`` without a
  ``device=`` other than the device's own: ``_has_sufficient_memory`` raises
  ``SkipTest("Unknown device type")`` for any device type but cpu, mps, cuda,
  xpu (and xla), whatever the memory; ``unittest.skip(...)`` (every device).
- **runs**: ``onlyPRIVATEUSE1``, ``onlyCUDAAndPRIVATEUSE1``,
  ``onlyAccelerator``, ``onlyNativeDeviceTypes`` (``NATIVE_DEVICES`` holds the
  privateuse1 backend's name), ``onlyNativeDeviceTypesAnd(...)``, ``onlyOn``
  naming the device, and every ``skip<Other>``/``skip<Other>If``/
  ``expectedFailure<Other>``: they act on other device types.
- **depends**, so not a skip (unknown means run; the test skips itself if it
  must): ``deviceCountAtLeast(n)`` with n > 1 (the device count is not known
  here), ``skipPRIVATEUSE1If(cond)`` and ``unittest.skipIf(cond)`` with a
  condition that is not a literal, ``largeTensorTest(size, device="cpu")``
  (host memory). :func:`conditional` names these: no skip for the rules, but a
  fact of the variant the model judge may cite (Note [Judge citations]).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

#: Decorators that skip on every privateuse1 device (onlyOn for another device).
_ONLY_OTHER = frozenset({"onlyCPU", "onlyCUDA", "onlyMPS", "onlyXPU", "onlyHPU", "onlyMTIA"})
_ME = ("privateuse1",)
_CALL = re.compile(r"^@?(?P<name>[\w.]+?)(?P<args>\(.*\))?$", re.S)


def _args(text: str | None) -> tuple[list[ast.expr], dict[str, ast.expr]] | None:
    if not text:
        return [], {}
    try:
        node = ast.parse(f"f{text}", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    return list(node.args), {k.arg: k.value for k in node.keywords if k.arg}


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ...


def _devices(node: ast.expr) -> set[str] | None:
    v = _literal(node)
    if isinstance(v, str):
        return {v.lower()}
    if isinstance(v, (list, tuple, set)) and all(isinstance(x, str) for x in v):
        return {str(x).lower() for x in v}
    return None


def gate(decorator: str, device: str = "") -> str | None:
    """Why ``decorator`` (as the memory writes it: ``@onlyCUDA``,
    ``@deviceCountAtLeast(2)``) keeps the test off a privateuse1 device named
    ``device``, or None when it does not (Note [Device gates])."""
    m = _CALL.match(decorator.strip())
    if m is None:
        return None
    dotted = m["name"]
    name = dotted.rpartition(".")[2]
    mine = {*_ME, device.lower()} - {""}
    if name in _ONLY_OTHER:
        return f"@{name}: upstream runs it on {name[4:].lower()} only"
    if name == "skipPRIVATEUSE1":
        return "@skipPRIVATEUSE1: upstream skips it on privateuse1 devices"
    parsed = _args(m["args"])
    if parsed is None:
        return None
    args, kw = parsed
    if name == "onlyOn" and args:
        devices = _devices(args[0])
        if devices is not None and not devices & mine:
            return f"@onlyOn: upstream runs it on {', '.join(sorted(devices))} only"
        return None
    if name == "skipPRIVATEUSE1If" and args and _literal(args[0]) is True:
        return "@skipPRIVATEUSE1If(True): upstream skips it on privateuse1 devices"
    if name == "largeTensorTest":
        where = kw.get("device") or (args[1] if len(args) > 1 else None)
        target = _devices(where) if where is not None else None
        if where is None or (target is not None and target & mine):
            return (
                "@largeTensorTest: torch's memory check knows cpu, mps, cuda and xpu only; "
                "on another device it skips ('Unknown device type')"
            )
        return None  # host memory or a device named at run time: depends, run it
    if dotted == "unittest.skip":
        return "@unittest.skip: upstream skips it everywhere"
    if dotted == "unittest.skipIf" and args and _literal(args[0]) is True:
        return "@unittest.skipIf(True): upstream skips it everywhere"
    return None


def conditional(decorator: str, device: str = "") -> str | None:
    """Why ``decorator`` may keep the test off a privateuse1 device named
    ``device`` depending on what is known only at run time (the **depends** class
    of Note [Device gates]), or None. Not a skip for the rules; a fact the model
    judge may cite for ``skip`` or ``xfail`` (Note [Model judge])."""
    m = _CALL.match(decorator.strip())
    if m is None or gate(decorator, device) is not None:
        return None
    dotted = m["name"]
    name = dotted.rpartition(".")[2]
    parsed = _args(m["args"])
    if parsed is None:
        return None
    args, kw = parsed
    mine = {*_ME, device.lower()} - {""}
    if name == "deviceCountAtLeast" and args:
        n = _literal(args[0])
        if not isinstance(n, int) or n > 1:
            return f"@deviceCountAtLeast: needs {n if isinstance(n, int) else 'several'} devices"
        return None
    if name in ("skipPRIVATEUSE1If", "skipIf") and args and _literal(args[0]) is ...:
        return f"@{name}: skips on a condition known at run time"
    if name == "onlyOn" and args and _devices(args[0]) is None:
        return "@onlyOn: runs on devices named at run time"
    if name == "largeTensorTest":
        where = kw.get("device") or (args[1] if len(args) > 1 else None)
        target = _devices(where) if where is not None else None
        if target is None or not target & mine:
            return "@largeTensorTest: needs memory known at run time"
    return None


def gated(decorators: Iterable[str], device: str = "") -> str | None:
    """The first decorator that keeps a test off the device, and why."""
    for d in decorators:
        why = gate(d, device)
        if why is not None:
            return why
    return None
