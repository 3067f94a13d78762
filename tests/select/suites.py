"""Two versions of a small upstream-style suite, indexed without torch.

The repository memory is built by ``ootest index build`` itself (static part,
fingerprints, diff reasons); only the variant enumeration is synthetic (what
pytest with the plugin would list for the device), as in bench/index_build.py,
so these tests need no torch. Between V1 and V2:

- ``test_alpha.py``: ``_scale`` (a helper of ``test_double``) changes; the body
  of ``test_body`` changes; ``test_gone`` is removed; ``test_new`` is added;
  ``test_gate`` gains ``@onlyCUDA`` (upstream keeps it off the device now);
  ``test_dtypes`` gains a dtype (int64: not supported);
- ``test_beta.py`` does not change at all;
- ``test_gamma.py`` is new.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ootest.memory import BuildOptions, build_index
from ootest.memory._collect import CollectSettings, FileCollection, VariantRecord
from ootest.memory._files import SourceFile

HEAD = """import torch
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    onlyCUDA,
)
from torch.testing._internal.common_utils import TestCase
"""

ALPHA_V1 = (
    HEAD
    + """

def _scale(t):
    return t * 2


class TestAlpha(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_double(self, device, dtype):
        self.assertEqual(_scale(torch.ones(2, device=device, dtype=dtype)).sum().item(), 4)

    @dtypes(torch.float32)
    def test_body(self, device, dtype):
        self.assertEqual(torch.zeros(1, device=device, dtype=dtype).sum().item(), 0)

    @dtypes(torch.float32)
    def test_gone(self, device, dtype):
        pass

    def test_gate(self, device):
        self.assertTrue(torch.ones(1, device=device).bool().all())

    @dtypes(torch.float32, torch.float16)
    def test_dtypes(self, device, dtype):
        self.assertEqual(torch.ones(3, device=device, dtype=dtype).sum().item(), 3)


instantiate_device_type_tests(TestAlpha, globals())
"""
)

ALPHA_V2 = (
    HEAD
    + """

def _scale(t):
    return t + t


class TestAlpha(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_double(self, device, dtype):
        self.assertEqual(_scale(torch.ones(2, device=device, dtype=dtype)).sum().item(), 4)

    @dtypes(torch.float32)
    def test_body(self, device, dtype):
        self.assertEqual(torch.zeros(2, device=device, dtype=dtype).sum().item(), 0)

    @dtypes(torch.float32)
    def test_new(self, device, dtype):
        self.assertEqual(torch.ones(1, device=device, dtype=dtype).mean().item(), 1)

    @onlyCUDA
    def test_gate(self, device):
        self.assertTrue(torch.ones(1, device=device).bool().all())

    @dtypes(torch.float32, torch.float16, torch.int64)
    def test_dtypes(self, device, dtype):
        self.assertEqual(torch.ones(3, device=device, dtype=dtype).sum().item(), 3)


instantiate_device_type_tests(TestAlpha, globals())
"""
)

BETA = (
    HEAD
    + """

class TestBeta(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_add(self, device, dtype):
        self.assertEqual((torch.ones(1, device=device, dtype=dtype) + 1).item(), 2)

    def test_mm(self, device):
        a = torch.ones(2, 2, device=device)
        self.assertEqual((a @ a).sum().item(), 8)


instantiate_device_type_tests(TestBeta, globals())
"""
)

GAMMA = (
    HEAD
    + """

class TestGamma(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_cumsum(self, device, dtype):
        self.assertEqual(torch.ones(3, device=device, dtype=dtype).cumsum(0)[-1].item(), 3)


instantiate_device_type_tests(TestGamma, globals())
"""
)

# The variants pytest with the plugin lists for the device: (class, method, dtypes).
Spec = dict[str, list[tuple[str, str, tuple[str, ...]]]]
V1: Spec = {
    "test/test_alpha.py": [
        ("TestAlpha", "test_double", ("float32", "float64")),
        ("TestAlpha", "test_body", ("float32",)),
        ("TestAlpha", "test_gone", ("float32",)),
        ("TestAlpha", "test_gate", ()),
        ("TestAlpha", "test_dtypes", ("float32", "float16")),
    ],
    "test/test_beta.py": [
        ("TestBeta", "test_add", ("float32", "float64")),
        ("TestBeta", "test_mm", ()),
    ],
}
V2: Spec = {
    "test/test_alpha.py": [
        ("TestAlpha", "test_double", ("float32", "float64")),
        ("TestAlpha", "test_body", ("float32",)),
        ("TestAlpha", "test_new", ("float32",)),
        ("TestAlpha", "test_gate", ()),
        ("TestAlpha", "test_dtypes", ("float32", "float16", "int64")),
    ],
    "test/test_beta.py": V1["test/test_beta.py"],
    "test/test_gamma.py": [("TestGamma", "test_cumsum", ("float32", "float64"))],
}

#: The ops each variant calls (the op map), whatever its dtype.
OPS = {
    "test_double": {"aten::mul.Tensor": 1, "aten::sum": 1},
    "test_body": {"aten::zeros": 1, "aten::sum": 1},
    "test_gone": {},
    "test_new": {"aten::mean": 1},
    "test_gate": {"aten::ones": 1, "aten::all": 1},
    "test_dtypes": {"aten::ones": 1, "aten::sum": 1},
    "test_add": {"aten::add.Tensor": 1},
    "test_mm": {"aten::mm": 1, "aten::sum": 1},
    "test_cumsum": {"aten::cumsum": 1},
}
SUPPORTED = ["mul", "sum", "zeros", "ones", "all", "add", "mean", "empty_strided", "copy_"]


def vid(file: str, cls: str, method: str, dtype: str | None) -> str:
    return f"{file}::{cls}::{method}" + (f"[dtype={dtype}]" if dtype else "")


def variant_ids(spec: Spec) -> list[str]:
    return sorted(
        vid(f, c, m, d) for f, rows in spec.items() for c, m, ds in rows for d in ds or (None,)
    )


def write(root: Path, *, new: bool) -> Path:
    test = root / "test"
    test.mkdir(parents=True)
    (test / "test_alpha.py").write_text(ALPHA_V2 if new else ALPHA_V1)
    (test / "test_beta.py").write_text(BETA)
    if new:
        (test / "test_gamma.py").write_text(GAMMA)
    return test


def collector(spec: Spec) -> Callable[..., tuple[dict[str, FileCollection], list[str]]]:
    def collect(
        files: Sequence[SourceFile],
        settings: CollectSettings,
        jobs: int,
        advance: Callable[[int], None],
    ) -> tuple[dict[str, FileCollection], list[str]]:
        out: dict[str, FileCollection] = {}
        for f in files:
            fc = out[f.key] = FileCollection(f.key)
            for cls, method, dtypes in spec.get(f.key, []):
                for d in dtypes or (None,):
                    fc.variants.append(
                        VariantRecord(
                            vid(f.key, cls, method, d),
                            f.key,
                            cls,
                            method,
                            None,
                            (d,) if d else (),
                            None,
                            True,
                        )
                    )
            advance(1)
        return out, []

    return collect


def build_memory(root: Path, db: Path, spec: Spec) -> None:
    build_index(BuildOptions(roots=(root,), db=db, torch_db=False), collector=collector(spec))


def write_capture(path: Path, specs: Sequence[Spec]) -> Path:
    """An op capture (the stream 'ootest ops ingest' reads) covering every variant of
    ``specs``: each calls its method's ops and passed on the reference device."""
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
    seen: set[str] = set()
    for spec in specs:
        for file, rows in spec.items():
            for _cls, method, _ in rows:
                for v in variant_ids({file: [r for r in rows if r[1] == method]}):
                    if v in seen:
                        continue
                    seen.add(v)
                    if OPS[method]:
                        recs.append(
                            {
                                "kind": "ops",
                                "variant_id": v,
                                "nodeid": v,
                                "file": file,
                                "mode": "eager",
                                "ops": OPS[method],
                            }
                        )
                    recs.append(
                        {"kind": "stop", "variant_id": v, "op": None, "outcome": "passed",
                         "error": None}
                    )  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def build_inputs(base: Path) -> Path:
    """In ``base``: the old and new memories (``old.db``, ``new.db``), an op map of
    both versions' calls (``ops.db``) and the support list (``sup.txt``)."""
    from ootest.cli.main import main

    build_memory(write(base / "old", new=False), base / "old.db", V1)
    build_memory(write(base / "new", new=True), base / "new.db", V2)
    write_capture(base / "cap.jsonl", [V1, V2])
    (base / "sup.txt").write_text("\n".join(SUPPORTED) + "\n")
    assert main(["ops", "ingest", str(base / "cap.jsonl"), "--db", str(base / "ops.db")]) == 0
    return base
