"""The official Anthropic Python SDK against tollgate.

Covers Messages with the mock model (plain, through the stream helper with `text_stream` and
`get_final_message()`, forced tool use, structured output parsed into Pydantic models, `max_tokens` stops),
keys sent as `x-api-key` (`api_key=`) and as a Bearer token (`auth_token=`), model listing in Anthropic's
shape, the mapping of gateway and upstream errors to the SDK's exception classes and request ids, and
passthrough to an Anthropic upstream replayed from `fixtures/messages/` (text, streamed text with usage, an
error event inside the stream, and a stream cut off upstream, which must raise rather than end quietly).
"""

from __future__ import annotations

import json

import anthropic
import pytest
from pydantic import BaseModel

MOCK_PREFIX = "Hello! This is tollgate's built-in mock model. You said: "

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}


class Weather(BaseModel):
    city: str
    sunny: bool


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def text_of(message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


# ---------------------------------------------------------------------------------------------------------
# Messages, mock model


def test_messages_create(anthropic_client, gateway):
    m = anthropic_client.messages.create(model="mock", max_tokens=256, messages=user("Ping one."))
    assert m.type == "message" and m.role == "assistant"
    assert text_of(m) == MOCK_PREFIX + "Ping one."
    assert m.stop_reason == "end_turn"
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert gateway.usage(m._request_id) == (m.usage.input_tokens, m.usage.output_tokens)


def test_messages_with_bearer_token(gateway):
    client = anthropic.Anthropic(base_url=gateway.anthropic_base_url, auth_token=gateway.key, max_retries=0)
    m = client.messages.create(model="mock", max_tokens=256, messages=user("Ping bearer."))
    assert text_of(m) == MOCK_PREFIX + "Ping bearer."


def test_messages_stream_helper(anthropic_client, gateway):
    with anthropic_client.messages.stream(model="mock", max_tokens=256, messages=user("Ping two.")) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.request_id
    assert len(pieces) > 1, "the mock streams its answer in several deltas"
    assert "".join(pieces) == text_of(final) == MOCK_PREFIX + "Ping two."
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert gateway.usage(request_id) == (final.usage.input_tokens, final.usage.output_tokens)


def test_messages_max_tokens_stop(anthropic_client):
    m = anthropic_client.messages.create(model="mock", max_tokens=3, messages=user("Ping three."))
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens <= 3
    assert MOCK_PREFIX.startswith(text_of(m))
    with anthropic_client.messages.stream(model="mock", max_tokens=3, messages=user("Ping three.")) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert text_of(final) == text_of(m)


def test_messages_forced_tool_use_stream_helper(anthropic_client):
    with anthropic_client.messages.stream(
        model="mock",
        max_tokens=256,
        messages=user("Weather?"),
        tools=[WEATHER_TOOL],
        tool_choice={"type": "any"},
    ) as stream:
        partial_json = "".join(e.delta.partial_json for e in stream if e.type == "content_block_delta"
                               and e.delta.type == "input_json_delta")
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (block,) = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "get_weather" and block.id
    assert isinstance(block.input, dict)
    assert isinstance(block.input["city"], str) and isinstance(block.input["days"], int)
    assert json.loads(partial_json) == block.input


def test_messages_named_tool_non_stream(anthropic_client):
    m = anthropic_client.messages.create(
        model="mock",
        max_tokens=256,
        messages=user("Weather?"),
        tools=[WEATHER_TOOL, {**WEATHER_TOOL, "name": "other_tool"}],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert m.stop_reason == "tool_use"
    (block,) = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "get_weather" and isinstance(block.input["days"], int)


def test_messages_structured_output(anthropic_client):
    m = anthropic_client.messages.parse(
        model="mock", max_tokens=256, messages=user("Weather in Oslo?"), output_format=Weather
    )
    assert isinstance(m.parsed_output, Weather)
    assert Weather.model_validate_json(text_of(m)) == m.parsed_output
    with anthropic_client.messages.stream(
        model="mock", max_tokens=256, messages=user("Weather in Oslo?"), output_format=Weather
    ) as stream:
        final = stream.get_final_message()
    assert isinstance(final.parsed_output, Weather)


# ---------------------------------------------------------------------------------------------------------
# Models


def test_models_list_and_retrieve(anthropic_client, gateway, upstream):
    models = list(anthropic_client.models.list())
    assert {m.id for m in models} == gateway.models
    assert all(m.type == "model" for m in models)
    m = anthropic_client.models.retrieve("mock")
    assert m.id == "mock" and m.type == "model" and m.display_name
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.models.retrieve("no-such-model")
    assert upstream.received == [], "listing models does not ask the upstreams"


# ---------------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("how", ["api_key", "auth_token"])
def test_wrong_key_is_authentication_error(gateway, how):
    client = anthropic.Anthropic(base_url=gateway.anthropic_base_url, max_retries=0, **{how: "tg_" + "x" * 40})
    with pytest.raises(anthropic.AuthenticationError) as e:
        client.messages.create(model="mock", max_tokens=16, messages=user("hi"))
    assert e.value.status_code == 401
    assert e.value.type == "authentication_error"
    gateway.log_line(e.value.request_id)


def test_unknown_model_is_not_found(anthropic_client, gateway):
    with pytest.raises(anthropic.NotFoundError) as e:
        anthropic_client.messages.create(model="no-such-model", max_tokens=16, messages=user("hi"))
    assert e.value.type == "not_found_error"
    assert "no-such-model" in e.value.api_message
    gateway.log_line(e.value.request_id)


def test_upstream_529_is_overloaded_error(anthropic_client, gateway, upstream):
    fx = upstream.serve("messages", "upstream_error")
    with pytest.raises(anthropic.InternalServerError) as e:
        anthropic_client.messages.create(**fx["request"])
    err, expect = e.value, fx["expect"]
    # This SDK version has a class for 529, a subclass of InternalServerError.
    assert isinstance(err, anthropic.OverloadedError)
    assert err.status_code == 529
    assert err.response.headers["retry-after"] == expect["retry_after"]
    assert err.type == expect["type"] and expect["message"] in err.api_message
    assert err.request_id != "req_upstream_1"  # the gateway's own id, found in its log
    gateway.log_line(err.request_id)


# ---------------------------------------------------------------------------------------------------------
# Passthrough to an Anthropic upstream, replayed from fixtures


def test_passthrough_text(anthropic_client, gateway, upstream):
    fx = upstream.serve("messages", "text")
    req = dict(fx["request"])
    extra = {"x_vendor_extension": req.pop("x_vendor_extension")}
    m = anthropic_client.messages.create(**req, extra_body=extra)
    assert text_of(m) == fx["expect"]["text"]
    assert m.id == "msg_01abc" and m.usage.cache_read_input_tokens == 4
    assert gateway.usage(m._request_id) == (fx["expect"]["usage"]["in"], fx["expect"]["usage"]["out"])
    sent = upstream.last
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == gateway.upstream_key
    assert sent.headers["anthropic-version"]
    assert sent.json() == {**fx["request"], "model": "real-messages-model"}


def test_passthrough_stream_helper(anthropic_client, gateway, upstream):
    fx = upstream.serve("messages", "stream_text")
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    with anthropic_client.messages.stream(**req) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
        request_id = stream.request_id
    assert "".join(pieces) == text_of(final) == fx["expect"]["text"]
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 25 and final.usage.output_tokens == 6
    assert gateway.usage(request_id) == (fx["expect"]["usage"]["in"], fx["expect"]["usage"]["out"])
    assert upstream.last.json()["model"] == "real-messages-model"


@pytest.mark.parametrize("case", ["stream_error", "stream_truncated"])
def test_stream_failure_raises(anthropic_client, upstream, case):
    fx = upstream.serve("messages", case)
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    pieces = []
    with pytest.raises(anthropic.APIStatusError) as e:
        with anthropic_client.messages.stream(**req) as stream:
            for piece in stream.text_stream:
                pieces.append(piece)
            stream.get_final_message()
    assert "".join(pieces) == fx["expect"]["text"], "what came before the failure was delivered"
    assert fx["expect"]["message"] in (e.value.api_message or "")
