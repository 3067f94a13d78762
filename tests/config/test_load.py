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
from tests.conftest import OWN_SPYRE, SpyreConfigs, ootest, run


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _errors(tmp_path: Path, text: str, **kw: object) -> list[str]:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as ei:
        load_config(p, **kw)  # type: ignore[arg-type]
    return [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems]


def test_spyre_configs_load_unchanged(spyre: SpyreConfigs, tmp_path: Path) -> None:
    for name in ("test_view_ops.py", "test_binary_ufuncs.py"):
        (tmp_path / "test").mkdir(exist_ok=True)
        (tmp_path / "test" / name).write_text("")
    files = spyre.all()
    assert [f.name for f in files] == [
        "example_test_config.yaml",
        "test_binary_ufuncs.yaml",
        "test_view_ops_config.yaml",
    ]
    for f in files:
        cfg = load_config(f, env={"TORCH_ROOT": str(tmp_path)})
        assert cfg.files and cfg.files[0].path.parent == tmp_path / "test"
        assert cfg.suite.global_.supported_dtypes


def test_spyre_binary_ufuncs_details(spyre: SpyreConfigs) -> None:
    cfg = load_config(
        spyre.path("test_binary_ufuncs.yaml"), check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    entry = cfg.suite.files[0]
    assert entry.unlisted_test_mode == "skip"
    first = entry.tests[0]
    assert first.mode == "xfail" and "model_1" in first.tags
    ops = first.edits.ops  # type: ignore[union-attr]
    assert [o.name for o in ops.include] == ["add"] and [o.name for o in ops.exclude] == ["gcd"]
    assert ops.include[0].description and ops.exclude[0].description
    names = [n for t in entry.tests[1:] for n in t.names]
    assert "TestBinaryUfuncs::test___mul___not_implemented" in names
    assert "TestBinaryUfuncs::test___add___not_implemented" not in names
    dtypes = [d.name for d in cfg.suite.global_.supported_dtypes or []]
    assert "float16" in dtypes and "int64" in dtypes and "float32" not in dtypes


def test_spyre_view_ops_details(spyre: SpyreConfigs) -> None:
    cfg = load_config(
        spyre.path("test_view_ops_config.yaml"), check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    entry = cfg.suite.files[0]
    assert entry.unlisted_test_mode == "mandatory_success"
    modes = [t.mode for t in entry.tests]
    assert modes.count("xfail") >= 3 and "skip" in modes
    gcd = next(o for o in cfg.suite.global_.supported_ops or [] if o.name == "gcd")
    assert gcd.force_xfail is True
    add = next(o for o in cfg.suite.global_.supported_ops or [] if o.name == "add")
    assert add.dtypes and add.dtypes[0].precision and add.dtypes[0].precision.atol == 1e-3
    edits = {
        (n, "include" if t.edits.dtypes.include else "exclude")  # type: ignore[union-attr]
        for t in entry.tests
        if t.edits and t.edits.dtypes
        for n in t.names
    }
    assert ("TestViewOps::test_conj_self", "include") in edits
    assert ("TestOldViewOps::test_transposes_errors", "exclude") in edits


def test_spyre_function_edits_are_noted(spyre: SpyreConfigs) -> None:
    cfg = load_config(
        spyre.path("example_test_config.yaml"), check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    assert any("edits.functions" in w.key_path for w in cfg.warnings)


def test_spyre_model_calls_load() -> None:
    """Model-derived entries (only in our own example: the published ones predate
    them): an op call with sample_inputs_func, a module built and called."""
    cfg = load_config(
        OWN_SPYRE.path("example_test_config.yaml"), check_paths=False, env={"TORCH_ROOT": "/x"}
    )
    edits = cfg.suite.files[0].tests[1].edits
    assert edits and edits.ops and edits.modules
    (call,) = edits.ops.include
    assert call.name == "torch.mul" and call.sample_inputs_func
    (t,) = call.sample_inputs_func.tensors()
    assert (t.shape, t.stride, t.dtype) == ((2, 8, 64), (1024, 64, 1), "torch.float16")
    (mod,) = edits.modules.include
    assert mod.module_path == "torch.nn.Linear" and len(mod.forward_inputs or []) == 1
    assert any("recorded on cuda:0" in w.message for w in cfg.warnings)


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


def test_cli_validate_spyre_no_paths(spyre: SpyreConfigs) -> None:
    r = ootest(
        "config",
        "validate",
        "--no-paths",
        *map(str, spyre.all()),
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
        (  # lists of strings, and lists that are not only strings, under a key
            "t: {names: [a, 'b'], n: [a, 1, null], m: [a, [b]], e: []}\n",
            {"t": {"names": ["a", "b"], "n": ["a", 1, None], "m": ["a", ["b"]], "e": []}},
            True,
        ),
    ],
)
def test_fast_yaml_build_equals_pyyaml(
    tmp_path: Path, text: str, expected: object, fast: bool
) -> None:
    """The fast builder gives PyYAML's values where it applies and hands everything
    else to PyYAML's constructor; either way the loader reads the values written
    out here (which PyYAML itself is first checked to agree with)."""
    import yaml

    from ootest.config import yamlread as L

    assert yaml.safe_load(text) == expected
    loader = L._Loader(text)
    try:
        node = loader.get_single_node()
        if fast:
            assert L._construct(loader, node, 10_000)[0] == expected
            if "&" not in text:  # the builder's path for files without anchors
                assert L._construct(loader, node, 10_000, aliases=False)[0] == expected
        else:
            with pytest.raises(L._Unusual):
                L._construct(loader, node, 10_000)
    finally:
        loader.dispose()
    p = tmp_path / "c.yaml"
    p.write_text(text)
    assert L.read_yaml(p)[0] == expected


def test_a_file_that_is_not_a_config_is_not_echoed(tmp_path: Path) -> None:
    secret = tmp_path / "secrets.txt"
    secret.write_text("root:x:0:0:" + "TOKEN=abc123 " * 5000)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"test_suite_config:\n  extends: [{secret}]\n  files: []\n")
    r = ootest("config", "validate", "--no-paths", str(cfg))
    assert r.returncode == 1
    out = r.stdout + r.stderr
    assert "expected a YAML config file (.yaml or .yml)" in out  # never read
    assert "TOKEN=abc123" not in out and "root:x" not in out and len(out) < 1000
    secret.rename(secret.with_suffix(".yaml"))  # a YAML file, but not a config
    cfg.write_text(f"test_suite_config:\n  extends: [{secret.with_suffix('.yaml')}]\n")
    r = ootest("config", "validate", "--no-paths", str(cfg))
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "expected a mapping with key 'test_suite_config'" in out
    assert "characters (not shown: it is not a config)" in out
    assert "TOKEN=abc123" not in out and "root:x" not in out and len(out) < 1000


def test_every_entry_knows_where_it_was_written(tmp_path: Path) -> None:
    """Origins are set by the loader (Note [Loader-set attributes]): files, test entries
    (block and flow), their selector items and declared ops, capabilities, selectors."""
    (tmp_path / "t.py").write_text("")
    p = _write(
        tmp_path,
        """\
        test_suite_config:
          test_selectors:
            exclude: [{markers: [slow]}]
          files:
            - path: t.py
              tests:
                - names: [TestX::test_a]
                - {names: ['TestX::test_b[op=add,dtype=float32]'], mode: xfail}
                - names: [TestX::test_c]
                  selectors:
                    include:
                      - {has_ops: true}
                  edits:
                    ops:
                      include:
                        - name: add
          global:
            supported_dtypes:
              - name: float32
        """,
    )
    cfg = load_config(p)
    suite = cfg.suite
    (f,) = suite.files
    assert f.origin == f"{p}:5"
    assert f.path_at == ("t.py", str(p), 5, 13, "test_suite_config.files[0].path")
    assert [t.origin for t in f.tests] == [f"{p}:{n}" for n in (7, 8, 9)]
    (item,) = f.tests[2].selectors.include  # type: ignore[union-attr]
    assert item.origin == f"{p}:12"
    (op,) = f.tests[2].edits.ops.include  # type: ignore[union-attr]
    assert op.origin == f"{p}:16"
    (dt,) = suite.global_.supported_dtypes  # type: ignore[misc]
    assert dt.origin == f"{p}:19"
    (sel,) = suite.test_selectors.exclude  # type: ignore[union-attr]
    assert sel.origin == f"{p}:3"
    # the same models built in code carry no origin
    from ootest.config.model import FileEntry, TestEntry

    assert TestEntry(names=("TestX::test_a",)).origin == ""
    assert FileEntry(path="t.py").path_at == ("t.py", "", 0, 0, "path")


def _big_config(tmp_path: Path, entries: int = 3_000, relay: str = "") -> Path:
    """A config over CACHE_MIN_BYTES, with entries of every kind the loader marks."""
    lines = [
        "test_suite_config:",
        "  files:",
        "    - path: t.py",
        "      tests:",
        "        - names: [TestX::test_sel]",
        "          selectors: {exclude: [{markers: [slow]}]}",
        "          edits: {ops: {include: [{name: add}]}}",
    ]
    for i in range(entries):
        lines.append(f"        - names: ['TestX::test_op_{i}[op=add,dtype=float32]', TestY::t{i}]")
        lines.append(f"          mode: {('xfail', 'skip')[i % 2]}")
        lines.append(f"          reason: entry {i} of a big generated config, long enough")
    lines += ["  global:", "    supported_dtypes: [{name: float32}]", relay]
    (tmp_path / "t.py").write_text("")
    p = tmp_path / "big.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _facts(cfg: object) -> list[object]:
    """What a loaded config tells its users, entry by entry."""
    from ootest.config.load import Config

    assert isinstance(cfg, Config)
    suite = cfg.suite
    out: list[object] = [cfg.relay, [str(w) for w in cfg.warnings], cfg.resolved]
    out += [(d.name, d.origin) for d in suite.global_.supported_dtypes or ()]
    for rf in cfg.files:
        out += [rf.path, rf.entry.origin, rf.entry.path_at]
        for t, names in rf.patterns:
            out.append((t.model_dump(), t.origin, names))
            if t.selectors:
                out += [s.origin for s in t.selectors.exclude]
            if t.edits and t.edits.ops:
                out += [op.origin for op in t.edits.ops.include]
    return out


def test_big_config_rerun_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [Config cache]: a rerun gives the same config; a changed file, a broken
    cache entry or OOTEST_NO_CACHE=1 reads the file."""
    from ootest.config.yamlread import CACHE_MIN_BYTES

    cache = tmp_path / "cache"
    monkeypatch.setenv("OOTEST_CACHE_DIR", str(cache))
    monkeypatch.delenv("OOTEST_NO_CACHE", raising=False)
    p = _big_config(tmp_path)
    assert p.stat().st_size >= CACHE_MIN_BYTES
    first = _facts(load_config(p))
    (kept,) = (cache / "configs").iterdir()
    assert _facts(load_config(p)) == first
    kept.write_bytes(kept.read_bytes()[:1000])  # broken: read the file instead
    assert _facts(load_config(p)) == first
    p.write_text(p.read_text().replace("mode: skip", "mode: xfail_strict"))
    changed = _facts(load_config(p))
    assert changed != first and len(list((cache / "configs").iterdir())) == 2
    assert _facts(load_config(p)) == changed
    monkeypatch.setenv("OOTEST_NO_CACHE", "1")
    p.write_text(p.read_text().replace("mode: xfail\n", "mode: skip\n"))
    load_config(p)
    assert len(list((cache / "configs").iterdir())) == 2  # nothing kept
    small = _write(tmp_path, "test_suite_config: {files: [{path: t.py}]}\n", "small.yaml")
    monkeypatch.delenv("OOTEST_NO_CACHE")
    load_config(small)
    assert len(list((cache / "configs").iterdir())) == 2  # small files are read


def test_cached_config_reports_problems_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation runs again on a rerun, with today's environment: its problems point
    into the file as on a first load."""
    monkeypatch.setenv("OOTEST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OOTEST_NO_CACHE", raising=False)
    p = _big_config(tmp_path, relay="relay:\n  device: ${OOTEST_RELAY_DEV}")
    env = {"OOTEST_RELAY_DEV": "emu"}
    assert load_config(p, env=env).relay.device == "emu"  # type: ignore[union-attr]
    assert len(list((tmp_path / "cache" / "configs").iterdir())) == 1

    def problem() -> str:
        with pytest.raises(ConfigError) as ei:
            load_config(p, env={})
        (found,) = ei.value.problems
        return str(found)

    line = p.read_text().splitlines().index("  device: ${OOTEST_RELAY_DEV}") + 1
    want = (
        f"{p}:{line}:11: relay.device: undefined variable ${{OOTEST_RELAY_DEV}}; export "
        "OOTEST_RELAY_DEV=... or remove it"
    )
    assert problem() == want  # from the cache
    monkeypatch.setenv("OOTEST_NO_CACHE", "1")
    assert problem() == want  # from the file
