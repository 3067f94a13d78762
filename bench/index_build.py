"""Repository memory at scale: ``ootest index build`` full vs incremental, query latency.

Generates an upstream-style tree of N test files (default 1,000; each one class
of 10 template tests: 5 ``@ops`` over a 10-op subset of ``op_db`` with 4
allowed dtypes and 5 ``@dtypes`` tests with 10 dtypes, module-level helpers,
docstrings and comments: 250 variants per file, 250,000 in all) and measures,
in one command:

  full         a first build into an empty index: static part (process pool),
               torch's test database (a child process importing torch), variants,
               fingerprints, FTS. Variants come from a *synthetic collector* that
               lists what pytest would (``--synthetic``, default): collecting 250k
               variants through pytest is measured separately (below);
  noop         a rebuild with nothing changed (must parse and write nothing);
  incremental  a rebuild after editing a helper in 5% of the files
               (target: incremental / full <= 0.10);
  query        200 queries in-process (50 exact variant IDs, 50 test names, 50
               symbols, 50 of one or two docstring words drawn from a Zipf-like
               vocabulary) against the full index: p50 / p95 / max (target p95 < 20 ms);
               and a few ``ootest index query`` command lines end to end;
  collect      the real variant enumeration (pytest + the ootest plugin, test
               bodies never run) on a subset of the same files
               (``--collect-files``, default 20), with --jobs.

Wall and CPU seconds both: CPU time (this process and its children) is what a
build costs whatever else the machine runs; the ratios are taken on both.

Usage: python bench/index_build.py [--files N] [--jobs J] [--collect-files K] [--repeat R]
       [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ootest.memory import BuildOptions, build_index
from ootest.memory._collect import CollectSettings, FileCollection, VariantRecord, collect
from ootest.memory._files import SourceFile
from ootest.memory._query import search
from ootest.memory._store import connect

OPS = ("add", "mul", "sub", "div", "abs", "exp", "cumsum", "matmul", "neg", "sin")
OP_DTYPES = ("float32", "float64", "int64", "bfloat16")
DTYPES = (
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
HEAD = '''"""Generated test file {i}: scaled upstream-style tests for the index benchmark."""
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_OPS = [op for op in op_db if op.name in {ops!r} and not op.variant_test_name]
_OP_DTYPES = ({op_dtypes})


def _make_{i}(n, dtype, device):
    # builds the input every test of this file uses
    return torch.ones(n, dtype=dtype, device=device)


def _check_{i}(case, a, b):
    case.assertEqual(a, b, msg="revision {rev}")


class TestGen{i}(TestCase):
    """Generated class {i}: ops and dtypes."""
'''
OP_TEST = '''
    @ops(_OPS, allowed_dtypes=_OP_DTYPES)
    def test_op_{j}(self, device, dtype, op):
        """Op test {j} of file {i}: {words}."""
        for sample in op.sample_inputs(device, dtype):
            _check_{i}(self, op(sample.input, *sample.args), op(sample.input, *sample.args))
'''
DTYPE_TEST = '''
    @dtypes({dtypes})
    def test_dtype_{j}(self, device, dtype):
        """Dtype test {j} of file {i}: {words}."""
        x = _make_{i}({j} + 1, dtype, device)
        _check_{i}(self, x, x)
'''
TAIL = """

instantiate_device_type_tests(TestGen{i}, globals())

if __name__ == "__main__":
    run_tests()
"""


def _word(n: int) -> str:
    letters = "bcdfghklmnprstvz"
    vowels = "aeiou"
    out = ""
    for _ in range(3):
        out += letters[n % 16] + vowels[(n // 16) % 5]
        n //= 80
    return out


#: A docstring vocabulary with a Zipf-like use (a few words common, most rare),
#: so word queries meet realistic match counts.
VOCAB = [_word(n) for n in range(3000)]
_WEIGHTS = [1 / (r + 1) for r in range(len(VOCAB))]


def words(i: int, j: int) -> str:
    rng = random.Random(i * 100 + j)
    return " ".join(rng.choices(VOCAB, _WEIGHTS, k=8))


def source(i: int, rev: int = 0) -> str:
    text = HEAD.format(
        i=i,
        ops=OPS,
        op_dtypes=", ".join(f"torch.{d}" for d in OP_DTYPES),
        rev=rev,
    )
    for j in range(5):
        text += OP_TEST.format(i=i, j=j, words=words(i, j))
    dts = ", ".join(f"torch.{d}" for d in DTYPES)
    for j in range(5):
        text += DTYPE_TEST.format(i=i, j=j, dtypes=dts, words=words(i, 5 + j))
    return text + TAIL.format(i=i)


def generate(root: Path, n: int) -> None:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"test_gen_{i:04d}.py").write_text(source(i))


def synthetic(
    files: Sequence[SourceFile],
    settings: CollectSettings,
    jobs: int,
    advance: Callable[[int], None],
) -> tuple[dict[str, FileCollection], list[str]]:
    """What pytest lists for the generated files (the device ID form: no device axis)."""
    out: dict[str, FileCollection] = {}
    for f in files:
        i = int(f.path.stem.rsplit("_", 1)[1])
        cls = f"TestGen{i}"
        fc = out[f.key] = FileCollection(f.key)
        for j in range(5):
            m = f"test_op_{j}"
            for op in OPS:
                for d in OP_DTYPES:
                    vid = f"{f.key}::{cls}::{m}[op={op},dtype={d}]"
                    fc.variants.append(VariantRecord(vid, f.key, cls, m, op, (d,), None, True))
        for j in range(5):
            m = f"test_dtype_{j}"
            for d in DTYPES:
                vid = f"{f.key}::{cls}::{m}[dtype={d}]"
                fc.variants.append(VariantRecord(vid, f.key, cls, m, None, (d,), None, True))
        advance(1)
    return out, []


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the parse pool, the
    dump, the collecting pytest processes): what a build costs, whatever else runs."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def timed2(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, result)."""
    c, t = _cpu(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t, _cpu() - c, out


def queries(n_files: int) -> list[str]:
    rng = random.Random(0)
    out = []
    for _ in range(50):
        i = rng.randrange(n_files)
        out.append(
            f"test/test_gen_{i:04d}.py::TestGen{i}::test_op_{rng.randrange(5)}"
            f"[op={rng.choice(OPS)},dtype={rng.choice(OP_DTYPES)}]"
        )
    out += [f"test_dtype_{rng.randrange(5)}" for _ in range(25)]
    out += [f"TestGen{rng.randrange(n_files)}::test_op_1" for _ in range(25)]
    out += [f"_make_{rng.randrange(n_files)}" for _ in range(50)]
    out += [rng.choice(VOCAB) for _ in range(25)]  # one word, any frequency
    out += [" ".join(rng.choices(VOCAB, _WEIGHTS, k=2)) for _ in range(25)]  # two, Zipf-drawn
    return out


def measure_queries(db: Path, n_files: int, repeat: int) -> tuple[list[float], list[float]]:
    """Per query, the best of ``repeat`` runs: (wall seconds, CPU seconds)."""
    con = connect(db, readonly=True)
    wall: list[float] = []
    cpu: list[float] = []
    try:
        for q in queries(n_files):
            w, c = [], []
            for _ in range(repeat):
                c0, t0 = time.process_time(), time.perf_counter()
                search(con, q, 20)
                w.append(time.perf_counter() - t0)
                c.append(time.process_time() - c0)
            wall.append(min(w))
            cpu.append(min(c))
    finally:
        con.close()
    return wall, cpu


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * p) - 1)] * 1000


def cli_query(db: Path, text: str) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ootest.cli", "index", "query", text, "--db", str(db), "--json"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t


def measure_collection(tree: Path, k: int, jobs: int, repeat: int) -> None:
    """The real enumeration (pytest + plugin): one process for 1 file and one for k
    files, best of ``repeat`` (fixed cost per process vs cost per variant), then k
    files over ``jobs`` processes."""

    def files(n: int) -> list[SourceFile]:
        return [
            SourceFile(f"test/test_gen_{i:04d}.py", tree, tree / f"test_gen_{i:04d}.py", 0, 0)
            for i in range(n)
        ]

    def one(n: int, j: int) -> tuple[float, float, int]:
        best: tuple[float, float, int] | None = None
        for _ in range(repeat):
            t, c, res = timed2(lambda: collect(files(n), CollectSettings(group_size=64), j))
            count = sum(len(fc.variants) for fc in res[0].values())  # type: ignore[index]
            if best is None or t < best[0]:
                best = (t, c, count)
        assert best is not None
        return best

    t1, c1, n1 = one(1, 1)
    tk, ck, nk = one(k, 1)
    per, per_cpu = (tk - t1) / max(1, nk - n1), (ck - c1) / max(1, nk - n1)
    print(
        f"collection, one process: 1 file ({n1:,} variants) {t1:.1f} s wall / {c1:.1f} s CPU; "
        f"{k} files ({nk:,}) {tk:.1f} s / {ck:.1f} s -> {per * 1000:.2f} ms "
        f"({per_cpu * 1000:.2f} ms CPU) per variant + {t1 - per * n1:.1f} s "
        f"({c1 - per_cpu * n1:.1f} s CPU) per process"
    )
    tj, cj, nj = one(k, jobs)
    print(
        f"collection, {k} files over --jobs {jobs}: {nj:,} variants in {tj:.1f} s ({cj:.1f} s CPU)"
    )
    groups = -(-1000 // 64)
    est = (250_000 * per_cpu + groups * (c1 - per_cpu * n1)) / jobs
    print(f"estimated for 250,000 variants in 1,000 files, {jobs} idle cores: {est / 60:.0f} min")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--collect-files", type=int, default=20)
    p.add_argument("--keep", type=Path, help="work in this folder and keep it")
    p.add_argument("--repeat", type=int, default=3, help="runs per query / collection (best)")
    args = p.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ootest-index-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    tree = base / "tree" / "test"
    if tree.exists():
        shutil.rmtree(tree.parent)
    db = base / "memory.db"
    db.unlink(missing_ok=True)
    t, _ = timed(lambda: generate(tree, args.files))
    print(f"generated {args.files:,} files in {t:.1f} s under {tree}")

    def run() -> tuple[float, float, object]:
        opts = BuildOptions(roots=(tree,), db=db, jobs=args.jobs)
        return timed2(lambda: build_index(opts, collector=synthetic))

    full, full_cpu, rep = run()
    print(f"full build:        {full:7.2f} s wall, {full_cpu:7.2f} s CPU  {rep.summary()}")  # type: ignore[attr-defined]
    print(f"  phases (wall): {rep.phases}")  # type: ignore[attr-defined]
    size = db.stat().st_size
    n_variants = rep.variants_total  # type: ignore[attr-defined]
    noop, noop_cpu, rep = run()
    print(f"no-op rebuild:     {noop:7.2f} s wall, {noop_cpu:7.2f} s CPU  {rep.summary()}")  # type: ignore[attr-defined]
    changed = max(1, args.files // 20)
    for i in range(0, args.files, args.files // changed)[:changed]:
        (tree / f"test_gen_{i:04d}.py").write_text(source(i, rev=1))
    inc, inc_cpu, rep = run()
    print(
        f"incremental (5%):  {inc:7.2f} s wall, {inc_cpu:7.2f} s CPU  {rep.summary()}; "  # type: ignore[attr-defined]
        f"{rep.variants_changed:,} changed"  # type: ignore[attr-defined]
    )
    print(f"  phases (wall): {rep.phases}")  # type: ignore[attr-defined]
    print(
        f"ratio incremental / full: {inc / full:.3f} wall, {inc_cpu / full_cpu:.3f} CPU  "
        "(target <= 0.10)"
    )

    wall, cpu = measure_queries(db, args.files, args.repeat)
    print(
        f"query (in-process, {len(wall)} queries, best of {args.repeat} each): "
        f"wall p50 {_pct(wall, 0.5):.2f} ms, p95 {_pct(wall, 0.95):.2f} ms, "
        f"max {max(wall) * 1000:.2f} ms; CPU p50 {_pct(cpu, 0.5):.2f} ms, "
        f"p95 {_pct(cpu, 0.95):.2f} ms  (target p95 < 20 ms)"
    )
    cli = [cli_query(db, q) for q in (VOCAB[5], "_make_7", "TestGen3::test_op_1")]
    print(f"query (command line, end to end): {', '.join(f'{c:.2f} s' for c in cli)}")
    print(f"index size: {size / 1e6:.1f} MB for {n_variants:,} variants")

    if args.collect_files:
        measure_collection(tree, min(args.collect_files, args.files), args.jobs, args.repeat)
    no_db = base / "no-torch-db.db"
    t, c, rep = timed2(
        lambda: build_index(
            BuildOptions(roots=(tree,), db=no_db, jobs=args.jobs, torch_db=False),
            collector=synthetic,
        )
    )
    print(f"full build without torch's database: {t:.2f} s wall, {c:.2f} s CPU; {rep.phases}")  # type: ignore[attr-defined]
    if not args.keep:
        shutil.rmtree(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
