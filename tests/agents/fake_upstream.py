#!/usr/bin/env python3
"""A fake LLM upstream for the agent tests (Python 3 standard library only).

It answers every request on the three wire protocols with one fixed text, so that a test can tell that an
agent's answer came all the way from here:

    POST .../chat/completions  ->  "AGENT-OK from chat upstream"       (OpenAI Chat Completions)
    POST .../responses         ->  "AGENT-OK from responses upstream"  (OpenAI Responses)
    POST .../messages          ->  "AGENT-OK from messages upstream"   (Anthropic Messages)

A body with "stream": true gets the protocol's full SSE lifecycle over chunked encoding, one event per
chunk (see shared/PROTOCOLS.md 1.3, 2.3, 3.3); anything else gets the protocol's JSON object. It also answers
GET .../models (OpenAI shape, or Anthropic's when the request carries anthropic-version) and
POST .../messages/count_tokens. Any other path gets a 404 in OpenAI's error shape and is logged to stderr
as UNKNOWN.

Every request is appended to the record file (one JSON object a line: time, method, path, query, headers,
body; body is the parsed JSON when it parses, else text, else base64) before it is answered.

Usage: fake_upstream.py RECORD_FILE [--port N] [--host H]
Prints "fake-upstream listening on http://HOST:PORT" on stdout once it is ready (port 0 = a free port).
"""

import argparse
import base64
import gzip
import json
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ANSWER = "AGENT-OK from {kind} upstream"
# The answer is streamed in these many pieces (roughly equal), to exercise delta accumulation.
PIECES = 3


def answer_text(kind):
    return ANSWER.format(kind=kind)


def split_text(text, pieces=PIECES):
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


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


# ----------------------------------------------------------------------------------------------- Chat


def chat_json(body, text):
    model = body.get("model") or "fake-model"
    prompt = estimate_tokens(body.get("messages"))
    completion = estimate_tokens(text)
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
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
        },
        "system_fingerprint": None,
        "service_tier": "default",
    }


def chat_events(body, text):
    model = body.get("model") or "fake-model"
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {"id": new_id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    if include_usage:
        base["usage"] = None

    def chunk(delta, finish=None):
        c = dict(base)
        c["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        return "data: %s\n\n" % json.dumps(c)

    yield chunk({"role": "assistant", "content": ""})
    for piece in split_text(text):
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    if include_usage:
        prompt = estimate_tokens(body.get("messages"))
        completion = estimate_tokens(text)
        c = dict(base)
        c["choices"] = []
        c["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        yield "data: %s\n\n" % json.dumps(c)
    yield "data: [DONE]\n\n"


# ------------------------------------------------------------------------------------------ Responses


def responses_usage(body, text):
    inp = estimate_tokens(body.get("input"))
    out = estimate_tokens(text)
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


def message_item(msg_id, text, status="completed"):
    return {
        "type": "message",
        "id": msg_id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_json(body, text):
    item = message_item(new_id("msg"), text)
    return responses_object(
        body, new_id("resp"), int(time.time()), "completed", [item], responses_usage(body, text)
    )


def responses_events(body, text):
    resp_id, msg_id, created = new_id("resp"), new_id("msg"), int(time.time())
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
        {
            "output_index": 0,
            "item": {"id": msg_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
        },
    )
    where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
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
    item = message_item(msg_id, text)
    yield event("response.output_item.done", {"output_index": 0, "item": item})
    done = responses_object(body, resp_id, created, "completed", [item], responses_usage(body, text))
    yield event("response.completed", {"response": done})


# ------------------------------------------------------------------------------------------- Messages


def messages_usage(body, text=None):
    usage = {
        "input_tokens": estimate_tokens([body.get("system"), body.get("messages")]),
        "output_tokens": estimate_tokens(text) if text is not None else 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return usage


def messages_json(body, text):
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or "fake-model",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": messages_usage(body, text),
    }


def messages_events(body, text):
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
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield event("ping", {})
    for piece in split_text(text):
        yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
    yield event("content_block_stop", {"index": 0})
    yield event(
        "message_delta",
        {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": estimate_tokens(text)}},
    )
    yield event("message_stop", {})


# ----------------------------------------------------------------------------------------------- HTTP


class Recorder:
    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        open(path, "a").close()

    def write(self, entry):
        line = json.dumps(entry, sort_keys=False)
        with self.lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def decode_body(raw, encoding):
    """The body as recorded: parsed JSON, else text, else base64 (e.g. zstd, which the stdlib lacks)."""
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
    if note is None and raw:
        try:
            return json.loads(raw.decode("utf-8")), None, raw
        except (UnicodeDecodeError, ValueError):
            pass
        try:
            return raw.decode("utf-8"), "not JSON", raw
        except UnicodeDecodeError:
            pass
    if not raw:
        return None, note, raw
    return base64.b64encode(raw).decode("ascii"), note or "binary, base64", None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-upstream/1"

    def log_message(self, fmt, *args):  # quiet: requests are in the record file
        pass

    # ---- plumbing

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, obj, extra_headers=()):
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake%06d" % IDS.next())
        for k, v in extra_headers:
            self.send_header(k, v)
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
        path = split.path.rstrip("/") or "/"
        raw = self.read_body() if self.command not in ("GET", "HEAD") else b""
        body, note, _ = decode_body(raw, self.headers.get("Content-Encoding"))
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
        self.route(path, body if isinstance(body, dict) else {})

    def route(self, path, body):
        stream = body.get("stream") is True
        if self.command == "POST" and path.endswith("/chat/completions"):
            text = answer_text("chat")
            return self.send_sse(chat_events(body, text)) if stream else self.send_json(200, chat_json(body, text))
        if self.command == "POST" and path.endswith("/responses"):
            text = answer_text("responses")
            if stream:
                return self.send_sse(responses_events(body, text))
            return self.send_json(200, responses_json(body, text))
        if self.command == "POST" and path.endswith("/messages/count_tokens"):
            return self.send_json(200, {"input_tokens": messages_usage(body)["input_tokens"]})
        if self.command == "POST" and path.endswith("/messages"):
            text = answer_text("messages")
            if stream:
                return self.send_sse(messages_events(body, text))
            return self.send_json(200, messages_json(body, text))
        if self.command == "GET" and path.endswith("/models"):
            if self.headers.get("anthropic-version"):
                data = [{"type": "model", "id": "fake-model", "display_name": "Fake model",
                         "created_at": "2025-01-01T00:00:00Z"}]
                return self.send_json(200, {"data": data, "has_more": False,
                                            "first_id": "fake-model", "last_id": "fake-model"})
            return self.send_json(200, {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "created": 1735689600, "owned_by": "fake-upstream"}]})
        sys.stderr.write("fake-upstream: UNKNOWN %s %s\n" % (self.command, self.path))
        sys.stderr.flush()
        self.send_json(404, {"error": {"message": "fake upstream: unknown path %s %s" % (self.command, path),
                                       "type": "invalid_request_error", "param": None, "code": "unknown_path"}})

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
