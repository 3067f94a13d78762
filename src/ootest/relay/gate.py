"""Dispatch gate: validate a CRCR envelope and decide whether it is worth a build.

Every string in a payload is untrusted (titles, branch names, labels): nothing
from it is ever echoed into a shell, a workflow expression or ``$GITHUB_OUTPUT``
unless it passed a strict character check. SHAs must be 40 lowercase hex.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import secrets
from dataclasses import asdict, dataclass
from typing import Any

from ootest.config.model import RelayPolicy, check_device_name
from ootest.errors import UserError

MAX_CLIENT_PAYLOAD = 65_535  # GitHub's cap on repository_dispatch client_payload
UPSTREAM = "pytorch/pytorch"
ZERO_SHA = "0" * 40
_SHA = re.compile(r"[0-9a-f]{40}\Z")
_SAFE_REF = re.compile(r"[A-Za-z0-9._/-]{1,200}\Z")
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}\Z")
_RELEASE = re.compile(r"release/\d+\.\d+\Z")
PR_ACTIONS = ("opened", "reopened", "synchronize", "closed")


class EnvelopeError(UserError):
    """The dispatch envelope is malformed or not from pytorch/pytorch."""


@dataclass
class Envelope:
    event_type: str
    delivery_id: str
    payload: dict[str, Any]


@dataclass
class GateResult:
    run: bool
    reason: str
    event_type: str
    delivery_id: str
    kind: str = "ignored"  # pr | landed | push | ignored
    sha: str = ""  # empty when it must be resolved (landed PRs)
    ref: str = ""
    pr_number: str = ""
    base: str = ""

    def outputs(self) -> dict[str, str]:
        out = {k: str(v) for k, v in asdict(self).items()}
        out["run"] = "true" if self.run else "false"
        return out


def _need(obj: Any, key: str, typ: type, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise EnvelopeError(f"{where}: missing field {key!r}")
    value = obj[key]
    if (typ is int and isinstance(value, bool)) or not isinstance(value, typ):
        raise EnvelopeError(f"{where}.{key}: expected {typ.__name__}, found {type(value).__name__}")
    return value


def parse_envelope(data: bytes | str | dict[str, Any]) -> Envelope:
    """Validate an envelope: a client_payload, or a whole repository_dispatch event."""
    if isinstance(data, (bytes, str)):
        raw = data.encode() if isinstance(data, str) else data
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise EnvelopeError(f"event is not valid JSON: {e}") from None
    else:
        obj = data
    if isinstance(obj, dict) and "client_payload" in obj:
        obj = obj["client_payload"]
    if not isinstance(obj, dict):
        raise EnvelopeError(f"expected a JSON object as client_payload, found {type(obj).__name__}")
    size = len(json.dumps(obj, separators=(",", ":")).encode())
    if size > MAX_CLIENT_PAYLOAD:
        raise EnvelopeError(
            f"client_payload is {size} bytes; GitHub caps it at {MAX_CLIENT_PAYLOAD}"
        )
    event_type = _need(obj, "event_type", str, "client_payload")
    if event_type not in ("pull_request", "push"):
        raise EnvelopeError("client_payload.event_type: expected 'pull_request' or 'push'")
    delivery = _need(obj, "delivery_id", str, "client_payload")
    if not _SAFE_ID.match(delivery):
        raise EnvelopeError("client_payload.delivery_id: expected 1-200 of [A-Za-z0-9._:-]")
    payload = _need(obj, "payload", dict, "client_payload")
    repo = _need(
        _need(payload, "repository", dict, "payload"), "full_name", str, "payload.repository"
    )
    if repo != UPSTREAM:
        shown = repo if _SAFE_REF.match(repo) else "<unprintable>"
        raise EnvelopeError(
            f"payload.repository.full_name: expected {UPSTREAM!r}, found {shown!r}; "
            "only dispatches from upstream PyTorch are built"
        )
    return Envelope(event_type, delivery, payload)


def _sha(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _SHA.match(value):
        raise EnvelopeError(f"{where}: expected a 40-character lowercase hex SHA")
    return value


def gate(env: Envelope, policy: RelayPolicy) -> GateResult:
    def res(run: bool, reason: str, **kw: str) -> GateResult:
        return GateResult(run, reason, env.event_type, env.delivery_id, **kw)

    p = env.payload
    if env.event_type == "pull_request":
        action = _need(p, "action", str, "payload")
        pr = _need(p, "pull_request", dict, "payload")
        number = _need(pr, "number", int, "payload.pull_request")
        if action not in PR_ACTIONS:
            return res(False, f"PR #{number}: action is not one the relay forwards")
        labels_raw = pr.get("labels", [])
        if not isinstance(labels_raw, list):
            raise EnvelopeError("payload.pull_request.labels: expected a list")
        labels = {lb.get("name") for lb in labels_raw if isinstance(lb, dict)}
        if action == "closed":
            merged = pr.get("merged") is True or "Merged" in labels
            if not merged:
                return res(False, f"PR #{number} was closed without landing")
            if not policy.landed:
                return res(False, f"PR #{number} landed; the policy does not build landed PRs")
            base = _need(
                _need(pr, "base", dict, "payload.pull_request"),
                "ref",
                str,
                "payload.pull_request.base",
            )
            if not _SAFE_REF.match(base) or not policy.tracked(base):
                return res(False, f"PR #{number} landed on a branch the policy does not track")
            return res(
                True,
                f"PR #{number} landed on {base}",
                kind="landed",
                pr_number=str(number),
                base=base,
                ref=f"refs/heads/{base}",
            )
        if action not in policy.pr_actions:
            return res(False, f"PR #{number} {action}: the policy does not build this action")
        head = _need(pr, "head", dict, "payload.pull_request")
        sha = _sha(head.get("sha"), "payload.pull_request.head.sha")
        label = policy.label()
        if label is not None and label not in labels:
            return res(False, f"PR #{number} {action}: no label {label}")
        return res(
            True,
            f"PR #{number} {action}",
            kind="pr",
            sha=sha,
            pr_number=str(number),
            ref=f"refs/pull/{number}/head",
        )
    # push
    ref = _need(p, "ref", str, "payload")
    after = p.get("after")
    if p.get("deleted") is True or after == ZERO_SHA:
        return res(False, "push deletes a ref; nothing to build")
    sha = _sha(after, "payload.after")
    if not _SAFE_REF.match(ref):
        return res(False, "push to a ref with characters outside [A-Za-z0-9._/-]; ignored")
    if ref.startswith("refs/heads/"):
        branch = ref.removeprefix("refs/heads/")
        if branch in policy.push_branches or (
            policy.release_branches and _RELEASE.match(branch) is not None
        ):
            return res(True, f"push to {branch}", kind="push", sha=sha, ref=ref)
        return res(False, f"push to branch {branch}: not tracked by the policy")
    if ref.startswith("refs/tags/"):
        tag = ref.removeprefix("refs/tags/")
        if any(fnmatch.fnmatchcase(tag, pat) for pat in policy.push_tags):
            return res(True, f"push of tag {tag}", kind="push", sha=sha, ref=ref)
        return res(False, f"push of tag {tag}: not tracked by the policy")
    return res(False, "push to a ref that is neither a branch nor a tag")


def write_github_output(values: dict[str, str], path: str | os.PathLike[str]) -> None:
    """Append outputs in the multi-line form with a random delimiter (no injection)."""
    text = ""
    for key, value in values.items():
        delim = f"ootest_{secrets.token_hex(16)}"
        while delim in value:  # pragma: no cover - 128 random bits
            delim = f"ootest_{secrets.token_hex(16)}"
        text += f"{key}<<{delim}\n{value}\n{delim}\n"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as e:
        raise UserError(
            f"GITHUB_OUTPUT={os.fspath(path)}: cannot append the step outputs "
            f"({e.strerror or e}); expected a writable file (GitHub Actions sets it; unset it "
            "outside Actions)"
        ) from None


def load_policy(config: str | None, device: str | None) -> RelayPolicy:
    """The policy in a config's ``relay:`` section, read by the config loader (one
    model, one set of checks: ``ootest config validate`` reports what this refuses);
    ``device`` (``--device``) overrides its device."""
    policy = RelayPolicy()
    if config:
        from ootest.config.load import load_relay

        policy = load_relay(config)
    if device:
        try:
            check_device_name(device)
        except ValueError as e:
            raise UserError(f"--device: {e}") from None
        policy = policy.model_copy(update={"device": device})
    return policy
