"""``ootest init --capture``: the op map captured in shards on GitHub-hosted
runners, merged only when every shard arrived, published under its torch and
tree, and found by the refresh under the same key. The checks parse the
generated YAML and run its scripts with bash as GitHub Actions does, against
the real ``ootest`` and fake ``gh``/``python``/scripts; schema and zizmor are in
test_init_lint.py, the capture command itself in tests/e2e/test_capture_shards.py."""

from __future__ import annotations

import fnmatch
import gzip
import json
import os
import re
import shlex
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from ootest.cli.main import _parser
from ootest.errors import UserError
from ootest.opmap.ingest import ingest_records
from ootest.opmap.shards import ShardRecord, write_shard
from ootest.opmap.store import OpStore
from ootest.relay.init import init, ootest_pin
from ootest.version import ootest_version
from tests.conftest import ootest
from tests.opmap.conftest import PROV, ops, stop
from tests.relay.test_init import REAL_OOTEST, _bash, _bin, _step

WF = ".github/workflows/ootest-capture-spyre.yml"
REFRESH_WF = ".github/workflows/ootest-refresh-spyre.yml"
TORCH = "2.13.0.dev20261207+cpu"
TREE = "c" * 40


def _generate(tmp_path: Path, shards: int = 3, **kw: Any) -> dict[str, Any]:
    init(tmp_path, "spyre", "torch_spyre", 1, False, capture="17 1 * * 1", capture_shards=shards,
         **kw)  # fmt: skip
    wf: dict[str, Any] = yaml.safe_load((tmp_path / WF).read_text())
    return wf


def _tools(tmp_path: Path, **bodies: str) -> str:
    """A PATH whose first folder holds these commands (name -> sh body)."""
    d = tmp_path / f"tools-{abs(hash(tuple(bodies.items())))}"
    d.mkdir(exist_ok=True)
    for name, body in bodies.items():
        (d / name).write_text(f"#!/bin/sh\n{body}\n")
        (d / name).chmod(0o755)
    return f"{d}{os.pathsep}{os.environ['PATH']}"


def _shard_db(path: Path, i: int, n: int, torch: str = TORCH) -> None:
    """A shard's index as its capture leg leaves it (Note [Shard records])."""
    path.parent.mkdir(parents=True, exist_ok=True)
    vid = f"test/test_x.py::TestX::test_{i}"
    with OpStore.open(path, create=True) as store:
        recs = [{**PROV, "torch_version": torch, "time": float(i)}, ops(vid, {"aten::add": 1})]
        ingest_records(store, [*recs, stop(vid)], source="t")
        write_shard(store.connection, ShardRecord(f"{i}/{n}", torch, TREE, True))
    (path.parent / "ops.db.capture").mkdir(exist_ok=True)
    (path.parent / "ops.db.capture" / "results.jsonl").write_text(
        json.dumps({"kind": "result", "variant_id": vid, "outcome": "passed", "duration": i}) + "\n"
    )


# ------------------------------------------------------------------ the file itself


def test_each_job_holds_only_what_it_needs_and_pins_what_it_runs(tmp_path: Path) -> None:
    wf = _generate(tmp_path)
    on = wf[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["schedule"] == [{"cron": "17 1 * * 1"}] and "workflow_dispatch" in on
    assert wf["permissions"] == {}
    assert set(wf["jobs"]) == {"plan", "capture", "merge", "publish"}
    perms = {name: job["permissions"] for name, job in wf["jobs"].items()}
    assert perms == {
        "plan": {"contents": "read"},
        "capture": {"contents": "read"},
        "merge": {},
        "publish": {"contents": "write"},
    }
    # no accelerator: every job on a fresh GitHub-hosted VM
    assert {job["runs-on"] for job in wf["jobs"].values()} == {"ubuntu-latest"}
    # the job that can write runs no ootest, no script, checks nothing out
    runs = re.compile(r"(^|[;&|(]|\$\()\s*(ootest|pip|bash|sh|python\S*|\./|scripts/)", re.M)
    for s in wf["jobs"]["publish"]["steps"]:
        assert not s.get("uses", "").startswith("actions/checkout@")
        assert not runs.search(s.get("run", "")), s
    pin, _ = ootest_pin(ootest_version())
    for job in wf["jobs"].values():
        for s in job["steps"]:
            script = s.get("run", "")
            assert "${{" not in script, s  # values reach scripts through env:
            if "uses" in s:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", s["uses"]), s["uses"]
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s["with"]["persist-credentials"] is False
            for line in script.splitlines():
                if "pip install" in line:
                    assert line.strip() == f'pip install "{pin}"'
    assert wf["jobs"]["capture"]["strategy"]["matrix"]["shard"] == [1, 2, 3]
    assert wf["env"]["SHARDS"] == "3"


def test_the_capture_step_is_a_resumable_shard_that_uploads_what_it_writes(
    tmp_path: Path,
) -> None:
    wf = _generate(tmp_path)
    plan, capture, merge = (wf["jobs"][j] for j in ("plan", "capture", "merge"))
    line = _step(capture, "ootest ops capture")["run"]
    env = {"OOTEST_CONFIG": "ootest.yaml", "SHARD": "2", "SHARDS": "3", "TREE_COMMIT": TREE}
    env["RUNNER_TEMP"] = "/rt"
    argv = shlex.split(line)[1:]
    for k, v in sorted(env.items(), key=lambda kv: -len(kv[0])):  # $SHARDS before $SHARD
        argv = [a.replace(f"${k}", v) for a in argv]
    args = _parser().parse_args(argv)
    assert (args.targets, args.device, args.shard) == (["ootest.yaml"], "emu:full", "2/3")
    assert (args.tree_commit, args.resume) == (TREE, True)
    # every shard splits by the one durations file the plan handed out
    handed = _step(plan, "actions/upload-artifact@")["with"]
    downloads = [s for s in capture["steps"] if s.get("uses", "").startswith("actions/download")]
    durations, earlier = downloads
    assert durations["with"]["name"] == handed["name"] == "ootest-capture-durations"
    assert args.durations == [durations["with"]["path"].replace("${{ runner.temp }}", "/rt")
                              + "/durations.jsonl"]  # fmt: skip
    # resumable: a re-run downloads its own earlier upload where the capture goes on
    upload = _step(capture, "actions/upload-artifact@")
    assert upload["if"] == "always()" and upload["with"]["include-hidden-files"] is True
    assert earlier["with"]["name"] == upload["with"]["name"]
    assert earlier["continue-on-error"] is True
    folder = Path(upload["with"]["path"])
    assert Path(earlier["with"]["path"]) == folder
    assert args.db.parent == folder  # the index and its <db>.capture/ work folder
    # and the merge takes every shard's upload, no other artifact
    pattern = _step(merge, "actions/download-artifact@")["with"]["pattern"]
    names = [upload["with"]["name"].replace("${{ matrix.shard }}", str(i)) for i in (1, 2, 3)]
    assert all(fnmatch.fnmatchcase(n, pattern) for n in names)
    assert not fnmatch.fnmatchcase("ootest-capture-durations", pattern)
    assert not fnmatch.fnmatchcase("ootest-ops-shard-1-of-30", pattern)


# ------------------------------------------------------------------ scripts, run


def test_plan_takes_only_a_version_and_a_commit(tmp_path: Path) -> None:
    wf = _generate(tmp_path / "gen")
    step = _step(wf["jobs"]["plan"], "ootest_capture_torch.sh resolve")
    ws = tmp_path / "ws"
    (ws / "scripts").mkdir(parents=True)
    out = tmp_path / "out"
    script = ws / "scripts" / "ootest_capture_torch.sh"

    def plan(printed: str, want: str = "") -> Any:
        script.write_text(f"echo \"asked: $*\" >&2\nprintf '%s\\n' {shlex.quote(printed)}\n")
        out.write_text("")
        return _bash(step["run"], ws, {"WANT_TORCH": want, "GITHUB_OUTPUT": str(out)})

    r = plan(f"torch_version={TORCH}\ntree_commit={TREE}", want=TORCH)
    assert r.returncode == 0, r.stderr
    assert f"asked: resolve {TORCH}" in r.stderr
    assert out.read_text() == f"torch_version={TORCH}\ntree_commit={TREE}\n"
    r = plan(f"torch_version={TORCH}\ntree_commit={TREE}", want="x; echo pwned")
    assert r.returncode == 1 and "asked" not in r.stderr and out.read_text() == ""
    assert "torch_version: expected a version" in r.stderr
    r = plan("torch_version=2.13 $(id)\ntree_commit=main")
    assert r.returncode == 1 and out.read_text() == ""
    assert "expected torch_version=<version>" in r.stderr


def test_merge_publishes_only_when_every_shard_arrived(tmp_path: Path) -> None:
    wf = _generate(tmp_path / "gen")
    merge = wf["jobs"]["merge"]
    step = _step(merge, "ootest ops merge")
    ws = tmp_path / "ws"
    for i in (1, 3):
        _shard_db(ws / "shards" / f"ootest-ops-shard-{i}-of-3" / "ops.db", i, 3)
    env = {"TORCH_VERSION": TORCH, "TREE_COMMIT": TREE, "PATH": _bin(tmp_path, REAL_OOTEST)}
    r = _bash(step["run"], ws, env)
    assert r.returncode != 0
    assert r.stderr.splitlines()[0] == (
        f"ootest: error: ops merge: expected all 3 shards of torch {TORCH} at tree {TREE}, "
        "found 2; missing shard(s) 2 of 3: capture them (ops capture --shard I/3) and merge all 3"
    )
    assert not (ws / "out" / "ops.db.gz").exists()
    _shard_db(ws / "shards" / "ootest-ops-shard-2-of-3" / "ops.db", 2, 3)
    r = _bash(step["run"], ws, env)
    assert r.returncode == 0, r.stderr
    assert f"all 3 shard(s) of torch {TORCH} at tree {TREE}" in r.stdout
    merged = tmp_path / "merged.db"
    upload = _step(merge, "actions/upload-artifact@")["with"]["path"]
    merged.write_bytes(gzip.decompress((ws / upload).read_bytes()))
    c = sqlite3.connect(merged)
    assert c.execute("SELECT count(*) FROM variant").fetchone() == (3,)
    c.close()
    # a shard of another torch (a nightly published mid-run) is refused too
    other = tmp_path / "ws2"
    for i in (1, 2, 3):
        t = "2.13.0.dev20261208+cpu" if i == 2 else TORCH
        _shard_db(other / "shards" / f"ootest-ops-shard-{i}-of-3" / "ops.db", i, 3, torch=t)
    r = _bash(step["run"], other, env)
    assert r.returncode != 0 and "(another torch)" in r.stderr
    # the durations of every shard, for the next capture's split
    dstep = _step(merge, "results.jsonl")
    out = tmp_path / "out"
    r = _bash(dstep["run"], ws, {"RUNNER_TEMP": str(tmp_path / "rt"), "GITHUB_OUTPUT": str(out)})
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "save=true\n"
    lines = (tmp_path / "rt" / "ootest-durations" / "durations.jsonl").read_text().splitlines()
    assert len(lines) == 3
    save = _step(merge, "actions/cache/save@")["with"]
    restore = _step(wf["jobs"]["plan"], "actions/cache/restore@")["with"]
    assert save["key"].startswith(restore["restore-keys"])


def test_the_refresh_downloads_what_the_capture_published(tmp_path: Path) -> None:
    init(tmp_path / "gen", "spyre", "torch_spyre", 1, False, refresh="41 5 * * 1",
         capture="17 1 * * 1")  # fmt: skip
    cap = yaml.safe_load((tmp_path / "gen" / WF).read_text())
    ref = yaml.safe_load((tmp_path / "gen" / REFRESH_WF).read_text())
    log = tmp_path / "gh.log"
    # publish: the release for this torch and tree, the merged op map as its asset
    temp = tmp_path / "rt"
    (temp / "ootest-ops").mkdir(parents=True)
    (temp / "ootest-ops" / "ops.db.gz").write_bytes(gzip.compress(b"the op map"))
    publish = cap["jobs"]["publish"]["steps"][-1]
    gh = f'echo "$@" >> {shlex.quote(str(log))}\ncase "$1 $2" in "release view") exit 1;; esac'
    env = {"TORCH_VERSION": TORCH, "TREE_COMMIT": TREE, "GITHUB_REPOSITORY": "o/r"}
    env |= {"RUNNER_TEMP": str(temp), "GH_TOKEN": "t", "PATH": _tools(tmp_path, gh=gh)}
    r = _bash(publish["run"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    tag = f"ootest-ops-torch-{TORCH}-tree-{TREE}"
    calls = log.read_text().splitlines()
    assert calls[0] == f"release view {tag} --repo o/r"
    assert calls[1].startswith(f"release create {tag} --repo o/r --prerelease --latest=false")
    assert calls[2] == f"release upload {tag} {temp}/ootest-ops/ops.db.gz --repo o/r --clobber"
    # the refresh, having built that torch at that commit, asks for the same release
    refresh = ref["jobs"]["refresh"]
    step = _step(refresh, "gh release download")
    assert step["if"] == "inputs.seed_torch_sha == ''"  # the seed needs no op map
    assert step["env"]["TREE_COMMIT"] == "${{ steps.build.outputs.sha }}"
    ws = tmp_path / "ws"
    ws.mkdir()
    log.write_text("")
    fetch = (
        f'echo "$@" >> {shlex.quote(str(log))}\n'
        f'[ "$3" = {shlex.quote(tag)} ] || exit 1\n'
        f'cp {shlex.quote(str(temp / "ootest-ops" / "ops.db.gz"))} "$9"'
    )
    python = f"echo {shlex.quote(TORCH)}"
    env = {**ref["env"], "TREE_COMMIT": TREE, "GITHUB_REPOSITORY": "o/r", "GH_TOKEN": "t"}
    env["PATH"] = _tools(tmp_path, gh=fetch, python=python)
    r = _bash(step["run"], ws, env)
    assert r.returncode == 0, r.stderr
    assert log.read_text().split()[:3] == ["release", "download", tag]
    assert (ws / ref["env"]["OOTEST_OPS"]).read_bytes() == b"the op map"
    # and hands it to select refresh
    line = next(
        x for x in _step(refresh, "ootest select refresh")["run"].splitlines()
        if "ootest select refresh" in x
    )  # fmt: skip
    argv = shlex.split(line)[1:]
    for k, v in {**ref["env"], "TORCH_ROOT": "/torch"}.items():
        argv = [a.replace(f"${k}", v) for a in argv]
    assert _parser().parse_args(argv).ops == Path(ref["env"]["OOTEST_OPS"])
    # with the replayed calls the config names, kept in the cache under their
    # digest: the refresh replays again and re-checks the known failures
    assert _parser().parse_args(argv).replay == Path(ref["env"]["OOTEST_REPLAY"])
    named = {st.get("name"): st for st in refresh["steps"]}
    restore = named["the replayed calls the config names"]
    config = ws / "ootest.yaml"
    config.write_text("# memory sha256:1; op map sha256:2\n# replayed calls sha256:0123abcd\n")
    out = ws / "out.txt"
    r = _bash(restore["run"], ws, {**ref["env"], "OOTEST_CONFIG": str(config),
                                   "GITHUB_OUTPUT": str(out)})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "key=ootest-replay-spyre-sha256:0123abcd\n"
    steps = refresh["steps"]
    at = steps.index(restore)
    assert steps[at + 1]["with"] == {
        "path": ref["env"]["OOTEST_REPLAY"], "key": "${{ steps.replay.outputs.key }}"
    }  # fmt: skip
    save = steps[steps.index(named["the replayed calls the config names now"]) + 1]
    assert save["with"]["path"] == ref["env"]["OOTEST_REPLAY"]
    assert "steps.replay_saved.outputs.key != steps.replay.outputs.key" in save["if"]
    # nothing published for this torch: the job fails and says what to run
    r = _bash(step["run"], ws, {**env, "PYTHONPATH": "", "TREE_COMMIT": "d" * 40})
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"no op map is published for torch {TORCH} at tree {'d' * 40} (release "
        f"ootest-ops-torch-{TORCH}-tree-{'d' * 40}): run the ootest-capture-spyre workflow by "
        f"hand with torch_version={TORCH}, then this one again"
    )


def test_without_capture_the_refresh_is_as_before(tmp_path: Path) -> None:
    init(tmp_path, "spyre", "torch_spyre", 1, False, refresh="41 5 * * 1")
    text = (tmp_path / REFRESH_WF).read_text()
    assert "--ops" not in text and "gh release" not in text and "OOTEST_OPS" not in text
    assert "--replay" not in text and "OOTEST_REPLAY" not in text
    assert not (tmp_path / WF).exists()
    assert not (tmp_path / "scripts" / "ootest_capture_torch.sh").exists()


# ------------------------------------------------------------------ options


def test_capture_options(tmp_path: Path) -> None:
    r = ootest("init", "--dir", str(tmp_path), "--device", "spyre", "--capture-shards", "2")
    assert r.returncode == 0, r.stderr
    assert f"wrote {tmp_path / WF}" in r.stdout
    wf = yaml.safe_load((tmp_path / WF).read_text())
    assert wf["jobs"]["capture"]["strategy"]["matrix"]["shard"] == [1, 2]
    assert wf[True]["schedule"] == [{"cron": "17 1 * * 1"}]  # the default: hours before refresh
    assert os.access(tmp_path / "scripts" / "ootest_capture_torch.sh", os.X_OK)
    for shards in (0, -1, 257):
        with pytest.raises(UserError) as e:
            init(tmp_path / "x", "spyre", "torch_spyre", 1, False, capture="1 1 * * 1",
                 capture_shards=shards)  # fmt: skip
        assert str(e.value) == (
            "--capture-shards: expected a number of shards from 1 to 256 (GitHub's matrix "
            f"cap), found {shards}"
        )
    with pytest.raises(UserError) as e:
        init(tmp_path / "x", "spyre", "torch_spyre", 1, False, capture="* * *")
    assert str(e.value) == (
        "--capture-schedule: expected a cron schedule of five fields such as '17 1 * * 1' "
        "(minute hour day month weekday), found a string of 5 characters (not shown: outside "
        "[A-Za-z0-9._/:@+= -])"
    )
    assert not (tmp_path / "x").exists()
