"""Google's `google-genai` SDK (the Gemini API) through tollgate, against every upstream kind: the built-in
mock, Chat Completions, Responses and Anthropic Messages upstreams (translated) and a Gemini API upstream
(passed through). Each case of `fixtures/translate/` runs through the SDK's own calls: text, a stream, a
function call and its round trip, structured output (a pydantic schema, parsed), token counting, the models
list, errors as the SDK's exception classes (a wrong key, a forbidden model, an upstream's 429, an error
inside a stream).
"""

from __future__ import annotations

import json

import pytest
from conftest import genai_for, load_translate_expect
from google.genai import errors
from google.genai import types
from pydantic import BaseModel

KINDS = {"chat": "m-chat", "responses": "m-responses", "messages": "m-messages", "gemini": "m-gemini"}
UPSTREAM_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
SYSTEM = "You are a terse assistant."
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name, e.g. Paris"}},
        "required": ["city"],
    },
)


class Place(BaseModel):
    city: str
    country: str


def request_id(response) -> str:
    headers = {k.lower(): v for k, v in (response.sdk_http_response.headers or {}).items()}
    return headers["x-request-id"]


def check_upstream(upstream, kind: str, stream: bool, count: int = 1) -> list[dict]:
    """The upstream got `count` requests in its own protocol (the Gemini API's with the model and the stream
    in the path); returns their bodies."""
    assert len(upstream.received) == count, [r.path for r in upstream.received]
    bodies = []
    for rec in upstream.received:
        if kind == "gemini":
            method = "streamGenerateContent?alt=sse" if stream else "generateContent"
            assert rec.path == f"/v1beta/models/real-gemini-model:{method}", rec.path
            assert rec.headers.get("x-goog-api-key") is not None
        else:
            assert rec.path == UPSTREAM_PATHS[kind], rec.path
        bodies.append(rec.json())
    return bodies


def usage_of(gateway, rid: str, expect: dict) -> None:
    if "usage" in expect:
        assert gateway.usage(rid) == (expect["usage"]["in"], expect["usage"]["out"])


@pytest.mark.parametrize("kind", KINDS)
def test_text(genai_client, upstream, gateway, kind):
    upstream.serve_translate("text", kind)
    expect = load_translate_expect("text")
    r = genai_client.models.generate_content(
        model=KINDS[kind],
        contents="What is the capital of France?",
        config=types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=256),
    )
    assert r.text == expect["text"]
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.usage_metadata.prompt_token_count == expect["usage"]["in"]
    assert r.usage_metadata.candidates_token_count == expect["usage"]["out"]
    body = check_upstream(upstream, kind, stream=False)[0]
    assert "terse assistant" in json.dumps(body)
    usage_of(gateway, request_id(r), expect)


@pytest.mark.parametrize("kind", KINDS)
def test_stream(genai_client, upstream, gateway, kind):
    upstream.serve_translate("stream_text", kind)
    expect = load_translate_expect("stream_text")
    chunks = list(
        genai_client.models.generate_content_stream(
            model=KINDS[kind],
            contents="What is the capital of France?",
            config=types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=256),
        )
    )
    assert "".join(c.text or "" for c in chunks) == expect["text"]
    last = chunks[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.STOP
    assert last.usage_metadata.prompt_token_count == expect["usage"]["in"]
    check_upstream(upstream, kind, stream=True)
    usage_of(gateway, request_id(last), expect)


def test_stream_of_the_mock(genai_client):
    chunks = list(genai_client.models.generate_content_stream(model="mock", contents="hello"))
    text = "".join(c.text or "" for c in chunks)
    assert "mock model" in text and "hello" in text
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


@pytest.mark.parametrize("kind", KINDS)
def test_tool_call_and_its_round_trip(genai_client, upstream, gateway, kind):
    """The model calls get_weather; the SDK's function response goes back and the answer comes."""
    upstream.serve_translate("tool_call", kind)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=256,
    )
    question = types.Content(role="user", parts=[types.Part.from_text(text="What's the weather in Paris?")])
    r = genai_client.models.generate_content(model=KINDS[kind], contents=[question], config=config)
    calls = r.function_calls
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Paris"})]
    body = check_upstream(upstream, kind, stream=False)[0]
    assert "get_weather" in json.dumps(body)

    upstream.reset()
    upstream.serve_translate("tool_round_trip", kind)
    expect = load_translate_expect("tool_round_trip")
    answer = types.Part.from_function_response(name="get_weather", response={"output": "18°C and sunny"})
    if calls[0].id:
        answer.function_response.id = calls[0].id
    history = [question, r.candidates[0].content, types.Content(role="user", parts=[answer])]
    r2 = genai_client.models.generate_content(model=KINDS[kind], contents=history, config=config)
    assert r2.text == expect["text"]
    body = check_upstream(upstream, kind, stream=False)[0]
    assert "18°C and sunny" in json.dumps(body, ensure_ascii=False)
    usage_of(gateway, request_id(r2), expect)


@pytest.mark.parametrize("kind", KINDS)
def test_stream_tool_call(genai_client, upstream, kind):
    upstream.serve_translate("stream_tool_call", kind)
    expect = load_translate_expect("stream_tool_call")
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    chunks = list(
        genai_client.models.generate_content_stream(
            model=KINDS[kind], contents="What's the weather in Paris?", config=config
        )
    )
    text = "".join(p.text or "" for c in chunks for p in (c.candidates[0].content.parts or []) if p.text)
    calls = [(f.name, f.args) for c in chunks for f in (c.function_calls or [])]
    assert text == expect["text"]
    assert calls == [("get_weather", {"city": "Paris"})]
    check_upstream(upstream, kind, stream=True)


@pytest.mark.parametrize("kind", KINDS)
def test_structured_output(genai_client, upstream, kind):
    upstream.serve_translate("structured_output", kind)
    r = genai_client.models.generate_content(
        model=KINDS[kind],
        contents="Where is the Eiffel Tower? Give the city and the country.",
        config=types.GenerateContentConfig(response_mime_type="application/json", response_schema=Place),
    )
    assert r.parsed == Place(city="Paris", country="France")
    body = check_upstream(upstream, kind, stream=False)[0]
    g = body.get("generationConfig", {})
    wire = {"chat": body.get("response_format"), "responses": body.get("text"),
            "messages": body.get("output_config"), "gemini": g.get("responseSchema") or g.get("responseJsonSchema")}
    assert wire[kind], body


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_rate_limit_is_a_client_error(genai_client, upstream, kind):
    upstream.serve_translate("upstream_error", kind)
    with pytest.raises(errors.ClientError) as e:
        genai_client.models.generate_content(model=KINDS[kind], contents="What is the capital of France?")
    assert e.value.code == 429
    assert e.value.status == "RESOURCE_EXHAUSTED"
    assert "Rate limit reached" in e.value.message


@pytest.mark.parametrize("kind", KINDS)
def test_error_inside_a_stream_is_raised(genai_client, upstream, kind):
    upstream.serve_translate("stream_error", kind)
    text = ""
    with pytest.raises(errors.APIError) as e:
        for chunk in genai_client.models.generate_content_stream(
            model=KINDS[kind], contents="What is the capital of France?"
        ):
            text += chunk.text or ""
    assert text == "Partial"
    assert "overloaded" in str(e.value.message).lower()


@pytest.mark.parametrize("kind", ["mock", *KINDS])
def test_count_tokens(genai_client, upstream, gateway, kind):
    """Forwarded to a Gemini upstream's :countTokens (its count comes back), estimated for the others."""
    model = "mock" if kind == "mock" else KINDS[kind]
    if kind == "gemini":
        upstream.queue({"status": 200, "body": {"totalTokens": 11}})
    r = genai_client.models.count_tokens(model=model, contents="How many tokens is this sentence?")
    if kind == "gemini":
        assert r.total_tokens == 11
        assert upstream.last.path == "/v1beta/models/real-gemini-model:countTokens"
        assert upstream.last.json() == {"contents": [{"parts": [{"text": "How many tokens is this sentence?"}],
                                                      "role": "user"}]}
    else:
        assert r.total_tokens and r.total_tokens > 3
        assert not upstream.received


def test_models_list(genai_client, gateway):
    names = {m.name for m in genai_client.models.list()}
    assert {f"models/{n}" for n in gateway.models} <= names
    m = genai_client.models.get(model="m-gemini")
    assert m.name == "models/m-gemini"


def test_a_wrong_key(gateway):
    bad = genai_for(gateway, "tg_this-key-does-not-exist")
    with pytest.raises(errors.ClientError) as e:
        bad.models.generate_content(model="mock", contents="hi")
    assert e.value.code == 401
    assert e.value.status == "UNAUTHENTICATED"
    assert "tg_this-key" not in str(e.value)


def test_a_forbidden_model(gateway, upstream):
    narrow = genai_for(gateway, gateway.add_key("gemini-narrow", "narrow"))
    assert "mock model" in narrow.models.generate_content(model="mock", contents="hi").text
    with pytest.raises(errors.ClientError) as e:
        narrow.models.generate_content(model="m-gemini", contents="hi")
    assert e.value.code == 403
    assert e.value.status == "PERMISSION_DENIED"
    with pytest.raises(errors.ClientError) as e:
        narrow.models.generate_content(model="no-such-model", contents="hi")
    assert e.value.code == 404
    assert not upstream.received
