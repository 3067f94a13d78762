"""What a failing test costs to report (Note [The cost of a failing test]): pytest
parses a source file once per process, not once per failure, and ``inspect`` maps
frozen modules' frames without scanning ``sys.modules``. bench/report_cost.py
measures the time on real upstream tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ootest.plugin.reportcost import ParsedSources

HELPER = """
WHOLE_FILE = True

def check(i):
    # a statement over several lines, as pytest shows it
    assert (
        i < 0
    ), f"value {i}"
"""

TESTS = """
import ast, atexit, os
import pytest
from helper import check

PARSED = []
_parse = ast.parse

def counting_parse(source, filename="<unknown>", *args, **kwargs):
    # pytest's traceback formatter parsing a whole file (not a statement of it)
    if filename == "source" and ("WHOLE_FILE" in source or "import ast, atexit" in source):
        PARSED.append(1)
    return _parse(source, filename, *args, **kwargs)

ast.parse = counting_parse
atexit.register(lambda: open(os.environ["PARSES"], "w").write(str(len(PARSED))))

@pytest.mark.parametrize("i", range(30))
def test_fails(i):
    check(i)
"""


def _parses(pytester: pytest.Pytester, fast: str) -> tuple[int, str]:
    pytester.makepyfile(helper=HELPER, test_many=TESTS)
    out = pytester.path / f"parses-{fast}"
    os.environ["PARSES"] = str(out)
    os.environ["OOTEST_FAST_REPORTS"] = fast
    try:
        res = pytester.runpytest_subprocess(
            "--ootest-results", f"r{fast}.jsonl", "-p", "no:cacheprovider", "-q"
        )
    finally:
        del os.environ["PARSES"], os.environ["OOTEST_FAST_REPORTS"]
    res.assert_outcomes(failed=30)
    return int(out.read_text()), res.stdout.str()


def test_a_source_file_is_parsed_once_per_process_not_once_per_failure(
    pytester: pytest.Pytester,
) -> None:
    slow, slow_text = _parses(pytester, "0")
    fast, fast_text = _parses(pytester, "1")
    assert slow >= 60  # two files (the test's, the helper's) for each of 30 failures
    assert fast <= 2, fast
    # the same report, the statement over several lines included
    strip = lambda t: t.rsplit("=", 1)[0].split("= FAILURES =")[-1]  # noqa: E731
    assert strip(fast_text) == strip(slow_text)
    assert "i < 0" in fast_text and '), f"value {i}"' in fast_text


def test_the_parsed_sources_are_bounded_and_follow_the_files(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        f = tmp_path / f"m{i}.py"
        f.write_text("x = 1\n" * 100)  # 600 bytes
        files.append(f)
    cache = ParsedSources(max_files=3, max_bytes=1500)
    for i, f in enumerate(files):
        cache[f] = f"node{i}"
    assert len(cache) == 2  # 1,500 bytes hold two of them: the oldest went first
    assert cache.get(files[0]) is None and cache.get(files[3]) == "node3"
    files[3].write_text("y = 2\n" * 100)  # changed on disk: parsed again
    os.utime(files[3], ns=(1, 1))
    assert cache.get(files[3]) is None
    cache[tmp_path / "missing.py"] = "node"  # not a file: not kept
    cache["<string>"] = "node"
    assert len(cache) == 1


PROBE = """
import inspect
frames = [f for f in inspect.stack(0) if f.filename.startswith("<frozen ")]
assert frames, "no frozen frame: not started by runpy"
before = inspect.getmodule(frames[0].frame, frames[0].filename)
from ootest.plugin.reportcost import map_frozen_frames
added = map_frozen_frames()
after = inspect.getmodule(frames[0].frame, frames[0].filename)
print(frames[0].filename, before, after.__name__, added, map_frozen_frames())
"""


def test_frozen_frames_map_to_their_module(tmp_path: Path) -> None:
    # python -m runs the module through runpy, a frozen module, as pytest runs
    # under ``python -m pytest`` and ootest's fork server
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-m", "probe"], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    name, rest = out.stdout.split(">", 1)
    before, after, added, again = rest.split()
    assert name == "<frozen runpy" and before == "None" and after == "runpy"
    assert int(added) > 0 and again == "0"  # once is enough
