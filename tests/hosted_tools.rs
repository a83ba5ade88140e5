//! Paid features of the operator's upstream account, through HTTP against the real binary and a fake
//! upstream: references into the account found at any depth and refused with 400 naming their path (on
//! passthrough and translation, generation and token counting); paid hosted tools and service tiers refused
//! unless the model allows them at a price, their worst case reserved against the key's balance, and the uses
//! the upstream reports billed (streamed or not) and shown in the usage record.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::upstream::{FakeUpstream, Recorded, Reply};
use common::*;
use serde_json::{json, Value};

/// Models that allow paid features, at prices per use that make costs easy to check (tokens are free).
const PAID_MODELS: &str = r#"
[[models]]
name = "paid-responses"
upstream = "responses-up"
max_hosted_uses = 8
allow_hosted_tools = { web_search = 10, image_generation = 40, computer_use = 5 }
allow_service_tiers = { priority = 0.5 }

[[models]]
name = "paid-messages"
upstream = "anthropic-up"
max_hosted_uses = 8
allow_hosted_tools = { web_search = 10, web_fetch = 2 }
allow_service_tiers = { fast = 1 }

[[models]]
name = "geo-messages"
upstream = "anthropic-up"
input_price = 1000000
output_price = 2000000
allow_inference_geo = 1.1

[[models]]
name = "paid-gemini"
upstream = "gemini-up"
max_hosted_uses = 4
allow_hosted_tools = { code_execution = 1 }

[[models]]
name = "paid-chat"
upstream = "chat-up"
allow_hosted_tools = { web_search = 10 }
allow_service_tiers = { priority = 0.5 }
"#;

/// Every hosted use the fake upstream reports comes in threes.
const USES: usize = 3;

fn event(name: &str, data: &Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// A Responses answer: three output items for each hosted tool of the request, and the tier it asked for.
fn responses_answer(req: &Value) -> Value {
    let mut output = Vec::new();
    for t in req["tools"].as_array().into_iter().flatten() {
        let item = match t["type"].as_str().unwrap_or("") {
            s if s.starts_with("web_search") => "web_search_call",
            "image_generation" => "image_generation_call",
            "computer_use_preview" => "computer_call",
            _ => continue,
        };
        for i in 0..USES {
            output.push(json!({"type": item, "id": format!("{item}_{i}"), "status": "completed"}));
        }
    }
    output.push(
        json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "ok", "annotations": []}]}),
    );
    json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "x",
        "output": output, "service_tier": req.get("service_tier").cloned().unwrap_or(json!("default")),
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}})
}

fn responses_stream(req: &Value) -> Reply {
    let done = responses_answer(req);
    let mut events = vec![event(
        "response.created",
        &json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
    )];
    for (i, item) in done["output"].as_array().unwrap().iter().enumerate() {
        events.push(event(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "sequence_number": i + 1, "output_index": i, "item": item}),
        ));
    }
    events.push(event(
        "response.completed",
        &json!({"type": "response.completed", "sequence_number": 99, "response": done}),
    ));
    Reply::sse(events)
}

/// The `server_tool_use` counts of a Messages answer: three of each server tool the request offers.
fn server_tool_use(req: &Value) -> Value {
    let mut counts = serde_json::Map::new();
    for t in req["tools"].as_array().into_iter().flatten() {
        let ty = t["type"].as_str().unwrap_or("");
        for family in ["web_search", "web_fetch"] {
            if ty.starts_with(family) {
                counts.insert(format!("{family}_requests"), json!(USES));
            }
        }
    }
    Value::Object(counts)
}

fn messages_answer(req: &Value) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
        "content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
                    {"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1, "server_tool_use": server_tool_use(req)}})
}

fn messages_stream(req: &Value) -> Reply {
    let block =
        json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}});
    Reply::sse(vec![
        event(
            "message_start",
            &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "x", "content": [], "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "ok"}}),
        ),
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 1}),
        ),
        // Fewer blocks were seen than the total the upstream states at the end: the total is billed.
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 1, "server_tool_use": server_tool_use(req)}}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ])
}

fn chat_answer(req: &Value) -> Value {
    json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "service_tier": req.get("service_tier").cloned().unwrap_or(json!("default")),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

fn chat_stream(req: &Value) -> Reply {
    let tier = req.get("service_tier").cloned().unwrap_or(json!("default"));
    let chunk = |choices: Value, usage: Value| {
        let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "x",
            "service_tier": tier, "choices": choices, "usage": usage});
        format!("data: {c}\n\n").into_bytes()
    };
    Reply::sse(vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            Value::Null,
        ),
        chunk(
            json!([]),
            json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
        ),
        b"data: [DONE]\n\n".to_vec(),
    ])
}

fn answer(rec: &Recorded) -> Reply {
    let req: Value = serde_json::from_slice(&rec.body).unwrap_or(Value::Null);
    let stream = req["stream"] == true;
    match req["metadata"]["user_id"].as_str() {
        // The upstream refuses the request: nothing ran.
        Some("refuse") => {
            let e = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "no"}});
            return Reply::json(400, &e);
        }
        // The stream breaks after a search started: what ran is never reported.
        Some("cut") => {
            let Reply::Sse { mut events, .. } = messages_stream(&req) else {
                unreachable!()
            };
            events.truncate(3);
            return Reply::Sse {
                events,
                gate: None,
                abort: true,
            };
        }
        _ => {}
    }
    if rec.path.ends_with(":generateContent") {
        Reply::json(
            200,
            &json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]},
            "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1,
            "totalTokenCount": 6}}),
        )
    } else if rec.path.ends_with("/count_tokens") {
        Reply::json(200, &json!({"input_tokens": 5}))
    } else if rec.path.ends_with("/responses") {
        if stream {
            responses_stream(&req)
        } else {
            Reply::json(200, &responses_answer(&req))
        }
    } else if rec.path.ends_with("/messages") {
        if stream {
            messages_stream(&req)
        } else {
            Reply::json(200, &messages_answer(&req))
        }
    } else if stream {
        chat_stream(&req)
    } else {
        Reply::json(200, &chat_answer(&req))
    }
}

fn start() -> (FakeUpstream, Gateway) {
    let fake = FakeUpstream::start(answer);
    let dir = TempDir::new("hosted");
    let top = format!(
        "admin_token_env = \"{ADMIN_TOKEN_ENV}\"\nledger_sync_ms = 50\n{}",
        gemini_upstream(fake.addr)
    );
    let mut config = standard_config(dir.path(), Some(fake.addr), &top);
    config.push_str(PAID_MODELS);
    let gw = Gateway::start_with(dir, &config);
    (fake, gw)
}

fn post_beta(gw: &Gateway, key: &str, path: &str, body: &Value, beta: Option<&str>) -> Response {
    let auth = format!("Bearer {key}");
    let mut h = vec![
        ("authorization", auth.as_str()),
        ("anthropic-version", "2023-06-01"),
    ];
    if let Some(b) = beta {
        h.push(("anthropic-beta", b));
    }
    gw.request("POST", path, &h, body.to_string().as_bytes())
}

fn with(base: Value, extra: &Value) -> Value {
    let mut body = base;
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn responses_body(model: &str, extra: &Value) -> Value {
    with(json!({"model": model, "input": "hi"}), extra)
}

fn messages_body(model: &str, extra: &Value) -> Value {
    with(
        json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
        extra,
    )
}

/// The field a 400 names: `param` in OpenAI's shape; Anthropic's has none, its message starts with it.
fn named(r: &Response) -> String {
    let e = &r.json()["error"];
    match e["param"].as_str() {
        Some(p) => p.to_string(),
        None => {
            let msg = e["message"].as_str().unwrap_or_default();
            msg.split('`').nth(1).unwrap_or_default().to_string()
        }
    }
}

fn record(gw: &Gateway, r: &Response) -> Value {
    let rid = r.header("x-request-id").unwrap();
    let got = gw.admin(&format!("/admin/usage?request_id={rid}"));
    assert_eq!(got.status, 200, "{}", got.text());
    got.json()["data"][0].clone()
}

#[test]
fn account_references_at_any_depth_are_refused_on_every_path() {
    let (fake, gw) = start();
    let responses: Vec<(&str, Value)> = vec![
        (
            "input[1].output[0].file_id",
            json!({"input": [{"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_file", "file_id": "file_other"}]}]}),
        ),
        (
            "input[1].output[1].file_id",
            json!({"input": [{"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "see"},
                    {"type": "input_image", "file_id": "file_other"}]}]}),
        ),
        (
            "tools[0].input_image_mask.file_id",
            json!({"tools": [{"type": "image_generation", "input_image_mask": {"file_id": "file_other"}}]}),
        ),
        (
            "tools[0].environment",
            json!({"tools": [{"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_1"}}]}),
        ),
    ];
    // Passthrough, and translation to Chat and to Messages.
    for model in ["m-responses", "m-chat", "m-messages"] {
        for (path, extra) in &responses {
            let r = post_beta(
                &gw,
                &gw.key,
                "/v1/responses",
                &responses_body(model, extra),
                None,
            );
            assert_eq!(r.status, 400, "{model} {path}: {}", r.text());
            assert_eq!(named(&r), *path, "{model}: {}", r.text());
            assert_eq!(r.json()["error"]["code"], "account_feature_refused");
        }
    }
    let file_image = json!({"type": "image", "source": {"type": "file", "file_id": "file_other"}});
    let messages: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "messages[0].content[0].source.content[0].source",
            json!({"messages": [{"role": "user", "content": [{"type": "document",
                "source": {"type": "content", "content": [file_image]}}]}]}),
            None,
        ),
        (
            "messages[0].content[0].content[0].source",
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                "content": [file_image]}]}]}),
            None,
        ),
        ("anthropic-beta", json!({}), Some("FILES-API-2025-04-14")),
        (
            "anthropic-beta",
            json!({}),
            Some("interleaved-thinking-2025-05-14, Files-Api-2025-04-14 "),
        ),
        (
            "anthropic-beta",
            json!({}),
            Some("Code-Execution-2025-08-25"),
        ),
    ];
    for model in ["m-messages", "m-chat", "m-responses"] {
        for (path, extra, beta) in &messages {
            for endpoint in ["/v1/messages", "/v1/messages/count_tokens"] {
                let r = post_beta(&gw, &gw.key, endpoint, &messages_body(model, extra), *beta);
                assert_eq!(r.status, 400, "{model} {endpoint} {path}: {}", r.text());
                assert_eq!(named(&r), *path, "{model} {endpoint}: {}", r.text());
            }
        }
    }
    assert!(fake.received().is_empty(), "nothing reached the upstream");
}

/// The tools of the body the upstream last received.
fn sent_tools(fake: &FakeUpstream) -> Value {
    let body: Value = serde_json::from_slice(&fake.last().body).unwrap();
    body
}

/// One rule for hosted tools a model does not allow, on every path (third review, 10): left out of the
/// request and named in `x-tollgate-dropped-tools`, never a 400, unless `tool_choice` forces that tool.
/// Paid tiers the model does not allow are still refused.
#[test]
fn hosted_tools_a_model_does_not_allow_are_left_out_and_tiers_refused() {
    let (fake, gw) = start();
    let responses: Vec<(&str, Value, Value)> = vec![
        (
            "web_search",
            json!({"tools": [{"type": "web_search"}]}),
            json!(null),
        ),
        (
            "web_search",
            json!({"tools": [{"type": "function", "name": "f"}, {"type": "web_search_preview"}]}),
            json!([{"type": "function", "name": "f"}]),
        ),
        (
            "web_search",
            json!({"tools": [{"type": "web_search_preview_2025_03_11"}], "tool_choice": "auto",
                   "max_tool_calls": 3}),
            json!(null),
        ),
        (
            "image_generation",
            json!({"tools": [{"type": "image_generation"}]}),
            json!(null),
        ),
        (
            "computer_use",
            json!({"tools": [{"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"}]}),
            json!(null),
        ),
    ];
    for (family, extra, left) in &responses {
        let r = post_beta(
            &gw,
            &gw.key,
            "/v1/responses",
            &responses_body("m-responses", extra),
            None,
        );
        assert_eq!(r.status, 200, "{extra}: {}", r.text());
        assert_eq!(
            r.header("x-tollgate-dropped-tools"),
            Some(*family),
            "{extra}"
        );
        let sent = sent_tools(&fake);
        assert_eq!(sent["tools"], *left, "{extra}: {sent}");
        if left.is_null() {
            assert!(
                sent.get("tool_choice").is_none() && sent.get("max_tool_calls").is_none(),
                "{sent}"
            );
        }
        assert_eq!(record(&gw, &r)["status"], 200);
    }
    let before = fake.received().len();
    // Forced: the request would ask for a tool it no longer has.
    let forced = json!({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/responses",
        &responses_body("m-responses", &forced),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "tools[0]");
    assert_eq!(r.json()["error"]["code"], "hosted_tool_refused");
    assert!(r.text().contains("allow_hosted_tools"), "{}", r.text());
    for tier in ["priority", "scale"] {
        let r = post_beta(
            &gw,
            &gw.key,
            "/v1/responses",
            &responses_body("m-responses", &json!({"service_tier": tier})),
            None,
        );
        assert_eq!(r.status, 400, "{tier}: {}", r.text());
        assert_eq!(named(&r), "service_tier");
        assert_eq!(r.json()["error"]["code"], "service_tier_refused");
    }
    let search = json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 99});
    let custom = json!({"name": "f", "input_schema": {"type": "object"}});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("m-messages", &json!({"tools": [custom, search]})),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("web_search"));
    assert_eq!(sent_tools(&fake)["tools"], json!([custom]));
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body(
            "m-messages",
            &json!({"tools": [search], "tool_choice": {"type": "tool", "name": "web_search"}}),
        ),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "tools[0]");
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("m-messages", &json!({"speed": "fast"})),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "speed");
    let chat = |extra: Value| {
        with(
            json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]}),
            &extra,
        )
    };
    let r = gw.post(
        "/v1/chat/completions",
        &chat(json!({"web_search_options": {}})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("web_search"));
    assert!(sent_tools(&fake).get("web_search_options").is_none());
    let r = gw.post(
        "/v1/chat/completions",
        &chat(json!({"service_tier": "priority"})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "service_tier");
    assert_eq!(
        fake.received().len(),
        before + 2,
        "what was refused never reached the upstream"
    );

    // Standard and cheaper tiers, and tools the client runs itself, need nothing.
    for tier in ["auto", "default", "flex"] {
        let r = gw.post("/v1/chat/completions", &chat(json!({"service_tier": tier})));
        assert_eq!(r.status, 200, "{tier}: {}", r.text());
    }
    let client_tools = json!({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "custom", "name": "apply_patch"}, {"type": "local_shell"}], "service_tier": "auto"});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/responses",
        &responses_body("m-responses", &client_tools),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let client_tools = json!({"service_tier": "standard_only", "tools": [
        {"type": "bash_20250124", "name": "bash"}, {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1024, "display_height_px": 768}]});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("m-messages", &client_tools),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A translated request leaves hosted tools out: nothing paid runs, nothing is refused.
    let search = json!({"tools": [{"type": "web_search"}]});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/responses",
        &responses_body("m-chat", &search),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("web_search"));
    // Token counting runs no tool.
    let search = json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]});
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages/count_tokens",
        &messages_body("m-messages", &search),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Every hosted tool of a Gemini `Tool` object is seen (third review, 3): one object asking for code
/// execution and Google Search on a model that allows code execution only keeps the one (reserved and
/// billed at its worst case: Gemini reports no uses) and leaves the other out.
#[test]
fn every_hosted_tool_of_a_gemini_tool_object_is_seen() {
    let (fake, gw) = start();
    let body = |tools: Value| json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": tools});
    let path = |m: &str| format!("/v1beta/models/{m}:generateContent");
    let r = post_beta(
        &gw,
        &gw.key,
        &path("paid-gemini"),
        &body(json!([{"codeExecution": {}, "googleSearch": {}}])),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("google_search"));
    assert_eq!(sent_tools(&fake)["tools"], json!([{"codeExecution": {}}]));
    let rec = record(&gw, &r);
    assert_eq!(rec["hosted_uses"]["code_execution"], 4, "{rec}");
    assert!(rec["hosted_uses"].get("google_search").is_none(), "{rec}");
    // A model that allows none: the function declarations stay, and a tool object left empty goes.
    let decl = json!({"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]});
    let r = post_beta(
        &gw,
        &gw.key,
        &path("m-gemini"),
        &body(json!([{"googleSearch": {}, "urlContext": {}}, decl])),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-tollgate-dropped-tools"),
        Some("google_search, url_context")
    );
    assert_eq!(sent_tools(&fake)["tools"], json!([decl]));
}

/// Third review, 7: Anthropic's `inference_geo` (US-only inference, 1.1× every token at Anthropic) is
/// refused with 400 naming it unless the model allows it, and then billed at the model's multiplier; its
/// standard value `global` needs nothing.
#[test]
fn inference_geo_is_refused_unless_allowed_and_billed_at_its_multiplier() {
    let (fake, gw) = start();
    let geo = |v: &str| json!({"inference_geo": v});
    let before = fake.received().len();
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("m-messages", &geo("us")),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "inference_geo");
    assert!(r.text().contains("allow_inference_geo"), "{}", r.text());
    assert_eq!(
        fake.received().len(),
        before,
        "nothing reached the upstream"
    );
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("m-messages", &geo("global")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // 1 input token at 1 credit and 1 output token at 2: 3 credits, 3.3 at US-only inference.
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("geo-messages", &geo("us")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"].as_f64(), Some(3.3), "{rec}");
    assert_eq!(rec["surcharge"], "inference_geo=us", "{rec}");
    let r = post_beta(
        &gw,
        &gw.key,
        "/v1/messages",
        &messages_body("geo-messages", &json!({})),
        None,
    );
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"].as_f64(), Some(3.0), "{rec}");
    assert!(rec.get("surcharge").is_none(), "{rec}");
}

#[test]
fn allowed_uses_are_reserved_against_the_balance() {
    let (fake, gw) = start();
    let key = gw.add_key("small", "default", Some(50.0));
    let search = |max_uses: u64| {
        messages_body(
            "paid-messages",
            &json!({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses}]}),
        )
    };
    // Above the model's max_hosted_uses: refused whatever the balance.
    let r = gw.post_as(&key, "/v1/messages", &search(99));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(named(&r), "tools[0].max_uses", "{}", r.text());
    // 8 uses at 10 credits may cost 80: more than the 50 left.
    let r = gw.post_as(&key, "/v1/messages", &search(8));
    assert_eq!(r.status, 429, "{}", r.text());
    // Anthropic's shape of a used-up balance, as for any other.
    assert_eq!(r.json()["error"]["type"], "billing_error", "{}", r.text());
    assert!(r.text().contains("hosted tools"), "{}", r.text());
    assert!(fake.received().is_empty());
    // 5 uses may cost 50: admitted; the upstream reports 3, and 3 are billed.
    let r = gw.post_as(&key, "/v1/messages", &search(5));
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"], 30.0, "{rec}");
    assert_eq!(rec["hosted_uses"], json!({"web_search": 3}), "{rec}");
    // 20 left: 5 more uses no longer fit.
    let r = gw.post_as(&key, "/v1/messages", &search(5));
    assert_eq!(r.status, 429, "{}", r.text());

    // Without a limit of its own, a request gets the model's (sent upstream) and is reserved for it.
    let key = gw.add_key("responses", "default", Some(100.0));
    let body = responses_body(
        "paid-responses",
        &json!({"tools": [{"type": "web_search"}]}),
    );
    let r = gw.post_as(&key, "/v1/responses", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["max_tool_calls"], 8);
    assert_eq!(record(&gw, &r)["cost"], 30.0);
    // 70 left, less than 8 × 10.
    let r = gw.post_as(&key, "/v1/responses", &body);
    assert_eq!(r.status, 429, "{}", r.text());
    let body = responses_body(
        "paid-responses",
        &json!({"tools": [{"type": "web_search"}], "max_tool_calls": 7}),
    );
    let r = gw.post_as(&key, "/v1/responses", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let m = messages_body(
        "paid-messages",
        &json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
    );
    let r = gw.post_as(&gw.key, "/v1/messages", &m);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["tools"][0]["max_uses"], 8);
}

#[test]
fn reported_uses_are_billed_on_every_path() {
    let (_fake, gw) = start();
    let key = gw.key.clone();
    for stream in [false, true] {
        let what = if stream { "stream" } else { "plain" };
        // Responses: 3 searches and 3 images at 10 and 40, and the priority tier.
        let body = responses_body(
            "paid-responses",
            &json!({"stream": stream, "service_tier": "priority",
                "tools": [{"type": "web_search"}, {"type": "image_generation"}]}),
        );
        let r = post_beta(&gw, &key, "/v1/responses", &body, None);
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        let rec = record(&gw, &r);
        assert_eq!(rec["cost"], 150.5, "{what}: {rec}");
        assert_eq!(
            rec["hosted_uses"],
            json!({"web_search": 3, "image_generation": 3}),
            "{what}: {rec}"
        );
        assert_eq!(rec["service_tier"], "priority", "{what}: {rec}");
        // Computer use, counted by its calls.
        let body = responses_body(
            "paid-responses",
            &json!({"stream": stream, "tools": [{"type": "computer_use_preview", "display_width": 1024,
                "display_height": 768, "environment": "linux"}]}),
        );
        let r = post_beta(&gw, &key, "/v1/responses", &body, None);
        assert_eq!(record(&gw, &r)["cost"], 15.0, "{what}");
        // Messages: 3 searches at 10 and 3 fetches at 2, and fast mode.
        let body = messages_body(
            "paid-messages",
            &json!({"stream": stream, "speed": "fast", "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 5}]}),
        );
        let r = post_beta(&gw, &key, "/v1/messages", &body, None);
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        let rec = record(&gw, &r);
        assert_eq!(rec["cost"], 37.0, "{what}: {rec}");
        assert_eq!(
            rec["hosted_uses"],
            json!({"web_search": 3, "web_fetch": 3}),
            "{what}: {rec}"
        );
        // Chat search models report no count: one search per request.
        let body = json!({"model": "paid-chat", "stream": stream, "web_search_options": {},
            "service_tier": "priority", "messages": [{"role": "user", "content": "hi"}]});
        let r = post_beta(&gw, &key, "/v1/chat/completions", &body, None);
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        let rec = record(&gw, &r);
        assert_eq!(rec["cost"], 10.5, "{what}: {rec}");
        assert_eq!(
            rec["hosted_uses"],
            json!({"web_search": 1}),
            "{what}: {rec}"
        );
    }
    // A request without paid features has neither field in its record.
    let r = post_beta(
        &gw,
        &key,
        "/v1/responses",
        &responses_body("paid-responses", &json!({})),
        None,
    );
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"], 0.0);
    assert!(
        rec.get("hosted_uses").is_none() && rec.get("service_tier").is_none(),
        "{rec}"
    );
}

#[test]
fn uses_never_reported_are_billed_at_the_worst_case() {
    let (fake, gw) = start();
    let search = |user: &str| {
        messages_body(
            "paid-messages",
            &json!({"stream": true, "metadata": {"user_id": user},
                "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 4}]}),
        )
    };
    // A stream that broke: the searches that ran are unknown, the 4 reserved are billed.
    let r = post_beta(&gw, &gw.key, "/v1/messages", &search("cut"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("event: error"), "{}", r.text());
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"], 40.0, "{rec}");
    assert_eq!(rec["hosted_uses"], json!({"web_search": 4}), "{rec}");
    // An upstream that refused the request ran nothing.
    let r = post_beta(&gw, &gw.key, "/v1/messages", &search("refuse"), None);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(fake.received().len(), 2);
    let rec = record(&gw, &r);
    assert_eq!(rec["cost"], 0.0, "{rec}");
    assert!(rec.get("hosted_uses").is_none(), "{rec}");
}
