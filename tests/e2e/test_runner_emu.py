"""Subprocess tier on emu: the collection guard and capability promotions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import SpyreConfigs, ootest, run, spyre_params

FILE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestGuarded(TestCase):
    @dtypes(DTYPES)
    def test_add(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2, dtype=dtype))

    def test_view(self, device):
        t = torch.zeros(2, 3, device=device)
        t.t()[0, 1] = 5.0
        self.assertEqual(t[1, 0].item(), 5.0)


instantiate_device_type_tests(TestGuarded, globals()ONLY_FOR)

if __name__ == "__main__":
    run_tests()
"""

CONFIG = """
test_suite_config:
  device: emu
  global:
    supported_dtypes: [float32, int64, bool]
  files:
    - path: ./test_guarded.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: ["TestGuarded::test_add[dtype=int64]"]
          mode: skip
          reason: int64 add was missing on the device
"""


def _write(d: Path, dtypes: str, only_for: str = "") -> None:
    text = FILE.replace("DTYPES", dtypes).replace("ONLY_FOR", only_for)
    (d / "test_guarded.py").write_text(text)


def test_guard_and_capability_promotion_on_emu(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    _write(tmp_path, "torch.float32, torch.int64")
    first = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "collection guard" not in first.stdout
    # The int64 skip entry names a dtype the device now declares: a promotion candidate.
    assert "skip entry cfg.yaml:" in first.stdout and "declared supported now" in first.stdout
    coll = [
        json.loads(x)
        for x in (tmp_path / ".ootest" / "results.jsonl").read_text().splitlines()
        if '"collection"' in x
    ]
    assert coll[0]["device_variants"] == 3

    # Upstream narrows the file: one dtype gone. The previous run is the baseline.
    _write(tmp_path, "torch.float32")
    drop = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert drop.returncode == 3, drop.stdout[-3000:]
    assert "test_guarded.py: 2 device variants, the baseline run had 3" in drop.stdout

    # Upstream gates the class to CUDA: nothing instantiates for the device.
    _write(tmp_path, "torch.float32, torch.int64", ', only_for="cuda"')
    gone = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert gone.returncode == 3, gone.stdout[-3000:]
    out = " ".join(gone.stdout.split())
    assert "test_guarded.py: instantiated 0 device variants" in out
    assert "only_for=" in out and "device_restrictions: bypass" in out


INJECT_FILE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase

# Pre-filtered lists, the way upstream narrows op_db (binary_ufuncs_with_references).
only_add = [op for op in op_db if op.name == "add"]
only_linear = [m for m in module_db if m.name == "nn.Linear"]


class TestInject(TestCase):
    @ops(only_add, allowed_dtypes=(torch.float32,))
    def test_binary(self, device, dtype, op):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual(op(x, x).cpu(), op(x.cpu(), x.cpu()))

    @dtypes(torch.float32)
    def test_fill(self, device, dtype):
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).sum().item(), 2)

    @modules(only_linear, allowed_dtypes=(torch.float32,))
    def test_mod(self, device, dtype, module_info, training):
        pass

    @ops(only_add, allowed_dtypes=(torch.float32,))
    def test_untouched(self, device, dtype, op):
        pass


instantiate_device_type_tests(TestInject, globals())
"""

INJECT_CONFIG = """
test_suite_config:
  device: emu:full
  files:
    - path: ./test_inject.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestInject::test_binary]
          edits:
            ops:
              include: [{name: mul, description: "not in the filtered list"}]
            dtypes:
              include: [{name: float64}]
        - names: ["TestInject::test_fill.*"]
          edits:
            dtypes:
              include: [int64]
        - names: [TestInject::test_mod]
          edits:
            modules:
              include: [{name: torch.nn.ReLU}]
"""


def test_edits_include_injects_variants_upstream_did_not_instantiate(tmp_path: Path) -> None:
    (tmp_path / "test_inject.py").write_text(INJECT_FILE)
    (tmp_path / "cfg.yaml").write_text(INJECT_CONFIG)
    r = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = (tmp_path / ".ootest" / "results.jsonl").read_text().splitlines()
    got = {
        rec["variant_id"].split("::", 1)[1]: rec["outcome"]
        for rec in map(json.loads, lines)
        if rec["kind"] == "result"
    }
    assert got == {
        "TestInject::test_binary[op=add,dtype=float32]": "passed",
        "TestInject::test_binary[op=add,dtype=float64]": "passed",  # dtype injected
        "TestInject::test_binary[op=mul,dtype=float32]": "passed",  # op injected
        "TestInject::test_binary[op=mul,dtype=float64]": "passed",
        "TestInject::test_fill[dtype=float32]": "passed",
        "TestInject::test_fill[dtype=int64]": "passed",  # into @dtypes
        "TestInject::test_mod[dtype=float32,module=nn.Linear,training=True]": "passed",
        "TestInject::test_mod[dtype=float32,module=nn.ReLU,training=True]": "passed",
        # another test over the same list gets nothing extra
        "TestInject::test_untouched[op=add,dtype=float32]": "passed",
    }


BINARY_UFUNCS = """
# Our own upstream-style stand-in for test/test_binary_ufuncs.py: the same class,
# test names and parametrization shapes as upstream, trivial bodies.
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import binary_ufuncs
from torch.testing._internal.common_utils import TestCase

binary_ufuncs_with_references = [op for op in binary_ufuncs if op.ref is not None]


class TestBinaryUfuncs(TestCase):
    @ops(binary_ufuncs_with_references)
    def test_scalar_support(self, device, dtype, op):
        pass

    @ops(binary_ufuncs_with_references)
    def test_contig_vs_transposed(self, device, dtype, op):
        pass

    @dtypes(torch.float32)
    def test_binary_op_mem_overlap(self, device, dtype):
        pass


def generate_not_implemented_tests(cls):
    for op in ("__add__", "__mul__", "__rsub__"):
        def test(self, device, op=op):
            self.assertIs(getattr(torch.ones(1, device=device), op)(object()), NotImplemented)
        test.__name__ = f"test_{op}_not_implemented"
        setattr(cls, test.__name__, test)


generate_not_implemented_tests(TestBinaryUfuncs)
instantiate_device_type_tests(TestBinaryUfuncs, globals())
"""


# Two `ootest run`s on emu: the published config's twin joins the slow tier.
@pytest.mark.parametrize("spyre", spyre_params(pytest.mark.slow))
def test_torch_spyre_config_on_emu(tmp_path: Path, spyre: SpyreConfigs) -> None:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_binary_ufuncs.py").write_text(BINARY_UFUNCS)
    cfg = str(spyre.path("test_binary_ufuncs.yaml"))  # used as written (or published), unchanged
    env = {"TORCH_ROOT": str(tmp_path)}
    r = ootest("run", cfg, "--device", "emu:full", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = [
        json.loads(x) for x in (tmp_path / ".ootest" / "results.jsonl").read_text().splitlines()
    ]
    by = {x["variant_id"].split("::", 1)[1]: x for x in recs if x["kind"] == "result"}
    scalar = "TestBinaryUfuncs::test_scalar_support"
    # listed as xfail (non-strict): a pass is an XPASS, a promotion candidate
    assert by[f"{scalar}[op=add,dtype=float16]"]["outcome"] == "xpassed"
    # `exclude: gcd` reaches the Python reference _refs.gcd (gcd itself has no ref,
    # so binary_ufuncs_with_references holds only _refs.gcd)
    gcd = by[f"{scalar}[op=_refs.gcd,dtype=int64]"]
    assert (gcd["outcome"], gcd["bucket"]) == ("skipped", "excluded")
    # float32 is not in the config's global.supported_dtypes
    f32 = by[f"{scalar}[op=add,dtype=float32]"]
    assert (f32["outcome"], f32["bucket"]) == ("skipped", "capability")
    # the generated test_*_not_implemented tests are listed mandatory and pass
    assert by["TestBinaryUfuncs::test___mul___not_implemented"]["outcome"] == "passed"
    # ... except one the config does not list (unlisted_test_mode: skip)
    add = by["TestBinaryUfuncs::test___add___not_implemented"]
    assert (add["outcome"], add["bucket"]) == ("skipped", "unlisted")
    # listed mandatory, but on a dtype the device does not declare: skipped with the reason
    assert by["TestBinaryUfuncs::test_binary_op_mem_overlap[dtype=float32]"]["outcome"] == (
        "skipped"
    )
    # tags become marks: -m selects exactly the tagged tests
    tagged = ootest(
        "run", cfg, "--device", "emu:full", "--results", "t.jsonl", "--", "-m", "tag__model_1",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert tagged.returncode == 0, tagged.stdout[-2000:]
    names = {
        json.loads(x)["variant_id"].split("::")[2].split("[")[0]
        for x in (tmp_path / "t.jsonl").read_text().splitlines()
        if '"kind": "result"' in x
    }
    assert names == {"test_scalar_support", "test_contig_vs_transposed"}


PARAM_FILE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import (
    TestCase, instantiate_parametrized_tests, parametrize, subtest)


class TestParam(TestCase):
    @parametrize("n", [1, 3])
    @parametrize("fn", [subtest(torch.add, name="add"), subtest(torch.mul, name="mul")])
    @dtypes(torch.float32, torch.int64)
    def test_pairs(self, device, dtype, fn, n):
        x = torch.ones(n, device=device, dtype=dtype)
        self.assertEqual(fn(x, x).cpu(), fn(x.cpu(), x.cpu()))

    @parametrize("shape", [(2, 3), (4,)], name_fn=lambda s: "x".join(map(str, s)))
    def test_shape(self, device, shape):
        self.assertEqual(torch.zeros(shape, device=device).shape, shape)


class TestPlainParam(TestCase):
    @parametrize("k", [0, 2])
    def test_k(self, k):
        self.assertGreaterEqual(k, 0)


instantiate_device_type_tests(TestParam, globals())
instantiate_parametrized_tests(TestPlainParam)
"""

PARAM_CONFIG = """
test_suite_config:
  device: emu
  files:
    - path: ./test_param.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: ["TestParam::test_pairs[fn=mul,n=3]"]     # variant filter on @parametrize args
          mode: xfail
        - names: [test_pairs_n_1_add]                      # upstream's parametrized name
          mode: skip
        - names: ["TestParamPRIVATEUSE1::test_shape_4_emu"] # copied from a pytest listing
          mode: skip
        - names: ["TestParamEMU::test_shape_2x3_emu"]       # ... in the other import order
          mode: skip
        - names: ["re:TestParam::test_pairs_n_3_add"]      # regex over parametrized names
          mode: skip
        - names: ["TestPlainParam::test_k_k_2"]            # a plain parametrized class
          mode: skip
        - names: ["TestParamCUDA::test_shape_4_cuda"]      # no such variant here: stale
          mode: skip
"""


def test_parametrized_upstream_tests_by_every_name_form(tmp_path: Path) -> None:
    (tmp_path / "test_param.py").write_text(PARAM_FILE)
    (tmp_path / "cfg.yaml").write_text(PARAM_CONFIG)
    r = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    records = [
        json.loads(x) for x in (tmp_path / ".ootest" / "results.jsonl").read_text().split("\n") if x
    ]
    got = {
        rec["variant_id"].split("::", 1)[1]: rec["outcome"]
        for rec in records
        if rec["kind"] == "result"
    }
    assert got == {
        "TestParam::test_pairs[dtype=float32,fn=add,n=1]": "skipped",
        "TestParam::test_pairs[dtype=int64,fn=add,n=1]": "skipped",
        "TestParam::test_pairs[dtype=float32,fn=mul,n=1]": "passed",
        "TestParam::test_pairs[dtype=int64,fn=mul,n=1]": "passed",
        "TestParam::test_pairs[dtype=float32,fn=add,n=3]": "skipped",
        "TestParam::test_pairs[dtype=int64,fn=add,n=3]": "skipped",
        "TestParam::test_pairs[dtype=float32,fn=mul,n=3]": "xpassed",
        "TestParam::test_pairs[dtype=int64,fn=mul,n=3]": "xpassed",
        "TestParam::test_shape[shape=(2; 3)]": "skipped",
        "TestParam::test_shape[shape=(4;)]": "skipped",
        "TestPlainParam::test_k[k=0]": "passed",
        "TestPlainParam::test_k[k=2]": "skipped",
    }
    stale = [rec["name"] for rec in records if rec["kind"] == "stale"]
    assert stale == ["TestParamCUDA::test_shape_4_cuda"]


SESSIONS = """
import json, sys
import pytest

class Names:
    def pytest_collection_modifyitems(self, items):
        self.names = sorted(i.name for i in items)

def session(*args):
    names = Names()
    code = pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider", *args], plugins=[names])
    # as pytester's in-process runs do: the test module is imported afresh next time
    sys.modules.pop("test_inject", None)
    return int(code), names.names

first = session("--ootest-config", "cfg.yaml", "--ootest-no-cache", "test_inject.py")
from torch.testing._internal import common_device_type as cdt, common_modules as cm
left = [
    where
    for where, fn in [
        ("ops", cdt.ops._parametrize_test),
        ("modules", cm.modules._parametrize_test),
        ("dtypes", getattr(vars(cdt.PrivateUse1TestBase).get("_get_dtypes"), "__func__", 0)),
    ]
    if getattr(fn, "__ootest_injection__", False)
]
import os
second = session("--ootest-device", "emu:full", "test_inject.py")
print(json.dumps({"first": first, "second": second, "left": left, "env": os.environ.get(
    "PYTORCH_TESTING_DEVICE_ONLY_FOR")}))
"""


def test_injection_lasts_one_session(tmp_path: Path) -> None:
    """edits.*.include wraps torch's parametrizers for its session only: a second
    session in the same process (pytester, an IDE) collects what upstream defines."""
    (tmp_path / "test_inject.py").write_text(INJECT_FILE)
    (tmp_path / "cfg.yaml").write_text(INJECT_CONFIG)
    (tmp_path / "sessions.py").write_text(SESSIONS)
    r = run([sys.executable, "sessions.py"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["left"] == []
    assert got["env"] is None  # PYTORCH_TESTING_DEVICE_ONLY_FOR set for the session only
    first_code, first = got["first"]
    second_code, second = got["second"]
    assert (first_code, second_code) == (0, 0)
    injected = {
        "test_binary_mul_emu_float32",
        "test_fill_emu_int64",
        "test_mod_nn_ReLU_emu_float32",
    }
    assert injected <= set(first)
    assert not injected & set(second)
    assert set(second) < set(first)


# ----------------------------------------------------- crash recovery (Note [Fork server])
EMU_CRASHY = """
import os, signal
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestCLS(TestCase):
BODIES
instantiate_device_type_tests(TestCLS, globals())
"""

BACKEND_WITH_A_THREAD = """
import threading, time
from ootest.device import emu

emu.load("full")
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
"""


def _emu_file(d: Path, name: str, cls: str, bodies: list[str]) -> None:
    tests = "".join(
        f"    def test_{i}(self, device):\n"
        f"        x = torch.ones(3, device=device)\n"
        f"        self.assertEqual((x + x).cpu().sum().item(), 6.0)\n"
        f"        {body}\n\n"
        for i, body in enumerate(bodies)
    )
    text = EMU_CRASHY.replace("TestCLS", cls).replace("BODIES", tests)
    (d / name).write_text(text)


def _emu_crash_suite(d: Path, device: str) -> None:
    segv = "os.kill(os.getpid(), signal.SIGSEGV)"
    _emu_file(d, "test_ea.py", "TestEa", ["pass", segv, "pass", "os.abort()"])
    _emu_file(d, "test_eb.py", "TestEb", ["pass", segv, "self.fail('no')"])
    (d / "cfg.yaml").write_text(
        f"test_suite_config:\n  device: {device}\n  files:\n"
        "    - path: ./test_ea.py\n      unlisted_test_mode: mandatory_success\n"
        "    - path: ./test_eb.py\n      unlisted_test_mode: mandatory_success\n"
    )


EMU_WANT = {
    "TestEa::test_0": "passed",
    "TestEa::test_1": "crashed",
    "TestEa::test_2": "passed",
    "TestEa::test_3": "crashed",
    "TestEb::test_0": "passed",
    "TestEb::test_1": "crashed",
    "TestEb::test_2": "failed",
}


def _emu_outcomes(res: Path) -> tuple[dict[str, str], list[dict[str, object]]]:
    recs = [json.loads(x) for x in res.read_text().splitlines() if x.strip()]
    outcomes = [r for r in recs if r.get("kind") == "result"]
    by = {str(r["variant_id"]).split("::", 1)[1]: str(r["outcome"]) for r in outcomes}
    assert len(by) == len(outcomes)  # each variant once
    return by, [r for r in recs if r.get("kind") == "session"]


def test_crashes_in_two_emu_files_restart_from_the_fork_server(tmp_path: Path) -> None:
    _emu_crash_suite(tmp_path, "emu:full")
    r = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    by, sessions = _emu_outcomes(tmp_path / ".ootest" / "results.jsonl")
    assert {k.replace("[device=emu]", ""): v for k, v in by.items()} == EMU_WANT
    # every session forked from the one process that imported torch and loaded emu;
    # once the second crash left test_ea.py with nothing to run, it is not collected again
    assert [s["started"] for s in sessions] == ["forked"] * 4
    both, eb = ["test_ea.py", "test_eb.py"], ["test_eb.py"]
    assert [sorted(s["files"]) for s in sessions] == [both, both, eb, eb]
    assert "3 crash(es)/timeout(s) recovered by restarting pytest (forked)" in r.stdout


def test_a_backend_that_starts_threads_is_never_forked(tmp_path: Path) -> None:
    _emu_crash_suite(tmp_path, "mydev:emu")
    (tmp_path / "mydev.py").write_text(BACKEND_WITH_A_THREAD)
    r = ootest("run", "cfg.yaml", "--fork", "on", cwd=tmp_path)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    by, sessions = _emu_outcomes(tmp_path / ".ootest" / "results.jsonl")
    assert {k.replace("[device=emu]", ""): v for k, v in by.items()} == EMU_WANT
    assert [s["started"] for s in sessions] == ["fresh"] * 4
    assert "3 crash(es)/timeout(s) recovered by restarting pytest (fresh processes)" in r.stdout
    assert "fork server: device 'mydev:emu' started 1 thread(s) while loading" in r.stdout
    # without --fork on, a backend module is not loaded before a fork at all
    again = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert _emu_outcomes(tmp_path / ".ootest" / "results.jsonl")[0] == by
    assert "fork server: device 'mydev:emu' is not declared fork-safe" in again.stdout


DTYPES_ONLY_FILE = """
import sys

import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestPlain(TestCase):
    @dtypes(torch.float32)
    def test_fill(self, device, dtype):
        pass

    def test_databases(self, device):
        loaded = {m.rpartition(".")[2] for m in sys.modules} & {
            "common_methods_invocations", "common_modules"}
        self.assertEqual(loaded, set())


instantiate_device_type_tests(TestPlain, globals())
"""

DTYPES_ONLY_CONFIG = """
test_suite_config:
  device: emu:full
  files:
    - path: test_plain.py
      unlisted_test_mode: mandatory_success
      tests:
        - names: [TestPlain::test_fill]
          edits:
            dtypes:
              include: [{name: int64}]
"""


def test_a_dtype_include_imports_neither_op_database(tmp_path: Path) -> None:
    """Issue 28 item 18: Torch Spyre's test_view_ops config includes dtypes only; the
    injection imported common_modules and common_methods_invocations (0.5 s a
    process) for files that use neither."""
    (tmp_path / "test_plain.py").write_text(DTYPES_ONLY_FILE)
    (tmp_path / "cfg.yaml").write_text(DTYPES_ONLY_CONFIG)
    r = ootest("run", "cfg.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = (tmp_path / ".ootest" / "results.jsonl").read_text().splitlines()
    got = {
        rec["variant_id"].split("::", 1)[1]: rec["outcome"]
        for rec in map(json.loads, lines)
        if rec["kind"] == "result"
    }
    assert got == {
        "TestPlain::test_databases": "passed",
        "TestPlain::test_fill[dtype=float32]": "passed",
        "TestPlain::test_fill[dtype=int64]": "passed",  # still injected
    }
