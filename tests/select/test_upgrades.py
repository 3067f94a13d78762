"""An upgrade loses nothing that still exists (``select run --since``, issue 26).

One upstream-style file per kind of change the memory diff reports (body,
decorator, helper, import, OpInfo entry, a class that becomes or stops being
device-generic, a collection whose device flag changed), each with a plain
``TestCase`` class (its tests run on the host beside the device's) and a
device-generic one; and a file whose tests are added and removed. The upgrade
must re-decide exactly what the diff reports added or modified, keep every
unchanged variant's decision and evidence line byte for byte, remove exactly the
removed, print the diff's counts, and leave no entry comment counting names the
entry no longer lists.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.config.decide import decide
from ootest.config.load import load_config
from ootest.config.when import Context
from ootest.memory import IndexDiff, diff_indexes
from ootest.opmap.enable import variant_from_id
from ootest.select.writer import evidence_comments
from tests.select.upgrade_trees import HEAD, V, build, capture, change_entry

KINDS = ("body", "decorator", "helper", "import", "opinfo", "device", "dump")
#: what the diff says of the variants a kind changes
REASONS = {
    "body": ("body",),
    "decorator": ("decorator",),
    "helper": ("helper:_scale",),
    "import": ("import",),
    "opinfo": ("opinfo:mul",),
    "device": ("decorator", "device"),
    "dump": ("device",),
}
OPS = {"test_changes": {"aten::mul.Tensor": 1, "aten::sum": 1}, "test_same": {"aten::zeros": 1}}
SELECT = ["--supported", "sup.txt", "--dtypes", "float32", "--ops", "ops.db"]


def _cls(kind: str) -> str:
    return kind.capitalize()


def kind_file(kind: str, new: bool) -> str:
    """``test/test_<kind>.py``: a plain class and a device-generic one, whose
    ``test_changes`` the kind changes between versions (``import``: the whole file)."""
    k, changed = _cls(kind), new
    scale = "t + t" if kind == "helper" and changed else "t * 2"
    size = 3 if kind == "body" and changed else 2
    deco = "    @torch.no_grad()\n" if kind == "decorator" and changed else ""
    more = "import math\n" if kind == "import" and changed else ""
    if kind == "opinfo":
        plain_head = '    @parametrize("op", local_ops)\n    def test_changes(self, op):\n'
        dev_head = (
            "    @ops(local_ops, allowed_dtypes=(torch.float32,))\n"
            "    def test_changes(self, device, dtype, op):\n"
        )
    elif kind == "device":  # the same method either way: only the class changes
        plain_head = dev_head = '    def test_changes(self, device="cpu"):\n'
    else:
        plain_head = f"{deco}    def test_changes(self):\n"
        dev_head = f"    @dtypes(torch.float32)\n{deco}    def test_changes(self, device, dtype):\n"
    plain_generic = kind == "device" and new
    dev_generic = not (kind == "device" and new)
    out = HEAD + more + "\nlocal_ops = []\n\n\ndef _scale(t):\n" + f"    return {scale}\n\n\n"
    for name, head, generic in (
        (f"TestPlain{k}", plain_head, plain_generic),
        (f"Test{k}", dev_head, dev_generic),
    ):
        out += f"class {name}(TestCase):\n{head}"
        out += f"        t = torch.ones({size})\n"
        out += "        self.assertEqual(_scale(t).sum().item(), 2 * t.numel())\n\n"
        out += "    def test_same(self):\n"
        out += "        self.assertEqual(torch.zeros(2).sum().item(), 0)\n\n\n"
        if generic:
            out += f"instantiate_device_type_tests({name}, globals())\n\n\n"
        elif kind == "opinfo" and name.startswith("TestPlain"):
            out += f"instantiate_parametrized_tests({name})\n\n\n"
    return out


def kind_variants(kind: str, new: bool) -> list[V]:
    f, k = f"test/test_{kind}.py", _cls(kind)
    plain_dev = (kind == "device" and new) or (kind == "dump" and new)
    dev_dev = not ((kind == "device" and new) or (kind == "dump" and new))
    out: list[V] = []
    for cls, device in ((f"TestPlain{k}", plain_dev), (f"Test{k}", dev_dev)):
        generic = cls == f"Test{k}"
        if kind == "opinfo":
            out += [V(f, cls, "test_changes", "float32" if generic else None, op, device)
                    for op in ("add", "mul")]  # fmt: skip
        elif kind in ("device", "dump"):
            out.append(V(f, cls, "test_changes", None, None, device))
        else:
            out.append(V(f, cls, "test_changes", "float32" if generic else None, None, device))
        out.append(V(f, cls, "test_same", None, None, device))
    return out


CHURN_OLD = (
    HEAD
    + """

class TestPlainChurn(TestCase):
    def test_kept(self):
        self.assertTrue(torch.ones(1).bool().all())

    def test_gone(self):
        self.assertTrue(True)


class TestChurn(TestCase):
    @dtypes(torch.float32)
    def test_kept(self, device, dtype):
        self.assertTrue(torch.ones(1, device=device, dtype=dtype).bool().all())

    def test_gone(self, device):
        self.assertTrue(True)


instantiate_device_type_tests(TestChurn, globals())
"""
)
CHURN_NEW = CHURN_OLD.replace("test_gone", "test_new")


def churn_variants(new: bool) -> list[V]:
    f, m = "test/test_churn.py", "test_new" if new else "test_gone"
    return [
        V(f, "TestPlainChurn", "test_kept", device=False),
        V(f, "TestPlainChurn", m, device=False),
        V(f, "TestChurn", "test_kept", "float32"),
        V(f, "TestChurn", m),
    ]


def version(new: bool) -> tuple[dict[str, str], list[V]]:
    files = {f"test/test_{k}.py": kind_file(k, new) for k in KINDS}
    files["test/test_churn.py"] = CHURN_NEW if new else CHURN_OLD
    spec = [v for k in KINDS for v in kind_variants(k, new)] + churn_variants(new)
    return files, spec


def modes(config: Path, root: Path, vids: Sequence[str]) -> dict[str, str]:
    """Each variant's mode as ootest itself decides it from ``config``."""
    cfg = load_config(config, env={"TORCH_ROOT": str(root)}, check_paths=False)
    out = {}
    for vid in vids:
        file = vid.partition("::")[0]
        rf = next((f for f in cfg.files if f.path.as_posix().endswith("/" + file)), None)
        out[vid] = (
            decide(rf, cfg.suite.global_, variant_from_id(vid), Context()).mode
            if rf is not None
            else "unlisted"
        )
    return out


def sidecar(path: Path) -> dict[str, str]:
    return {json.loads(x)["decision"]["variant_id"]: x for x in path.read_text().splitlines()}


def check_comments(config: Path, side: dict[str, str]) -> None:
    """Every generated entry's mark counts the names it lists, and its evidence
    comment is the one ``select run`` writes for those names (one evidence per
    name, a template's from its first variant)."""
    lines = config.read_text().splitlines()
    file = ""
    for i, line in enumerate(lines):
        if m := re.match(r"\s*- path: \$\{TORCH_ROOT\}/(.*)$", line):
            file = m[1]
        m = re.match(r"\s*# ootest select: .* \((\d+) names?\)$", line)
        if m is None:
            continue
        j = i + 1
        comments = []
        while lines[j].lstrip().startswith("#   "):
            comments.append(lines[j].strip())
            j += 1
        assert lines[j].strip() == "- names:", (i, lines[j])
        names = []
        j += 1
        while lines[j].strip().startswith("- "):
            names.append(json.loads(n) if (n := lines[j].strip()[2:]).startswith('"') else n)
            j += 1
        assert int(m[1]) == len(names), (line, names)
        evidence = []
        for n in names:
            vid = f"{file}::{n}"
            if "[" not in n:
                vid = min(v for v in side if v == vid or v.startswith(vid + "["))
            evidence.append(tuple(json.loads(side[vid])["decision"]["evidence"]))
        assert comments == evidence_comments(evidence), (line, names)


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Old and new memories of the trees, the old config (a full run), the upgraded
    one (``--since``) and a fresh full run of the new memory."""
    base = tmp_path_factory.mktemp("upgrades")
    files_old, spec_old = version(False)
    files_new, spec_new = version(True)
    build(base / "old", base / "old.db", files_old, spec_old)
    build(base / "new", base / "new.db", files_new, spec_new)
    changed = change_entry(base / "new.db", "mul", "mul-edited")
    assert len(changed) == 2
    shutil.copy(capture(base / "cap.jsonl", [*spec_old, *spec_new], OPS), base / "ops.db")
    (base / "sup.txt").write_text("mul\nsum\nzeros\nones\nall\n")

    def run(*args: str) -> tuple[int, str, str]:
        import contextlib
        import io
        import os

        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(base)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(list(args))
        finally:
            os.chdir(cwd)
        return rc, out.getvalue(), err.getvalue()

    rc, _, err = run("select", "run", "--memory", "old.db", *SELECT, "--out", "suite.yaml")
    assert rc == 0, err
    rc, _, err = run("select", "run", "--memory", "new.db", *SELECT, "--out", "fresh.yaml")
    assert rc == 0, err
    rc, _, err = run(
        "select", "run", "--since", "old.db", "--memory", "new.db",
        "--config", "suite.yaml", *SELECT, "--out", "up.yaml",
    )  # fmt: skip
    assert rc == 0, err
    return {
        "base": base,
        "diff": diff_indexes(base / "old.db", base / "new.db"),
        "err": err,
        "old": sidecar(base / "suite.evidence.jsonl"),
        "new": sidecar(base / "up.evidence.jsonl"),
        "fresh": sidecar(base / "fresh.evidence.jsonl"),
        "spec_old": spec_old,
        "spec_new": spec_new,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_change_re_decides_its_variants_plain_and_device(
    upgraded: dict[str, object], kind: str
) -> None:
    diff = upgraded["diff"]
    assert isinstance(diff, IndexDiff)
    old, new = upgraded["old"], upgraded["new"]
    assert isinstance(old, dict) and isinstance(new, dict)
    spec_new = upgraded["spec_new"]
    assert isinstance(spec_new, list)
    ids = sorted(v.id for v in spec_new if v.file == f"test/test_{kind}.py")
    why = {m.id: m.reasons for m in diff.modified if m.id in ids}
    expect = {
        v: REASONS[kind]
        for v in ids
        if kind in ("import", "device", "dump")  # every test of the file (of both classes)
        or ("test_changes" in v and (kind != "opinfo" or "op=mul" in v))
    }
    assert why == expect
    # both classes: a plain one and a device-generic one
    assert {v.split("::")[1] for v in expect} == {f"TestPlain{_cls(kind)}", f"Test{_cls(kind)}"}
    for vid in ids:  # nothing that still exists is lost
        assert vid in new, vid
        row = json.loads(new[vid])
        if vid in expect:
            assert row["changed"] == list(expect[vid]), vid
        else:
            assert new[vid] == old[vid], vid  # kept byte for byte
    base = upgraded["base"]
    assert isinstance(base, Path)
    # as the config resolves them: the decisions a fresh full selection makes
    got = modes(base / "up.yaml", base, ids)
    assert got == modes(base / "fresh.yaml", base, ids)
    assert set(got.values()) == {"mandatory_success"}


def test_the_counts_printed_are_the_diffs_and_the_comments_count_their_names(
    upgraded: dict[str, object],
) -> None:
    diff, err, new = upgraded["diff"], upgraded["err"], upgraded["new"]
    assert isinstance(diff, IndexDiff) and isinstance(err, str) and isinstance(new, dict)
    assert not diff.moved  # test_gone -> test_new: another body, no move
    added, removed = len(diff.added), len(diff.removed)
    assert (added, removed) == (2, 2)
    evaluated = added + len(diff.modified)
    total = len(upgraded["spec_new"])  # type: ignore[arg-type]
    assert (
        f"evaluated {evaluated} of {total} variants ({added} added; "
        f"{len(diff.modified)} modified; {removed} removed;"
    ) in err, err
    assert "have no decision" not in err
    assert set(new) == {v.id for v in upgraded["spec_new"]}  # type: ignore[attr-defined]
    for vid in diff.removed:
        assert vid not in new
    base = upgraded["base"]
    assert isinstance(base, Path)
    check_comments(base / "up.yaml", new)
    text = (base / "up.yaml").read_text()
    assert "test_gone" not in text
    ids = sorted(new)
    assert modes(base / "up.yaml", base, ids) == modes(base / "fresh.yaml", base, ids)


# ---------------------------------------------------------------- moves (Note [Moves])
SORT = "test/test_sort.py"
MOVE_OPS = {
    "test_sort": {"aten::sort": 1},
    "test_topk": {"aten::topk": 1},
    "test_sort_stable_none": {"aten::sort": 1},
    "test_rewritten": {"aten::sum": 1},
    "test_stays": {"aten::zeros": 1},
    "test_param": {"aten::ones": 1},
    "test_single": {"aten::ones": 1},
    "test_moved": {"aten::mul.Tensor": 1},
}
PINNED = """        # flaky here: keep it xfail (Jane)
        - names:
            - TestSort::test_sort_stable_none
          mode: xfail
"""


def _result(vid: str, outcome: str, at: float) -> str:
    rec = {"kind": "result", "variant_id": vid, "outcome": outcome, "time": at, "phase": "call"}
    if outcome == "failed":
        rec["message"] = "AssertionError: not ordered"
    return json.dumps(rec) + "\n"


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The old config decided with device results and edited by a person; the
    upgrade across the moves."""
    import contextlib
    import io
    import os

    from tests.select.upgrade_trees import moves_version

    base = tmp_path_factory.mktemp("moved")
    files_old, spec_old = moves_version(False)
    files_new, spec_new = moves_version(True)
    build(base / "old", base / "old.db", files_old, spec_old)
    build(base / "new", base / "new.db", files_new, spec_new)
    shutil.copy(capture(base / "cap.jsonl", [*spec_old, *spec_new], MOVE_OPS), base / "ops.db")
    (base / "sup.txt").write_text("sort\ntopk\nsum\nzeros\nones\nmul\n")
    (base / "r.jsonl").write_text(
        _result(f"{SORT}::TestSort::test_topk", "failed", 1.0)
        + _result("test/test_misc.py::TestMiscPlain::test_plain_moved", "passed", 1.0)
        + _result("test/test_misc.py::TestMiscPlain::test_plain_moved", "passed", 2.0)
    )

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(base)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(list(args))
        finally:
            os.chdir(cwd)
        return rc, out.getvalue(), err.getvalue()

    args = ("select", "run", "--memory", "old.db", *SELECT, "--results", "r.jsonl")
    rc, _, err = run(*args, "--out", "suite.yaml")
    assert rc == 0, err
    text = (base / "suite.yaml").read_text()
    # a person's entries, last in their blocks (later entries win ties)
    for file, name in ((SORT, "TestSort::test_sort_stable_none"),
                       (SORT, '"TestSort::test_sort[dtype=float64]"'),
                       ("test/test_misc.py", "TestMisc::test_moved")):  # fmt: skip
        start = text.index(f"    - path: ${{TORCH_ROOT}}/{file}\n")
        end = text.find("    - path: ", start + 1)
        end = len(text) if end < 0 else end
        mine = PINNED.replace("TestSort::test_sort_stable_none", name)
        text = text[:end] + mine + text[end:]
    (base / "suite.yaml").write_text(text)
    rc, _, err = run(
        "select", "run", "--since", "old.db", "--memory", "new.db",
        "--config", "suite.yaml", *SELECT, "--out", "up.yaml",
    )  # fmt: skip
    assert rc == 0, err
    return {
        "base": base,
        "err": err,
        "diff": diff_indexes(base / "old.db", base / "new.db"),
        "old": sidecar(base / "suite.evidence.jsonl"),
        "new": sidecar(base / "up.evidence.jsonl"),
        "spec_new": spec_new,
    }


def test_a_move_carries_the_decision_its_evidence_and_observed_results(
    moved: dict[str, object],
) -> None:
    diff, old, new = moved["diff"], moved["old"], moved["new"]
    assert isinstance(diff, IndexDiff) and isinstance(old, dict) and isinstance(new, dict)
    pure = [m for m in diff.moved if not m.reasons]
    assert len(pure) == 8
    for m in pure:
        before, after = json.loads(old[m.old]), json.loads(new[m.new])
        assert after.pop("changed") == ["moved"] and after.pop("moved_from") == m.old
        after.pop("fingerprint")
        after.pop("held", None)  # the pinned one: a person's entry decides it
        before.pop("fingerprint", None)
        before.pop("changed", None)
        assert json.dumps(after).replace(m.new, m.old) == json.dumps(before), m.new
        assert m.old not in new
    topk = json.loads(new[f"{SORT}::TestSortDevice::test_topk"])
    assert topk["decision"]["mode"] == "xfail_strict"  # observed on the device: carried
    assert [r["outcome"] for r in topk["evidence"]["observed"]] == ["failed"]


def test_a_move_with_another_change_is_decided_again_with_its_history(
    moved: dict[str, object],
) -> None:
    new, err = moved["new"], moved["err"]
    assert isinstance(new, dict) and isinstance(err, str)
    row = json.loads(new["test/test_other.py::TestOtherPlain::test_plain_moved"])
    assert row["changed"] == ["moved", "decorator"]
    assert row["moved_from"] == "test/test_misc.py::TestMiscPlain::test_plain_moved"
    # Note [History across changes]: its passes were of the test without the
    # decorator: kept to read, deciding nothing until it runs again
    assert row["evidence"]["observed"] == []
    assert [r["outcome"] for r in row["history"]["observed"]] == ["passed"]
    assert row["history"]["why"] == "the test's decorator changed"
    assert row["decision"]["reason"] == "no_device_ops"  # not observed_pass:2
    # evaluated: the added test_rewritten and every move, re-checked against this
    # run's scope, support and replay (only its history travels)
    assert (
        "evaluated 10 of 11 variants (1 added; 0 modified; 9 moved (1 changed otherwise); "
        "1 removed;" in err
    ), err
    assert "1 re-decided variants keep their observed results as history only" in err


def test_a_persons_entry_naming_a_variant_exactly_follows_it(moved: dict[str, object]) -> None:
    base = moved["base"]
    assert isinstance(base, Path)
    text = (base / "up.yaml").read_text()
    mine = PINNED.replace("TestSort::test_sort_stable_none", '"TestSort::test_sort[dtype=float64]"')
    assert mine.replace("TestSort::", "TestSortDevice::") in text
    vid = f"{SORT}::TestSortDevice::test_sort[dtype=float64]"
    assert modes(base / "up.yaml", base, [vid]) == {vid: "xfail"}


def test_a_persons_entry_follows_its_variant_across_a_move(moved: dict[str, object]) -> None:
    base, err = moved["base"], moved["err"]
    assert isinstance(base, Path) and isinstance(err, str)
    text = (base / "up.yaml").read_text()
    assert PINNED.replace("TestSort::", "TestSortDevice::") in text
    assert "TestSort::" not in text  # no old name is left
    vid = f"{SORT}::TestSortDevice::test_sort_stable_none"
    assert modes(base / "up.yaml", base, [vid]) == {vid: "xfail"}
    assert f"{vid} (moved)" in err  # held: listed for review
    # to another file (a new one here): the entry goes with it, the old one leaves
    other = "test/test_other.py::TestOther::test_moved"
    assert (
        "      tests:\n"  # after the generated entries of the new block
        "        # ootest select: no_device_ops (1 names)\n"
    ) in text
    assert (
        "        # moved here from test/test_misc.py with a person's entry there\n"
        "        # flaky here: keep it xfail (Jane)\n"
        "        - names:\n"
        "            - TestOther::test_moved\n"
        "          mode: xfail\n"
    ) in text
    assert "TestMisc::test_moved" not in text
    assert modes(base / "up.yaml", base, [other]) == {other: "xfail"}
    assert f"{other} (moved)" in err
    spec = moved["spec_new"]
    assert isinstance(spec, list)
    ids = [v.id for v in spec]
    got = modes(base / "up.yaml", base, ids)
    side = sidecar(base / "up.evidence.jsonl")
    assert set(side) == set(ids)
    for vid in ids:  # every variant resolves to its line's decision, but the pinned ones
        if not vid.endswith(("test_sort_stable_none", "test_sort[dtype=float64]", "test_moved")):
            assert got[vid] == json.loads(side[vid])["decision"]["mode"], vid
    check_comments(base / "up.yaml", side)


def test_an_evidence_comment_never_holds_what_yaml_refuses() -> None:
    # a message seen on the device with a terminal's colour codes (a real upstream
    # test's UnpicklingError): select refine wrote it raw, and no YAML reader took
    # the config back
    import yaml

    lines = evidence_comments([("device: UnpicklingError: \x1b[1mdo those steps\x1b[0m",)])
    assert lines == ["#   device: UnpicklingError: \\x1b[1mdo those steps\\x1b[0m"]
    assert yaml.safe_load("a: 1\n" + "\n".join(lines) + "\n") == {"a": 1}


def test_after_a_helper_or_decorator_change_earlier_runs_are_history_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Note [History across changes]: runs of the code a test called before, or
    under other decorators, say nothing of how it runs now (a real upgrade's helper
    change fixed 24 failures the carried results kept xfail_strict): they stay in
    the line as history and the rules decide until it runs again."""
    files_old, spec_old = version(False)
    files_new, spec_new = version(True)
    build(tmp_path / "old", tmp_path / "old.db", files_old, spec_old)
    build(tmp_path / "new", tmp_path / "new.db", files_new, spec_new)
    shutil.copy(capture(tmp_path / "cap.jsonl", [*spec_old, *spec_new], OPS), tmp_path / "ops.db")
    (tmp_path / "sup.txt").write_text("mul\nsum\nzeros\nones\nall\n")
    monkeypatch.chdir(tmp_path)
    assert main(["select", "run", "--memory", "old.db", *SELECT, "--out", "s.yaml"]) == 0
    failed = "test/test_helper.py::TestHelper::test_changes[dtype=float32]"
    crashed = "test/test_helper.py::TestPlainHelper::test_changes"
    decorated = "test/test_decorator.py::TestDecorator::test_changes[dtype=float32]"
    # def test_changes(self, device="cpu") in a plain class: it ran on the CPU; the
    # class becomes device-generic
    on_cpu = "test/test_device.py::TestPlainDevice::test_changes"
    imported = "test/test_import.py::TestImport::test_changes[dtype=float32]"
    results = [
        {"kind": "result", "variant_id": on_cpu, "outcome": "passed", "time": 1.0,
         "phase": "call"},
        {"kind": "result", "variant_id": imported, "outcome": "failed", "time": 1.0,
         "phase": "call", "message": "TypeError: boom"},
        {"kind": "result", "variant_id": failed, "outcome": "failed", "time": 1.0,
         "phase": "call", "message": "TypeError: boom"},
        {"kind": "result", "variant_id": crashed, "outcome": "crashed", "time": 1.0,
         "phase": "call", "signal": "SIGSEGV"},
        {"kind": "result", "variant_id": decorated, "outcome": "failed", "time": 1.0,
         "phase": "call", "message": "TypeError: boom"},
    ]  # fmt: skip
    Path("r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    assert main(["select", "refine", "s.yaml", "--results", "r.jsonl"]) == 0
    since = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "s.yaml"]
    assert main([*since, *SELECT]) == 0
    rows = sidecar(Path("s.evidence.jsonl"))
    f, c, d = (json.loads(rows[v]) for v in (failed, crashed, decorated))
    for row, outcome in ((f, "failed"), (c, "crashed"), (d, "failed")):
        assert row["evidence"]["observed"] == []
        assert [r["outcome"] for r in row["history"]["observed"]] == [outcome]
        assert row["decision"]["mode"] == "mandatory_success", row
    assert f["history"]["why"] == "the test's helper:_scale changed"
    assert d["history"]["why"] == "the test's decorator changed"
    # its passes on the CPU are no evidence of the device
    cpu = json.loads(rows[on_cpu])
    assert cpu["changed"] == ["decorator", "device"]
    assert cpu["evidence"]["observed"] == []
    assert [r["outcome"] for r in cpu["history"]["observed"]] == ["passed"]
    # an import changed: nothing says the test runs otherwise, its failure decides
    i = json.loads(rows[imported])
    assert i["changed"] == ["import"] and "history" not in i
    assert [r["outcome"] for r in i["evidence"]["observed"]] == ["failed"]
    assert i["decision"]["mode"] == "xfail_strict"


def test_a_move_whose_old_variant_had_no_decision_is_decided(
    moved: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    base = moved["base"]
    assert isinstance(base, Path)
    for name in ("old.db", "new.db", "ops.db", "sup.txt", "suite.yaml"):
        shutil.copy(base / name, tmp_path / name)
    old = "test/test_param.py::TestParam::test_single[n=n3]"
    rows = (base / "suite.evidence.jsonl").read_text().splitlines()
    kept = [x for x in rows if json.loads(x)["decision"]["variant_id"] != old]
    assert len(kept) == len(rows) - 1
    (tmp_path / "suite.evidence.jsonl").write_text("\n".join(kept) + "\n")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    since = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "suite.yaml"]
    assert main([*since, *SELECT]) == 0
    assert "9 moved (1 changed otherwise)" in capsys.readouterr().err
    row = json.loads(sidecar(Path("suite.evidence.jsonl"))[old.replace("n=n3", "n=three")])
    assert row["changed"] == ["moved"] and row["moved_from"] == old
    assert row["decision"]["reason"] == "ops_supported"


MOVES_CONFIG = """\
# header
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/t.py
      unlisted_test_mode: xfail
      tests:
        # ootest select: ops_supported (1 names)
        #   why
        - names:
            - T::test_stays
          mode: mandatory_success
          tags: [ootest-select]
        # slow here, keep it running but not required (Jane)
        - names:
            - T::test_moves
            - T::test_stays_pinned
          mode: xfail
    - path: ${TORCH_ROOT}/test/u.py
      unlisted_test_mode: xfail
      tests:
        # ootest select: ops_supported (1 names)
        #   why
        - names:
            - U::test_here
          mode: mandatory_success
          tags: [ootest-select]
"""


def test_a_persons_entry_goes_with_its_variant_into_another_files_block() -> None:
    from ootest.select.patch import patch
    from ootest.select.rules import Decision

    old, new = "test/t.py::T::test_moves", "test/u.py::U::test_moves"
    left = {
        "test/t.py": ["test/t.py::T::test_stays", "test/t.py::T::test_stays_pinned"],
        "test/u.py": ["test/u.py::U::test_here", new],
    }
    carried = Decision(new, "mandatory_success", "ops_supported", ("why",))
    r = patch(MOVES_CONFIG, {new: carried}, {old}, left, None, "TORCH_ROOT", renames={old: new})
    assert r.held == [new] and r.notes == []
    # the old entry keeps the name still answering; the copy comes last in u.py's block
    assert "            - T::test_moves\n" not in r.text
    assert "            - T::test_stays_pinned\n          mode: xfail\n" in r.text
    assert r.text.endswith(
        "          tags: [ootest-select]\n"
        "        # moved here from test/t.py with a person's entry there\n"
        "        # slow here, keep it running but not required (Jane)\n"
        "        - names:\n"
        "            - U::test_moves\n"
        "          mode: xfail\n"
    )


def test_review_against_the_old_config_shows_moves_not_removed_and_added(
    moved: dict[str, object],
) -> None:
    """select review --previous pairs a moved variant with its old line: decided as
    before it is 'moved', not one removed and one added."""
    from ootest.select.review import build_review

    base, diff = moved["base"], moved["diff"]
    assert isinstance(base, Path) and isinstance(diff, IndexDiff)
    r = build_review(base / "up.yaml", previous=base / "suite.yaml")
    assert r.changes is not None
    kinds: dict[str, set[str]] = {}
    for c in r.changes:
        kinds.setdefault(c.kind, set()).update(c.ids)
    pure = [m for m in diff.moved if not m.reasons]
    assert {m.new for m in pure} <= kinds.get("moved", set()), kinds
    assert not {m.old for m in diff.moved} & kinds.get("removed", set())
    assert not {m.new for m in diff.moved} & kinds.get("added", set())
    assert set(diff.removed) <= kinds.get("removed", set())


def test_a_moved_variant_is_re_checked_against_this_runs_support(
    moved: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 3: only a move's history travels; its decision is made again
    from this run's sources (the old decision was carried unevaluated)."""
    base = moved["base"]
    assert isinstance(base, Path)
    for name in ("old.db", "new.db", "ops.db", "suite.yaml", "suite.evidence.jsonl"):
        shutil.copy(base / name, tmp_path / name)
    (tmp_path / "sup.txt").write_text("topk\nsum\nzeros\nones\nmul\n")  # no sort now
    monkeypatch.chdir(tmp_path)
    since = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "suite.yaml"]
    assert main([*since, *SELECT]) == 0
    vid = f"{SORT}::TestSortDevice::test_sort[dtype=float32]"
    row = json.loads(sidecar(Path("suite.evidence.jsonl"))[vid])
    assert row["changed"] == ["moved"]
    assert row["moved_from"] == f"{SORT}::TestSort::test_sort[dtype=float32]"
    assert (row["decision"]["mode"], row["decision"]["reason"]) == (
        "skip",
        "op_unsupported:aten::sort",
    )
    assert modes(Path("suite.yaml"), tmp_path, [vid]) == {vid: "skip"}


def test_a_moved_variant_finds_its_calls_under_its_old_id(
    moved: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An op map captured from the old version knows a moved variant by its old ID
    only: re-checked, it is decided from those calls, never 'not in the op map'."""
    from tests.select.upgrade_trees import moves_version

    base = moved["base"]
    assert isinstance(base, Path)
    for name in ("old.db", "new.db", "sup.txt", "suite.yaml", "suite.evidence.jsonl"):
        shutil.copy(base / name, tmp_path / name)
    _, spec_old = moves_version(False)
    shutil.copy(capture(tmp_path / "cap.jsonl", spec_old, MOVE_OPS), tmp_path / "ops.db")
    monkeypatch.chdir(tmp_path)
    since = ["select", "run", "--since", "old.db", "--memory", "new.db", "--config", "suite.yaml"]
    assert main([*since, *SELECT]) == 0
    rows = sidecar(Path("suite.evidence.jsonl"))
    vid = f"{SORT}::TestSortDevice::test_sort[dtype=float32]"
    row = json.loads(rows[vid])
    assert row["evidence"]["ops"] == ["aten::sort"]
    assert row["decision"]["reason"] == "ops_supported"
    diff = moved["diff"]
    assert isinstance(diff, IndexDiff)
    reasons = {m.new: json.loads(rows[m.new])["decision"]["reason"] for m in diff.moved}
    assert "no_evidence" not in reasons.values(), reasons
