//! The three generation endpoints on the built-in mock model: authentication rules, request validation,
//! errors in each protocol's shape, streaming and non-streaming answers, tracing headers, paths.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::*;
use serde_json::{json, Value};

fn chat() -> Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]})
}

fn messages() -> Value {
    json!({"model": "mock", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
}

fn responses() -> Value {
    json!({"model": "mock", "input": "hi"})
}

/// Sends `body` to `path` with exactly these headers.
fn send(gw: &Gateway, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    gw.request("POST", path, headers, body.to_string().as_bytes())
}

#[test]
fn keys_are_checked_on_every_endpoint() {
    let gw = Gateway::start_mock("");
    let key = gw.key.clone();
    let truncated = &key[..key.len() - 3];
    let spaced = format!("{} {}", &key[..10], &key[10..]);
    let cases: Vec<(&str, Value)> = vec![
        ("/v1/chat/completions", chat()),
        ("/v1/responses", responses()),
        ("/v1/messages", messages()),
    ];
    for (path, body) in &cases {
        let v = ("anthropic-version", "2023-06-01");
        let bad: Vec<Vec<(String, String)>> = vec![
            vec![],                                                        // missing
            vec![("authorization".into(), format!("Bearer {truncated}"))], // truncated
            vec![("authorization".into(), format!("Bearer {spaced}"))],    // space inside
            vec![("authorization".into(), key.clone())],                   // no "Bearer "
            vec![("authorization".into(), format!("Token {key}"))],        // wrong scheme
            vec![("authorization".into(), format!("Bearer {key}x"))],      // extra character
        ];
        for headers in bad {
            let mut h: Vec<(&str, &str)> = headers
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            h.push(v);
            let r = send(&gw, path, &h, body);
            assert_eq!(r.status, 401, "{path} {headers:?}: {}", r.text());
            let rid = r
                .header("x-request-id")
                .expect("x-request-id on errors")
                .to_string();
            if *path == "/v1/messages" {
                assert_eq!(r.json()["error"]["type"], "authentication_error");
                assert_eq!(r.header("request-id"), Some(rid.as_str()));
            } else {
                assert_eq!(r.json()["error"]["code"], "invalid_api_key");
            }
            assert!(r.text().contains(&rid), "the request id is in the message");
            assert!(!r.text().contains(&key[3..]), "the key is never echoed");
        }
        // The right key, as Bearer.
        let auth = format!("Bearer {key}");
        let r = send(&gw, path, &[("authorization", &auth), v], body);
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    // Messages also takes x-api-key.
    let r = send(
        &gw,
        "/v1/messages",
        &[("x-api-key", &key), ("anthropic-version", "2023-06-01")],
        &messages(),
    );
    assert_eq!(r.status, 200);
    // The key never appears in the log.
    assert!(!gw.all_logs().contains(&key[3..]));
}

#[test]
fn messages_needs_its_version_header_and_max_tokens() {
    let gw = Gateway::start_mock("");
    let key = gw.key.clone();
    let r = send(&gw, "/v1/messages", &[("x-api-key", &key)], &messages());
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("anthropic-version"));
    // Any version value is accepted: current SDKs send dates newer than 2023-06-01.
    for version in ["2023-06-01", "2025-11-01", "2099-01-01"] {
        let r = send(
            &gw,
            "/v1/messages",
            &[("x-api-key", &key), ("anthropic-version", version)],
            &messages(),
        );
        assert_eq!(r.status, 200, "{version}");
    }
    let mut body = messages();
    body.as_object_mut().unwrap().remove("max_tokens");
    let r = send(
        &gw,
        "/v1/messages",
        &[("x-api-key", &key), ("anthropic-version", "2023-06-01")],
        &body,
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));
}

#[test]
fn wrong_fields_get_400_naming_the_field() {
    let gw = Gateway::start_mock("");
    // Chat with the Responses field.
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "input": "hi"}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "messages");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("input"));
    // Responses without input (and with Chat's field).
    let r = gw.post("/v1/responses", &json!({"model": "mock", "messages": []}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "input");
    let r = gw.post("/v1/responses", &json!({"model": "mock"}));
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "input");
    // Wrong types, missing model, invalid JSON, empty body.
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": "hi"}),
    );
    assert_eq!(
        (r.status, r.json()["error"]["param"].clone()),
        (400, json!("messages"))
    );
    let r = gw.post("/v1/chat/completions", &json!({"messages": []}));
    assert_eq!(
        (r.status, r.json()["error"]["param"].clone()),
        (400, json!("model"))
    );
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [], "stream": "yes"}),
    );
    assert_eq!(
        (r.status, r.json()["error"]["param"].clone()),
        (400, json!("stream"))
    );
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        b"{\"model\": ",
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(r.status, 400);
    let r = gw.request(
        "POST",
        "/v1/messages",
        &[
            ("authorization", &auth),
            ("anthropic-version", "2023-06-01"),
        ],
        b"[1,2]",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
}

#[test]
fn unknown_model_is_404_in_each_shape() {
    let gw = Gateway::start_mock("");
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = gw.post("/v1/responses", &json!({"model": "nope", "input": "hi"}));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let r = gw.post(
        "/v1/messages",
        &json!({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
}

#[test]
fn mock_answers_every_protocol_streamed_or_not() {
    let gw = Gateway::start_mock("");
    let expected = "Hello! This is tollgate's built-in mock model. You said: ping";

    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "ping"}]}),
    );
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], expected);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let r = gw.post("/v1/chat/completions", &json!({"model": "mock", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "ping"}]}));
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    assert_eq!(text, expected);
    assert!(chunks.len() >= 5, "streamed in several deltas");
    assert!(
        chunks.last().unwrap()["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    let r = gw.post("/v1/responses", &json!({"model": "mock", "input": "ping"}));
    let v = r.json();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["content"][0]["text"], expected);
    let r = gw.post(
        "/v1/responses",
        &json!({"model": "mock", "input": "ping", "stream": true}),
    );
    let events = r.events();
    assert_eq!(events[0].0.as_deref(), Some("response.created"));
    assert_eq!(
        events.last().unwrap().0.as_deref(),
        Some("response.completed")
    );
    let done: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        expected
    );

    let r = gw.post("/v1/messages", &json!({"model": "mock", "max_tokens": 100, "messages": [{"role": "user", "content": "ping"}]}));
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["text"], expected);
    assert_eq!(r.header("request-id"), r.header("x-request-id"));
    let r = gw.post("/v1/messages", &json!({"model": "mock", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "ping"}]}));
    let events = r.events();
    assert_eq!(events[0].0.as_deref(), Some("message_start"));
    assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop"));
    let text: String = events
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, expected);
}

#[test]
fn every_response_is_traceable() {
    let gw = Gateway::start_mock("");
    let auth = format!("Bearer {}", gw.key);
    let body = chat().to_string();
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-client-request-id", "my-trace-42"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    let rid = r.header("x-request-id").unwrap().to_string();
    assert_eq!(r.header("x-client-request-id"), Some("my-trace-42"));
    let line = gw.log_line(&rid);
    assert!(line.contains("client_request_id=my-trace-42"), "{line}");
    // Ids are fresh per request.
    let r2 = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        body.as_bytes(),
    );
    assert_ne!(r2.header("x-request-id").unwrap(), rid);
    // Errors and odd paths carry one too.
    for (method, path) in [
        ("GET", "/nope"),
        ("GET", "/v1/chat/completions"),
        ("GET", "/healthz"),
    ] {
        let r = gw.request(method, path, &[], b"");
        assert!(
            r.header("x-request-id")
                .is_some_and(|v| v.starts_with("req_")),
            "{method} {path}"
        );
    }
}

#[test]
fn paths_and_methods() {
    let gw = Gateway::start_mock("");
    let r = gw.request("GET", "/v1/chat/completions", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    let r = gw.request("POST", "/v1/v1/chat/completions", &[], b"{}");
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("doubled `/v1`"));
    let r = gw.request("POST", "/v1/messages/v1/messages", &[], b"{}");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["type"], "error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("full endpoint path"));
    let r = gw.request("POST", "/chat/completions", &[], b"{}");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("missing `/v1`"));
    let r = gw.request("GET", "/something", &[], b"");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("POST /v1/chat/completions"));
    // Query strings are ignored for routing (the Anthropic SDK's beta client adds ?beta=true).
    let r = send(
        &gw,
        "/v1/messages?beta=true",
        &[("x-api-key", &gw.key), ("anthropic-version", "2023-06-01")],
        &messages(),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn model_list_in_both_shapes() {
    let gw = Gateway::start_mock("");
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request("GET", "/v1/models", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "mock");
    assert_eq!(v["data"][0]["object"], "model");
    let r = gw.request(
        "GET",
        "/v1/models",
        &[("x-api-key", &gw.key), ("anthropic-version", "2023-06-01")],
        b"",
    );
    let v = r.json();
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["first_id"], "mock");
    assert_eq!(v["has_more"], false);
    let r = gw.request("GET", "/v1/models/mock", &[("authorization", &auth)], b"");
    assert_eq!(r.json()["id"], "mock");
    let r = gw.request("GET", "/v1/models/other", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 404);
    let r = gw.request("GET", "/v1/models", &[], b"");
    assert_eq!(r.status, 401);
}

#[test]
fn mock_honours_max_tokens_and_forced_tools() {
    let gw = Gateway::start_mock("");
    let r = gw.post("/v1/messages", &json!({"model": "mock", "max_tokens": 3, "messages": [{"role": "user", "content": "say a lot"}]}));
    assert_eq!(r.json()["stop_reason"], "max_tokens");
    assert!(r.json()["usage"]["output_tokens"].as_u64().unwrap() <= 3);
    let r = gw.post("/v1/chat/completions", &json!({
        "model": "mock", "messages": [{"role": "user", "content": "weather in Paris"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": "required"
    }));
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string());
}
