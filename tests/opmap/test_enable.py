from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ootest.errors import UserError
from ootest.opmap.enable import add_supported_op, enable, variant_from_id
from ootest.opmap.store import OpStore

from .conftest import SUITE, C, ops, stop

CAPS = """\
# The device's capabilities, shared through extends.
test_suite_config:
  global:
    supported_dtypes:
      - name: float32   # the only one for now
    supported_ops:
      - add          # elementwise
      - empty_strided
      - name: matmul
        dtypes: [{name: float32}, {name: float16}]
      - 'mul'
    supported_modules:
      - nn.Linear
"""

SUITE_CFG = """\
test_suite_config:
  extends: caps.yaml
  files:
    - path: ${TORCH_ROOT}/test/test_ops.py
      tests:
        - names: ["TestCommon::test_out[op=cumsum]"]
          mode: xfail
          reason: no cumsum kernel yet
        - names: [TestCommon::test_out]
          edits:
            ops:
              exclude: [{name: cumsum, reason: waits for a kernel}]
        - names: ["TestCommon::test_out[op=add]"]
          mode: skip
          reason: flaky
"""

E = "test/test_ops.py::TestCommon::test_out[op=cumulative_trapezoid,dtype=float32]"
RECORDS = [*SUITE, ops(E, {"aten::cumsum": 1, "aten::_scaled_mm": 1}), stop(E)]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    (tmp_path / "caps.yaml").write_text(CAPS)
    (tmp_path / "suite.yaml").write_text(SUITE_CFG)
    return tmp_path / "suite.yaml"


def test_enable_edits_the_extended_file_one_line(make_index: Any, cfg: Path) -> None:
    caps = cfg.parent / "caps.yaml"
    with OpStore.open(make_index(RECORDS)) as s:
        rep = enable(s, cfg, "aten::cumsum")
    assert rep.target == caps and rep.edit is not None
    assert rep.edit.new == CAPS.replace("      - 'mul'\n", "      - 'mul'\n      - cumsum\n")
    assert rep.edit.diff.splitlines()[2:] == [
        "@@ -9,5 +9,6 @@",
        "       - name: matmul",
        "         dtypes: [{name: float32}, {name: float16}]",
        "       - 'mul'",
        "+      - cumsum",
        "     supported_modules:",
        "       - nn.Linear",
    ]
    assert rep.covers == ("aten::cumsum", "aten::cumsum.out")
    assert [u.variant_id for u in rep.unblocked] == [C]
    assert [(b.variant_id, b.missing) for b in rep.still_blocked] == [(E, ("_scaled_mm",))]
    assert [(e.origin, e.what, e.reason, e.mentions_op) for e in rep.entries] == [
        (
            f"{cfg}:6",
            "xfail TestCommon::test_out[op=cumsum] (1 unblocked variant(s))",
            "no cumsum kernel yet",
            True,
        ),
        (
            f"{cfg}:9",
            "edits.ops.exclude cumsum of TestCommon::test_out",
            "waits for a kernel",
            True,
        ),
    ]
    assert caps.read_text() == CAPS  # nothing written without --write
    rep.edit.write()
    assert caps.read_text() == rep.edit.new


def test_enable_a_flow_list_changes_that_line_only(tmp_path: Path) -> None:
    text = (
        "# caps\ntest_suite_config:\n  global:\n"
        '    supported_ops: [add, "mul"]  # short\n  files: []\n'
    )
    (tmp_path / "c.yaml").write_text(text)
    edit = add_supported_op(tmp_path / "c.yaml", "cumsum")
    # the one line changes (ruamel re-spaces its end-of-line comment)
    assert edit.new == text.replace('[add, "mul"]  # short', '[add, "mul", cumsum] # short')


def test_enable_a_list_of_mappings_adds_a_mapping(tmp_path: Path) -> None:
    text = "test_suite_config:\n  global:\n    supported_ops:\n    - name: add\n    - name: mul\n"
    (tmp_path / "c.yaml").write_text(text)
    edit = add_supported_op(tmp_path / "c.yaml", "cumsum")
    assert edit.new == text + "    - name: cumsum\n"


def test_nearest_declaring_file_and_in(make_index: Any, cfg: Path) -> None:
    cfg.write_text(SUITE_CFG + "  global:\n    supported_ops:\n      - sub\n")
    db = make_index(RECORDS)
    with OpStore.open(db) as s:
        rep = enable(s, cfg, "cumsum")
        assert rep.target == cfg
        assert rep.notes == [
            f"{cfg.parent / 'caps.yaml'} also declare supported_ops; --in FILE to edit another"
        ]
        assert (
            enable(s, cfg, "cumsum", target=cfg.parent / "caps.yaml").target
            == cfg.parent / "caps.yaml"
        )
        with pytest.raises(UserError) as e:
            enable(s, cfg, "cumsum", target=cfg.parent / "nope.yaml")
    assert str(e.value) == (
        f"--in {cfg.parent / 'nope.yaml'}: expected a file of {cfg}'s extends chain that "
        f"declares global.supported_ops ({cfg}, {cfg.parent / 'caps.yaml'}); "
        "found one that does not"
    )


def test_already_supported(make_index: Any, cfg: Path) -> None:
    with OpStore.open(make_index(RECORDS)) as s:
        rep = enable(s, cfg, "aten::add.Tensor")
    assert rep.edit is None
    assert rep.already == f"every recorded op add.Tensor covers is already supported by {cfg}"


def test_mixed_indentation_is_refused_not_rewritten(tmp_path: Path) -> None:
    text = (
        "test_suite_config:\n  global:\n    supported_dtypes:\n    - name: float32\n"
        "    supported_ops:\n      - add\n"
    )
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(UserError) as e:
        add_supported_op(tmp_path / "c.yaml", "cumsum")
    assert str(e.value) == (
        f"{tmp_path / 'c.yaml'}:5: global.supported_ops: adding the op would also re-format "
        "other lines of the file (it mixes indentation styles); add this item to the list by "
        "hand: - cumsum"
    )


def test_variant_from_id() -> None:
    v = variant_from_id(
        "test/test_ops.py::TestCommon::test_out[op=div.floor,dtype=float32,float64,x=1]"
    )
    assert (v.file, v.cls, v.method, v.op, v.dtypes, v.params) == (
        "test/test_ops.py",
        "TestCommon",
        "test_out",
        "div.floor",
        ("float32", "float64"),
        (("x", "1"),),
    )
    assert variant_from_id("no-separator") is None


def test_enable_on_the_bundled_example_touches_one_line(make_index: Any, tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    for name in ("capabilities.yaml", "emu_young.yaml"):
        (tmp_path / name).write_text((examples / name).read_text())
    db = make_index(RECORDS)
    with OpStore.open(db) as s:
        rep = enable(s, tmp_path / "emu_young.yaml", "_scaled_mm")
    assert rep.target == tmp_path / "capabilities.yaml" and rep.edit is not None
    changed = [
        line
        for line in rep.edit.diff.splitlines()[2:]
        if line.startswith(("+", "-")) and not line.startswith("@@")
    ]
    assert changed == ["+      - _scaled_mm"]
