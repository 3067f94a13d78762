from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ootest.errors import UserError
from ootest.opmap.affected import affected, ops_from_diff, registered_op
from ootest.opmap.registrations import parse_cpp, parse_python
from ootest.opmap.store import OpStore

from .conftest import PROV, A, B, C, D, ops, stop

CPP = """\
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

int helper(int x) { return x + 1; }

at::Tensor add_impl(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return a;  // v1
}

at::Tensor mul_impl(const at::Tensor& a, const at::Tensor& b) {
  return a;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", &add_impl);
  m.impl("mul.Tensor",
         TORCH_FN(mul_impl));
}
"""

PY = """\
import torch

lib = torch.library.Library("aten", "IMPL", "PrivateUse1")


def cumsum_kernel(x, dim):
    return x


lib.impl("cumsum", cumsum_kernel, "PrivateUse1")


@torch.library.impl("aten::_scaled_mm", "privateuse1")
def scaled_mm(a, b):
    return a
"""

# No device-dependent variant here: each case must name exactly its variants.
RECORDS = [
    PROV,
    ops(A, {"aten::add.Tensor": 3, "aten::empty_strided": 2}),
    ops(B, {"aten::mul.Tensor": 1, "aten::add.Tensor": 1}),
    ops(C, {"aten::cumsum": 1, "aten::cumsum.out": 2}),
    ops(D, {"aten::_scaled_mm": 1, "aten::mul.Tensor": 2}),
    *(stop(v) for v in (A, B, C, D)),
]


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "backend"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "csrc").mkdir()
    (r / "csrc" / "ops.cpp").write_text(CPP)
    (r / "emu_ops.py").write_text(PY)
    (r / "README.md").write_text("# backend\n")
    (r / "CMakeLists.txt").write_text("project(backend)\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def change(repo: Path, path: str, old: str, new: str) -> None:
    f = repo / path
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    git(repo, "commit", "-q", "-am", f"change {path}")


def run(repo: Path, db: Path) -> Any:
    cm = ops_from_diff(repo, "HEAD~1..HEAD")
    with OpStore.open(db) as s:
        rep = affected(
            s,
            [registered_op(o) for o in sorted(cm.ops)],
            everything_because=[f"could not map {u}" for u in cm.unmapped] or None,
        )
    return cm, rep


def test_kernel_body_change_maps_to_its_op(repo: Path, make_index: Any) -> None:
    db = make_index(RECORDS)
    change(repo, "csrc/ops.cpp", "return a;  // v1", "return b;  // v1")
    cm, rep = run(repo, db)
    assert (sorted(cm.ops), cm.unmapped) == (["aten::add.Tensor"], [])
    assert (rep.everything, rep.variants, rep.total) == (False, sorted([A, B]), 4)


def test_registration_change_maps_to_its_op(repo: Path, make_index: Any) -> None:
    db = make_index(RECORDS)
    change(repo, "csrc/ops.cpp", "TORCH_FN(mul_impl)", "TORCH_FN(mul_impl2)")
    cm, rep = run(repo, db)
    assert sorted(cm.ops) == ["aten::mul.Tensor"]
    assert rep.variants == sorted([B, D])


def test_python_registrations(repo: Path, make_index: Any) -> None:
    db = make_index(RECORDS)
    change(repo, "emu_ops.py", "    return x\n", "    return x.clone()\n")
    cm, rep = run(repo, db)
    assert sorted(cm.ops) == ["aten::cumsum"]  # the default overload: not cumsum.out
    assert rep.variants == [C]
    change(
        repo,
        "emu_ops.py",
        "def scaled_mm(a, b):\n    return a",
        "def scaled_mm(a, b):\n    return b",
    )
    cm, rep = run(repo, db)
    assert (sorted(cm.ops), rep.variants) == (["aten::_scaled_mm"], [D])


def test_unmapped_change_means_everything(repo: Path, make_index: Any) -> None:
    db = make_index(RECORDS)
    change(repo, "csrc/ops.cpp", "return x + 1;", "return x + 2;")
    cm, rep = run(repo, db)
    assert [str(u) for u in cm.unmapped] == [
        "csrc/ops.cpp: old line(s) 6 change code outside any registered kernel; "
        "new line(s) 6 change code outside any registered kernel"
    ]
    assert rep.everything and rep.variants == sorted([A, B, C, D])
    assert rep.reasons == [f"could not map {cm.unmapped[0]}"]
    change(repo, "CMakeLists.txt", "backend", "backend2")
    cm, rep = run(repo, db)
    assert [str(u) for u in cm.unmapped] == [
        "CMakeLists.txt: not a C++ or Python source: its effect on kernels is unknown"
    ]


def test_comments_and_docs_change_nothing(repo: Path, make_index: Any) -> None:
    db = make_index(RECORDS)
    (repo / "README.md").write_text("# backend\nmore\n")
    change(repo, "csrc/ops.cpp", "// v1", "// v2, same code")
    cm, rep = run(repo, db)
    assert (cm.ops, cm.unmapped, cm.ignored) == ({}, [], ["README.md (documentation)"])
    assert (rep.everything, rep.variants) == (False, [])


def test_device_dependent_variants_are_always_kept(make_index: Any) -> None:
    db = make_index([*RECORDS, {"kind": "device_branch", "variant_id": C}])
    with OpStore.open(db) as s:
        rep = affected(s, [s.parse("aten::add.Tensor"), s.parse("aten::mm")])
    assert rep.variants == sorted([A, B, C])
    assert (rep.uncertain_kept, rep.unknown_ops, rep.per_op) == (
        1,
        ["aten::mm"],
        {"aten::add.Tensor": 2},
    )


def test_bad_revisions_are_user_errors(repo: Path) -> None:
    with pytest.raises(UserError) as e:
        ops_from_diff(repo, "HEAD")
    assert str(e.value) == "--diff 'HEAD': expected BASE..HEAD, e.g. origin/main..HEAD"
    with pytest.raises(UserError) as e:
        ops_from_diff(repo, "nope..HEAD")
    assert str(e.value).startswith(
        f"--src {repo}: `git diff --no-color --no-ext-diff -U0 -M nope..HEAD` failed: "
    )


def test_parsers_find_registrations_and_kernels() -> None:
    cpp = parse_cpp(CPP)
    assert [(r.op, r.symbol, r.first, r.last) for r in cpp.registrations] == [
        ("aten::add.Tensor", "add_impl", 19, 19),
        ("aten::mul.Tensor", "mul_impl", 20, 21),
    ]
    assert cpp.ops_at(9) == ["aten::add.Tensor"]  # inside add_impl
    assert cpp.ops_at(18) == ["aten::add.Tensor", "aten::mul.Tensor"]  # the block header
    assert cpp.ops_at(6) is None  # helper: no registration accounts for it
    assert cpp.ops_at(1) == [] and cpp.ops_at(16) == []  # include, closing namespace
    py = parse_python(PY)
    assert py is not None
    assert [(r.op, r.symbol) for r in py.registrations] == [
        ("aten::_scaled_mm", "scaled_mm"),
        ("aten::cumsum", "cumsum_kernel"),
    ] or [(r.op, r.symbol) for r in py.registrations] == [
        ("aten::cumsum", "cumsum_kernel"),
        ("aten::_scaled_mm", "scaled_mm"),
    ]
    assert py.ops_at(3) == ["aten::cumsum"]  # the Library line: every op it registers
    assert py.ops_at(1) is None  # import torch
