"""Embeddings and text completions through tollgate with the Node SDKs (issue 42): OpenAI's `openai`
(`embeddings.create`, which asks for base64 unless told otherwise and decodes it; `completions.create` with
`suffix`, whole and streamed) and Google's `@google/genai` (`models.embedContent`, which calls
`:batchEmbedContents`), on the mock, an OpenAI-compatible upstream and a Gemini upstream. Each test runs one
SDK call (`node/openai_driver.mjs`, `node/genai_driver.mjs`) and checks what the SDK read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "openai").is_dir(),
    reason="node or tests/sdk/node/node_modules missing (scripts/sdk-tests.sh installs them)",
)


def node(driver: str, job: dict) -> dict:
    out = subprocess.run(["node", str(NODE_DIR / driver), json.dumps(job)],
                         capture_output=True, text=True, timeout=60, cwd=NODE_DIR)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def openai_job(gateway, op: str, model: str, **job) -> dict:
    return node("openai_driver.mjs", {"base_url": gateway.openai_base_url, "key": gateway.key, "op": op,
                                      "model": model, **job})


def json_reply(body: dict) -> dict:
    return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}


def test_openai_node_embeddings_on_the_mock(gateway):
    r = openai_job(gateway, "embed", "mock", input=["alpha", "beta", "alpha"])
    assert "error" not in r, r
    assert len(r["vectors"]) == 3 and len(r["vectors"][0]) == 256
    assert r["vectors"][0] == r["vectors"][2] != r["vectors"][1]


def test_openai_node_embeddings_through_a_gemini_upstream(gateway, upstream):
    upstream.queue(json_reply({"embeddings": [{"values": [0.5, -0.5]}]}))
    r = openai_job(gateway, "embed", "m-gemini", input="q", extra={"dimensions": 2})
    assert r["vectors"] == [[0.5, -0.5]], r
    assert upstream.last.path == "/v1beta/models/real-gemini-model:batchEmbedContents"


def test_openai_node_fill_in_the_middle(gateway, upstream):
    upstream.queue(json_reply({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "x",
                               "choices": [{"text": "a + b", "index": 0, "logprobs": None,
                                            "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}))
    r = openai_job(gateway, "complete", "m-chat", prompt="def add(a, b): return ", suffix="\n", max_tokens=8)
    assert r == {"text": "a + b", "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    body = upstream.last.json()
    assert body["suffix"] == "\n" and body["model"] == "real-chat-model"


def test_openai_node_completion_stream(gateway, upstream):
    def chunk(payload: dict) -> bytes:
        base = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "x"}
        return b"data: " + json.dumps({**base, **payload}).encode() + b"\n\n"

    upstream.queue({"status": 200, "events": [
        chunk({"choices": [{"text": "po", "index": 0, "logprobs": None, "finish_reason": None}]}),
        chunk({"choices": [{"text": "ng", "index": 0, "logprobs": None, "finish_reason": "stop"}]}),
        chunk({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}}),
        b"data: [DONE]\n\n",
    ]})
    r = openai_job(gateway, "complete_stream", "m-chat", prompt="p")
    assert r["text"] == "pong", r
    assert r["usage"]["completion_tokens"] == 2


def test_genai_node_embed_content(gateway, upstream):
    upstream.queue(json_reply({"object": "list", "model": "x", "usage": {"prompt_tokens": 2, "total_tokens": 2},
                               "data": [{"object": "embedding", "index": 0, "embedding": [0.25, 0.75]},
                                        {"object": "embedding", "index": 1, "embedding": [0.5, 0.5]}]}))
    r = node("genai_driver.mjs", {"base_url": gateway.gemini_base_url, "key": gateway.key, "op": "embed",
                                  "model": "m-chat", "contents": ["a", "b"],
                                  "config": {"outputDimensionality": 2}})
    assert r.get("vectors") == [[0.25, 0.75], [0.5, 0.5]], r
    assert upstream.last.path == "/v1/embeddings"
    assert upstream.last.json()["dimensions"] == 2
