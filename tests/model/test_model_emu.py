"""Model-derived tests on emu (subprocess tier): declared calls and modules run as
variants with exactly their declared inputs, and a recorded model round-trips."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.conftest import ootest, run
from tests.model.fixture import CONFIG, EXPECTED, MODULES_FILE, upstream_file

# Plan caches stay out of the home folder; every run decides afresh.
ENV = {"OOTEST_NO_CACHE": "1"}


def _results(path: Path) -> dict[str, dict[str, object]]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    return {r["variant_id"].split("::", 1)[1]: r for r in recs if r["kind"] == "result"}


def _log(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


OPS = "TestModelOps::test_model_ops_db"


def test_declared_calls_and_modules_run_on_emu(tmp_path: Path) -> None:
    (tmp_path / "test_model_ops.py").write_text(upstream_file())
    (tmp_path / "tiny_modules.py").write_text(MODULES_FILE)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    first = ootest(
        "run", "cfg.yaml", "--results", "first.jsonl", cwd=tmp_path,
        env={**ENV, "MODEL_LOG": str(tmp_path / "first.log"), "OOTEST_MODEL_MAX_BYTES": "1000000"},
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    got = {k: r["outcome"] for k, r in _results(tmp_path / "first.jsonl").items()}
    # one variant per declared call, named by its op, its dtype and the entry it came from
    assert got == {
        f"{OPS}[op=torch.mul,dtype=bfloat16,entry=1]": "passed",
        f"{OPS}[op=torch.nn.functional.embedding,dtype=float32,entry=1]": "passed",
        f"{OPS}[op=torch.cat,dtype=float16,entry=1]": "passed",
        f"{OPS}[op=torch.getitem,dtype=float32,entry=#3]": "passed",  # untagged: its index
        f"{OPS}[op=torch.to,dtype=float32,entry=1]": "passed",
        f"{OPS}[op=torch.reshape,dtype=bfloat16,entry=1]": "passed",
        f"{OPS}[op=torch.le,dtype=int64,entry=1]": "passed",
        f"{OPS}[op=torch.add,dtype=float32,entry=big]": "skipped",  # over the memory bound
        "TestModelOps::test_forward[dtype=float32,module=TinyBlock_8,training=True]": "passed",
        "TestModelOps::test_forward[dtype=bfloat16,module=GraniteRMSNorm_4096,training=True]": (
            "skipped"
        ),
    }
    res = _results(tmp_path / "first.jsonl")
    missing = res[
        "TestModelOps::test_forward[dtype=bfloat16,module=GraniteRMSNorm_4096,training=True]"
    ]
    assert missing["message"] == (
        "Skipped: cannot import not_installed_pkg.models.granite.GraniteRMSNorm: "
        "ModuleNotFoundError: No module named 'not_installed_pkg'"
    )
    big = res[f"{OPS}[op=torch.add,dtype=float32,entry=big]"]
    assert big["message"] == (
        "Skipped: entry torch.add (cfg.yaml:149) needs 4.0 MiB of input tensors, more than "
        "the 976.6 KiB ootest allows (set OOTEST_MODEL_MAX_BYTES to change it)"
    )
    log = _log(tmp_path / "first.log")
    calls = [x for x in log if "op" in x]
    # the test body asserted every layout (shape, stride, storage offset, device) against
    # EXPECTED; each call ran once, the oversized one never
    assert sorted((x["op"], x["entry"]) for x in calls) == sorted(
        k for k in EXPECTED if k != ("torch.add", "big")
    )
    precision = {x["dtype"]: (x["precision"], x["rel_tol"]) for x in calls}
    assert precision["torch.bfloat16"] == (0.02, 0.016)  # global.supported_dtypes, per dtype
    assert precision["torch.float16"] == (0.005, 0.004)
    assert precision["torch.float32"] == (0.0001, 0.0002)
    modules = [x for x in log if "module" in x]
    assert modules == [  # the constructor got <config:...> (hidden 8) and scale 0.5
        {"module": "TinyBlock_8", "forward": [[[2, 8], [1, 2]]], "scale": 0.5, "hidden": 8},
        {"module": "TinyBlock_8", "forward": [[[1, 8], [8, 1]]], "scale": 0.5, "hidden": 8},
    ]
    # the device the trace ran on is mapped to the device under test, and said so
    assert "model entries were recorded on cuda:0, cpu" in (tmp_path / "pytest.log").read_text()

    again = ootest(
        "run", "cfg.yaml", "--results", "again.jsonl", "--", "-k", "not test_forward",
        cwd=tmp_path, env={**ENV, "MODEL_LOG": str(tmp_path / "again.log")},
    )  # fmt: skip
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    values = {(x["op"], x["entry"]): x["values"] for x in _log(tmp_path / "again.log")}
    # the same inputs on every run (seeded from input_config.seed, not the global RNG)
    assert {(x["op"], x["entry"]): x["values"] for x in calls} == {
        k: v for k, v in values.items() if k != ("torch.add", "big")
    }
    assert ("torch.add", "big") in values  # without the bound it runs


def test_call_and_module_tags_select_injected_variants(tmp_path: Path) -> None:
    """A declared call's tags (Torch Spyre's constant, fp32operation...) and a module
    entry's are marks tag__<tag> on their variants, so -m selects them; a tagged module
    whose package is missing is still one skipped variant with the import error."""
    (tmp_path / "test_model_ops.py").write_text(upstream_file())
    (tmp_path / "tiny_modules.py").write_text(MODULES_FILE)
    missing = "                - name: GraniteRMSNorm_4096\n"
    assert missing in CONFIG
    text = CONFIG.replace(missing, missing + "                  tags: [norm_layer]\n")
    (tmp_path / "cfg.yaml").write_text(text)
    r = ootest(
        "run", "cfg.yaml", "--results", "r.jsonl", "--",
        "-m", "tag__constant or tag__tensorsoncpu or tag__norm_layer",
        cwd=tmp_path, env={**ENV, "MODEL_LOG": str(tmp_path / "m.log")},
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = _results(tmp_path / "r.jsonl")
    norm = "TestModelOps::test_forward[dtype=bfloat16,module=GraniteRMSNorm_4096,training=True]"
    assert {k: x["outcome"] for k, x in res.items()} == {
        f"{OPS}[op=torch.mul,dtype=bfloat16,entry=1]": "passed",  # tags: [..., constant, ...]
        f"{OPS}[op=torch.to,dtype=float32,entry=1]": "passed",  # tags: [tensorsoncpu, ...]
        norm: "skipped",
    }
    assert res[norm]["message"] == (
        "Skipped: cannot import not_installed_pkg.models.granite.GraniteRMSNorm: "
        "ModuleNotFoundError: No module named 'not_installed_pkg'"
    )


MLP = """
import torch

torch.manual_seed(0)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(4096, 16)  # a table too big to store in a config
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, ids, x):
        h = self.embed(ids) + x
        return self.fc2(torch.relu(self.fc1(h)))


model = TinyLM().eval()
ids = torch.randint(0, 4096, (8,))
x = torch.randn(16, 8).t()  # a non-contiguous input: shape [8, 16], stride [1, 8]
with torch.no_grad():
    for _ in range(3):
        y = model(ids, x)
print("done", tuple(y.shape))
"""


def test_a_recorded_model_round_trips_on_emu(tmp_path: Path) -> None:
    (tmp_path / "tiny_lm.py").write_text(MLP)
    rec = ootest(
        "model", "record", "--tag", "model__tiny-lm", "--out", "ops.yaml",
        "--", sys.executable, "tiny_lm.py", cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stdout[-3000:] + rec.stderr[-3000:]
    assert "done (8, 4)" in rec.stdout  # the script ran as itself
    text = (tmp_path / "ops.yaml").read_text()
    doc = yaml.safe_load(text)
    test = doc["test_suite_config"]["files"][0]["tests"][0]
    calls = test["edits"]["ops"]["include"]
    by_name = {}
    for c in calls:
        by_name.setdefault(c["name"], []).append(c)
    # the non-contiguous input is recorded with its layout, the call site and the count
    fc1 = by_name["torch.nn.functional.linear"][0]
    assert fc1["sample_inputs_func"]["args"][0]["tensor"]["shape"] == [8, 16]
    assert fc1["count"] == 3 and fc1["tags"] == ["torch.nn.functional.linear.1"]
    assert fc1["description"].startswith("tiny_lm.py:16 in forward, code: return self.fc2(")
    table = by_name["torch.nn.functional.embedding"][0]["sample_inputs_func"]["args"]
    assert table[0]["tensor"]["init"] == "randint"  # indices stay in the observed range
    assert table[0]["tensor"]["init_args"]["high"] <= 4096
    assert table[1]["tensor"]["shape"] == [4096, 16]
    # described, never stored: no list of numbers longer than a shape, a small file
    lists = [len(v) for v in _lists(doc) if all(isinstance(x, int | float) for x in v)]
    assert max(lists) <= 4 and len(text) < 10_000, (max(lists), len(text))
    assert test["tags"] == ["model__tiny-lm"]

    r = ootest("run", "ops.yaml", "--device", "emu:full", cwd=tmp_path, env=ENV)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = _results(tmp_path / ".ootest" / "results.jsonl")
    assert len(res) == len(calls) and {x["outcome"] for x in res.values()} == {"passed"}
    assert any("op=torch.nn.functional.linear,dtype=float32,entry=1" in k for k in res)


def _lists(v: object) -> list[list[object]]:
    out: list[list[object]] = []
    if isinstance(v, dict):
        for x in v.values():
            out += _lists(x)
    elif isinstance(v, list):
        out.append(v)
        for x in v:
            out += _lists(x)
    return out


def test_record_keeps_what_ran_when_the_script_fails(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "import torch\nx = torch.ones(3)\ny = x * 2\nraise SystemExit(3)\n"
    )
    r = ootest(
        "model", "record", "--tag", "model__bad", "--", sys.executable, "bad.py", cwd=tmp_path
    )
    assert r.returncode == 1, r.stderr
    assert (
        "ootest: the script exited with 3: ops.yaml holds the calls made before it ended"
        in r.stderr
    )
    names = [c["name"] for c in _include(tmp_path / "ops.yaml")]
    assert names == ["torch.ones", "torch.Tensor.mul"]
    assert run([sys.executable, "-c", "pass"]).returncode == 0


def _include(path: Path) -> list[dict[str, object]]:
    doc = yaml.safe_load(path.read_text())
    return doc["test_suite_config"]["files"][0]["tests"][0]["edits"]["ops"]["include"]
