"""Incremental selection: an upgrade (``select run --since``) and an enabled op
(``select enable``) re-decide only what they can affect and land as a diff.

The memories are real ``ootest index build`` indexes of two versions of a small
suite (tests/select/suites.py; the variant enumeration is synthetic, so no torch).
"""

from __future__ import annotations

import difflib
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.config.decide import decide
from ootest.config.load import load_config
from ootest.config.when import Context
from ootest.errors import UserError
from ootest.opmap.enable import variant_from_id
from ootest.opmap.ingest import ingest_records
from ootest.select.patch import patch
from ootest.select.rules import Decision
from tests.select import suites

ALPHA = "test/test_alpha.py::TestAlpha"
SELECT = ["--supported", "sup.txt", "--dtypes", "float32,float16", "--ops", "ops.db"]

PERSON = """        # flaky on our hardware: keep it xfail (Jane)
        - names:
            - TestAlpha::test_body
          mode: xfail
"""


@dataclass(frozen=True)
class Work:
    dir: Path

    def __truediv__(self, name: str) -> Path:
        return self.dir / name


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Old and new memories, an op map and a support list (read-only, shared)."""
    base = tmp_path_factory.mktemp("since")
    return suites.build_inputs(base)


@pytest.fixture
def work(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Work:
    """The shared inputs, and the config a full run made from the old memory, then
    edited by a person (an entry, a comment)."""
    for name in ("old.db", "new.db", "ops.db", "sup.txt"):
        shutil.copy(built / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(capsys, "select", "run", "--memory", "old.db", *SELECT, "--out", "suite.yaml")
    assert rc == 0, err
    text = (tmp_path / "suite.yaml").read_text()
    anchor = "      # 7 variants: 6 mandatory_success, 1 skip\n      unlisted_test_mode: xfail\n"
    anchor += "      tests:\n"
    assert text.count(anchor) == 1
    text = text.replace(anchor, anchor + PERSON)
    # the person took the name out of the generated entry (later entries win ties)
    mine = "            - TestAlpha::test_body\n"
    assert text.count(mine) == 2
    at = text.rindex(mine)
    text = text[:at] + text[at + len(mine) :]
    beta = "      # 3 variants: 1 mandatory_success, 2 skip\n      unlisted_test_mode: xfail\n"
    assert text.count(beta) == 1
    text = text.replace(beta, beta.replace("xfail\n", "xfail  # reviewed\n"))
    (tmp_path / "suite.yaml").write_text(text)
    return Work(tmp_path)


def modes(config: Path, root: Path, vids: list[str]) -> dict[str, str]:
    """Each variant's mode as ootest itself decides it from ``config``."""
    cfg = load_config(config, env={"TORCH_ROOT": str(root)}, check_paths=False)
    out = {}
    for vid in vids:
        file = vid.partition("::")[0]
        rf = next(f for f in cfg.files if f.path.as_posix().endswith("/" + file))
        out[vid] = decide(rf, cfg.suite.global_, variant_from_id(vid), Context()).mode
    return out


EXPECTED_DIFF = """\
-# memory sha256:X; op map sha256:X; model: none
-# decisions: 7 mandatory_success, 3 skip
+# memory sha256:X; op map sha256:X; model: none
+# decisions: 6 mandatory_success, 7 skip
-      # 7 variants: 6 mandatory_success, 1 skip
+      # 8 variants: 5 mandatory_success, 3 skip
-        # ootest select: no_device_ops (1 names)
-        #   calls no op on the device and passed on the reference device
-        - names:
-            - TestAlpha::test_gone
-          mode: mandatory_success
-          tags: [ootest-select]
-        # ootest select: ops_supported (4 names)
-        #   all 2 ops it calls are declared (x4)
+        # ootest select: ops_supported (3 names)
+        #   all 2 ops it calls are declared (x2)
+        #   all 1 ops it calls are declared
-            - TestAlpha::test_gate
+            - "TestAlpha::test_new[dtype=float32]"
+        # ootest select: dtype_unsupported:int64 (1 names)
+        #   dtypes not declared: int64
+        - names:
+            - "TestAlpha::test_dtypes[dtype=int64]"
+          mode: skip
+          tags: [ootest-select]
+        # ootest select: upstream_skip (1 names)
+        #   @onlyCUDA: upstream runs it on cuda only
+        - names:
+            - TestAlpha::test_gate
+          mode: skip
+          tags: [ootest-select]
+    - path: ${TORCH_ROOT}/test/test_gamma.py
+      # 2 variants: 2 skip
+      unlisted_test_mode: xfail
+      tests:
+        # ootest select: dtype_unsupported:float64 (1 names)
+        #   dtypes not declared: float64
+        - names:
+            - "TestGamma::test_cumsum[dtype=float64]"
+          mode: skip
+          tags: [ootest-select]
+        # ootest select: op_unsupported:aten::cumsum (1 names)
+        #   calls 1 ops; not declared: aten::cumsum
+        - names:
+            - "TestGamma::test_cumsum[dtype=float32]"
+          mode: skip
+          tags: [ootest-select]
"""


def _apply(text: str, diff: str) -> str:
    """``text`` with the unified diff ``diff`` applied (hunks in order)."""
    import re

    old, out, pos = text.splitlines(True), [], 0
    lines = diff.splitlines(True)
    i = 0
    while i < len(lines):
        m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", lines[i])
        i += 1
        if m is None:
            continue
        start = int(m[1]) - (0 if m[2] == "0" else 1)
        out += old[pos:start]
        pos = start
        while i < len(lines) and not lines[i].startswith("@@"):
            tag, body = lines[i][0], lines[i][1:]
            if tag in " -":
                assert old[pos] == body, (pos, body)
                pos += 1
            if tag in " +":
                out.append(body)
            i += 1
    return "".join(out + old[pos:])


def _changes(diff: str) -> str:
    import re

    lines = [x for x in diff.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))]
    text = "\n".join(lines) + "\n"
    return re.sub(r"sha256:[0-9a-f]{16}", "sha256:X", text)


def test_an_upgrade_re_decides_only_the_delta_and_lands_as_a_diff(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    old_text = (work / "suite.yaml").read_text()
    old_rows = (work / "suite.evidence.jsonl").read_text().splitlines()
    rc, diff, err = cli(
        capsys, "select", "run", "--since", "old.db", "--memory", "new.db",
        "--config", "suite.yaml", *SELECT, "--out", "new.yaml",
    )  # fmt: skip
    assert rc == 0, err
    # 4 added, 6 modified (body, helper x2, decorator x3); 3 unchanged not evaluated
    assert "evaluated 10 of 13 variants (4 added; 6 modified; 1 removed;" in err
    assert "1 kept as people's entries decide them" in err
    assert _changes(diff) == _changes(EXPECTED_DIFF)
    new_text = (work / "new.yaml").read_text()
    # the diff is built from the edits; applied to the old text it gives the new one
    # (its hunks may group otherwise than difflib's)
    assert _apply(old_text, diff) == new_text
    assert (work / "suite.yaml").read_text() == old_text  # --out: the input stays

    # what did not change is byte-identical: test_beta's block, the person's entry
    def block(text: str, path: str) -> str:
        start = text.index(f"    - path: ${{TORCH_ROOT}}/{path}")
        end = text.find("    - path:", start + 1)
        return text[start : end if end > 0 else None]

    assert block(new_text, "test/test_beta.py") == block(old_text, "test/test_beta.py")
    assert PERSON in new_text and "unlisted_test_mode: xfail  # reviewed\n" in new_text
    rows = {json.loads(x)["decision"]["variant_id"]: x for x in old_rows}
    new_rows = {
        json.loads(x)["decision"]["variant_id"]: x
        for x in (work / "new.evidence.jsonl").read_text().splitlines()
    }
    unchanged = [v for v in rows if "test_beta" in v]
    assert unchanged and all(new_rows[v] == rows[v] for v in unchanged)
    assert f"{ALPHA}::test_gone[dtype=float32]" in rows
    assert f"{ALPHA}::test_gone[dtype=float32]" not in new_rows
    # a person decides test_body: decision and evidence as they were, the new
    # fingerprint (before: the stale one, never flagged again)
    held, was = (json.loads(r[f"{ALPHA}::test_body[dtype=float32]"]) for r in (new_rows, rows))
    assert held.pop("held").startswith("a person's entry decides it")
    assert held.pop("changed") == ["body"] and held.pop("fingerprint") != was.pop("fingerprint")
    assert held == was
    assert f"    {ALPHA}::test_body[dtype=float32] (body)" in err
    gate = json.loads(new_rows[f"{ALPHA}::test_gate"])
    assert gate["changed"] == ["decorator"] and gate["decision"]["reason"] == "upstream_skip"
    assert json.loads(new_rows[f"{ALPHA}::test_double[dtype=float32]"])["changed"] == [
        "helper:_scale"
    ]

    # every variant ends where a full run on the new memory puts it (people's aside)
    rc, _, err = cli(capsys, "select", "run", "--memory", "new.db", *SELECT, "--out", "full.yaml")
    assert rc == 0, err
    vids = suites.variant_ids(suites.V2)
    want = modes(work / "full.yaml", work.dir, vids)
    got = modes(work / "new.yaml", work.dir, vids)
    assert got.pop(f"{ALPHA}::test_body[dtype=float32]") == "xfail"  # the person's
    want.pop(f"{ALPHA}::test_body[dtype=float32]")
    assert got == want

    # nothing changed since: nothing evaluated, the files stay as they are
    rc, diff, err = cli(
        capsys, "select", "run", "--since", "new.db", "--memory", "new.db",
        "--config", "new.yaml", *SELECT,
    )  # fmt: skip
    assert rc == 0, err
    assert "evaluated 0 of 13 variants" in err and diff == ""
    assert (work / "new.yaml").read_text() == new_text


def test_enabling_an_op_re_decides_exactly_the_variants_waiting_on_it(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = cli(capsys, "select", "run", "--memory", "new.db", *SELECT, "--out", "s.yaml")
    assert rc == 0, err
    before = (work / "s.evidence.jsonl").read_text().splitlines()
    rc, diff, err = cli(capsys, "select", "enable", "mm", "--ops", "ops.db", "--config", "s.yaml")
    assert rc == 0, err
    assert "evaluated 1 of 13 variants (the variants waiting on mm; now 1 mandatory_success)" in err
    assert _changes(diff) == (
        "-# backend: sup.txt; dtypes: float16,float32; ootest X\n"
        "+# backend: sup.txt; dtypes: float16,float32 + mm; ootest X\n"
        "-# decisions: 6 mandatory_success, 7 skip\n+# decisions: 7 mandatory_success, 6 skip\n"
        "-      # 3 variants: 1 mandatory_success, 2 skip\n"
        "+      # 3 variants: 2 mandatory_success, 1 skip\n"
        "-        # ootest select: ops_supported (1 names)\n"
        "-        #   all 1 ops it calls are declared\n"
        "+        # ootest select: ops_supported (2 names)\n"
        # the comment counts the names the entry lists now
        "+        #   all 1 ops it calls are declared\n"
        "+        #   all 2 ops it calls are declared\n"
        "+            - TestBeta::test_mm\n"
        # the skip was listed (unlisted is xfail): its entry leaves with its comment
        "-        # ootest select: op_unsupported:aten::mm (1 names)\n"
        "-        #   calls 2 ops; not declared: aten::mm\n"
        "-        - names:\n"
        "-            - TestBeta::test_mm\n"
        "-          mode: skip\n"
        "-          tags: [ootest-select]\n"
    ).replace("ootest X", "ootest " + _version())
    after = (work / "s.evidence.jsonl").read_text().splitlines()
    changed = [json.loads(x) for x in after if x not in before]
    assert [r["decision"]["variant_id"] for r in changed] == [
        "test/test_beta.py::TestBeta::test_mm"
    ]
    assert changed[0]["decision"]["reason"] == "ops_supported"
    assert changed[0]["changed"] == ["enabled:mm"] and changed[0]["evidence"]["missing_ops"] == []

    # cumsum: both variants that miss it are decided again; float64 still lacks its dtype
    rc, _, err = cli(capsys, "ops", "tests-for", "cumsum", "--db", "ops.db", "--json")
    calling = {v["variant_id"] for v in json.loads(_)["variants"]} if rc == 0 else set()
    rc, diff, err = cli(capsys, "select", "enable", "aten::cumsum", "--ops", "ops.db",
                        "--config", "s.yaml", "--out", "t.yaml")  # fmt: skip
    assert rc == 0, err
    rows = [json.loads(x) for x in (work / "t.evidence.jsonl").read_text().splitlines()]
    redone = {
        r["decision"]["variant_id"]: r["decision"]
        for r in rows
        if r.get("changed") == ["enabled:cumsum"]
    }
    assert (
        set(redone)
        == calling
        == {
            "test/test_gamma.py::TestGamma::test_cumsum[dtype=float32]",
            "test/test_gamma.py::TestGamma::test_cumsum[dtype=float64]",
        }
    )
    assert redone["test/test_gamma.py::TestGamma::test_cumsum[dtype=float64]"]["reason"] == (
        "dtype_unsupported:float64"
    )
    assert '+            - "TestGamma::test_cumsum[dtype=float32]"' in diff

    # an op no variant waits on: nothing changes; one nobody recorded: one error line
    rc, diff, err = cli(capsys, "select", "enable", "sum", "--ops", "ops.db", "--config", "t.yaml")
    assert rc == 0 and diff == "" and "no variant of t.yaml waited on sum" in err
    rc, _, err = cli(capsys, "select", "enable", "cumsun", "--ops", "ops.db", "--config", "t.yaml")
    assert rc == 2 and err.count("\n") == 1 and "similar: aten::cumsum" in err


def _version() -> str:
    from ootest.version import ootest_version

    return ootest_version()


def test_errors_are_one_line(work: Work, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "new.db", *SELECT)
    assert (rc, err) == (
        2,
        "ootest: error: select run --since: expected --memory NEW.db and --config SUITE.yaml "
        "(the memory to compare with, and the config to update)\n",
    )
    rc, _, err = cli(capsys, "select", "run", "--memory", "new.db", *SELECT)
    assert rc == 2 and "expected --out SUITE.yaml" in err
    (work / "suite.evidence.jsonl").unlink()
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "new.db",
                     "--config", "suite.yaml", *SELECT)  # fmt: skip
    assert rc == 2 and err.startswith("ootest: error: suite.evidence.jsonl: expected the evidence")
    rc, _, err = cli(capsys, "select", "run", "--since", "nope.db", "--memory", "new.db",
                     "--config", "suite.yaml", *SELECT)  # fmt: skip
    assert (rc, err) == (
        2,
        "ootest: error: --since nope.db: no such index; pass the memory the config was "
        "decided from\n",
    )


# ------------------------------------------------------------------ the patch engine
CONFIG = """\
# header
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/t.py
      unlisted_test_mode: mandatory_success
      tests:
        # ootest select: op_unsupported:aten::mm (2 names)
        #   calls 1 ops; not declared: aten::mm
        - names:
            - "T::test_a[dtype=float32]"
            - "T::test_b[dtype=float32]"
          mode: skip
          tags: [ootest-select]
        # ootest select: upstream_skip (1 names)
        - names:
            - T::test_c
          mode: skip
          tags: [ootest-select]
    - path: ${TORCH_ROOT}/test/u.py
      unlisted_test_mode: skip
"""
T = "test/t.py::T"


def d(vid: str, mode: str, reason: str) -> Decision:
    return Decision(vid, mode, reason, (f"why {reason}",))


def universe(*vids: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in vids:
        out.setdefault(v.partition("::")[0], []).append(v)
    return out


def test_a_name_leaves_its_entry_and_an_empty_entry_goes_with_its_comment() -> None:
    a, b, c = f"{T}::test_a[dtype=float32]", f"{T}::test_b[dtype=float32]", f"{T}::test_c"
    out = patch(
        CONFIG,
        {a: d(a, "mandatory_success", "ops_supported"), c: d(c, "mandatory_success", "x")},
        (),
        universe(a, b, c),
        {},
        "TORCH_ROOT",
    ).text
    assert out == CONFIG.replace('            - "T::test_a[dtype=float32]"\n', "").replace(
        "(2 names)", "(1 names)"
    ).replace(
        "        # ootest select: upstream_skip (1 names)\n        - names:\n"
        "            - T::test_c\n          mode: skip\n          tags: [ootest-select]\n",
        "",
    )


def test_a_new_decision_joins_its_entry_or_makes_one_in_order() -> None:
    a, b, c = f"{T}::test_a[dtype=float32]", f"{T}::test_b[dtype=float32]", f"{T}::test_c"
    e1, e2 = f"{T}::test_e[dtype=float32]", f"{T}::test_e[dtype=int64]"
    out = patch(
        CONFIG,
        {
            e1: d(e1, "skip", "op_unsupported:aten::mm"),
            e2: d(e2, "xfail", "no_evidence"),
        },
        (),
        universe(a, b, c, e1, e2),
        {},
        "TORCH_ROOT",
    ).text
    assert out == CONFIG.replace(
        '            - "T::test_b[dtype=float32]"\n',
        '            - "T::test_b[dtype=float32]"\n            - "T::test_e[dtype=float32]"\n',
    ).replace("(2 names)", "(3 names)").replace(
        "      tests:\n",
        "      tests:\n        # ootest select: no_evidence (1 names)\n"
        "        #   why no_evidence\n"
        '        - names:\n            - "T::test_e[dtype=int64]"\n          mode: xfail\n'
        "          tags: [ootest-select]\n",
        1,
    )


def test_a_whole_template_decided_alike_is_named_once_and_a_block_gains_tests() -> None:
    u1, u2 = "test/u.py::U::test_x[dtype=float32]", "test/u.py::U::test_x[dtype=int64]"
    out = patch(
        CONFIG,
        {
            u1: d(u1, "mandatory_success", "ops_supported"),
            u2: d(u2, "mandatory_success", "ops_supported"),
        },
        (),
        universe(u1, u2),
        {},
        "TORCH_ROOT",
    ).text
    assert out == CONFIG + (
        "      tests:\n        # ootest select: ops_supported (1 names)\n"
        "        #   why ops_supported\n        - names:\n            - U::test_x\n"
        "          mode: mandatory_success\n          tags: [ootest-select]\n"
    )


def test_a_variant_whose_entry_lost_its_name_is_matched_again() -> None:
    # a leaves the skip entry naming it exactly; the template name of another
    # generated entry then decides it, as it should now: no name is added for it
    a = f"{T}::test_a[dtype=float32]"
    text = CONFIG.replace(
        "          tags: [ootest-select]\n    - path: ${TORCH_ROOT}/test/u.py",
        "          tags: [ootest-select]\n"
        "        # ootest select: no_evidence (1 names)\n"
        "        - names:\n            - T::test_a\n          mode: xfail\n"
        "          tags: [ootest-select]\n    - path: ${TORCH_ROOT}/test/u.py",
    )
    b, c = f"{T}::test_b[dtype=float32]", f"{T}::test_c"
    out = patch(
        text, {a: d(a, "xfail", "no_evidence")}, (), universe(a, b, c), {}, "TORCH_ROOT"
    ).text
    assert out == text.replace('            - "T::test_a[dtype=float32]"\n', "").replace(
        "(2 names)", "(1 names)"
    )


def test_an_untouched_block_is_still_checked() -> None:
    # the exact name joins the skip entry it is already in (no edit), but a later
    # generated entry names a too (another spelling): the check refuses, as it does
    # when the edited block is composed again
    a = f"{T}::test_a[dtype=float32]"
    text = CONFIG.replace(
        "          tags: [ootest-select]\n        # ootest select: upstream_skip",
        "          tags: [ootest-select]\n"
        "        # ootest select: no_evidence (1 names)\n"
        "        - names:\n            - T::test_a[dtype=float32,]\n          mode: xfail\n"
        "          tags: [ootest-select]\n        # ootest select: upstream_skip",
    )
    b, c = f"{T}::test_b[dtype=float32]", f"{T}::test_c"
    with pytest.raises(UserError, match=r"test_a\[dtype=float32\] \(skip\).*it would be xfail"):
        patch(
            text,
            {a: d(a, "skip", "op_unsupported:aten::mm")},
            (),
            universe(a, b, c),
            {},
            "TORCH_ROOT",
        )


def test_removed_variants_leave_only_names_that_named_exactly_them() -> None:
    a, b, c = f"{T}::test_a[dtype=float32]", f"{T}::test_b[dtype=float32]", f"{T}::test_c"
    people = CONFIG.replace(
        "      tests:\n",
        "      tests:\n        - names:\n            - re:test_b\n          mode: xfail\n",
        1,
    )
    # b is gone, but a person's pattern names it: the pattern stays; c's template is
    # gone entirely: its name goes; a file with no variant left loses its block
    out = patch(people, {}, (b, c, "test/u.py::U::test_y"), universe(a), {}, "TORCH_ROOT").text
    assert "re:test_b" in out and "T::test_c" not in out and '"T::test_b[' not in out
    assert "test/u.py" not in out and '"T::test_a[dtype=float32]"' in out


def test_a_file_listed_by_a_glob_is_left_to_people() -> None:
    text = CONFIG.replace("${TORCH_ROOT}/test/u.py", "${TORCH_ROOT}/test/u*.py")
    u1 = "test/u.py::U::test_x[dtype=float32]"
    r = patch(
        text, {u1: d(u1, "mandatory_success", "ops_supported")}, (), universe(u1), {}, "TORCH_ROOT"
    )
    assert r.text == text and r.unplaceable == ["test/u.py"]


def test_a_re_decided_evidence_line_is_what_select_run_writes() -> None:
    from ootest.select.refine import evidence_row
    from ootest.select.rules import Evidence, Result, decide
    from ootest.select.since import _row

    ev = Evidence(
        "t.py::T::test_a[dtype=float32]",
        dtypes=("float32",),
        ops=("aten::mm",),
        missing_ops=("aten::mm",),
        cpu=Result("failed", "E:1", "E: x", 1.5),
        observed=[Result("passed", at=2.0)],
    )
    d = decide(ev)
    row = json.loads(_row(ev, d, "fp", ["body"]))
    assert row.pop("changed") == ["body"]
    assert json.dumps(row, sort_keys=True) == json.dumps(evidence_row(ev, d, "fp"), sort_keys=True)


@pytest.mark.parametrize(
    "text",
    [
        CONFIG,
        CONFIG.replace("    - path", "  - path").replace("\n      ", "\n    "),  # dash at key
        CONFIG + "  global:\n    supported_dtypes: [float32]\n# the end\n",
        CONFIG.replace("    - path: ${TORCH_ROOT}/test/u.py", "    # people\n\n    - path: x"),
        "# h\ntest_suite_config:\n  files: []\n",
        # comments at any indentation between items, a blank line, a key after files
        CONFIG.replace(
            "    - path: ${TORCH_ROOT}/test/u.py",
            "# at column 0\n  # at 2\n\n      # at 6\n    - path: ${TORCH_ROOT}/test/u.py",
        )
        + "other: 1\n",
        CONFIG.rstrip("\n"),  # the last line without its newline
        # CRLF line ends (read by composing, unless the key line has a comment)
        CONFIG.replace("\n", "\r\n"),
        CONFIG.replace("test_suite_config:", "test_suite_config:  # c").replace("\n", "\r\n"),
    ],
)
def test_files_items_are_found_without_composing_the_whole_config(text: str) -> None:
    from ootest.select.patch import _lines, _split, _split_composed

    lines = _lines(text)
    assert _split(text, lines) == _split_composed(lines)


def test_the_diff_built_from_edits_is_the_one_difflib_finds() -> None:
    import random

    from ootest.select.patch import _Lines

    rng = random.Random(7)
    for _ in range(200):
        lines = [f"line {i}" for i in range(rng.randrange(1, 40))]
        ed = _Lines(lines)
        k = 0
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(lines))
            what = rng.choice(["drop", "repl", "before", "after", "tail"])
            k += 1
            if what == "drop":
                ed.drop(i, min(len(lines), i + rng.randrange(1, 4)))
            elif what == "repl":
                ed.repl[i] = f"changed {k}"
            elif what == "before":
                ed.before[i].append(f"new {k}")
            elif what == "after":
                ed.after[i].append(f"new {k}")
            else:
                ed.tail.append(f"new {k}")
        old = "".join(x + "\n" for x in lines)
        new = ed.text()
        want = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a", "b"))
        assert ed.diff("a", "b") == want, (lines, ed.repl, ed.before, ed.after, ed.tail)


def test_the_sidecar_is_edited_by_binary_search_like_a_sorted_dict(tmp_path: Path) -> None:
    import random

    from ootest.select.since import _Sidecar

    rng = random.Random(3)
    names = sorted(
        {f"t{rng.randrange(50)}.py::T::test_{rng.choice('ab')}[x={rng.randrange(99)}]"
         for _ in range(300)}
        | {'t7.py::T::test_q[s="quoted"]', "t7.py::T::test_é[x=1]"}
    )  # fmt: skip
    rows = {
        v: json.dumps({"decision": {"mode": rng.choice(["skip", "xfail"]), "variant_id": v}})
        for v in names
    }
    (tmp_path / "s.evidence.jsonl").write_text("".join(rows[v] + "\n" for v in names))
    side = _Sidecar(tmp_path / "s.yaml")
    for v in [*names, "t0.py::T::missing", "zzz", ""]:
        found, start, end = side.locate(v)
        assert found == (v in rows)
        if found:
            assert side.data[start:end].decode() == rows[v]
    assert side.rows_of("t7.py") == Counter(
        json.loads(rows[v])["decision"]["mode"] for v in names if v.startswith("t7.py::")
    )
    # old lines: runs of neighbours (found on the next line), gaps, IDs JSON escapes
    for asked in [names[10:60], names[::7], [*names, "t0.py::T::missing", "zzz"]]:
        fresh = _Sidecar(tmp_path / "s.yaml")
        assert fresh.old(asked) == {
            v: (rows[v].encode(), json.loads(rows[v])["decision"]["mode"])
            for v in asked
            if v in rows
        }
        fresh.close()
    want = dict(rows)
    for v in rng.sample(names, 40):
        side.edits[v], want[v] = None, ""
    for v in ["t0.py::T::new", "t99.py::T::new", *rng.sample(names, 20)]:
        line = json.dumps({"decision": {"mode": "skip", "variant_id": v}, "x": 1})
        side.edits[v], want[v] = line.encode(), line
    assert side.text().decode() == "".join(want[v] + "\n" for v in sorted(want) if want[v])


def test_the_sidecar_written_to_a_file_is_its_edited_text(tmp_path: Path) -> None:
    # write_to copies kept stretches file to file (copy_file_range where the file
    # system has it); the bytes must be those text() builds in memory
    from ootest.select.since import _Sidecar

    names = sorted(f"t{i:03d}.py::T::test_a[x={j}]" for i in range(40) for j in range(30))
    rows = {v: json.dumps({"decision": {"mode": "skip", "variant_id": v}}) for v in names}
    (tmp_path / "s.evidence.jsonl").write_text("".join(rows[v] + "\n" for v in names))
    side = _Sidecar(tmp_path / "s.yaml")
    want = dict(rows)
    for v in names[1::97]:
        side.edits[v], want[v] = None, ""
    for v in [names[0], names[5], names[6], "t999.py::T::new", *names[500:520]]:
        line = json.dumps({"decision": {"mode": "xfail", "variant_id": v}})
        side.edits[v], want[v] = line.encode(), line
    with open(tmp_path / "out.jsonl", "wb", buffering=0) as f:
        side.write_to(f)
    side.close()
    text = "".join(want[v] + "\n" for v in sorted(want) if want[v])
    assert (tmp_path / "out.jsonl").read_text() == text


def test_the_device_delta_comes_from_the_diff_pass(built: Path, tmp_path: Path) -> None:
    # device flags flipped both ways (one with its fingerprint changed too), device,
    # plain and other-device variants added and removed: what entered and left is
    # what comparing the two tables row by row finds (Note [Selectable variants]: a
    # flag flip of a plain ID is a modification, never a removal)
    import sqlite3

    from ootest.memory import diff_indexes
    from ootest.select.gather import device_delta, selectable

    old, new = tmp_path / "old.db", tmp_path / "new.db"
    shutil.copy(built / "new.db", old)
    shutil.copy(built / "new.db", new)
    cpu = "test/x.py::X::test_cpu[device=cpu]"  # another device's instantiation
    with sqlite3.connect(old) as con:
        ids = [r[0] for r in con.execute("SELECT id FROM variants ORDER BY id")]
        assert len(ids) >= 6
        con.execute("UPDATE variants SET device_variant = 0 WHERE id IN (?, ?)", ids[:2])
        con.execute("DELETE FROM variants WHERE id = ?", (ids[5],))
        for vid, dv in (
            ("test/x.py::X::test_gone", 1),
            ("test/x.py::X::test_plain_gone", 0),
            ("test/x.py::X::test_host_gone[device=cpu]", 0),
            (cpu, 0),
        ):
            con.execute(
                "INSERT INTO variants (id, cls, dtypes, device_variant, fingerprint) "
                "VALUES (?, 'X', '', ?, 'f')",
                (vid, dv),
            )
    with sqlite3.connect(new) as con:
        con.execute("UPDATE variants SET device_variant = 0 WHERE id = ?", (ids[2],))
        con.execute("UPDATE variants SET fingerprint = 'other' WHERE id IN (?, ?)", ids[1:3:1])
        con.execute("UPDATE variants SET device_variant = 0 WHERE id = ?", (ids[4],))
        con.execute(
            "INSERT INTO variants (id, cls, dtypes, device_variant, fingerprint) "
            "VALUES (?, 'X', '', 1, 'f')",
            (cpu,),
        )

    def table(db: Path) -> dict[str, tuple[int, str]]:
        with sqlite3.connect(db) as con:
            q = "SELECT id, device_variant, fingerprint FROM variants"
            return {r[0]: (r[1], r[2]) for r in con.execute(q)}

    a, b = table(old), table(new)
    diff = diff_indexes(old, new)
    assert diff.added == sorted(set(b) - set(a)) and diff.removed == sorted(set(a) - set(b))
    both = a.keys() & b.keys()
    assert [m.id for m in diff.modified] == sorted(v for v in both if a[v] != b[v])
    flipped = {m.id: m.reasons for m in diff.modified if "device" in m.reasons}
    assert set(flipped) == {v for v in both if a[v][0] != b[v][0]} >= {*ids[:3], ids[4]}
    assert flipped[ids[0]] == ("device",) and flipped[ids[2]] == ("fingerprint", "device")
    dev = device_delta(new, diff)

    def sel(db: dict[str, tuple[int, str]], v: str) -> bool:
        return v in db and selectable(v, bool(db[v][0]))

    assert dev.entered == sorted(v for v in b if sel(b, v) and not sel(a, v)) == [ids[5], cpu]
    assert dev.left == sorted(v for v in a if sel(a, v) and not sel(b, v))
    assert {"test/x.py::X::test_gone", "test/x.py::X::test_plain_gone"} <= set(dev.left)
    assert "test/x.py::X::test_host_gone[device=cpu]" not in dev.left
    assert dev.total == sum(1 for v in b if sel(b, v))


@pytest.mark.parametrize("target", ["flag", "config"])
def test_a_new_replay_re_decides_the_variants_whose_calls_it_judges_otherwise(
    work: Work, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """Note [Incremental selection]: only the backend changed (the same memory twice),
    a new replay says one call now fails: exactly the variant making it is decided
    again; the same replay again changes nothing. The replay is checked against the
    device the decisions are for (Note [Evidence origins]): ``--device``, else the
    config's ``device:``."""
    from ootest.device.calls import example_key
    from ootest.opmap.replay import Replay, write_replay
    from ootest.opmap.store import OpStore
    from ootest.select.writer import file_digest

    beta = "test/test_beta.py::TestBeta::test_add[dtype=float32]"
    call = '{"args":[{"T":"float32","dev":true,"shape":[300]}],"kwargs":{}}'
    with OpStore.open(work / "ops.db") as s:
        ingest_records(
            s,
            [
                {"kind": "provenance", "torch_version": "2.13.0", "device": "emu", "time": 5.0},
                {"kind": "example", "variant_id": beta, "op": "aten::add.Tensor", "call": call},
            ],
            source="more",
        )
    key = example_key("aten::add.Tensor", call)

    def replay(status: str, name: str) -> None:
        rep = Replay({"kind": "replay", "device": "emu:faulty"})
        rep.results[key] = {"kind": "call", "key": key, "op": "aten::add.Tensor",
                            "status": status, "detail": "TILE_OVERFLOW"}  # fmt: skip
        write_replay(work / name, rep)

    replay("ok", "r0.jsonl")
    replay("failed", "r1.jsonl")
    before = (work / "suite.evidence.jsonl").read_text().splitlines()
    since = [
        "select",
        "run",
        "--since",
        "old.db",
        "--memory",
        "old.db",
        "--config",
        "suite.yaml",
    ]
    if target == "flag":
        since += ["--device", "emu:faulty"]  # the device the replay ran on, --supported's ops
    else:
        text = (work / "suite.yaml").read_text()
        (work / "suite.yaml").write_text(
            text.replace("test_suite_config:\n", "test_suite_config:\n  device: emu:faulty\n", 1)
        )
    rc, _, err = cli(capsys, *since, *SELECT, "--replay", "r0.jsonl", "--out", "a.yaml")
    assert rc == 0, err  # every call fine, as the config already says: nothing to do
    assert "evaluated 0 of" in err and "0 by the replay" in err
    rc, diff, err = cli(capsys, *since, *SELECT, "--replay", "r1.jsonl", "--out", "b.yaml")
    assert rc == 0, err
    assert "evaluated 1 of" in err and "1 by the replay" in err
    rows = {json.loads(x)["decision"]["variant_id"]: x for x in before}
    new = {
        json.loads(x)["decision"]["variant_id"]: x
        for x in (work / "b.evidence.jsonl").read_text().splitlines()
    }
    moved = json.loads(new.pop(beta))
    assert moved["changed"] == ["replay"]
    assert moved["decision"]["reason"] == "replay_failed:aten::add.Tensor"
    assert new == {v: x for v, x in rows.items() if v != beta}  # the rest byte-identical
    # decided without a replay, the config gains the line that names this one
    assert f"+# replayed calls {file_digest(work / 'r1.jsonl')}\n" in diff
    assert f"# replayed calls {file_digest(work / 'r1.jsonl')}\n" in (work / "b.yaml").read_text()
    rc, _, err = cli(capsys, *since, *SELECT, "--replay", "r1.jsonl", "--config", "b.yaml")
    assert rc == 0, err
    assert "evaluated 0 of" in err  # named: not read again
    # a config whose header names this replay was decided with it: it is not read again
    text = (work / "suite.yaml").read_text()
    named = text.replace("# decisions:", f"# replayed calls {file_digest(work / 'r1.jsonl')}\n"
                         "# decisions:", 1)  # fmt: skip
    assert named != text
    (work / "suite.yaml").write_text(named)
    rc, _, err = cli(capsys, *since, *SELECT, "--replay", "r1.jsonl", "--out", "c.yaml")
    assert rc == 0, err
    assert "evaluated 0 of" in err


def test_a_new_replay_re_decides_an_error_path_that_now_shows_the_kernel(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 33 item 4: test_mm calls mm, which the backend does not declare. Its
    recorded call raises on the CPU; a replay where the device raised only a
    missing kernel's NotImplementedError shows the test's expectation, not the op
    (no_evidence); a new build whose mm raises the CPU's own RuntimeError has the
    kernel (ops_supported). The new replay decides the variant again, although mm
    is neither missing nor covered in its evidence."""
    from ootest.device.calls import example_key
    from ootest.opmap.replay import Replay, write_replay

    mm = "test/test_beta.py::TestBeta::test_mm"
    arg = {"T": "float32", "dev": True, "shape": [2, 3]}
    call = json.dumps({"args": [arg, arg], "kwargs": {}})
    rec = {"kind": "example", "variant_id": mm, "op": "aten::mm", "call": call}
    # the fixture's capture with the call test_mm makes written down in it
    (work / "ops.db").unlink()
    suites.write_capture(work / "base.jsonl", [suites.V1, suites.V2])
    base = (work / "base.jsonl").read_text() + json.dumps(rec) + "\n"
    (work / "base.jsonl").write_text(base)
    assert main(["ops", "ingest", "base.jsonl", "--db", "ops.db"]) == 0
    key = example_key("aten::mm", call)

    def replay(device_error: str, name: str) -> None:
        rep = Replay({"kind": "replay", "device": "emu:faulty"})
        rep.results[key] = {"kind": "call", "key": key, "op": "aten::mm", "status": "ok",
                            "error_path": True, "error": device_error.partition(":")[0],
                            "cpu_error": "RuntimeError: mat1 and mat2 shapes cannot be multiplied",
                            "device_error": device_error, "same_message": False}  # fmt: skip
        write_replay(work / name, rep)

    replay("NotImplementedError: Could not run 'aten::mm' with arguments", "r0.jsonl")
    replay("RuntimeError: mm: shapes do not match", "r1.jsonl")
    since = ["select", "run", "--since", "old.db", "--memory", "old.db", "--device", "emu:faulty"]
    rc, _, err = cli(capsys, *since, "--config", "suite.yaml", *SELECT, "--replay", "r0.jsonl",
                     "--out", "a.yaml")  # fmt: skip
    assert rc == 0, err

    def decision(config: str) -> tuple[str, str]:
        side = (work / config.replace(".yaml", ".evidence.jsonl")).read_text().splitlines()
        d = next(json.loads(x)["decision"] for x in side if mm in x)
        return d["mode"], d["reason"]

    assert decision("a.yaml") == ("xfail", "no_evidence")
    rc, _, err = cli(capsys, *since, "--config", "a.yaml", *SELECT, "--replay", "r1.jsonl",
                     "--out", "b.yaml")  # fmt: skip
    assert rc == 0, err
    assert "evaluated 1 of" in err and "1 by the replay" in err
    assert decision("b.yaml") == ("mandatory_success", "ops_supported")


# ------------------------------------------------ history across changes (issue 34)
def _results(path: Path, vid: str, outcome: str, times: list[float]) -> Path:
    recs = [{"kind": "result", "variant_id": vid, "outcome": outcome, "time": t,
             "phase": "call"} for t in times]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_a_gate_added_upstream_never_loses_to_passes_seen_before_it(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    """test_gate passed twice on the device, then upstream added @onlyCUDA: the
    passes were of a test without the gate (Note [History across changes]); the
    upgrade wrote 'mandatory_success observed_pass:2 (overrides upstream_skip)'."""
    gate = f"{ALPHA}::test_gate"
    for at in (1.0, 2.0):  # two runs
        _results(work / "r.jsonl", gate, "passed", [at])
        rc, _, err = cli(capsys, "select", "refine", "suite.yaml", "--results", "r.jsonl")
        assert rc == 0, err
    before = json.loads(sidecar_rows(work / "suite.evidence.jsonl")[gate])
    assert [r["outcome"] for r in before["evidence"]["observed"]] == ["passed", "passed"]
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "new.db",
                     "--config", "suite.yaml", *SELECT)  # fmt: skip
    assert rc == 0, err
    row = json.loads(sidecar_rows(work / "suite.evidence.jsonl")[gate])
    assert (row["decision"]["mode"], row["decision"]["reason"]) == ("skip", "upstream_skip")
    assert row["evidence"]["observed"] == []
    assert [r["outcome"] for r in row["history"]["observed"]] == ["passed", "passed"]
    assert row["history"]["why"] == (
        "the test's decorator changed; an upstream gate was added ("
        + row["evidence"]["upstream_skip"]
        + ")"
    )
    assert "onlyCUDA" in row["evidence"]["upstream_skip"]
    assert modes(work / "suite.yaml", work.dir, [gate]) == {gate: "skip"}


def sidecar_rows(path: Path) -> dict[str, str]:
    return {json.loads(x)["decision"]["variant_id"]: x for x in path.read_text().splitlines()}


# ------------------------------------------------------- files not collected (issue 34)
def test_a_file_that_stops_importing_is_not_collected_not_removed(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    """Note [Files not collected]: test_beta.py fails to import in the new version
    (index diff reported its variants removed, and the upgrade dropped their
    decisions and history); they stay as they were, and the upgrade says so."""
    from ootest.memory import BuildOptions, build_index
    from ootest.memory._collect import FileCollection

    root = suites.write(work / "broken", new=False)
    (root / "test_beta.py").write_text(suites.BETA + "\nimport not_a_module_here\n")
    inner = suites.collector(suites.V1)

    def collect(files, settings, jobs, advance):  # type: ignore[no-untyped-def]
        out, warnings = inner(files, settings, jobs, advance)
        beta = "test/test_beta.py"
        if beta in out:
            out[beta] = FileCollection(beta, error="ModuleNotFoundError: not_a_module_here")
        return out, warnings

    build_index(BuildOptions(roots=(root,), db=work / "broken.db", torch_db=False),
                collector=collect)  # fmt: skip
    before = sidecar_rows(work / "suite.evidence.jsonl")
    beta = sorted(v for v in before if v.startswith("test/test_beta.py::"))
    assert len(beta) == 3
    rc, out, err = cli(capsys, "index", "diff", "old.db", "broken.db")
    assert rc == 0, err
    assert out.splitlines()[0] == (
        "0 of 10 variants changed (3 in 1 file not collected, kept as they were)"
    )
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "broken.db",
                     "--config", "suite.yaml", *SELECT, "--out", "up.yaml")  # fmt: skip
    assert rc == 0, err
    assert (
        "  not collected: test/test_beta.py (ModuleNotFoundError: not_a_module_here): "
        "3 variants keep their decisions and history until their files collect again\n"
    ) in err
    assert "removed" in err and "0 removed" in err
    after = sidecar_rows(work / "up.evidence.jsonl")
    assert {v: after[v] for v in beta} == {v: before[v] for v in beta}
    config = (work / "up.yaml").read_text()
    body = config.partition("test_suite_config:")[2]
    assert body == (work / "suite.yaml").read_text().partition("test_suite_config:")[2]
    rc, _, err = cli(capsys, "config", "validate", "up.yaml", "--no-paths")
    assert rc == 0, err


def test_no_upgrade_writes_a_config_that_lists_no_file(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    """A memory in which every file of the config is gone: --since wrote
    'files:' with nothing under it (rc 0; config validate rejects it, and a refresh
    failed at its run step); a removed file's block left its '# 0 variants' line."""
    rc, _, err = cli(capsys, "select", "run", "--memory", "old.db", *SELECT, "--out", "plain.yaml")
    assert rc == 0, err  # no person's entry: nothing keeps a block
    zeta = work / "zeta" / "test"
    zeta.mkdir(parents=True)
    (zeta / "test_zeta.py").write_text(suites.HEAD)
    suites.build_memory(zeta, work / "z.db", {})
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "z.db",
                     "--config", "plain.yaml", *SELECT, "--out", "up.yaml")  # fmt: skip
    assert (rc, err) == (
        2,
        "ootest: error: up.yaml: every file of plain.yaml left (its 10 variants were "
        "removed) and the config would list no file, which 'ootest config validate' "
        "rejects; nothing written. Check --memory (a memory of another tree?), or decide "
        "the new tree with a full 'ootest select run'\n",
    )
    assert not (work / "up.yaml").exists()
    # only gamma left: the other blocks go whole
    gamma = suites.write(work / "gamma", new=True)
    (gamma / "test_alpha.py").unlink()
    (gamma / "test_beta.py").unlink()
    suites.build_memory(
        gamma, work / "g.db", {"test/test_gamma.py": suites.V2["test/test_gamma.py"]}
    )
    rc, _, err = cli(capsys, "select", "run", "--since", "old.db", "--memory", "g.db",
                     "--config", "plain.yaml", *SELECT, "--out", "up.yaml")  # fmt: skip
    assert rc == 0, err
    text = (work / "up.yaml").read_text()
    assert "# 0 variants" not in text and "test_alpha.py" not in text
    rc, _, err = cli(capsys, "config", "validate", "up.yaml", "--no-paths")
    assert rc == 0, err


def test_an_upgrade_names_the_backend_it_was_decided_for_now(
    work: Work, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refresh under a new torch or backend build: the header's ``backend:`` line
    says what was probed or declared now, as a full selection would (it said the
    old build's, torch version included)."""
    other = [*SELECT[: SELECT.index("--dtypes") + 1], "float32,int64,bool",
             *SELECT[SELECT.index("--dtypes") + 2 :]]  # fmt: skip
    rc, _, err = cli(
        capsys, "select", "run", "--since", "old.db", "--memory", "new.db",
        "--config", "suite.yaml", *other, "--out", "new.yaml",
    )  # fmt: skip
    assert rc == 0, err
    rc, _, err = cli(capsys, "select", "run", "--memory", "new.db", *other, "--out", "full.yaml")
    assert rc == 0, err

    def backend(name: str) -> str:
        text = (work / name).read_text()
        return next(x for x in text.splitlines() if x.startswith("# backend: "))

    assert backend("new.yaml") == backend("full.yaml") != backend("suite.yaml")
