"""``ootest select review`` (Note [Config review]): a generated config's decisions by
reason and file, the ops that block the most variants, what changed since a previous
config. Real ``select run`` configs of the small suite in tests/select/suites.py."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.select.refine import read_sidecar
from tests.select import suites

SELECT = ["--supported", "sup.txt", "--dtypes", "float32,float16", "--ops", "ops.db"]
PERSON = """        # flaky on our hardware: keep it xfail (Jane)
        - names:
            - TestAlpha::test_body
          mode: xfail
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("review")
    return suites.build_inputs(base)


@pytest.fixture
def work(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("old.db", "new.db", "ops.db", "sup.txt"):
        shutil.copy(built / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_ROOT", str(built / "new"))
    assert main(["select", "run", "--memory", "old.db", *SELECT, "--out", "old.yaml"]) == 0
    assert main(["select", "run", "--memory", "new.db", *SELECT, "--out", "suite.yaml"]) == 0
    return tmp_path


def _review(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["select", "review", *args, "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_review_counts_equal_the_sidecar(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _review(capsys, "suite.yaml")
    rows = read_sidecar(work / "suite.evidence.jsonl")
    codes = Counter(d.reason.split(":", 1)[0] for _, d, _ in rows)
    reasons = r["reasons"]
    assert isinstance(reasons, list)
    assert {g["code"]: g["count"] for g in reasons} == dict(codes)
    assert r["variants"] == len(rows) == 13
    assert r["modes"] == {"mandatory_success": 6, "xfail_strict": 0, "xfail": 0, "skip": 7}
    dt = next(g for g in reasons if g["code"] == "dtype_unsupported")
    assert dt["details"] == {"float64": 3, "int64": 1}
    # per file: every variant once
    files = r["files"]
    assert isinstance(files, list) and sum(f["count"] for f in files) == 13
    # what to implement next: cumsum unlocks one variant alone (the other also misses
    # a dtype), mm one
    ops = {o["op"]: (o["unlocks"], o["blocked"]) for o in r["blocking_ops"]}  # type: ignore[attr-defined]
    assert ops == {"aten::cumsum": (1, 2), "aten::mm": (1, 1)}
    assert r["changes"] is None and r["edited"] == {}


def test_review_against_a_previous_config_and_a_persons_entry(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (work / "suite.yaml").read_text()
    # after the generated entries of its file: the later entry naming a test wins
    anchor = "    - path: ${TORCH_ROOT}/test/test_beta.py\n"
    (work / "suite.yaml").write_text(text.replace(anchor, PERSON + anchor))
    r = _review(capsys, "suite.yaml", "--previous", "old.yaml")
    assert r["edited"] == {"edited:listed": 1}
    changes = {(c["kind"], c["from"], c["to"]): c["count"] for c in r["changes"]}  # type: ignore[union-attr]
    # test_gate gained @onlyCUDA upstream; test_body is now a person's xfail
    assert changes[("changed", "mandatory_success ops_supported", "skip upstream_skip")] == 1
    assert changes[("changed", "mandatory_success ops_supported", "xfail edited")] == 1
    assert changes[("removed", "mandatory_success no_device_ops", None)] == 1
    assert sum(n for (k, _, _), n in changes.items() if k == "added") == 4
    gate = next(c for c in r["changes"] if c["to"] == "skip upstream_skip")  # type: ignore[union-attr]
    assert gate["why"][0]["line"].startswith("@onlyCUDA")
    assert gate["ids"] == ["test/test_alpha.py::TestAlpha::test_gate"]

    # the page: self-contained, every section there
    assert main(["select", "review", "suite.yaml", "--previous", "old.yaml",
                 "--html", "review.html"]) == 0  # fmt: skip
    page = (work / "review.html").read_text()
    for section in ("id='review-reasons'", "id='review-files'", "id='review-ops'",
                    "id='review-changes'", "id='edited'"):  # fmt: skip
        assert section in page, section
    assert "<tr data-op='aten::cumsum'><td>aten::cumsum</td><td>1</td><td>2</td>" in page
    assert "://" not in page and "src=" not in page and "default-src 'none'" in page
    out = capsys.readouterr().out
    assert "ops that block the most variants" in out and "review: review.html" in out


def test_review_errors(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["select", "review", "nope.yaml"]) == 2
    assert "nope.yaml: no such config" in capsys.readouterr().err
    (work / "hand.yaml").write_text("test_suite_config:\n  files: []\n")
    assert main(["select", "review", "hand.yaml"]) == 2
    err = capsys.readouterr().err
    assert "expected its evidence file hand.evidence.jsonl next to it" in err


HOSTILE = "t[<script>alert(1)</script>]<!--\u202e-->::error::x @me ![i](http://e.example/x)"


def test_review_page_escapes_names_reasons_and_evidence(tmp_path: Path) -> None:
    from ootest.select.review import build_review, review_html

    vid = f"test/test_h.py::TestH::{HOSTILE}"
    row = {
        "decision": {"variant_id": vid, "mode": "skip", "reason": "op_unsupported:" + HOSTILE,
                     "evidence": [HOSTILE], "source": "rules"},
        "evidence": {"variant_id": vid, "dtypes": [], "ops": [HOSTILE], "missing_ops": [HOSTILE],
                     "missing_dtypes": [], "cpu": None, "reference": None, "observed": []},
        "fingerprint": "",
    }  # fmt: skip
    (tmp_path / "s.yaml").write_text("test_suite_config:\n  files: []\n")
    (tmp_path / "s.evidence.jsonl").write_text(json.dumps(row) + "\n")
    page = review_html(build_review(tmp_path / "s.yaml", tmp_path / "s.yaml"))
    assert "<script>alert" not in page and "<!--" not in page and "\u202e" not in page
    assert page.count("<script>") == 1 and "://" not in page.replace("http://e.example", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_review_and_report_pages_import_no_torch(work: Path) -> None:
    import subprocess
    import sys

    res = work / "r.jsonl"
    res.write_text(json.dumps({"kind": "result", "variant_id": "t.py::T::x", "file": "t.py",
                               "outcome": "skipped", "mode": "skip", "reason": "upstream_skip",
                               "code": "upstream_skip"}) + "\n")  # fmt: skip
    probe = (
        "import sys, runpy\n"
        "for argv in (['select', 'review', 'suite.yaml', '--previous', 'old.yaml',\n"
        "              '--html', 'rv.html', '--json'],\n"
        "             ['report', 'r.jsonl', '--format', 'summary'],\n"
        "             ['report', 'r.jsonl', '--format', 'coverage', '--ops', 'ops.db'],\n"
        "             ['report', 'r.jsonl', '--format', 'html', '--ops', 'ops.db',\n"
        "              '-o', 'r.html']):\n"
        "    sys.argv = ['ootest', *argv]\n"
        "    try:\n"
        "        runpy.run_module('ootest.cli', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('TORCH', 'torch' in sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], cwd=work, capture_output=True, text=True)
    assert "TORCH False" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert (work / "rv.html").is_file() and "coverage-ops" in (work / "r.html").read_text()


def test_review_without_the_configs_variables_still_reviews_the_sidecar(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TORCH_ROOT")
    monkeypatch.delenv("PYTORCH_ROOT", raising=False)
    r = _review(capsys, "suite.yaml")
    assert r["variants"] == 13 and r["edited"] == {}
    assert str(r["note"]).startswith(
        "the config could not be resolved here, so entries people wrote are not taken into "
        "account: suite.yaml:"
    )
    assert "undefined variable ${TORCH_ROOT}" in str(r["note"])
