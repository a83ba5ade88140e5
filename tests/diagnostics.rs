//! Diagnostics: readiness, Prometheus metrics, the overhead header, and request logs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::*;
use serde_json::{json, Value};

#[test]
fn health_readiness_and_metrics() {
    let gw = Gateway::start_mock("");
    assert_eq!(gw.request("GET", "/healthz", &[], b"").status, 200);
    let r = gw.request("GET", "/readyz", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["ledger"], "writable");

    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "count me"}]}),
    );
    assert_eq!(r.status, 200);
    let overhead: f64 = r
        .header("x-tollgate-overhead-ms")
        .expect("overhead header")
        .parse()
        .unwrap();
    assert!(overhead >= 0.0);
    let r = gw.post("/v1/messages", &json!({"model": "mock", "max_tokens": 50, "stream": true, "messages": [{"role": "user", "content": "stream me"}]}));
    assert!(r.header("x-tollgate-overhead-ms").is_some());
    gw.post(
        "/v1/chat/completions",
        &json!({"model": "nope", "messages": []}),
    );
    let r = gw.post("/v1/messages", &json!({"model": "mock", "max_tokens": 50, "messages": [{"role": "user", "content": "again"}]}));
    assert_eq!(r.status, 200);

    let m = gw.request("GET", "/metrics", &[], b"");
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = m.text();
    for needle in [
        "tollgate_requests_total{protocol=\"chat\",model=\"mock\",status=\"200\"} 1",
        "tollgate_requests_total{protocol=\"messages\",model=\"mock\",status=\"200\"} 2",
        "tollgate_requests_total{protocol=\"chat\",model=\"unknown\",status=\"404\"} 1",
        "tollgate_request_duration_seconds_count 4",
        "tollgate_overhead_seconds_bucket{le=\"+Inf\"} 4",
        "tollgate_time_to_first_token_seconds_count 1",
        "tollgate_tokens_total{model=\"mock\",kind=\"output\"}",
        "tollgate_active_streams 0",
        "tollgate_queue_depth 0",
        "tollgate_rejected_requests_total{reason=\"overload\"} 0",
        "# TYPE tollgate_request_duration_seconds histogram",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    // Every sample line parses as `name{labels} value`.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample: {line}");
    }
}

#[test]
fn request_logs_as_json_lines_without_secrets() {
    let gw = Gateway::start_mock("log_format = \"json\"");
    let auth = format!("Bearer {}", gw.key);
    let body =
        json!({"model": "mock", "messages": [{"role": "user", "content": "a secret prompt text"}]})
            .to_string();
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", "json-1")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    let rid = r.header("x-request-id").unwrap().to_string();
    let mut line = String::new();
    wait_for(
        || {
            line = gw
                .all_logs()
                .lines()
                .find(|l| l.contains(&rid))
                .unwrap_or_default()
                .to_string();
            !line.is_empty()
        },
        "the request's log line",
    );
    let v: Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
    assert_eq!(v["request_id"], rid.as_str());
    assert_eq!(v["client_request_id"], "json-1");
    assert_eq!(v["key"], "default");
    assert_eq!(v["model"], "mock");
    assert_eq!(v["protocol"], "chat");
    assert_eq!(v["status"], "200");
    assert!(v["latency_ms"].is_u64() && v["output_tokens"].as_u64().unwrap() > 0);
    // Every log line is JSON, and none holds the key or the prompt.
    for l in gw.all_logs().lines() {
        assert!(serde_json::from_str::<Value>(l).is_ok(), "not JSON: {l}");
    }
    let logs = gw.all_logs();
    assert!(!logs.contains(&gw.key[3..]), "the key was logged");
    assert!(!logs.contains("secret prompt"), "the prompt was logged");
}
