//! Hostile input, table-driven: malformed requests and malformed upstream replies. Each must get a clear
//! error in the client's protocol (or a normal answer where the input is odd but valid), a usage record
//! where an upstream was called, and never a panic: the server answers the next request as usual.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::VecDeque;
use std::io::BufReader;
use std::sync::{Arc, Mutex};

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

/// Sends raw body bytes to `path` with the key and the Messages version header.
fn raw(gw: &Gateway, path: &str, body: &[u8]) -> Response {
    let auth = format!("Bearer {}", gw.key);
    gw.request(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        body,
    )
}

/// The error message of an answer in `path`'s protocol shape (checking the shape on the way).
fn error_message(path: &str, r: &Response) -> String {
    let v = r.json();
    if path == "/v1/messages" {
        assert_eq!(v["type"], "error", "{}", r.text());
        v["error"]["message"].as_str().unwrap().to_string()
    } else {
        assert!(v["error"]["type"].is_string(), "{}", r.text());
        v["error"]["message"].as_str().unwrap().to_string()
    }
}

#[test]
fn malformed_requests_get_clear_errors_in_their_protocol() {
    let gw = Gateway::start_mock("");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_obj = format!(
        "{{\"model\":\"mock\",\"messages\":{}{}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    let nul_raw = b"{\"model\":\"mock\",\x00\"messages\":[]}".to_vec();
    let bad_utf8 =
        b"{\"model\":\"mock\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"
            .to_vec();
    // (body, expected status, a word the message must contain)
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("invalid JSON", b"{\"model\": \"mock\", ".to_vec(), 400, "JSON"),
        ("not an object", b"[1, 2, 3]".to_vec(), 400, "object"),
        ("a bare string", b"\"hello\"".to_vec(), 400, "object"),
        ("raw NUL byte", nul_raw, 400, "JSON"),
        ("invalid UTF-8", bad_utf8, 400, "JSON"),
        ("deeply nested array", deep.into_bytes(), 400, "JSON"),
        ("deeply nested field", deep_obj.into_bytes(), 400, ""),
        ("model is a number", br#"{"model": 42, "messages": [], "input": "x", "max_tokens": 5}"#.to_vec(), 400, "model"),
        ("model missing", br#"{"messages": [], "input": "x", "max_tokens": 5}"#.to_vec(), 400, "model"),
        ("stream is a string", br#"{"model": "mock", "stream": "yes", "messages": [], "input": "x", "max_tokens": 5}"#.to_vec(), 400, "stream"),
        ("huge max_tokens", br#"{"model": "mock", "max_tokens": 1e308, "max_output_tokens": 1e308, "max_completion_tokens": 1e308, "messages": [{"role": "user", "content": "x"}], "input": "x"}"#.to_vec(), 400, "max"),
        ("overflowing integer", br#"{"model": "mock", "max_tokens": 18446744073709551616, "max_output_tokens": 18446744073709551616, "max_completion_tokens": 18446744073709551616, "messages": [{"role": "user", "content": "x"}], "input": "x"}"#.to_vec(), 400, "max"),
        ("negative max_tokens", br#"{"model": "mock", "max_tokens": -1, "max_output_tokens": -1, "max_completion_tokens": -1, "messages": [{"role": "user", "content": "x"}], "input": "x"}"#.to_vec(), 400, "max"),
        ("messages is an object", br#"{"model": "mock", "max_tokens": 5, "messages": {"role": "user"}, "input": {"x": 1}}"#.to_vec(), 400, ""),
        ("a message without role", br#"{"model": "mock", "max_tokens": 5, "messages": [{"content": "x"}], "input": [{"content": "x"}]}"#.to_vec(), 400, "role"),
        ("content of the wrong type", br#"{"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": 7}], "input": [{"role": "user", "content": 7}]}"#.to_vec(), 400, "content"),
        ("unknown role", br#"{"model": "mock", "max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}], "input": [{"role": "wizard", "content": "x"}]}"#.to_vec(), 400, "role"),
        ("unknown content part", br#"{"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "hologram"}]}], "input": [{"role": "user", "content": [{"type": "hologram"}]}]}"#.to_vec(), 400, "hologram"),
    ];
    for path in ["/v1/chat/completions", "/v1/responses", "/v1/messages"] {
        for (name, body, status, word) in &cases {
            let r = raw(&gw, path, body);
            assert_eq!(r.status, *status, "{path} {name}: {}", r.text());
            let msg = error_message(path, &r);
            assert!(
                msg.to_lowercase().contains(&word.to_lowercase()),
                "{path} {name}: {msg}"
            );
            assert!(r.header("x-request-id").is_some());
        }
    }
    // Odd but valid: extra unknown fields, NUL characters inside strings, a megabyte of text.
    let big = "x".repeat(1 << 20);
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "mock", "messages": [{"role": "user", "content": "a\u{0}b"}], "extra": {"x": [1, 2]}}),
        ),
        (
            "/v1/responses",
            json!({"model": "mock", "input": big, "whatever": true}),
        ),
        (
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 20, "messages": [{"role": "user", "content": big}], "unknown_field": null}),
        ),
    ] {
        let r = gw.post(path, &body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    // Bogus headers.
    let auth = format!("Bearer {}", gw.key);
    let body = json!({"model": "mock", "messages": [{"role": "user", "content": "x"}]}).to_string();
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-client-request-id", &"z".repeat(5000)),
            ("content-type", "text/plain"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "odd but harmless headers are ignored");
    assert!(
        r.header("x-client-request-id").is_none(),
        "an oversized client id is not echoed"
    );
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-weird", "a\u{1}b")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 400, "control characters in a header value");
    assert!(error_message("/v1/chat/completions", &r).contains("header"));
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", "Bearer \u{7f}\u{1}")],
        body.as_bytes(),
    );
    assert_eq!(
        r.status, 400,
        "a key with control characters is not even a valid header"
    );

    assert!(!gw.all_logs().contains("panicked"), "{}", gw.all_logs());
    assert_eq!(
        gw.post(
            "/v1/chat/completions",
            &json!({"model": "mock", "messages": [{"role": "user", "content": "still ok"}]})
        )
        .status,
        200
    );
}

/// What a broken upstream can send, for each upstream kind, passthrough and translated.
#[test]
fn malformed_upstream_replies_get_clear_errors_and_records() {
    let queue: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
    let q = queue.clone();
    let fake = FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
    let dir = TempDir::new("hostile-up");
    // Breakers off for this test: every broken reply must reach the gateway.
    let config = standard_config(
        dir.path(),
        Some(fake.addr),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    )
    .replace(
        "api_key_env = \"TG_TEST_UPSTREAM_KEY\"",
        "api_key_env = \"TG_TEST_UPSTREAM_KEY\"\nbreaker_failures = 1000",
    );
    let gw = Gateway::start_with(dir, &config);
    // The fake upstream closes the connection after a raw reply, so the head says so: otherwise a complete
    // raw answer leaves the connection in tollgate's pool, and the next case could go out on it just as the
    // fake closes it (a race no server that announces its close can cause).
    let sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        .to_vec();
    let chunk = |data: &str| -> Vec<u8> {
        let mut v = format!("{:x}\r\n", data.len()).into_bytes();
        v.extend_from_slice(data.as_bytes());
        v.extend_from_slice(b"\r\n");
        v
    };
    type MakeReply = Box<dyn Fn() -> Reply>;
    let replies: Vec<(&str, bool, MakeReply)> = vec![
        (
            "truncated JSON",
            false,
            Box::new(|| Reply::Json {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: b"{\"id\": \"x\", \"choi".to_vec(),
            }),
        ),
        (
            "200 with an HTML body",
            false,
            Box::new(|| Reply::Json {
                status: 200,
                headers: vec![("content-type".into(), "text/html".into())],
                body: b"<html><body>Gateway</body></html>".to_vec(),
            }),
        ),
        (
            "HTML error page",
            false,
            Box::new(|| Reply::Json {
                status: 502,
                headers: vec![("content-type".into(), "text/html".into())],
                body: b"<html>502 Bad Gateway</html>".to_vec(),
            }),
        ),
        (
            "connection closed before any answer",
            false,
            Box::new(|| Reply::Close),
        ),
        (
            "garbage instead of HTTP",
            false,
            Box::new(|| Reply::Raw(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec())),
        ),
        ("SSE without an end marker", true, {
            let (h, c) = (
                sse_head.clone(),
                chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"),
            );
            Box::new(move || {
                let mut b = h.clone();
                b.extend_from_slice(&c);
                b.extend_from_slice(b"0\r\n\r\n");
                Reply::Raw(b)
            })
        }),
        ("garbage lines and an event with invalid JSON", true, {
            let (h, c1, c2) = (
                sse_head.clone(),
                chunk("this is not sse\n\n"),
                chunk("data: {not json\n\n"),
            );
            Box::new(move || {
                let mut b = h.clone();
                b.extend_from_slice(&c1);
                b.extend_from_slice(&c2);
                b.extend_from_slice(b"0\r\n\r\n");
                Reply::Raw(b)
            })
        }),
        ("connection reset mid-stream", true, {
            let (h, c) = (
                sse_head.clone(),
                chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n"),
            );
            Box::new(move || {
                let mut b = h.clone();
                b.extend_from_slice(&c);
                b.extend_from_slice(b"5\r\nbro");
                Reply::Raw(b)
            })
        }),
        (
            "a JSON body for a stream request",
            true,
            Box::new(|| Reply::Json {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: b"{\"unexpected\": true}".to_vec(),
            }),
        ),
    ];
    let mut requests = 0;
    for (client, path) in [
        ("chat", "/v1/chat/completions"),
        ("responses", "/v1/responses"),
        ("messages", "/v1/messages"),
    ] {
        for model in ["m-chat", "m-responses", "m-messages"] {
            for (name, stream, make) in &replies {
                let before = fake.received().len();
                queue.lock().unwrap().push_back(make());
                let body = match client {
                    "chat" => {
                        json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
                    }
                    "responses" => json!({"model": model, "stream": stream, "input": "hi"}),
                    _ => {
                        json!({"model": model, "stream": stream, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]})
                    }
                };
                let ctx = format!("{client} -> {model}: {name}");
                let mut s = gw.connect();
                let auth = format!("Bearer {}", gw.key);
                send_request(
                    &mut s,
                    "POST",
                    path,
                    &[
                        ("authorization", &auth),
                        ("anthropic-version", "2023-06-01"),
                        ("x-client-request-id", &format!("hostile-{requests}")),
                    ],
                    body.to_string().as_bytes(),
                    true,
                );
                let r = read_response(&mut BufReader::new(s));
                requests += 1;
                // A connection closed before any byte of the answer is indistinguishable from a pooled
                // connection the upstream closed while idle: when it was a reused one, the gateway sends the
                // request once more, on a new connection (which then fails the same way here).
                let sent = fake.received().len() - before;
                let expected = if *name == "connection closed before any answer" {
                    1..=2
                } else {
                    1..=1
                };
                assert!(
                    expected.contains(&sent),
                    "{ctx}: the upstream got this request {sent} times: {}",
                    r.text()
                );
                if r.status == 200 {
                    assert!(
                        *stream,
                        "{ctx}: a broken non-streaming answer must not be 200: {}",
                        r.text()
                    );
                    // The stream ends with the client protocol's error event.
                    let events = r.events();
                    let (event, data) = events
                        .last()
                        .unwrap_or_else(|| panic!("{ctx}: empty stream"));
                    let v: Value = serde_json::from_str(data)
                        .unwrap_or_else(|_| panic!("{ctx}: last event {data}"));
                    let is_error = match client {
                        "chat" => v.get("error").is_some(),
                        "responses" => {
                            event.as_deref() == Some("response.failed")
                                || event.as_deref() == Some("error")
                        }
                        _ => event.as_deref() == Some("error"),
                    };
                    assert!(
                        is_error,
                        "{ctx}: the stream must end in an error event: {}",
                        r.text()
                    );
                } else {
                    assert!(r.status >= 500, "{ctx}: {} {}", r.status, r.text());
                    let msg = error_message(path, &r);
                    assert!(msg.contains("upstream"), "{ctx}: {msg}");
                }
            }
        }
    }
    // One record per request that reached the upstream, none lost.
    let records = gw.admin("/admin/usage?limit=1000").json()["data"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        records, requests,
        "every request that reached the upstream left a record"
    );
    assert!(!gw.all_logs().contains("panicked"), "{}", gw.all_logs());
    assert_eq!(
        gw.post(
            "/v1/chat/completions",
            &json!({"model": "mock", "messages": [{"role": "user", "content": "alive"}]})
        )
        .status,
        200
    );
}
