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

from ootest import naming as names
from ootest.config.relay_policy import RelayPolicy
from ootest.errors import UserError
from ootest.relay import limits
from ootest.relay.limits import MAX_DEPTH, describe

# Note [Payload bounds]
# Everything in a dispatch that grows with its size is bounded before it costs
# work: the event's bytes (read no further), the nesting depth (limits.MAX_DEPTH,
# measured on the bytes before parsing), the client_payload (GitHub's own cap),
# every list the gate walks and every string it reads. Lists and strings the gate
# never reads (commits, titles, bodies) are bounded by the byte caps alone.
MAX_EVENT_BYTES = 1_000_000  # a whole repository_dispatch event file
MAX_CLIENT_PAYLOAD = 65_535  # GitHub's cap on repository_dispatch client_payload
MAX_LABELS = 1_000
MAX_TEXT = 1_000  # characters of any string the gate reads
MAX_PR_NUMBER = 999_999_999
UPSTREAM = "pytorch/pytorch"
ZERO_SHA = "0" * 40
_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}\Z")
_RELEASE = re.compile(r"release/\d+\.\d+\Z")
PR_ACTIONS = ("opened", "reopened", "synchronize", "closed")
REJECTED = "the CRCR relay never sends this, so the dispatch is rejected and nothing is built"


class EnvelopeError(UserError):
    """The dispatch envelope is malformed or not from pytorch/pytorch."""


@dataclass
class Envelope:
    event_type: str
    delivery_id: str
    payload: dict[str, Any]
    source: str = "event"  # the file it came from, for messages


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


def _reject(source: str, where: str, expected: str, found: str) -> EnvelopeError:
    at = f"{source}: {where}: " if where else f"{source}: "
    return EnvelopeError(f"{at}expected {expected}, found {found}; {REJECTED}")


_KIND: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}


def _need(source: str, obj: dict[str, Any], key: str, typ: type, where: str) -> Any:
    if key not in obj:
        raise _reject(source, where, f"a field {key!r}", "none")
    value = obj[key]
    if not isinstance(value, typ):
        raise _reject(source, f"{where}.{key}", _KIND[typ], describe(value))
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise _reject(
            source,
            f"{where}.{key}",
            f"a string of at most {MAX_TEXT:,} characters",
            describe(value),
        )
    return value


def parse_envelope(data: bytes | str | dict[str, Any], source: str = "event") -> Envelope:
    """Validate an envelope: a client_payload, or a whole repository_dispatch event.

    ``source`` names the input in messages (the event file)."""
    if isinstance(data, (bytes, str)):
        raw = data.encode() if isinstance(data, str) else data
        try:
            obj = limits.loads(raw, max_bytes=MAX_EVENT_BYTES, max_depth=MAX_DEPTH, what="an event")
        except ValueError as e:
            raise EnvelopeError(f"{source}: {e}; {REJECTED}") from None
    else:
        obj = data
        if limits.object_depth(obj, MAX_DEPTH) > MAX_DEPTH:
            raise _reject(
                source, "", f"JSON nested at most {MAX_DEPTH} levels deep", f"more than {MAX_DEPTH}"
            )
    if isinstance(obj, dict) and "client_payload" in obj:
        obj = obj["client_payload"]
    if not isinstance(obj, dict):
        raise _reject(source, "client_payload", "a JSON object", describe(obj))
    size = len(json.dumps(obj, separators=(",", ":")).encode())
    if size > MAX_CLIENT_PAYLOAD:
        raise _reject(
            source,
            "client_payload",
            f"at most {MAX_CLIENT_PAYLOAD:,} bytes (GitHub's cap)",
            f"{size:,} bytes",
        )
    where = "client_payload"
    event_type = _need(source, obj, "event_type", str, where)
    if event_type not in ("pull_request", "push"):
        raise _reject(
            source, f"{where}.event_type", "'pull_request' or 'push'", describe(event_type)
        )
    delivery = _need(source, obj, "delivery_id", str, where)
    if not _SAFE_ID.match(delivery):
        raise _reject(
            source, f"{where}.delivery_id", "1-200 of [A-Za-z0-9._:-]", describe(delivery)
        )
    payload = _need(source, obj, "payload", dict, where)
    repository = _need(source, payload, "repository", dict, f"{where}.payload")
    repo = _need(source, repository, "full_name", str, f"{where}.payload.repository")
    if repo != UPSTREAM:
        raise _reject(
            source, f"{where}.payload.repository.full_name", repr(UPSTREAM), describe(repo)
        )
    return Envelope(event_type, delivery, payload, source)


def _sha(source: str, value: Any, where: str) -> str:
    if not names.is_sha(value):
        raise _reject(source, where, names.SHA_RULE, describe(value))
    return value


def _ref(source: str, obj: dict[str, Any], key: str, where: str) -> str:
    """A git ref the payload names: a string git could have created."""
    ref: str = _need(source, obj, key, str, where)
    why = names.ref_problem(ref)
    if why:
        raise _reject(source, f"{where}.{key}", names.REF_RULE, f"{describe(ref)} (it has {why})")
    return ref


def _pr_number(source: str, pr: dict[str, Any], where: str) -> int:
    if "number" not in pr:
        raise _reject(source, where, "a field 'number'", "none")
    number = pr["number"]
    if not (isinstance(number, int) and not isinstance(number, bool)) or not (
        1 <= number <= MAX_PR_NUMBER
    ):
        raise _reject(
            source,
            f"{where}.number",
            f"a PR number from 1 to {MAX_PR_NUMBER:,}",
            describe(number),
        )
    return number


def _labels(source: str, pr: dict[str, Any], where: str) -> set[str]:
    raw = pr.get("labels", [])
    where = f"{where}.labels"
    if not isinstance(raw, list):
        raise _reject(source, where, "a list", describe(raw))
    if len(raw) > MAX_LABELS:
        raise _reject(source, where, f"at most {MAX_LABELS:,} labels", f"{len(raw):,}")
    names_: set[str] = set()
    for i, label in enumerate(raw):
        if not isinstance(label, dict):
            raise _reject(source, f"{where}[{i}]", "an object", describe(label))
        if "name" in label:  # a label without a name matches nothing
            names_.add(_need(source, label, "name", str, f"{where}[{i}]"))
    return names_


def gate(env: Envelope, policy: RelayPolicy) -> GateResult:
    def res(run: bool, reason: str, **kw: str) -> GateResult:
        return GateResult(run, reason, env.event_type, env.delivery_id, **kw)

    src, p, at = env.source, env.payload, "client_payload.payload"
    if env.event_type == "pull_request":
        action = _need(src, p, "action", str, at)
        pr = _need(src, p, "pull_request", dict, at)
        number = _pr_number(src, pr, f"{at}.pull_request")
        labels = _labels(src, pr, f"{at}.pull_request")
        if action not in PR_ACTIONS:
            return res(False, f"PR #{number}: action is not one the relay forwards")
        if action == "closed":
            merged = pr.get("merged") is True or "Merged" in labels
            if not merged:
                return res(False, f"PR #{number} was closed without landing")
            if not policy.landed:
                return res(False, f"PR #{number} landed; the policy does not build landed PRs")
            base_obj = _need(src, pr, "base", dict, f"{at}.pull_request")
            base = _ref(src, base_obj, "ref", f"{at}.pull_request.base")
            if not names.is_safe_ref(base) or not policy.tracked(base):
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
        head = _need(src, pr, "head", dict, f"{at}.pull_request")
        sha = _sha(src, head.get("sha"), f"{at}.pull_request.head.sha")
        label = policy.label()
        if label is not None and label not in labels:
            return res(False, f"PR #{number} {action}: no label {policy.label_shown()}")
        return res(
            True,
            f"PR #{number} {action}",
            kind="pr",
            sha=sha,
            pr_number=str(number),
            ref=f"refs/pull/{number}/head",
        )
    # push
    ref = _ref(src, p, "ref", at)
    after = p.get("after")
    if p.get("deleted") is True or after == ZERO_SHA:
        return res(False, "push deletes a ref; nothing to build")
    sha = _sha(src, after, f"{at}.after")
    if not names.is_safe_ref(ref):
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


def read_event(path: str | None) -> tuple[bytes, str]:
    """The event file's bytes (at most MAX_EVENT_BYTES are read) and its name."""
    src = path or os.environ.get("GITHUB_EVENT_PATH")
    if not src:
        raise UserError(
            "no event: expected an EVENT_FILE argument or $GITHUB_EVENT_PATH, found neither; "
            "pass the event file (GitHub Actions sets GITHUB_EVENT_PATH)"
        )
    try:
        return limits.read_at_most(src, MAX_EVENT_BYTES, "an event"), src
    except OSError as e:
        raise UserError(
            f"{src}: cannot read the event ({e.strerror or e}); expected a readable JSON file; "
            "pass the event file of a repository_dispatch"
        ) from None
    except ValueError as e:
        raise EnvelopeError(f"{src}: {e}; {REJECTED}") from None


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
    if device is not None:
        if not names.is_device_name(device):
            raise UserError(
                f"--device: expected {names.DEVICE_NAME_RULE}, found {describe(device)}; "
                "pass a name like --device spyre"
            )
        policy = policy.with_device(device)
    return policy
