"""The official OpenAI Python SDK against tollgate.

Covers Chat Completions and Responses with the mock model (plain, streamed by iteration and through the
stream helpers, usage chunks, structured output parsed into Pydantic models, forced tool calls, reasoning),
model listing, the mapping of gateway and upstream errors to the SDK's exception classes and request ids,
and passthrough to Chat and Responses upstreams replayed from `fixtures/` (text, streams, errors inside a
stream, and streams cut off upstream, which must raise rather than end quietly).
"""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

MOCK_PREFIX = "Hello! This is tollgate's built-in mock model. You said: "

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


class Weather(BaseModel):
    city: str
    temperature: int
    sunny: bool


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------------------------------------
# Chat Completions, mock model


def test_chat_create(oai, gateway):
    c = oai.chat.completions.create(model="mock", messages=user("Ping one."))
    assert c.choices[0].message.content == MOCK_PREFIX + "Ping one."
    assert c.choices[0].finish_reason == "stop"
    assert c.usage.prompt_tokens > 0 and c.usage.completion_tokens > 0
    assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    assert gateway.usage(c._request_id) == (c.usage.prompt_tokens, c.usage.completion_tokens)


def test_chat_stream_iteration(oai):
    chunks = list(oai.chat.completions.create(model="mock", messages=user("Ping two."), stream=True))
    deltas = [ch.choices[0].delta.content for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(deltas) > 1, "the mock streams its answer in several deltas"
    assert "".join(deltas) == MOCK_PREFIX + "Ping two."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(ch.usage is None for ch in chunks), "usage was not asked for"
    assert len({ch.id for ch in chunks}) == 1


def test_chat_stream_include_usage(oai, gateway):
    with oai.chat.completions.with_streaming_response.create(
        model="mock", messages=user("Ping three."), stream=True, stream_options={"include_usage": True}
    ) as raw:
        chunks = list(raw.parse())
        request_id = raw.headers["x-request-id"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens > 0
    assert all(ch.usage is None for ch in chunks[:-1])
    assert gateway.usage(request_id) == (last.usage.prompt_tokens, last.usage.completion_tokens)


def test_chat_stream_helper(oai):
    with oai.chat.completions.stream(model="mock", messages=user("Ping four.")) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == MOCK_PREFIX + "Ping four."
    assert final.choices[0].message.content == MOCK_PREFIX + "Ping four."
    assert final.choices[0].finish_reason == "stop"


def test_chat_max_tokens_stops_with_length(oai):
    c = oai.chat.completions.create(model="mock", messages=user("Ping five."), max_tokens=3)
    assert c.choices[0].finish_reason == "length"
    assert c.usage.completion_tokens <= 3
    assert MOCK_PREFIX.startswith(c.choices[0].message.content)


def test_chat_parse_structured_output(oai):
    c = oai.chat.completions.parse(model="mock", messages=user("Weather in Oslo?"), response_format=Weather)
    parsed = c.choices[0].message.parsed
    assert isinstance(parsed, Weather)
    assert Weather.model_validate_json(c.choices[0].message.content) == parsed


def test_chat_forced_tool_call(oai):
    c = oai.chat.completions.create(
        model="mock", messages=user("Weather?"), tools=[WEATHER_TOOL], tool_choice="required"
    )
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str) and isinstance(args["days"], int)


def test_chat_forced_tool_call_stream_helper(oai):
    tool = openai.pydantic_function_tool(Weather, name="report_weather")
    with oai.chat.completions.stream(
        model="mock", messages=user("Weather?"), tools=[tool], tool_choice="required"
    ) as stream:
        arg_deltas = [e.arguments_delta for e in stream if e.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    assert arg_deltas
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "report_weather"
    assert "".join(arg_deltas) == call.function.arguments
    assert isinstance(call.function.parsed_arguments, Weather)


# ---------------------------------------------------------------------------------------------------------
# Responses, mock model


def test_responses_create(oai, gateway):
    r = oai.responses.create(model="mock", input="Ping six.")
    assert r.status == "completed"
    assert r.output_text == MOCK_PREFIX + "Ping six."
    assert r.usage.output_tokens > 0
    assert gateway.usage(r._request_id) == (r.usage.input_tokens, r.usage.output_tokens)


def test_responses_reasoning_comes_first(oai):
    r = oai.responses.create(model="mock", input="Ping seven.", reasoning={"effort": "low"})
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output_text == MOCK_PREFIX + "Ping seven."
    assert r.usage.output_tokens_details.reasoning_tokens > 0


def test_responses_stream_helper(oai):
    with oai.responses.stream(model="mock", input="Ping eight.") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 1
    assert "".join(deltas) == final.output_text == MOCK_PREFIX + "Ping eight."
    assert final.status == "completed" and final.usage.output_tokens > 0


def test_responses_stream_events(oai):
    events = list(oai.responses.create(model="mock", input="Ping nine.", stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers)), "sequence numbers rise strictly"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == MOCK_PREFIX + "Ping nine."
    assert events[-1].response.output_text == text


def test_responses_parse_structured_output(oai):
    r = oai.responses.parse(model="mock", input="Weather in Oslo?", text_format=Weather)
    assert isinstance(r.output_parsed, Weather)


def test_responses_forced_function_call_stream_helper(oai):
    tool = {"type": "function", **WEATHER_TOOL["function"], "strict": True}
    with oai.responses.stream(model="mock", input="Weather?", tools=[tool], tool_choice="required") as stream:
        arg_deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "get_weather" and calls[0].call_id
    assert "".join(arg_deltas) == calls[0].arguments
    args = json.loads(calls[0].arguments)
    assert isinstance(args["city"], str) and isinstance(args["days"], int)


# ---------------------------------------------------------------------------------------------------------
# Models


def test_models_list_and_retrieve(oai, gateway, upstream):
    assert {m.id for m in oai.models.list()} == gateway.models
    m = oai.models.retrieve("mock")
    assert m.id == "mock" and m.object == "model"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("no-such-model")
    assert upstream.received == [], "listing models does not ask the upstreams"


# ---------------------------------------------------------------------------------------------------------
# Errors


def test_wrong_key_is_authentication_error(gateway):
    client = openai.OpenAI(base_url=gateway.openai_base_url, api_key="tg_" + "x" * 40, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        client.chat.completions.create(model="mock", messages=user("hi"))
    assert e.value.status_code == 401
    gateway.log_line(e.value.request_id)


def test_unknown_model_is_not_found(oai, gateway):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="no-such-model", messages=user("hi"))
    assert "no-such-model" in e.value.message
    gateway.log_line(e.value.request_id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="no-such-model", input="hi")


def test_chat_upstream_429_is_rate_limit_error(oai, gateway, upstream):
    fx = upstream.serve("chat", "upstream_error")
    with pytest.raises(openai.RateLimitError) as e:
        oai.chat.completions.create(**fx["request"])
    err, expect = e.value, fx["expect"]
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == expect["retry_after"]
    assert err.code == expect["code"] and err.type == expect["type"]
    assert expect["message"] in err.message
    gateway.log_line(err.request_id)  # the gateway's id, not an upstream one


def test_responses_upstream_500_is_internal_server_error(oai, gateway, upstream):
    fx = upstream.serve("responses", "upstream_error")
    with pytest.raises(openai.InternalServerError) as e:
        oai.responses.create(**fx["request"])
    err, expect = e.value, fx["expect"]
    assert err.status_code == 500
    assert err.code == expect["code"] and err.type == expect["type"]
    assert expect["message"] in err.message
    gateway.log_line(err.request_id)


# ---------------------------------------------------------------------------------------------------------
# Passthrough to OpenAI upstreams, replayed from fixtures


def test_chat_passthrough_text(oai, gateway, upstream):
    fx = upstream.serve("chat", "text")
    req = dict(fx["request"])
    extra = {"x_vendor_extension": req.pop("x_vendor_extension")}
    c = oai.chat.completions.create(**req, extra_body=extra)
    assert c.choices[0].message.content == fx["expect"]["text"]
    assert c.id == "chatcmpl-abc123"
    assert gateway.usage(c._request_id) == (fx["expect"]["usage"]["in"], fx["expect"]["usage"]["out"])
    sent = upstream.last
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {gateway.upstream_key}"
    assert sent.json() == {**fx["request"], "model": "real-chat-model"}


def test_chat_passthrough_stream_helper(oai, gateway, upstream):
    fx = upstream.serve("chat", "stream_text")
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    with oai.chat.completions.stream(**req) as stream:
        chunks = [e.chunk for e in stream if e.type == "chunk"]
        final = stream.get_final_completion()
    assert final.choices[0].message.content == fx["expect"]["text"]
    assert final.choices[0].finish_reason == "stop"
    assert all(ch.usage is None for ch in chunks), "the usage chunk tollgate asked for stays hidden"
    assert upstream.last.json()["model"] == "real-chat-model"


def test_chat_passthrough_stream_usage(oai, upstream):
    fx = upstream.serve("chat", "stream_usage")
    chunks = list(oai.chat.completions.create(**fx["request"]))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == fx["expect"]["text"]
    usage = fx["expect"]["usage"]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (usage["in"], usage["out"])


def test_responses_passthrough_text(oai, gateway, upstream):
    fx = upstream.serve("responses", "text")
    req = dict(fx["request"])
    extra = {"x_vendor_extension": req.pop("x_vendor_extension")}
    r = oai.responses.create(**req, extra_body=extra)
    assert r.output_text == fx["expect"]["text"]
    assert gateway.usage(r._request_id) == (fx["expect"]["usage"]["in"], fx["expect"]["usage"]["out"])
    assert upstream.last.path == "/v1/responses"
    # Sent as it came, but never stored in the operator's account (SECURITY.md).
    assert upstream.last.json() == {**fx["request"], "model": "real-responses-model", "store": False}


def test_responses_passthrough_stream_helper(oai, upstream):
    fx = upstream.serve("responses", "stream_text")
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    with oai.responses.stream(**req) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == fx["expect"]["text"]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        fx["expect"]["usage"]["in"],
        fx["expect"]["usage"]["out"],
    )


@pytest.mark.parametrize("case", ["stream_error", "stream_truncated"])
def test_chat_stream_failure_raises(oai, upstream, case):
    fx = upstream.serve("chat", case)
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    text = ""
    with pytest.raises(openai.APIError) as e:
        with oai.chat.completions.stream(**req) as stream:
            for event in stream:
                if event.type == "content.delta":
                    text += event.delta
    assert text == fx["expect"]["text"], "what came before the failure was delivered"
    assert fx["expect"]["message"] in e.value.message


@pytest.mark.parametrize("case", ["stream_error", "stream_truncated"])
def test_responses_stream_failure_raises(oai, upstream, case):
    fx = upstream.serve("responses", case)
    req = {k: v for k, v in fx["request"].items() if k != "stream"}
    events = []
    # The SDK surfaces a `response.failed` as the event itself, and get_final_response() then raises because
    # no `response.completed` came; an `error` event in the stream raises APIError directly.
    with pytest.raises((openai.APIError, RuntimeError)):
        with oai.responses.stream(**req) as stream:
            for event in stream:
                events.append(event)
            stream.get_final_response()
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == fx["expect"]["text"]
    assert events and events[-1].type == fx["expect"]["last_event"]
    assert fx["expect"]["message"] in events[-1].response.error.message
