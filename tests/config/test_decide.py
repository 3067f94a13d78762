"""decide(config, variant) -> outcome: the pure core (no torch, no pytest run)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ootest.config.decide import Context, decide
from ootest.config.load import load_config
from ootest.config.names import NamePattern, Variant
from ootest.config.resolved import Config
from tests.conftest import run

CFG = """\
test_suite_config:
  files:
    - path: t.py
      unlisted_test_mode: xfail
      tests:
        - names: [TestA::test_skip]
          mode: skip
          reason: crashes the device
          issue: https://example.invalid/1
        - names: [test_bare]
          mode: xfail_strict
        - names: ["re:TestA::test_rx_\\\\d+"]
          mode: skip
        - names: [TestA::test_ops]
          mode: mandatory_success
          edits:
            ops:
              include: [{name: cumsum}]
              exclude: [{name: mul}]
            dtypes:
              include: [{name: float64, precision: {atol: 0.5}}]
              exclude: [{name: int64}]
        - names: ["TestA::test_ops[op=add,dtype=float16]"]
          mode: xfail
        - names: [TestA::test_mod]
          mode: mandatory_success
          edits:
            modules:
              exclude: [{name: nn.GELU}]
        - names: [TestA::test_forced]
          mode: mandatory_success
          force_xfail: true
        - names: [TestA::test_old]
          mode: skip
          when: {torch: "<2.0"}
        - names: [TestA::test_dup]
          mode: skip
        - names: [TestA::test_dup]
          mode: mandatory_success
        - names: [TestA::test_mean_3d_dim0_keepdim]
          mode: skip
        - names: ["TestA::test_(sqrt|rsqrt).*", "TestA::test_min_keepdim.*"]
          mode: xfail_strict
        - names: ["*Module*::test_forward"]
          mode: skip
  global:
    supported_dtypes:
      - {name: float32}
      - {name: float16, precision: {atol: 0.01, rtol: 0.02}}
      - {name: bfloat16, force_xfail: true}
      - {name: int64}
    supported_ops:
      - add
      - mul
      - name: matmul
        dtypes: [{name: float32, precision: {atol: 0.1}}]
      - {name: gcd, force_xfail: true}
    supported_modules: [nn.Linear, nn.GELU]
"""


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    (tmp_path / "t.py").write_text("")
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(CFG))
    return load_config(p)


CTX = Context(torch_version="2.13.0+cpu", platform="linux")


def d(cfg: Config, method: str, cls: str = "TestA", **kw: object):  # type: ignore[no-untyped-def]
    v = Variant(file="t.py", cls=cls, method=method, **kw)  # type: ignore[arg-type]
    return decide(cfg.files[0], cfg.suite.global_, v, CTX)


def test_skip_carries_reason_issue_origin(cfg: Config) -> None:
    r = d(cfg, "test_skip")
    assert r.mode == "skip" and r.bucket == "listed"
    assert r.message.startswith("crashes the device [https://example.invalid/1] (")
    assert r.message.endswith("c.yaml:6)")


def test_unlisted_mode(cfg: Config) -> None:
    r = d(cfg, "test_new_upstream_test")
    assert (r.mode, r.bucket) == ("xfail", "unlisted")


def test_bare_name_matches_any_class(cfg: Config) -> None:
    assert d(cfg, "test_bare", cls="TestOther").mode == "xfail_strict"


def test_regex_name(cfg: Config) -> None:
    assert d(cfg, "test_rx_12").mode == "skip"
    assert d(cfg, "test_rx_a").mode == "xfail"  # unlisted


def test_torch_spyre_style_names(cfg: Config) -> None:
    # A parametrized name (before the device/dtype suffixes) addresses that variant.
    v = {"method": "test_mean", "name": "test_mean_3d_dim0_keepdim"}
    assert d(cfg, **v).mode == "skip"  # type: ignore[arg-type]
    assert d(cfg, "test_mean", name="test_mean_2d").mode == "xfail"  # unlisted
    # Patterns without 're:' must match the whole Class::name (template or parametrized).
    assert d(cfg, "test_sqrt").mode == "xfail_strict"
    assert d(cfg, "test_rsqrt_out", name="test_rsqrt_out_x").mode == "xfail_strict"
    assert d(cfg, "test_min", name="test_min_keepdim0").mode == "xfail_strict"
    assert d(cfg, "test_min_dim").mode == "xfail"  # a prefix is not enough
    assert d(cfg, "test_sqrt", cls="TestB").mode == "xfail"  # the class is part of it
    # Not a regular expression but a shell-style glob.
    assert d(cfg, "test_forward", cls="TestModuleCPU").mode == "skip"


def test_op_gating_and_edits(cfg: Config) -> None:
    assert d(cfg, "test_ops", op="add", op_name="add", dtypes=("float32",)).mode == (
        "mandatory_success"
    )
    r = d(cfg, "test_ops", op="sub", op_name="sub", dtypes=("float32",))
    assert (r.mode, r.bucket) == ("skip", "capability")
    assert r.reason == "op sub is not in global.supported_ops"
    r = d(cfg, "test_ops", op="mul", op_name="mul", dtypes=("float32",))
    assert (r.mode, r.reason) == ("skip", "op mul excluded for this test")
    # include adds an op the device does not declare globally, for this test only
    assert d(cfg, "test_ops", op="cumsum", op_name="cumsum", dtypes=("float32",)).mode == (
        "mandatory_success"
    )
    assert d(cfg, "test_mod", op="cumsum", op_name="cumsum").mode == "skip"


def test_op_variant_name(cfg: Config) -> None:
    assert d(cfg, "test_ops", op="div.trunc", op_name="div", dtypes=("float32",)).reason == (
        "op div.trunc is not in global.supported_ops"
    )
    assert d(cfg, "test_ops", op="add", op_name="add", dtypes=("float16",)).mode == "xfail"


def test_dtype_gating_and_edits(cfg: Config) -> None:
    r = d(cfg, "test_x", dtypes=("complex64",))
    assert r.mode == "skip" and "global.supported_dtypes" in r.reason
    r = d(cfg, "test_ops", op="add", op_name="add", dtypes=("int64",))
    assert (r.mode, r.bucket) == ("skip", "excluded")
    r = d(cfg, "test_ops", op="add", op_name="add", dtypes=("float64",))
    assert r.mode == "mandatory_success" and r.atol == 0.5
    r = d(cfg, "test_x", op="matmul", op_name="matmul", dtypes=("float16",))
    assert r.mode == "skip" and "supported_ops[matmul].dtypes" in r.reason


def test_precision_precedence(cfg: Config) -> None:
    r = d(cfg, "test_dup", op="matmul", op_name="matmul", dtypes=("float32",))
    assert r.atol == 0.1
    r = d(cfg, "test_dup", op="add", op_name="add", dtypes=("float16",))
    assert (r.atol, r.rtol) == (0.01, 0.02)


def test_force_xfail(cfg: Config) -> None:
    assert d(cfg, "test_forced").mode == "xfail"
    assert d(cfg, "test_dup", dtypes=("bfloat16",)).mode == "xfail"
    r = d(cfg, "test_dup", op="gcd", op_name="gcd", dtypes=("int64",))
    assert (r.mode, r.bucket) == ("xfail", "forced")
    assert "op gcd has force_xfail" in r.reason


def test_modules(cfg: Config) -> None:
    assert d(cfg, "test_mod", module="nn.Linear").mode == "mandatory_success"
    assert d(cfg, "test_mod", module="nn.GELU").reason == "module nn.GELU excluded for this test"
    assert d(cfg, "test_mod", module="nn.Conv2d").bucket == "capability"


def test_when_and_precedence(cfg: Config) -> None:
    assert d(cfg, "test_old").bucket == "unlisted"  # when: torch<2.0 does not hold
    assert d(cfg, "test_dup").mode == "mandatory_success"  # later entry wins


def _gen(method: str, name: str, gen_name: str, dtype: str) -> Variant:
    # What variant_from_item derives for TestFooPRIVATEUSE1::<gen_name> on emu.
    return Variant(
        file="t.py",
        cls="TestFoo",
        method=method,
        dtypes=(dtype,),
        params=(("n", "3"),),
        device_variant=True,
        name=name,
        gen_name=gen_name,
        cls_aliases=("TestFooPRIVATEUSE1", "TestFooEMU"),
    )


def test_names_copied_from_a_pytest_listing_address_that_variant() -> None:
    v = _gen("test_pairs", "test_pairs_n_3_mul", "test_pairs_n_3_mul_emu_int64", "int64")
    other = _gen("test_pairs", "test_pairs_n_3_mul", "test_pairs_n_3_mul_emu_float32", "float32")
    for raw in (
        "TestFooPRIVATEUSE1::test_pairs_n_3_mul_emu_int64",
        "TestFooEMU::test_pairs_n_3_mul_emu_int64",  # the other import order
        "test_pairs_n_3_mul_emu_int64",
    ):
        p = NamePattern.parse(raw)
        assert p.matches(v), raw
        assert not p.matches(other), raw
    assert not NamePattern.parse("TestFooCUDA::test_pairs_n_3_mul_emu_int64").matches(v)
    assert not NamePattern.parse("TestBar::test_pairs_n_3_mul_emu_int64").matches(v)
    # The identity stays canonical: generated names are aliases, not part of it.
    assert v.test_id == "TestFoo::test_pairs[dtype=int64,n=3]"
    assert v == Variant(
        file="t.py",
        cls="TestFoo",
        method="test_pairs",
        dtypes=("int64",),
        params=(("n", "3"),),
        device_variant=True,
        name="test_pairs_n_3_mul",
    )


def test_regex_and_patterns_see_parametrized_and_generated_names() -> None:
    v = _gen("test_pairs", "test_pairs_n_3_mul", "test_pairs_n_3_mul_emu_int64", "int64")
    assert NamePattern.parse("re:TestFoo::test_pairs_n_3_.*").matches(v)
    assert NamePattern.parse("re:_emu_int64$").matches(v)
    assert NamePattern.parse("TestFoo::test_pairs_n_3_.*").matches(v)  # Spyre-style pattern
    assert NamePattern.parse("TestFooPRIVATEUSE1::test_pairs_.*_int64").matches(v)
    assert not NamePattern.parse("re:test_pairs_n_1").matches(v)


def test_decided_configs_leave_nothing_behind(tmp_path: Path) -> None:
    """decide's indexes live with the config (ResolvedFile.memo), not in the module:
    a config decided and dropped is freed, without any cache to clear."""
    import gc
    import weakref

    (tmp_path / "t.py").write_text("")
    (tmp_path / "c.yaml").write_text(textwrap.dedent(CFG))
    cfg = load_config(tmp_path / "c.yaml")
    r = d(cfg, "test_ops", op="add", op_name="add", dtypes=("float64",))
    assert r.atol == 0.5
    assert cfg.files[0].memo  # the indexes were built, and kept with the file
    caps, entry = weakref.ref(cfg.suite.global_), weakref.ref(cfg.files[0].patterns[0][0])
    del cfg, r
    gc.collect()
    assert caps() is None and entry() is None


def test_decide_imports_neither_the_loader_nor_pyyaml_nor_pydantic() -> None:
    code = (
        "import sys; import ootest.config.decide; "
        "print(sorted(m for m in ('ootest.config.load', 'yaml', 'pydantic') if m in sys.modules))"
    )
    r = run([sys.executable, "-c", code])
    assert (r.returncode, r.stdout.strip()) == (0, "[]"), r.stderr


def test_a_variant_of_several_dtypes_is_named_by_its_id() -> None:
    """Note [Dtype tuples in names]: upstream parametrizes some tests over several
    dtypes at once (test_view_ops.py's test_set_real_imag); the ID written back as
    a config name (select run lists every skip by ID, audit samples by ID) selects
    exactly that variant."""
    v = Variant(file="test/t.py", cls="T", method="test_set", dtypes=("complex64", "float64"))
    other = Variant(file="test/t.py", cls="T", method="test_set", dtypes=("complex64", "int8"))
    pat = NamePattern.parse("T::test_set[dtype=complex64,float64]")
    assert pat.filters == (("dtype", "complex64,float64"),)
    assert pat.matches(v) and not pat.matches(other)
    one = NamePattern.parse("T::test_set[dtype=complex64]")  # one of the tuple's dtypes
    assert one.matches(v) and one.matches(other)


REFS = """\
test_suite_config:
  global:
    supported_ops: [gcd, norm]
  files:
    - path: t.py
      unlisted_test_mode: skip
      tests:
        - names: ["TestA::test_ops[op=_refs.gcd,dtype=int64]", "TestA::test_ops[op=norm.nuc]"]
          mode: mandatory_success
        - names: ["TestA::test_ops[op=gcd,dtype=int64]", "TestA::test_ops[op=norm]"]
          mode: skip
          reason: fails on the board
        - names: [TestA::test_edits]
          mode: mandatory_success
          edits: {ops: {exclude: [{name: gcd}]}}
"""


def test_op_filters_name_a_python_ref_and_its_sibling_exactly(tmp_path: Path) -> None:
    """Note [Exact op filters]: ``[op=gcd]`` is the OpInfo ``gcd`` alone, not the
    Python reference ``_refs.gcd``, and ``[op=norm]`` not ``norm.nuc``, so the later
    skip entry does not take their siblings; the family rule holds where Torch
    Spyre's format defines it (``supported_ops``, ``edits.ops``)."""
    (tmp_path / "t.py").write_text("")
    (tmp_path / "c.yaml").write_text(REFS)
    cfg = load_config(tmp_path / "c.yaml")
    refs = {"op": "_refs.gcd", "op_name": "gcd", "dtypes": ("int64",)}
    gcd = {"op": "gcd", "op_name": "gcd", "dtypes": ("int64",)}
    nuc = {"op": "norm.nuc", "op_name": "norm", "dtypes": ("float32",)}
    norm = {"op": "norm", "op_name": "norm", "dtypes": ("float32",)}
    assert d(cfg, "test_ops", **refs).mode == "mandatory_success"  # type: ignore[arg-type]
    assert d(cfg, "test_ops", **nuc).mode == "mandatory_success"  # type: ignore[arg-type]
    assert d(cfg, "test_ops", **gcd).reason == "fails on the board"  # type: ignore[arg-type]
    assert d(cfg, "test_ops", **norm).reason == "fails on the board"  # type: ignore[arg-type]
    # supported_ops: [gcd] declares _refs.gcd too; exclude: gcd reaches it
    r = d(cfg, "test_edits", **refs)  # type: ignore[arg-type]
    assert (r.mode, r.reason) == ("skip", "op _refs.gcd excluded for this test")
