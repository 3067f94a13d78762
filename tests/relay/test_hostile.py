"""Hostile and malformed input to the relay commands: one clear line and exit 2, never
a traceback; everything that grows with the input is bounded (no torch)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from ootest import naming as names
from ootest.cli.main import main
from ootest.errors import EXIT_USAGE, UserError
from ootest.relay import report as rp
from ootest.relay.gate import (
    MAX_EVENT_BYTES,
    MAX_LABELS,
    MAX_PR_NUMBER,
    MAX_TEXT,
    EnvelopeError,
    RelayPolicy,
    gate,
    load_policy,
    parse_envelope,
)
from ootest.relay.init import init
from ootest.relay.limits import MAX_DEPTH, deeper_than, describe
from tests.conftest import Envelopes, ootest

SHA = "a" * 40
L3 = RelayPolicy(device="emu")
L4 = RelayPolicy(device="emu", pr_label=None)
REJECTED = "the CRCR relay never sends this, so the dispatch is rejected and nothing is built"


def pr_dispatch(
    action: str = "opened", number: Any = 12345, labels: Any = None, base: str = "main"
) -> dict[str, Any]:
    """A client_payload in the shape the relay forwards for a pull_request webhook."""
    return {
        "event_type": "pull_request",
        "delivery_id": "d-pr-1",
        "payload": {
            "action": action,
            "repository": {"full_name": "pytorch/pytorch"},
            "pull_request": {
                "number": number,
                "title": "a PR",
                "labels": [{"name": "ciflow/crcr/emu"}] if labels is None else labels,
                "head": {"sha": SHA, "ref": "feature"},
                "base": {"ref": base},
                "merged": action == "closed",
            },
        },
    }


def push_dispatch(ref: str, after: str = SHA) -> dict[str, Any]:
    return {
        "event_type": "push",
        "delivery_id": "d-push-1",
        "payload": {"repository": {"full_name": "pytorch/pytorch"}, "ref": ref, "after": after},
    }


def nested(levels: int, open_: str = "[", close: str = "]") -> str:
    return open_ * levels + close * levels


def write_event(tmp_path: Path, client_payload: Any, name: str = "event.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"action": "x", "client_payload": client_payload}))
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_usage_error(rc: int, err: str) -> str:
    assert rc == EXIT_USAGE, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ootest: error: ")
    return lines[0].removeprefix("ootest: error: ")


# ----------------------------------------------------------------- nesting and size


@pytest.mark.parametrize(
    "text",
    [
        '{"client_payload": ' + nested(1_000) + "}",
        '{"client_payload": {"payload": ' + '{"a":' * 1_000 + "1" + "}" * 1_000 + "}}",
        nested(100_000),
    ],
    ids=["array-1000", "object-1000", "array-100000"],
)
def test_deep_json_gate_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    event = tmp_path / "deep.json"
    event.write_text(text)
    msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
    assert msg.startswith(f"{event}: expected JSON nested at most {MAX_DEPTH} levels deep, found ")
    assert msg.endswith(REJECTED)


def test_deep_json_message_word_for_word(tmp_path: Path) -> None:
    event = tmp_path / "deep.json"
    event.write_text('{"client_payload": ' + nested(1_000) + "}")
    r = ootest("relay", "gate", str(event), env={"GITHUB_OUTPUT": ""})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"ootest: error: {event}: expected JSON nested at most 32 levels deep, found more "
        f"than 32; {REJECTED}\n"
    )


def test_deep_json_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    event = tmp_path / "deep.json"
    event.write_text('{"client_payload": ' + nested(5_000) + "}")
    for k, v in {
        "OOTEST_RELAY_TOKEN": "t",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "1",
    }.items():
        monkeypatch.setenv(k, v)
    rc, _, err = cli(
        capsys, "relay", "report", "--relay-url", "http://127.0.0.1:9", "--status",
        "in_progress", "--event", str(event), "--job-name", "j",
    )  # fmt: skip
    assert "levels deep, found more than 32;" in one_line_usage_error(rc, err)


def test_brackets_inside_strings_do_not_count() -> None:
    env = pr_dispatch()
    env["payload"]["pull_request"]["title"] = '\\"' + "[{" * 5_000 + '"\\'
    env["payload"]["pull_request"]["body"] = "]" * 100
    raw = json.dumps({"client_payload": env}).encode()
    assert not deeper_than(raw, 6) and deeper_than(raw, 5)
    assert gate(parse_envelope(raw), L3).run


@pytest.mark.parametrize("levels", [MAX_DEPTH - 2, MAX_DEPTH - 1])
def test_depth_limit_is_exact(levels: int) -> None:
    env = push_dispatch("refs/heads/main")
    env["payload"]["extra"] = json.loads(nested(levels))
    raw = json.dumps(env).encode()  # client_payload > payload > extra: 2 + levels
    if levels + 2 <= MAX_DEPTH:
        assert gate(parse_envelope(raw), L3).run
    else:
        with pytest.raises(EnvelopeError, match="at most 32 levels deep, found more than 32;"):
            parse_envelope(raw)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"]]]"', 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}], "c": {}}', 4),
        ('["]]]", "\\\\", "\\"[[[", "\\\\\\"]]"]', 1),  # escapes inside strings
        ("[[[]][[[]]]]", 4),
        ("[" * 5, 5),  # unclosed: the parser recurses 5 deep before its error
        ("[[]" + "[" * 5, 6),
        ("]]][[", 0),  # the parser stops at the first ']'
        ('[[["abc', 3),  # an unterminated string: what follows it is not structure
        (nested(40), 40),
    ],
)
def test_deeper_than_is_exact_at_the_limit(text: str, depth: int) -> None:
    raw = text.encode()
    assert not deeper_than(raw, max(depth, 1))
    if depth > 1:
        assert deeper_than(raw, depth - 1)


def test_deep_and_cyclic_dicts_rejected_without_recursion() -> None:
    env = push_dispatch("refs/heads/main")
    inner: dict[str, Any] = {}
    env["payload"]["extra"] = inner
    for _ in range(10_000):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(EnvelopeError, match=f"nested at most {MAX_DEPTH} levels deep"):
        parse_envelope(env)
    cyclic = push_dispatch("refs/heads/main")
    cyclic["payload"]["self"] = cyclic["payload"]
    with pytest.raises(EnvelopeError, match=f"nested at most {MAX_DEPTH} levels deep"):
        parse_envelope(cyclic)


def test_oversized_event_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "big.json"
    pad = "x" * 10_000_000
    event.write_text(json.dumps({"client_payload": push_dispatch("refs/heads/main"), "p": pad}))
    size = event.stat().st_size
    msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
    assert msg == (
        f"{event}: expected an event of at most 1,000,000 bytes, found {size:,} bytes; {REJECTED}"
    )
    with pytest.raises(EnvelopeError, match=f"at most 1,000,000 bytes, found {size:,} bytes"):
        parse_envelope(event.read_bytes())
    assert MAX_EVENT_BYTES == 1_000_000


def test_invalid_json_and_encoding_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for data in (b'{"client_payload": ', b"\xff\xfe{}", b""):
        event = tmp_path / "bad.json"
        event.write_bytes(data)
        msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
        assert msg.startswith(f"{event}: expected valid JSON, found ")


# ----------------------------------------------------------------- labels


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (
            [{"name": ["ciflow/crcr/emu"]}],
            "client_payload.payload.pull_request.labels[0].name: expected a string, "
            "found a list of 1 item",
        ),
        (
            [{"name": "x"}, {"name": {"a": 1}}],
            "client_payload.payload.pull_request.labels[1].name: expected a string, "
            "found an object",
        ),
        (
            ["ciflow/crcr/emu"],
            "client_payload.payload.pull_request.labels[0]: expected an object, "
            "found 'ciflow/crcr/emu'",
        ),
        (
            {"name": "ciflow/crcr/emu"},
            "client_payload.payload.pull_request.labels: expected a list, found an object",
        ),
        (
            [{"name": "x"}] * (MAX_LABELS + 1),
            "client_payload.payload.pull_request.labels: expected at most 1,000 labels, "
            "found 1,001",
        ),
        (
            [{"name": "y" * (MAX_TEXT + 1)}],
            "client_payload.payload.pull_request.labels[0].name: expected a string of at most "
            "1,000 characters, found 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy'... "
            "(1,001 characters)",
        ),
    ],
    ids=["name-list", "name-object", "label-string", "labels-object", "too-many", "too-long"],
)
def test_malformed_labels(labels: Any, message: str) -> None:
    with pytest.raises(EnvelopeError) as e:
        gate(parse_envelope(pr_dispatch(labels=labels)), L3)
    assert str(e.value) == f"event: {message}; {REJECTED}"


def test_label_name_list_cli_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = write_event(tmp_path, pr_dispatch(labels=[{"name": ["a", "b"]}]))
    msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
    assert msg == (
        f"{event}: client_payload.payload.pull_request.labels[0].name: expected a string, "
        f"found a list of 2 items; {REJECTED}"
    )


def test_labels_without_name_and_maximum_count_are_fine() -> None:
    labels = [{"color": "fff"}] + [{"name": f"l{i}"} for i in range(MAX_LABELS - 2)]
    labels.append({"name": "ciflow/crcr/emu"})
    assert gate(parse_envelope(pr_dispatch(labels=labels)), L3).run


# ----------------------------------------------------------------- numbers and refs


@pytest.mark.parametrize(
    ("number", "found"),
    [(-5, "-5"), (0, "0"), (10**9, "1000000000"), (10**30, "a 31-digit number"), (1.5, "1.5")],
)
def test_pr_number_out_of_bounds(number: Any, found: str) -> None:
    with pytest.raises(EnvelopeError) as e:
        gate(parse_envelope(pr_dispatch(number=number)), L4)
    assert str(e.value) == (
        "event: client_payload.payload.pull_request.number: expected a PR number from 1 to "
        f"999,999,999, found {found}; {REJECTED}"
    )


@pytest.mark.parametrize("number", [1, MAX_PR_NUMBER])
def test_pr_number_in_bounds(number: int) -> None:
    res = gate(parse_envelope(pr_dispatch(number=number)), L4)
    assert res.run and res.pr_number == str(number) and res.ref == f"refs/pull/{number}/head"


def test_pr_number_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "e.json"
    text = json.dumps({"client_payload": pr_dispatch(number=7)}).replace(
        ": 7,", ": " + "9" * 5000 + ","
    )
    event.write_text(text)
    msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
    assert msg.startswith(f"{event}: expected valid JSON, found ")  # Python refuses > 4,300 digits


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("refs/tags/ciflow/../../heads/evil", "'..'"),
        ("refs/heads/main/..", "'..'"),
        ("refs/heads/.hidden", "a component starting with '.'"),
        ("refs/heads/x.lock", "a component ending with '.lock'"),
        ("refs/heads//x", "an empty component"),
        ("refs/tags/ciflow/", "an empty component"),
        ("refs/heads/x.", "a '.' at the end"),
    ],
)
def test_push_refs_git_would_refuse_are_rejected(ref: str, why: str) -> None:
    with pytest.raises(EnvelopeError) as e:
        gate(parse_envelope(push_dispatch(ref)), L3)
    assert str(e.value) == (
        f"event: client_payload.payload.ref: expected {names.REF_RULE}, found {ref!r} "
        f"(it has {why}); {REJECTED}"
    )


def test_dotdot_tag_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = write_event(tmp_path, push_dispatch("refs/tags/ciflow/../../heads/evil"))
    out = tmp_path / "gh_out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_OUTPUT", str(out))
        msg = one_line_usage_error(*cli(capsys, "relay", "gate", str(event))[::2])
    assert "'refs/tags/ciflow/../../heads/evil' (it has '..')" in msg
    assert not out.exists()  # nothing reached the step outputs


def test_landed_base_with_dotdot_rejected() -> None:
    env = pr_dispatch(action="closed", base="release/../main")
    with pytest.raises(EnvelopeError, match=r"pull_request\.base\.ref: expected a git ref name"):
        gate(parse_envelope(env), L3)
    assert gate(parse_envelope(pr_dispatch(action="closed", base="release/2.9")), L3).run


def test_good_refs_still_run() -> None:
    res = gate(parse_envelope(push_dispatch("refs/tags/ciflow/trunk/12345")), L3)
    assert res.run and res.ref == "refs/tags/ciflow/trunk/12345"
    assert gate(parse_envelope(push_dispatch("refs/heads/release/2.9")), L3).run


def test_long_strings_the_gate_reads_are_bounded() -> None:
    env = pr_dispatch(action="o" * (MAX_TEXT + 1))
    with pytest.raises(EnvelopeError, match=r"payload\.action: expected a string of at most 1,000"):
        gate(parse_envelope(env), L4)
    res = gate(parse_envelope(push_dispatch("refs/heads/" + "m" * 500)), L3)
    assert not res.run and res.ref == ""  # longer than a safe ref: skipped, never built
    with pytest.raises(EnvelopeError, match=r"payload\.ref: expected a string of at most 1,000"):
        gate(parse_envelope(push_dispatch("refs/heads/" + "m" * 5_000)), L3)


def test_describe_never_echoes_unsafe_text() -> None:
    assert (
        describe("x; $(id)\n")
        == "a string of 9 characters (not shown: outside [A-Za-z0-9._/:@+= -])"
    )
    assert describe("ok/name") == "'ok/name'"
    assert describe(True) == "true" and describe(None) == "null"
    assert describe(10**5000) == "a number of more than 4,300 digits"


# ----------------------------------------------------------------- device names


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("spyre", True),
        ("x_y", True),
        ("a" * 40, True),
        ("my-dev", False),
        ("npu2", False),
        ("_x", False),
        ("Spyre", False),
        ("a" * 41, False),
        ("", False),
    ],
)
def test_init_and_policy_share_the_device_rule(tmp_path: Path, name: str, ok: bool) -> None:
    try:
        init(tmp_path, name, f"torch_{name}", 1, False)
        init_ok = True
    except UserError as e:
        init_ok = False
        assert str(e) == (
            f"--device: expected {names.DEVICE_NAME_RULE}, found {describe(name)}; "
            "pass a name like --device spyre"
        )
    try:
        load_policy(None, name)
        policy_ok = True
    except UserError as e:
        policy_ok = False
        assert f"expected {names.DEVICE_NAME_RULE}, found {describe(name)}" in str(e)
    assert (init_ok, policy_ok, names.is_device_name(name)) == (ok, ok, ok)


def test_policy_file_errors_are_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("test_suite_config: {}\nrelay: [1, 2]\n")
    with pytest.raises(UserError) as e:
        load_policy(str(cfg), None)
    assert str(e.value) == f"{cfg}:2:1: relay: expected a mapping; found a list"
    cfg.write_text("test_suite_config: {}\nrelay:\n  device: my-dev\n")
    with pytest.raises(UserError) as e:
        load_policy(str(cfg), None)
    assert str(e.value) == (
        f"{cfg}:3:11: relay.device: expected {names.DEVICE_NAME_RULE}; found 'my-dev'"
    )


# ----------------------------------------------------------------- relay emulate usage errors


@pytest.fixture
def fixture_file(tmp_path: Path) -> Path:
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(push_dispatch("refs/tags/ciflow/trunk/1")))
    return path


def _emulate(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc, _, err = cli(capsys, "relay", "emulate", *argv)
    return one_line_usage_error(rc, err)


def test_emulate_missing_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert _emulate(capsys, "--port", "0", "--dispatch", str(missing), "--command", "true") == (
        f"--dispatch {missing}: cannot read it (No such file or directory); expected a "
        "client_payload JSON file; pass the path of an existing file"
    )


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("{not json", "expected valid JSON, found "),
        ("[1, 2]", "expected a JSON object (a client_payload), found a list of 2 items"),
        (nested(5_000), "expected JSON nested at most 32 levels deep, found more than 32"),
    ],
)
def test_emulate_bad_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, found: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    msg = _emulate(capsys, "--port", "0", "--dispatch", str(bad), "--command", "true")
    assert msg.startswith(f"--dispatch {bad}: {found}")
    assert msg.endswith("pass a client_payload JSON file")


def test_emulate_port_in_use(fixture_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        msg = _emulate(capsys, "--port", str(port), "--command", "true")
    assert msg.startswith(f"--port {port}: cannot listen on 127.0.0.1:{port} (")
    assert msg.endswith("expected a free port; pass another --port, or --port 0 for any free one")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--port", "70000", "--command", "true"],
            "--port: expected a port from 0 to 65535, found 70000; pass --port 0 for any free one",
        ),
        (
            ["--port", "0", "--rate-limit", "0", "--command", "true"],
            "--rate-limit: expected a positive number of callbacks per minute, found 0; "
            "pass e.g. --rate-limit 100",
        ),
        (
            ["--port", "0", "--command", "no-such-program-ootest --x"],
            "--command: cannot run 'no-such-program-ootest' (not found or not executable); "
            "expected a program and its arguments, run without a shell; pass a program on PATH "
            "or a path to one",
        ),
        (
            ["--port", "0", "--command", "bash -c 'echo"],
            "--command: expected a command line with balanced quotes, found an unbalanced one "
            "(No closing quotation); quote it as a shell would",
        ),
        (
            ["--port", "0", "--command", "  "],
            "--command: expected a program and its arguments, found nothing; "
            "pass e.g. --command 'bash job.sh'",
        ),
    ],
    ids=["port-range", "rate-limit", "no-program", "quotes", "empty"],
)
def test_emulate_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert _emulate(capsys, *argv) == message


def test_emulate_dispatch_needs_command(
    fixture_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _emulate(capsys, "--port", "0", "--dispatch", str(fixture_file)) == (
        "--dispatch: expected --command as well (the dispatch is given to the command under "
        "test), found none; pass --command 'bash job.sh'"
    )


def test_emulate_runs_a_good_fixture(
    fixture_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = tmp_path / "seen.json"
    rc, out, err = cli(
        capsys, "relay", "emulate", "--port", "0", "--dispatch", str(fixture_file),
        "--command", f"""bash -c 'cp -- "$GITHUB_EVENT_PATH" {seen}'""",
    )  # fmt: skip
    assert rc == 0, err
    assert json.loads(seen.read_text())["client_payload"]["delivery_id"] == "d-push-1"
    assert json.loads(out[out.index("[") :]) == []  # the command sent no callback


# ----------------------------------------------------------------- the emulator and report


def test_emulator_rejects_hostile_bodies() -> None:
    from ootest.relay.emulate import Emulator

    emu = Emulator().start()
    try:
        deep = httpx.post(f"{emu.url}/github/callback", content=nested(5_000))
        assert deep.status_code == 400 and "nested at most 32" in deep.json()["error"]
        listed = httpx.post(f"{emu.url}/token", json=[1, 2])
        assert listed.status_code == 400 and "expected a JSON object" in listed.json()["error"]
        faults = httpx.post(f"{emu.url}/_faults", json={"count": 10**9})
        assert faults.status_code == 400 and "count" in faults.json()["error"]
        assert httpx.get(f"{emu.url}/jobs").json() == []
    finally:
        emu.stop()


def test_deep_results_line_is_skipped_not_a_traceback(tmp_path: Path) -> None:
    res = tmp_path / "r.jsonl"
    res.write_text(nested(5_000) + "\n" + json.dumps({"outcome": "passed"}) + "\n")
    assert rp.test_results(res) == {"passed": 1, "failed": 0, "skipped": 0, "total": 1}


@pytest.mark.parametrize("body", [b"[1]", nested(5_000).encode(), b"not json"])
def test_odd_oidc_token_response_is_a_delivery_error(body: bytes) -> None:
    client = httpx.Client(
        transport=httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    )
    env = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": "http://oidc.invalid/t",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "r",
    }
    with pytest.raises(rp.DeliveryError, match="the OIDC token response"):
        rp.oidc_token(client, env)


@pytest.mark.parametrize(
    ("ref", "found"),
    [("v1/../main", ", found one with '..'"), (".hidden", ", found one with a component "
     "starting with '.'"), ("x y", ""), ("r" * 201, "")],
)  # fmt: skip
def test_matrix_backend_refs_follow_the_ref_rules(ref: str, found: str) -> None:
    from ootest.relay.matrix import combination_matrix

    with pytest.raises(UserError) as e:
        combination_matrix(SHA, ["a.yaml"], compat=[ref])
    assert str(e.value) == (
        f"backend ref {describe(ref)}: expected {names.SAFE_REF_RULE} and {names.REF_RULE}"
        f"{found}; pass a branch or tag of the backend repository (--backend-ref, --compat)"
    )
    assert combination_matrix(SHA, ["a.yaml"], compat=["release/v1.2"])["include"][1][
        "backend_ref"
    ] == ("release/v1.2")


def test_matrix_is_bounded_by_githubs_matrix_cap() -> None:
    from ootest.relay.matrix import combination_matrix

    assert (
        len(combination_matrix(SHA, ["a.yaml", "b.yaml"], shards=64, compat=["v1"])["include"])
        == 256
    )
    with pytest.raises(UserError) as e:
        combination_matrix(SHA, ["a.yaml"], shards=10**9)
    assert str(e.value) == (
        "--shards/--suite/--compat: expected at most 256 matrix jobs (GitHub's cap per "
        "workflow run), found 1 refs x 1 suites x 1000000000 shards = 1,000,000,000; use "
        "fewer shards, suites or compat refs"
    )


def test_init_into_an_unwritable_place_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    rc, _, err = cli(capsys, "init", "--dir", str(blocker), "--device", "spyre")
    msg = one_line_usage_error(rc, err)
    assert msg.startswith(f"--dir {blocker}: cannot write {blocker}/.github/workflows/crcr-spyre")
    assert msg.endswith(
        "expected a writable repository folder; pass --dir of your backend's checkout"
    )


def test_real_payloads_sit_far_inside_the_bounds(crcr: Envelopes) -> None:
    """Full-size webhooks nest 5 levels, 7 in an event (the figure limits.MAX_DEPTH
    is sized against): our own envelopes, and the real ones in shared/ when present."""
    files = sorted(crcr.folder.glob("*.json"))
    assert len(files) >= 7
    for path in files:
        client_payload = json.loads(path.read_text())
        as_event = json.dumps({"action": "x", "client_payload": client_payload}).encode()
        assert not deeper_than(as_event, 7), path.name
        if path.name.startswith("github_webhook_"):  # full size: the bound is tight
            assert deeper_than(as_event, 6), path.name
        assert len(as_event) < MAX_EVENT_BYTES // 10, path.name
        if client_payload.get("event_type") == "push":
            assert gate(parse_envelope(as_event), L3).event_type == "push"
            hostile = {**client_payload, "payload": dict(client_payload["payload"])}
            hostile["payload"]["ref"] = "refs/tags/ciflow/../../heads/evil"
            with pytest.raises(EnvelopeError, match=r"it has '\.\.'"):
                gate(parse_envelope(hostile), L3)
