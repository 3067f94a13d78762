"""Note [Variant ID grammar]: every variant ID, used as a config name, selects
exactly its variant; what cannot be made exact is found and reported. No torch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ootest.config.names import NamePattern, Variant, inexact_ids
from ootest.plugin.variant import _short

DTYPES = ("float32", "float64", "int64", "bool", "complex64", "bfloat16")
HOSTILE = ["a,b", "a;b", "x]", "[y", "k=v", "=", "", " lead", "trail ", "\n::error::x",
           "\x1b[31mred", "'q'", '"dq"', "a" * 41, "a" * 45, "é ü", "re:.*", "(1, 2)",
           "[op=add,dtype=float32]", "\\x20", "a\tb"]  # fmt: skip


def _variant(params: dict[str, object], dtypes: tuple[str, ...] = (), op: str | None = None,
             op_name: str | None = None) -> Variant:  # fmt: skip
    return Variant(
        file="test/test_x.py",
        cls="TestX",
        method="test_y",
        op=op,
        op_name=op_name or op,
        dtypes=dtypes,
        params=tuple(sorted((k, _short(v)) for k, v in params.items())),
    )


def _selects(v: Variant, among: list[Variant]) -> list[Variant]:
    pat = NamePattern.parse(v.test_id)
    return [w for w in among if pat.matches(w)]


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.sampled_from(HOSTILE), st.text(max_size=60)), min_size=1, max_size=6
    ),
    dtypes=st.lists(st.sampled_from(DTYPES), min_size=0, max_size=3, unique=True),
)
def test_every_id_selects_exactly_its_variant_or_is_reported(
    values: list[str], dtypes: list[str]
) -> None:
    """Over generated hostile parametrize values (``, = [ ]`` spaces, quotes,
    control characters, long texts) and dtype tuples: an ID that inexact_ids does
    not report selects its own variant and no other; one it reports is a real
    collision (two values that read the same)."""
    group = [_variant({"shape": v, "mode": "fast"}, tuple(dtypes)) for v in values]
    bad = inexact_ids(group)
    for v in group:
        got = _selects(v, group)
        if v.test_id in bad:
            assert len(got) != 1 or got[0] is not v or bad[v.test_id].endswith("have this ID")
        else:
            assert got == [v], (v.test_id, [w.test_id for w in got])
    texts = [_short(x) for x in values]
    for v, t in zip(group, texts, strict=True):
        clash = texts.count(t) > 1
        assert (v.test_id in bad) == clash, (v.test_id, bad)


def test_hostile_values_round_trip_one_by_one() -> None:
    group = [_variant({"p": v}) for v in HOSTILE]
    bad = inexact_ids(group)
    # only 'a,b' and 'a;b' read the same after escaping
    assert bad == {"TestX::test_y[p=a;b]": "2 variants have this ID"}
    for v in group:
        if v.test_id not in bad:
            assert _selects(v, group) == [v], v.test_id
    assert _short("\n::error::x") == "\\x0a::error::x"  # no line of its own in a log
    assert _short(" lead") == "\\x20lead"
    assert _short("a" * 41) != _short("a" * 45)  # cut, with a digest of the whole
    assert len(_short("a" * 45)) == 39


def test_what_the_grammar_cannot_make_exact_is_reported() -> None:
    """Two lambdas are both ``<lambda>``; ``a,b`` and ``a;b`` read the same;
    ``dtype=float32`` is in a ``float32,float64`` tuple of the same test."""
    lam = [_variant({"f": lambda x: x}), _variant({"f": lambda y: y})]
    assert set(inexact_ids(lam).values()) == {"2 variants have this ID"}
    commas = [_variant({"s": "a,b"}), _variant({"s": "a;b"})]
    assert len(inexact_ids(commas)) == 1
    tuples = [_variant({}, ("float32",)), _variant({}, ("float32", "float64"))]
    assert list(inexact_ids(tuples)) == ["TestX::test_y[dtype=float32]"]
    assert _selects(tuples[1], tuples) == [tuples[1]]  # the tuple's own ID is exact


def test_op_filters_are_exact_for_op_variants_and_python_refs() -> None:
    """Note [Exact op filters]: the OpInfo ``norm`` beside ``norm.nuc``, and an op
    beside its Python reference (``_refs.X``, whose OpInfo name is ``X``), each have
    an ID that selects it alone; a generated config writes exactly these IDs."""
    group = [
        _variant({}, ("float32",), "norm"),
        _variant({}, ("float32",), "norm.nuc", "norm"),
        _variant({}, ("int64",), "nn.functional.hardtanh"),
        _variant({}, ("int64",), "_refs.nn.functional.hardtanh", "nn.functional.hardtanh"),
        _variant({}, ("float32",), "add"),
    ]
    assert inexact_ids(group) == {}
    for v in group:
        assert _selects(v, group) == [v], v.test_id
    assert group[3].test_id == "TestX::test_y[op=_refs.nn.functional.hardtanh,dtype=int64]"
    # a filter naming the family no longer reaches the Python reference or norm.nuc
    hard = NamePattern.parse("TestX::test_y[op=nn.functional.hardtanh]")
    assert [w.test_id for w in group if hard.matches(w)] == [group[2].test_id]
