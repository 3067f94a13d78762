"""Naming rules, one definition each: device names, commit SHAs, git refs.

Used by the gate and its policy, ``ootest init``, ``relay matrix`` and ``relay report``
(and by the config schema for ``relay.device``). Imports nothing but ``re``: safe to
import from any layer, never pulls in torch.
"""

from __future__ import annotations

import re
from typing import TypeGuard

__all__ = [
    "DEVICE_NAME_PATTERN",
    "DEVICE_NAME_RULE",
    "REF_RULE",
    "SAFE_REF_RULE",
    "SHA_PATTERN",
    "SHA_RULE",
    "is_device_name",
    "is_safe_ref",
    "is_sha",
    "ref_problem",
]

# Note [Device names]
# The device name is the privateuse1 backend name: it goes into the label
# ciflow/crcr/<device>, the workflow file crcr-<device>.yml, the default module
# torch_<device> and the config's `device: <module>:<device>`. torch.device()
# parses a device type as [a-zA-Z_]+ (c10/core/Device.cpp), so a name with a
# digit or '-' registers but cannot be used; lowercase keeps labels and file
# names unambiguous, a leading letter keeps torch_<device> a plain module name.
_DEVICE_BODY = r"[a-z][a-z_]{0,39}"
DEVICE_NAME_PATTERN = rf"^{_DEVICE_BODY}$"  # for pydantic / JSON Schema
DEVICE_NAME_RULE = (
    "a backend name of 1-40 lowercase letters or '_', starting with a letter "
    "(what torch.device() accepts for a privateuse1 backend)"
)
_DEVICE = re.compile(_DEVICE_BODY)


def is_device_name(name: str) -> bool:
    return _DEVICE.fullmatch(name) is not None


#: A full git commit SHA as the relay, the gate and PyTorch's nightly versions write it.
SHA_PATTERN = "[0-9a-f]{40}"
_SHA = re.compile(SHA_PATTERN)
SHA_RULE = "a 40-character lowercase hex SHA"


def is_sha(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _SHA.fullmatch(value) is not None


# Refs the gate builds and plan checks out. Characters outside this set are legal
# in git but never needed here, so such a ref is skipped, not an error.
_SAFE_REF = re.compile(r"[A-Za-z0-9._/-]{1,200}")
SAFE_REF_RULE = "1-200 characters of [A-Za-z0-9._/-]"


def is_safe_ref(ref: str) -> bool:
    return _SAFE_REF.fullmatch(ref) is not None


REF_RULE = (
    "a git ref name (no '..', no empty component, no component starting with '.' or "
    "ending with '.lock', no '.' at the end)"
)


def ref_problem(ref: str) -> str | None:
    """What makes ``git check-ref-format`` refuse ``ref`` (the rules that matter for
    the safe characters), or None. Git never creates such a ref, so a payload that
    names one is forged; ``..`` would also walk out of ``refs/tags/`` in a path."""
    if ".." in ref:
        return "'..'"
    parts = ref.split("/")
    if any(not p for p in parts):
        return "an empty component"
    if any(p.startswith(".") for p in parts):
        return "a component starting with '.'"
    if any(p.endswith(".lock") for p in parts):
        return "a component ending with '.lock'"
    if ref.endswith("."):
        return "a '.' at the end"
    return None
