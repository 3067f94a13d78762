"""Gate decisions on dispatch envelopes and on hostile payloads (no torch).

Each data-driven test runs on our own envelopes (tests/fixtures/crcr) and again on
the shared ones when they are next to the checkout (Note [Own fixtures first])."""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import pytest

from ootest.relay.gate import (
    EnvelopeError,
    RelayPolicy,
    gate,
    parse_envelope,
    write_github_output,
)
from tests.conftest import OWN_ENVELOPES, Envelopes, ootest, run

L3 = RelayPolicy(device="emu")  # needs label ciflow/crcr/emu
L4 = RelayPolicy(device="emu", pr_label=None)  # every PR


@pytest.mark.parametrize(
    ("name", "policy", "run", "reason"),
    [
        ("pull_request_opened.json", L3, False, "PR #{pr} opened: no label ciflow/crcr/emu"),
        ("pull_request_opened.json", L4, True, "PR #{pr} opened"),
        (
            "pull_request_synchronize.json",
            L3,
            False,
            "PR #{pr} synchronize: no label ciflow/crcr/emu",
        ),
        ("pull_request_synchronize.json", L4, True, "PR #{pr} synchronize"),
        ("pull_request_closed.json", L4, False, "PR #{pr} was closed without landing"),
        ("push_ciflow_tag.json", L3, True, "push of tag {tag}"),
        ("push_tag_deleted.json", L3, False, "push deletes a ref; nothing to build"),
    ],
)
def test_fixture_decisions(
    crcr: Envelopes, name: str, policy: RelayPolicy, run: bool, reason: str
) -> None:
    res = gate(parse_envelope(crcr.load(name)), policy)
    assert (res.run, res.reason) == (run, reason.format(pr=crcr.pr, tag=crcr.tag))


def test_fixture_refs(crcr: Envelopes) -> None:
    res = gate(parse_envelope(crcr.load("pull_request_opened.json")), L4)
    assert (res.kind, res.sha, res.pr_number) == ("pr", crcr.opened_sha, crcr.pr)
    res = gate(parse_envelope(crcr.load("pull_request_synchronize.json")), L4)
    assert (res.kind, res.sha, res.pr_number) == ("pr", crcr.synchronize_sha, crcr.pr)
    assert res.ref == f"refs/pull/{crcr.pr}/head"
    res = gate(parse_envelope(crcr.load("push_ciflow_tag.json")), L3)
    assert (res.kind, res.sha, res.ref) == ("push", crcr.push_sha, f"refs/tags/{crcr.tag}")


@pytest.mark.parametrize(
    "name",
    ["github_webhook_pull_request_opened.json", "github_webhook_pull_request_synchronize.json"],
)
def test_github_examples_rejected_for_repository(crcr: Envelopes, name: str) -> None:
    with pytest.raises(
        EnvelopeError,
        match=re.escape(
            f"repository.full_name: expected 'pytorch/pytorch', found '{crcr.foreign}'"
        ),
    ):
        parse_envelope(crcr.load(name))


def _landed(crcr: Envelopes, merged: bool, labels: list[str], base: str = "main") -> dict:  # type: ignore[type-arg]
    env = copy.deepcopy(crcr.load("pull_request_closed.json"))
    pr = env["payload"]["pull_request"]
    pr.update(merged=merged, labels=[{"name": x} for x in labels], base={"ref": base})
    return env


def test_landed_by_merged_label_and_branch(crcr: Envelopes) -> None:
    res = gate(parse_envelope(_landed(crcr, False, ["Merged"])), L3)
    assert (res.run, res.kind, res.base, res.pr_number, res.sha) == (
        True,
        "landed",
        "main",
        crcr.pr,
        "",
    )
    assert gate(parse_envelope(_landed(crcr, True, [])), L3).run
    assert gate(parse_envelope(_landed(crcr, False, ["Merged"], "release/2.13")), L3).run
    res = gate(parse_envelope(_landed(crcr, False, ["Merged"], "feature-x")), L3)
    assert not res.run and "does not track" in res.reason


def test_label_gated_pr_runs_with_label(crcr: Envelopes) -> None:
    env = crcr.load("pull_request_opened.json")
    env["payload"]["pull_request"]["labels"] = [{"name": "ciflow/crcr/emu"}]
    assert gate(parse_envelope(env), L3).run


HOSTILE = 'x"; echo pwned $(id) `id`\nrun=true\n${{ github.token }}'


def test_hostile_strings_never_reach_outputs(crcr: Envelopes, tmp_path: Path) -> None:
    env = crcr.load("pull_request_opened.json")
    pr = env["payload"]["pull_request"]
    pr["title"] = HOSTILE
    pr["labels"] = [{"name": HOSTILE}, {"name": "ciflow/crcr/emu"}]
    pr["head"]["ref"] = HOSTILE
    res = gate(parse_envelope(env), L3)
    out = tmp_path / "out"
    write_github_output(res.outputs(), out)
    text = out.read_text()
    assert "pwned" not in text and "${{" not in text
    # Each value sits between its own random delimiter lines: parse like the runner does.
    lines, values = text.splitlines(), {}
    i = 0
    while i < len(lines):
        key, delim = lines[i].split("<<")
        j = lines.index(delim, i + 1)
        values[key] = "\n".join(lines[i + 1 : j])
        i = j + 1
    assert values["run"] == "true" and values["sha"] == crcr.opened_sha


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e["payload"]["pull_request"]["head"].update(sha="abc"), "40-character"),
        (lambda e: e["payload"]["pull_request"]["head"].update(sha="A" * 40), "40-character"),
        (
            lambda e: e["payload"]["pull_request"]["head"].update(sha="$(id)" + "a" * 35),
            "40-character",
        ),
        (lambda e: e.pop("delivery_id"), "expected a field 'delivery_id', found none"),
        (lambda e: e.update(delivery_id="id; rm -rf /"), "delivery_id: expected"),
        (lambda e: e.update(event_type="workflow_run"), "expected 'pull_request' or 'push'"),
        (
            lambda e: e["payload"]["pull_request"].update(number="12345"),
            "expected a PR number from 1 to 999,999,999, found '12345'",
        ),
        (
            lambda e: e["payload"]["pull_request"].update(number=True),
            "expected a PR number from 1 to 999,999,999, found true",
        ),
        (
            lambda e: e["payload"].update(repository="pytorch/pytorch"),
            "payload.repository: expected an object, found 'pytorch/pytorch'",
        ),
        (
            lambda e: e["payload"].update(pad="x" * 70_000),
            "client_payload: expected at most 65,535 bytes (GitHub's cap), found 70,",
        ),
        (
            lambda e: e["payload"]["repository"].update(full_name="pytorch/pytorch\n$(id)"),
            "found a string of 21 characters (not shown",
        ),
    ],
)
def test_malformed_envelopes_rejected(crcr: Envelopes, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    env = crcr.load("pull_request_opened.json")
    mutate(env)
    with pytest.raises(EnvelopeError, match=re.escape(message)):
        gate(parse_envelope(env), L4)


def test_hostile_push_ref_is_inert(crcr: Envelopes) -> None:
    env = crcr.load("push_ciflow_tag.json")
    env["payload"]["ref"] = "refs/tags/ciflow/$(curl evil)"
    res = gate(parse_envelope(env), L3)
    assert not res.run and "$(" not in res.reason and res.ref == ""


def test_cli_gate_writes_github_output(crcr: Envelopes, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps({"action": "push", "client_payload": crcr.load("push_ciflow_tag.json")})
    )
    out = tmp_path / "gh_out"
    r = ootest("relay", "gate", env={"GITHUB_EVENT_PATH": str(event), "GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"run: push of tag {crcr.tag}"
    assert crcr.push_sha in out.read_text()


def test_cli_gate_rejects_with_exit_2(crcr: Envelopes) -> None:
    r = ootest("relay", "gate", str(crcr.path("github_webhook_pull_request_opened.json")))
    assert r.returncode == 2
    assert crcr.foreign in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_relay_commands_do_not_import_torch() -> None:
    push = OWN_ENVELOPES.path("push_ciflow_tag.json")
    code = (
        "import sys; from ootest.cli.main import main; "
        f"rc = main(['relay', 'gate', {str(push)!r}]); "
        "assert 'torch' not in sys.modules; sys.exit(rc)"
    )
    r = run(
        [sys.executable, "-c", code],
        env={k: v for k, v in os.environ.items() if k != "GITHUB_OUTPUT"},
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("where", ["missing/dir/out", "a_dir", "read_only"])
def test_unwritable_github_output_is_one_line(tmp_path: Path, where: str) -> None:
    import os

    (tmp_path / "a_dir").mkdir()
    ro = tmp_path / "read_only"
    ro.write_text("")
    ro.chmod(0o444)
    if where == "read_only" and os.access(ro, os.W_OK):
        pytest.skip("running as a user who can write read-only files (root)")
    event = tmp_path / "event.json"
    push = OWN_ENVELOPES.load("push_ciflow_tag.json")
    event.write_text(json.dumps({"action": "push", "client_payload": push}))
    r = ootest(
        "relay",
        "gate",
        env={"GITHUB_EVENT_PATH": str(event), "GITHUB_OUTPUT": str(tmp_path / where)},
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "GITHUB_OUTPUT=" in r.stderr and "expected a writable file" in r.stderr
