//! One rule on every path: the built-in model, same-protocol passthrough and translation share the request
//! pipeline, so a stream that breaks ends the same way (an in-stream error carrying the request id) and is
//! billed by the same rule; failover starts every attempt clean; `count_tokens` goes through the same model,
//! breaker and failover steps as generation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::BufReader;
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn delta(text: &str) -> Vec<u8> {
    let d = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    format!("data: {d}\n\n").into_bytes()
}

fn record(gw: &Gateway, request_id: &str) -> Value {
    let r = gw.admin("/admin/usage?limit=100");
    let data = r.json()["data"].clone();
    assert!(data.is_array(), "{} {}", r.status, r.text());
    data.as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == request_id)
        .cloned()
        .unwrap_or_else(|| panic!("no usage record for {request_id}: {data}"))
}

/// The last event of a stream, which must be the protocol's error event.
fn last_error(r: &Response) -> String {
    let events = r.events();
    let (name, data) = events.last().cloned().unwrap();
    let v: Value = serde_json::from_str(&data).unwrap_or_else(|_| panic!("{events:?}"));
    assert!(
        v.get("error").is_some() || v["type"] == "error" || name.as_deref() == Some("error"),
        "the stream does not end with an error event: {events:?}"
    );
    data
}

/// A stream the upstream breaks midway (passthrough and translation), and a stream of the built-in model cut
/// by the shutdown deadline: each ends with the client protocol's error event carrying the request id, and
/// each is billed by the one rule for broken streams (what was produced, estimated).
#[test]
fn a_broken_stream_ends_and_is_billed_the_same_way_on_every_path() {
    let fake = FakeUpstream::start(|_| Reply::Sse {
        events: vec![delta("several partial words before "), delta("the break")],
        gate: None,
        abort: true,
    });
    let gw = Gateway::start_with_fake(
        fake.addr,
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    );
    let mut outputs = Vec::new();
    // Passthrough: a Chat client, a Chat upstream.
    let body = json!({"model": "m-chat", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.header("x-request-id").unwrap().to_string();
    assert!(last_error(&r).contains(&id), "passthrough: {}", r.text());
    outputs.push(record(&gw, &id));
    // Translation: a Messages client, a Chat upstream.
    let body = json!({"model": "m-chat", "max_tokens": 50, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.post("/v1/messages", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.header("x-request-id").unwrap().to_string();
    assert!(last_error(&r).contains(&id), "translation: {}", r.text());
    outputs.push(record(&gw, &id));
    for rec in &outputs {
        assert_eq!(rec["status"], 200, "{rec}");
        assert_eq!(rec["estimated"], true, "{rec}");
        assert!(rec["error"].as_str().is_some(), "{rec}");
    }
    assert_eq!(
        outputs[0]["output_tokens"], outputs[1]["output_tokens"],
        "the same text produced is billed the same on both paths"
    );
    assert!(outputs[0]["output_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn the_built_in_model_cut_at_shutdown_ends_with_the_request_id() {
    let dir = TempDir::new("pipeline-mock-cut");
    let config = format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\nmock_delay_ms = 400\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), "shutdown_grace_secs = 1\nledger_sync_ms = 50")
    );
    let mut gw = Gateway::spawn_with(dir, &config);
    let ledger = gw.dir.path().join("data").join("usage.jsonl");
    let mut stream = gw.connect();
    let auth = format!("Bearer {}", gw.key);
    let body = json!({"model": "mock", "stream": true, "messages": [{"role": "user",
        "content": "tell me a long story with many many words in it, please, and take your time"}]});
    send_request(
        &mut stream,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        body.to_string().as_bytes(),
        true,
    );
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    assert_eq!(status, 200);
    let id = headers
        .iter()
        .find(|(k, _)| k == "x-request-id")
        .map(|(_, v)| v.clone())
        .unwrap();
    read_chunk(&mut reader).unwrap();
    signal(gw.pid(), "TERM");
    let mut rest = Vec::new();
    while let Some(chunk) = read_chunk(&mut reader) {
        rest.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&rest).into_owned();
    let events = parse_sse(&text);
    let (_, last) = events.last().cloned().unwrap();
    assert!(last.contains("shutting_down"), "{text}");
    assert!(
        last.contains(&id),
        "the error event names the request: {last}"
    );
    assert_eq!(wait_exit(gw.child(), Duration::from_secs(30)), Some(0));
    let rec: Value = std::fs::read_to_string(&ledger)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["request_id"] == id.as_str())
        .expect("a usage record for the cut stream");
    assert_eq!(rec["status"], "shutdown", "{rec}");
    assert_eq!(rec["estimated"], true, "{rec}");
}

/// The first upstream fails, the second answers: the answer, the record and the second upstream's breaker
/// know only the second attempt (nothing of the first is blamed on it).
#[test]
fn failover_starts_each_attempt_clean() {
    let bad = FakeUpstream::start(|_| {
        Reply::json(
            500,
            &json!({"error": {"message": "engine crashed", "type": "server_error"}}),
        )
    });
    let good = FakeUpstream::start(|_| {
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
        )
    });
    let dir = TempDir::new("pipeline-failover");
    let config = format!(
        "{}[[upstreams]]\nname = \"bad\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\n\
         [[upstreams]]\nname = \"good\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\n\
         [[models]]\nname = \"m\"\nupstream = [\"bad\", \"good\"]\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        bad.addr,
        good.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = record(&gw, r.header("x-request-id").unwrap());
    assert_eq!(rec["upstream"], "good", "{rec}");
    assert!(rec["error"].is_null(), "{rec}");
    assert_eq!(rec["output_tokens"], 2, "{rec}");
    let models = gw.admin("/admin/models").json();
    let upstreams = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "m")
        .map(|m| m["upstreams"].clone())
        .unwrap();
    let view = |name: &str| {
        upstreams
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(view("good")["breaker"]["failures"], 0, "{upstreams}");
    assert_eq!(view("good")["breaker"]["state"], "closed", "{upstreams}");
    assert_eq!(view("bad")["breaker"]["failures"], 1, "{upstreams}");
    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("tollgate_upstream_errors_total{upstream=\"bad\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("tollgate_upstream_errors_total{upstream=\"good\"}"),
        "{metrics}"
    );
}

/// `count_tokens` is refused for a model the key's group may not use, and moves on to the next upstream
/// when the first fails, like generation.
#[test]
fn count_tokens_goes_through_the_model_and_failover_steps() {
    let bad = FakeUpstream::start(|_| {
        Reply::json(
            503,
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        )
    });
    let good = FakeUpstream::start(|_| Reply::json(200, &json!({"input_tokens": 42})));
    let dir = TempDir::new("pipeline-count");
    let config = format!(
        "{}[[upstreams]]\nname = \"bad\"\nkind = \"anthropic\"\nbase_url = \"http://{}\"\n\n\
         [[upstreams]]\nname = \"good\"\nkind = \"anthropic\"\nbase_url = \"http://{}\"\n\n\
         [[models]]\nname = \"claude\"\nupstream = [\"bad\", \"good\"]\n\n\
         [[models]]\nname = \"other\"\nupstream = \"good\"\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"claude\"]\n",
        base_config(
            dir.path(),
            &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")
        ),
        bad.addr,
        good.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let auth = format!("Bearer {}", gw.key);
    let headers = [
        ("authorization", auth.as_str()),
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];
    let body = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.request(
        "POST",
        "/v1/messages/count_tokens",
        &headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["input_tokens"], 42);
    assert_eq!(bad.received().len(), 1);
    assert_eq!(good.last().json()["model"], "claude");
    let body = json!({"model": "other", "messages": [{"role": "user", "content": "hi"}]});
    let r = gw.request(
        "POST",
        "/v1/messages/count_tokens",
        &headers,
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "permission_error");
}
