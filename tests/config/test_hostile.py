"""Hostile configs: every bound is checked before the work that grows with it, and
every problem is one line with file:line:col, never a traceback (no torch)."""

from __future__ import annotations

import glob
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ootest import naming as names
from ootest.config.load import load_config
from ootest.config.names import NamePattern, Variant
from ootest.errors import ConfigError
from tests.conftest import ROOT, ootest


def _write(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(textwrap.dedent(text))
    return p


def _errors(tmp_path: Path, text: str | bytes, **kw: object) -> list[str]:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(p, **kw)  # type: ignore[arg-type]
    return [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems]


def _bomb(levels: int, tail: str, fan: int = 9) -> str:
    """Nested aliases under relay: (each level ``fan`` times the one below) plus ``tail``."""
    lines = ["test_suite_config: {}", "relay:", "  a0: &a0 [" + ", ".join(["x"] * fan) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join([*lines, tail, ""])


# ------------------------------------------------------------ alias expansion
def test_alias_bomb_with_a_duplicate_key_is_reported_at_once(tmp_path: Path) -> None:
    # 3.6 million values once expanded (under the bound), but the duplicate key
    # check used to walk every expansion (13 s for 0.6 million).
    start = time.perf_counter()
    got = _errors(tmp_path, _bomb(5, "  a0: dup", fan=12))
    assert got == ["c.yaml:9:3: relay.a0: duplicate key 'a0' (first at line 3); keep one"]
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("tail", ["  a0: dup", "  m: {<<: {k: 1}, k: 2}", "  ok: 1"])
def test_alias_bomb_is_refused_before_it_expands(tmp_path: Path, tail: str) -> None:
    got = _errors(tmp_path, _bomb(9, tail))
    assert got == [
        "c.yaml:9:3: relay.a6: expected at most 4,000,000 values once YAML aliases are "
        "expanded; found 4,259,842 by here. Write the values out, or raise the limit with "
        "OOTEST_CONFIG_MAX_NODES=<n>"
    ]


def test_alias_bomb_cli_is_one_line_and_fast(tmp_path: Path) -> None:
    p = _write(tmp_path, _bomb(12, "  m: {<<: {k: 1}, k: 2}"))
    start = time.perf_counter()
    r = ootest("config", "validate", "--no-paths", str(p))
    assert time.perf_counter() - start < 20
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and "OOTEST_CONFIG_MAX_NODES" in r.stderr


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    got = _errors(tmp_path, "test_suite_config: {}\nrelay: &r {device: emu, self: *r}\n")
    assert got == [
        "c.yaml:2:1: relay.self: expected a tree of values; found an alias inside the value "
        "it names (a recursive structure). Remove the alias"
    ]


def test_node_limit_is_a_knob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "test_suite_config:\n  labels: [" + ", ".join(f"l{i}" for i in range(60)) + "]\n"
    assert load_config(_write(tmp_path, text), check_paths=False).suite.labels[59] == "l59"
    monkeypatch.setenv("OOTEST_CONFIG_MAX_NODES", "50")
    assert _errors(tmp_path, text, check_paths=False) == [
        "c.yaml:2:3: test_suite_config.labels: expected at most 50 values once YAML aliases "
        "are expanded; found 65 by here. Write the values out, or raise the limit with "
        "OOTEST_CONFIG_MAX_NODES=<n>"
    ]
    monkeypatch.setenv("OOTEST_CONFIG_MAX_NODES", "many")
    assert _errors(tmp_path, text, check_paths=False) == [
        "OOTEST_CONFIG_MAX_NODES: expected a whole number; found 'many'"
    ]


def test_deep_nesting_is_refused_without_recursion_error(tmp_path: Path) -> None:
    text = "test_suite_config: {}\nrelay: " + "[" * 900 + "]" * 900 + "\n"
    assert _errors(tmp_path, text) == [
        "c.yaml:2:71: relay" + "[0]" * 63 + ": expected at most 64 levels of nesting; "
        "found deeper nesting here"
    ]


# ---------------------------------------------------------------- document size
def test_byte_limit_is_checked_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "test_suite_config:\n  labels: [" + "x, " * 100 + "y]\n"
    monkeypatch.setenv("OOTEST_CONFIG_MAX_BYTES", "200")
    assert _errors(tmp_path, text) == [
        "c.yaml: expected a config file of at most 200 bytes; found 333. Split it with "
        "extends:, or raise the limit with OOTEST_CONFIG_MAX_BYTES=<n>"
    ]


def test_byte_limit_applies_to_extended_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "test_suite_config:\n  labels: [" + "x, " * 100 + "y]\n", "base.yaml")
    monkeypatch.setenv("OOTEST_CONFIG_MAX_BYTES", "200")
    assert _errors(tmp_path, "test_suite_config:\n  extends: base.yaml\n") == [
        "base.yaml: expected a config file of at most 200 bytes; found 333. Split it with "
        "extends:, or raise the limit with OOTEST_CONFIG_MAX_BYTES=<n>"
    ]


# --------------------------------------------------------------------- encoding
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            "test_suite_config: {}\n".encode("utf-16"),
            "c.yaml:1:1: expected UTF-8 text; found a UTF-16 byte order mark. "
            "Save the file as UTF-8",
        ),
        (
            "test_suite_config: {}\n".encode("utf-16-le"),
            "c.yaml:1:2: expected text; found a NUL byte (UTF-16 without a byte order "
            "mark?). Save the file as UTF-8",
        ),
        (
            b"test_suite_config:\n  labels: [caf\xe9]\n",
            "c.yaml:2:15: expected UTF-8 text; found the byte 0xe9. Save the file as UTF-8",
        ),
        (
            b"test_suite_config: {}\n# \x00\n",
            "c.yaml:2:3: expected text; found a NUL byte. Remove it (is this a binary file?)",
        ),
    ],
    ids=["utf16-bom", "utf16-no-bom", "latin1", "nul"],
)
def test_not_utf8_is_one_line(tmp_path: Path, data: bytes, expected: str) -> None:
    assert _errors(tmp_path, data) == [expected]


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    p = _write(tmp_path, b"\xef\xbb\xbftest_suite_config:\n  labels: [x]\n")
    assert load_config(p).suite.labels == ["x"]


@pytest.mark.parametrize(("command", "rc"), [("validate", 1), ("show", 2)])
def test_cli_encoding_errors_exit_codes(tmp_path: Path, command: str, rc: int) -> None:
    p = _write(tmp_path, b"test_suite_config:\n  labels: [\xff]\n")
    r = ootest("config", command, str(p))
    assert r.returncode == rc, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "expected UTF-8 text; found the byte 0xff" in r.stderr


# ------------------------------------------------------------------------ globs
def _tree(root: Path) -> None:
    for rel in (
        "test_a.py",
        "sub/test_b.py",
        "sub/deeper/test_c.py",
        ".hidden/test_h.py",
        "sub/.test_dot.py",
        "sub/notes.txt",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")


@pytest.mark.parametrize(
    "pattern", ["*.py", "**/*.py", "sub/**/test_?.py", "**/test_[ab].py", "sub/*", "**"]
)
def test_bounded_glob_equals_glob(tmp_path: Path, pattern: str) -> None:
    from ootest.config import paths

    _tree(tmp_path)
    text = f"{tmp_path}/{pattern}"
    assert paths.matches(text) == sorted(glob.glob(text, recursive=True))


@pytest.mark.parametrize(
    ("path", "prefix"),
    [("/**/*.py", "/"), ("../*.py", "{tmp}/.."), ("${ROOT}/../../**/*.py", "{tmp}/x/../..")],
)
def test_glob_outside_the_root_is_refused(tmp_path: Path, path: str, prefix: str) -> None:
    (tmp_path / "x").mkdir()
    text = f"test_suite_config:\n  files:\n    - path: '{path}'\n"
    got = _errors(tmp_path, text, env={"ROOT": str(tmp_path / "x")})
    where = prefix.format(tmp=tmp_path).replace(str(tmp_path) + "/", "")
    assert got == [
        f"c.yaml:3:13: test_suite_config.files[0].path: expected a glob inside the config's "
        f"folder or inside the ${{VAR}} it starts with; found {path!r}, which would search "
        f"{where}. Start it with a ${{VAR}} (e.g. ${{TORCH_ROOT}}/) or write it relative to "
        "the config"
    ]


def test_glob_visits_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(30):
        (tmp_path / "t" / f"d{i}").mkdir(parents=True)
        (tmp_path / "t" / f"d{i}" / "x.txt").write_text("")
    text = "test_suite_config:\n  files:\n    - path: 't/**/*.py'\n"
    monkeypatch.setenv("OOTEST_CONFIG_MAX_GLOB", "40")
    assert _errors(tmp_path, text) == [
        "c.yaml:3:13: test_suite_config.files[0].path: expected the glob 't/**/*.py' to look "
        "at most at 40 files and folders; it looks at more. Narrow it, or raise the limit "
        "with OOTEST_CONFIG_MAX_GLOB=<n>"
    ]


def test_path_errors_have_column_and_full_key_path(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    _write(tmp_path, "test_suite_config:\n  files:\n    - path: nothing.py\n", "base.yaml")
    text = "test_suite_config:\n  extends: base.yaml\n  files:\n    - {path: t.py}\n"
    assert _errors(tmp_path, text) == [
        "base.yaml:3:13: test_suite_config.files[0].path: expected an existing test file; "
        "found nothing at nothing.py"
    ]


# ----------------------------------------------------------------------- names
def _variant(method: str) -> Variant:
    return Variant(file="t.py", cls="TestX", method=method, gen_name=method + "_emu")


@pytest.mark.parametrize(
    "name",
    ["re:(a+)+$", "re:^test_" + "(a|a)" * 40 + "$", "(.*a){30}", "TestX::" + "a?" * 40 + "a" * 40],
)
def test_catastrophic_patterns_match_in_linear_time(name: str) -> None:
    p = NamePattern.parse(name)
    start = time.perf_counter()
    assert not p.matches(_variant("test_" + "a" * 40 + "b"))
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize(
    ("name", "yes", "no"),
    [
        ("TestX::test_(sqrt|rsqrt).*", "test_rsqrt_x", "test_log"),
        ("TestX::test_.*_foo_.*", "test_a_foo_b", "test_foo"),
        ("re:^TestX::test_a.*b.*c", "test_axbyc", "test_acb"),
        ("*TestX*::test_?o*", "test_go_far", "test_gx"),
        ("re:(?i)TEST_CAPS", "test_caps", "test_cap"),
    ],
)
def test_patterns_match_as_before(name: str, yes: str, no: str) -> None:
    p = NamePattern.parse(name)
    assert p.matches(_variant(yes)) and not p.matches(_variant(no))


def test_name_errors_have_column_and_full_key_path(tmp_path: Path) -> None:
    text = (
        "test_suite_config:\n  files:\n    - path: t.py\n      tests:\n"
        "        - names: [ok, 're:(?P<x>a)(?P=x)']\n"
    )
    assert _errors(tmp_path, text, check_paths=False) == [
        "c.yaml:5:23: test_suite_config.files[0].tests[0].names[1]: expected a regular "
        "expression without backreferences or lookaround (names are matched in linear "
        "time); found '(?P<x>a)(?P=x)' (invalid perl operator: (?P)"
    ]


# ----------------------------------------------------------------------- relay
RELAY_BAD = """\
test_suite_config: {}
relay:
  device: 'BAD; rm -rf ~'
  landed: maybe
  colour: blue
"""


def test_validate_checks_the_relay_block(tmp_path: Path) -> None:
    assert sorted(_errors(tmp_path, RELAY_BAD)) == [
        f"c.yaml:3:11: relay.device: expected {names.DEVICE_NAME_RULE}; found 'BAD; rm -rf ~'",
        "c.yaml:4:11: relay.landed: expected true or false; found 'maybe'",
        "c.yaml:5:3: relay.colour: unknown key 'colour'; expected one of: branches, device, "
        "landed, pr_actions, pr_label, push_branches, push_tags, release_branches",
    ]
    r = ootest("config", "validate", "--no-paths", str(tmp_path / "c.yaml"))
    assert r.returncode == 1 and r.stderr.count("\n") == 3 and "Traceback" not in r.stderr


def test_relay_gate_reads_the_policy_through_the_loader(tmp_path: Path) -> None:
    bad = _write(tmp_path, RELAY_BAD)
    event = tmp_path / "event.json"
    event.write_text("{}")
    r = ootest("relay", "gate", str(event), "--config", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"c.yaml:3:11: relay.device: expected {names.DEVICE_NAME_RULE}" in r.stderr


def test_relay_extends_and_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ootest.relay.gate import load_policy

    _write(tmp_path, "test_suite_config: {}\nrelay: {device: base, landed: false}\n", "b.yaml")
    child = _write(tmp_path, "test_suite_config: {extends: b.yaml}\n")
    policy = load_policy(str(child), None)
    assert (policy.device, policy.landed) == ("base", False)
    own = _write(
        tmp_path, "test_suite_config: {extends: b.yaml}\nrelay: {device: '${OOTEST_DEVICE}'}\n"
    )
    monkeypatch.setenv("OOTEST_DEVICE", "npu")
    assert load_policy(str(own), None).device == "npu"
    assert load_policy(str(own), "cli").device == "cli"
    got = _errors(tmp_path, "test_suite_config: {}\nrelay: {device: '${OOTEST_RELAY_NOPE}'}\n")
    assert got == [
        "c.yaml:2:17: relay.device: undefined variable ${OOTEST_RELAY_NOPE}; export "
        "OOTEST_RELAY_NOPE=... or remove it"
    ]


@pytest.mark.parametrize("name", ["spyre", "my-npu", "npu_2", "BAD", "x; rm", "a" * 41, ""])
def test_init_and_policy_share_the_device_rule(tmp_path: Path, name: str) -> None:
    from pydantic import ValidationError

    from ootest.errors import UserError
    from ootest.relay.gate import RelayPolicy
    from ootest.relay.init import init

    try:
        RelayPolicy(device=name)
        policy_ok = True
    except ValidationError:
        policy_ok = False
    try:
        init(tmp_path, name, "torch_x", 1, False)
        init_ok = True
    except UserError:
        init_ok = False
    assert policy_ok == init_ok == (name == "spyre")  # torch.device() parses [a-zA-Z_]+


# ------------------------------------------------------------------ JSON Schema
def test_schema_accepts_what_the_loader_accepts(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    from ootest.config.model import Document

    schema = Document.model_json_schema(by_alias=True)
    docs = (ROOT / "docs" / "config.md").read_text()
    example = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    texts = [
        example,
        "test_suite_config:\n  extends: capabilities.yaml\n",
        "test_suite_config:\n  global:\n    supported_dtypes: [float16, {name: bfloat16, "
        "precision: {atol: 1e-2}}]\n    supported_ops: [add, {name: mul, dtypes: [int64]}]\n",
        "test_suite_config: {}\nrelay: {device: npu, pr_label: null, push_tags: ['ciflow/*']}\n",
    ]
    validator = jsonschema.Draft202012Validator(schema)
    for i, text in enumerate(texts):
        p = _write(tmp_path, text, f"s{i}.yaml")
        (tmp_path / "capabilities.yaml").write_text("test_suite_config: {}\n")
        load_config(p, check_paths=False, env={"TORCH_ROOT": "/x"})
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(text))]
        assert errors == [], (i, errors)

    def where(errors: list[Any]) -> set[str]:
        out = set()
        for e in errors:
            out.add(".".join(map(str, e.absolute_path)))
            out |= where(e.context or [])
        return out

    bad = list(validator.iter_errors(yaml.safe_load(RELAY_BAD)))
    assert where(bad) == {"relay", "relay.device", "relay.landed"}


def test_schema_has_the_relay_policy() -> None:
    from ootest.config.model import Document

    relay = Document.model_json_schema(by_alias=True)["$defs"]["RelayPolicy"]
    assert relay["additionalProperties"] is False
    assert relay["properties"]["device"]["pattern"] == names.DEVICE_NAME_PATTERN


@pytest.mark.parametrize("cls", ["", "TestX::", "re::", "_T9::"])
@pytest.mark.parametrize("method", ["test_a", "9bad", "test-x"])
@pytest.mark.parametrize(
    "body",
    [
        *("op=add", "op=add,dtype=float32", "dtype=float32,dtype=int64", "op=a=b", "op="),
        *(" op=add", "op=add ", "op=add,", ",op=add", "op", "op=x y", "op=[x]", "op=(a|b)", ""),
    ],
)
def test_common_name_form_parses_as_every_form(cls: str, method: str, body: str) -> None:
    """NamePattern.parse reads 'Class::method[k=v,...]' by a shortcut: the same
    pattern, or the same error, as the general path."""
    raw = f"{cls}{method}[{body}]"
    try:
        want: object = NamePattern._parse(raw)
    except ValueError as e:
        want = str(e)
    try:
        got: object = NamePattern.parse(raw)
    except ValueError as e:
        got = str(e)
    assert got == want
