//! Same-protocol passthrough, pinned by the fixtures in `fixtures/`: each case is replayed through a fake
//! upstream and what the client sees, what the upstream receives and what usage is recorded are checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::VecDeque;
use std::io::BufReader;
use std::sync::{Arc, Mutex};

use common::upstream::{FakeUpstream, Fixture, Reply};
use common::*;
use serde_json::{json, Value};

struct Bench {
    gw: Gateway,
    fake: FakeUpstream,
    queue: Arc<Mutex<VecDeque<Reply>>>,
}

fn bench() -> Bench {
    let queue: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
    let q = queue.clone();
    let fake = FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
    let gw = Gateway::start_with_fake(fake.addr, "");
    Bench { gw, fake, queue }
}

/// The text a client reads from a response of `protocol` (streamed or not).
fn client_text(protocol: &str, resp: &Response, stream: bool) -> String {
    if !stream {
        let v = resp.json();
        return match protocol {
            "chat" => v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            "responses" => v["output"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|o| o["content"].as_array().cloned().unwrap_or_default())
                .filter_map(|c| c["text"].as_str().map(str::to_string))
                .collect(),
            _ => v["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["text"].as_str().map(str::to_string))
                .collect(),
        };
    }
    let mut text = String::new();
    for (event, data) in resp.events() {
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        match protocol {
            "chat" => {
                if let Some(t) = v
                    .pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
                {
                    text.push_str(t)
                }
            }
            "responses" if event.as_deref() == Some("response.output_text.delta") => {
                text.push_str(v["delta"].as_str().unwrap_or(""))
            }
            "messages"
                if v.pointer("/delta/type").and_then(Value::as_str) == Some("text_delta") =>
            {
                text.push_str(v["delta"]["text"].as_str().unwrap_or(""))
            }
            _ => {}
        }
    }
    text
}

/// A name for the last event of a stream: `[DONE]`, `error`, or the SSE event name.
fn last_event(protocol: &str, resp: &Response) -> String {
    let events = resp.events();
    let (event, data) = events.last().expect("the stream has events");
    if protocol == "chat" {
        if data == "[DONE]" {
            return "[DONE]".into();
        }
        let v: Value = serde_json::from_str(data).unwrap();
        return if v.get("error").is_some() {
            "error".into()
        } else {
            "chunk".into()
        };
    }
    event.clone().unwrap_or_default()
}

fn replay(
    b: &Bench,
    protocol: &str,
    endpoint: &str,
    upstream_path: &str,
    real_model: &str,
    case: &str,
) {
    let dir = fixtures().join(protocol);
    let fx = Fixture::load(&dir, case);
    let stream = fx.request["stream"].as_bool().unwrap_or(false);
    b.queue.lock().unwrap().push_back(fx.reply());
    let before = b.fake.received().len();
    let resp = b.gw.post(endpoint, &fx.request);
    let ctx = format!("{protocol}/{case}: {}", resp.text());
    let exp = &fx.expect;

    // What the client sees.
    assert_eq!(resp.status as u64, exp["status"].as_u64().unwrap(), "{ctx}");
    let rid = resp
        .header("x-request-id")
        .expect("x-request-id")
        .to_string();
    assert!(rid.starts_with("req_"), "{ctx}");
    if protocol == "messages" {
        assert_eq!(resp.header("request-id"), Some(rid.as_str()), "{ctx}");
    }

    // What the upstream received: the model renamed, everything else as sent, the upstream's key and not
    // the client's.
    let got = b.fake.received();
    assert_eq!(got.len(), before + 1, "{ctx}");
    let up = got.last().unwrap();
    assert_eq!(up.path, upstream_path, "{ctx}");
    let mut sent = up.json();
    assert_eq!(sent["model"], real_model, "{ctx}");
    let mut expected_body = fx.request.clone();
    expected_body["model"] = json!(real_model);
    if protocol == "responses" {
        // Nothing is stored in the operator's upstream account (no one could read it back).
        assert_eq!(sent["store"], false, "{ctx}");
        expected_body["store"] = json!(false);
    }
    if protocol == "chat" && stream {
        assert_eq!(sent["stream_options"]["include_usage"], true, "{ctx}");
        sent.as_object_mut().unwrap().remove("stream_options");
        expected_body
            .as_object_mut()
            .unwrap()
            .remove("stream_options");
    }
    assert_eq!(sent, expected_body, "{ctx}: body not forwarded as sent");
    let all_headers = format!("{:?}", up.headers);
    assert!(
        !all_headers.contains(&b.gw.key),
        "{ctx}: the client's key reached the upstream"
    );
    if protocol == "messages" {
        assert_eq!(up.header("x-api-key"), Some(UPSTREAM_KEY), "{ctx}");
        assert_eq!(up.header("anthropic-version"), Some("2023-06-01"), "{ctx}");
    } else {
        assert_eq!(
            up.header("authorization"),
            Some(format!("Bearer {UPSTREAM_KEY}").as_str()),
            "{ctx}"
        );
    }
    assert!(
        !resp.text().contains(UPSTREAM_KEY),
        "{ctx}: the upstream key reached the client"
    );

    if resp.status == 200 {
        if stream {
            assert!(
                resp.header("content-type")
                    .unwrap()
                    .starts_with("text/event-stream"),
                "{ctx}"
            );
            assert_eq!(resp.header("cache-control"), Some("no-cache"), "{ctx}");
            // Events relayed as the upstream sent them, minus hidden ones, plus an error tollgate appends.
            let upstream_events: Vec<_> = fx
                .upstream_events
                .iter()
                .flat_map(|e| parse_sse(&String::from_utf8_lossy(e)))
                .collect();
            let client_events = resp.events();
            let hidden = exp["hidden"].as_u64().unwrap_or(0) as usize;
            let relayed: Vec<_> = upstream_events
                .iter()
                .filter(|(_, d)| !(hidden > 0 && d.contains("\"choices\":[]")))
                .cloned()
                .collect();
            assert_eq!(&client_events[..relayed.len()], &relayed[..], "{ctx}");
            assert!(client_events.len() - relayed.len() <= 2, "{ctx}");
            assert_eq!(
                last_event(protocol, &resp),
                exp["last_event"].as_str().unwrap(),
                "{ctx}"
            );
            if let Some(m) = exp["message"].as_str() {
                assert!(client_events.last().unwrap().1.contains(m), "{ctx}");
            }
        } else if let Some(raw) = &fx.upstream_raw {
            assert_eq!(&resp.text(), raw, "{ctx}: body not relayed byte for byte");
        } else {
            assert_eq!(
                resp.json(),
                fx.upstream_body.clone().unwrap(),
                "{ctx}: body not relayed as sent"
            );
        }
        assert_eq!(
            client_text(protocol, &resp, stream),
            exp["text"].as_str().unwrap(),
            "{ctx}"
        );
    } else {
        let v = resp.json();
        let err = if protocol == "messages" {
            assert_eq!(v["type"], "error", "{ctx}");
            assert_eq!(v["request_id"], rid.as_str(), "{ctx}");
            &v["error"]
        } else {
            &v["error"]
        };
        assert_eq!(err["type"], exp["type"], "{ctx}");
        if let Some(code) = exp.get("code") {
            assert_eq!(&err["code"], code, "{ctx}");
        }
        let msg = err["message"].as_str().unwrap();
        assert!(msg.contains(exp["message"].as_str().unwrap()), "{ctx}");
        assert!(
            msg.contains(&rid),
            "{ctx}: the request id belongs in the message"
        );
        assert_eq!(
            resp.header("retry-after"),
            exp["retry_after"].as_str(),
            "{ctx}"
        );
    }

    // A stream that failed is logged as failed.
    if matches!(
        exp["last_event"].as_str(),
        Some("error" | "response.failed")
    ) {
        let line = b.gw.log_line(&rid);
        assert!(line.contains("error="), "{ctx}: {line}");
    }

    // Usage as recorded (the request's log line).
    if let Some(u) = exp.get("usage") {
        let line = b.gw.log_line(&rid);
        assert!(line.contains(&format!(" in={} ", u["in"])), "{ctx}: {line}");
        assert!(
            line.contains(&format!(" out={} ", u["out"])),
            "{ctx}: {line}"
        );
    }
}

#[test]
fn chat_fixtures_replay() {
    let b = bench();
    for case in [
        "text",
        "stream_text",
        "stream_usage",
        "upstream_error",
        "stream_error",
        "stream_truncated",
        "error_in_200",
        "duplicate_usage",
    ] {
        replay(
            &b,
            "chat",
            "/v1/chat/completions",
            "/v1/chat/completions",
            "real-chat-model",
            case,
        );
    }
}

#[test]
fn responses_fixtures_replay() {
    let b = bench();
    for case in [
        "text",
        "stream_text",
        "upstream_error",
        "stream_error",
        "stream_truncated",
    ] {
        replay(
            &b,
            "responses",
            "/v1/responses",
            "/v1/responses",
            "real-responses-model",
            case,
        );
    }
}

#[test]
fn messages_fixtures_replay() {
    let b = bench();
    for case in [
        "text",
        "stream_text",
        "upstream_error",
        "stream_error",
        "stream_truncated",
        "error_in_200",
    ] {
        replay(
            &b,
            "messages",
            "/v1/messages",
            "/v1/messages",
            "real-messages-model",
            case,
        );
    }
}

/// Each event is flushed the moment it is ready: the fake upstream sends its first event and then waits
/// until the test has received that event through the gateway before sending the rest. A gateway that
/// buffered would never deliver the first event, and the test would fail on its read timeout.
#[test]
fn stream_events_are_flushed_one_by_one() {
    for (protocol, endpoint, model) in [
        ("chat", "/v1/chat/completions", "m-chat"),
        ("messages", "/v1/messages", "m-messages"),
    ] {
        let fx = Fixture::load(&fixtures().join(protocol), "stream_text");
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let gate = Mutex::new(Some(gate_rx));
        let events = fx.upstream_events.clone();
        let fake = FakeUpstream::start(move |_| Reply::Sse {
            events: events.clone(),
            gate: gate.lock().unwrap().take().map(|rx| (1, rx)),
            abort: false,
        });
        let gw = Gateway::start_with_fake(fake.addr, "");
        let mut body = fx.request.clone();
        body["model"] = json!(model);
        let mut s = gw.connect();
        let auth = format!("Bearer {}", gw.key);
        send_request(
            &mut s,
            "POST",
            endpoint,
            &[
                ("authorization", &auth),
                ("anthropic-version", "2023-06-01"),
            ],
            body.to_string().as_bytes(),
            true,
        );
        let mut r = BufReader::new(s);
        let (status, _) = read_head(&mut r);
        assert_eq!(status, 200);
        let first = read_chunk(&mut r).expect("the first event arrives while the upstream waits");
        assert_eq!(
            first, fx.upstream_events[0],
            "{protocol}: first event relayed unchanged"
        );
        gate_tx.send(()).unwrap();
        let mut rest = Vec::new();
        while let Some(c) = read_chunk(&mut r) {
            rest.push(c);
        }
        assert!(
            rest.len() >= fx.upstream_events.len() - 2,
            "{protocol}: the rest follows"
        );
    }
}

#[test]
fn upstream_unreachable_is_502_and_timeout_is_504() {
    // Unreachable: a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gw = Gateway::start_with_fake(closed, "");
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = gw.post("/v1/messages", &json!({"model": "m-messages", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["error"]["type"], "api_error");

    // Timeout: an upstream that never answers, with a 1 s first-byte timeout.
    let fake = FakeUpstream::start(|_| Reply::Hang);
    let dir = TempDir::new("timeout");
    let config = standard_config(dir.path(), Some(fake.addr), "").replace(
        "api_key_env = \"TG_TEST_UPSTREAM_KEY\"",
        "api_key_env = \"TG_TEST_UPSTREAM_KEY\"\nfirst_byte_timeout_secs = 1",
    );
    let gw = Gateway::start_with(dir, &config);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 504, "{}", r.text());
    let r = gw.post("/v1/messages", &json!({"model": "m-messages", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["type"], "timeout_error");
}

#[test]
fn malformed_upstream_bodies_are_502_in_the_clients_shape() {
    let fake = FakeUpstream::start(|rec| {
        if rec.path.ends_with("/messages") {
            Reply::Json {
                status: 200,
                headers: vec![("content-type".into(), "text/html".into())],
                body: b"<html>oops</html>".to_vec(),
            }
        } else {
            Reply::Json {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: b"{\"id\": \"trunc".to_vec(),
            }
        }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 502);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not a JSON object"));
    let r = gw.post("/v1/messages", &json!({"model": "m-messages", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["type"], "error");
}

#[test]
fn failover_tries_the_next_upstream_before_the_first_byte() {
    let good = FakeUpstream::start(|_| {
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "from backup"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
        )
    });
    let bad = FakeUpstream::start(|_| {
        Reply::json(
            503,
            &json!({"error": {"message": "down", "type": "server_error"}}),
        )
    });
    let dir = TempDir::new("failover");
    let config = format!(
        "{}[[upstreams]]\nname = \"bad\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\n[[upstreams]]\nname = \"good\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\n[[models]]\nname = \"m\"\nupstream = [\"bad\", \"good\"]\n",
        base_config(dir.path(), ""),
        bad.addr,
        good.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from backup");
    assert_eq!(bad.received().len(), 1);
    assert_eq!(good.received().len(), 1);
}

#[test]
fn anthropic_beta_header_is_forwarded_to_anthropic_upstreams_only() {
    let fake = FakeUpstream::start(|rec| {
        if rec.path.ends_with("/messages") {
            Reply::json(
                200,
                &json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 1, "output_tokens": 1}}),
            )
        } else {
            Reply::Close
        }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let auth = format!("Bearer {}", gw.key);
    let body = json!({"model": "m-messages", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.request(
        "POST",
        "/v1/messages?beta=true",
        &[
            ("x-api-key", &gw.key),
            ("authorization", &auth),
            ("anthropic-version", "2025-09-01"),
            ("anthropic-beta", "interleaved-thinking-2025-05-14"),
            ("anthropic-beta", "context-management-2025-06-27"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let up = fake.last();
    assert_eq!(
        up.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14,context-management-2025-06-27")
    );
    assert_eq!(up.header("anthropic-version"), Some("2023-06-01"));
    assert!(
        up.header("authorization").is_none(),
        "the client's Authorization header must not be forwarded"
    );
}

#[test]
fn upstream_connections_are_reused() {
    let fake = FakeUpstream::start(|_| {
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
        )
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    for _ in 0..5 {
        let r = gw.post(
            "/v1/chat/completions",
            &json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(fake.received().len(), 5);
    assert_eq!(
        fake.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "keep-alive reuse"
    );
}

/// A fake upstream that streams the `stream_text` fixture of `upstream`'s protocol, silent after its first
/// event until the test sends on the returned gate; and a gateway on it that sends keepalives after 1 s.
fn silent_upstream(upstream: &str) -> (FakeUpstream, std::sync::mpsc::Sender<()>, Gateway) {
    let dir = fixtures().join("translate/stream_text");
    let events = common::upstream::split_sse_blocks(
        &std::fs::read_to_string(dir.join(format!("{upstream}.upstream.sse"))).unwrap(),
    );
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(Some(gate_rx));
    let fake = FakeUpstream::start(move |_| Reply::Sse {
        events: events.clone(),
        gate: gate.lock().unwrap().take().map(|rx| (1, rx)),
        abort: false,
    });
    let gw = Gateway::start_with_fake(fake.addr, "keepalive_secs = 1");
    (fake, gate_tx, gw)
}

/// An HTTP/1.0 client's stream has no chunked framing, its keepalives included: the body is the events
/// and the keepalive comments as they are, until the connection closes.
#[test]
fn an_http_1_0_streams_keepalives_carry_no_chunk_framing() {
    use std::io::Read;
    let (_fake, gate_tx, gw) = silent_upstream("chat");
    let mut s = gw.post_http10_stream("m-chat");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&raw).contains(": keepalive") {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "closed before a keepalive: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
    }
    gate_tx.send(()).unwrap();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "{head}"
    );
    assert!(rest.starts_with("data: "), "{rest:?}");
    assert!(rest.contains("\n\n: keepalive\n\n"), "{rest:?}");
    assert!(!rest.contains('\r'), "no chunk framing anywhere: {rest:?}");
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest:?}");
}

/// While the upstream is silent, the client gets keepalives (an SSE comment, or `ping` for Messages
/// clients), and the stream then completes normally. The fake upstream stays silent until the test has
/// seen a keepalive through the gateway.
#[test]
fn keepalives_flow_while_the_upstream_is_silent() {
    let cases = [
        ("messages", "chat", "event: ping"),
        ("chat", "chat", ": keepalive"),
        ("responses", "messages", ": keepalive"),
    ];
    for (client, upstream, marker) in cases {
        let dir = fixtures().join("translate/stream_text");
        let (_fake, gate_tx, gw) = silent_upstream(upstream);
        let mut body: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{client}.request.json"))).unwrap(),
        )
        .unwrap();
        body["model"] = json!(format!("m-{upstream}"));
        let path = match client {
            "chat" => "/v1/chat/completions",
            "responses" => "/v1/responses",
            _ => "/v1/messages",
        };
        let mut s = gw.connect();
        let auth = format!("Bearer {}", gw.key);
        send_request(
            &mut s,
            "POST",
            path,
            &[
                ("authorization", &auth),
                ("anthropic-version", "2023-06-01"),
            ],
            body.to_string().as_bytes(),
            true,
        );
        let mut r = BufReader::new(s);
        let (status, _) = read_head(&mut r);
        assert_eq!(status, 200);
        let mut seen = String::new();
        while !seen.contains(marker) {
            let chunk =
                read_chunk(&mut r).expect("the stream stays open while the upstream is silent");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        gate_tx.send(()).unwrap();
        while let Some(c) = read_chunk(&mut r) {
            seen.push_str(&String::from_utf8_lossy(&c));
        }
        let text: String = parse_sse(&seen)
            .iter()
            .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| {
                v.pointer("/choices/0/delta/content")
                    .or_else(|| v.pointer("/delta/text"))
                    .or_else(|| {
                        if v["type"] == "response.output_text.delta" {
                            v.get("delta")
                        } else {
                            None
                        }
                    })
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .collect();
        assert_eq!(text, "Paris.", "{client} <- {upstream}: {seen}");
    }
}

/// A client that goes away mid-stream, or while a non-streaming answer is still being generated: the
/// upstream connection is cut (long before the upstream would have finished), the worker is free for the
/// next request, and the usage record says `client_closed`.
#[test]
fn a_vanished_client_cuts_the_upstream_and_frees_the_worker() {
    let (closed_tx, closed_rx) = std::sync::mpsc::channel::<()>();
    let closed_tx = Mutex::new(closed_tx);
    let fake = FakeUpstream::start(move |rec| {
        let body: Value = serde_json::from_slice(&rec.body).unwrap();
        let tx = closed_tx.lock().unwrap().clone();
        if body["stream"] == true {
            let event = b"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first words\"}}]}\n\n";
            let mut prelude = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            prelude.extend_from_slice(format!("{:x}\r\n", event.len()).as_bytes());
            prelude.extend_from_slice(event);
            prelude.extend_from_slice(b"\r\n");
            Reply::HoldUntilClosed {
                prelude,
                closed: tx,
            }
        } else if body["messages"][0]["content"] == "quick" {
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
            )
        } else {
            Reply::HoldUntilClosed {
                prelude: Vec::new(),
                closed: tx,
            }
        }
    });
    let dir = TempDir::new("vanish");
    let config = standard_config(
        dir.path(),
        Some(fake.addr),
        // A stream is read on for a second after its client left (for its usage), then cut.
        &format!(
            "workers = 1\nclient_left_grace_secs = 1\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\""
        ),
    );
    let gw = Gateway::start_with(dir, &config);
    let auth = format!("Bearer {}", gw.key);

    // Mid-stream.
    let mut s = gw.connect();
    let body = json!({"model": "m-chat", "stream": true, "messages": [{"role": "user", "content": "long"}]});
    send_request(
        &mut s,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", "gone-1")],
        body.to_string().as_bytes(),
        true,
    );
    let mut r = BufReader::new(s);
    assert_eq!(read_head(&mut r).0, 200);
    let first = read_chunk(&mut r).unwrap();
    assert!(String::from_utf8_lossy(&first).contains("first words"));
    drop(r);
    closed_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the upstream connection is cut");

    // While a non-streaming answer is pending.
    let mut s = gw.connect();
    let body = json!({"model": "m-chat", "messages": [{"role": "user", "content": "slow"}]});
    send_request(
        &mut s,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", "gone-2")],
        body.to_string().as_bytes(),
        true,
    );
    wait_for(
        || fake.received().len() == 2,
        "the request to reach the upstream",
    );
    drop(s);
    closed_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the upstream connection is cut");

    // The only worker is free again.
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": "quick"}]}),
    );
    assert_eq!(r.status, 200);
    for id in ["gone-1", "gone-2"] {
        let mut recs = Vec::new();
        wait_for(
            || {
                recs = gw
                    .admin(&format!("/admin/usage?client_request_id={id}"))
                    .json()["data"]
                    .as_array()
                    .unwrap()
                    .clone();
                !recs.is_empty()
            },
            "the record",
        );
        assert_eq!(recs[0]["status"], "client_closed", "{id}: {}", recs[0]);
    }
}

/// An upstream that keeps answering with errors is passed over (ejected) while its model's other upstream
/// serves; a model whose only upstream it is keeps being served by it (the upstream's own error, never a 503
/// the gateway made up).
#[test]
fn a_failing_upstream_is_skipped_by_its_breaker() {
    let ok = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let good = FakeUpstream::start(move |_| Reply::json(200, &ok));
    let bad = FakeUpstream::start(|_| {
        Reply::json(
            500,
            &json!({"error": {"message": "broken", "type": "server_error"}}),
        )
    });
    let dir = TempDir::new("breaker");
    let config = format!(
        "{}[[upstreams]]\nname = \"bad\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\nbreaker_failures = 2\nbreaker_cooldown_secs = 600\n\n\
         [[upstreams]]\nname = \"good\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\n\
         [[models]]\nname = \"m\"\nupstream = [\"bad\", \"good\"]\n\n[[models]]\nname = \"only-bad\"\nupstream = \"bad\"\n",
        base_config(dir.path(), ""),
        bad.addr,
        good.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..5 {
        assert_eq!(gw.post("/v1/chat/completions", &body).status, 200);
    }
    assert_eq!(
        bad.received().len(),
        2,
        "after two failures in a row the bad upstream is skipped"
    );
    assert_eq!(good.received().len(), 5);
    wait_for(
        || {
            gw.all_logs()
                .contains("answered with errors 2 times in a row")
        },
        "the breaker's log line",
    );
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "only-bad", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("broken"));
    assert_eq!(bad.received().len(), 3, "the last upstream is still tried");
}

/// Large answers pass intact: a 2 MB JSON body and a stream with a 300 KB event, through the small
/// per-connection buffers tollgate gives its upstream connections.
#[test]
fn large_upstream_answers_pass_intact() {
    let big = "word ".repeat(400_000);
    let text = big.clone();
    let fake = FakeUpstream::start(move |rec| {
        let body: Value = serde_json::from_slice(&rec.body).unwrap();
        if body["stream"] == true {
            let chunk = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": &text[..300_000]}, "finish_reason": null}]});
            let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
            Reply::sse(vec![
                format!("data: {chunk}\n\n").into_bytes(),
                format!("data: {usage}\n\n").into_bytes(),
                b"data: [DONE]\n\n".to_vec(),
            ])
        } else {
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": &text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
            )
        }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": "long"}]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .len(),
        big.len()
    );
    // Translated too, streamed to a Messages client.
    let r = gw.post("/v1/messages", &json!({"model": "m-chat", "max_tokens": 10, "stream": true, "messages": [{"role": "user", "content": "long"}]}));
    let text: String = r
        .events()
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text.len(), 300_000);
}

/// Keepalives for every stream come from one watchdog thread, so a client that stops reading must not hold
/// them up for the others: while a flood fills a non-reading client's socket (its worker blocked in a write),
/// a silent stream keeps getting its keepalive every second.
#[test]
fn a_client_that_stops_reading_does_not_hold_up_other_streams_keepalives() {
    let chunk = |text: &str| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
        )
        .into_bytes()
    };
    let flood = chunk(&"x".repeat(16_000));
    let first = chunk("hello");
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(Some(gate_rx));
    let fake = FakeUpstream::start(move |rec| {
        if rec.json()["messages"][0]["content"] == "flood" {
            // 32 MB: far more than the socket buffers between tollgate and a client that reads nothing.
            Reply::Sse {
                events: vec![flood.clone(); 2000],
                gate: None,
                abort: false,
            }
        } else {
            Reply::Sse {
                // The first event, then silence until the test opens the gate.
                events: vec![first.clone(), b"data: [DONE]\n\n".to_vec()],
                gate: gate.lock().unwrap().take().map(|rx| (1, rx)),
                abort: false,
            }
        }
    });
    // A write to the stuck client would wait this long: longer than the test's read timeout.
    let gw = Gateway::start_with_fake(fake.addr, "keepalive_secs = 1\nwrite_timeout_secs = 600");
    let auth = format!("Bearer {}", gw.key);
    let open = |content: &str| {
        let mut s = gw.connect();
        let body = json!({"model": "m-chat", "stream": true,
            "messages": [{"role": "user", "content": content}]});
        send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            body.to_string().as_bytes(),
            true,
        );
        s
    };
    let stuck = open("flood");
    let mut quiet = BufReader::new(open("quiet"));
    assert_eq!(read_head(&mut quiet).0, 200);
    let mut keepalives = 0;
    while keepalives < 5 {
        let c = read_chunk(&mut quiet).expect("keepalives keep coming on the quiet stream");
        keepalives += String::from_utf8_lossy(&c).matches(": keepalive").count();
    }
    gate_tx.send(()).unwrap();
    drop(stuck);
}
