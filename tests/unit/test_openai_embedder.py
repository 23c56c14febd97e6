"""OpenAIEmbedder against the OpenAI-compatible test server (tests/support/openai_server.py),
through the official SDK: the request it sends, the vectors it returns in input order, and
errors as a ModelError naming the embedder."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fleet.errors import ModelError
from fleet.recall.embeddings import OpenAIEmbedder
from tests.support.openai_server import FakeOpenAI, embedding_of, embeddings_reply


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def embedder(server: FakeOpenAI, **kw: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        model="text-embedding-3-small",
        base_url=server.base_url,
        api_key="sk-embed",
        timeout_s=5.0,
        max_retries=0,
        **kw,  # type: ignore[arg-type]
    )


def test_texts_are_embedded_in_one_request_in_their_order(server: FakeOpenAI) -> None:
    texts = ["I like green tea.", "My dog is called Biscuit.", "Lisbon"]
    vectors = embedder(server).embed(texts)
    assert vectors.shape == (3, 8) and vectors.dtype == np.float32
    expected = np.asarray([embedding_of(t) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, rtol=1e-6)
    [sent] = server.requests
    assert sent.path == "/v1/embeddings"
    assert sent.headers["authorization"] == "Bearer sk-embed"
    assert sent.body["model"] == "text-embedding-3-small" and sent.body["input"] == texts
    assert "dimensions" not in sent.body


def test_dimensions_are_asked_for_and_named(server: FakeOpenAI) -> None:
    made = embedder(server, dimensions=16)
    assert made.name == "openai:text-embedding-3-small-16"
    assert made.embed(["one"]).shape == (1, 16)
    assert server.bodies()[0]["dimensions"] == 16


def test_an_answer_out_of_order_is_put_back_in_input_order(server: FakeOpenAI) -> None:
    texts = ["first", "second", "third"]
    answer = embeddings_reply({"model": "m", "input": texts})
    answer["data"].reverse()
    server.enqueue(body=answer)
    vectors = embedder(server).embed(texts)
    np.testing.assert_allclose(vectors[0], embedding_of("first"), rtol=1e-6)
    np.testing.assert_allclose(vectors[2], embedding_of("third"), rtol=1e-6)


def test_nothing_to_embed_sends_nothing(server: FakeOpenAI) -> None:
    assert embedder(server).embed([]).shape[0] == 0
    assert server.requests == []


def test_an_error_is_a_model_error_naming_the_embedder(server: FakeOpenAI) -> None:
    server.enqueue(status=401)
    with pytest.raises(ModelError, match=r"embeddings openai:text-embedding-3-small failed: "):
        embedder(server).embed(["x"])
