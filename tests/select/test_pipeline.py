"""The selection pipeline from Python (Note [Selection pipeline]): the same files
as ``ootest select run|refine|run --since``, without the CLI (issue 25 item 1).

The inputs are tests/select/suites.py's two versions of a small suite (no torch).
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from ootest.cli.main import main
from ootest.errors import UserError
from ootest.select.pipeline import Backend, Inputs, select
from tests.conftest import run
from tests.select import suites

SELECT = ["--supported", "sup.txt", "--dtypes", "float32,float16", "--ops", "ops.db"]
A = "test/test_alpha.py::TestAlpha"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suites.build_inputs(tmp_path_factory.mktemp("pipeline"))


@pytest.fixture
def work(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("old.db", "new.db", "ops.db", "sup.txt"):
        shutil.copy(built / name, tmp_path / name)
    result = {"kind": "result", "variant_id": f"{A}::test_double[dtype=float32]",
              "outcome": "passed", "time": 1.0}  # fmt: skip
    failed = {"kind": "result", "variant_id": f"{A}::test_body[dtype=float32]",
              "outcome": "failed", "message": "E   RuntimeError: off", "where": "t.py:1",
              "time": 1.0}  # fmt: skip
    (tmp_path / "r.jsonl").write_text(json.dumps(result) + "\n" + json.dumps(failed) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


#: select run, refine and run --since from Python; the script proves it needs
#: neither the CLI nor torch.
SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ootest.select.pipeline import Backend, Inputs, refine, select, upgrade, write

    backend = Backend(supported=Path("sup.txt"), dtypes="float32,float16")
    inputs = Inputs(memory=Path("old.db"), ops=Path("ops.db"), backend=backend)
    done = write(select(inputs), Path("py/suite.yaml"))
    print(done.variants, dict(sorted(done.modes.items())))
    sel = refine(Path("py/suite.yaml"), [Path("r.jsonl")])
    print(sel.notes[0])
    write(sel, Path("py/suite.yaml"))
    from ootest.opmap.store import OpStore
    from ootest.select.fresh import DeltaCapture

    def same_ops(db, files, only, code, **_):  # as tests/select/conftest.py
        with OpStore.open(db, create=True) as s:
            s.connection.executemany(
                "UPDATE variant_capture SET code = ? "
                "WHERE variant = (SELECT id FROM variant WHERE variant_id = ?)",
                [(fp, vid) for vid, fp in code.items()],
            )

    new = Inputs(memory=Path("new.db"), ops=Path("ops.db"), backend=backend,
                 capture=DeltaCapture(capturer=same_ops))
    o = upgrade(new, Path("old.db"), Path("py/suite.yaml"))
    o.write()
    print(o.summary())
    print(sorted(m for m in sys.modules if m.startswith("ootest.cli") or m == "torch"))
    """
)


def test_python_writes_what_the_cli_writes(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["select", "run", "--memory", "old.db", *SELECT, "--out", "cli/suite.yaml"],
        ["select", "refine", "cli/suite.yaml", "--results", "r.jsonl"],
        ["select", "run", "--since", "old.db", "--memory", "new.db", *SELECT,
         "--config", "cli/suite.yaml"],
    ):  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
    r = run([sys.executable, "-c", SCRIPT], cwd=work)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "10 {'mandatory_success': 7, 'skip': 3}",
        "ootest: refine: 1 of 10 decisions changed",
        "evaluated 10 of 13 variants (4 added; 6 modified; 1 removed; "
        "now 5 mandatory_success, 5 skip)",
        "[]",  # no CLI module, no torch
    ]
    for name in ("suite.yaml", "suite.evidence.jsonl"):
        assert (work / "py" / name).read_bytes() == (work / "cli" / name).read_bytes(), name


def test_the_decisions_come_back_before_anything_is_written(work: Path) -> None:
    backend = Backend(supported=Path("sup.txt"), dtypes="float32,float16")
    sel = select(Inputs(memory=Path("old.db"), ops=Path("ops.db"), backend=backend))
    got = {d.variant_id: (d.mode, d.reason) for d in sel.decisions}
    assert got[f"{A}::test_double[dtype=float64]"] == ("skip", "dtype_unsupported:float64")
    assert got["test/test_beta.py::TestBeta::test_mm"] == ("skip", "op_unsupported:aten::mm")
    assert sel.notes == [] and not list(work.glob("*.yaml"))


def test_no_candidates_is_one_user_error(work: Path) -> None:
    with pytest.raises(UserError, match=r"^select run: no variants to decide; pass --memory"):
        select(Inputs())
