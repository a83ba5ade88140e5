"""Legacy text completions (fill-in-the-middle) through tollgate with the official OpenAI Python SDK
(issue 42): `completions.create` with `prompt` and `suffix`, whole and streamed, passed through to an
OpenAI-compatible upstream; a model of another kind raises BadRequestError naming the endpoint it serves.
"""

from __future__ import annotations

import json

import openai
import pytest


def completion(text: str, prompt_tokens: int, completion_tokens: int) -> dict:
    body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "real-chat-model",
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
    return {"status": 200, "headers": {"content-type": "application/json"}, "body": body}


def chunk(payload: dict) -> bytes:
    base = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "real-chat-model"}
    return b"data: " + json.dumps({**base, **payload}).encode() + b"\n\n"


def test_fill_in_the_middle(oai, upstream, gateway):
    upstream.queue(completion("    return a + b", 9, 5))
    r = oai.completions.create(model="m-chat", prompt="def add(a, b):\n", suffix="\nprint(add(1, 2))",
                               max_tokens=32, temperature=0)
    assert r.choices[0].text == "    return a + b"
    assert r.usage.prompt_tokens == 9 and r.usage.completion_tokens == 5
    body = upstream.last.json()
    assert upstream.last.path == "/v1/completions"
    assert body["model"] == "real-chat-model"
    assert body["suffix"] == "\nprint(add(1, 2))"
    assert gateway.usage(r._request_id) == (9, 5)


def test_streamed_with_usage(oai, upstream):
    events = [
        chunk({"choices": [{"text": "Hel", "index": 0, "logprobs": None, "finish_reason": None}]}),
        chunk({"choices": [{"text": "lo", "index": 0, "logprobs": None, "finish_reason": "stop"}]}),
        chunk({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}}),
        b"data: [DONE]\n\n",
    ]
    upstream.queue({"status": 200, "events": events})
    stream = oai.completions.create(model="m-chat", prompt="Say", stream=True,
                                    stream_options={"include_usage": True})
    parts, usage = [], None
    for c in stream:
        parts.extend(ch.text for ch in c.choices)
        usage = c.usage or usage
    assert "".join(parts) == "Hello"
    assert usage is not None and usage.completion_tokens == 2
    assert upstream.last.json()["stream_options"] == {"include_usage": True}


def test_a_model_without_completions(oai, upstream):
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model="m-messages", prompt="def f(", suffix=")")
    assert "/v1/messages" in str(e.value)
    assert not upstream.received
