"""Optional embeddings and summaries, with a fake embedder and a mock HTTP transport."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from ootest.errors import UserError
from ootest.memory import (
    BuildOptions,
    LLMSettings,
    build_index,
    embed_tests,
    query_index,
    summarize_tests,
)
from tests.conftest import ootest, run
from tests.memory.trees import write_plain

VOCAB = ["helper", "kumquat", "assert", "test", "many", "b1", "b2", "one"]


def fake_embedder(calls: list[int]) -> object:
    """Bag-of-words vectors over VOCAB; records each batch size."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        out = []
        for t in texts:
            words = re.findall(r"[a-z0-9]+", t.lower())
            out.append([float(words.count(w)) + 0.01 for w in VOCAB])
        return out

    return embed


@pytest.fixture
def index(tmp_path: Path) -> Path:
    root = write_plain(tmp_path)
    db = tmp_path / "memory.db"
    build_index(BuildOptions(roots=(root,), db=db, torch_db=False, variants=False))
    return db


def test_embeddings_are_cached_by_text(index: Path) -> None:
    calls: list[int] = []
    rep = embed_tests(index, model="fake", embedder=fake_embedder(calls))  # type: ignore[arg-type]
    assert (rep.embedded, rep.reused, calls) == (4, 0, [4])
    rep = embed_tests(index, model="fake", embedder=fake_embedder(calls))  # type: ignore[arg-type]
    assert (rep.embedded, rep.reused, calls) == (0, 4, [4])


def test_query_fuses_embeddings(index: Path) -> None:
    calls: list[int] = []
    emb = fake_embedder(calls)
    embed_tests(index, model="fake", embedder=emb)  # type: ignore[arg-type]
    hits = query_index(index, "kumquat", embedder=emb)  # type: ignore[arg-type]
    assert (hits[0].key, hits[0].found_by) == (
        "tests/test_a.py::TestPlain::test_one",
        ["bm25", "embedding"],
    )
    assert math.isclose(hits[0].score, 2 / 61)
    assert calls[-1] == 1  # the query text, embedded once


def test_asking_for_embeddings_without_the_extra_is_one_clear_error(index: Path) -> None:
    if importlib.util.find_spec("wordllama") is not None:
        pytest.skip("the embed extra is installed here")
    r = ootest("index", "embed", "--db", str(index))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "ootest: error: embeddings need the optional 'embed' extra: pip install 'ootest[embed]' "
        "(installs wordllama, whose wheel ships the model's weights)"
    )
    with pytest.raises(UserError, match="the index has no embeddings"):
        query_index(index, "x", embed=True)
    # by default, a query without embeddings simply uses what the index has
    assert query_index(index, "kumquat")[0].found_by == ["bm25"]


# A stand-in for the wordllama wheel: its layout (weights/<config>_<dim>.safetensors,
# tokenizers/<config>_tokenizer_config.json) and how WordLlama.load resolves files
# (weights in the package, the tokenizer under <cache_dir>/tokenizers/, else a
# download unless disable_download). Its import configures logging, as the real
# one's does. Vectors: bag of words over VOCAB.
STAND_IN = f"""
import logging
from pathlib import Path

logging.basicConfig(level=logging.INFO)
_HERE = Path(__file__).parent
VOCAB = {VOCAB!r}


class _Model:
    def embed(self, texts, norm=False):
        import re
        return [[re.findall(r"[a-z0-9]+", t.lower()).count(w) + 0.01 for w in VOCAB]
                for t in texts]


class WordLlama:
    @classmethod
    def load(cls, config="l2_supercat", dim=256, cache_dir=None, disable_download=False):
        cache = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "wordllama"
        files = (_HERE / "weights" / f"{{config}}_{{dim}}.safetensors",
                 cache / "tokenizers" / f"{{config}}_tokenizer_config.json")
        if not all(f.exists() for f in files):
            if disable_download:
                raise FileNotFoundError(f"{{files}} not found and downloads are disabled")
            raise RuntimeError("the stand-in was asked to download")
        return _Model()
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> dict[str, str]:
    pkg = tmp_path / "site" / "wordllama"
    (pkg / "weights").mkdir(parents=True)
    (pkg / "tokenizers").mkdir()
    (pkg / "__init__.py").write_text(STAND_IN)
    (pkg / "weights" / "l2_supercat_256.safetensors").write_bytes(b"")
    (pkg / "weights" / "l2_supercat_256_binary.safetensors").write_bytes(b"")
    (pkg / "tokenizers" / "l2_supercat_tokenizer_config.json").write_text("{}")
    path = os.pathsep.join(p for p in (str(pkg.parent), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


def test_the_extra_loads_the_model_its_wheel_ships(index: Path, stand_in: dict[str, str]) -> None:
    r = ootest("index", "embed", "--db", str(index), env=stand_in)
    assert (r.returncode, r.stdout) == (0, "embedded 4 tests, 0 unchanged, 0 dropped\n"), r.stderr
    r = ootest("index", "query", "kumquat", "--embed", "--json", "--db", str(index), env=stand_in)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)[0]
    assert (first["key"], first["found_by"]) == (
        "tests/test_a.py::TestPlain::test_one",
        ["bm25", "embedding"],
    )


def test_a_model_the_wheel_does_not_ship_is_never_downloaded(
    index: Path, stand_in: dict[str, str]
) -> None:
    r = ootest("index", "embed", "--db", str(index), "--model", "wordllama/l3_supercat_512",
               env=stand_in)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "ootest: error: embedding model 'wordllama/l3_supercat_512' is not shipped in the "
        "installed wordllama wheel (models are never downloaded); expected one of: "
        "wordllama/l2_supercat_256"
    )


def test_loading_the_extra_leaves_logging_as_it_was(stand_in: dict[str, str]) -> None:
    code = (
        "import logging\n"
        "from ootest.memory._embed import load_embedder\n"
        "embed = load_embedder()\n"
        "root = logging.getLogger()\n"
        "print(len(root.handlers), logging.getLevelName(root.level), len(embed(['a kumquat'])[0]))"
    )
    r = run([sys.executable, "-c", code], env=stand_in)
    assert (r.returncode, r.stdout) == (0, f"0 WARNING {len(VOCAB)}\n"), r.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("wordllama") is None, reason="the embed extra is not installed"
)
def test_the_shipped_model_finds_what_bm25_does_not(tmp_path: Path) -> None:
    """The real model (only where the extra is installed; never in CI)."""
    root = tmp_path / "tests"
    root.mkdir()
    (root / "test_real.py").write_text(REAL)
    db = tmp_path / "memory.db"
    build_index(BuildOptions(roots=(root,), db=db, torch_db=False, variants=False))
    assert embed_tests(db).embedded == 3
    for text, test in (
        ("cumulative", "test_cumsum"),
        ("order from largest to smallest", "test_sort_descending"),
    ):
        assert query_index(db, text, embed=False) == []
        first = query_index(db, text, embed=True)[0]
        assert (first.key, first.found_by) == (f"tests/test_real.py::{test}", ["embedding"])


REAL = '''
def test_cuda_streams():
    """The current stream exists."""
    assert torch.cuda.current_stream() is not None


def test_cumsum():
    """Running totals of a range."""
    assert list(itertools.accumulate(range(4))) == [0, 1, 3, 6]


def test_sort_descending():
    assert sorted([2, 3, 1], reverse=True) == [3, 2, 1]
'''


class FakeLLM:
    """An OpenAI-compatible chat endpoint on a MockTransport."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[dict[str, object]] = []
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append(
            {"url": str(request.url), "auth": request.headers.get("authorization"), **body}
        )
        if self.status != 200:
            return httpx.Response(self.status, text="overloaded")
        prompt = body["messages"][1]["content"]
        name = prompt.splitlines()[0].rsplit("::", 1)[-1]
        return httpx.Response(
            200, json={"choices": [{"message": {"content": f" Checks {name} with a quince. "}}]}
        )


SETTINGS = LLMSettings("http://llm.test/v1", "tiny", "sekrit")


def test_summaries_are_asked_once_and_searchable(index: Path) -> None:
    llm = FakeLLM()
    client = httpx.Client(transport=httpx.MockTransport(llm))
    rep = summarize_tests(index, SETTINGS, client=client)
    assert (rep.asked, rep.cached) == (4, 0)
    first = llm.requests[0]
    assert first["url"] == "http://llm.test/v1/chat/completions"
    assert (first["auth"], first["model"], first["temperature"]) == ("Bearer sekrit", "tiny", 0)
    rep = summarize_tests(index, SETTINGS, client=client)
    assert (rep.asked, rep.cached, len(llm.requests)) == (0, 4, 4)
    hits = query_index(index, "quince")
    assert sorted(h.key for h in hits) == [
        "tests/test_a.py::TestPlain::test_one",
        "tests/test_a.py::test_many",
        "tests/test_b.py::test_b1",
        "tests/test_b.py::test_b2",
    ]


def test_summaries_survive_a_rebuild_of_an_unchanged_test(index: Path, tmp_path: Path) -> None:
    client = httpx.Client(transport=httpx.MockTransport(FakeLLM()))
    summarize_tests(index, SETTINGS, client=client)
    b = tmp_path / "tests" / "test_b.py"
    b.write_text(b.read_text() + "\n\ndef test_b3():\n    pass\n")
    build_index(BuildOptions(roots=(b.parent,), db=index, torch_db=False, variants=False))
    keys = sorted(h.key for h in query_index(index, "quince"))
    assert keys == [
        "tests/test_a.py::TestPlain::test_one",
        "tests/test_a.py::test_many",
        "tests/test_b.py::test_b1",
        "tests/test_b.py::test_b2",
    ]


def test_limit_and_http_errors(index: Path) -> None:
    llm = FakeLLM()
    rep = summarize_tests(index, SETTINGS, httpx.Client(transport=httpx.MockTransport(llm)), 2)
    assert rep.asked == 2
    failing = httpx.Client(transport=httpx.MockTransport(FakeLLM(status=503)))
    with pytest.raises(UserError) as e:
        summarize_tests(index, SETTINGS, client=failing)
    assert str(e.value) == "http://llm.test/v1/chat/completions: HTTP 503: overloaded"


def test_settings_come_from_options_then_env() -> None:
    env = {"OOTEST_LLM_ENDPOINT": "http://env/v1/", "OOTEST_LLM_MODEL": "m", "OPENAI_API_KEY": "k"}
    assert LLMSettings.resolve(None, None, None, env) == LLMSettings("http://env/v1", "m", "k")
    assert LLMSettings.resolve("http://opt", "n", None, env) == LLMSettings("http://opt", "n", "k")
    with pytest.raises(UserError) as e:
        LLMSettings.resolve(None, "m", None, {})
    assert str(e.value) == (
        "summaries need an OpenAI-compatible endpoint: pass --endpoint URL or set "
        "OOTEST_LLM_ENDPOINT (e.g. http://localhost:8000/v1)"
    )
