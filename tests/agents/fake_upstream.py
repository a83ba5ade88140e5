#!/usr/bin/env python3
"""A fake LLM upstream for the agent tests (Python 3 standard library only).

It answers every request on the four wire protocols with one fixed text, so that a test can tell that an
agent's answer came all the way from here:

    POST .../chat/completions  ->  "AGENT-OK from chat upstream"       (OpenAI Chat Completions)
    POST .../responses         ->  "AGENT-OK from responses upstream"  (OpenAI Responses)
    POST .../messages          ->  "AGENT-OK from messages upstream"   (Anthropic Messages)
    POST /v1beta/models/M:generateContent (or :streamGenerateContent, also under /v1/)
                               ->  "AGENT-OK from gemini upstream"     (the Gemini API)

A body with "stream": true (Gemini: the :streamGenerateContent path) gets the protocol's full stream over
chunked encoding, one event per chunk (see shared/PROTOCOLS.md 1.3, 2.3, 3.3; Gemini: `data:` chunks, the
last with finishReason and usageMetadata); anything else gets the protocol's JSON object. It also answers
GET .../models (OpenAI shape; Anthropic's when the request carries anthropic-version; Gemini's under
/v1beta/ or with x-goog-api-key), POST .../messages/count_tokens and Gemini's :countTokens. Any other path
gets a 404 in OpenAI's error shape and is logged to stderr as UNKNOWN.

Tool round trip: when the conversation's user text contains "TOOL-ROUNDTRIP <absolute path>" and holds no
tool result yet, the answer is a call of the agent's file-reading tool on that path instead of text: `Read`
{"file_path"} (Claude Code), `exec_command` {"cmd": "cat <path>"} (Codex CLI) or `read_file`
{"file_path"} (Gemini CLI). Once a tool result is in
the conversation, the answer is the text plus what the tool returned:
"AGENT-OK from <kind> upstream; the tool said MARKER-..." (the first MARKER-word in the tool result, or
"nothing recognisable").

Namespaced tool round trip (Codex CLI): with "TOOL-NAMESPACE" in the user text, the first answer calls
Codex's `close_agent` from its `multi_agent_v1` namespace with a made-up agent id (harmless: Codex answers
that the id is invalid). On the Responses wire the call is a function_call carrying
"namespace": "multi_agent_v1"; on the other wires it is whichever offered tool name holds both
"multi_agent_v1" and "close_agent" (the gateway flattens namespaces into plain names). Once the result is
back, the answer is "AGENT-OK from <kind> upstream; the namespaced tool was routed" unless Codex said it
could not route the call ("unsupported call"), then "...; the namespaced tool was NOT routed: <result>".

Every request is appended to the record file (one JSON object a line: time, method, path, query, headers,
body; body is the parsed JSON when it parses, else text, else base64) before it is answered.

Usage: fake_upstream.py RECORD_FILE [--port N] [--host H]
Prints "fake-upstream listening on http://HOST:PORT" on stdout once it is ready (port 0 = a free port).
"""

import argparse
import base64
import gzip
import json
import re
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ANSWER = "AGENT-OK from {kind} upstream"
# Text and tool arguments are streamed in these many pieces (roughly equal), to exercise accumulation.
PIECES = 3
TRIGGER = re.compile(r"TOOL-ROUNDTRIP (/[^\s\"'<>]+)")
NS_TRIGGER = "TOOL-NAMESPACE"
NAMESPACE, NS_TOOL = "multi_agent_v1", "close_agent"
MARKER = re.compile(r"MARKER-[A-Za-z0-9]+")


def split_text(text, pieces=PIECES):
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def estimate_tokens(value):
    """A rough token count (4 characters a token) of whatever JSON value was sent."""
    try:
        n = len(json.dumps(value))
    except (TypeError, ValueError):
        n = 0
    return max(1, n // 4)


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def next(self):
        with self.lock:
            self.n += 1
            return self.n


IDS = Counter()


def new_id(prefix):
    return "%s_fake%06d" % (prefix, IDS.next())


# ------------------------------------------------------------------------------- what to answer


def texts(value):
    """Every string inside a JSON value (content blocks, parts, tool outputs), in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)


def conversation(kind, body):
    """(user texts, tool result texts, tool names offered) of a request in protocol `kind`."""
    users, results = [], []
    if kind == "responses":
        items = body.get("input")
        items = (
            [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items or []
        )
        for it in items:
            if not isinstance(it, dict):
                continue
            t = it.get("type", "message")
            if t == "message" and it.get("role") == "user":
                users.extend(texts(it.get("content")))
            elif t in ("function_call_output", "custom_tool_call_output"):
                results.extend(texts(it.get("output")))
    elif kind == "gemini":
        for c in body.get("contents") or []:
            if not isinstance(c, dict) or c.get("role", "user") != "user":
                continue
            for part in c.get("parts") or []:
                if not isinstance(part, dict):
                    continue
                if "functionResponse" in part:
                    results.extend(texts((part.get("functionResponse") or {}).get("response")))
                elif isinstance(part.get("text"), str):
                    users.append(part["text"])
    else:
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            role, content = m.get("role"), m.get("content")
            if kind == "chat" and role == "tool":
                results.extend(texts(content))
            elif role == "user" and isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results.extend(texts(block.get("content")))
                    elif isinstance(block, dict):
                        users.extend(texts(block.get("text")))
            elif role == "user":
                users.extend(texts(content))
    names = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if kind == "gemini":
            names.extend(d.get("name") for d in t.get("functionDeclarations") or [] if isinstance(d, dict))
        elif t.get("type") == "namespace":
            names.extend(
                "%s.%s" % (t.get("name"), f.get("name")) for f in t.get("tools") or [] if isinstance(f, dict)
            )
        else:
            names.append(t.get("name") or (t.get("function") or {}).get("name"))
    return users, results, names


def decide_namespace(kind, results, names):
    text = ANSWER.format(kind=kind)
    if results:
        said = " ".join(results).replace("\n", " ")
        if "unsupported call" in said:
            return {"text": "%s; the namespaced tool was NOT routed: %s" % (text, said[:200])}
        return {"text": "%s; the namespaced tool was routed" % text}
    if "%s.%s" % (NAMESPACE, NS_TOOL) in names:
        return {
            "tool": NS_TOOL,
            "namespace": NAMESPACE,
            "arguments": json.dumps({"target": "agent-tests-no-such-agent"}),
        }
    for n in names:
        if n and NAMESPACE in n and NS_TOOL in n and "." not in n:
            return {"tool": n, "arguments": json.dumps({"target": "agent-tests-no-such-agent"})}
    return {
        "text": "%s; no %s.%s tool was offered (tools: %s)"
        % (text, NAMESPACE, NS_TOOL, ", ".join(map(str, names)))
    }


def decide(kind, body):
    """The answer: {"text": ...} or {"tool": name, "arguments": json string[, "namespace": ns]}."""
    text = ANSWER.format(kind=kind)
    users, results, names = conversation(kind, body)
    if any(NS_TRIGGER in u for u in users):
        return decide_namespace(kind, results, names)
    path = None
    for u in users:
        m = TRIGGER.search(u)
        if m:
            path = m.group(1)
    if path is None:
        return {"text": text}
    if results:
        found = None
        for r in results:
            m = MARKER.search(r)
            if m:
                found = m.group(0)
                break
        return {"text": "%s; the tool said %s" % (text, found or "nothing recognisable")}
    if "Read" in names:
        return {"tool": "Read", "arguments": json.dumps({"file_path": path})}
    if "exec_command" in names:
        return {"tool": "exec_command", "arguments": json.dumps({"cmd": "cat " + path})}
    if "read_file" in names:
        return {"tool": "read_file", "arguments": json.dumps({"file_path": path})}
    return {"text": "%s; no file-reading tool was offered (tools: %s)" % (text, ", ".join(map(str, names)))}


def output_text(reply):
    return reply.get("text") or reply.get("arguments") or ""


# ----------------------------------------------------------------------------------------------- Chat


def chat_usage(body, reply):
    prompt = estimate_tokens(body.get("messages"))
    completion = estimate_tokens(output_text(reply))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_json(body, reply):
    message = {"role": "assistant", "content": reply.get("text"), "refusal": None, "annotations": []}
    if "tool" in reply:
        message["tool_calls"] = [
            {
                "id": new_id("call"),
                "type": "function",
                "function": {"name": reply["tool"], "arguments": reply["arguments"]},
            }
        ]
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "fake-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if "tool" in reply else "stop",
            }
        ],
        "usage": chat_usage(body, reply),
        "system_fingerprint": None,
        "service_tier": "default",
    }


def chat_events(body, reply):
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model") or "fake-model",
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta, finish=None):
        c = dict(base)
        c["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        return "data: %s\n\n" % json.dumps(c)

    if "tool" in reply:
        first = {
            "index": 0,
            "id": new_id("call"),
            "type": "function",
            "function": {"name": reply["tool"], "arguments": ""},
        }
        yield chunk({"role": "assistant", "content": None, "tool_calls": [first]})
        for piece in split_text(reply["arguments"]):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls")
    else:
        yield chunk({"role": "assistant", "content": ""})
        for piece in split_text(reply["text"]):
            yield chunk({"content": piece})
        yield chunk({}, "stop")
    if include_usage:
        c = dict(base)
        c["choices"] = []
        c["usage"] = chat_usage(body, reply)
        yield "data: %s\n\n" % json.dumps(c)
    yield "data: [DONE]\n\n"


# ------------------------------------------------------------------------------------------ Responses


def responses_usage(body, reply):
    inp = estimate_tokens([body.get("instructions"), body.get("input")])
    out = estimate_tokens(output_text(reply))
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }


def responses_object(body, resp_id, created, status, output, usage):
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": body.get("model") or "fake-model",
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": {},
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "store": body.get("store", True),
        "user": None,
        "usage": usage,
    }


def responses_item(reply, item_id, call_id, done=True):
    if "tool" in reply:
        item = {
            "type": "function_call",
            "id": item_id,
            "call_id": call_id,
            "name": reply["tool"],
            "arguments": reply["arguments"] if done else "",
            "status": "completed" if done else "in_progress",
        }
        if reply.get("namespace"):
            item["namespace"] = reply["namespace"]
        return item
    content = [{"type": "output_text", "text": reply["text"], "annotations": []}] if done else []
    return {
        "type": "message",
        "id": item_id,
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": content,
    }


def responses_json(body, reply):
    item_id = new_id("fc" if "tool" in reply else "msg")
    item = responses_item(reply, item_id, new_id("call"))
    return responses_object(
        body, new_id("resp"), int(time.time()), "completed", [item], responses_usage(body, reply)
    )


def responses_events(body, reply):
    resp_id, created = new_id("resp"), int(time.time())
    item_id, call_id = new_id("fc" if "tool" in reply else "msg"), new_id("call")
    seq = [0]

    def event(kind, payload):
        data = {"type": kind, "sequence_number": seq[0]}
        data.update(payload)
        seq[0] += 1
        return "event: %s\ndata: %s\n\n" % (kind, json.dumps(data))

    pending = responses_object(body, resp_id, created, "in_progress", [], None)
    yield event("response.created", {"response": pending})
    yield event("response.in_progress", {"response": pending})
    yield event(
        "response.output_item.added",
        {"output_index": 0, "item": responses_item(reply, item_id, call_id, False)},
    )
    if "tool" in reply:
        where = {"item_id": item_id, "output_index": 0}
        for piece in split_text(reply["arguments"]):
            yield event("response.function_call_arguments.delta", dict(where, delta=piece))
        yield event(
            "response.function_call_arguments.done",
            dict(where, name=reply["tool"], arguments=reply["arguments"]),
        )
    else:
        text = reply["text"]
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        yield event(
            "response.content_part.added",
            dict(where, part={"type": "output_text", "text": "", "annotations": []}),
        )
        for piece in split_text(text):
            yield event("response.output_text.delta", dict(where, delta=piece, logprobs=[]))
        yield event("response.output_text.done", dict(where, text=text, logprobs=[]))
        yield event(
            "response.content_part.done",
            dict(where, part={"type": "output_text", "text": text, "annotations": []}),
        )
    item = responses_item(reply, item_id, call_id)
    yield event("response.output_item.done", {"output_index": 0, "item": item})
    done = responses_object(body, resp_id, created, "completed", [item], responses_usage(body, reply))
    yield event("response.completed", {"response": done})


# ------------------------------------------------------------------------------------------- Messages


def messages_usage(body, reply=None):
    return {
        "input_tokens": estimate_tokens([body.get("system"), body.get("messages")]),
        "output_tokens": estimate_tokens(output_text(reply)) if reply is not None else 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def messages_json(body, reply):
    if "tool" in reply:
        content = [
            {
                "type": "tool_use",
                "id": new_id("toolu"),
                "name": reply["tool"],
                "input": json.loads(reply["arguments"]),
            }
        ]
    else:
        content = [{"type": "text", "text": reply["text"]}]
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "fake-model",
        "content": content,
        "stop_reason": "tool_use" if "tool" in reply else "end_turn",
        "stop_sequence": None,
        "usage": messages_usage(body, reply),
    }


def messages_events(body, reply):
    def event(kind, payload):
        data = {"type": kind}
        data.update(payload)
        return "event: %s\ndata: %s\n\n" % (kind, json.dumps(data))

    skeleton = {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": body.get("model") or "fake-model",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": messages_usage(body),
    }
    yield event("message_start", {"message": skeleton})
    if "tool" in reply:
        block = {"type": "tool_use", "id": new_id("toolu"), "name": reply["tool"], "input": {}}
        yield event("content_block_start", {"index": 0, "content_block": block})
        yield event("ping", {})
        for piece in split_text(reply["arguments"]):
            yield event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}},
            )
    else:
        yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        yield event("ping", {})
        for piece in split_text(reply["text"]):
            yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
    yield event("content_block_stop", {"index": 0})
    stop = "tool_use" if "tool" in reply else "end_turn"
    yield event(
        "message_delta",
        {
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": estimate_tokens(output_text(reply))},
        },
    )
    yield event("message_stop", {})


# ------------------------------------------------------------------------------------------- Gemini

GEMINI_PATH = re.compile(r"^/v1(?:beta)?/models/([^/:]+):([A-Za-z]+)$")


def gemini_usage(body, reply=None):
    prompt = estimate_tokens([body.get("systemInstruction"), body.get("contents")])
    out = estimate_tokens(output_text(reply)) if reply is not None else 0
    return {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out}


def gemini_chunk(model, response_id, parts, finish=None, usage=None):
    candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    chunk = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
    if usage:
        chunk["usageMetadata"] = usage
    return chunk


def gemini_parts(reply):
    if "tool" in reply:
        return [{"functionCall": {"name": reply["tool"], "args": json.loads(reply["arguments"])}}]
    return [{"text": reply["text"]}]


def gemini_json(model, body, reply):
    return gemini_chunk(model, new_id("gresp"), gemini_parts(reply), "STOP", gemini_usage(body, reply))


def gemini_events(model, body, reply):
    rid = new_id("gresp")
    if "tool" in reply:
        chunks = [gemini_chunk(model, rid, gemini_parts(reply), "STOP", gemini_usage(body, reply))]
    else:
        pieces = split_text(reply["text"])
        chunks = [gemini_chunk(model, rid, [{"text": p}]) for p in pieces[:-1]]
        chunks.append(gemini_chunk(model, rid, [{"text": pieces[-1]}], "STOP", gemini_usage(body, reply)))
    for c in chunks:
        yield "data: %s\r\n\r\n" % json.dumps(c)


def gemini_models():
    return {
        "models": [
            {
                "name": "models/fake-model",
                "displayName": "Fake model",
                "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
        ]
    }


# ----------------------------------------------------------------------------------------------- HTTP


class Recorder:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        open(path, "a").close()

    def write(self, entry):
        line = json.dumps(entry)
        with self.lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def decode_body(raw, encoding):
    """The body as recorded and a note: parsed JSON, else text, else base64 (e.g. zstd: not in the stdlib)."""
    encoding = (encoding or "").strip().lower()
    note = None
    try:
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding not in ("", "identity"):
            note = "content-encoding %s not decoded" % encoding
    except (OSError, zlib.error) as e:
        note = "content-encoding %s failed to decode: %s" % (encoding, e)
    if not raw:
        return None, note
    if note is None:
        try:
            return json.loads(raw.decode("utf-8")), None
        except (UnicodeDecodeError, ValueError):
            pass
        try:
            return raw.decode("utf-8"), "not JSON"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(raw).decode("ascii"), note or "binary, base64"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-upstream/1"

    def log_message(self, fmt, *args):  # quiet: requests are in the record file
        pass

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, obj):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake%06d" % IDS.next())
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.wfile.flush()

    def send_sse(self, events):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", "req_fake%06d" % IDS.next())
        self.end_headers()
        for ev in events:
            data = ev.encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def handle_any(self):
        split = urlsplit(self.path)
        raw = self.read_body() if self.command not in ("GET", "HEAD") else b""
        body, note = decode_body(raw, self.headers.get("Content-Encoding"))
        entry = {
            "time": time.time(),
            "method": self.command,
            "path": split.path,
            "query": split.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body_bytes": len(raw),
            "body": body,
        }
        if note:
            entry["body_note"] = note
        self.server.recorder.write(entry)
        self.route(split.path.rstrip("/") or "/", body if isinstance(body, dict) else {})

    def route(self, path, body):
        stream = body.get("stream") is True
        post = self.command == "POST"
        gemini = GEMINI_PATH.match(path)
        if post and gemini and gemini.group(2) in ("generateContent", "streamGenerateContent"):
            model = gemini.group(1)
            reply = decide("gemini", body)
            if gemini.group(2) == "streamGenerateContent":
                return self.send_sse(gemini_events(model, body, reply))
            return self.send_json(200, gemini_json(model, body, reply))
        if post and gemini and gemini.group(2) == "countTokens":
            inner = body.get("generateContentRequest") or body
            return self.send_json(200, {"totalTokens": gemini_usage(inner)["promptTokenCount"]})
        if self.command == "GET" and (path.startswith("/v1beta/") or self.headers.get("x-goog-api-key")):
            if path.endswith("/models"):
                return self.send_json(200, gemini_models())
        if post and path.endswith("/chat/completions"):
            reply = decide("chat", body)
            return (
                self.send_sse(chat_events(body, reply))
                if stream
                else self.send_json(200, chat_json(body, reply))
            )
        if post and path.endswith("/responses"):
            reply = decide("responses", body)
            if stream:
                return self.send_sse(responses_events(body, reply))
            return self.send_json(200, responses_json(body, reply))
        if post and path.endswith("/messages/count_tokens"):
            return self.send_json(200, {"input_tokens": messages_usage(body)["input_tokens"]})
        if post and path.endswith("/messages"):
            reply = decide("messages", body)
            if stream:
                return self.send_sse(messages_events(body, reply))
            return self.send_json(200, messages_json(body, reply))
        if self.command == "GET" and path.endswith("/models"):
            if self.headers.get("anthropic-version"):
                data = [
                    {
                        "type": "model",
                        "id": "fake-model",
                        "display_name": "Fake model",
                        "created_at": "2025-01-01T00:00:00Z",
                    }
                ]
                return self.send_json(
                    200, {"data": data, "has_more": False, "first_id": "fake-model", "last_id": "fake-model"}
                )
            return self.send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "fake-model",
                            "object": "model",
                            "created": 1735689600,
                            "owned_by": "fake-upstream",
                        }
                    ],
                },
            )
        sys.stderr.write("fake-upstream: UNKNOWN %s %s\n" % (self.command, self.path))
        sys.stderr.flush()
        self.send_json(
            404,
            {
                "error": {
                    "message": "fake upstream: unknown path %s %s" % (self.command, path),
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "unknown_path",
                }
            },
        )

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("record_file")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    server = Server((args.host, args.port), Handler)
    server.recorder = Recorder(args.record_file)
    host, port = server.server_address[:2]
    print("fake-upstream listening on http://%s:%d" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
