"""What the reports show at a glance: outcome bars per file and class, skips by who
skipped, and the trend between runs (``ootest report --trend``). No torch, no pytest
runs: hand-made results files, the CLI called in-process."""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ootest.cli.main import main
from ootest.record.results import RunData
from ootest.runner import render
from ootest.runner.reasons import skip_groups
from ootest.runner.render import html_report
from ootest.runner.trend import compare, trend


def _rec(vid: str, outcome: str, **kw: Any) -> dict[str, Any]:
    file = vid.split("::")[0]
    return {"kind": "result", "variant_id": vid, "file": file, "outcome": outcome, **kw}


# file a.py: TestX 3 passed + 1 failed; TestY 2 skipped (config, test) + 1 xfailed;
# a module-level test crashed. file b.py: TestZ 1 passed, 1 error, 1 skipped by the test.
RUN = [
    _rec("t/a.py::TestX::test_1[dtype=float32]", "passed"),
    _rec("t/a.py::TestX::test_1[dtype=float64]", "passed"),
    _rec("t/a.py::TestX::test_2", "passed"),
    _rec("t/a.py::TestX::test_3", "failed", message="E   AssertionError: no"),
    _rec("t/a.py::TestY::test_4", "skipped", mode="skip", reason="needs fp64"),
    _rec(
        "t/a.py::TestY::test_5",
        "skipped",
        mode="mandatory_success",
        reason="not listed in the config (unlisted_test_mode: mandatory_success)",
        message="Skipped: Only runs on cuda",
    ),
    _rec("t/a.py::TestY::test_6[op=aten::add]", "xfailed", mode="xfail", message="E  x"),
    _rec("t/a.py::test_module_level", "crashed", signal="SIGSEGV"),
    _rec("t/b.py::TestZ::test_1", "passed"),
    _rec("t/b.py::TestZ::test_2", "error", message="E   RuntimeError: setup"),
    _rec("t/b.py::TestZ::test_3", "skipped", message="Skipped: Only runs on cuda"),
]


class _Page(HTMLParser):
    """Outcome bars by (section, group) -> {outcome: count read from each part's title},
    where the section is the id of the last element with one (totals, files, classes);
    and the cell texts of every table with an id, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.section = ""
        self.bars: dict[tuple[str, str], dict[str, int]] = {}
        self.widths: dict[tuple[str, str], float] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._bar: tuple[str, str] | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if a.get("id"):
            self.section = a["id"]
            if tag == "table":
                self._table = a["id"]
                self.tables[a["id"]] = []
        cls = a.get("class", "")
        if tag == "span" and cls == "bar":
            self._bar = (self.section, a["data-of"])
            self.bars[self._bar], self.widths[self._bar] = {}, 0.0
        elif tag == "span" and self._bar and cls.startswith("o-"):
            m = re.fullmatch(r"(.+) (\d+) \(.*\)", a["title"])
            assert m is not None, a
            assert cls == "o-" + {"strict xpass": "xpassed_strict"}.get(m[1], m[1])
            self.bars[self._bar][cls[2:]] = int(m[2])
            self.widths[self._bar] += float(re.findall(r"width:([\d.]+)%", a["style"])[0])
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _page(data: RunData, **kw: Any) -> tuple[str, _Page]:
    text = html_report(data, "t", **kw)
    p = _Page()
    p.feed(text)
    return text, p


def test_html_bars_count_each_file_and_class() -> None:
    text, p = _page(RunData.from_records(RUN))
    a = {"passed": 3, "failed": 1, "skipped": 2, "xfailed": 1, "crashed": 1}
    b = {"passed": 1, "error": 1, "skipped": 1}
    assert p.bars[("files", "t/a.py")] == a
    assert p.bars[("files", "t/b.py")] == b
    assert p.bars[("classes", "t/a.py")] == a  # the file's bar heads its classes
    assert p.bars[("classes", "t/a.py::TestX")] == {"passed": 3, "failed": 1}
    assert p.bars[("classes", "t/a.py::TestY")] == {"skipped": 2, "xfailed": 1}
    assert p.bars[("classes", "t/a.py::")] == {"crashed": 1}  # module-level tests
    assert p.bars[("classes", "t/b.py::TestZ")] == b
    assert p.bars[("totals", "all")] == {k: a.get(k, 0) + b.get(k, 0) for k in a | b}
    for key, width in p.widths.items():
        assert width == pytest.approx(100, abs=0.05), key
    assert "(module-level tests)" in text
    # self-contained: no scripts (without op coverage), no external resources, and a
    # Content-Security-Policy that would block any
    assert "<script" not in text and "://" not in text and "@import" not in text
    assert "default-src 'none'" in text


def test_html_skips_are_grouped_by_who_skipped() -> None:
    _, p = _page(RunData.from_records(RUN))
    assert p.tables["skips-config"][1:] == [
        ["needs fp64", "1", "", "", "1 variant(s)t/a.py::TestY::test_4"]
    ]
    (row,) = p.tables["skips-test"][1:]
    assert row[:2] == ["Only runs on cuda", "2"]
    assert "t/a.py::TestY::test_5" in row[-1] and "t/b.py::TestZ::test_3" in row[-1]
    groups = skip_groups(RunData.from_records(RUN))
    assert [(g.who, g.key, g.count) for g in groups] == [
        ("test", "Only runs on cuda", 2),
        ("config", "needs fp64", 1),
    ]


def test_html_lists_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "HTML_MESSAGES", 2)
    monkeypatch.setattr(render, "HTML_IDS", 3)
    monkeypatch.setattr(render, "HTML_CLASSES", 1)
    recs = [_rec(f"t/c.py::T{i}::test_x", "failed", message=f"E   boom {i}") for i in range(10)]
    text, p = _page(RunData.from_records(recs))
    assert text.count("<pre>") == 2
    assert "8 more, without their messages" in text
    assert "... and 5 more (the results file has all)" in text
    assert "9 more classes not listed" in text
    assert len([k for k in p.bars if k[0] == "classes"]) == 2  # the file and one class


def _many(n: int, failing: bool) -> RunData:
    recs = []
    for i in range(n):
        file, cls = f"test/test_{i % 50}.py", f"Test{i % 7}"
        vid = f"{file}::{cls}::test_{i}[op=op_{i % 300},dtype=float32]"
        if failing:
            recs.append(_rec(vid, "failed", message=f"E   AssertionError: {i} " + "x" * 470))
        elif i % 4 == 0:
            recs.append(_rec(vid, "skipped", message=f"Skipped: needs device {i}"))
        else:
            recs.append(_rec(vid, "passed"))
    return RunData.from_records(recs)


@pytest.mark.parametrize("failing", [False, True], ids=["mixed", "all-failed"])
def test_html_size_is_bounded_at_25000_variants(failing: bool) -> None:
    # 25,000 variants with a 500-character message each, or with 6,250 distinct skip
    # messages: the page stays far below the results file (12+ MB when all fail).
    text = html_report(_many(25_000, failing), "big")
    size = len(text.encode())
    assert size < 1_500_000, size
    assert "25000 results" in text


# ------------------------------------------------------------------- trend
BEFORE = [
    _rec("t/a.py::T::test_same", "passed"),
    _rec("t/a.py::T::test_breaks", "passed"),
    _rec("t/a.py::T::test_breaks2", "passed"),
    _rec("t/a.py::T::test_fixed", "failed"),
    _rec("t/a.py::T::test_now_skipped", "failed"),
    _rec("t/a.py::T::test_gone", "skipped"),
    _rec("t/a.py::T::test_still_failing", "failed"),
]
AFTER = [
    _rec("t/a.py::T::test_same", "passed"),
    _rec("t/a.py::T::test_breaks", "failed"),
    _rec("t/a.py::T::test_breaks2", "failed"),
    _rec("t/a.py::T::test_fixed", "passed"),
    _rec("t/a.py::T::test_now_skipped", "skipped"),
    _rec("t/a.py::T::test_new", "crashed"),
    _rec("t/a.py::T::test_still_failing", "failed"),
]


def test_trend_lists_exactly_the_changed_variants() -> None:
    changes = compare(RunData.from_records(BEFORE), RunData.from_records(AFTER))
    got = [(c.kind, c.before, c.after, c.ids) for c in changes]
    assert got == [
        ("regressed", "passed", "failed", ("t/a.py::T::test_breaks", "t/a.py::T::test_breaks2")),
        ("fixed", "failed", "passed", ("t/a.py::T::test_fixed",)),
        ("changed", "failed", "skipped", ("t/a.py::T::test_now_skipped",)),
        ("added", None, "crashed", ("t/a.py::T::test_new",)),
        ("removed", "skipped", None, ("t/a.py::T::test_gone",)),
    ]
    assert [c.label for c in changes][3:] == ["added → crashed", "skipped → removed"]


def test_trend_counts_every_run_and_caps_ids_in_json() -> None:
    runs = [(n, RunData.from_records(r)) for n, r in (("A", BEFORE), ("B", AFTER), ("C", AFTER))]
    t = trend(runs)
    assert [(r.label, r.total, r.changed) for r in t.runs] == [
        ("A", 7, None),
        ("B", 7, 6),
        ("C", 7, 0),
    ]
    assert t.runs[1].counts == Counter(passed=2, failed=3, skipped=1, crashed=1)
    assert t.changes == () and (t.before, t.after) == ("B", "C")
    j = trend(runs[:2]).to_json(limit=1)
    assert j["changed"] == 6 and (j["before"], j["after"]) == ("A", "B")
    first = j["changes"][0]
    assert first == {
        "kind": "regressed",
        "from": "passed",
        "to": "failed",
        "count": 2,
        "ids": ["t/a.py::T::test_breaks"],
        "more": 1,
    }
    assert trend(runs[:2]).to_json(limit=0)["changes"][0]["more"] == 0


def _write(path: Path, recs: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def test_report_trend_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _write(tmp_path / "a.jsonl", BEFORE), _write(tmp_path / "b.jsonl", AFTER)
    assert main(["report", "--trend", a, b, "--json", "--limit", "0"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert [(c["from"], c["to"], c["count"]) for c in j["changes"]] == [
        ("passed", "failed", 2),
        ("failed", "passed", 1),
        ("failed", "skipped", 1),
        (None, "crashed", 1),
        ("skipped", None, 1),
    ]
    assert [r["counts"]["failed"] for r in j["runs"]] == [3, 3]

    assert main(["report", "--trend", a, b]) == 0
    out = capsys.readouterr().out
    assert "outcomes per run (oldest first)" in out  # after the newest run's summary
    assert out.index("ootest summary") < out.index("changed outcome:")
    assert "passed → failed" in out and "t/a.py::T::test_breaks2" in out
    assert "6 variant(s) changed outcome between" in out

    html = tmp_path / "r.html"
    assert main(["report", "--trend", a, b, "--format", "html", "-o", str(html)]) == 0
    p = _Page()
    p.feed(html.read_text())
    runs = p.tables["trend-runs"]
    assert [row[0] for row in runs[1:]] == [a, b] and runs[2][-1] == "6"
    changes = {row[0]: row[2] for row in p.tables["trend-changes"][1:]}
    assert changes == {
        "passed → failed": "2",
        "failed → passed": "1",
        "failed → skipped": "1",
        "added → crashed": "1",
        "skipped → removed": "1",
    }
    assert p.tables["totals"][1][2:] == ["2", "3", "0", "1", "0", "0", "0", "0", "1", "7"]

    # Without --trend several files are still shards of one run: merged, last wins.
    assert main(["report", a, b, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "passed": 2,
        "failed": 4,
        "skipped": 2,
        "total": 8,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--trend", "A"],
            "--trend: expected two or more results files, oldest first; found 1 (A); "
            "add an earlier run's results",
        ),
        (
            ["A", "--json"],
            "--json: prints the trend of successive runs (add --trend and give two or more "
            "results files, oldest first) or the coverage (--format coverage --ops DB); "
            "for CRCR test_results use --format json",
        ),
        (["--trend", "A", "A", "--json", "--format", "html"], "--json: replaces --format html"),
        (["--trend", "A", "A", "--limit", "-1"], "--limit: expected a number >= 0"),
        (["--trend", "A", "nope.jsonl"], "nope.jsonl: no such results file"),
    ],
)
def test_report_trend_usage_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "A", BEFORE)
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ootest: error: " + message), err
    assert len(err.strip().splitlines()) == 1


def test_report_on_garbled_or_foreign_files(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A non-UTF-8 byte in one line (a torn or garbled write) costs that line only;
    # a named file with no record at all (a gzip, a JUnit XML) is one clear error,
    # not a UnicodeDecodeError traceback or a quiet "0 results".
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "A", BEFORE)
    good = (tmp_path / "A").read_bytes()
    (tmp_path / "G").write_bytes(b"\xff\xfe{garbled\n" + good + b'{"kind": "res\xc3')
    assert main(["report", "G", "--format", "json"]) == 0
    assert main(["report", "A", "--format", "json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1]
    for name, data in (("Z", b"\x1f\x8b\x08\x00\xff\xfe"), ("X", b"<testsuites/>\n")):
        (tmp_path / name).write_bytes(data)
        for argv in (["report", name], ["merge", "A", name], ["report", "--trend", "A", name]):
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert err.startswith(f"ootest: error: {name}: expected JSON lines"), err
            assert len(err.strip().splitlines()) == 1
