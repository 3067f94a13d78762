from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ootest.errors import UserError
from ootest.opmap.ingest import ingest_files, ingest_records, merge_indexes
from ootest.opmap.store import OpStore

from .conftest import PROV, SUITE, A, B, C, D, dump, ops, prov, stop, write_capture


def ids(res: Any) -> list[str]:
    return [h.variant_id for h in res.variants]


def test_tests_for_overload_packet_and_spellings(make_index: Any) -> None:
    with OpStore.open(make_index(SUITE)) as s:
        assert ids(s.tests_for("aten::add.Tensor")) == [A, B]
        assert ids(s.tests_for("aten.add.Tensor")) == [A, B]
        assert ids(s.tests_for("add")) == [A, B]
        assert ids(s.tests_for("mul")) == [D, B]  # sorted by variant ID
        # packet: every overload; overload: exactly it (the default one too)
        assert s.tests_for("cumsum").ops == ("aten::cumsum", "aten::cumsum.out")
        assert ids(s.tests_for("aten::cumsum.default")) == [C]
        assert s.tests_for("aten::cumsum.default").total == 1  # eager and compiled: one variant
        res = s.tests_for("aten::cumsum")
        assert (res.total, res.variants[0].modes, res.variants[0].calls) == (
            1,
            ("eager", "compiled"),
            7,  # 1 + 2 eager, 4 compiled
        )
        assert s.tests_for("empty_strided").total == 4
        assert ids(s.tests_for("empty_strided", limit=2)) == [A, B]  # first captured


def test_tests_for_says_device_dependence(make_index: Any) -> None:
    with OpStore.open(make_index(SUITE)) as s:
        (hit,) = s.tests_for("_scaled_mm").variants
    assert hit.flags.uncertain and hit.flags.partial
    assert hit.flags.note() == (
        "may differ per device: run it (the test branches on the device type); "
        "op set may be incomplete (no capture ran it to a pass)"
    )


def test_unknown_op_is_a_user_error_with_suggestions(make_index: Any) -> None:
    db = make_index(SUITE)
    with OpStore.open(db) as s, pytest.raises(UserError) as e:
        s.tests_for("cumsun")
    assert str(e.value) == (
        f"op 'cumsun': expected an op the op map recorded (7 overloads in {db}); found no "
        "packet aten::cumsun; similar: aten::cumsum. No captured variant calls it "
        "(or the capture predates it: capture again)"
    )


def test_for_test_exact_prefix_substring(make_index: Any) -> None:
    with OpStore.open(make_index(SUITE)) as s:
        res = s.for_test(C)
        assert [(o.op, o.mode, o.calls) for o in res.ops] == [
            ("aten::cumsum", "eager", 1),
            ("aten::cumsum", "compiled", 4),
            ("aten::cumsum.out", "eager", 2),
            ("aten::empty_strided", "eager", 1),
        ]
        assert [(e.outcome, e.n_ops) for e in res.captures] == [("passed", 3)]
        assert s.for_test("test/test_matmul.py::").variant_id == D  # unique prefix
        assert s.for_test("op=cumsum").variant_id == C  # unique substring
        end = s.for_test(D).captures[0]
        assert (end.outcome, end.stopped_on, end.error) == (
            "failed",
            "aten::_scaled_mm",
            "NotImplementedError",
        )
        with pytest.raises(UserError) as e:
            s.for_test("test/test_ops.py::TestCommon::test_out[op=")
    assert str(e.value) == (
        "variant 'test/test_ops.py::TestCommon::test_out[op=': expected one variant; the "
        f"prefix matches several:\n  {A}\n  {C}\n  {B}\nPass more of the ID"
    )


def test_lines_of_a_variant_add_up_even_when_not_consecutive(make_index: Any) -> None:
    db = make_index(
        [
            PROV,
            ops(A, {"aten::add.Tensor": 1}),
            ops(B, {"aten::mul.Tensor": 1}),
            ops(A, {"aten::add.Tensor": 2, "aten::sub.Tensor": 1}),
            stop(A),
            stop(B),
        ]
    )
    rows = dump(db)
    assert rows["edges"] == [
        (A, "aten::add.Tensor", 0, 3),
        (A, "aten::sub.Tensor", 0, 1),
        (B, "aten::mul.Tensor", 0, 1),
    ]
    # the op set of A counts add and sub once each
    assert [(v, n) for v, _, _, n, *_ in rows["variant_capture"]] == [(A, 2), (B, 1)]


def test_truncated_last_line_is_ignored_and_reported(tmp_path: Path) -> None:
    cap = write_capture(
        tmp_path / "c.jsonl", [PROV, ops(A, {"aten::add.Tensor": 1})], '{"kind": "op'
    )
    with OpStore.open(tmp_path / "x.db", create=True) as s:
        rep = ingest_files(s, [cap])
        assert (rep.truncated, rep.records, rep.edges) == ([str(cap)], 2, 1)


def test_damaged_middle_line_is_an_error(tmp_path: Path) -> None:
    cap = write_capture(tmp_path / "c.jsonl", [PROV], '{"kind": "ops", \n' + '{"kind":"stop"}\n')
    with OpStore.open(tmp_path / "x.db", create=True) as s, pytest.raises(UserError) as e:
        ingest_files(s, [cap])
    assert str(e.value).startswith(
        f'{cap}:2: expected a JSON object (a capture record); found \'{{"kind": "ops",\''
    )
    assert str(e.value).endswith(
        "only the last line of a capture may be cut short, so the file is damaged: capture again"
    )


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (
            [ops(A, {"aten::add.Tensor": 1})],
            "test:1: expected a provenance record first (it says which torch and device the "
            "ops come from); found a 'ops' record. Was the capture written by "
            "`ootest ops capture`?",
        ),
        (
            [PROV, {"kind": "opz", "variant_id": A}],
            "test:2: kind: expected one of provenance, ops, stop, device_branch, dtypes, example; "
            "found 'opz'; "
            "was the capture written by a newer ootest? Upgrade ootest to read it",
        ),
        (
            [PROV, ops(A, {"aten::add.Tensor": -1})],
            "test:2: ops: expected an object of op name -> call count "
            '(e.g. {"aten::add.Tensor": 3}, counts below 2**63); found '
            "'{\"aten::add.Tensor\": -1}'",
        ),
        (
            [PROV, ops(A, {"aten::add.Tensor": 1}, mode="lazy")],
            "test:2: mode: expected 'eager' or 'compiled'; found 'lazy'",
        ),
        (
            [PROV, {"kind": "stop", "outcome": "passed"}],
            "test:2: variant_id: expected a variant ID string; found None",
        ),
        (
            [PROV, {"kind": "dtypes", "variant_id": A, "op": "aten::mm", "dtypes": "int64"}],
            'test:2: dtypes: expected a list of dtype names (e.g. ["int64"]); found \'"int64"\'',
        ),
        (
            [PROV, {"kind": "dtypes", "variant_id": A, "dtypes": ["int64"]}],
            "test:2: op: expected an op name string; found None",
        ),
        (
            [PROV, {"kind": "example", "variant_id": A, "op": "aten::mm", "call": [1, 2]}],
            "test:2: call: expected the call as JSON text (at most 1048576 characters, "
            "Note [Call examples]); found '[1, 2]'",
        ),
    ],
)
def test_bad_records_are_user_errors(tmp_path: Path, records: list[Any], message: str) -> None:
    with OpStore.open(tmp_path / "x.db", create=True) as s, pytest.raises(UserError) as e:
        ingest_records(s, records, source="test")
    assert str(e.value) == message
    with OpStore.open(tmp_path / "x.db") as s:  # the failed ingest left nothing behind
        assert s.stats().variants == 0


def test_reingesting_a_capture_changes_nothing(make_index: Any, tmp_path: Path) -> None:
    db = make_index(SUITE)
    before = dump(db)
    with OpStore.open(db) as s:
        ingest_records(s, SUITE, source="again")
        assert len(s.captures()) == 1
    assert dump(db) == before


def test_ops_differing_between_captures_make_a_variant_vary(make_index: Any) -> None:
    db = make_index(
        [
            PROV,
            ops(A, {"aten::add.Tensor": 1}),
            stop(A),
            ops(B, {"aten::mul.Tensor": 1}),
            stop(B),
            prov(device="other", time=2.0),
            ops(A, {"aten::add.Tensor": 5, "aten::_to_copy": 1}),  # A calls one more op there
            stop(A),
            ops(B, {"aten::mul.Tensor": 7}),  # same set, other counts: B does not vary
            stop(B),
        ]
    )
    rows = dump(db)
    assert [(v, varies, why) for v, _, _, _, varies, _, why in rows["variants"]] == [
        (A, 1, "its ops differ between captures 1, 2"),
        (B, 0, None),
    ]
    # edges are the union, with the larger count
    assert rows["edges"] == [
        (A, "aten::_to_copy", 0, 1),
        (A, "aten::add.Tensor", 0, 5),
        (B, "aten::mul.Tensor", 0, 7),
    ]
    with OpStore.open(db) as s:
        (hit,) = s.tests_for("_to_copy").variants
        assert (
            hit.flags.note()
            == "may differ per device: run it (its ops differ between captures 1, 2)"
        )


def test_merging_shards_gives_the_rows_of_one_capture(make_index: Any, tmp_path: Path) -> None:
    body = SUITE[1:]
    shard1 = [r for r in body if r["variant_id"] in (A, B)]
    shard2 = [r for r in body if r["variant_id"] in (C, D)]
    whole = make_index([PROV, *shard1, *shard2], "whole.db")
    a = make_index([PROV, *shard1], "a.db")
    b = make_index([PROV, *shard2], "b.db")
    merged = tmp_path / "merged.db"
    with OpStore.open(merged, create=True) as s:
        rep = merge_indexes(s, [a, b])
    assert rep.captures == [1] and rep.edges == 13
    assert dump(merged) == dump(whole)
    # shards with their own provenance (a time each): the same rows, one capture per shard
    b2 = make_index([prov(time=5.0), *shard2], "b2.db")
    merged2 = tmp_path / "merged2.db"
    with OpStore.open(merged2, create=True) as s:
        merge_indexes(s, [a, b2])
        assert len(s.captures()) == 2
    left, right = dump(merged2), dump(whole)
    for key in ("variants", "ops", "edges", "postings"):
        assert left[key] == right[key], key


def test_merge_into_an_index_with_other_ids(make_index: Any, tmp_path: Path) -> None:
    # the target already holds other variants and ops: ids must be translated
    target = make_index([prov(time=9.0), ops(D, {"aten::zeros": 1}), stop(D)], "t.db")
    src = make_index(SUITE, "s.db")
    with OpStore.open(target) as s:
        merge_indexes(s, [src])
        assert ids(s.tests_for("zeros")) == [D]
        assert ids(s.tests_for("add")) == [A, B]
        assert ids(s.tests_for("empty_strided")) == [D, A, C, B]
        assert s.for_test(D).flags.varies  # its ops differ between the two captures


def test_opening_errors(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    with pytest.raises(UserError) as e:
        OpStore.open(missing)
    assert str(e.value) == (
        f"{missing}: expected an op map index; found no file there. Build one with "
        f"`ootest ops ingest CAPTURE.jsonl --db {missing}` (or pass --db PATH)"
    )
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite " * 100)
    with pytest.raises(UserError) as e:
        OpStore.open(junk)
    assert str(e.value) == (
        f"{junk}: expected an op map index (SQLite); cannot read it (file is not a database); "
        "pass the right --db or rebuild it with `ootest ops ingest`"
    )
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(UserError) as e:
        OpStore.open(other)
    assert str(e.value) == (
        f"{other}: expected an op map index; found a database without one. Pass the right "
        "--db, or build an index with `ootest ops ingest`"
    )


def test_schema_version_mismatch(make_index: Any) -> None:
    db = make_index(SUITE)
    c = sqlite3.connect(db)
    c.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
    c.commit()
    c.close()
    with pytest.raises(UserError) as e:
        OpStore.open(db)
    assert str(e.value) == (
        f"{db}: expected op map schema version 4; found 0. Rebuild it with this ootest: "
        "`ootest ops ingest CAPTURE.jsonl --db NEW.db`"
    )


def test_stats(make_index: Any) -> None:
    with OpStore.open(make_index(SUITE)) as s:
        st = s.stats(top=3)
    assert (st.variants, st.ops, st.edges, st.device_dependent, st.partial) == (4, 7, 13, 1, 1)
    assert st.top_ops == [
        ("aten::empty_strided", 4),
        ("aten::add.Tensor", 2),
        ("aten::mul.Tensor", 2),
    ]


# ------------------------------------------------------------ call dtypes (schema 2)
def sigs(vid: str, op: str, *dtypes: str) -> dict[str, Any]:
    return {"kind": "dtypes", "variant_id": vid, "op": op, "dtypes": list(dtypes)}


INT_MM = "test/test_basics.py::TestBasics::test_matmul_int[dtype=float32]"
SIGNED = [
    PROV,
    ops(INT_MM, {"aten::mm": 1, "aten::fill_.Scalar": 1}),
    sigs(INT_MM, "aten::mm", "int64"),
    sigs(INT_MM, "aten::fill_.Scalar", "int64"),
    sigs(INT_MM, "aten::mm", "int64", "float32"),  # another signature of the same op
    stop(INT_MM),
]


def test_call_dtypes_are_stored_per_variant_and_op(make_index: Any) -> None:
    with OpStore.open(make_index(SIGNED)) as s:
        assert s.call_dtypes() == {
            INT_MM: (
                ("aten::fill_.Scalar", "int64"),
                ("aten::mm", "float32"),
                ("aten::mm", "int64"),
            )
        }
        assert s.call_dtypes([A]) == {}
        sig_rows = sorted(s.connection.execute("SELECT dtypes FROM sig"))
    assert sig_rows == [("float32,int64",), ("int64",)]


def test_reingesting_signatures_changes_nothing(make_index: Any, tmp_path: Path) -> None:
    db = make_index(SIGNED)
    with OpStore.open(db) as s:
        before = s.call_dtypes()
        ingest_records(s, SIGNED, source="again")
        assert s.call_dtypes() == before
        assert s.connection.execute("SELECT count(*) FROM call_sig").fetchone() == (3,)


#: the tables each schema added (Note [Op map schema] and after)
_ADDED = {2: ("call_sig", "sig"), 3: ("call_example", "example")}


def _downgrade(db: Path, schema: int) -> None:
    """Make ``db`` an index of an older ``schema``: the later tables dropped."""
    c = sqlite3.connect(db)
    for version, tables in _ADDED.items():
        if version > schema:
            for t in tables:
                c.execute(f"DROP TABLE {t}")
    if schema < 4:  # schema 4 added variant_capture.code
        c.execute("ALTER TABLE variant_capture DROP COLUMN code")
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(schema),))
    c.commit()
    c.close()


def test_a_schema_1_index_is_upgraded_in_place(make_index: Any) -> None:
    db = make_index(SUITE)
    before = dump(db)
    _downgrade(db, 1)
    with OpStore.open(db) as s:
        assert s.call_dtypes() == {}  # nothing recorded yet: selection falls back
        assert s.connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            "4",
        )
        ingest_records(s, [prov(time=7.0), *SIGNED[1:]], source="new")
        assert s.call_dtypes()[INT_MM][1] == ("aten::mm", "float32")
    after = dump(db)
    for key in ("ops", "edges", "variant_capture", "postings"):  # no data lost
        assert set(before[key]) <= set(after[key]), key
    assert set(before["variants"]) <= set(after["variants"])


def test_merge_keeps_signatures(make_index: Any, tmp_path: Path) -> None:
    target = make_index(SUITE, "t.db")
    src = make_index([prov(time=3.0), *SIGNED[1:]], "s.db")
    other = make_index([prov(time=4.0), sigs(INT_MM, "aten::mm", "bool"), stop(INT_MM)], "o.db")
    with OpStore.open(target) as s:
        merge_indexes(s, [src, other])
        got = s.call_dtypes()
        assert s.call_dtypes([INT_MM]) == got  # looked up by ID: 1 of 5 variants
        assert s.call_dtypes([A]) == {}
    assert got == {
        INT_MM: (
            ("aten::fill_.Scalar", "int64"),
            ("aten::mm", "bool"),
            ("aten::mm", "float32"),
            ("aten::mm", "int64"),
        )
    }


# ------------------------------------------------------------ call examples (schema 3)
def example(vid: str, op: str, call: str) -> dict[str, Any]:
    return {"kind": "example", "variant_id": vid, "op": op, "call": call}


SMALL = '{"args":[{"T":"float32","dev":true,"shape":[2],"v":[1.0,2.0]}],"kwargs":{}}'
BIG = '{"args":[{"T":"float32","dev":true,"shape":[300]}],"kwargs":{}}'
EXAMPLES = [
    PROV,
    ops(A, {"aten::exp": 2}),
    example(A, "aten::exp", SMALL),
    example(A, "aten::exp", BIG),
    stop(A),
    ops(B, {"aten::exp": 1}),
    example(B, "aten.exp.default", SMALL),  # the same call, spelled another way
    stop(B),
]


def test_call_examples_are_stored_once_and_per_variant(make_index: Any) -> None:
    from ootest.device.calls import example_key

    small, big = example_key("aten::exp", SMALL), example_key("aten::exp", BIG)
    with OpStore.open(make_index(EXAMPLES)) as s:
        assert s.examples() == sorted([(small, "aten::exp", SMALL), (big, "aten::exp", BIG)])
        assert s.example_keys() == {A: tuple(sorted((small, big))), B: (small,)}
        assert s.example_keys([B]) == {B: (small,)}
        ingest_records(s, [prov(time=9.0), *EXAMPLES[1:]], source="again")  # a second capture
        assert len(s.examples()) == 2
        assert s.connection.execute("SELECT count(*) FROM call_example").fetchone() == (3,)


def test_merge_keeps_call_examples(make_index: Any) -> None:
    target = make_index(SUITE, "t.db")
    src = make_index(EXAMPLES, "s.db")
    with OpStore.open(src) as s:
        want = (s.examples(), s.example_keys())
    with OpStore.open(target) as s:
        merge_indexes(s, [src])
        assert (s.examples(), s.example_keys()) == want


def test_a_schema_2_index_is_upgraded_in_place(make_index: Any) -> None:
    db = make_index(SIGNED)
    _downgrade(db, 2)
    with OpStore.open(db) as s:
        assert s.examples() == [] and s.example_keys() == {}
        assert s.call_dtypes()[INT_MM]  # what schema 2 held is still there
        ingest_records(s, [prov(time=8.0), *EXAMPLES[1:]], source="new")
        assert set(s.example_keys()) == {A, B}


def test_an_old_index_this_process_may_not_write_is_read_as_it_is(
    make_index: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib
    import os

    db = make_index(SUITE)
    _downgrade(db, 1)
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    # as a user without write access (root may write anything: the check is faked)
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    with OpStore.open(db) as s:
        assert s.readonly
        assert s.call_dtypes() == {} and s.examples() == []
        assert s.tests_for("aten::add").variants  # the rest answers as before
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    monkeypatch.undo()
    # a schema 2 index keeps what it has (a temp table would hide the real one)
    db2 = make_index(SIGNED, "two.db")
    _downgrade(db2, 2)
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    with OpStore.open(db2) as s:
        assert s.readonly and s.call_dtypes()[INT_MM] and s.examples() == []
    monkeypatch.undo()
    with OpStore.open(db) as s:  # writable: upgraded in place
        assert not s.readonly
        assert s.connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            "4",
        )


def test_for_test_shows_the_dtypes_each_op_saw_and_the_calls_written_down(
    make_index: Any,
) -> None:
    with OpStore.open(make_index([*SIGNED, *EXAMPLES[1:]])) as s:
        mm = {o.op: o for o in s.for_test(INT_MM).ops}
        assert mm["aten::mm"].dtypes == ("float32", "int64")
        assert mm["aten::fill_.Scalar"].dtypes == ("int64",) and mm["aten::mm"].examples == 0
        exp = {o.op: o for o in s.for_test(A).ops}["aten::exp"]
        assert (exp.dtypes, exp.examples) == ((), 2)


# ------------------------------------------------------------ which code (schema 4)
def _why(s: OpStore, vid: str, code: dict[str, str], changed: tuple[str, ...] = ()) -> Any:
    ((_, _, uncertain, *_),) = s.evidence([vid], code, changed)
    return uncertain


def test_each_record_says_which_code_it_ran(make_index: Any, tmp_path: Path) -> None:
    """Note [Evidence of which code]: evidence of another fingerprint is stale; of
    unknown origin, stale only for a variant whose code changed."""
    db = tmp_path / "ops.db"
    with OpStore.open(db, create=True) as s:
        ingest_records(s, SUITE[:5], code={A: "fp-a-old"})  # B: no code (unknown)
        assert [e.code for e in s.for_test(A).captures] == ["fp-a-old"]
        assert _why(s, A, {A: "fp-a-old"}, (A,)) is None  # of its code now
        assert _why(s, A, {A: "fp-a-new"}) == (
            "captured from other code (fingerprint fp-a-old, now fp-a-new): stale, run it "
            "(capture it again: ootest ops capture --memory)"
        )
        assert _why(s, B, {B: "fp-b"}) is None  # unknown origin, code unchanged: as before
        assert _why(s, B, {B: "fp-b"}, (B,)) == (
            "captured from other code or of unknown origin (the op map records no "
            "fingerprint for it) and the test changed since: stale, run it"
        )
        # a fresh capture of the new code replaces what the index held of it
        ingest_records(
            s, [prov(time=9.0), ops(A, {"aten::mm": 1}), stop(A)], code={A: "fp-a-new"},
            replace=True,
        )  # fmt: skip
        assert {o.op for o in s.for_test(A).ops} == {"aten::mm"}
        assert [e.code for e in s.for_test(A).captures] == ["fp-a-new"]
        assert _why(s, A, {A: "fp-a-new"}, (A,)) is None
        assert ids(s.tests_for("aten::add")) == [B]  # A's posting lists follow
    merged = tmp_path / "merged.db"
    with OpStore.open(merged, create=True) as s:
        merge_indexes(s, [db])
        assert [e.code for e in s.for_test(A).captures] == ["fp-a-new"]


def test_a_schema_3_index_opens_its_records_of_unknown_origin(make_index: Any) -> None:
    db = make_index(SUITE)
    _downgrade(db, 3)
    with OpStore.open(db) as s:  # upgraded in place: the column added, empty
        assert s.connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
            "4",
        )
        assert [e.code for e in s.for_test(A).captures] == [None]
        assert _why(s, A, {A: "fp"}) is None
        assert _why(s, A, {A: "fp"}, (A,)).endswith("the test changed since: stale, run it")
