"""The official SDKs across tollgate's protocol translation: every (client protocol x upstream kind) pair.

Each test runs one case of `fixtures/translate/` for one pair: the client sends `<client>.request.json`
through its SDK (with the model that routes to the upstream under test), the fake upstream answers with
`<upstream>.upstream.*`, and what the SDK's accumulators and parsers make of the answer is checked against
`expect.json`: the text, the tool calls, the stop reason in the client protocol's own terms, the usage, and
errors raised as the SDK's own exception classes (before the stream: RateLimitError; inside it: the
protocol's in-stream error).
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from conftest import load_translate_expect, load_translate_request
from pydantic import BaseModel

MODELS = {"chat": "m-chat", "responses": "m-responses", "messages": "m-messages", "gemini": "m-gemini"}
# The clients of this file's SDKs (Gemini's own SDK has tests/sdk/test_gemini_sdk.py).
CLIENTS = ("chat", "responses", "messages")
UPSTREAM_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages",
                  "gemini": "/v1beta/models/real-gemini-model:"}
UPSTREAM_MODELS = {"chat": "real-chat-model", "responses": "real-responses-model", "messages": "real-messages-model",
                   "gemini": None}

CHAT_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
RESPONSES_STATUS = {"end_turn": "completed", "stop_sequence": "completed", "max_tokens": "incomplete",
                    "tool_use": "completed"}

PAIRS = [pytest.param(c, u, id=f"{c}-client-{u}-upstream") for c in CLIENTS for u in MODELS]


class Place(BaseModel):
    city: str
    country: str


@pytest.fixture
def clients(oai, anthropic_client):
    return {"openai": oai, "anthropic": anthropic_client}


def setup_case(upstream, case: str, client: str, kind: str, times: int = 1) -> tuple[dict, dict]:
    """Queues the upstream reply `times` times; returns (the client's request, the expectation)."""
    upstream.serve_translate(case, kind, times)
    return load_translate_request(case, client, MODELS[kind]), load_translate_expect(case)


def without_stream(req: dict) -> dict:
    return {k: v for k, v in req.items() if k != "stream"}


def check_upstream_got(upstream, kind: str, expect: dict, count: int) -> None:
    """The upstream was asked `count` times, each time in its own protocol, with its model and the prompt."""
    assert len(upstream.received) == count, [r.path for r in upstream.received]
    sees = expect.get("upstream_sees", {})
    for rec in upstream.received:
        body = rec.json()
        if kind == "gemini":
            # The model and the stream are in the path.
            assert rec.path.startswith(UPSTREAM_PATHS[kind]), rec.path
            assert "model" not in body
        else:
            assert rec.path == UPSTREAM_PATHS[kind]
            assert body["model"] == UPSTREAM_MODELS[kind]
        raw = json.dumps(body, ensure_ascii=False)
        for key in ("system", "user"):
            if key in sees:
                assert sees[key] in raw, f"the upstream request lacks {sees[key]!r}: {raw}"


def expected_calls(expect: dict) -> list[tuple[str, dict]]:
    return [(c["name"], c["arguments"]) for c in expect.get("tool_calls", [])]


def anthropic_text(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def anthropic_calls(message) -> list[tuple[str, dict]]:
    calls = []
    for block in message.content:
        if block.type == "tool_use":
            assert isinstance(block.input, dict), block.input
            assert block.id
            calls.append((block.name, block.input))
    return calls


def chat_calls(message) -> list[tuple[str, dict]]:
    calls = []
    for call in message.tool_calls or []:
        assert call.type == "function" and call.id
        calls.append((call.function.name, json.loads(call.function.arguments)))
    return calls


def responses_calls(response) -> list[tuple[str, dict]]:
    calls = []
    for item in response.output:
        if item.type == "function_call":
            assert item.call_id
            calls.append((item.name, json.loads(item.arguments)))
    return calls


def check_responses_final(r, expect: dict) -> None:
    assert r.output_text == expect["text"]
    assert responses_calls(r) == expected_calls(expect)
    assert r.status == RESPONSES_STATUS[expect["stop"]]
    if expect["stop"] == "max_tokens":
        assert r.incomplete_details and r.incomplete_details.reason == "max_output_tokens"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (expect["usage"]["in"], expect["usage"]["out"])


def check_anthropic_final(m, expect: dict) -> None:
    assert anthropic_text(m) == expect["text"]
    assert anthropic_calls(m) == expected_calls(expect)
    assert m.stop_reason == expect["stop"]
    u = m.usage
    assert u.output_tokens == expect["usage"]["out"]
    total_in = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert total_in == expect["usage"]["in"]


def check_chat_final(c, expect: dict, usage: bool = True) -> None:
    choice = c.choices[0]
    assert (choice.message.content or "") == expect["text"]
    assert chat_calls(choice.message) == expected_calls(expect)
    assert choice.finish_reason == CHAT_FINISH[expect["stop"]]
    if usage:
        assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (expect["usage"]["in"], expect["usage"]["out"])


def chat_stream_by_iteration(oai, req: dict) -> dict:
    """Iterates `create(stream=True)` and accumulates content, tool-call fragments, finish reason and usage."""
    text, calls, finish, usage = "", {}, None, None
    for chunk in oai.chat.completions.create(**req):
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                acc = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    acc["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    acc["arguments"] += tc.function.arguments
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "text": text,
        "calls": [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())],
        "finish": finish,
        "usage": usage,
    }


def strict_tools(req: dict) -> dict:
    """The stream helper only accepts strict function tools (it parses their arguments)."""
    if "tools" not in req:
        return req
    tools = [{**t, "function": {**t["function"], "strict": True}} for t in req["tools"]]
    return {**req, "tools": tools}


# ---------------------------------------------------------------------------------------------------------
# Streamed answers: the SDK accumulators


def run_stream(clients, upstream, gateway, case: str, client: str, kind: str) -> None:
    oai, claude = clients["openai"], clients["anthropic"]
    if client == "chat":
        req, expect = setup_case(upstream, case, client, kind, times=2)
        got = chat_stream_by_iteration(oai, req)
        assert got["text"] == expect["text"]
        assert got["calls"] == expected_calls(expect)
        assert got["finish"] == CHAT_FINISH[expect["stop"]]
        assert got["usage"] == (expect["usage"]["in"], expect["usage"]["out"])
        with oai.chat.completions.stream(**strict_tools(without_stream(req))) as stream:
            deltas = [e.delta for e in stream if e.type == "content.delta"]
            final = stream.get_final_completion()
        assert "".join(deltas) == expect["text"]
        check_chat_final(final, expect)
        for call in final.choices[0].message.tool_calls or []:
            assert call.function.parsed_arguments == json.loads(call.function.arguments)
        check_upstream_got(upstream, kind, expect, 2)
    elif client == "responses":
        req, expect = setup_case(upstream, case, client, kind)
        with oai.responses.stream(**without_stream(req)) as stream:
            events = list(stream)
            final = stream.get_final_response()
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert "".join(deltas) == expect["text"]
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        numbers = [e.sequence_number for e in events]
        assert numbers == sorted(set(numbers)), "sequence numbers rise strictly"
        check_responses_final(final, expect)
        arg_deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        assert arg_deltas == "".join(i.arguments for i in final.output if i.type == "function_call")
        check_upstream_got(upstream, kind, expect, 1)
    else:
        req, expect = setup_case(upstream, case, client, kind)
        with claude.messages.stream(**without_stream(req)) as stream:
            events = list(stream)
            final = stream.get_final_message()
            request_id = stream.request_id
        text = "".join(e.text for e in events if e.type == "text")
        assert text == expect["text"]
        check_anthropic_final(final, expect)
        assert gateway.usage(request_id) == (expect["usage"]["in"], expect["usage"]["out"])
        check_upstream_got(upstream, kind, expect, 1)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_stream_text(clients, upstream, gateway, client, kind):
    run_stream(clients, upstream, gateway, "stream_text", client, kind)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_stream_tool_call(clients, upstream, gateway, client, kind):
    run_stream(clients, upstream, gateway, "stream_tool_call", client, kind)


# ---------------------------------------------------------------------------------------------------------
# Non-streamed answers


def run_create(clients, upstream, gateway, case: str, client: str, kind: str) -> None:
    req, expect = setup_case(upstream, case, client, kind)
    if client == "chat":
        c = clients["openai"].chat.completions.create(**req)
        check_chat_final(c, expect)
        request_id = c._request_id
    elif client == "responses":
        r = clients["openai"].responses.create(**req)
        check_responses_final(r, expect)
        request_id = r._request_id
    else:
        m = clients["anthropic"].messages.create(**req)
        check_anthropic_final(m, expect)
        request_id = m._request_id
    assert gateway.usage(request_id) == (expect["usage"]["in"], expect["usage"]["out"])
    check_upstream_got(upstream, kind, expect, 1)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_text(clients, upstream, gateway, client, kind):
    run_create(clients, upstream, gateway, "text", client, kind)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_tool_call(clients, upstream, gateway, client, kind):
    run_create(clients, upstream, gateway, "tool_call", client, kind)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_tool_round_trip(clients, upstream, gateway, client, kind):
    run_create(clients, upstream, gateway, "tool_round_trip", client, kind)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_structured_output(clients, upstream, client, kind):
    """The fixture's own request (its JSON-schema format) and the SDK's Pydantic parse helper."""
    req, expect = setup_case(upstream, "structured_output", client, kind, times=2)
    want = Place(city="Paris", country="France")
    assert Place.model_validate_json(expect["text"]) == want
    oai, claude = clients["openai"], clients["anthropic"]
    if client == "chat":
        check_chat_final(oai.chat.completions.create(**req), expect)
        c = oai.chat.completions.parse(model=req["model"], messages=req["messages"],
                                       max_completion_tokens=req["max_completion_tokens"], response_format=Place)
        assert c.choices[0].message.parsed == want
    elif client == "responses":
        check_responses_final(oai.responses.create(**req), expect)
        r = oai.responses.parse(model=req["model"], input=req["input"],
                                max_output_tokens=req["max_output_tokens"], text_format=Place)
        assert r.output_parsed == want
    else:
        check_anthropic_final(claude.messages.create(**req), expect)
        m = claude.messages.parse(model=req["model"], messages=req["messages"], max_tokens=req["max_tokens"],
                                  output_format=Place)
        assert m.parsed_output == want
    check_upstream_got(upstream, kind, expect, 2)


# ---------------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_upstream_error(clients, upstream, gateway, client, kind):
    req, expect = setup_case(upstream, "upstream_error", client, kind)
    err_class = anthropic.RateLimitError if client == "messages" else openai.RateLimitError
    with pytest.raises(err_class) as e:
        if client == "chat":
            clients["openai"].chat.completions.create(**req)
        elif client == "responses":
            clients["openai"].responses.create(**req)
        else:
            clients["anthropic"].messages.create(**req)
    err = e.value
    assert err.status_code == 429
    assert err.response.headers["retry-after"] == expect["error"]["retry_after"]
    message = err.api_message if client == "messages" else err.message
    assert expect["error"]["message"] in (message or "")
    gateway.log_line(err.request_id)  # the gateway's own request id
    check_upstream_got(upstream, kind, expect, 1)


@pytest.mark.parametrize(("client", "kind"), PAIRS)
def test_stream_error(clients, upstream, client, kind):
    oai, claude = clients["openai"], clients["anthropic"]
    if client == "chat":
        req, expect = setup_case(upstream, "stream_error", client, kind, times=2)
        message = expect["error"]["message"]
        text = ""
        with pytest.raises(openai.APIError) as e:
            for chunk in oai.chat.completions.create(**req):
                text += "".join(ch.delta.content or "" for ch in chunk.choices)
        assert text == expect["text"], "what came before the failure was delivered"
        assert message in e.value.message
        text = ""
        with pytest.raises(openai.APIError) as e:
            with oai.chat.completions.stream(**without_stream(req)) as stream:
                for event in stream:
                    if event.type == "content.delta":
                        text += event.delta
        assert text == expect["text"]
        assert message in e.value.message
        check_upstream_got(upstream, kind, expect, 2)
    elif client == "responses":
        req, expect = setup_case(upstream, "stream_error", client, kind)
        message = expect["error"]["message"]
        events = []
        # A `response.failed` comes out as the event itself and get_final_response() then raises RuntimeError
        # (no `response.completed`); an `error` event raises APIError from the iteration. Either is fine.
        with pytest.raises((openai.APIError, RuntimeError)) as e:
            with oai.responses.stream(**without_stream(req)) as stream:
                for event in stream:
                    events.append(event)
                stream.get_final_response()
        text = "".join(ev.delta for ev in events if ev.type == "response.output_text.delta")
        assert text == expect["text"]
        if isinstance(e.value, openai.APIError):
            assert message in e.value.message
        else:
            last = events[-1]
            assert last.type in ("response.failed", "error"), last.type
            got = last.response.error.message if last.type == "response.failed" else last.message
            assert message in got
        check_upstream_got(upstream, kind, expect, 1)
    else:
        req, expect = setup_case(upstream, "stream_error", client, kind)
        pieces = []
        with pytest.raises(anthropic.APIStatusError) as e:
            with claude.messages.stream(**without_stream(req)) as stream:
                for piece in stream.text_stream:
                    pieces.append(piece)
                stream.get_final_message()
        assert "".join(pieces) == expect["text"]
        assert expect["error"]["message"] in (e.value.api_message or "")
        check_upstream_got(upstream, kind, expect, 1)
