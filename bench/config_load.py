"""Reading configs: a 100,000-entry config, and the hostile inputs of issue 15 (no torch).

  load      ootest's ``load_config`` (read, bounds, validate, compose, compile names,
            resolve paths) of a generated config of N test entries, in this process, a
            first load: the config cache off (OOTEST_NO_CACHE=1)
  baseline  PyYAML's own ``yaml.load(text, CSafeLoader)`` of the same file (parsing only,
            nothing validated), in this process: the ratio is load / baseline
  cached    ``load_config`` with the config cache (Note [Config cache] in config/load.py)
            in a fresh $OOTEST_CACHE_DIR (a first load that also writes the cache), and
            again (a rerun that reads it)
  cli       ``ootest config validate FILE`` of the same file in a fresh process (cache off)
  hostile   each until its error or answer: an alias bomb of 12 nine-fold levels (about
            280 billion values expanded) with a duplicate key and with a merge key;
            ``path: /**/*.py``; ``${ROOT}/**/*.py`` with ROOT=/ (the glob bound);
            ``re:(a+)+$`` against a 10,000-character name, and Python's ``re`` on the
            same pattern and a 23-character name as the contrast

Prints best-of-N wall and CPU seconds. Usage: python bench/config_load.py [--entries N]
[--repeat N]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from ootest.config.load import load_config
from ootest.config.names import NamePattern, Variant
from ootest.errors import ConfigError

MODES = ("mandatory_success", "xfail", "skip", "xfail_strict")


def big_config(folder: Path, entries: int) -> Path:
    """Entries as the collect_overhead bench writes them: a filtered name and a mode."""
    lines = ["test_suite_config:", "  files:", "    - path: test_x.py", "      tests:"]
    for i in range(entries):
        lines.append(f"        - names: ['TestX::test_op_{i}[op=add,dtype=float32]']")
        lines.append(f"          mode: {MODES[i % 4]}")
    path = folder / f"big{entries}.yaml"
    path.write_text("\n".join(lines) + "\n")
    (folder / "test_x.py").write_text("")
    return path


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``repeat`` runs."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def load_writing_cache(path: Path, folders: Iterator[Path]) -> None:
    """``load_config`` in a fresh $OOTEST_CACHE_DIR: a first load that writes the cache."""
    os.environ["OOTEST_CACHE_DIR"] = str(next(folders))
    load_config(path)


def error_time(path: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        load_config(path, env=env)
        message = "(no error)"
    except ConfigError as e:
        message = str(e.problems[0])
    return time.perf_counter() - start, message.replace(str(path.parent) + "/", "")


def bomb(levels: int, tail: str) -> str:
    lines = ["test_suite_config: {}", "relay:", "  a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join([*lines, tail, ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in sorted({10_000, args.entries}):
            path = big_config(folder, n)
            text = path.read_text()
            base_w, base_c = best(lambda: yaml.load(text, Loader=yaml.CSafeLoader), args.repeat)  # noqa: B023
            os.environ["OOTEST_NO_CACHE"] = "1"
            load_w, load_c = best(lambda: load_config(path), args.repeat)  # noqa: B023
            del os.environ["OOTEST_NO_CACHE"]
            caches = iter([folder / f"cache{n}-{i}" for i in range(args.repeat)])
            write_w, write_c = best(lambda: load_writing_cache(path, caches), args.repeat)  # noqa: B023
            hit_w, hit_c = best(lambda: load_config(path), args.repeat)  # noqa: B023
            size = path.stat().st_size
            print(f"{n:>7,} entries ({size / 1e6:.1f} MB)")
            print(f"  baseline yaml.load(CSafeLoader): {base_w:6.2f} s wall {base_c:6.2f} s CPU")
            print(f"  ootest load_config             : {load_w:6.2f} s wall {load_c:6.2f} s CPU")
            print(
                f"  ratio load / baseline          : {load_w / base_w:6.2f} wall "
                f"{load_c / base_c:6.2f} CPU"
            )
            print(f"  load_config, writing the cache : {write_w:6.2f} s wall {write_c:6.2f} s CPU")
            print(f"  load_config, rerun (cache hit) : {hit_w:6.2f} s wall {hit_c:6.2f} s CPU")
            print(
                f"  ratio rerun / baseline         : {hit_w / base_w:6.2f} wall "
                f"{hit_c / base_c:6.2f} CPU"
            )
        cli_env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OOTEST_NO_CACHE": "1"}
        walls = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-m", "ootest.cli", "config", "validate", str(path)],
                capture_output=True,
                text=True,
                env=cli_env,
            )
            walls.append(time.perf_counter() - start)
            assert r.returncode == 0, r.stderr
        print(f"  ootest config validate (process): {min(walls):6.2f} s wall  {r.stdout.strip()}")

        os.environ["OOTEST_NO_CACHE"] = "1"
        print("hostile")
        tails = (("duplicate key", "  a0: dup"), ("merge key", "  m: {<<: {k: 1}, k: 2}"))
        for name, tail in tails:
            p = folder / "bomb.yaml"
            p.write_text(bomb(12, tail))
            took, message = error_time(p)
            print(f"  alias bomb, 12 levels, {name} ({p.stat().st_size} bytes): {took:.3f} s")
            print(f"    {message}")
        p = folder / "glob.yaml"
        p.write_text("test_suite_config:\n  files:\n    - path: /**/*.py\n")
        took, message = error_time(p)
        print(f"  path: /**/*.py: {took:.3f} s\n    {message}")
        p.write_text("test_suite_config:\n  files:\n    - path: ${ROOT}/**/*.py\n")
        took, message = error_time(p, env={"ROOT": "/"})
        print(f"  path: ${{ROOT}}/**/*.py, ROOT=/: {took:.3f} s\n    {message}")
        pattern = NamePattern.parse("re:(a+)+$")
        long_name = Variant(file="t.py", cls="TestX", method="test_" + "a" * 10_000 + "b")
        took, _ = best(lambda: pattern.matches(long_name), 1)
        print(f"  re:(a+)+$ against a 10,005-character name (ootest): {took * 1e3:.2f} ms")
        took, _ = best(lambda: re.compile("(a+)+$").search("a" * 22 + "b"), 1)
        print(f"  (a+)+$ against 'a' * 22 + 'b' (Python's re, contrast): {took:.2f} s")


if __name__ == "__main__":
    main()
