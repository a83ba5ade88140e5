"""Fixtures for the Python SDK compatibility suite (run it with scripts/sdk-tests.sh).

- `gateway`: the real tollgate binary ($TOLLGATE_BIN, else target/debug/tollgate), started once per session
  on a free port, with the built-in mock model plus one model per upstream kind (`m-chat`, `m-responses`,
  `m-messages`, `m-gemini`) that points at the fake upstream; group `default` may use them all, group `narrow`
  only the mock (`add_key` makes a key of a group). It exposes the address, the API key created at first start
  and the log lines (one per request, carrying the request id and the `in=N out=M` token counts).
- `upstream`: the fake upstream (ThreadingHTTPServer speaking HTTP/1.1). A test queues the replies of the
  fixtures in `fixtures/<protocol>/<case>.json` with `serve()`; each incoming request takes the next one.
  JSON replies carry a content-length; SSE transcripts go out with chunked transfer encoding, one event per
  chunk, and `abort: true` closes the connection without the final chunk. Requests are recorded.
  `serve_translate(case, kind)` queues the reply of upstream `kind` from `fixtures/translate/<case>/`.
- `oai`, `anthropic_client`, `genai_client`: SDK clients pointed at the gateway, with retries off.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
UPSTREAM_KEY = "sk-upstream-sdk-suite-secret"
CONFIGURED_MODELS = {"mock", "m-chat", "m-responses", "m-messages", "m-gemini"}

# The SDKs read these; the suite passes everything explicitly, and talks to 127.0.0.1 without a proxy.
for _var in (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_API_VERSION",
    "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
):
    os.environ.pop(_var, None)


def load_fixture(protocol: str, case: str) -> dict:
    return json.loads((FIXTURES / protocol / f"{case}.json").read_text())


def sse_events(raw: bytes) -> list[bytes]:
    """A raw SSE transcript split into events, one chunk each (blank line kept at the end of each)."""
    raw = raw.replace(b"\r\n", b"\n")
    return [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]


TRANSLATE = FIXTURES / "translate"


def load_translate_request(case: str, client: str, model: str) -> dict:
    """`fixtures/translate/<case>/<client>.request.json` with `"model": "MODEL"` replaced by `model`."""
    req = json.loads((TRANSLATE / case / f"{client}.request.json").read_text())
    return {**req, "model": model}


def load_translate_expect(case: str) -> dict:
    return json.loads((TRANSLATE / case / "expect.json").read_text())


def load_translate_reply(case: str, kind: str) -> dict:
    """The reply of upstream `kind` in `fixtures/translate/<case>/`: `<kind>.upstream.sse` (status 200, as
    events) or `<kind>.upstream.json` ({status, headers, body})."""
    sse = TRANSLATE / case / f"{kind}.upstream.sse"
    if sse.exists():
        return {"status": 200, "events": sse_events(sse.read_bytes())}
    return json.loads((TRANSLATE / case / f"{kind}.upstream.json").read_text())


# ---------------------------------------------------------------------------------------------------------
# Fake upstream


@dataclass
class Received:
    method: str
    path: str
    headers: dict  # lower-cased names
    body: bytes

    def json(self):
        return json.loads(self.body)


class FakeUpstream:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: collections.deque = collections.deque()
        self.received: list[Received] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _UpstreamHandler)
        self.server.daemon_threads = True
        self.server.fake = self  # type: ignore[attr-defined]
        self.addr = "%s:%d" % self.server.server_address[:2]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve(self, protocol: str, case: str) -> dict:
        """Queues the upstream reply of `fixtures/<protocol>/<case>.json`; returns the whole fixture."""
        fx = load_fixture(protocol, case)
        reply = dict(fx["upstream"])
        if "sse_file" in reply:
            raw = (FIXTURES / protocol / reply["sse_file"]).read_bytes().replace(b"\r\n", b"\n")
            reply["events"] = [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]
        with self._lock:
            self._replies.append(reply)
        return fx

    def queue(self, reply: dict, times: int = 1) -> None:
        """Queues one reply (`{status, headers?, body}` or `{status, events}`) `times` times."""
        with self._lock:
            self._replies.extend(dict(reply) for _ in range(times))

    def serve_translate(self, case: str, kind: str, times: int = 1) -> None:
        """Queues the `kind` upstream's reply of `fixtures/translate/<case>/` (see load_translate_reply)."""
        self.queue(load_translate_reply(case, kind), times)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.received.clear()

    @property
    def last(self) -> Received:
        assert self.received, "the fake upstream received no request"
        return self.received[-1]

    def _next(self, rec: Received):
        with self._lock:
            self.received.append(rec)
            return self._replies.popleft() if self._replies else None


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - keep the test output clean
        pass

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self._answer()

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _answer(self) -> None:
        rec = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self._read_body())
        reply = self.server.fake._next(rec)  # type: ignore[attr-defined]
        if reply is None:
            reply = {"status": 500, "body": {"error": {"message": "fake upstream: no reply queued"}}}
        self.send_response(reply["status"])
        for name, value in reply.get("headers", {}).items():
            self.send_header(name, value)
        if "events" not in reply:
            data = json.dumps(reply["body"]).encode()
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in reply["events"]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        if reply.get("abort"):
            self.close_connection = True  # the server closes the socket: no terminating chunk
        else:
            self.wfile.write(b"0\r\n\r\n")


# ---------------------------------------------------------------------------------------------------------
# Gateway


class Gateway:
    def __init__(self, proc: subprocess.Popen, addr: str, key: str, logs: list[str], cfg: Path) -> None:
        self.proc = proc
        self.addr = addr
        self.key = key
        self.logs = logs
        self.cfg = cfg
        self.openai_base_url = f"http://{addr}/v1"
        self.anthropic_base_url = f"http://{addr}"
        self.gemini_base_url = f"http://{addr}"
        self.models = CONFIGURED_MODELS
        self.upstream_key = UPSTREAM_KEY  # what the upstreams must receive as their key

    def add_key(self, name: str, group: str) -> str:
        """A new key of `group` (made with `tollgate keys add`; the gateway takes it within a moment)."""
        env = {**os.environ, "TG_TEST_UPSTREAM_KEY": UPSTREAM_KEY}
        added = subprocess.run(
            [_tollgate_bin(), "keys", "add", "--config", str(self.cfg), "--name", name, "--group", group],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        )
        key = (added.stdout.strip().splitlines() or [""])[-1].strip()
        assert added.returncode == 0 and key.startswith("tg_"), added.stdout + added.stderr
        import urllib.request
        deadline = time.monotonic() + 30
        while True:
            req = urllib.request.Request(f"http://{self.addr}/v1/models", headers={"authorization": f"Bearer {key}"})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        return key
            except OSError:
                pass
            assert time.monotonic() < deadline, "the gateway did not take the new key"
            time.sleep(0.05)

    def log_line(self, request_id: str, containing: str = " status=", timeout: float = 10.0) -> str:
        """The access-log line of a request (written when the request ends, so it may come a moment later)."""
        assert request_id and request_id.startswith("req_"), f"not a gateway request id: {request_id!r}"
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.logs):
                if request_id in line and containing in line:
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line for {request_id}; logs:\n" + "\n".join(self.logs[-20:]))
            time.sleep(0.01)

    def usage(self, request_id: str) -> tuple[int, int]:
        """The `in`/`out` tokens the gateway recorded for a request."""
        fields = dict(f.split("=", 1) for f in self.log_line(request_id, " in=").split() if "=" in f)
        return int(fields["in"]), int(fields["out"])


def _config(data_dir: Path, fake: str) -> str:
    return f"""
listen = "127.0.0.1:0"
data_dir = "{data_dir}"

[[upstreams]]
name = "mock"
kind = "mock"
mock_delay_ms = 0

[[models]]
name = "mock"
upstream = "mock"

[[upstreams]]
name = "chat-up"
kind = "openai-chat"
base_url = "http://{fake}/v1"
api_key_env = "TG_TEST_UPSTREAM_KEY"

[[upstreams]]
name = "responses-up"
kind = "openai-responses"
base_url = "http://{fake}/v1"
api_key_env = "TG_TEST_UPSTREAM_KEY"

[[upstreams]]
name = "anthropic-up"
kind = "anthropic"
base_url = "http://{fake}"
api_key_env = "TG_TEST_UPSTREAM_KEY"

[[models]]
name = "m-chat"
upstream = "chat-up"
upstream_model = "real-chat-model"

[[models]]
name = "m-responses"
upstream = "responses-up"
upstream_model = "real-responses-model"

[[models]]
name = "m-messages"
upstream = "anthropic-up"
upstream_model = "real-messages-model"

[[upstreams]]
name = "gemini-up"
kind = "gemini"
base_url = "http://{fake}"
api_key_env = "TG_TEST_UPSTREAM_KEY"

[[models]]
name = "m-gemini"
upstream = "gemini-up"
upstream_model = "real-gemini-model"

[[groups]]
name = "default"
models = ["*"]

[[groups]]
name = "narrow"
models = ["mock"]
"""


def _tollgate_bin() -> str:
    path = os.environ.get("TOLLGATE_BIN") or str(ROOT / "target" / "debug" / "tollgate")
    if not os.access(path, os.X_OK):
        pytest.exit(f"no tollgate binary at {path}: run `cargo build` or set TOLLGATE_BIN", returncode=2)
    return path


@pytest.fixture(scope="session")
def fake_upstream():
    fake = FakeUpstream()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture(scope="session")
def gateway(fake_upstream):
    with tempfile.TemporaryDirectory(prefix="tollgate-sdk-") as tmp:
        cfg = Path(tmp) / "tollgate.toml"
        cfg.write_text(_config(Path(tmp) / "data", fake_upstream.addr))
        env = {**os.environ, "TG_TEST_UPSTREAM_KEY": UPSTREAM_KEY}
        # `serve --config` mints no key: make one first (group "default", the config's first group); the key
        # is the last line of the output.
        added = subprocess.run(
            [_tollgate_bin(), "keys", "add", "--config", str(cfg), "--name", "default", "--group", "default"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        key = (added.stdout.strip().splitlines() or [""])[-1].strip()
        if added.returncode != 0 or not key.startswith("tg_"):
            raise RuntimeError(f"tollgate keys add failed:\n{added.stdout}{added.stderr}")
        proc = subprocess.Popen(
            [_tollgate_bin(), "serve", "--config", str(cfg)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        logs: list[str] = []
        found: queue.Queue = queue.Queue()

        def read_stderr():
            for line in proc.stderr:
                line = line.rstrip("\n")
                if "listening on http://" in line:
                    found.put(("addr", line.split("listening on http://", 1)[1].split()[0]))
                logs.append(line)

        def read_stdout():
            for _ in proc.stdout:
                pass  # nothing expected; read so that the pipe never fills

        threading.Thread(target=read_stderr, daemon=True).start()
        threading.Thread(target=read_stdout, daemon=True).start()
        got: dict[str, str] = {"key": key}
        deadline = time.monotonic() + 30
        try:
            while "addr" not in got:
                try:
                    kind, value = found.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise RuntimeError("tollgate did not start:\n" + "\n".join(logs)) from None
                got[kind] = value
            yield Gateway(proc, got["addr"], got["key"], logs, cfg)
        finally:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def upstream(fake_upstream, gateway):
    """The fake upstream, emptied of replies and recorded requests left by earlier tests."""
    fake_upstream.reset()
    yield fake_upstream


@pytest.fixture(scope="session")
def oai(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.openai_base_url, api_key=gateway.key, max_retries=0, timeout=30)


@pytest.fixture(scope="session")
def anthropic_client(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.anthropic_base_url, api_key=gateway.key, max_retries=0, timeout=30)


def genai_for(gateway, key: str) -> genai.Client:
    """A `google-genai` client of the gateway with `key` (the Gemini API, not Vertex; no retries)."""
    options = genai_types.HttpOptions(base_url=gateway.gemini_base_url, timeout=30_000)
    return genai.Client(api_key=key, vertexai=False, http_options=options)


@pytest.fixture(scope="session")
def genai_client(gateway) -> genai.Client:
    return genai_for(gateway, gateway.key)
