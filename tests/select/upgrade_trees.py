"""Small upstream-style test trees in two versions, for upgrades (``select run
--since``) and moves (Note [Moves]).

Each tree is written as upstream writes tests (``TestCase`` classes, device-generic
ones instantiated by ``instantiate_device_type_tests``, ``@dtypes``, ``@ops``,
module-level helpers); the repository memory is built by ``ootest index build``
itself (static part, fingerprints, the diff's reasons). Only the variant
enumeration is synthetic (what pytest with the plugin lists for the device, with
each variant's device flag), so no torch is needed; an OpInfo entry's change is
written into the new memory as the entry dump would record it (that dump imports
torch).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ootest.cli.main import main
from ootest.memory import BuildOptions, build_index
from ootest.memory._collect import CollectSettings, FileCollection, VariantRecord
from ootest.memory._files import SourceFile
from ootest.memory._fingerprint import fingerprint, variant_components

HEAD = """import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
)
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
)
"""


@dataclass(frozen=True)
class V:
    """One variant as pytest with the plugin lists it for the device."""

    file: str
    cls: str
    method: str
    dtype: str | None = None
    op: str | None = None
    device: bool = True
    params: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        axes = [f"op={self.op}"] if self.op else []
        axes += [f"dtype={self.dtype}"] if self.dtype else []
        axes += [f"{k}={v}" for k, v in self.params]
        bracket = f"[{','.join(axes)}]" if axes else ""
        return f"{self.file}::{self.cls}::{self.method}{bracket}"


def collector(
    spec: Sequence[V],
) -> Callable[..., tuple[dict[str, FileCollection], list[str]]]:
    def collect(
        files: Sequence[SourceFile],
        settings: CollectSettings,
        jobs: int,
        advance: Callable[[int], None],
    ) -> tuple[dict[str, FileCollection], list[str]]:
        out: dict[str, FileCollection] = {}
        for f in files:
            fc = out[f.key] = FileCollection(f.key)
            for v in spec:
                if v.file == f.key:
                    fc.variants.append(
                        VariantRecord(
                            v.id,
                            v.file,
                            v.cls,
                            v.method,
                            v.op,
                            (v.dtype,) if v.dtype else (),
                            None,
                            v.device,
                        )
                    )
            advance(1)
        return out, []

    return collect


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for key, text in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "test"


def build(root: Path, db: Path, files: Mapping[str, str], spec: Sequence[V]) -> None:
    test = write_tree(root, files)
    build_index(BuildOptions(roots=(test,), db=db, torch_db=False), collector=collector(spec))


def change_entry(db: Path, op: str, entry_fp: str) -> list[str]:
    """Give op ``op``'s entry another fingerprint in the memory ``db``, as a build
    whose entry dump saw the OpInfo edited records it; the variants it changed."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT v.id, v.module, t.components FROM variants v JOIN templates t ON "
            "t.key = substr(v.id, 1, instr(v.id || '[', '[') - 1) WHERE v.op = ?",
            (op,),
        ).fetchall()
        for vid, module, comps in rows:
            fp = fingerprint(variant_components(json.loads(comps), op, module, entry_fp))
            con.execute(
                "UPDATE variants SET entry_fp = ?, fingerprint = ? WHERE id = ?",
                (entry_fp, fp, vid),
            )
        con.commit()
        return sorted(r[0] for r in rows)
    finally:
        con.close()


def capture(path: Path, variants: Iterable[V], ops: Mapping[str, Mapping[str, int]]) -> Path:
    """An op capture: each device variant calls its method's ops (``ops``), a plain
    one calls none on the device; every one passed on the reference device."""
    recs: list[dict[str, object]] = [
        {
            "kind": "provenance",
            "torch_version": "2.13.0",
            "torch_git": "abc123",
            "device": "emu",
            "profile": "full",
            "ootest_version": "0.1.0",
            "time": 1733320000.0,
        }
    ]
    for v in sorted(set(variants), key=lambda x: x.id):
        calls = ops.get(v.method, {}) if v.device else {}
        if calls:
            recs.append(
                {
                    "kind": "ops",
                    "variant_id": v.id,
                    "nodeid": v.id,
                    "file": v.file,
                    "mode": "eager",
                    "ops": dict(calls),
                }
            )
        recs.append(
            {"kind": "stop", "variant_id": v.id, "op": None, "outcome": "passed", "error": None}
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["ops", "ingest", str(path), "--db", str(path.with_suffix(".db"))]) == 0
    return path.with_suffix(".db")


# ---------------------------------------------------------------- moves (Note [Moves])
SORT_OLD = (
    HEAD
    + """

class TestSort(TestCase):
    def setUp(self):
        super().setUp()
        self.size = 5

    def assertIsOrdered(self, x):
        self.assertTrue(bool((x[1:] >= x[:-1]).all()))

    @dtypes(torch.float32, torch.float64)
    def test_sort(self, device, dtype):
        x = torch.rand(self.size, device=device, dtype=dtype)
        self.assertIsOrdered(x.sort().values)

    def test_topk(self, device):
        x = torch.arange(self.size, device=device)
        self.assertEqual(x.topk(2).values.tolist(), [4, 3])

    def test_sort_stable_none(self, device):
        x = torch.tensor([2, 1], device=device)
        self.assertEqual(x.sort(stable=None).values.tolist(), [1, 2])

    def test_rewritten(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2)


instantiate_device_type_tests(TestSort, globals())
"""
)

# the device-generic class split: a CPU-only class and one for every other device;
# test_rewritten changed on the way (not a move)
SORT_NEW = (
    HEAD
    + """

class TestSortCPU(TestCase):
    def test_sort_cpu_only(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2)


instantiate_device_type_tests(TestSortCPU, globals(), only_for="cpu")


class TestSortDevice(TestCase):
    def setUp(self):
        super().setUp()
        self.size = 5

    def assertIsOrdered(self, x):
        self.assertTrue(bool((x[1:] >= x[:-1]).all()))

    @dtypes(torch.float32, torch.float64)
    def test_sort(self, device, dtype):
        x = torch.rand(self.size, device=device, dtype=dtype)
        self.assertIsOrdered(x.sort().values)

    def test_topk(self, device):
        x = torch.arange(self.size, device=device)
        self.assertEqual(x.topk(2).values.tolist(), [4, 3])

    def test_sort_stable_none(self, device):
        x = torch.tensor([2, 1], device=device)
        self.assertEqual(x.sort(stable=None).values.tolist(), [1, 2])

    def test_rewritten(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3)


instantiate_device_type_tests(TestSortDevice, globals(), except_for="cpu")
"""
)

PARAM = (
    HEAD
    + """from torch.testing._internal.common_utils import subtest


class TestParam(TestCase):
    @parametrize("x", [subtest(1, name="{a}"), subtest(2, name="{b}")])
    def test_param(self, device, x):
        self.assertEqual(torch.tensor(x, device=device).item(), x)

    @parametrize("n", [subtest(3, name="{c}")])
    def test_single(self, device, n):
        self.assertEqual(torch.ones(n, device=device).numel(), n)


instantiate_device_type_tests(TestParam, globals())
"""
)

MISC_OLD = (
    HEAD
    + """

def _twice(t):
    return t * 2


class TestMiscPlain(TestCase):
    def test_plain_moved(self):
        self.assertEqual(_twice(torch.ones(1)).item(), 2)


class TestMisc(TestCase):
    def test_moved(self, device):
        self.assertEqual(_twice(torch.ones(1, device=device)).item(), 2)

    def test_stays(self, device):
        self.assertEqual(torch.zeros(1, device=device).item(), 0)


instantiate_device_type_tests(TestMisc, globals())
"""
)
MISC_NEW = (
    HEAD
    + """

class TestMisc(TestCase):
    def test_stays(self, device):
        self.assertEqual(torch.zeros(1, device=device).item(), 0)


instantiate_device_type_tests(TestMisc, globals())
"""
)
# another file: the same helper, the device test as it was, the plain one decorated
OTHER = (
    HEAD
    + """import math


def _twice(t):
    return t * 2


class TestOtherPlain(TestCase):
    @torch.no_grad()
    def test_plain_moved(self):
        self.assertEqual(_twice(torch.ones(1)).item(), 2)


class TestOther(TestCase):
    def test_moved(self, device):
        self.assertEqual(_twice(torch.ones(1, device=device)).item(), 2)


instantiate_device_type_tests(TestOther, globals())
"""
)


def moves_version(new: bool) -> tuple[dict[str, str], list[V]]:
    """Two versions of a suite in which upstream moved tests: a class split, a
    test moved to another file (and a plain one moved and decorated), renamed
    parametrizations."""
    names = dict(a="small", b="large", c="three") if new else dict(a="one", b="two", c="n3")
    files = {
        "test/test_sort.py": SORT_NEW if new else SORT_OLD,
        "test/test_param.py": PARAM.format(**names),
        "test/test_misc.py": MISC_NEW if new else MISC_OLD,
    }
    sort, misc = "test/test_sort.py", "test/test_misc.py"
    cls = "TestSortDevice" if new else "TestSort"
    spec = [
        V(sort, cls, "test_sort", "float32"),
        V(sort, cls, "test_sort", "float64"),
        V(sort, cls, "test_topk"),
        V(sort, cls, "test_sort_stable_none"),
        V(sort, cls, "test_rewritten"),
        V(misc, "TestMisc", "test_stays"),
    ]
    spec += [V("test/test_param.py", "TestParam", "test_param", params=(("x", names[k]),))
             for k in "ab"]  # fmt: skip
    spec.append(V("test/test_param.py", "TestParam", "test_single", params=(("n", names["c"]),)))
    if new:
        files["test/test_other.py"] = OTHER
        spec += [
            V("test/test_other.py", "TestOther", "test_moved"),
            V("test/test_other.py", "TestOtherPlain", "test_plain_moved", device=False),
        ]
    else:
        spec += [
            V(misc, "TestMisc", "test_moved"),
            V(misc, "TestMiscPlain", "test_plain_moved", device=False),
        ]
    return files, spec
