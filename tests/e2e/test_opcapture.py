"""The op capture in the pytest child (Note [Op capture]), on emu, in subprocesses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ootest.opmap.ingest import ingest_files
from tests.conftest import run

UPSTREAM = """
import os
import signal

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestCap(TestCase):
    def test_cpu_reference(self, device):
        expected = torch.arange(4.0).mul(3).neg()  # on the CPU: not the device's business
        got = torch.arange(4.0, device=device) + torch.ones(4, device=device)
        self.assertEqual(got.cpu() - 1, expected.div(-3))

    def test_missing_op(self, device):
        x = torch.ones(5, device=device).exp()
        torch.cumsum(x, 0)

    def test_segfault(self, device):
        torch.ones(2, device=device).sin()
        os.kill(os.getpid(), signal.SIGSEGV)

    def test_branches(self, device):
        if self.device_type == "cuda":
            torch.ones(2, device=device).cos()
        torch.ones(2, device=device).tanh()

    def test_tail(self, device):  # runs after the segfault (tests run in name order)
        torch.ones(2, device=device).abs()

    def test_compiled(self, device):
        def f(a, b):
            return torch.mm(a, b).relu()

        g = torch.compile(f, backend="aot_eager")
        a = torch.ones(2, 2, device=device)
        self.assertEqual(g(a, a).cpu(), torch.full((2, 2), 2.0))


instantiate_device_type_tests(TestCap, globals())

if __name__ == "__main__":
    run_tests()
"""


def _stream(path: Path) -> tuple[dict[str, dict[str, int]], dict[str, Any], list[dict[str, Any]]]:
    """(variant -> eager ops with summed counts, variant -> stop record, all records)."""
    ops: dict[str, dict[str, int]] = defaultdict(dict)
    stops: dict[str, Any] = {}
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for r in recs:
        if r["kind"] == "ops" and r["mode"] == "eager":
            for name, n in r["ops"].items():
                ops[r["variant_id"]][name] = ops[r["variant_id"]].get(name, 0) + n
        elif r["kind"] == "stop":
            stops[r["variant_id"]] = r
    return ops, stops, recs


def _capture(
    tmp: Path, name: str, text: str, device: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``text`` written as ``name`` and run under the op capture on ``device``: the
    pytest process and the capture stream."""
    (tmp / name).write_text(text)
    cap = tmp / "ops.jsonl"
    r = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", name, "-q", *extra,
         "--ootest-device", device, "--ootest-ops-capture", str(cap)],
        cwd=tmp,
    )  # fmt: skip
    return r, cap


def test_capture_records_device_ops_stops_and_crashes(tmp_path: Path) -> None:
    r, cap = _capture(tmp_path, "test_cap.py", UPSTREAM, "emu:young")
    assert r.returncode < 0, r.stdout[-3000:] + r.stderr[-3000:]  # died in test_segfault
    ops, stops, recs = _stream(cap)
    V = f"{tmp_path.name}/test_cap.py::TestCap::"  # no root, no git, no config: folder/file
    assert recs[0]["kind"] == "provenance" and recs[0]["device"] == "emu"
    assert recs[0]["profile"] == "young" and recs[0]["torch_version"].startswith("2.")

    ref = ops[V + "test_cpu_reference"]
    assert "aten::add.Tensor" in ref and "aten::arange.start_out" in ref  # arange: composite
    assert not {"aten::mul.Tensor", "aten::neg", "aten::div.Tensor"} & set(ref), ref
    # composite ops the backend has no kernel for are followed into what they call
    assert "aten::ones" not in ref and "aten::fill_.Scalar" in ref, ref
    assert stops[V + "test_cpu_reference"]["outcome"] == "passed"

    stop = stops[V + "test_missing_op"]
    assert stop["op"] == "aten::cumsum.out" and stop["error"] == "NotImplementedError"
    assert stop["outcome"] == "failed"
    assert "aten::exp" in ops[V + "test_missing_op"]

    # Tests run in file order up to the crash: the crasher's ops are on disk already.
    crashed = ops[V + "test_segfault"]
    assert "aten::sin" in crashed and V + "test_segfault" not in stops
    mine = [x for x in recs if x.get("variant_id") == V + "test_segfault"]
    last = [x for x in mine if x["kind"] == "ops"][-1]
    assert last["ops"] == {"aten::sin": 1}  # the last op it reached
    assert mine[-2] == {  # and the dtypes it was called with, written before it ran
        "kind": "dtypes", "variant_id": V + "test_segfault", "op": "aten::sin",
        "dtypes": ["float32"],
    }  # fmt: skip
    assert mine[-1] == {  # and the call itself (Note [Call examples])
        "kind": "example", "variant_id": V + "test_segfault", "op": "aten::sin",
        "call": '{"args":[{"T":"float32","dev":true,"shape":[2],"v":[1.0,1.0]}],"kwargs":{}}',
    }  # fmt: skip

    branch = {x["variant_id"] for x in recs if x["kind"] == "device_branch"}
    assert branch == {V + "test_branches"}
    assert "aten::tanh" in ops[V + "test_branches"]
    assert "aten::cos" not in ops[V + "test_branches"]


def test_compiled_graphs_are_recorded_as_compiled(tmp_path: Path) -> None:
    r, cap = _capture(tmp_path, "test_cap.py", UPSTREAM, "emu:full", "-k", "compiled")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "torch.ops.aten" not in r.stdout + r.stderr  # the graphs are read, not printed
    _, stops, recs = _stream(cap)
    V = f"{tmp_path.name}/test_cap.py::TestCap::"
    compiled: set[str] = set()
    for x in recs:
        if x["kind"] == "ops" and x["mode"] == "compiled":
            compiled |= set(x["ops"])
    assert {"aten::mm", "aten::relu"} <= compiled, compiled
    assert stops[V + "test_compiled"]["outcome"] == "passed"


def test_ops_capture_survives_a_segfault_and_answers_queries(tmp_path: Path) -> None:
    from tests.conftest import ootest

    (tmp_path / "test_cap.py").write_text(UPSTREAM)
    db = tmp_path / "out" / "ops.db"
    r = ootest(
        "ops", "capture", "test_cap.py", "--device", "emu:young", "--db", str(db), "-q",
        "--", "-k", "not compiled", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 crash(es) recovered" in r.stdout
    V = f"{tmp_path.name}/test_cap.py::TestCap::"

    def for_test(name: str) -> dict[str, Any]:
        q = ootest("ops", "for-test", V + name, "--db", str(db), "--json", cwd=tmp_path)
        assert q.returncode == 0, q.stderr
        out: dict[str, Any] = json.loads(q.stdout)
        return out

    crashed = for_test("test_segfault")
    assert "aten::sin" in json.dumps(crashed) and "crashed" in json.dumps(crashed)
    stop = for_test("test_missing_op")
    assert "aten::cumsum" in json.dumps(stop)
    # the run resumed past the crash: the variant after it was recorded too
    q = ootest("ops", "tests-for", "aten::abs", "--db", str(db), "--json", cwd=tmp_path)
    assert q.returncode == 0 and V + "test_tail" in q.stdout, q.stdout + q.stderr


def test_aten_marks_select_what_the_op_map_says(tmp_path: Path) -> None:
    from tests.conftest import ROOT, ootest

    db = tmp_path / "ops.db"
    r = ootest("ops", "capture", "examples/suite", "--device", "emu:full", "--db", str(db), "-q")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    q = ootest("ops", "tests-for", "aten::mm", "--db", str(db), "--json", cwd=tmp_path)
    want = {v["variant_id"] for v in json.loads(q.stdout)["variants"]}
    assert want
    got = tmp_path / "v.jsonl"
    sel = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/suite",
         "--collect-only", "--ootest-device", "emu:full", "--ootest-ops", str(db),
         "-m", "aten__mm", "--ootest-variants", str(got)],
        cwd=ROOT,
    )  # fmt: skip
    assert sel.returncode == 0, sel.stdout[-2000:] + sel.stderr[-2000:]
    seen = {json.loads(x)["variant_id"] for x in got.read_text().splitlines()}
    assert seen == want


MODULE_FILE = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestMod(TestCase):
    def test_linear(self, device):
        torch.manual_seed(0)
        ref = torch.nn.Linear(4, 3)
        on = torch.nn.Linear(4, 3)
        on.load_state_dict(ref.state_dict())  # detach() of CPU parameters
        on.to(device)
        on.weight.detach()  # and of a device one
        x = torch.randn(2, 4)
        self.assertEqual(on(x.to(device)).cpu(), ref(x))


instantiate_device_type_tests(TestMod, globals())
"""


def test_composite_kernels_that_dispatch_their_own_op_are_followed_once(tmp_path: Path) -> None:
    # detach's composite kernel dispatches detach again: following it under the
    # recorder used to recurse until RecursionError (the test failed, 0 ops recorded)
    r, cap = _capture(tmp_path, "test_mod.py", MODULE_FILE, "emu:full")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ops, stops, _ = _stream(cap)
    v = f"{tmp_path.name}/test_mod.py::TestMod::test_linear"
    assert "aten::addmm" in ops[v] and "aten::detach" in ops[v], ops[v]
    assert stops[v]["outcome"] == "passed" and stops[v]["op"] is None, stops[v]


PROMOTION_FILE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestProm(TestCase):
    @dtypes(torch.float32)
    def test_matmul_int_promotion(self, device, dtype):
        a = torch.ones(2, 2, dtype=torch.int64, device=device)
        self.assertEqual((a @ a).cpu(), torch.full((2, 2), 2))
        b = torch.ones(2, 2, dtype=dtype, device=device)
        (b @ b).cpu()


instantiate_device_type_tests(TestProm, globals())
"""


def test_capture_records_the_dtypes_each_call_saw(tmp_path: Path) -> None:
    # Note [Call dtypes]: the int64 mm of a float32-parametrized test is recorded as int64
    r, cap = _capture(tmp_path, "test_prom.py", PROMOTION_FILE, "emu:full")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ops, stops, recs = _stream(cap)
    (vid,) = stops
    assert "dtype=float32" in vid and stops[vid]["outcome"] == "passed"
    seen = [(x["op"], x["dtypes"]) for x in recs if x["kind"] == "dtypes"]
    assert ("aten::mm", ["int64"]) in seen and ("aten::mm", ["float32"]) in seen, seen
    assert len(seen) == len(set(map(str, seen)))  # one record per new signature
    assert ops[vid]["aten::mm"] == 2  # counts per op still add up over signatures
    # the stream ingests into an index that answers with the pairs
    from ootest.opmap.store import OpStore

    with OpStore.open(tmp_path / "ops.db", create=True) as s:
        ingest_files(s, [cap])
        pairs = s.call_dtypes()[vid]
    assert ("aten::mm", "int64") in pairs and ("aten::mm", "float32") in pairs


ERROR_PATHS_FILE = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestErr(TestCase):
    def test_flip_errors(self, device):
        data = torch.ones(2, 2, 2, device=device)
        self.assertRaises(RuntimeError, lambda: data.flip(0, 1, 1))
        self.assertRaises(IndexError, lambda: data.flip(3))
        self.assertRaises(IndexError, lambda: data.flip(0, 1, 2, 3))  # same ending: no example
        data.flip(0)  # and it returns

    def test_value_mismatch(self, device):
        a = torch.arange(4, device=device)
        self._check(a)

    def _check(self, a):
        with self.assertRaisesRegex(RuntimeError, "shape mismatch"):
            a[a > -1] = torch.tensor([1, 2, 3], device=a.device)


    def test_from_data(self, device):
        # the float64 copy happens below the mode; fliplr raises in its composite
        with self.assertRaisesRegex(RuntimeError, "Input must be >= 2-d."):
            torch.fliplr(torch.tensor(42, device=device, dtype=torch.float64))


instantiate_device_type_tests(TestErr, globals())
"""


def test_each_way_a_call_ends_is_written_down_once(tmp_path: Path) -> None:
    """Note [Call examples]: flip raises RuntimeError, then IndexError (twice), then
    returns: three examples, one per ending, so the replay sees that a device without
    the kernel raises NotImplementedError where the test wants an IndexError. And
    collection says which tests match messages (Note [Tests that match messages]),
    through a helper method too."""
    r, cap = _capture(tmp_path, "test_err.py", ERROR_PATHS_FILE, "emu:full",
                      "--ootest-variants", str(tmp_path / "v.jsonl"))  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    _, stops, recs = _stream(cap)
    (flip,) = [v for v in stops if v.endswith("test_flip_errors")]
    mine = [x for x in recs if x.get("variant_id") == flip and x["kind"] == "example"]
    calls = [json.loads(x["call"]) for x in mine if x["op"] == "aten::flip"]
    assert [c["args"][1] for c in calls] == [[0, 1, 1], [3], [0]], calls
    seen = {
        json.loads(x)["method"]: json.loads(x)["checks_messages"]
        for x in (tmp_path / "v.jsonl").read_text().splitlines()
        if json.loads(x)["kind"] == "variant"
    }
    assert seen == {"test_flip_errors": False, "test_value_mismatch": True, "test_from_data": True}
    # Note [Tensors made from Python data]: the only trace of the float64 tensor
    (data,) = [v for v in stops if v.endswith("test_from_data")]
    mine = [(x["kind"], x.get("op"), x.get("dtypes")) for x in recs if x.get("variant_id") == data]
    assert ("dtypes", "aten::lift_fresh", ["float64"]) in mine, mine
    assert ("example", "aten::lift_fresh", None) in mine
    called = {op for x in recs if x.get("variant_id") == data and x["kind"] == "ops"
              for op in x["ops"]}  # fmt: skip
    assert called == {"aten::lift_fresh"}


PRINTS_FILE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestPrint(TestCase):
    @dtypes(torch.float32)
    def test_message(self, device, dtype):
        x = torch.tensor([0.5, -1.0, 2.0], device=device, dtype=dtype)
        msg = f"input {x}"  # formatted eagerly, as upstream does for small inputs
        self.assertEqual(x.neg().cpu(), torch.tensor([-0.5, 1.0, -2.0]), msg=msg)

    @dtypes(torch.float32)
    def test_silent(self, device, dtype):
        x = torch.tensor([0.5, -1.0, 2.0], device=device, dtype=dtype)
        self.assertEqual(x.neg().cpu(), torch.tensor([-0.5, 1.0, -2.0]))


instantiate_device_type_tests(TestPrint, globals())
"""


def test_what_printing_a_device_tensor_does_is_recorded(tmp_path: Path) -> None:
    # Note [Printed tensors]: torch prints with every mode off and converts the tensor
    # to float64 on the device; a backend without float64 fails the test there.
    r, cap = _capture(tmp_path, "test_print.py", PRINTS_FILE, "emu:full")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ops, stops, recs = _stream(cap)
    (message,) = [v for v in stops if "test_message" in v]
    (silent,) = [v for v in stops if "test_silent" in v]
    sigs = defaultdict(set)
    for x in recs:
        if x["kind"] == "dtypes":
            sigs[x["variant_id"]].update(x["dtypes"])
    assert "float64" in sigs[message], sigs[message]  # the formatter's conversion
    assert "float64" not in sigs[silent], sigs[silent]
    assert "aten::neg" in ops[silent] and "aten::masked_select" not in ops[silent]
    assert stops[message]["outcome"] == stops[silent]["outcome"] == "passed"


THREADED = """
import threading

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestT(TestCase):
    def test_in_a_thread(self, device):
        out = []
        t = threading.Thread(target=lambda: out.append(torch.ones(2, device=device).exp().cpu()))
        t.start()
        t.join()
        self.assertEqual(out[0], torch.ones(2).exp())

    def test_on_the_host(self, device):
        self.assertEqual(torch.ones(2).sum().item(), 2.0)


instantiate_device_type_tests(TestT, globals())
"""


def test_device_work_in_a_thread_is_no_evidence_of_no_device_ops(tmp_path: Path) -> None:
    """Issue 36: the capture is thread-local, so a test doing its device work in a
    thread it starts looked like it called no op on the device, and a pass made it
    mandatory (``no_device_ops``). A test that starts a thread is now uncertain: it
    runs (``no_evidence``); a test that stays on the host is still ``no_device_ops``."""
    from ootest.opmap.store import OpStore
    from ootest.select.gather import Candidate, Sources, Support, gather
    from ootest.select.rules import decide

    r, cap = _capture(tmp_path, "test_thr.py", THREADED, "emu:young")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    V = f"{tmp_path.name}/test_thr.py::TestT::"
    db = tmp_path / "ops.db"
    with OpStore.open(db, create=True) as s:
        ingest_files(s, [cap])
    cands = [Candidate(V + "test_in_a_thread"), Candidate(V + "test_on_the_host")]
    got = {
        e.variant_id.rpartition("::")[2]: decide(e)
        for e in gather(cands, Sources(ops=db), Support(lambda op: True, None, "all"), None)
    }
    assert got["test_on_the_host"].reason == "no_device_ops"
    assert (got["test_in_a_thread"].mode, got["test_in_a_thread"].reason) == (
        "xfail",
        "no_evidence",
    )
    assert got["test_in_a_thread"].evidence == (
        "op set may differ per device: the test starts threads, which op capture does not see into",
    )


GRAPH_BREAK = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


def helper(b):
    return b.exp()  # a frame of its own: Dynamo's hook is set while it runs


class TestBreak(TestCase):
    def test_graph_break(self, device):
        def f(a):
            b = a.sin()
            torch._dynamo.graph_break()
            c = helper(b)
            print(c)  # runs eagerly in the compiled frame: printed under the recorder
            return c.cos()

        g = torch.compile(f, backend="aot_eager")
        a = torch.ones(2, device=device)
        self.assertEqual(g(a).cpu(), torch.ones(2).sin().exp().cos())


instantiate_device_type_tests(TestBreak, globals())
"""


def test_the_recorder_is_never_traced_by_dynamo(tmp_path: Path) -> None:
    """Note [Capture cost]: the recorder switches Dynamo's frame hook off itself
    (torch's own wrapper cost two Python frames per call). Eager device calls made
    while Dynamo's hook is set (printing a device tensor at a graph break) reach the
    recorder, which must run as plain Python: recorded as eager, the test passing,
    and Dynamo compiling no frame of the recorder."""
    (tmp_path / "test_brk.py").write_text(GRAPH_BREAK)
    cap = tmp_path / "ops.jsonl"
    r = run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_brk.py", "-q", "-s",
         "--ootest-device", "emu:full", "--ootest-ops-capture", str(cap)],
        cwd=tmp_path, env={"TORCH_LOGS": "dynamo,aot_graphs"},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    traced = re.findall(r"start tracing (\S+) (\S+)", r.stdout + r.stderr)
    assert ("f", "test_brk.py:13") in [(n, Path(f).name) for n, f in traced], traced
    assert not [n for n, f in traced if "opcapture.py" in f and n != "_str"], traced
    ops, stops, recs = _stream(cap)
    (v,) = stops
    assert stops[v]["outcome"] == "passed"
    assert "aten::masked_select" in ops[v], ops[v]  # what printing did, eagerly
    compiled: set[str] = set()
    for x in recs:
        if x["kind"] == "ops" and x["mode"] == "compiled":
            compiled |= set(x["ops"])
    assert {"aten::sin", "aten::exp", "aten::cos"} <= compiled, compiled


SKIPPED_FIRST = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestEnds(TestCase):
    @classmethod
    def tearDownClass(cls):
        torch.ones(2, device=cls.device_type).exp()  # in the last test's teardown
        super().tearDownClass()

    def test_1(self, device):
        torch.ones(2, device=device).sin()

    def test_2(self, device):
        torch.ones(2, device=device).cos()

    def test_3(self, device):
        torch.ones(2, device=device).tanh()


instantiate_device_type_tests(TestEnds, globals())
"""


def test_a_config_skip_records_what_the_teardown_after_it_calls(tmp_path: Path) -> None:
    """A variant the config skips runs no code and is not recorded under the recorder
    (Note [Capture cost]), except where a scope's teardown follows it: the last
    test of a class tears the class down, and what ``tearDownClass`` calls on the
    device is that variant's, as it always was. Every variant gets its stop record."""
    (tmp_path / "test_ends.py").write_text(SKIPPED_FIRST)
    (tmp_path / "cfg.yaml").write_text(
        "test_suite_config:\n  device: emu:full\n  files:\n    - path: ./test_ends.py\n"
        "      unlisted_test_mode: skip\n      tests:\n"
        "        - names: [TestEnds::test_1]\n"
    )
    r, cap = _capture(tmp_path, "test_ends.py", SKIPPED_FIRST, "emu:full",
                      "--ootest-config", "cfg.yaml")  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ops, stops, _ = _stream(cap)
    by = {v.rpartition("::")[2]: v for v in stops}
    assert {t: stops[v]["outcome"] for t, v in by.items()} == {
        "test_1": "passed",
        "test_2": "skipped",
        "test_3": "skipped",
    }
    assert "aten::sin" in ops[by["test_1"]] and by["test_2"] not in ops
    assert "aten::exp" in ops[by["test_3"]], ops  # tearDownClass, in test_3's teardown
    assert "aten::tanh" not in ops[by["test_3"]]
