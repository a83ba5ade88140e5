"""Google's `@google/genai` Node SDK through tollgate, against every upstream kind (Chat Completions,
Responses and Anthropic Messages upstreams, translated; a Gemini API upstream, passed through; the built-in
mock): text, a stream, a function call and its round trip, structured output, token counting, the models
list, a wrong key, a forbidden model, an upstream's 429 and an error inside a stream. Each test queues the
fake upstream's reply from `fixtures/translate/`, runs one SDK call (`node/genai_driver.mjs`, with the
package from `node/package.json`, installed by scripts/sdk-tests.sh) and checks what the SDK read.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import load_translate_expect

NODE_DIR = Path(__file__).resolve().parent / "node"
KINDS = {"chat": "m-chat", "responses": "m-responses", "messages": "m-messages", "gemini": "m-gemini"}
QUESTION = [{"role": "user", "parts": [{"text": "What is the capital of France?"}]}]
WEATHER_Q = [{"role": "user", "parts": [{"text": "What's the weather in Paris?"}]}]
SYSTEM = {"systemInstruction": "You are a terse assistant."}

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_DIR / "node_modules" / "@google" / "genai").is_dir(),
    reason="node or tests/sdk/node/node_modules missing (scripts/sdk-tests.sh installs them)",
)


def sdk(gateway, op: str, model: str = "mock", key: str | None = None, **job) -> dict:
    """Runs one call of the Node SDK; returns what it printed."""
    job = {"base_url": gateway.gemini_base_url, "key": key or gateway.key, "op": op, "model": model, **job}
    out = subprocess.run(
        ["node", str(NODE_DIR / "genai_driver.mjs"), json.dumps(job)],
        capture_output=True, text=True, timeout=60, cwd=NODE_DIR,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def upstream_path(upstream, kind: str, stream: bool) -> None:
    paths = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages",
             "gemini": "/v1beta/models/real-gemini-model:"
                       + ("streamGenerateContent?alt=sse" if stream else "generateContent")}
    assert [r.path for r in upstream.received] == [paths[kind]]


@pytest.mark.parametrize("kind", KINDS)
def test_text(gateway, upstream, kind):
    upstream.serve_translate("text", kind)
    expect = load_translate_expect("text")
    r = sdk(gateway, "text", KINDS[kind], contents=QUESTION, config=SYSTEM)
    assert r["text"] == expect["text"], r
    assert r["finish"] == "STOP"
    assert r["usage"]["promptTokenCount"] == expect["usage"]["in"]
    upstream_path(upstream, kind, stream=False)
    assert gateway.usage(r["request_id"]) == (expect["usage"]["in"], expect["usage"]["out"])


@pytest.mark.parametrize("kind", KINDS)
def test_stream(gateway, upstream, kind):
    upstream.serve_translate("stream_text", kind)
    expect = load_translate_expect("stream_text")
    r = sdk(gateway, "stream", KINDS[kind], contents=QUESTION, config=SYSTEM)
    assert r["text"] == expect["text"], r
    assert r["finish"] == "STOP"
    assert r["usage"]["promptTokenCount"] == expect["usage"]["in"]
    upstream_path(upstream, kind, stream=True)


def test_the_mock(gateway):
    r = sdk(gateway, "stream", "mock", contents=[{"role": "user", "parts": [{"text": "hello"}]}])
    assert "mock model" in r["text"] and r["finish"] == "STOP", r


@pytest.mark.parametrize("kind", KINDS)
def test_tools_round_trip(gateway, upstream, kind):
    upstream.serve_translate("tool_call", kind)
    r = sdk(gateway, "tools", KINDS[kind], contents=WEATHER_Q)
    assert [(c["name"], c["args"]) for c in r["calls"]] == [("get_weather", {"city": "Paris"})], r
    upstream.reset()
    upstream.serve_translate("tool_round_trip", kind)
    call = r["calls"][0]
    response = {"name": "get_weather", "response": {"output": "18°C and sunny"}}
    if call["id"]:
        response["id"] = call["id"]
    history = [*WEATHER_Q, r["content"], {"role": "user", "parts": [{"functionResponse": response}]}]
    r2 = sdk(gateway, "round_trip", KINDS[kind], contents=history)
    assert r2["text"] == load_translate_expect("tool_round_trip")["text"], r2
    assert "18°C and sunny" in json.dumps(upstream.last.json(), ensure_ascii=False)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_tool_call(gateway, upstream, kind):
    upstream.serve_translate("stream_tool_call", kind)
    r = sdk(gateway, "stream", KINDS[kind], contents=WEATHER_Q,
            config={"tools": [{"functionDeclarations": [{"name": "get_weather",
                                                         "parametersJsonSchema": {"type": "object"}}]}]})
    assert r["text"] == "Let me check.", r
    assert r["calls"] == [{"name": "get_weather", "args": {"city": "Paris"}}]


@pytest.mark.parametrize("kind", KINDS)
def test_structured_output(gateway, upstream, kind):
    upstream.serve_translate("structured_output", kind)
    r = sdk(gateway, "structured", KINDS[kind],
            contents=[{"role": "user", "parts": [{"text": "Where is the Eiffel Tower?"}]}])
    assert r["parsed"] == {"city": "Paris", "country": "France"}, r


@pytest.mark.parametrize("kind", KINDS)
def test_errors_from_the_upstream(gateway, upstream, kind):
    upstream.serve_translate("upstream_error", kind)
    r = sdk(gateway, "text", KINDS[kind], contents=QUESTION)
    assert r["error"]["status"] == 429, r
    assert "RESOURCE_EXHAUSTED" in r["error"]["message"]
    upstream.reset()
    upstream.serve_translate("stream_error", kind)
    r = sdk(gateway, "stream", KINDS[kind], contents=QUESTION)
    assert r["text"] == "Partial", r
    assert "overloaded" in r["error"]["message"].lower(), r


@pytest.mark.parametrize("kind", ["mock", *KINDS])
def test_count_tokens(gateway, upstream, kind):
    if kind == "gemini":
        upstream.queue({"status": 200, "body": {"totalTokens": 9}})
    r = sdk(gateway, "count", "mock" if kind == "mock" else KINDS[kind], contents=QUESTION)
    if kind == "gemini":
        assert r["total_tokens"] == 9
        assert upstream.last.path == "/v1beta/models/real-gemini-model:countTokens"
    else:
        assert r["total_tokens"] > 3, r


def test_models_list_a_wrong_key_and_a_forbidden_model(gateway, upstream):
    names = set(sdk(gateway, "models")["names"])
    assert {f"models/{m}" for m in gateway.models} <= names
    r = sdk(gateway, "text", key="tg_not-a-key-of-this-gateway", contents=QUESTION)
    assert r["error"]["status"] == 401 and "UNAUTHENTICATED" in r["error"]["message"], r
    narrow = gateway.add_key("genai-node-narrow", "narrow")
    r = sdk(gateway, "text", "m-gemini", key=narrow, contents=QUESTION)
    assert r["error"]["status"] == 403 and "PERMISSION_DENIED" in r["error"]["message"], r
    assert not upstream.received
