"""The static part: facts read with ``ast`` and the fingerprint components built on them."""

from __future__ import annotations

from ootest.memory._fingerprint import reasons, template_components
from ootest.memory._static import Decorator, dump_facts, load_facts, parse_file

SOURCE = '''
"""Module docstring."""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import (
    TestCase, instantiate_parametrized_tests, parametrize,
)

# a module comment
_OPS = [op for op in op_db if op.name in _NAMES]
_NAMES = ("add", "mul")


def _inner(x):
    return x


def _outer(x):
    return _inner(x)


def _unused():
    return 0


class Base(TestCase):
    exact_dtype = True

    def setUp(self):
        super().setUp()

    def _check(self, x):
        return _inner(x)


class TestThing(Base):
    """Class docstring."""

    @ops(_OPS, dtypes=OpDTypes.supported)
    @skipIfTorchDynamo("flaky")
    def test_op(self, device, dtype, op):
        """Runs every op."""
        # inside the test
        self._check(_outer(op))

    def test_plain(self, device):
        pass


class TestParam(TestCase):
    @parametrize("n", [1, 2])
    def test_n(self, n):
        pass


def test_function():
    pass


instantiate_device_type_tests(TestThing, globals(), only_for="cpu", allow_xpu=True)
instantiate_parametrized_tests(TestParam)
'''


def facts(text: str = SOURCE):  # type: ignore[no-untyped-def]
    return parse_file("test/test_thing.py", text.encode())


def test_classes_tests_decorators_and_forms() -> None:
    f = facts()
    assert [(k.name, k.form, [m.name for m in k.methods]) for k in f.classes] == [
        ("Base", "plain", []),
        ("TestThing", "device", ["test_op", "test_plain"]),
        ("TestParam", "parametrized", ["test_n"]),
    ]
    thing = f.klass("TestThing")
    assert thing is not None
    assert thing.bases == ("Base",)
    assert [(i.call, i.args) for i in thing.instantiations] == [
        ("instantiate_device_type_tests", "TestThing, globals(), only_for='cpu', allow_xpu=True")
    ]
    op = thing.methods[0]
    assert op.decorators == (
        Decorator("ops", "(_OPS, dtypes=OpDTypes.supported)", ("OpDTypes", "_OPS")),
        Decorator("skipIfTorchDynamo", "('flaky')", ()),
    )
    assert str(op.decorators[0]) == "@ops(_OPS, dtypes=OpDTypes.supported)"
    assert (op.doc, op.comments) == ("Runs every op.", "inside the test")
    assert (f.doc, f.comments) == ("Module docstring.", "a module comment")
    assert [fn.name for fn in f.functions] == ["test_function"]
    assert [s.name for s in f.symbols if s.kind == "function"] == [
        "_inner",
        "_outer",
        "_unused",
        "test_function",
    ]


def test_facts_survive_the_json_round_trip() -> None:
    f = facts()
    assert load_facts(dump_facts(f)) == f


def test_components_reach_helpers_transitively_through_functions_and_self() -> None:
    comps = template_components(facts(), "TestThing", "test_op")
    assert sorted(comps) == [
        "body",
        "decorator",
        "helper:Base._check",
        "helper:Base.exact_dtype",
        "helper:Base.setUp",
        "helper:_NAMES",
        "helper:_OPS",
        "helper:_inner",
        "helper:_outer",
        "import",
    ]


def test_formatting_comments_and_docstrings_do_not_count() -> None:
    before = template_components(facts(), "TestThing", "test_op")
    reformatted = SOURCE.replace(
        '        """Runs every op."""\n        # inside the test\n        self._check(_outer(op))',
        "        self._check(\n            _outer(op)  # another comment\n        )",
    )
    assert reformatted != SOURCE
    assert template_components(facts(reformatted), "TestThing", "test_op") == before


def test_each_change_names_its_component() -> None:
    before = template_components(facts(), "TestThing", "test_op")
    cases = {
        "    return x\n": ("    return x + 0\n", ["helper:_inner"]),
        '@skipIfTorchDynamo("flaky")': ('@skipIfTorchDynamo("slow")', ["decorator"]),
        "self._check(_outer(op))": ("self._check(_outer(op), 1)", ["body"]),
        "import torch\n": ("import torch\nimport math\n", ["import"]),
        'only_for="cpu"': ('only_for="cuda"', ["decorator"]),
        "exact_dtype = True": ("exact_dtype = False", ["helper:Base.exact_dtype"]),
    }
    for old, (new, expected) in cases.items():
        changed = template_components(facts(SOURCE.replace(old, new, 1)), "TestThing", "test_op")
        assert reasons(before, changed) == expected, old


def test_an_unused_helper_is_not_a_component() -> None:
    before = template_components(facts(), "TestThing", "test_op")
    after = template_components(
        facts(SOURCE.replace("def _unused():\n    return 0", "def _unused():\n    return 1")),
        "TestThing",
        "test_op",
    )
    assert before == after


def test_inherited_and_unresolved_methods() -> None:
    src = SOURCE + "\n\nclass TestChild(TestThing):\n    pass\n"
    f = facts(src)
    assert (
        template_components(f, "TestChild", "test_plain")["body"]
        == (template_components(f, "TestThing", "test_plain")["body"])
    )
    assert template_components(f, "TestElsewhere", "test_x") == {
        "import": f.import_digest,
        "body": "unresolved",
    }


def test_a_file_that_does_not_parse_gets_an_error() -> None:
    f = parse_file("test/test_bad.py", b"def broken(:\n")
    assert f.error is not None and f.error.startswith("SyntaxError: ")
    assert f.classes == ()
