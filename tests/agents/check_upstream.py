#!/usr/bin/env python3
"""Checks and summarises what the fake upstream recorded during one agent run (stdlib only).

Usage: check_upstream.py RECORD_FILE FROM_LINE KIND [--min-requests N] [--upstream-model M] [--upstream-key K]
                         [--client-key K]

RECORD_FILE is fake_upstream.py's JSON-lines record; only lines after the first FROM_LINE are this run's.
KIND is the upstream kind the run's model points at:
  chat, responses, messages or gemini: the upstream must have received at least N POSTs on that protocol's
      path (--min-requests, default 1; Gemini's names the model and the method:
      /v1beta/models/MODEL:streamGenerateContent or :generateContent), with the given upstream model and key,
      and never the client's tollgate key;
  direct: the agent talked to the fake itself, only summarised;
  mock: no upstream request expected.

Prints one summary line per distinct request shape to stdout, then problems (if any) prefixed "PROBLEM:";
exits 1 when there is a problem.
"""

import argparse
import json
import re
import sys

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
GEMINI = re.compile(r"^/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")


def describe(entry):
    body = entry.get("body")
    parts = []
    if isinstance(body, dict):
        for key in ("model", "stream"):
            if key in body:
                parts.append("%s=%s" % (key, json.dumps(body[key])))
        tools = body.get("tools")
        if isinstance(tools, list):
            kinds = {}
            for t in tools:
                k = t.get("type", "custom") if isinstance(t, dict) else "?"
                kinds[k] = kinds.get(k, 0) + 1
            parts.append("tools=" + ",".join("%s:%d" % kv for kv in sorted(kinds.items())))
    parts.append("%.1fKB" % (entry.get("body_bytes", 0) / 1000.0))
    beta = (entry.get("headers") or {}).get("anthropic-beta")
    if beta:
        parts.append("anthropic-beta=" + beta)
    q = entry.get("query")
    path = entry.get("path", "?") + ("?" + q if q else "")
    return "%s %s (%s)" % (entry.get("method", "?"), path, ", ".join(parts))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("record_file")
    p.add_argument("from_line", type=int)
    p.add_argument("kind", choices=["chat", "responses", "messages", "gemini", "direct", "mock"])
    p.add_argument("--min-requests", type=int, default=1)
    p.add_argument("--upstream-model")
    p.add_argument("--upstream-key")
    p.add_argument("--client-key")
    a = p.parse_args()

    entries = []
    with open(a.record_file, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= a.from_line and line.strip():
                entries.append(json.loads(line))

    problems = []
    for e in entries:
        print("upstream got: " + describe(e))
    if not entries:
        print("upstream got: nothing")

    if a.kind == "mock" and entries:
        problems.append("the mock model's run reached the fake upstream")
    if a.kind in PATHS or a.kind == "gemini":
        want = PATHS.get(a.kind, "/v1beta/models/MODEL:streamGenerateContent")
        if a.kind == "gemini":
            hits = [
                e
                for e in entries
                if e.get("method") == "POST"
                and GEMINI.match(e.get("path", ""))
                and GEMINI.match(e.get("path", "")).group(2) != "countTokens"
            ]
        else:
            hits = [e for e in entries if e.get("method") == "POST" and e.get("path") == want]
        if len(hits) < a.min_requests:
            problems.append(
                "%d POST %s reached the fake upstream, expected at least %d"
                % (len(hits), want, a.min_requests)
            )
        for e in hits:
            body = e.get("body") if isinstance(e.get("body"), dict) else {}
            headers = e.get("headers") or {}
            model = GEMINI.match(e["path"]).group(1) if a.kind == "gemini" else body.get("model")
            # No model of the agent tests allows a hosted tool: tollgate leaves every one out (Codex offers
            # web_search on every request), so none may reach the upstream.
            hosted = [
                t.get("type")
                for t in body.get("tools") or []
                if isinstance(t, dict) and str(t.get("type", "")).startswith(("web_search", "image_generation"))
            ]
            if a.kind != "direct" and hosted:
                problems.append("hosted tools the model does not allow reached the upstream: %s" % hosted)
            if a.upstream_model and model != a.upstream_model:
                problems.append("upstream was sent model %r, not %r" % (model, a.upstream_model))
            if a.kind == "gemini" and e.get("path", "").endswith(":streamGenerateContent") and "alt=sse" not in (
                e.get("query") or ""
            ):
                problems.append("a Gemini stream was asked for without alt=sse")
            if a.upstream_key:
                if a.kind == "messages":
                    got = headers.get("x-api-key") or headers.get("authorization")
                    ok = headers.get("x-api-key") == a.upstream_key
                elif a.kind == "gemini":
                    got = headers.get("x-goog-api-key") or headers.get("authorization")
                    ok = headers.get("x-goog-api-key") == a.upstream_key
                else:
                    got = headers.get("authorization")
                    ok = got == "Bearer " + a.upstream_key
                if not ok:
                    problems.append("upstream credential not sent as configured (got %r)" % (got,))
    if a.client_key and a.kind != "direct":
        for e in entries:
            for k, v in (e.get("headers") or {}).items():
                if a.client_key in v:
                    problems.append("the client's tollgate key was forwarded upstream in header %r" % k)
    unknown = [
        e
        for e in entries
        if e.get("path") not in PATHS.values()
        and not GEMINI.match(e.get("path", ""))
        and not e.get("path", "").endswith(("/models", "/count_tokens"))
    ]
    for e in unknown:
        print("upstream got an unknown path: %s %s" % (e.get("method"), e.get("path")))

    for pr in problems:
        print("PROBLEM: " + pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
