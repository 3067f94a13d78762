"""Issue 28 items 1-3: a config from a pull request reads no file outside its
roots, leaks no environment variable and evaluates nothing. The hostile inputs
are gathered here; each test prints how many it tried (``-s`` shows it)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ootest.config.load import load_config
from ootest.errors import ConfigError
from tests.conftest import ootest

SECRET = "hunter2-SUPERSECRET"


def _problems(cfg: Path, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_config(cfg, env=env, check_paths=False)
    return [str(p) for p in ei.value.problems]


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A config folder, a folder beside it (outside every root) and the roots."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    torch_root, device_root, allowed = (tmp_path / n for n in ("torch", "device", "allowed"))
    for d in (work, outside, torch_root, device_root, allowed, work / "sub"):
        d.mkdir()
    base = "test_suite_config:\n  labels: [base]\n"
    for d in (outside, torch_root, device_root, allowed, work / "sub"):
        (d / "base.yaml").write_text(base)
    (outside / "secrets.yaml").write_text(f"password: {SECRET}\n")
    (work / ".env").write_text(f"DB_PASSWORD={SECRET}\n")
    (work / "secrets.yaml").write_text(f"DB_PASSWORD: {SECRET}\nAPI_KEY: {SECRET}\n")
    (work / "token.yaml").write_text(f"{SECRET} {SECRET}\n")
    (work / "list.yaml").write_text(f"- {SECRET}\n")
    (work / "number.yaml").write_text("12345\n")
    (work / "link.yaml").symlink_to(outside / "base.yaml")
    (work / "passwd.yaml").symlink_to("/etc/passwd")
    (work / "dir.yaml").mkdir()
    os.mkfifo(work / "fifo.yaml")
    return {
        "work": work,
        "outside": outside,
        "TORCH_ROOT": torch_root,
        "TORCH_DEVICE_ROOT": device_root,
        "allowed": allowed,
    }


def _env(tree: dict[str, Path], **more: str) -> dict[str, str]:
    return {
        "TORCH_ROOT": str(tree["TORCH_ROOT"]),
        "TORCH_DEVICE_ROOT": str(tree["TORCH_DEVICE_ROOT"]),
        "PATH": os.environ.get("PATH", ""),
        **more,
    }


NOT_YAML = "expected a YAML config file (.yaml or .yml); found {}. Extend only ootest configs"
OUTSIDE = (
    "expected a config inside the config's folder, ${{TORCH_ROOT}}, ${{TORCH_DEVICE_ROOT}} or a "
    "folder of $OOTEST_EXTENDS_PATH; found {}, outside them. Move it into one, or add its "
    "folder to OOTEST_EXTENDS_PATH"
)
NOT_CONFIG = (
    "expected a config (a mapping with key 'test_suite_config'); found {} without it (not "
    "shown: it is not a config). Extend only ootest configs"
)
#: (extends:, the problem's message; {w} is the config's folder, {o} the one beside it)
REFUSED = [
    ("/etc/passwd", NOT_YAML.format("/etc/passwd")),
    ("/etc/shadow", NOT_YAML.format("/etc/shadow")),
    ("/proc/self/environ", NOT_YAML.format(Path("/proc/self/environ").resolve())),
    ("/dev/zero", NOT_YAML.format("/dev/zero")),
    (".env", NOT_YAML.format("{w}/.env")),
    ("passwd.yaml", NOT_YAML.format("/etc/passwd")),  # a symlink: where it points counts
    ("../outside/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("../outside/secrets.yaml", OUTSIDE.format("{o}/secrets.yaml")),
    ("{o}/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("sub/../../outside/base.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("link.yaml", OUTSIDE.format("{o}/base.yaml")),
    ("secrets.yaml", "{w}/secrets.yaml:1:1: " + NOT_CONFIG.format("a mapping of 2 keys")),
    (
        "token.yaml",
        "{w}/token.yaml:1:1: expected a mapping with key 'test_suite_config'; "
        "found text of 39 characters (not shown: it is not a config)",
    ),
    (
        "list.yaml",
        "{w}/list.yaml:1:1: expected a mapping with key 'test_suite_config'; found a list",
    ),
    (
        "number.yaml",
        "{w}/number.yaml:1:1: expected a mapping with key 'test_suite_config'; "
        "found a single value",
    ),
    ("fifo.yaml", "expected an existing config file; found no file at {w}/fifo.yaml"),
    ("dir.yaml", "expected an existing config file; found no file at {w}/dir.yaml"),
    # not expanded: a path under the config's folder, which does not exist
    (
        "~/.ssh/config.yaml",
        "expected an existing config file; found no file at {w}/~/.ssh/config.yaml",
    ),
    (
        "${HOME}/.config/x.yaml",
        "expected an existing config file; found no file at {w}/${HOME}/.config/x.yaml",
    ),
]


def test_extends_reads_nothing_outside_the_roots_and_quotes_no_file(
    tree: dict[str, Path],
) -> None:
    work, outside = tree["work"], tree["outside"]
    env = _env(tree)
    start = time.monotonic()
    for ext, want in REFUSED:
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext.replace('{o}', str(outside))}'\n")
        got = _problems(cfg, env)
        text = want.replace("{w}", str(work)).replace("{o}", str(outside))
        if not text.startswith(str(work) + "/") or "c.yaml" in text:
            text = f"{cfg}:2:12: test_suite_config.extends[0]: {text}"
        assert got == [text], ext
        assert SECRET not in "\n".join(got)
    took = time.monotonic() - start
    print(f"extends: {len(REFUSED)} hostile targets refused in {took:.2f} s")
    assert took < 20


def test_extends_follows_the_roots_and_the_allow_list(tree: dict[str, Path]) -> None:
    work = tree["work"]
    allowed = {
        "sub/base.yaml": {},
        "${TORCH_ROOT}": {},
        "${TORCH_DEVICE_ROOT}": {},
        "${allowed}": {"OOTEST_EXTENDS_PATH": f"/nowhere{os.pathsep}{tree['allowed']}"},
    }
    for ext, more in allowed.items():
        for name, path in tree.items():
            ext = ext.replace("${" + name + "}", f"{path}/base.yaml")
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext}'\n")
        assert load_config(cfg, env=_env(tree, **more), check_paths=False).suite.labels == [
            "base"
        ], ext
    # without the allow-list entry, the same file is refused
    cfg.write_text(f"test_suite_config:\n  extends: '{tree['allowed']}/base.yaml'\n")
    assert _problems(cfg, _env(tree)) == [
        f"{cfg}:2:12: test_suite_config.extends[0]: "
        + OUTSIDE.format(f"{tree['allowed']}/base.yaml")
    ]


def test_config_validate_never_prints_an_extended_file(tree: dict[str, Path]) -> None:
    work = tree["work"]
    for ext in ("/etc/passwd", ".env", "secrets.yaml", "token.yaml"):
        cfg = work / "c.yaml"
        cfg.write_text(f"test_suite_config:\n  extends: '{ext}'\n")
        r = ootest("config", "validate", "--no-paths", str(cfg), env=_env(tree))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert SECRET not in r.stdout + r.stderr and "root:x:0:0" not in r.stderr


def test_an_emu_profile_that_is_not_one_is_not_quoted(tmp_path: Path) -> None:
    """``device: emu:<path>`` names a profile file a pull request may ship: one that
    extends a symlink to any file gets an error that quotes none of it."""
    from ootest.device.emu import DeviceError, read_profile

    (tmp_path / "secret.yaml").write_text(f"TOKEN={SECRET}\n" * 50)
    (tmp_path / "p.yaml").write_text("extends: secret.yaml\n")
    with pytest.raises(DeviceError) as e:
        read_profile(str(tmp_path / "p.yaml"))
    assert str(e.value) == (
        f"{tmp_path}/secret.yaml:1:1: expected a mapping (description, extends, dtypes, ops, "
        "op_dtypes, faults), found text of 1,299 characters (not shown: it is not a profile)"
    )


# ------------------------------------------------------------------ items 2 and 3
EVENT = Path(__file__).resolve().parent.parent / "fixtures" / "crcr" / "pull_request_opened.json"
ALLOWED = (
    "expected a variable meant for relay: (OOTEST_DEVICE or OOTEST_RELAY_*); found "
    "${{{0}}}. Write the value, or export it under a name starting OOTEST_RELAY_"
)
HIDDEN = "found the value of {} (not shown: it comes from the environment)"
#: (relay: section, environment, the problem's key and message); the environment
#: always holds GH_TOKEN, a secret that must never show
RELAY_CONFIGS = [
    ("pr_label: 'ciflow/${GH_TOKEN}'", {}, "relay.pr_label", ALLOWED.format("GH_TOKEN")),
    ("device: '${GH_TOKEN}'", {}, "relay.device", ALLOWED.format("GH_TOKEN")),
    ("branches: [main, '${GH_TOKEN}']", {}, "relay.branches[1]", ALLOWED.format("GH_TOKEN")),
    ("push_tags: ['${HOME}']", {}, "relay.push_tags[0]", ALLOWED.format("HOME")),
    ("pr_label: '${OOTEST_RELAY_}'", {}, "relay.pr_label", ALLOWED.format("OOTEST_RELAY_")),
    (
        "device: '${OOTEST_RELAY_DEV}'",
        {"OOTEST_RELAY_DEV": SECRET},
        "relay.device",
        "expected a backend name of 1-40 lowercase letters or '_', starting with a letter "
        "(what torch.device() accepts for a privateuse1 backend); "
        + HIDDEN.format("${OOTEST_RELAY_DEV}"),
    ),
    (
        "landed: '${OOTEST_RELAY_LANDED}'",
        {"OOTEST_RELAY_LANDED": SECRET},
        "relay.landed",
        "expected true or false; " + HIDDEN.format("${OOTEST_RELAY_LANDED}"),
    ),
    (
        "pr_label: 'ciflow/${OOTEST_RELAY_X}/{oops}'",
        {"OOTEST_RELAY_X": SECRET},
        "relay.pr_label",
        "expected a label whose only placeholder is {device}; "
        + HIDDEN.format("ciflow/${OOTEST_RELAY_X}/{oops}"),
    ),
    # item 3: a fixed substitution, checked by config validate
    *[
        (
            f"pr_label: '{label}'",
            {},
            "relay.pr_label",
            f"expected a label whose only placeholder is {{device}}; found {shown!r}. "
            "Remove it (braces are not allowed otherwise)",
        )
        for label, shown in [
            ("ciflow/{x}", "{x}"),
            ("ciflow/{device.__class__}", "{device.__class__}"),
            ("ciflow/{device!r}", "{device!r}"),
            ("ciflow/{device:>99999999}", "{device:>99999999}"),
            ("ciflow/{0}", "{0}"),
            ("ciflow/{}", "{}"),
            ("ciflow/{device", "{"),
            ("ciflow/device}", "}"),
            ("{{device}}", "{"),
            ("ciflow/{" + "d" * 60 + "}", "{" + "d" * 36 + "..."),
        ]
    ],
]


def test_relay_expands_only_its_variables_and_never_shows_their_values(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    for section, more, key, message in RELAY_CONFIGS:
        cfg.write_text(f"test_suite_config: {{}}\nrelay:\n  {section}\n")
        env = {"GH_TOKEN": SECRET, "HOME": "/root", **more}
        got = _problems(cfg, env)
        assert len(got) == 1 and got[0].startswith(f"{cfg}:3:"), got
        assert got[0].split(": ", 1)[1] == f"{key}: {message}", section
        assert SECRET not in got[0]
    print(f"relay: {len(RELAY_CONFIGS)} hostile relay sections refused")


def test_relay_gate_prints_the_written_variable_not_its_value(tmp_path: Path) -> None:
    from ootest.relay.gate import gate, load_policy, parse_envelope, read_event

    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "test_suite_config: {}\nrelay:\n  device: '${OOTEST_DEVICE}'\n"
        "  pr_label: 'ciflow/${OOTEST_RELAY_TEAM}/{device}'\n"
    )
    env = {"OOTEST_DEVICE": "secretdev", "OOTEST_RELAY_TEAM": SECRET, "GH_TOKEN": SECRET}
    r = ootest("relay", "gate", str(EVENT), "--config", str(cfg), env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("skip: PR #161803 opened: no label ciflow/${OOTEST_RELAY_TEAM}/{device}\n")
    own = tmp_path / "own.yaml"  # a label of its own, the device from the environment
    own.write_text("test_suite_config: {}\nrelay:\n  device: '${OOTEST_DEVICE}'\n")
    r = ootest("relay", "gate", str(EVENT), "--config", str(own), "--json", env=env)
    assert json.loads(r.stdout)["reason"] == (
        "PR #161803 opened: no label ciflow/crcr/${OOTEST_DEVICE}"
    )
    assert "secretdev" not in r.stdout + r.stderr
    # the values are used all the same; --device is the command line's, shown
    os.environ["OOTEST_DEVICE"] = "spyre"
    try:
        policy = load_policy(str(own), None)
        assert (policy.device, policy.label()) == ("spyre", "ciflow/crcr/spyre")
        with_cli = load_policy(str(own), "npu")
        event = parse_envelope(*read_event(str(EVENT)))
        assert gate(event, with_cli).reason == "PR #161803 opened: no label ciflow/crcr/npu"
    finally:
        del os.environ["OOTEST_DEVICE"]
    r = ootest("config", "show", "--no-paths", str(cfg), env=env)
    assert r.returncode == 0, r.stderr
    assert "device: ${OOTEST_DEVICE}" in r.stdout
    assert "pr_label: ciflow/${OOTEST_RELAY_TEAM}/{device}" in r.stdout
    assert SECRET not in r.stdout and "secretdev" not in r.stdout


def test_a_label_is_substituted_not_formatted() -> None:
    from pydantic import ValidationError

    from ootest.config.relay_policy import RelayPolicy

    assert RelayPolicy(device="npu", pr_label="ciflow/{device}/{device}").label() == (
        "ciflow/npu/npu"
    )
    assert RelayPolicy(pr_label="plain-label").label() == "plain-label"
    with pytest.raises(ValidationError):
        RelayPolicy(pr_label="ciflow/{device.__init__.__globals__}")
