"""Embeddings through tollgate with the official SDKs (issue 42).

The OpenAI Python SDK's `embeddings.create` asks for `base64` unless told otherwise and decodes the vectors
itself; google-genai's `models.embed_content` calls `:batchEmbedContents`. Each reaches the mock, an
OpenAI-compatible upstream (the body passed as sent, the model renamed) and a Gemini upstream (translated),
and the vectors come back as the upstream gave them.
"""

from __future__ import annotations

import base64
import json
import struct

import pytest
from google.genai import types


def b64(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def openai_answer(vectors: list, tokens: int) -> dict:
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    body = {"object": "list", "data": data, "model": "real-chat-model",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}


def gemini_answer(vectors: list) -> dict:
    body = {"embeddings": [{"values": v} for v in vectors]}
    return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}


def test_openai_sdk_on_the_mock(oai):
    r = oai.embeddings.create(model="mock", input=["alpha", "beta", "alpha"])
    assert [d.index for d in r.data] == [0, 1, 2]
    assert len(r.data[0].embedding) == 256
    assert all(isinstance(x, float) for x in r.data[0].embedding)
    assert r.data[0].embedding == r.data[2].embedding
    assert r.data[0].embedding != r.data[1].embedding
    assert r.usage.prompt_tokens >= 3
    floats = oai.embeddings.create(model="mock", input="alpha", encoding_format="float", dimensions=8)
    assert len(floats.data[0].embedding) == 8


def test_openai_sdk_through_an_openai_compatible_upstream(oai, upstream, gateway):
    upstream.queue(openai_answer([b64([0.5, -0.25])], 3))
    r = oai.embeddings.create(model="m-chat", input="hello", dimensions=2)
    assert r.data[0].embedding == [0.5, -0.25]
    assert r.usage.prompt_tokens == 3
    sent = upstream.last
    assert sent.path == "/v1/embeddings"
    body = sent.json()
    assert body["model"] == "real-chat-model"
    assert body["encoding_format"] == "base64", "the SDK's own choice, passed as sent"
    assert body["dimensions"] == 2


def test_openai_sdk_through_a_gemini_upstream(oai, upstream):
    upstream.queue(gemini_answer([[1.0, 0.0], [0.0, 1.0]]))
    r = oai.embeddings.create(model="m-gemini", input=["first", "second"], dimensions=2)
    assert [d.embedding for d in r.data] == [[1.0, 0.0], [0.0, 1.0]]
    assert r.usage.prompt_tokens > 0, "estimated: Gemini reports no usage"
    sent = upstream.last
    assert sent.path == "/v1beta/models/real-gemini-model:batchEmbedContents"
    assert [q["content"]["parts"][0]["text"] for q in sent.json()["requests"]] == ["first", "second"]


def test_openai_sdk_errors_for_a_model_without_embeddings(oai, upstream):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        oai.embeddings.create(model="m-messages", input="x")
    assert "no embeddings endpoint" in str(e.value)
    assert not upstream.received


def test_genai_embed_content_on_the_mock(genai_client):
    r = genai_client.models.embed_content(
        model="mock",
        contents=["one", "two"],
        config=types.EmbedContentConfig(output_dimensionality=16),
    )
    assert len(r.embeddings) == 2
    assert len(r.embeddings[0].values) == 16


def test_genai_embed_content_through_an_openai_compatible_upstream(genai_client, upstream):
    upstream.queue(openai_answer([[0.25, 0.75], [0.5, 0.5]], 4))
    r = genai_client.models.embed_content(
        model="m-chat",
        contents=["q1", "q2"],
        config=types.EmbedContentConfig(task_type="RETRIEVAL_QUERY", output_dimensionality=2),
    )
    assert [e.values for e in r.embeddings] == [[0.25, 0.75], [0.5, 0.5]]
    sent = upstream.last
    assert sent.path == "/v1/embeddings"
    assert sent.json() == {"model": "real-chat-model", "input": ["q1", "q2"], "encoding_format": "float",
                           "dimensions": 2}


def test_genai_embed_content_through_a_gemini_upstream(genai_client, upstream):
    upstream.queue(gemini_answer([[0.1, 0.2, 0.3]]))
    r = genai_client.models.embed_content(
        model="m-gemini",
        contents="doc",
        config=types.EmbedContentConfig(task_type="RETRIEVAL_DOCUMENT", title="Title"),
    )
    assert len(r.embeddings) == 1
    assert r.embeddings[0].values == pytest.approx([0.1, 0.2, 0.3], rel=1e-6)
    req = upstream.last.json()["requests"][0]
    assert req["taskType"] == "RETRIEVAL_DOCUMENT"
    assert req["title"] == "Title"
    assert req["model"] == "models/real-gemini-model"
    assert json.dumps(req).count("doc") == 1


def test_openai_sdk_token_ids_pass_through(oai, upstream):
    upstream.queue(openai_answer([[0.5], [0.25]], 3))
    r = oai.embeddings.create(model="m-chat", input=[[1, 2], [3]], encoding_format="float")
    assert [d.embedding for d in r.data] == [[0.5], [0.25]]
    assert upstream.last.json()["input"] == [[1, 2], [3]]


def test_langchain_openai_embeddings(gateway, upstream):
    from langchain_openai import OpenAIEmbeddings

    # As a RAG tool configures it for a model that is not OpenAI's (no tiktoken chunking).
    emb = OpenAIEmbeddings(model="mock", base_url=gateway.openai_base_url, api_key=gateway.key,
                           check_embedding_ctx_length=False, max_retries=0)
    docs = emb.embed_documents(["first document", "second document"])
    assert len(docs) == 2 and len(docs[0]) == 256
    assert emb.embed_query("first document") == docs[0]
    upstream.queue(openai_answer([b64([0.125, 0.5])], 2))
    through = OpenAIEmbeddings(model="m-chat", base_url=gateway.openai_base_url, api_key=gateway.key,
                               check_embedding_ctx_length=False, max_retries=0)
    assert through.embed_query("q") == [0.125, 0.5]
    assert upstream.last.path == "/v1/embeddings"
