"""``ootest select refresh`` (Note [Refresh]) on tests/select/suites.py's two
versions, without torch: the memory's variants come from the suite's synthetic
collector and the device run from a runner that writes what a device would
(the injected edges of ``refresh``). The same on the example suite with emu and
a real kill: tests/e2e/test_refresh_e2e.py (slow)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ootest.cli.main import main
from ootest.errors import UserError
from ootest.select.fresh import DeltaCapture
from ootest.select.pipeline import Backend, Inputs
from ootest.select.refresh import Refresh, Refreshed, refresh
from tests.select import suites
from tests.select.conftest import same_ops

ALPHA = "test/test_alpha.py::TestAlpha"
#: what the device does with the variants the refresh runs (the rest pass)
FAILS = {f"{ALPHA}::test_body[dtype=float32]": "E   RuntimeError: zeros(2) is broken"}


class Killed(Exception):
    """The refresh's process was killed (the test's stand-in for SIGKILL)."""


class Device:
    """Runs a config as a device would: every variant it lists passes but FAILS;
    with ``kill_after`` the process dies after that many results."""

    def __init__(self, kill_after: int | None = None) -> None:
        self.kill_after = kill_after
        self.resumed: list[bool] = []
        self.only: list[list[str]] = []  # the variant IDs each run was told to run

    def __call__(
        self,
        config: Path,
        results: Path,
        *,
        device: str | None,
        timeout: float,
        pytest_args: list[str],
        resume: bool,
    ) -> None:
        self.resumed.append(resume)
        at = pytest_args.index("--ootest-only")  # only those: the file's others are not run
        self.only.append(Path(pytest_args[at + 1]).read_text().split())
        suite = yaml.safe_load(config.read_text())["test_suite_config"]
        vids = [
            f"test/{entry['path'].rsplit('/', 1)[1]}::{name}"
            for entry in suite["files"]
            for t in entry["tests"]
            for name in t["names"]
        ]
        have = set()
        if resume:
            have = {json.loads(x)["variant_id"] for x in results.read_text().splitlines()}
        with open(results, "a") as fh:
            for i, vid in enumerate(v for v in vids if v not in have):
                if self.kill_after is not None and i == self.kill_after:
                    raise Killed
                rec = {"kind": "result", "variant_id": vid, "time": 10.0 + i}
                msg = FAILS.get(vid)
                rec |= (
                    {"outcome": "failed", "message": msg, "where": "t.py:1"}
                    if msg
                    else {"outcome": "passed"}
                )
                fh.write(json.dumps(rec) + "\n")
                fh.flush()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return suites.build_inputs(tmp_path_factory.mktemp("refresh"))


@pytest.fixture(autouse=True)
def torch_root(built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed torch's checkout: the new version of the suite."""
    monkeypatch.setenv("TORCH_ROOT", str(built / "new"))


def _setup(built: Path, at: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """``at``: the old memory, the op map, and the config a full run made from it."""
    at.mkdir()
    for name in ("old.db", "ops.db"):
        shutil.copy(built / name, at / name)
    argv = ["select", "run", "--memory", str(at / "old.db"), "--supported", str(built / "sup.txt"),
            "--dtypes", "float32,float16", "--ops", str(at / "ops.db"),
            "--out", str(at / "suite.yaml")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    return at


def _job(built: Path, at: Path) -> Refresh:
    backend = Backend(supported=built / "sup.txt", dtypes="float32,float16")
    return Refresh(
        config=at / "suite.yaml",
        memory=at / "old.db",
        roots=(built / "new" / "test",),
        # the fixtures' op maps hold the new version's calls already: the delta
        # "capture" stamps them (named here, not left to tests/select/conftest.py's
        # autouse patch, which other folders' tests using this job do not get)
        inputs=Inputs(ops=at / "ops.db", backend=backend, capture=DeltaCapture(capturer=same_ops)),
        k=1,
    )


def _refresh(job: Refresh, device: Device, said: list[str] | None = None) -> Refreshed:
    return refresh(
        job,
        say=(said if said is not None else []).append,
        runner=device,
        collector=suites.collector(suites.V2),
    )


def _decisions(config: Path) -> dict[str, tuple[str, str]]:
    side = config.with_name(config.name.removesuffix(".yaml") + ".evidence.jsonl")
    rows = [json.loads(x) for x in side.read_text().splitlines()]
    return {r["decision"]["variant_id"]: (r["decision"]["mode"], r["decision"]["reason"])
            for r in rows}  # fmt: skip


def test_a_refresh_decides_runs_refines_and_writes_the_pull_request(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = _setup(built, tmp_path / "a", capsys)
    before = (at / "suite.yaml").read_text()
    said: list[str] = []
    device = Device()
    done = _refresh(_job(built, at), device, said)

    assert done.changed and done.resumed_at is None
    # the run step ran exactly the 5 variants it lists, by --ootest-only
    ((only,),) = [device.only]
    assert len(only) == 5 and all(v.startswith("test/test_alpha.py::") for v in only)
    assert done.work == at / "suite.refresh"
    steps = [s.removeprefix("ootest: refresh: ") for s in said if s.startswith("ootest: ")]
    assert steps == [
        "begin",
        "index",
        "diff",
        "capture",
        "replay",
        "decide",
        "run",
        "refine",
        "write",
    ]
    got = _decisions(at / "suite.yaml")
    assert got[f"{ALPHA}::test_body[dtype=float32]"][0] == "xfail_strict"  # failed on the device
    assert got[f"{ALPHA}::test_new[dtype=float32]"] == ("mandatory_success", "ops_supported")
    assert got[f"{ALPHA}::test_gate"] == ("skip", "upstream_skip")  # skipped: not run
    assert f"{ALPHA}::test_gone[dtype=float32]" not in got  # removed upstream
    assert "test/test_beta.py::TestBeta::test_mm" in got  # unchanged, kept
    # the config says it was decided from the new memory, which replaced the old one
    assert (at / "old.db").read_bytes() == (done.work / "new.db").read_bytes()
    assert "# memory sha256:" in (at / "suite.yaml").read_text() != before
    assert not list(at.glob("suite.refresh*.yaml"))  # the staged files are gone

    body = done.pr_body.read_text()
    # counts (every text escaped for Markdown: Note [Escaping test-derived text])
    assert body.startswith("## ootest select refresh: suite\\.yaml\n")
    assert (
        r"- **decisions**: evaluated 10 of 13 variants \(4 added\; 6 modified\; 1 removed\;"
    ) in body
    ran = r"- **run on the device**: 5 of the 10 variants decided again: 1 failed\, 4 passed"
    assert ran in body
    assert "- **refined**: 1 of 13 decisions changed\n" in body
    # the reasons: each transition with its most common evidence line
    assert (
        r"| changed\: mandatory\_success ops\_supported \-&gt; xfail\_strict observed\_fail | 1 "
        r"| device\: RuntimeError\: zeros\(N\) is broken \(at t\.py\:1\) |"
    ) in body
    assert r"| changed\: mandatory\_success ops\_supported \-&gt; skip upstream\_skip | 1 " in body
    # the config's diff, as the PR shows it
    assert "```diff\n--- a/suite.yaml\n+++ b/suite.yaml\n" in body
    assert "+            - TestAlpha::test_new\n" in body
    assert "<!doctype html>" in done.review.read_text()

    again: list[str] = []  # a second call: nothing left to do
    second = _refresh(_job(built, at), Device(), again)
    assert (second.done, second.changed) == (done.done, True)
    assert again == [f"ootest: refresh: {done.work} is done (pass --fresh to start another)"]


def test_a_killed_refresh_resumes_at_the_step_it_was_in(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _setup(built, tmp_path / "whole", capsys)
    _refresh(_job(built, whole), Device())
    at = _setup(built, tmp_path / "killed", capsys)
    before = (at / "suite.yaml").read_bytes(), (at / "old.db").read_bytes()
    with pytest.raises(Killed):  # killed in the middle of the run on the device
        _refresh(_job(built, at), Device(kill_after=2))
    state = json.loads((at / "suite.refresh" / "state.json").read_text())
    assert state["done"] == ["begin", "index", "diff", "capture", "replay", "decide"]
    assert ((at / "suite.yaml").read_bytes(), (at / "old.db").read_bytes()) == before

    said: list[str] = []
    device = Device()
    done = _refresh(_job(built, at), device, said)
    assert said[0] == (
        "ootest: refresh: resuming at step run (begin, index, diff, capture, replay, decide done)"
    )
    assert done.resumed_at == "run" and device.resumed == [True]  # ootest run --resume
    results = (at / "suite.refresh" / "run" / "results.jsonl").read_text().splitlines()
    assert len(results) == 5  # the 2 of before the kill were not run again
    assert _decisions(at / "suite.yaml") == _decisions(whole / "suite.yaml")

    def masked(p: Path) -> str:  # the two new memories were built at other times
        return re.sub(r"memory sha256:\w+", "memory sha256:*", p.read_text())

    assert masked(at / "suite.yaml") == masked(whole / "suite.yaml")
    assert masked(at / "suite.refresh" / "pr.md") == masked(whole / "suite.refresh" / "pr.md")


def test_a_config_changed_while_a_refresh_waits_is_an_error(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = _setup(built, tmp_path / "a", capsys)
    with pytest.raises(Killed):
        _refresh(_job(built, at), Device(kill_after=0))
    with open(at / "suite.yaml", "a") as fh:
        fh.write("# a person's edit\n")
    with pytest.raises(UserError, match=r"--config .*suite\.yaml: changed since the refresh in "):
        _refresh(_job(built, at), Device())
    done = _refresh(replace(_job(built, at), fresh=True), Device())  # --fresh starts over
    assert done.resumed_at is None and done.done[-1] == "write"


def test_the_command_says_what_it_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "suite.yaml").write_text("test_suite_config:\n  files: []\n")
    rc = main(["select", "refresh", "--config", str(tmp_path / "suite.yaml"), "--memory",
               str(tmp_path / "old.db"), "--root", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (
        f"ootest: error: --config {tmp_path}/suite.yaml: expected its evidence file "
        f"{tmp_path}/suite.evidence.jsonl next to it (written by 'ootest select run'); "
        "refresh a config ootest selected\n"
    )


def test_nothing_changed_upstream_leaves_the_config_and_the_memory(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = _setup(built, tmp_path / "a", capsys)
    before = {p.name: p.read_bytes() for p in at.iterdir() if p.is_file()}
    said: list[str] = []
    done = refresh(
        replace(_job(built, at), roots=(built / "old" / "test",)),
        say=said.append,
        runner=Device(),
        collector=suites.collector(suites.V1),
    )
    assert not done.changed
    assert {p.name: p.read_bytes() for p in at.iterdir() if p.is_file()} == before
    assert said[-1] == f"  {at / 'suite.yaml'}: unchanged; {done.pr_body}"
    assert "- **decisions**: evaluated 0 of 10 variants" in done.pr_body.read_text()


def test_a_refresh_killed_while_indexing_builds_the_memory_again(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = _setup(built, tmp_path / "a", capsys)
    collect = suites.collector(suites.V2)

    def dies(*args: object) -> object:
        raise Killed

    with pytest.raises(Killed):
        refresh(_job(built, at), runner=Device(), collector=dies)
    said: list[str] = []
    done = refresh(_job(built, at), say=said.append, runner=Device(), collector=collect)
    assert said[0] == "ootest: refresh: resuming at step index (begin done)"
    assert done.changed and "- **decisions**: evaluated 10 of 13 variants" in (
        done.pr_body.read_text().replace("\\", "")
    )


def test_the_pull_request_body_is_inert_and_keeps_no_secret() -> None:
    from collections import Counter

    from ootest.select.refresh import pr_body
    from ootest.select.review import Change

    token = "ghp_" + "a1B2" * 9
    why = f"device: RuntimeError: [click](https://evil.invalid) @admin </details> {token}"
    ch = Change("changed", "mandatory_success ops_supported", "xfail_strict observed_fail", 1)
    ch.why = Counter({why: 1})
    before = "# a\ntest_suite_config:\n"
    after = f"# a\n# ```\n# {why}\ntest_suite_config:\n"
    body = pr_body("suite.yaml", before, after, {"memory_diff": "1 of 2 variants changed"}, [ch])
    assert token not in body
    row = next(x for x in body.splitlines() if x.startswith("| changed"))
    inert = r"\[click\]\(https\:\/\/evil\.invalid\) &#64;admin &lt;\/details&gt; \[redacted\]"
    assert row.endswith(f"| 1 | device\\: RuntimeError\\: {inert} |")
    assert "````diff\n" in body  # a fence longer than the diff's own backticks
    assert "+# device: RuntimeError: [click](https://evil.invalid) @admin </details> " in body


def test_a_refresh_captures_the_delta_and_decides_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 1: the team's op map of the old version only; the capture step
    captures the changed variants (and only them) into the work folder's copy, the
    decide step decides from it, the write step puts it over --ops."""
    from tests.select.test_fresh import FOO, FOO_ID, FOO_NEW, FOO_OLD, NEW_OPS, OLD_OPS, SPEC
    from tests.select.test_fresh import capturer as fake
    from tests.select.upgrade_trees import build, capture
    from tests.select.upgrade_trees import collector as collect

    build(tmp_path / "old", tmp_path / "old.db", {FOO: FOO_OLD}, SPEC)
    (tmp_path / "new" / "test").mkdir(parents=True)
    (tmp_path / "new" / FOO).write_text(FOO_NEW)
    shutil.copy(capture(tmp_path / "cap.jsonl", SPEC, OLD_OPS), tmp_path / "ops.db")
    (tmp_path / "sup.txt").write_text("ones\nmm\n")
    monkeypatch.setenv("TORCH_ROOT", str(tmp_path / "new"))
    argv = ["select", "run", "--memory", str(tmp_path / "old.db"), "--supported",
            str(tmp_path / "sup.txt"), "--dtypes", "float32", "--ops", str(tmp_path / "ops.db"),
            "--out", str(tmp_path / "suite.yaml")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert _decisions(tmp_path / "suite.yaml")[FOO_ID][0] == "skip"
    asked: list[list[str]] = []
    backend = Backend(supported=tmp_path / "sup.txt", dtypes="float32")
    job = Refresh(
        config=tmp_path / "suite.yaml",
        memory=tmp_path / "old.db",
        roots=(tmp_path / "new" / "test",),
        inputs=Inputs(ops=tmp_path / "ops.db", backend=backend,
                      capture=DeltaCapture(capturer=fake(NEW_OPS, asked))),
        k=1,
    )  # fmt: skip
    said: list[str] = []
    device = Device()
    done = refresh(job, say=said.append, runner=device, collector=collect(SPEC))
    assert asked == [[FOO_ID]]
    assert (
        "  op evidence for the 1 variants decided again: captured 1 of 1 variants on emu:full"
        in [s.split(" in ")[0] for s in said]
    )
    assert _decisions(tmp_path / "suite.yaml")[FOO_ID] == ("mandatory_success", "ops_supported")
    assert device.resumed == [False]  # the run step ran it: ran 1
    assert (tmp_path / "ops.db").read_bytes() == (done.work / "ops.db").read_bytes()
    body = done.pr_body.read_text()
    assert (
        r"- **op evidence**: op evidence for the 1 variants decided again\: captured 1 of 1 "
        r"variants on emu\:full"
    ) in body


# ------------------------------------- the replay step (issue 33 item 4)
ADD = "test/test_beta.py::TestBeta::test_add[dtype=float32]"
ADD_CALL = '{"args":[{"T":"float32","dev":true,"shape":[300]}],"kwargs":{}}'


class Replays:
    """Replays an op map's calls as a device would (``ootest ops replay``): each
    call of an op in ``failing`` raises there, the rest return as on the CPU."""

    def __init__(self, *failing: str) -> None:
        self.failing = set(failing)
        self.asked: list[tuple[Path, str]] = []
        self.kept: list[Path | None] = []  # the --keep-ok replay of each call

    def __call__(
        self,
        ops: Path,
        out: Path,
        *,
        device: str,
        timeout: float,
        say: object,
        keep: Path | None = None,
    ) -> None:
        from ootest.opmap.replay import new_replay, read_replay, write_replay
        from ootest.opmap.store import OpStore

        self.asked.append((ops, device))
        self.kept.append(keep)
        with OpStore.open(ops) as s:
            examples = s.examples()
        rep = new_replay(device, len(examples), timeout)
        before = read_replay(keep).results if keep is not None else {}
        for key, op, _call in examples:
            if before.get(key, {}).get("status") == "ok":  # as ops replay --keep-ok
                rep.results[key] = before[key]
                continue
            rec: dict[str, object] = {"kind": "call", "key": key, "op": op, "seconds": 1e-5}
            if op in self.failing:
                rec |= {"status": "failed", "error": "RuntimeError", "detail": "TILE_OVERFLOW"}
            else:
                rec["status"] = "ok"
            rep.results[key] = rec
        rep.header["complete"] = True
        write_replay(out, rep)


def _replayed_setup(
    built: Path, at: Path, capsys: pytest.CaptureFixture[str], stopped: bool = False
) -> tuple[Path, Refresh]:
    """The config decided with a replay on emu:faulty in which beta's add call
    failed (a known failure: skipped); the refresh job of the same (nothing
    changed upstream: the old tree again), its replay on the config's device.
    ``stopped``: the replay stopped before that call (it has no result)."""
    at.mkdir()
    shutil.copy(built / "old.db", at / "old.db")
    # the fixture's capture, with the call beta's add makes written down in it
    example = {"kind": "example", "variant_id": ADD, "op": "aten::add.Tensor", "call": ADD_CALL}
    cap = (built / "cap.jsonl").read_text() + json.dumps(example) + "\n"
    (at / "cap.jsonl").write_text(cap)
    assert main(["ops", "ingest", str(at / "cap.jsonl"), "--db", str(at / "ops.db")]) == 0
    Replays("aten::add.Tensor")(at / "ops.db", at / "replay.jsonl", device="emu:faulty",
                                timeout=5.0, say=None)  # fmt: skip
    if stopped:
        lines = (at / "replay.jsonl").read_text().splitlines()
        head = json.loads(lines[0]) | {"complete": False}
        kept = [x for x in lines[1:] if '"aten::add.Tensor"' not in x]
        (at / "replay.jsonl").write_text("\n".join([json.dumps(head), *kept]) + "\n")
    argv = ["select", "run", "--memory", str(at / "old.db"), "--supported", str(built / "sup.txt"),
            "--dtypes", "float32,float16", "--ops", str(at / "ops.db"), "--device", "emu:faulty",
            "--replay", str(at / "replay.jsonl"), "--out", str(at / "suite.yaml")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    if not stopped:
        assert _decisions(at / "suite.yaml")[ADD] == ("skip", "replay_failed:aten::add.Tensor")
    backend = Backend(supported=built / "sup.txt", dtypes="float32,float16")
    job = Refresh(
        config=at / "suite.yaml",
        memory=at / "old.db",
        roots=(built / "old" / "test",),
        inputs=Inputs(ops=at / "ops.db", backend=backend, replay=at / "replay.jsonl",
                      capture=DeltaCapture(capturer=same_ops)),
        k=1,
    )  # fmt: skip
    return at, job


def _again(job: Refresh, replays: Replays, device: Device, said: list[str]) -> Refreshed:
    return refresh(job, say=said.append, runner=device, collector=suites.collector(suites.V1),
                   replayer=replays)  # fmt: skip


def test_a_known_failure_comes_back_when_the_device_gains_the_kernel(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Note [A known failure is re-checked by the replay]: beta's add call failed
    on the device, so its variant is skipped (not run on every CI run). Each
    refresh replays the op map's calls on the device again: while add still fails
    nothing changes; once the backend has the kernel, the variant is decided again
    (by the replay alone: nothing changed upstream), runs in the refresh's run
    step, and the new replay goes over --replay with the config."""
    at, job = _replayed_setup(built, tmp_path / "a", capsys)
    before = {p.name: p.read_bytes() for p in at.iterdir() if p.is_file()}
    said: list[str] = []
    still = Replays("aten::add.Tensor")
    done = _again(job, still, Device(), said)
    steps = [s.removeprefix("ootest: refresh: ") for s in said if s.startswith("ootest: ")]
    assert steps == [
        "begin", "index", "diff", "capture", "replay", "decide", "run", "refine", "write"
    ]  # fmt: skip
    assert still.asked == [(at / "ops.db", "emu:faulty")]  # the config's device
    # Note [A refresh replays what can change a decision]: the old replay is kept
    # from (its ok calls), the failed call replayed again
    assert still.kept == [at / "replay.jsonl"]
    assert "  replayed 1 recorded calls on emu:faulty: 1 failed" in said
    assert not done.changed  # the same failure: nothing decided again, nothing written
    assert {p.name: p.read_bytes() for p in at.iterdir() if p.is_file()} == before
    assert r"1 failed; 0 variants decided again by it" in done.pr_body.read_text()

    said = []
    gained = Replays()  # a new backend build: add has its kernel
    device = Device()
    done = _again(replace(job, fresh=True), gained, device, said)
    assert done.changed
    assert _decisions(at / "suite.yaml")[ADD] == ("mandatory_success", "ops_supported")
    assert device.resumed == [False]  # the run step ran it
    rows = [json.loads(x) for x in (at / "suite.evidence.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["decision"]["variant_id"] == ADD)
    assert "replay" not in row["evidence"]  # its call replays as on the CPU now
    # the replay the config is now decided from is the one --replay names
    assert (at / "replay.jsonl").read_bytes() == (done.work / "replay.jsonl").read_bytes()
    from ootest.select.writer import file_digest

    digest = file_digest(at / "replay.jsonl")
    assert f"# replayed calls {digest}\n" in (at / "suite.yaml").read_text()
    body = done.pr_body.read_text()
    assert r"- **replay**: replayed 1 recorded calls on emu\:faulty\: 1 ok; 1 variants " in body
    assert r"0 added\; 0 modified\; 1 by the replay\; 0 removed" in body
    assert r"| changed\: skip replay\_failed \-&gt; mandatory\_success ops\_supported | 1 |" in body

    every = Replays()  # --replay-all: every call replayed again, none kept
    _again(replace(job, fresh=True, replay_all=True), every, Device(), [])
    assert every.kept == [None] and len(every.asked) == 1


def test_every_variant_whose_replayed_calls_changed_is_decided_again(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The config was decided from a replay that stopped before beta's add call:
    unknown, so its declared op decided (mandatory). The refresh's replay has a
    result for that call: the variant is decided again and run, though its
    evidence lists no fault either way (the replay's rows changed, not only its
    faults)."""
    at, job = _replayed_setup(built, tmp_path / "a", capsys, stopped=True)
    assert _decisions(at / "suite.yaml")[ADD] == ("mandatory_success", "ops_supported")
    device = Device()
    done = _again(job, Replays(), device, [])
    assert device.resumed == [False]  # the run step ran it
    body = done.pr_body.read_text()
    assert "1 ok; 1 variants decided again by it" in body
    assert r"0 added\; 0 modified\; 1 by the replay\; 0 removed" in body
    assert _decisions(at / "suite.yaml")[ADD] == ("mandatory_success", "ops_supported")


def test_no_replay_keeps_the_replay_and_says_its_skips_are_not_rechecked(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at, job = _replayed_setup(built, tmp_path / "a", capsys)
    before = (at / "replay.jsonl").read_bytes()
    said: list[str] = []
    gained = Replays()
    done = _again(replace(job, replay_again=False), gained, Device(), said)
    assert gained.asked == []  # not replayed
    assert (
        f"  --no-replay: {at / 'replay.jsonl'} is kept as it is; the variants it skips "
        "(replay_failed) are not re-checked"
    ) in said
    assert _decisions(at / "suite.yaml")[ADD] == ("skip", "replay_failed:aten::add.Tensor")
    assert (at / "replay.jsonl").read_bytes() == before and not done.changed
    assert (
        "- **replay**: not replayed again (`--no-replay`): the variants skipped for a call "
        "that failed in the replay (`replay_failed`) are not re-checked"
    ) in done.pr_body.read_text()

    # the flag is an input: a refresh begun with it does not go on without it
    def dies(*args: object) -> object:
        raise Killed

    with pytest.raises(Killed):  # killed while indexing
        refresh(replace(job, replay_again=False, fresh=True), collector=dies, replayer=gained)
    with pytest.raises(UserError, match=r"^--no-replay: changed since the refresh in "):
        _again(job, gained, Device(), [])


def test_a_refresh_killed_after_its_replay_resumes_with_that_replay(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Killed in the run step, after the replay step: the resumed refresh does not
    replay again, decides as an unkilled one, and writes the replay it made; a
    replay changed in the work folder meanwhile is an error, not used."""
    whole, job = _replayed_setup(built, tmp_path / "whole", capsys)
    _again(job, Replays(), Device(), [])
    at, job = _replayed_setup(built, tmp_path / "k", capsys)
    replays = Replays()
    with pytest.raises(Killed):
        _again(job, replays, Device(kill_after=0), [])
    state = json.loads((at / "suite.refresh" / "state.json").read_text())
    assert state["done"] == ["begin", "index", "diff", "capture", "replay", "decide"]
    work = at / "suite.refresh"
    made = (work / "replay.jsonl").read_bytes()
    (work / "replay.jsonl").write_bytes(made + b"\n")
    with pytest.raises(UserError, match=r"its replay\.jsonl changed since the replay step"):
        _again(job, replays, Device(), [])
    (work / "replay.jsonl").write_bytes(made)
    said: list[str] = []
    _again(job, replays, Device(), said)
    assert said[0] == (
        "ootest: refresh: resuming at step run (begin, index, diff, capture, replay, decide done)"
    )
    assert len(replays.asked) == 1  # not replayed again
    assert _decisions(at / "suite.yaml") == _decisions(whole / "suite.yaml")
    assert _decisions(at / "suite.yaml")[ADD][0] == "mandatory_success"
    assert (at / "replay.jsonl").read_bytes() == made


def test_a_replay_that_cannot_run_says_how_to_go_on(tmp_path: Path) -> None:
    """The refresh's default replayer is ``ootest ops replay`` in a child process;
    a replay that fails there is one error with its output and the way around it."""
    from ootest.opmap.store import OpStore
    from ootest.select.refresh import _ootest_replay

    with OpStore.open(tmp_path / "ops.db", create=True):
        pass  # an op map without call examples
    with pytest.raises(UserError) as e:
        _ootest_replay(tmp_path / "ops.db", tmp_path / "r.jsonl", device="emu:young",
                       timeout=3.0, say=print)  # fmt: skip
    first, _, rest = str(e.value).partition("\n")
    assert first == (
        "the replay on emu:young failed (ootest ops replay exit status 2; pass --no-replay "
        "to keep the replay you have); its output ends:"
    )
    assert "holds no call examples" in rest and "Traceback" not in rest


def test_a_first_replay_is_written_where_replay_names_and_re_checks_the_skips(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scheduled refresh whose replay file is not there (its first, or a cache
    that lost it): the replay step writes the first one; the config's evidence
    (beta's add call failed) is what it is compared with, so the skip whose call
    now replays as on the CPU comes back all the same."""
    at, job = _replayed_setup(built, tmp_path / "a", capsys)
    (at / "replay.jsonl").unlink()
    device = Device()
    done = _again(job, Replays(), device, [])
    assert done.changed
    assert _decisions(at / "suite.yaml")[ADD] == ("mandatory_success", "ops_supported")
    assert device.resumed == [False]
    assert (at / "replay.jsonl").read_bytes() == (done.work / "replay.jsonl").read_bytes()
