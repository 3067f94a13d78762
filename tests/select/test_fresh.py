"""Fresh op evidence for an upgrade's delta (issue 34 item 1; Note [Fresh evidence
for the delta], Note [Evidence of which code]).

The team's op map is captured from the old version only, as a team has it. The
delta capture is a capturer that records what a capture of the *new* version
records for the variants it is asked for (the real one runs pytest on emu:full:
tests/e2e/test_fresh_e2e.py), so these tests need no torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.opmap.ingest import ingest_records
from ootest.opmap.store import OpStore
from ootest.select.fresh import capture_variants as _REAL
from tests.select.upgrade_trees import HEAD, V, build, capture, moves_version

FOO = "test/test_foo.py"
FOO_OLD = (
    HEAD
    + """

def _project(t):
    return torch._scaled_mm(t, t.t(), scale_a=torch.ones(()), scale_b=torch.ones(()))


class TestFoo(TestCase):
    @dtypes(torch.float32)
    def test_foo(self, device, dtype):
        self.assertEqual(_project(torch.ones(2, 2, device=device, dtype=dtype)).shape, (2, 2))

    @dtypes(torch.float32)
    def test_bar(self, device, dtype):
        self.assertEqual(torch.ones(2, device=device, dtype=dtype).sum().item(), 2)


instantiate_device_type_tests(TestFoo, globals())
"""
)
# upstream rewrites the helper: test_foo no longer calls _scaled_mm
FOO_NEW = FOO_OLD.replace(
    "    return torch._scaled_mm(t, t.t(), scale_a=torch.ones(()), scale_b=torch.ones(()))\n",
    "    return t @ t.t()\n",
)
SPEC = [V(FOO, "TestFoo", "test_foo", "float32"), V(FOO, "TestFoo", "test_bar", "float32")]
FOO_ID = f"{FOO}::TestFoo::test_foo[dtype=float32]"
BAR_ID = f"{FOO}::TestFoo::test_bar[dtype=float32]"
#: what each test calls on the device, per version
OLD_OPS = {"test_foo": {"aten::_scaled_mm": 1, "aten::ones": 3}, "test_bar": {"aten::ones": 1}}
NEW_OPS = {"test_foo": {"aten::mm": 1, "aten::ones": 1}, "test_bar": {"aten::ones": 1}}
SELECT = ["--supported", "sup.txt", "--dtypes", "float32", "--ops", "ops.db"]


def capturer(ops: Mapping[str, Mapping[str, int]], asked: list[list[str]]) -> Callable[..., None]:
    """A capture of the new version: each variant asked for calls its method's
    ``ops`` and passes; ``asked`` gets the variant IDs each capture ran."""

    def run(
        db: Path,
        files: Sequence[Path],
        only: Path,
        code: Mapping[str, str],
        *,
        memory: Path | None,
        device: str,
        timeout: float,
        say: Callable[[str], None],
    ) -> None:
        assert (
            device == "emu:full"
            and memory is not None
            and memory.name == "new.db"
            and all(f.is_file() for f in files)
        )
        vids = only.read_text().split()
        asked.append(vids)
        recs: list[dict[str, object]] = [
            {"kind": "provenance", "torch_version": "2.14.0", "torch_git": "def456",
             "device": "emu", "profile": "full", "ootest_version": "0.1.0", "time": 2.0}
        ]  # fmt: skip
        for vid in vids:
            method = vid.split("::")[2].partition("[")[0]
            calls = ops.get(method, {}) if "Plain" not in vid else {}
            if calls:
                recs.append({"kind": "ops", "variant_id": vid, "nodeid": vid, "mode": "eager",
                             "file": vid.partition("::")[0], "ops": dict(calls)})  # fmt: skip
            recs.append({"kind": "stop", "variant_id": vid, "op": None, "outcome": "passed",
                         "error": None})  # fmt: skip
        with OpStore.open(db, create=True) as s:
            ingest_records(s, recs, source="delta", code=code, replace=True)

    return run


def _cli(base: Path, *args: str) -> tuple[int, str]:
    err = io.StringIO()
    cwd = os.getcwd()
    os.chdir(base)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(list(args))
    finally:
        os.chdir(cwd)
    return rc, err.getvalue()


def _decisions(path: Path) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    out = {}
    for line in path.read_text().splitlines():
        d = json.loads(line)["decision"]
        out[d["variant_id"]] = (d["mode"], d["reason"], tuple(d["evidence"]))
    return out


@pytest.fixture(scope="module")
def foo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both versions' memories, the team's op map (the old version's capture) and
    the config a full run decided from them."""
    base = tmp_path_factory.mktemp("fresh")
    build(base / "old", base / "old.db", {FOO: FOO_OLD}, SPEC)
    build(base / "new", base / "new.db", {FOO: FOO_NEW}, SPEC)
    shutil.copy(capture(base / "cap.jsonl", SPEC, OLD_OPS), base / "ops.db")
    (base / "sup.txt").write_text("ones\nmm\n")  # no _scaled_mm on this device
    rc, err = _cli(base, "select", "run", "--memory", "old.db", *SELECT, "--out", "suite.yaml")
    assert rc == 0, err
    assert _decisions(base / "suite.evidence.jsonl")[FOO_ID][:2] == (
        "skip",
        "op_unsupported:aten::_scaled_mm",
    )
    return base


def _at(foo: Path, where: Path) -> Path:
    where.mkdir()
    for name in ("old.db", "new.db", "ops.db", "sup.txt", "suite.yaml", "suite.evidence.jsonl"):
        shutil.copy(foo / name, where / name)
    return where


def _since(at: Path, *more: str) -> tuple[int, str]:
    return _cli(at, "select", "run", "--since", "old.db", "--memory", "new.db",
                "--config", "suite.yaml", *SELECT, *more)  # fmt: skip


def test_a_helper_that_stops_calling_an_op_makes_the_variant_mandatory(
    foo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _at(foo, tmp_path / "a")
    team = (at / "ops.db").read_bytes()
    asked: list[list[str]] = []
    monkeypatch.setattr("ootest.select.fresh.capture_variants", capturer(NEW_OPS, asked))
    rc, err = _since(at)
    assert rc == 0, err
    assert asked == [[FOO_ID]]  # only the modified variant, not the whole tree
    got = _decisions(at / "suite.evidence.jsonl")
    assert got[FOO_ID] == (
        "mandatory_success",
        "ops_supported",
        ("all 2 ops it calls are declared",),
    )
    assert "evaluated 1 of 2 variants (0 added; 1 modified; 0 removed" in err
    assert (
        "op evidence for the 1 variants decided again: captured 1 of 1 variants on emu:full"
    ) in err
    assert (at / "ops.db").read_bytes() == team  # the team's op map is never written
    # the copy it decided from says which code and torch each record is of
    with OpStore.open(at / "suite.ops.db") as s:
        ft = s.for_test(FOO_ID)
        assert {o.op for o in ft.ops} == {"aten::mm", "aten::ones"}
        ends = [(e.capture.torch_version, e.code) for e in ft.captures]
    with contextlib.closing(__import__("sqlite3").connect(at / "new.db")) as m:
        (now,) = m.execute("SELECT fingerprint FROM variants WHERE id = ?", (FOO_ID,)).fetchone()
    assert ends == [("2.14.0", now)]


def test_without_the_capture_the_old_evidence_is_stale_and_the_variant_runs(
    foo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _at(foo, tmp_path / "b")
    asked: list[list[str]] = []
    monkeypatch.setattr("ootest.select.fresh.capture_variants", capturer(NEW_OPS, asked))
    rc, err = _since(at, "--no-capture")
    assert rc == 0, err
    assert asked == []
    mode, reason, why = _decisions(at / "suite.evidence.jsonl")[FOO_ID]
    assert (mode, reason) == ("xfail", "no_evidence")  # neither skipped nor mandatory: it runs
    assert why == (
        "op evidence captured from other code or of unknown origin (the op map records no "
        "fingerprint for it) and the test changed since: stale, run it; not declared: "
        "aten::_scaled_mm",
    )
    assert "not captured (--no-capture): 1 variants' op evidence is stale" in err


def test_evidence_of_another_fingerprint_is_never_certain(foo: Path, tmp_path: Path) -> None:
    """A full selection from an op map captured with --memory of the old tree: the
    variant whose code changed since is stale; the unchanged one is decided."""
    at = _at(foo, tmp_path / "c")
    (at / "ops.db").unlink()
    rc, err = _cli(at, "ops", "ingest", str(foo / "cap.jsonl"), "--db", "ops.db",
                   "--memory", "old.db")  # fmt: skip
    assert rc == 0, err
    rc, err = _cli(at, "select", "run", "--memory", "new.db", *SELECT, "--out", "full.yaml")
    assert rc == 0, err
    got = _decisions(at / "full.evidence.jsonl")
    assert got[FOO_ID][:2] == ("xfail", "no_evidence")
    assert got[FOO_ID][2][0].startswith("op evidence captured from other code (fingerprint ")
    assert got[BAR_ID][:2] == ("mandatory_success", "ops_supported")  # its code is the same


# ------------------------------------------------------------------ moves
MOVE_OPS = {
    "test_sort": {"aten::sort": 1},
    "test_topk": {"aten::topk": 1},
    "test_sort_stable_none": {"aten::sort.stable": 1},
    "test_rewritten": {"aten::ones": 1, "aten::sum": 1},
    "test_stays": {"aten::zeros": 1},
    "test_param": {"aten::scalar_tensor": 1},
    "test_single": {"aten::ones": 1},
    "test_moved": {"aten::mul.Tensor": 1, "aten::ones": 1},
}


def test_moved_variants_keep_their_op_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path
    files_old, spec_old = moves_version(False)
    files_new, spec_new = moves_version(True)
    build(base / "old", base / "old.db", files_old, spec_old)
    build(base / "new", base / "new.db", files_new, spec_new)
    shutil.copy(capture(base / "cap.jsonl", spec_old, MOVE_OPS), base / "ops.db")  # old only
    (base / "sup.txt").write_text("sort\ntopk\nsum\nzeros\nones\nmul\nscalar_tensor\n")
    rc, err = _cli(base, "select", "run", "--memory", "old.db", *SELECT, "--out", "suite.yaml")
    assert rc == 0, err
    asked: list[list[str]] = []
    monkeypatch.setattr("ootest.select.fresh.capture_variants", capturer(MOVE_OPS, asked))
    rc, err = _since(base)
    assert rc == 0, err
    side = [json.loads(x) for x in (base / "suite.evidence.jsonl").read_text().splitlines()]
    moved = {r["decision"]["variant_id"]: r for r in side if "moved_from" in r}
    assert len(moved) == 9
    # none is "not in the op map": the records followed each move
    assert not [v for v, r in moved.items() if r["decision"]["reason"] == "no_evidence"]
    # the one that moved and changed (decorated) was captured again, with the added
    # one; the plain moves were not: their records are of the same code, renamed
    plain = "test/test_other.py::TestOtherPlain::test_plain_moved"
    assert asked == [[plain, "test/test_sort.py::TestSortDevice::test_rewritten"]]
    assert moved[plain]["changed"] == ["moved", "decorator"]
    assert moved[plain]["decision"]["reason"] == "no_device_ops"
    # a plain move decided again (a new replay, say) is decided from its records
    with OpStore.open(base / "suite.ops.db") as s:
        for new, row in moved.items():
            if row["changed"] == ["moved"]:
                code = {new: row["fingerprint"]}
                ((vid, ops, uncertain, outcome, _, _),) = s.evidence([new], code)
                assert (vid, uncertain, outcome) == (new, None, "passed") and ops, new
    assert "9 moves took their records" in err


def test_a_reference_device_that_cannot_be_built_is_one_error(
    foo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real capturer (``ootest ops capture`` in a child; it fails before any
    test runs, so no torch is needed) says what failed and how to go on."""
    # the real one, not the fixtures' (tests/select/conftest.py)
    monkeypatch.setattr("ootest.select.fresh.capture_variants", _REAL)
    at = _at(foo, tmp_path / "d")
    rc, err = _since(at, "--capture-device", "emu:nosuch")
    assert rc == 2
    assert err.endswith(
        "ootest: error: the delta capture on emu:nosuch failed (ootest ops capture exit status "
        "2; pass --no-capture where no reference device can be built); its output ends:\n"
        "ootest: error: emu: unknown profile 'nosuch'; expected one of faulty, full, subtle, "
        "young or a path to a profile YAML file\n"
    )
    assert _decisions(at / "suite.evidence.jsonl") == _decisions(foo / "suite.evidence.jsonl")


def test_an_entry_change_that_does_not_reach_a_variant_keeps_its_evidence(
    tmp_path: Path,
) -> None:
    """Note [Entry changes that do not reach a variant]: the variant's fingerprint
    changed (its entry's did, for other tests), its code did not: the copy's records
    are stamped with the new fingerprint, so its evidence stays certain; nothing is
    captured, and the team's op map is only read."""
    from ootest.select.fresh import Delta, fresh_ops

    team, copy = tmp_path / "team.db", tmp_path / "copy.db"
    recs: list[dict[str, object]] = [
        {"kind": "provenance", "torch_version": "2.13.0", "torch_git": "abc123",
         "device": "emu", "profile": "full", "ootest_version": "0.1.0", "time": 1.0},
        {"kind": "ops", "variant_id": FOO_ID, "nodeid": FOO_ID, "mode": "eager", "file": FOO,
         "ops": {"aten::mm": 1}},
        {"kind": "stop", "variant_id": FOO_ID, "op": None, "outcome": "passed", "error": None},
    ]  # fmt: skip
    with OpStore.open(team, create=True) as s:
        ingest_records(s, recs, source="old", code={FOO_ID: "fp-old"}, replace=True)
    unknown = (BAR_ID, "fp-x", "fp-y")  # not in the op map: nothing to stamp
    d = Delta(fresh={}, restamp=[(FOO_ID, "fp-old", "fp-new"), unknown])
    assert not d.empty()
    f = fresh_ops(team, copy, d, capturer=lambda *a, **k: pytest.fail("nothing to capture"))
    assert (f.asked, f.restamped) == (0, 1)
    assert "1 variants whose entry changed only for other tests keep theirs" in f.summary()
    with OpStore.open(copy) as s:
        assert s.codes([FOO_ID]) == {FOO_ID: frozenset({"fp-new"})}
        ((vid, ops, uncertain, outcome, _, _),) = s.evidence([FOO_ID], {FOO_ID: "fp-new"})
        assert (vid, ops, uncertain, outcome) == (FOO_ID, frozenset({"aten::mm"}), None, "passed")
    with OpStore.open(team) as s:  # the team's op map is as it was: stale for the new code
        assert s.codes([FOO_ID]) == {FOO_ID: frozenset({"fp-old"})}
        ((_, _, uncertain, _, _, _),) = s.evidence([FOO_ID], {FOO_ID: "fp-new"})
        assert uncertain is not None
