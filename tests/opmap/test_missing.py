from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ootest.errors import UserError
from ootest.opmap.missing import missing, rule_of
from ootest.opmap.names import SupportSet
from ootest.opmap.store import OpStore
from ootest.opmap.support import from_config, from_emu, from_file

from .conftest import PROV, ops, stop

V = [f"test/test_x.py::TestX::test_{i}" for i in range(6)]
RECORDS = [
    PROV,
    ops(V[1], {"aten::add.Tensor": 1, "aten::mul.Tensor": 1}),
    ops(V[2], {"aten::add.Tensor": 1, "aten::cumsum": 1, "aten::cumsum.out": 1}),
    ops(V[3], {"aten::cumsum_": 1, "aten::mul.Scalar": 1}),
    ops(V[4], {"aten::mm": 1, "aten::mul.Tensor": 1, "aten::sub.Tensor": 1}),
    ops(V[5], {"aten::sub.Tensor": 2, "aten::add_.Tensor": 1}),
    ops(V[0], {"aten::add.Tensor": 1}),
    *(stop(v) for v in V),
]


def test_rule_of() -> None:
    assert [
        rule_of(n)
        for n in ("aten::cumsum_", "aten::add.Tensor", "aten::__and__.Tensor", "prims::mul_")
    ] == [
        "cumsum",
        "add",
        "__and__",
        "prims::mul",
    ]


def test_ranking_and_plan(make_index: Any) -> None:
    with OpStore.open(make_index(RECORDS)) as s:
        rep = missing(s, SupportSet.from_names(["add"], "list"), top=3)
    assert (rep.total, rep.blocked) == (6, 5)
    assert [(n.rule, n.alone, n.variants, n.overloads) for n in rep.needs] == [
        ("mul", 1, 3, ("aten::mul.Scalar", "aten::mul.Tensor")),
        ("cumsum", 1, 2, ("aten::cumsum", "aten::cumsum.out", "aten::cumsum_")),
        ("sub", 1, 2, ("aten::sub.Tensor",)),
        ("mm", 0, 1, ("aten::mm",)),
    ]
    assert [(p.rule, p.unblocks, p.cumulative) for p in rep.plan] == [
        ("mul", 1, 1),  # ties on 1 broken by how often it is missing (3)
        ("cumsum", 2, 3),  # V2, and V3 now that mul is in
        ("sub", 1, 4),  # V4 needs mm and sub: out of reach with one step left
    ]


def test_plan_drops_variants_out_of_reach(make_index: Any) -> None:
    with OpStore.open(make_index(RECORDS)) as s:
        rep = missing(s, SupportSet.from_names(["add"], "list"), top=2)
    # V4 misses 3 rules: never within 2 steps, so it does not count towards mul
    assert [(p.rule, p.unblocks, p.cumulative) for p in rep.plan] == [
        ("cumsum", 1, 1),
        ("mul", 2, 3),
    ]


def test_overload_support_leaves_other_overloads_missing(make_index: Any) -> None:
    with OpStore.open(make_index(RECORDS)) as s:
        rep = missing(s, SupportSet.from_names(["add", "mul.Tensor", "cumsum"], "l"), top=0)
    assert [(n.rule, n.overloads, n.alone) for n in rep.needs] == [
        ("sub", ("aten::sub.Tensor",), 1),
        ("mul", ("aten::mul.Scalar",), 1),
        ("mm", ("aten::mm",), 0),
    ]
    assert rep.plan == []


def test_emu_profile_honours_native_kernels(make_index: Any) -> None:
    vid = "test/test_y.py::TestY::test_copy"
    db = make_index(
        [
            PROV,
            ops(
                vid,
                {
                    "aten::empty_strided": 1,
                    "aten::copy_": 1,
                    "aten::view": 1,
                    "aten::view.dtype": 1,
                },
            ),
            ops(V[1], {"aten::add.Tensor": 1, "aten::cumsum": 1, "aten::fill_.Scalar": 1}),
        ]
    )
    young = from_emu("emu:young")
    assert young.source == "emu:young"
    with OpStore.open(db) as s:
        rep = missing(s, young, top=1)
        # view is native, view.dtype is not; add and fill_ are in the profile, cumsum is not
        assert [(n.rule, n.overloads) for n in rep.needs] == [
            ("cumsum", ("aten::cumsum",)),
            ("view", ("aten::view.dtype",)),
        ]
        assert missing(s, from_emu("emu:full")).blocked == 0


def test_unknown_emu_profile() -> None:
    with pytest.raises(UserError) as e:
        from_emu("emu:old")
    from ootest.device.emu import profiles

    assert str(e.value) == (
        f"emu: unknown profile 'old'; expected one of {', '.join(profiles())} "
        "or a path to a profile YAML file"
    )


def test_support_files(tmp_path: Path) -> None:
    txt = tmp_path / "ops.txt"
    txt.write_text("# what the backend has\nadd\n\naten::mm   # matrix unit\ncumsum.out\n")
    s = from_file(txt)
    assert (s.packets, s.overloads) == (
        frozenset({"aten::add", "aten::mm"}),
        frozenset({"aten::cumsum.out"}),
    )
    yml = tmp_path / "ops.yaml"
    yml.write_text("ops:\n  - add\n  - {name: mm}\n")
    assert from_file(yml).packets == frozenset({"aten::add", "aten::mm"})
    bad = tmp_path / "bad.txt"
    bad.write_text("add\nnn.functional.relu\n")
    with pytest.raises(UserError) as e:
        from_file(bad)
    assert str(e.value) == (
        f"{bad}:2: expected an op name such as 'aten::add.Tensor', 'aten::add' or 'add'; "
        "found 'nn.functional.relu'"
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("test_suite_config:\n  files: []\n")
    with pytest.raises(UserError) as e:
        from_file(cfg)
    assert str(e.value) == (
        f"{cfg}: expected a supported-ops list; found a test_suite_config. "
        f"Pass it with --config {cfg} to read its global.supported_ops"
    )
    with pytest.raises(UserError) as e:
        from_file(tmp_path / "absent.txt")
    assert str(e.value).startswith(f"{tmp_path / 'absent.txt'}: expected a supported-ops list")


def test_config_support_composes_extends(tmp_path: Path) -> None:
    (tmp_path / "caps.yaml").write_text(
        "test_suite_config:\n  global:\n    supported_ops:\n"
        "      - add\n      - nn.functional.relu\n"
    )
    (tmp_path / "suite.yaml").write_text(
        "test_suite_config:\n  extends: caps.yaml\n  global:\n    supported_ops: [mm]\n"
    )
    s, notes = from_config(tmp_path / "suite.yaml")
    assert s.packets == frozenset({"aten::add", "aten::mm"})
    assert notes == [
        f"{tmp_path / 'caps.yaml'}:5: 'nn.functional.relu' is not an aten op name; "
        "it matches no recorded op"
    ]
    (tmp_path / "none.yaml").write_text("test_suite_config:\n  files: []\n")
    with pytest.raises(UserError) as e:
        from_config(tmp_path / "none.yaml")
    assert "expected global.supported_ops in the config or a file it extends" in str(e.value)
