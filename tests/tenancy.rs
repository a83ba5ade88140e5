//! The operator's upstream account stays the operator's: what would reach state kept in it (stored
//! responses, conversations, files, vector stores, containers, MCP) is refused with 400 naming the field,
//! before any upstream call, on passthrough and translated models alike; a model that opts in
//! (`account_features = true`) forwards it; nothing is stored upstream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn responses_ok() -> Value {
    json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "x",
        "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}})
}

fn messages_ok() -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1}})
}

fn chat_ok() -> Value {
    json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

fn start() -> (FakeUpstream, Gateway) {
    let fake = FakeUpstream::start(|rec| {
        if rec.path.ends_with("/responses") {
            Reply::json(200, &responses_ok())
        } else if rec.path.ends_with("/messages") {
            Reply::json(200, &messages_ok())
        } else {
            Reply::json(200, &chat_ok())
        }
    });
    let dir = TempDir::new("tenancy");
    let mut config = standard_config(dir.path(), Some(fake.addr), "");
    config.push_str(
        "\n[[models]]\nname = \"open-responses\"\nupstream = \"responses-up\"\naccount_features = true\n\n\
         [[models]]\nname = \"open-messages\"\nupstream = \"anthropic-up\"\naccount_features = true\n\n\
         [[models]]\nname = \"thinker\"\nupstream = \"responses-up\"\nreasoning = true\n",
    );
    let gw = Gateway::start_with(dir, &config);
    (fake, gw)
}

fn post_with(gw: &Gateway, path: &str, body: &Value, beta: Option<&str>) -> Response {
    let auth = format!("Bearer {}", gw.key);
    let mut h = vec![
        ("authorization", auth.as_str()),
        ("anthropic-version", "2023-06-01"),
    ];
    if let Some(b) = beta {
        h.push(("anthropic-beta", b));
    }
    gw.request("POST", path, &h, body.to_string().as_bytes())
}

#[test]
fn account_state_is_refused_on_every_path() {
    let (fake, gw) = start();
    let responses: Vec<(&str, Value)> = vec![
        (
            "previous_response_id",
            json!({"previous_response_id": "resp_other_tenant"}),
        ),
        ("conversation", json!({"conversation": "conv_1"})),
        ("background", json!({"background": true})),
        (
            "tools[0]",
            json!({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}),
        ),
        (
            "tools[0]",
            json!({"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://evil.example"}]}),
        ),
        (
            "tools[0]",
            json!({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
        ),
        (
            "input[0]",
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
        ),
        ("input[0]", json!({"input": [{"id": "msg_1"}]})),
        (
            "input[0].content[0].file_id",
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}),
        ),
    ];
    // Responses clients, to a Responses upstream (passthrough) and to a Chat upstream (translation).
    for model in ["m-responses", "m-chat"] {
        for (param, extra) in &responses {
            let mut body = json!({"model": model, "input": "hi"});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let r = post_with(&gw, "/v1/responses", &body, None);
            assert_eq!(r.status, 400, "{model} {param}: {}", r.text());
            assert_eq!(r.json()["error"]["param"], *param, "{model}: {}", r.text());
            assert_eq!(r.json()["error"]["code"], "account_feature_refused");
        }
    }
    // A reasoning item without its encrypted content is looked up by id where it goes as it came; translated,
    // it is its summary.
    let reasoning = json!([{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]},
        {"role": "user", "content": "hi"}]);
    let r = post_with(
        &gw,
        "/v1/responses",
        &json!({"model": "m-responses", "input": reasoning}),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "input[0]");
    assert!(r.text().contains("encrypted_content"), "{}", r.text());
    let messages: Vec<(&str, Value, Option<&str>)> = vec![
        ("container", json!({"container": "container_1"}), None),
        (
            "mcp_servers",
            json!({"mcp_servers": [{"type": "url", "url": "https://evil.example", "name": "x"}]}),
            None,
        ),
        (
            "messages[0].content[0].source",
            json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]}),
            None,
        ),
        ("anthropic-beta", json!({}), Some("files-api-2025-04-14")),
        ("anthropic-beta", json!({}), Some("mcp-client-2025-04-04")),
        (
            "anthropic-beta",
            json!({}),
            Some("code-execution-2025-05-22"),
        ),
    ];
    for model in ["m-messages", "m-chat"] {
        for (param, extra, beta) in &messages {
            let mut body = json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let r = post_with(&gw, "/v1/messages", &body, *beta);
            assert_eq!(r.status, 400, "{model} {param}: {}", r.text());
            // Anthropic's error shape has no `param`: the message names the field.
            let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
            assert!(msg.starts_with(&format!("`{param}`")), "{model}: {msg}");
        }
    }
    let r = post_with(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "m-chat", "messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file_1"}}]}]}),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(fake.received().is_empty(), "nothing reached the upstream");
    let r = post_with(
        &gw,
        "/v1/responses",
        &json!({"model": "m-chat", "input": reasoning}),
        None,
    );
    assert_ne!(
        r.json()["error"]["code"],
        "account_feature_refused",
        "{}",
        r.text()
    );
}

#[test]
fn agent_betas_flow_and_nothing_is_stored() {
    let (fake, gw) = start();
    let body = json!({"model": "m-messages", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let betas = "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14,claude-code-20250219,context-1m-2025-08-07";
    let r = post_with(&gw, "/v1/messages", &body, Some(betas));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().header("anthropic-beta"), Some(betas));
    let r = post_with(
        &gw,
        "/v1/responses",
        &json!({"model": "m-responses", "input": "hi", "store": true, "tools": [{"type": "function", "name": "f"}]}),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        fake.last().json()["store"],
        false,
        "stored responses could never be read back"
    );
}

/// With nothing stored, a reasoning item could come back only by its id, which would name nothing: a model
/// set to reason is asked for its reasoning whole (`include`), so the client can send it back as it came.
/// A model without reasoning would refuse that `include`, and gets none.
#[test]
fn a_reasoning_model_answers_with_its_reasoning_whole() {
    let (fake, gw) = start();
    let asked =
        json!({"model": "thinker", "input": "hi", "include": ["message.output_text.logprobs"]});
    let r = post_with(&gw, "/v1/responses", &asked, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    assert_eq!(sent["store"], false);
    assert_eq!(
        sent["include"],
        json!([
            "message.output_text.logprobs",
            "reasoning.encrypted_content"
        ])
    );
    // The next turn sends the reasoning item back whole: it goes as it came.
    let item =
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"});
    let next = json!({"model": "thinker", "input": [item, {"role": "user", "content": "and?"}]});
    let r = post_with(&gw, "/v1/responses", &next, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    assert_eq!(sent["input"][0], item);
    assert_eq!(sent["include"], json!(["reasoning.encrypted_content"]));
    let r = post_with(
        &gw,
        "/v1/responses",
        &json!({"model": "m-responses", "input": "hi"}),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(fake.last().json().get("include").is_none());
}

#[test]
fn a_model_can_opt_in() {
    let (fake, gw) = start();
    let r = post_with(
        &gw,
        "/v1/responses",
        &json!({"model": "open-responses", "input": "hi", "previous_response_id": "resp_1", "store": true}),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    assert_eq!(sent["previous_response_id"], "resp_1");
    assert_eq!(sent["store"], true);
    let r = post_with(
        &gw,
        "/v1/messages",
        &json!({"model": "open-messages", "max_tokens": 10, "container": "c_1", "messages": [{"role": "user", "content": "hi"}]}),
        Some("files-api-2025-04-14"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["container"], "c_1");
}
