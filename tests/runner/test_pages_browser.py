"""The report and review pages in a real headless browser (Note [Self-contained
pages]): they load without a console error (a script error, a request the
Content-Security-Policy refused), their sections are in the DOM after the scripts
ran, and a screenshot of each is kept in the test's tmp folder.

Needs Chromium (Debian: ``apt-get install -y chromium``); skipped, saying so,
without it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ootest.opmap.ingest import ingest_records
from ootest.record.results import RunData
from ootest.runner.coverage import coverage, load_op_map
from ootest.runner.render import html_report

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        f"no headless Chromium found (looked for {', '.join(BROWSERS)} on PATH); "
        "install it (Debian: apt-get install -y chromium) to check the pages in a browser"
    )


def _load(browser: str, page: Path, shot: Path) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and the console messages; a screenshot."""
    profile = f"--user-data-dir={shot.parent / 'profile'}"
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--enable-logging=stderr", "--v=0", profile]  # fmt: skip
    url = page.resolve().as_uri()
    dom = subprocess.run(
        [*base, "--dump-dom", url], capture_output=True, text=True, timeout=120
    )  # fmt: skip
    shotted = subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1400,2000", "--hide-scrollbars", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    console = [
        line
        for line in (dom.stderr + shotted.stderr).splitlines()
        if ":CONSOLE" in line or "Refused to" in line
    ]
    assert shot.is_file() and shot.stat().st_size > 1000, shotted.stderr[-2000:]
    return dom.stdout, console


def test_the_console_is_read(tmp_path: Path) -> None:
    """A page with a script error and a blocked request shows both (so silence below
    means no errors, not a deaf check)."""
    browser = _browser()
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!doctype html><html><head><meta http-equiv='Content-Security-Policy' "
        "content=\"default-src 'none'; script-src 'unsafe-inline'\"></head><body>"
        "<img src='http://example.invalid/x.png'><script>nosuchfn()</script></body></html>"
    )
    _, console = _load(browser, bad, tmp_path / "bad.png")
    text = "\n".join(console)
    assert "nosuchfn is not defined" in text and "violates the following Content" in text, text


def _op_map(db: Path) -> Path:
    from ootest.opmap.store import OpStore

    prov = {"kind": "provenance", "torch_version": "2.13.0", "torch_git": "a", "device": "emu",
            "profile": "full", "ootest_version": "0", "time": 1.0}  # fmt: skip
    recs: list[dict[str, object]] = [prov]
    for i in range(40):
        vid = f"test/test_ops.py::TestOps::test_op_{i % 8}[dtype={('float32', 'int64')[i % 2]}]"
        ops = {f"aten::op{i % 5}": 1, "aten::add.Tensor": 1}
        recs.append({"kind": "ops", "variant_id": vid, "nodeid": vid,
                     "file": "test/test_ops.py", "mode": "eager", "ops": ops})  # fmt: skip
    with OpStore.open(db, create=True) as s:
        ingest_records(s, recs, source="t")
    return db


HOSTILE = "x[<script>alert(1)</script>]<!--\u202e-->::error::y @z ![i](http://e.example/i)"


def test_report_and_review_pages_render_without_console_errors(tmp_path: Path) -> None:
    browser = _browser()
    outcomes = ["passed", "failed", "skipped", "xfailed", "skipped"]
    recs = []
    for i in range(16):
        vid = f"test/test_ops.py::TestOps::test_op_{i % 8}[dtype={('float32', 'int64')[i % 2]}]"
        o = outcomes[i % 5]
        rec: dict[str, object] = {"kind": "result", "variant_id": vid,
                                  "file": "test/test_ops.py", "outcome": o,
                                  "mode": {"skipped": "skip", "xfailed": "xfail"}.get(o,
                                                                           "mandatory_success"),
                                  "message": "E   RuntimeError: " + HOSTILE}  # fmt: skip
        if o in ("skipped", "xfailed"):
            rec.update(reason=f"op_unsupported:aten::op{i % 5}", code="op_unsupported",
                       evidence=[HOSTILE])  # fmt: skip
        recs.append(rec)
    data = RunData.from_records(recs)
    cov = coverage(data, *load_op_map(_op_map(tmp_path / "ops.db")), source="ops.db")
    report = tmp_path / "report.html"
    report.write_text(html_report(data, "ootest: " + HOSTILE, coverage=cov))
    dom, console = _load(browser, report, tmp_path / "report.png")
    assert console == [], console
    for section in ("id=\"totals\"", "id=\"coverage-ops\"", "id=\"skips-config\"",
                    "id=\"expected-reasons\"", "id=\"failures\""):  # fmt: skip
        assert section in dom, section
    assert "<script>alert" not in dom

    # the review page of a small generated config
    from ootest.select.review import build_review, review_html

    rows = []
    for i, rec in enumerate(recs):
        vid = str(rec["variant_id"])
        mode = str(rec["mode"])
        reason = str(rec.get("reason") or "ops_supported")
        missing = [reason.split(":", 1)[1]] if reason.startswith("op_unsupported") else []
        rows.append({"decision": {"variant_id": vid, "mode": mode, "reason": reason,
                                  "evidence": [HOSTILE if i % 3 else "calls it"],
                                  "source": "rules"},
                     "evidence": {"variant_id": vid, "dtypes": [], "ops": None,
                                  "missing_ops": missing, "missing_dtypes": [],
                                  "cpu": None, "reference": None, "observed": []},
                     "fingerprint": ""})  # fmt: skip
    (tmp_path / "s.yaml").write_text("test_suite_config:\n  files: []\n")
    (tmp_path / "s.evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    review = tmp_path / "review.html"
    review.write_text(review_html(build_review(tmp_path / "s.yaml", tmp_path / "s.yaml")))
    dom, console = _load(browser, review, tmp_path / "review.png")
    assert console == [], console
    for section in ("review-reasons", "review-files", "review-ops", "changes"):
        assert re.search(f'id="{section}"', dom), section
    assert "<script>alert" not in dom
