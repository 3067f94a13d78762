"""pytest's terminal summary under the ootest plugin (Note [Linear terminal summary]):
the same text as pytest's own, teardown sections under the test they belong to.
The cost at scale is measured by bench/summary_cost.py."""

from __future__ import annotations

import re

import pytest

TESTS = """
import pytest

@pytest.fixture
def noisy(request):
    yield
    print(f"teardown of {request.node.name}")

@pytest.mark.parametrize("i", range(4))
def test_fails(noisy, i):
    assert i < 0

def test_passes(noisy):
    pass
"""


def _summary(text: str) -> str:
    return re.sub(r"in [\d.]+s", "", text.split("= FAILURES =", 1)[-1])


def test_the_summary_is_pytests_own_with_teardowns_in_place(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_many=TESTS)
    ours = pytester.runpytest("--ootest-results", "r.jsonl", "-rA", "-p", "no:cacheprovider")
    ours.assert_outcomes(passed=1, failed=4)
    plain = pytester.runpytest("--ootest-results", "r2.jsonl", "-rA", "-p", "no:cacheprovider",
                               "-p", "no:ootest-summary")  # fmt: skip
    text = ours.stdout.str()
    assert _summary(text) == _summary(plain.stdout.str())
    for i in range(4):  # each failure, then its own teardown section
        block = text.split(f"test_fails[{i}] _")[1].split("_ test_")[0]
        assert f"teardown of test_fails[{i}]" in block, block
        assert "teardown of test_fails[" + str((i + 1) % 4) not in block
    assert "teardown of test_passes" in text.split("= PASSES =")[1]
