"""Loading, validation messages, expansion and composition (no torch)."""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import date
from pathlib import Path

import pytest

from ootest.config.load import load_config
from ootest.errors import ConfigError
from tests.conftest import ootest, run


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _errors(tmp_path: Path, text: str, **kw: object) -> list[str]:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(p, **kw)  # type: ignore[arg-type]
    return [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems]


def test_spyre_configs_load_unchanged(spyre_dir: Path, tmp_path: Path) -> None:
    for name in ("test_view_ops.py", "test_binary_ufuncs.py"):
        (tmp_path / "test").mkdir(exist_ok=True)
        (tmp_path / "test" / name).write_text("")
    for f in sorted(spyre_dir.glob("*.yaml")):
        cfg = load_config(f, env={"TORCH_ROOT": str(tmp_path)})
        assert cfg.files and cfg.files[0].path.parent == tmp_path / "test"
        assert cfg.suite.global_.supported_dtypes


def test_spyre_view_ops_details(spyre_dir: Path) -> None:
    cfg = load_config(
        spyre_dir / "test_view_ops_config.yaml", check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    entry = cfg.suite.files[0]
    assert entry.unlisted_test_mode == "mandatory_success"
    modes = [t.mode for t in entry.tests]
    assert modes.count("xfail") >= 3 and "skip" in modes
    gcd = next(o for o in cfg.suite.global_.supported_ops or [] if o.name == "gcd")
    assert gcd.force_xfail is True
    add = next(o for o in cfg.suite.global_.supported_ops or [] if o.name == "add")
    assert add.dtypes and add.dtypes[0].precision and add.dtypes[0].precision.atol == 1e-3


def test_spyre_function_edits_are_noted(spyre_dir: Path) -> None:
    cfg = load_config(
        spyre_dir / "example_test_config.yaml", check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    assert any("edits.functions" in w.key_path for w in cfg.warnings)


def test_spyre_planned_keys_and_pytorch_root(tmp_path: Path) -> None:
    (tmp_path / "pt" / "test").mkdir(parents=True)
    (tmp_path / "pt" / "test" / "test_x.py").write_text("")
    p = _write(
        tmp_path,
        """\
        test_suite_config:
          files:
            - path: ${TORCH_ROOT}/test/test_x.py
              tests:
                - names: [TestX::test_a]
                  selectors: {include: [{has_ops: true}]}
          global:
            devices: [cpu, spyre]
        """,
    )
    cfg = load_config(p, env={"PYTORCH_ROOT": str(tmp_path / "pt")})
    assert cfg.files[0].path == tmp_path / "pt" / "test" / "test_x.py"
    assert cfg.files[0].patterns[0][0].mode == "mandatory_success"  # mode defaults
    notes = {w.key_path: w.message for w in cfg.warnings}
    assert "not used" in notes["global.devices"]
    assert "files[0].tests[0].selectors" not in notes  # applied now (tests/plugin)
    (item,) = cfg.suite.files[0].tests[0].selectors.include  # type: ignore[union-attr]
    assert item.has_ops is True and item.needs_evidence and item.origin.endswith(":6")


def test_file_when_leaves_files_out(tmp_path: Path) -> None:
    from ootest.config.when import Context

    (tmp_path / "t.py").write_text("")
    (tmp_path / "u.py").write_text("")
    p = _write(
        tmp_path,
        """\
        test_suite_config:
          files:
            - path: t.py
              when: {torch: "<2.0"}
            - path: u.py
              when: {torch: ">=2.12", platform: linux}
        """,
    )
    cfg = load_config(p, ctx=Context(torch_version="2.13.0+cpu", platform="linux"))
    assert [f.path.name for f in cfg.files] == ["u.py"]
    assert any(w.key_path == "files[0]" and "when" in w.message for w in cfg.warnings)


def test_cli_validate_spyre_no_paths(spyre_dir: Path) -> None:
    r = ootest(
        "config",
        "validate",
        "--no-paths",
        *map(str, sorted(spyre_dir.glob("*.yaml"))),
        env={"TORCH_ROOT": "/nonexistent"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(": ok (") == 3


BASE = """\
test_suite_config:
  files:
    - path: t.py
      tests:
"""

# (yaml, expected problem lines) -- pinned messages.
CASES = [
    (
        "test_suite_config:\n  test_selectors: {include: [{has_ops: mm}, {}]}\n",
        [
            "c.yaml:2:40: test_suite_config.test_selectors.include[0].has_ops: expected true, "
            "false or a list of op names; found 'mm'",
            "c.yaml:2:45: test_suite_config.test_selectors.include[1]: expected at least one of "
            "has_ops, ops_in_supported, markers, name_patterns; found none",
        ],
    ),
    (
        "test_suite_config:\n  files: 3\n",
        ["c.yaml:2:10: test_suite_config.files: expected a list; found a number (3)"],
    ),
    (
        "test_suite_config:\n  filez: []\n",
        [
            "c.yaml:2:3: test_suite_config.filez: unknown key 'filez'; expected one of: device, "
            "extends, files, global, labels, op_map, test_selectors, timeout. Did you mean "
            "'files'?"
        ],
    ),
    (
        BASE + "        - names: [A::test_a]\n          mode: xfial\n",
        [
            "c.yaml:6:17: test_suite_config.files[0].tests[0].mode: expected one of "
            "'mandatory_success', 'xfail', 'xfail_strict' or 'skip'; found 'xfial'. "
            "Did you mean 'xfail'?"
        ],
    ),
    (
        BASE + "        - names: [A::test_a]\n          tags: [ok, 'not ok']\n",
        [
            "c.yaml:6:11: test_suite_config.files[0].tests[0].tags: expected a valid "
            "pytest mark name (letters, digits, _ - . : + /); found 'not ok'"
        ],
    ),
    (
        BASE + "        - mode: skip\n",
        ["c.yaml:5:11: test_suite_config.files[0].tests[0].names: missing required key 'names'"],
    ),
    (
        BASE + "        - names: []\n          mode: skip\n",
        [
            "c.yaml:5:11: test_suite_config.files[0].tests[0].names: expected a non-empty list; "
            "found a list"
        ],
    ),
    (
        BASE + "        - names: A::test_a\n          mode: skip\n",
        [
            "c.yaml:5:18: test_suite_config.files[0].tests[0].names: expected a list; "
            "found 'A::test_a'"
        ],
    ),
    (
        BASE + "        - names: ['re:test_(']\n          mode: skip\n",
        [
            "c.yaml:5:19: test_suite_config.files[0].tests[0].names[0]: "
            "expected a valid regular expression after "
            "'re:'; found 'test_(' (missing ), unterminated subpattern at position 5)"
        ],
    ),
    (
        BASE + "        - names: ['A::test a']\n          mode: skip\n",
        [
            "c.yaml:5:19: test_suite_config.files[0].tests[0].names[0]: "
            "expected 'Class::test_method', 'test_method' "
            "or 're:<regex>'; found 'A::test a'"
        ],
    ),
    (
        BASE + "        - names: ['A::test_(x']\n          mode: skip\n",
        [
            "c.yaml:5:19: test_suite_config.files[0].tests[0].names[0]: "
            "expected a pattern matching the whole "
            "'Class::test_method' (a regular expression); found 'A::test_(x' (missing ), "
            "unterminated subpattern at position 8)"
        ],
    ),
    (
        BASE + "        - names: ['A::t[op]']\n          mode: skip\n",
        [
            "c.yaml:5:19: test_suite_config.files[0].tests[0].names[0]: "
            "expected 'key=value' pairs in the variant "
            "filter of 'A::t[op]'; found 'op'"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: t.py\n      unlisted_test_mode: never\n",
        [
            "c.yaml:4:27: test_suite_config.files[0].unlisted_test_mode: expected one of "
            "'mandatory_success', 'xfail', 'xfail_strict' or 'skip'; found 'never'"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - pth: t.py\n",
        [
            "c.yaml:3:7: test_suite_config.files[0].pth: unknown key 'pth'; expected one of: "
            "description, device_restrictions, expect, issue, labels, path, reason, tests, "
            "unlisted_test_mode, when. Did you mean 'path'?",
            "c.yaml:3:7: test_suite_config.files[0].path: missing required key 'path'",
        ],
    ),
    (
        "test_suite_config:\n  global:\n    supported_dtypes: [[float16]]\n",
        [
            "c.yaml:3:24: test_suite_config.global.supported_dtypes[0]: expected a mapping; "
            "found a list"
        ],
    ),
    (
        "test_suite_config:\n  global:\n    supported_ops:\n      - name: add\n        dtype: []\n",
        [
            "c.yaml:5:9: test_suite_config.global.supported_ops[0].dtype: unknown key 'dtype'; "
            "expected one of: description, dtypes, force_xfail, issue, name, reason. "
            "Did you mean 'dtypes'?"
        ],
    ),
    (
        "test_suite_config:\n  global:\n    supported_dtypes:\n      - name: float16\n"
        "        precision: {atol: big}\n",
        [
            "c.yaml:5:27: test_suite_config.global.supported_dtypes[0].precision.atol: "
            "expected a number; found 'big'"
        ],
    ),
    (
        "test_suite_config:\n  global:\n    supported_dtypes:\n      - name: float16\n"
        "        force_xfail: maybe\n",
        [
            "c.yaml:5:22: test_suite_config.global.supported_dtypes[0].force_xfail: "
            "expected true or false; found 'maybe'"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: ${NOPE_UNSET_VAR}/t.py\n",
        [
            "c.yaml:3:13: test_suite_config.files[0].path: "
            "undefined variable ${NOPE_UNSET_VAR} in path "
            "'${NOPE_UNSET_VAR}/t.py'; export NOPE_UNSET_VAR=... or remove it from the path"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/t.py\n",
        [
            "c.yaml:3:13: test_suite_config.files[0].path: "
            "undefined variable ${TORCH_ROOT} in path "
            "'${TORCH_ROOT}/test/t.py'; export TORCH_ROOT=/path/to/pytorch (a checkout whose test/ "
            "folder holds the upstream tests; PYTORCH_ROOT works too)"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: ${1bad}/t.py\n",
        [
            "c.yaml:3:13: test_suite_config.files[0].path: "
            "expected a variable name in ${...}; found '1bad'"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: missing_file.py\n",
        [
            "c.yaml:3:13: test_suite_config.files[0].path: "
            "expected an existing test file; found nothing at "
            "missing_file.py"
        ],
    ),
    (
        "test_suite_config:\n  files:\n    - path: 'nothing_*.py'\n",
        [
            "c.yaml:3:13: test_suite_config.files[0].path: "
            "expected the glob 'nothing_*.py' to match test "
            "files; it matches none"
        ],
    ),
    (
        "test_suite_config:\n  files: [\n",
        ["c.yaml:3:1: YAML syntax error: did not find expected node content; fix the syntax"],
    ),
    (
        "test_suite_config:\n  labels: []\n  labels: [x]\n",
        [
            "c.yaml:3:3: test_suite_config.labels: duplicate key 'labels' (first at line 2); "
            "keep one"
        ],
    ),
    (
        "- just\n- a list\n",
        ["c.yaml:1:1: expected a mapping with key 'test_suite_config'; found a list"],
    ),
    (
        "other: 1\n",
        [
            "c.yaml:1:1: test_suite_config: missing required key 'test_suite_config'",
            "c.yaml:1:1: other: unknown key 'other'; expected one of: relay, test_suite_config",
        ],
    ),
    (
        BASE
        + "        - names: [A::test_a]\n          mode: skip\n          when: {torch: '>>2'}\n",
        [
            "c.yaml:7:25: test_suite_config.files[0].tests[0].when.torch: expected a version "
            "specifier like '>=2.12,<2.14', found '>>2'"
        ],
    ),
    (
        "test_suite_config:\n  timeout: -1\n",
        ["c.yaml:2:12: test_suite_config.timeout: expected a number greater than 0; found -1"],
    ),
    (
        "test_suite_config:\n  extends: nothere.yaml\n",
        [
            "c.yaml:2:12: test_suite_config.extends[0]: expected an existing config file; found "
            "no file at nothere.yaml"
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_pinned_errors(tmp_path: Path, text: str, expected: list[str]) -> None:
    (tmp_path / "t.py").write_text("")
    got = _errors(tmp_path, text, env={})
    assert sorted(got) == sorted(expected)


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    text = BASE + "        - names: [A::a]\n          mode: bad\n        - names: []\n"
    assert len(_errors(tmp_path, text)) == 2


def test_extends_composes_global_and_files(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    (tmp_path / "u.py").write_text("")
    _write(
        tmp_path,
        """\
        test_suite_config:
          labels: [trunk]
          files: [{path: t.py}]
          global:
            supported_dtypes: [{name: float32}, {name: float16}]
            supported_ops: [add, {name: mul, force_xfail: true}]
        """,
        "base.yaml",
    )
    child = _write(
        tmp_path,
        """\
        test_suite_config:
          extends: base.yaml
          labels: [nightly]
          files: [{path: u.py}]
          global:
            supported_ops: [{name: mul}]
        """,
    )
    cfg = load_config(child)
    g = cfg.suite.global_
    assert [d.name for d in g.supported_dtypes or []] == ["float32", "float16"]
    assert {o.name: o.force_xfail for o in g.supported_ops or []} == {"add": False, "mul": False}
    assert [f.path.name for f in cfg.files] == ["t.py", "u.py"]
    assert cfg.suite.labels == ["trunk", "nightly"]


def test_extends_cycle(tmp_path: Path) -> None:
    _write(tmp_path, "test_suite_config:\n  extends: b.yaml\n", "a.yaml")
    _write(tmp_path, "test_suite_config:\n  extends: a.yaml\n", "b.yaml")
    with pytest.raises(ConfigError, match="circular extends"):
        load_config(tmp_path / "a.yaml")


def test_env_expansion_and_glob(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    for n in ("test_a.py", "test_b.py"):
        (tmp_path / "test" / n).write_text("")
    p = _write(tmp_path, "test_suite_config:\n  files:\n    - path: ${ROOT}/test/test_*.py\n")
    cfg = load_config(p, env={"ROOT": str(tmp_path)})
    assert [f.path.name for f in cfg.files] == ["test_a.py", "test_b.py"]


def test_schema_and_no_torch_import() -> None:
    code = (
        "import sys, io, contextlib\n"
        "from ootest.cli.main import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = main(['config', 'schema'])\n"
        "assert rc == 0\n"
        "assert 'torch' not in sys.modules, 'config command imported torch'\n"
        "print(buf.getvalue())\n"
    )
    r = run([sys.executable, "-c", code])
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    suite = schema["$defs"]["TestSuiteConfig"]["properties"]
    assert {"files", "global", "labels", "extends"} <= set(suite)
    assert schema["$defs"]["TestEntry"]["properties"]["mode"]["enum"] == [
        "mandatory_success",
        "xfail",
        "xfail_strict",
        "skip",
    ]


def test_cli_validate_reports_problems(tmp_path: Path) -> None:
    p = _write(tmp_path, "test_suite_config:\n  filez: []\n")
    r = ootest("config", "validate", str(p))
    assert r.returncode == 1
    assert "unknown key 'filez'" in r.stderr and "Traceback" not in r.stderr


def test_cli_show_resolves(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    p = _write(tmp_path, "test_suite_config:\n  files: [{path: t.py}]\n")
    r = ootest("config", "show", str(p))
    assert r.returncode == 0, r.stderr
    assert str(tmp_path / "t.py") in r.stdout


_SHARED = {"names": ["t1", "t2"], "mode": "skip"}


@pytest.mark.parametrize(
    ("text", "expected", "fast"),
    [
        (
            "a: &x {names: [t1, t2], mode: skip}\nb: *x\nc: [*x, *x]\n",
            {"a": _SHARED, "b": _SHARED, "c": [_SHARED, _SHARED]},
            True,
        ),
        (
            "e: !!str 123\nf: [1, 2.5, true, null, 2020-01-01, ~, 'q', 0x1F, yes]\n1: int key\n",
            {
                "e": "123",
                "f": [1, 2.5, True, None, date(2020, 1, 1), None, "q", 31, True],
                1: "int key",
            },
            True,  # !!str: the tag the builder reads as a plain string
        ),
        (
            "a: &x {names: [t1]}\nd: {<<: *x, mode: xfail}\n",
            {"a": {"names": ["t1"]}, "d": {"names": ["t1"], "mode": "xfail"}},
            False,  # a merge key
        ),
        ("s: !!set {a, b}\n", {"s": {"a", "b"}}, False),  # a tagged mapping
        ("deep: [[[{k: [v]}]]]\n", {"deep": [[[{"k": ["v"]}]]]}, True),
    ],
)
def test_fast_yaml_build_equals_pyyaml(
    tmp_path: Path, text: str, expected: object, fast: bool
) -> None:
    """The fast builder gives PyYAML's values where it applies and hands everything
    else to PyYAML's constructor; either way the loader reads the values written
    out here (which PyYAML itself is first checked to agree with)."""
    import yaml

    from ootest.config import load as L

    assert yaml.safe_load(text) == expected
    loader = L._Loader(text)
    try:
        node = loader.get_single_node()
        if fast:
            assert L._construct(loader, node, 10_000)[0] == expected
        else:
            with pytest.raises(L._Unusual):
                L._construct(loader, node, 10_000)
    finally:
        loader.dispose()
    p = tmp_path / "c.yaml"
    p.write_text(text)
    assert L._read_yaml(p)[0] == expected


def test_a_file_that_is_not_a_config_is_not_echoed(tmp_path: Path) -> None:
    secret = tmp_path / "secrets.txt"
    secret.write_text("root:x:0:0:" + "TOKEN=abc123 " * 5000)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"test_suite_config:\n  extends: [{secret}]\n  files: []\n")
    r = ootest("config", "validate", "--no-paths", str(cfg))
    assert r.returncode == 1
    out = r.stdout + r.stderr
    assert "expected a mapping with key 'test_suite_config'" in out
    assert "characters starting 'root:x:0:0:TOKEN=abc123" in out
    assert out.count("TOKEN=abc123") <= 3 and len(out) < 1000
