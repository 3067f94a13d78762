"""Optional embeddings and summaries, with a fake embedder and a mock HTTP transport."""

from __future__ import annotations

import json
import math
import re
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
from tests.conftest import ootest
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
    try:
        import fastembed  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the embed extra is installed here")
    r = ootest("index", "embed", "--db", str(index))
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "ootest: error: embeddings need the optional 'embed' extra: pip install 'ootest[embed]' "
        "(installs fastembed; the model's weights download on first use of 'ootest index embed')"
    )
    with pytest.raises(UserError, match="the index has no embeddings"):
        query_index(index, "x", embed=True)
    # by default, a query without embeddings simply uses what the index has
    assert query_index(index, "kumquat")[0].found_by == ["bm25"]


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
