"""Op x dtype coverage (Note [Op coverage]) and the Markdown job summary (Note
[Escaping test-derived text]): numbers equal what the op map and the results say;
hostile names and messages stay text. No torch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ootest.cli.main import main
from ootest.opmap.ingest import ingest_records
from ootest.opmap.store import OpStore
from ootest.record.results import RunData
from ootest.runner.coverage import coverage, load_op_map
from ootest.runner.render import html_report
from ootest.runner.summary import job_summary, md

PROV = {
    "kind": "provenance", "torch_version": "2.13.0", "torch_git": "abc", "device": "emu",
    "profile": "full", "ootest_version": "0.1.0", "time": 1.0,
}  # fmt: skip
F = "test/test_x.py::TestX::"
V = {n: f"{F}test_{n}" for n in ("a", "b", "c", "d", "e", "gone")}
# a: sort (float32, int64) + add (float32) -> passed
# b: sort (float32) -> failed, missing kernel sort
# c: add (float16)  -> xfailed;  d: add -> skipped (op_unsupported); e: sort -> not run
# gone: another file's variant -> left out (not a file of this run)
CALLS: dict[str, dict[str, list[str]]] = {
    V["a"]: {"aten::sort": ["float32", "int64"], "aten::add.Tensor": ["float32"]},
    V["b"]: {"aten::sort": ["float32"]},
    V["c"]: {"aten::add.Tensor": ["float16"]},
    V["d"]: {"aten::add.Tensor": ["float32"]},
    V["e"]: {"aten::sort": ["float32"]},
    "test/test_other.py::T::test_z": {"aten::sort": ["float32"]},
}


def _op_map(path: Path) -> Path:
    recs: list[dict[str, Any]] = [PROV]
    for vid, calls in CALLS.items():
        f = vid.split("::", 1)[0]
        recs.append({"kind": "ops", "variant_id": vid, "nodeid": vid, "file": f,
                     "mode": "eager", "ops": dict.fromkeys(calls, 1)})  # fmt: skip
        recs += [{"kind": "dtypes", "variant_id": vid, "op": op, "dtypes": [dt]}
                 for op, dts in calls.items() for dt in dts]  # fmt: skip
        recs.append({"kind": "stop", "variant_id": vid, "op": None, "outcome": "passed",
                     "error": None})  # fmt: skip
    with OpStore.open(path, create=True) as s:
        ingest_records(s, recs, source="test")
    return path


def _rec(vid: str, outcome: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "result", "variant_id": vid, "file": vid.split("::")[0],
            "outcome": outcome, **kw}  # fmt: skip


RESULTS = [
    _rec(V["a"], "passed", mode="mandatory_success"),
    _rec(
        V["b"],
        "failed",
        mode="mandatory_success",
        message="NotImplementedError: Could not run 'aten::sort' with arguments from the "
        "'PrivateUse1' backend",
    ),
    _rec(
        V["c"],
        "xfailed",
        mode="xfail",
        reason="replay_failed:aten::add.Tensor",
        code="replay_failed",
        message="RuntimeError: add went wrong",
    ),
    _rec(
        V["d"],
        "skipped",
        mode="skip",
        reason="op_unsupported:aten::add",
        code="op_unsupported",
        evidence=["calls aten::add, not declared"],
    ),
    _rec(f"{F}test_unknown", "passed", mode="mandatory_success"),  # not in the op map
]


def test_coverage_numbers_equal_the_op_map_and_the_results(tmp_path: Path) -> None:
    db = _op_map(tmp_path / "ops.db")
    cov = coverage(RunData.from_records(RESULTS), *load_op_map(db), source="ops.db")
    got = {o.op: o.to_json() for o in cov.ops}
    assert list(got) == ["aten::add.Tensor", "aten::sort"]  # 3 variants each; by name
    sort, add = got["aten::sort"], got["aten::add.Tensor"]
    assert {k: sort[k] for k in ("variants", "passed", "failed", "xfailed", "skipped",
                                 "not_run")} == {
        "variants": 3, "passed": 1, "failed": 1, "xfailed": 0, "skipped": 0, "not_run": 1,
    }  # fmt: skip
    assert sort["pass_rate"] == 0.5
    assert sort["dtypes"]["float32"] == {
        "passed": 1, "failed": 1, "xfailed": 0, "skipped": 0, "not_run": 1,
    }  # fmt: skip
    assert sort["dtypes"]["int64"]["passed"] == 1 and sum(sort["dtypes"]["int64"].values()) == 1
    assert sort["failures"] == [{"cause": "missing kernel aten::sort", "count": 1}]
    assert {k: add[k] for k in ("variants", "passed", "xfailed", "skipped")} == {
        "variants": 3, "passed": 1, "xfailed": 1, "skipped": 1,
    }  # fmt: skip
    assert add["dtypes"]["float16"]["xfailed"] == 1 and add["pass_rate"] == 0.5
    assert cov.to_json()["variants"] == {
        "results": 5, "in_op_map": 4, "not_in_op_map": 1, "not_run": 1,
    }  # fmt: skip
    assert cov.dtypes == ["float16", "float32", "int64"]


def test_report_format_coverage_json_table_and_html(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _op_map(tmp_path / "ops.db")
    res = tmp_path / "r.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in RESULTS))
    assert main(["report", str(res), "--format", "coverage", "--ops", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [o["op"] for o in data["ops"]] == ["aten::add.Tensor", "aten::sort"]
    assert main(["report", str(res), "--format", "coverage", "--ops", str(db)]) == 0
    out = capsys.readouterr().out
    assert "aten::sort" in out and "1 variants of these files in the op map have no" in out
    html_out = tmp_path / "r.html"
    assert (
        main(["report", str(res), "--format", "html", "--ops", str(db), "-o", str(html_out)]) == 0
    )
    page = html_out.read_text()
    assert "<table id='coverage-ops' class='sortable'>" in page
    assert "<tr data-op='aten::sort'>" in page and "<script>" in page
    # errors: coverage without an op map, a missing op map
    assert main(["report", str(res), "--format", "coverage"]) == 2
    assert "add --ops DB" in capsys.readouterr().err
    assert main(["report", str(res), "--format", "coverage", "--ops", str(tmp_path / "no.db")]) == 2
    assert "expected an op map index" in capsys.readouterr().err


HOSTILE = (
    "test_x[<script>alert(1)</script>]|`rm -rf`|![img](http://evil.example/x.png)"
    "\n::set-output name=x::y\r\n::error::boom @maintainer [link](javascript:alert(1)) "
    "<!-- --> &amp; \x1b[31mred\x07 \u202eevil\u202c **bold** # head"
)


def _hostile_run() -> RunData:
    return RunData.from_records(
        [
            _rec(f"{F}{HOSTILE}", "failed", mode="mandatory_success", message="E   " + HOSTILE),
            _rec(f"{F}t2", "skipped", mode="skip", reason=HOSTILE),
            _rec(
                f"{F}t3",
                "skipped",
                mode="skip",
                reason="op_unsupported:" + HOSTILE,
                code="op_unsupported",
                evidence=[HOSTILE],
            ),
            _rec(f"{F}t4", "xfailed", mode="xfail", reason=HOSTILE, message=HOSTILE),
        ]
    )


def _inert_markdown(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line
    assert "::" not in text.replace("\\:\\:", "")  # no workflow command anywhere
    for bad in ("<script", "<!--", "](http://evil", "](javascript", "![", "@maintainer", "\x1b",
                "\x07", "\u202e", "**bold**"):  # fmt: skip
        assert bad not in text, bad
    assert not re.search(r"(?<!\\)`", text)  # no code span opens
    # every table row keeps its cells: a '|' of the text is escaped
    for line in text.splitlines():
        if line.startswith("| "):
            cells = re.split(r"(?<!\\)\|", line)
            assert len(cells) in (4, 5, 6, 9), line


def test_job_summary_escapes_every_test_derived_text() -> None:
    text = job_summary(_hostile_run(), "r.jsonl", artifact_url="https://x.example/a)(b<")
    _inert_markdown(text)
    assert "## ootest: r\\.jsonl" in text
    assert "[report, JUnit and results](https://x.example/a%29%28b%3C)" in text
    assert "| failed | 1 |" in text and "| skipped | 2 |" in text
    # an artifact URL that is not http(s) is left out
    assert "](javascript" not in job_summary(_hostile_run(), "r", artifact_url="javascript:x")
    assert "a b" not in job_summary(_hostile_run(), "r", artifact_url="https://x/a b")
    assert md("a\nb\tc") == "a b c" and len(md("x" * 1000)) == 200


def test_html_report_escapes_every_test_derived_text(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    recs: list[dict[str, Any]] = [PROV, {"kind": "ops", "variant_id": f"{F}{HOSTILE}",
            "nodeid": "x", "file": "test/test_x.py", "mode": "eager",
            "ops": {"aten::sort": 1}}]  # fmt: skip
    with OpStore.open(db, create=True) as s:
        ingest_records(s, recs, source="t")
    data = _hostile_run()
    page = html_report(data, "<title>" + HOSTILE, coverage=coverage(data, *load_op_map(db)))
    assert "<script>alert" not in page and "<!-- -->" not in page and "\u202e" not in page
    assert page.count("<script>") == 1  # the page's own sort/filter script
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "http://evil" not in re.sub(r"[^<]*", "", page)  # never inside a tag
    assert "src=" not in page
    assert all(h.startswith("#") for h in re.findall(r"href='([^']*)'", page))  # in-page only


def test_junit_stays_well_formed_with_hostile_text() -> None:
    import xml.etree.ElementTree as ET

    from ootest.runner.render import junit

    root = ET.fromstring(ET.tostring(junit(_hostile_run()).getroot(), encoding="unicode"))
    props = [p.get("value") or "" for p in root.iter("property")]
    assert any("<script>alert(1)</script>" in v for v in props)  # kept as text, escaped
    assert not any("\x1b" in v or "\x07" in v for v in props)
