"""The model-call schema: what validates, the pinned errors, the notes (no torch)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ootest.config.load import load_config
from ootest.errors import ConfigError
from tests.conftest import ootest
from tests.model.fixture import CONFIG


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    (tmp_path / "test_model_ops.py").write_text("")
    p = tmp_path / "cfg.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_the_torch_spyre_shaped_fixture_validates(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path))
    entry = cfg.suite.files[0].tests[0]
    assert entry.edits is not None and entry.edits.ops is not None
    calls = entry.edits.ops.include
    assert [c.name for c in calls][:2] == ["torch.mul", "torch.nn.functional.embedding"]
    mul = calls[0]
    assert mul.tags == ("bf16operation", "constant", "torch.mul.1")
    assert mul.origin == f"{tmp_path / 'cfg.yaml'}:26"
    assert mul.sample_inputs_func is not None
    t = mul.sample_inputs_func.args[0].tensor
    assert t is not None and (t.shape, t.stride, t.storage_offset) == (
        (2, 41, 64),
        (5248, 128, 1),
        64,
    )
    assert mul.sample_inputs_func.args[1].value == 12.0
    emb = calls[1].sample_inputs_func
    assert emb is not None and [a.value for a in emb.args[2:]] == [0, None, 2.0, False, False]
    cat = calls[2].sample_inputs_func
    assert cat is not None and cat.kwargs["dim"].value == -1
    modules = cfg.suite.files[0].tests[1].edits.modules.include  # type: ignore[union-attr]
    assert modules[0].constructor_inputs is not None
    assert modules[0].constructor_inputs.args[0].value == "<config:tiny_modules.TinyConfig>"
    assert cfg.suite.global_.input_config is not None and cfg.suite.global_.input_config.seed == 123
    notes = [str(w).replace(str(tmp_path) + "/", "") for w in cfg.warnings]
    assert notes == [  # call tags are marks now (tag__bf16operation): nothing to note
        "cfg.yaml: model entries were recorded on cuda:0, cpu: ootest creates their tensors "
        "on the device under test (and maps device arguments other than 'cpu' to it)",
    ]
    r = ootest("config", "validate", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cfg.yaml: ok (1 file entries, 2 test entries)" in r.stdout


BASE = """
test_suite_config:
  files:
    - path: ./test_model_ops.py
      tests:
        - names: [T::test_x]
          edits:
            ops:
              include:
                - name: torch.mul
                  sample_inputs_func:
                    args:
"""
P = "c.yaml:{}: test_suite_config.files[0].tests[0].edits.ops.include[0].sample_inputs_func.args[0]"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            "- tensor: {shape: [2, 3], dtype: torch.float32, init: gauss}",
            P.format("13:77") + ".tensor.init: expected one of rand, randn, randint, uniform, "
            "normal, xavier, zeros, ones, full, arange, eye, empty, file; found 'gauss'",
        ),
        (
            "- tensor: {shape: [2, 3], dtype: torch.int64, init: randint}",
            P.format("13:25")
            + ".tensor: init: randint needs init_args.high (the exclusive upper bound)",
        ),
        (
            "- tensor: {shape: [2, 3], stride: [1], dtype: torch.float32}",
            P.format("13:25") + ".tensor: expected one stride per dimension (2); found stride "
            "[1] for shape [2, 3]",
        ),
        (
            "- tensor: {shape: [1000000, 1000000], dtype: torch.float32}",
            P.format("13:25") + ".tensor: shape [1000000, 1000000] (stride contiguous, offset 0) "
            "needs 1,000,000,000,000 elements of storage; ootest creates at most "
            "4,294,967,296 (2**32) per tensor: declare a smaller call",
        ),
        (
            "- tensor: {shape: [2], stride: [4294967296], dtype: torch.float32}",
            P.format("13:25") + ".tensor: shape [2] (stride [4294967296], offset 0) needs "
            "4,294,967,297 elements of storage; ootest creates at most 4,294,967,296 (2**32) "
            "per tensor: declare a smaller call",
        ),
        (
            "- tensor: {shape: [2], dtype: torch.float31}",
            P.format("13:53") + ".tensor.dtype: expected a torch dtype such as torch.float32, "
            "bfloat16 or int64; found 'torch.float31'",
        ),
        (
            "- tensor: {shape: [2], dtype: torch.float32, strides: [1]}",
            P.format("13:68") + ".tensor.strides: unknown key 'strides'; expected one of: "
            "device, device_layout, dtype, init, init_args, preset, preset_args, shape, "
            "storage_offset, stride. Did you mean 'stride'?",
        ),
        (
            "- {value: 1, py: '(1,)'}",
            P.format("13:25")
            + ": expected exactly one of 'tensor', 'tensor_list', 'value', 'py'; found "
            "'value', 'py'",
        ),
        (
            "- py: __import__('os')",
            P.format("13:29") + ".py: expected a Python literal (numbers, strings, None, "
            "Ellipsis, inf, nan, slice(...), tuples and lists of them); found "
            "\"__import__('os')\": \"__import__('os')\" is not allowed",
        ),
    ],
)
def test_model_call_errors_are_pinned(tmp_path: Path, args: str, expected: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(BASE + "                      " + args + "\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    got = [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems]
    assert got == [expected]


def test_a_module_entry_needs_its_class(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "test_suite_config:\n  files:\n    - path: x.py\n      tests:\n"
        "        - names: [T::test_forward]\n          edits:\n            modules:\n"
        "              include:\n                - name: Block\n"
        "                  forward_inputs: [{args: [{value: 1}]}]\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        "c.yaml:9:19: test_suite_config.files[0].tests[0].edits.modules.include[0]: "
        "constructor_inputs and "
        "forward_inputs need module_path (the class to build)"
    ]


def test_fields_not_applied_are_noted_once_each(tmp_path: Path) -> None:
    layout = "{device_size: [2, 1, 32], stride_map: [32, -1, 1], device_dtype: torch.int32}"
    text = BASE + "".join(
        f"                      - tensor: {{shape: [1, 41], dtype: torch.int64, init: randint, "
        f"init_args: {{high: 9}}, device: spyre, device_layout: {layout}}}\n"
        for _ in range(3)
    )
    text += (
        "                      - tensor: {shape: [2], init: file, init_args: {path: x.pt}}\n"
        "            modules:\n              include:\n                - name: M\n"
        "                  module_path: pkg.M\n"
        "                  sample_inputs_func: {args: [{value: 1}]}\n"
    )
    p = tmp_path / "c.yaml"
    p.write_text(text)
    cfg = load_config(p, check_paths=False)
    assert [str(w).replace(str(tmp_path) + "/", "") for w in cfg.warnings] == [
        "c.yaml:19: files[0].tests[0].edits.modules.include[0].sample_inputs_func: on a "
        "module entry: accepted, not used (a module entry's calls are its forward_inputs)",
        "c.yaml:10: files[0].tests[0].edits.ops.include[0].sample_inputs_func.args[0].tensor"
        ".device_layout: Torch Spyre's device layout of a tensor: accepted, not applied "
        "(ootest creates the declared shape, stride and storage offset) (3 times; the first "
        "is here)",
        "c.yaml:10: files[0].tests[0].edits.ops.include[0].sample_inputs_func.args[3].tensor"
        ".init: tensors loaded from files: accepted, not run (those variants are skipped)",
        "c.yaml: model entries were recorded on spyre: ootest creates their tensors on the "
        "device under test (and maps device arguments other than 'cpu' to it)",
    ]


def test_model_case_files_validate_with_a_note(tmp_path: Path) -> None:
    p = tmp_path / "cases.yaml"
    p.write_text(
        "model: tiny\ndefaults: {dtype: fp16, seed: 1}\ncases:\n"
        "  - name: mul\n    op: torch.mul\n    marks: [fp]\n"
        "    inputs:\n      - tensor: {shape: [1, 64]}\n      - value: 3.0\n"
        "  - name: cat\n    op: torch.cat\n    attrs: {dim: -1}\n"
        "    inputs:\n      - tensor_list: [{shape: [2, 3]}, {shape: [2, 3], init: rnd}]\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        "cases.yaml:14:62: cases[1].inputs[0].tensor_list[1].init: expected one of rand, "
        "randn, randint, uniform, normal, xavier, zeros, ones, full, arange, eye, empty, "
        "file; found 'rnd'"
    ]
    p.write_text(p.read_text().replace("init: rnd", "init: randn"))
    cfg = load_config(p)
    assert cfg.files == []
    assert [w.message for w in cfg.warnings] == [
        "2 model cases (Torch Spyre's model-case format): validated, not run; ootest runs "
        "model calls declared as edits.ops.include entries with sample_inputs_func "
        "(docs/model.md)"
    ]


def test_input_config_is_inherited_through_extends(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "test_suite_config:\n  global:\n    input_config: {seed: 7}\n"
    )
    child = tmp_path / "child.yaml"
    child.write_text("test_suite_config:\n  extends: base.yaml\n")
    cfg = load_config(child)
    assert cfg.suite.global_.input_config is not None
    assert cfg.suite.global_.input_config.seed == 7
    (tmp_path / "other.yaml").write_text(
        "test_suite_config:\n  extends: base.yaml\n  global:\n    input_config: {seed: 9}\n"
    )
    assert load_config(tmp_path / "other.yaml").suite.global_.input_config.seed == 9  # type: ignore[union-attr]


MODULE = """\
test_suite_config:
  files:
    - path: x.py
      tests:
        - names: [T::test_forward]
          edits:
            modules:
              include:
                - name: Norm
                  module_path: pkg.Norm
                  constructor_inputs: {args: [{value: 8}]}
                  forward_inputs:
                    args:
                      - tensor: {shape: [2, 8], dtype: torch.float16}
                    kwargs:
                      eps: {value: 0.5}
"""


def test_a_single_forward_call_is_a_one_item_list(tmp_path: Path) -> None:
    # Torch Spyre's earlier module configs wrote forward_inputs as one {args, kwargs}
    p = tmp_path / "m.yaml"
    p.write_text(MODULE)
    one = load_config(p, check_paths=False).suite.files[0].tests[0].edits.modules.include[0]  # type: ignore[union-attr]
    p.write_text(
        MODULE.replace(
            "                  forward_inputs:\n                    args:\n"
            "                      - tensor: {shape: [2, 8], dtype: torch.float16}\n"
            "                    kwargs:\n                      eps: {value: 0.5}\n",
            "                  forward_inputs:\n"
            "                    - args: [{tensor: {shape: [2, 8], dtype: torch.float16}}]\n"
            "                      kwargs: {eps: {value: 0.5}}\n",
        )
    )
    two = load_config(p, check_paths=False).suite.files[0].tests[0].edits.modules.include[0]  # type: ignore[union-attr]
    assert one.forward_inputs is not None and len(one.forward_inputs) == 1
    assert one.forward_inputs == two.forward_inputs
    t = one.forward_inputs[0].args[0].tensor
    assert t is not None and (t.shape, t.dtype) == ((2, 8), "torch.float16")
    # the JSON Schema (editors, CI linters) takes both spellings too
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    from ootest.config.model import Document

    validator = jsonschema.Draft202012Validator(Document.model_json_schema(by_alias=True))
    for text in (MODULE, p.read_text()):
        assert [e.message for e in validator.iter_errors(yaml.safe_load(text))] == []


def test_an_error_inside_a_single_forward_call_points_into_it(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    p.write_text(MODULE.replace("dtype: torch.float16", "dtype: torch.flaot16"))
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        "m.yaml:14:56: test_suite_config.files[0].tests[0].edits.modules.include[0]"
        ".forward_inputs[0].args[0].tensor.dtype: expected a torch dtype such as "
        "torch.float32, bfloat16 or int64; found 'torch.flaot16'"
    ]


@pytest.mark.parametrize("where", ["ops", "modules"])
def test_call_tags_must_be_mark_names(tmp_path: Path, where: str) -> None:
    if where == "ops":
        entry = (
            "            ops:\n              include:\n                - name: torch.mul\n"
            "                  sample_inputs_func: {args: [{value: 1}]}\n"
        )
    else:
        entry = "            modules:\n              include:\n                - name: M\n"
    p = tmp_path / "t.yaml"
    p.write_text(
        "test_suite_config:\n  files:\n    - path: x.py\n      tests:\n"
        "        - names: [T::test_x]\n          edits:\n"
        + entry
        + "                  tags: [constant, fp32 operation]\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    line = 11 if where == "ops" else 10
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        f"t.yaml:{line}:19: test_suite_config.files[0].tests[0].edits.{where}.include[0].tags: "
        "expected a valid pytest mark name (letters, digits, _ - . : + /); found "
        "'fp32 operation'"
    ]


OUTER = """\
test_suite_config:
  files:
    - path: x.py
      tests:
        - names: [T::test_model_ops_db]
          edits:
            ops:
              include:
                - name: torch.cat
                  sample_inputs_func:
                    args:
                      - tensor_list:
                          - {shape: [1, 3, 4], stride: [12, 1, 3], dtype: torch.float32}
                          - {shape: [1, 3, 4], stride: [12, 1, 3], dtype: torch.float32}
                  tags: [torch.cat.1]
                  kwargs:
                    dim: -1
                - name: torch.to
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [2], dtype: torch.float32}
                    kwargs:
                      copy: true
                  kwargs:
                    dtype: torch.bfloat16
"""


def test_kwargs_beside_the_call_are_its_kwargs_with_a_note(tmp_path: Path) -> None:
    # Some generated Torch Spyre configs write a call's kwargs beside sample_inputs_func
    p = tmp_path / "o.yaml"
    p.write_text(OUTER)
    cfg = load_config(p, check_paths=False)
    cat, to = cfg.suite.files[0].tests[0].edits.ops.include  # type: ignore[union-attr]
    assert cat.sample_inputs_func is not None and to.sample_inputs_func is not None
    assert {k: a.value for k, a in cat.sample_inputs_func.kwargs.items()} == {"dim": -1}
    assert {k: a.value for k, a in to.sample_inputs_func.kwargs.items()} == {
        "copy": True,
        "dtype": "torch.bfloat16",
    }
    assert cat.kwargs is None and cat.outer_kwargs and to.outer_kwargs
    assert [str(w).replace(str(tmp_path) + "/", "") for w in cfg.warnings] == [
        "o.yaml:9: files[0].tests[0].edits.ops.include[0].kwargs: keyword arguments beside "
        "sample_inputs_func: used as the call's kwargs (Torch Spyre's runner drops them; "
        "Note [Keyword arguments beside the call]) (2 times; the first is here)"
    ]
    # the same name in both places, or kwargs without a call, is an error
    p.write_text(OUTER.replace("copy: true", "dtype: torch.float16"))
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        "o.yaml:18:19: test_suite_config.files[0].tests[0].edits.ops.include[1]: expected "
        "each keyword argument once; found 'dtype' in kwargs and in sample_inputs_func.kwargs"
    ]
    p.write_text(
        "test_suite_config:\n  files:\n    - path: x.py\n      tests:\n"
        "        - names: [T::t]\n          edits:\n            ops:\n              include:\n"
        "                - name: add\n                  kwargs: {alpha: 2}\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_config(p, check_paths=False)
    assert [str(x).replace(str(tmp_path) + "/", "") for x in ei.value.problems] == [
        "o.yaml:9:19: test_suite_config.files[0].tests[0].edits.ops.include[0]: kwargs needs "
        "sample_inputs_func (the call they belong to)"
    ]
