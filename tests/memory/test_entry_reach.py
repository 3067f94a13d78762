"""Entry changes that do not reach a variant (Note [Test-limited entry fingerprints],
Note [Entry changes that do not reach a variant]).

A real torch upgrade (2.13 -> 2.14) changed the entries of ``abs``, ``float`` ...
only in skips for ``TestMeta``, ``TestBwdGradients`` and the like: no variant of
``test_unary_ufuncs.py`` runs differently, yet every one of those ops' variants
was "modified". The diff now compares such a variant by its entry without skips
and decorators plus those that can reach it.

The first tests build the two indexes by hand (no torch); the last one builds
them with the real OpInfo machinery in child processes (slow).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ootest.memory import diff_indexes
from ootest.memory._fingerprint import fingerprint, variant_components
from ootest.memory._store import connect
from tests.conftest import ootest
from tests.memory.trees import build_index

FILE = "test/test_gamma.py"
TEMPLATE = {"body": "b1", "import": "i1"}
DB = "local_ops:local_op_db"


def _deco(fp: str, cls: str | None = None, test: str | None = None, **more: object) -> dict:
    return {"fingerprint": fp, "cls_name": cls, "test_name": test, "device_type": None,
            "dtypes": None, "active_if": True, "decorators": ["skip"], **more}  # fmt: skip


def _index(path: Path, entry_fp: str, base: str | None, decos: list[dict]) -> None:
    """An index of ``TestGamma::test_op_runs`` and ``test_op_twice`` over op ``add``
    in float32 and float64; ``base``: the entry's ``test_base`` (None: an index
    built before there was one)."""
    con = connect(path, create=True)
    con.execute("BEGIN")
    con.execute("INSERT INTO meta VALUES('device', 'emu:full')")
    con.execute(
        "INSERT INTO entries VALUES(?,?,?,?,?,?,?,?,?,?)",
        (DB, "add", "opinfo", "add", "", entry_fp, "{}", "", json.dumps(decos), entry_fp),
    )
    if base is not None:
        con.execute("INSERT INTO entry_bases VALUES(?,?,?)", (DB, "add", base))
    for method in ("test_op_runs", "test_op_twice"):
        key = f"{FILE}::TestGamma::{method}"
        con.execute(
            "INSERT INTO templates VALUES(?,?,?,?)",
            (key, FILE, json.dumps(TEMPLATE), fingerprint(TEMPLATE)),
        )
        for dtype in ("float32", "float64"):
            fp = fingerprint(variant_components(TEMPLATE, "add", None, entry_fp))
            con.execute(
                "INSERT INTO variants VALUES(?,?,?,?,?,?,?,?,?,?)",
                (f"{key}[op=add,dtype={dtype}]", "TestGamma", "add", dtype, None, 1, None,
                 None, entry_fp, fp),
            )  # fmt: skip
    con.execute("COMMIT")
    con.close()


def _changes(tmp_path: Path, old: tuple, new: tuple) -> tuple[list[str], list[str]]:
    """(modified, unreached) from an index as ``old`` describes it to one as ``new`` does."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for p in (a, b):
        p.unlink(missing_ok=True)
    _index(a, *old)
    _index(b, *new)
    d = diff_indexes(a, b)
    short = [m.id.split("::", 2)[2] for m in d.modified]
    return short, [v.split("::", 2)[2] for v, _, _ in d.unreached]


ALL = [f"{m}[op=add,dtype={t}]" for m in ("test_op_runs", "test_op_twice")
       for t in ("float32", "float64")]  # fmt: skip


def test_a_skip_of_another_class_or_test_reaches_no_variant(tmp_path: Path) -> None:
    other = _deco("d-meta", "TestMeta", "test_meta_inplace")
    modified, unreached = _changes(tmp_path, ("e1", "base", []), ("e2", "base", [other]))
    assert (modified, unreached) == ([], ALL)
    # a skip of another test of this class: only that test's variants are untouched
    twice = _deco("d-twice", "TestGamma", "test_op_twice")
    modified, unreached = _changes(tmp_path, ("e1", "base", []), ("e2", "base", [twice]))
    assert modified == ALL[2:] and unreached == ALL[:2]


def test_a_skip_of_one_dtype_or_another_device_reaches_only_what_it_names(tmp_path: Path) -> None:
    f64 = _deco("d-64", "TestGamma", "test_op_runs", dtypes=["float64"])
    modified, unreached = _changes(tmp_path, ("e1", "base", []), ("e2", "base", [f64]))
    assert modified == ["test_op_runs[op=add,dtype=float64]"]
    assert sorted(unreached) == sorted(set(ALL) - set(modified))
    # one for CUDA only never reaches a variant of the emu index; one for emu does
    cuda = _deco("d-cuda", None, None, device_type="cuda")
    assert _changes(tmp_path, ("e1", "base", []), ("e2", "base", [cuda])) == ([], ALL)
    emu = _deco("d-emu", None, None, device_type="emu")
    assert _changes(tmp_path, ("e1", "base", []), ("e2", "base", [emu])) == (ALL, [])
    # a DecorateInfo for every class, test and dtype reaches every variant
    everywhere = _deco("d-all")
    assert _changes(tmp_path, ("e1", "base", []), ("e2", "base", [everywhere])) == (ALL, [])


def test_what_every_variant_sees_changing_or_an_older_index_is_modified(tmp_path: Path) -> None:
    # the entry without its skips changed (its sample inputs, say): every variant
    assert _changes(tmp_path, ("e1", "base", []), ("e2", "base2", [])) == (ALL, [])
    # a skip that reaches a variant changed its arguments (another fingerprint)
    runs = _deco("d-1", "TestGamma", "test_op_runs")
    runs2 = _deco("d-2", "TestGamma", "test_op_runs")
    modified, _ = _changes(tmp_path, ("e1", "base", [runs]), ("e2", "base", [runs2]))
    assert modified == ALL[:2]
    # an index built before entry_bases: it cannot tell, so every variant counts
    other = _deco("d-meta", "TestMeta", "test_meta_inplace")
    assert _changes(tmp_path, ("e1", None, []), ("e2", "base", [other])) == (ALL, [])


def test_the_summary_says_how_many_an_entry_change_did_not_reach(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _index(a, "e1", "base", [])
    _index(b, "e2", "base", [_deco("d-meta", "TestMeta", "test_meta_inplace")])
    r = ootest("index", "diff", str(a), str(b), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["modified"] == [] and len(data["unreached"]) == 4
    assert data["summary"] == (
        "0 of 4 variants changed (4 more whose entry changed only in skips or decorators "
        "of other tests: unchanged for them)"
    )


OPS = """
import unittest

import torch
from torch.testing._internal.opinfo.core import DecorateInfo, OpInfo, SampleInput


def sample_inputs_add(op, device, dtype, requires_grad, **kwargs):
    a = torch.ones(3, device=device, dtype=dtype{scale})
    yield SampleInput(a, args=(a,))


local_op_db = [
    OpInfo("add", op=torch.add, dtypes=(torch.float32, torch.float64),
           sample_inputs_func=sample_inputs_add, skips=({skips})),
]
"""

GAMMA = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase

from local_ops import local_op_db


class TestGamma(TestCase):
    @ops(local_op_db)
    def test_op_runs(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            op(sample.input, *sample.args)

    @ops(local_op_db)
    def test_op_twice(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            op(op(sample.input, *sample.args), *sample.args)


instantiate_device_type_tests(TestGamma, globals())
"""

META = "DecorateInfo(unittest.skip('meta'), 'TestMeta', 'test_meta_inplace'),"
RUNS_F64 = (
    "DecorateInfo(unittest.skip('f64'), 'TestGamma', 'test_op_runs', dtypes=(torch.float64,)),"
)


@pytest.mark.slow  # four builds that import torch in their children
def test_real_opinfo_skips_reach_the_variants_they_name(tmp_path: Path) -> None:
    root = tmp_path / "test"
    root.mkdir()
    (root / "test_gamma.py").write_text(GAMMA)

    def version(name: str, skips: str = "", scale: str = "") -> Path:
        (root / "local_ops.py").write_text(OPS.format(skips=skips, scale=scale))
        db = tmp_path / f"{name}.db"
        build_index(root, db, "--device", "emu:full")
        return db

    def diff(old: Path, new: Path) -> tuple[list[str], list[str]]:
        r = ootest("index", "diff", str(old), str(new), "--json")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        cut = [m["id"].split("::", 2)[2] for m in d["modified"]]
        return sorted(cut), sorted(v.split("::", 2)[2] for v in d["unreached"])

    plain = version("plain")
    meta = version("meta", META)
    assert diff(plain, meta) == ([], sorted(ALL))  # another class's skip: none reached
    f64 = version("f64", META + RUNS_F64)
    reached = ["test_op_runs[op=add,dtype=float64]"]
    assert diff(meta, f64) == (reached, sorted(set(ALL) - set(reached)))
    scaled = version("scaled", META + RUNS_F64, scale=") * (2")
    assert diff(f64, scaled) == (sorted(ALL), [])  # the sample inputs: every variant
    # an index built before entry_bases existed (same scheme): it cannot tell
    old = tmp_path / "old.db"
    shutil.copy(plain, old)
    con = connect(old)
    con.execute("DROP TABLE entry_bases")
    con.close()
    assert diff(old, meta) == (sorted(ALL), [])
