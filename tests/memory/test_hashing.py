"""Fingerprints are stable across processes (Note [Stable fingerprints])."""

from __future__ import annotations

import sys

from ootest.memory._hashing import canon, describe, digest
from tests.conftest import run

PROGRAM = """
import functools, json, unittest
from ootest.memory._hashing import canon, digest


class Slots:
    __slots__ = ("decorators", "dtypes", "active_if")

    def __init__(self):
        self.decorators = [unittest.skip("not on this device"), unittest.expectedFailure]
        self.dtypes = {"float32", "int64", "bfloat16", "complex64"}
        self.active_if = True


class Entry:
    def __init__(self):
        self.name = "add"
        self.sample = functools.partial(lambda op, n=3: n, n=4)
        self.skips = (Slots(),)
        self.attrs = {frozenset({"b", "a"}): 1.5, "k": [None, 2j]}
        self.me = self  # a cycle
        self._private = object()


print(digest(canon(Entry())))
print(json.dumps(canon(Entry()), sort_keys=True))
"""


def test_the_same_object_graph_has_one_fingerprint_in_every_process() -> None:
    outs = set()
    for seed in ("0", "1", "12345"):
        r = run([sys.executable, "-c", PROGRAM], env={"PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        outs.add(r.stdout)
    assert len(outs) == 1
    text = outs.pop()
    assert "0x" not in text  # no memory address
    assert "not on this device" in text  # the skip reason is part of it


def test_describe_names_decorators_with_their_reasons() -> None:
    import unittest

    assert describe(unittest.skip("flaky")) == "skip.<locals>.decorator('flaky')"
    assert describe(unittest.expectedFailure) == "expectedFailure"


def test_changing_one_attribute_changes_the_fingerprint() -> None:
    class E:
        def __init__(self, n: int) -> None:
            self.n = n

    assert digest(canon(E(1))) == digest(canon(E(1)))
    assert digest(canon(E(1))) != digest(canon(E(2)))


def test_diff_summary_counts_a_change_no_component_explains() -> None:
    # A digest that changed with no component to name (reason "fingerprint") made
    # the summary raise ValueError: the kind was missing from its sort order.
    from ootest.memory._diff import IndexDiff, Modified

    d = IndexDiff(
        added=["t.py::T::test_new"],
        modified=[
            Modified("t.py::T::test_a", ("fingerprint",)),
            Modified("t.py::T::test_b", ("fingerprint",)),
            Modified("t.py::T::test_c", ("body",)),
        ],
        old_total=3,
        new_total=4,
    )
    assert d.summary() == "4 of 4 variants changed: 2 fingerprint, 1 body, 1 added"
