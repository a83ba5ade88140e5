//! The translation matrix: every case in `fixtures/translate/` is replayed for all sixteen (client protocol ×
//! upstream kind) pairs. What the client reads (text, tool calls, stop reason, errors), how its stream is
//! shaped (each protocol's event lifecycle), what the upstream receives and the usage recorded are checked
//! against the case's protocol-neutral expectation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::upstream::{split_sse_blocks, FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

const PROTOCOLS: [&str; 4] = ["chat", "responses", "messages", "gemini"];

/// The path a client of `client` posts to (a Gemini client names the model and the stream in it; its SDKs
/// ask for SSE).
fn endpoint(client: &str, model: &str, stream: bool) -> String {
    match client {
        "chat" => "/v1/chat/completions".into(),
        "responses" => "/v1/responses".into(),
        "gemini" if stream => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
        "gemini" => format!("/v1beta/models/{model}:generateContent"),
        _ => "/v1/messages".into(),
    }
}

fn model_for(upstream: &str) -> &'static str {
    match upstream {
        "chat" => "m-chat",
        "responses" => "m-responses",
        "gemini" => "m-gemini",
        _ => "m-messages",
    }
}

/// The gateway of the matrix: one model per upstream kind at `fake`.
fn gateway(fake: &FakeUpstream) -> Gateway {
    Gateway::start_with_fake(fake.addr, &gemini_upstream(fake.addr))
}

/// Posts `body` as a client of `client` sends it: a Gemini client with its key in `x-goog-api-key`.
fn post(gw: &Gateway, client: &str, path: &str, body: &Value) -> Response {
    if client != "gemini" {
        return gw.post(path, body);
    }
    let headers = [
        ("x-goog-api-key", gw.key.as_str()),
        ("content-type", "application/json"),
    ];
    gw.request("POST", path, &headers, body.to_string().as_bytes())
}

/// What a client read, in neutral terms.
#[derive(Debug, Default)]
struct Seen {
    text: String,
    tool_calls: Vec<(String, Value)>,
    stop: Option<String>,
    /// The message of the protocol's in-stream error event, if the stream ended in one.
    stream_error: Option<String>,
}

fn parse_args(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("tool arguments are not JSON ({e}): {s:?}"))
}

fn read_chat(resp: &Response, stream: bool, ctx: &str) -> Seen {
    let mut seen = Seen::default();
    if !stream {
        let v = resp.json();
        let m = &v["choices"][0]["message"];
        assert_eq!(m["role"], "assistant", "{ctx}");
        seen.text = m["content"].as_str().unwrap_or("").to_string();
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            assert_eq!(c["type"], "function", "{ctx}");
            assert!(c["id"].as_str().is_some_and(|i| !i.is_empty()), "{ctx}");
            seen.tool_calls.push((
                c["function"]["name"].as_str().unwrap().into(),
                parse_args(c["function"]["arguments"].as_str().unwrap()),
            ));
        }
        seen.stop = v["choices"][0]["finish_reason"].as_str().map(chat_stop);
        assert_eq!(v["object"], "chat.completion", "{ctx}");
        return seen;
    }
    let events = resp.events();
    let mut roles = 0;
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut ended = false;
    for (i, (_, data)) in events.iter().enumerate() {
        if data == "[DONE]" {
            assert_eq!(i, events.len() - 1, "{ctx}: [DONE] is last");
            ended = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        if let Some(e) = v.get("error") {
            seen.stream_error = e["message"].as_str().map(str::to_string);
            assert_eq!(i, events.len() - 1, "{ctx}: the error ends the stream");
            continue;
        }
        assert_eq!(v["object"], "chat.completion.chunk", "{ctx}");
        for ch in v["choices"].as_array().unwrap() {
            let d = &ch["delta"];
            if d.get("role").is_some() {
                roles += 1;
            }
            if let Some(t) = d["content"].as_str() {
                seen.text.push_str(t);
            }
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let idx = tc["index"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{ctx}: tool call delta without index"))
                    as usize;
                assert!(
                    tc.get("function").is_some(),
                    "{ctx}: every tool call delta has a function object"
                );
                if idx == calls.len() {
                    assert!(
                        tc["id"].is_string() && tc["function"]["name"].is_string(),
                        "{ctx}: first delta names the call"
                    );
                    calls.push((
                        tc["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                } else {
                    assert!(
                        tc.get("id").is_none() && tc["function"].get("name").is_none(),
                        "{ctx}: id and name only once"
                    );
                }
                calls[idx]
                    .1
                    .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
            if let Some(f) = ch["finish_reason"].as_str() {
                seen.stop = Some(chat_stop(f));
            }
        }
    }
    assert!(roles <= 1, "{ctx}: role sent once");
    if seen.stream_error.is_none() {
        assert!(ended, "{ctx}: ends with [DONE]");
    }
    seen.tool_calls = calls
        .into_iter()
        .map(|(n, a)| (n, parse_args(&a)))
        .collect();
    seen
}

fn chat_stop(f: &str) -> String {
    match f {
        "stop" => "end_turn",
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        other => other,
    }
    .to_string()
}

fn read_responses(resp: &Response, stream: bool, ctx: &str) -> Seen {
    let mut seen = Seen::default();
    let final_response = if !stream {
        resp.json()
    } else {
        let events = resp.events();
        assert_eq!(
            events[0].0.as_deref(),
            Some("response.created"),
            "{ctx}: response.created first"
        );
        let mut calls: Vec<(u64, String, String)> = Vec::new();
        let mut last = Value::Null;
        for (i, (name, data)) in events.iter().enumerate() {
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(
                v["sequence_number"], i as u64,
                "{ctx}: sequence numbers rise from 0"
            );
            assert_eq!(
                name.as_deref(),
                v["type"].as_str(),
                "{ctx}: event name repeats the type"
            );
            match v["type"].as_str().unwrap() {
                "response.output_text.delta" => {
                    assert_eq!(v["logprobs"], json!([]), "{ctx}");
                    seen.text.push_str(v["delta"].as_str().unwrap());
                }
                "response.output_item.added" if v["item"]["type"] == "function_call" => {
                    assert_eq!(v["item"]["arguments"], "", "{ctx}");
                    calls.push((
                        v["output_index"].as_u64().unwrap(),
                        v["item"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                "response.function_call_arguments.delta" => {
                    let c = calls
                        .iter_mut()
                        .find(|c| c.0 == v["output_index"].as_u64().unwrap())
                        .expect("delta for an open call");
                    c.2.push_str(v["delta"].as_str().unwrap());
                }
                "error" => seen.stream_error = v["message"].as_str().map(str::to_string),
                "response.failed" => {
                    seen.stream_error = seen
                        .stream_error
                        .take()
                        .or(v["response"]["error"]["message"]
                            .as_str()
                            .map(str::to_string));
                    assert_eq!(i, events.len() - 1, "{ctx}: response.failed is last");
                }
                "response.completed" | "response.incomplete" => {
                    assert_eq!(i, events.len() - 1, "{ctx}: the terminal event is last");
                    last = v["response"].clone();
                }
                _ => {}
            }
        }
        if seen.stream_error.is_some() {
            return seen;
        }
        seen.tool_calls = calls
            .iter()
            .map(|(_, n, a)| (n.clone(), parse_args(a)))
            .collect();
        let streamed_text = std::mem::take(&mut seen.text);
        let streamed_calls = std::mem::take(&mut seen.tool_calls);
        let full = read_output(&last, &mut seen, ctx);
        assert_eq!(
            seen.text, streamed_text,
            "{ctx}: completed output matches the deltas"
        );
        assert_eq!(seen.tool_calls, streamed_calls, "{ctx}");
        return full;
    };
    read_output(&final_response, &mut seen, ctx)
}

fn read_output(r: &Value, seen: &mut Seen, ctx: &str) -> Seen {
    assert_eq!(r["object"], "response", "{ctx}");
    assert!(
        r["usage"]["input_tokens_details"].is_object()
            && r["usage"]["output_tokens_details"].is_object(),
        "{ctx}"
    );
    let mut out = Seen::default();
    let mut has_calls = false;
    for item in r["output"].as_array().unwrap() {
        match item["type"].as_str().unwrap() {
            "message" => {
                for c in item["content"].as_array().unwrap() {
                    assert_eq!(c["annotations"], json!([]), "{ctx}");
                    out.text.push_str(c["text"].as_str().unwrap_or(""));
                }
            }
            "function_call" => {
                has_calls = true;
                out.tool_calls.push((
                    item["name"].as_str().unwrap().into(),
                    parse_args(item["arguments"].as_str().unwrap()),
                ));
            }
            _ => {}
        }
    }
    out.stop = Some(match (r["status"].as_str().unwrap(), has_calls) {
        ("completed", true) => "tool_use".into(),
        ("completed", false) => "end_turn".into(),
        ("incomplete", _) => "max_tokens".into(),
        (other, _) => other.into(),
    });
    seen.text = out.text.clone();
    seen.tool_calls = out.tool_calls.clone();
    out
}

fn read_messages(resp: &Response, stream: bool, ctx: &str) -> Seen {
    let mut seen = Seen::default();
    if !stream {
        let v = resp.json();
        assert_eq!(v["type"], "message", "{ctx}");
        for b in v["content"].as_array().unwrap() {
            match b["type"].as_str().unwrap() {
                "text" => seen.text.push_str(b["text"].as_str().unwrap()),
                "tool_use" => seen
                    .tool_calls
                    .push((b["name"].as_str().unwrap().into(), b["input"].clone())),
                _ => {}
            }
        }
        seen.stop = v["stop_reason"].as_str().map(str::to_string);
        return seen;
    }
    let events = resp.events();
    assert_eq!(
        events[0].0.as_deref(),
        Some("message_start"),
        "{ctx}: message_start first"
    );
    let start: Value = serde_json::from_str(&events[0].1).unwrap();
    for k in ["id", "model", "usage"] {
        assert!(
            !start["message"][k].is_null(),
            "{ctx}: message_start skeleton has {k}"
        );
    }
    assert_eq!(start["message"]["content"], json!([]), "{ctx}");
    let mut blocks: Vec<(String, String, String)> = Vec::new(); // (type, name, text or json)
    let mut open: Option<usize> = None;
    for (i, (name, data)) in events.iter().enumerate() {
        let v: Value = serde_json::from_str(data).unwrap();
        let ty = name
            .clone()
            .expect("every Messages event has an event: line");
        assert_eq!(
            v["type"].as_str(),
            Some(ty.as_str()),
            "{ctx}: type repeated in data"
        );
        match ty.as_str() {
            "content_block_start" => {
                assert!(open.is_none(), "{ctx}: previous block closed first");
                assert_eq!(
                    v["index"],
                    blocks.len() as u64,
                    "{ctx}: contiguous block indices"
                );
                let cb = &v["content_block"];
                if cb["type"] == "tool_use" {
                    assert_eq!(cb["input"], json!({}), "{ctx}");
                }
                blocks.push((
                    cb["type"].as_str().unwrap().into(),
                    cb["name"].as_str().unwrap_or("").into(),
                    String::new(),
                ));
                open = Some(blocks.len() - 1);
            }
            "content_block_delta" => {
                let idx = v["index"].as_u64().unwrap() as usize;
                let d = &v["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => blocks[idx].2.push_str(d["text"].as_str().unwrap()),
                    "input_json_delta" => {
                        blocks[idx].2.push_str(d["partial_json"].as_str().unwrap())
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                assert_eq!(Some(v["index"].as_u64().unwrap() as usize), open, "{ctx}");
                open = None;
            }
            "message_delta" => {
                seen.stop = v["delta"]["stop_reason"].as_str().map(str::to_string);
                assert!(
                    v["usage"]["output_tokens"].is_u64(),
                    "{ctx}: cumulative output tokens"
                );
            }
            "message_stop" => assert_eq!(i, events.len() - 1, "{ctx}: message_stop last"),
            "error" => {
                seen.stream_error = v["error"]["message"].as_str().map(str::to_string);
                assert_eq!(i, events.len() - 1, "{ctx}: the error ends the stream");
            }
            "ping" => {}
            "message_start" => assert_eq!(i, 0, "{ctx}: one message_start"),
            other => panic!("{ctx}: unexpected event {other}"),
        }
    }
    for (ty, name, content) in blocks {
        match ty.as_str() {
            "text" => seen.text.push_str(&content),
            "tool_use" => seen.tool_calls.push((
                name,
                if content.is_empty() {
                    json!({})
                } else {
                    parse_args(&content)
                },
            )),
            _ => {}
        }
    }
    seen
}

/// The SSE events of a body, CRLF line ends taken as LF (Gemini's upstream chunks end in `\r\n\r\n`).
fn sse_events(resp: &Response) -> Vec<(Option<String>, String)> {
    parse_sse(&resp.text().replace("\r\n", "\n"))
}

fn gemini_stop(reason: &str, calls: bool) -> String {
    match (reason, calls) {
        ("STOP", true) => "tool_use".into(),
        ("STOP", false) => "end_turn".into(),
        ("MAX_TOKENS", _) => "max_tokens".into(),
        (other, _) => other.into(),
    }
}

/// The text (thoughts left out) and function calls of a candidate's parts.
fn gemini_parts(candidate: &Value, seen: &mut Seen, ctx: &str) {
    if candidate.get("content").is_some() {
        assert_eq!(candidate["content"]["role"], "model", "{ctx}");
    }
    for p in candidate["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if p["thought"] == true {
            continue;
        }
        if let Some(t) = p["text"].as_str() {
            seen.text.push_str(t);
        }
        if let Some(f) = p.get("functionCall") {
            assert!(f["args"].is_object(), "{ctx}: args are an object");
            seen.tool_calls
                .push((f["name"].as_str().unwrap().into(), f["args"].clone()));
        }
    }
}

fn read_gemini(resp: &Response, stream: bool, ctx: &str) -> Seen {
    let mut seen = Seen::default();
    if !stream {
        let v = resp.json();
        let c = &v["candidates"][0];
        gemini_parts(c, &mut seen, ctx);
        let reason = c["finishReason"].as_str().expect("finishReason");
        seen.stop = Some(gemini_stop(reason, !seen.tool_calls.is_empty()));
        assert!(v["usageMetadata"]["promptTokenCount"].is_u64(), "{ctx}");
        return seen;
    }
    let events = sse_events(resp);
    for (i, (name, data)) in events.iter().enumerate() {
        assert!(name.is_none(), "{ctx}: Gemini chunks have no event name");
        let v: Value = serde_json::from_str(data).unwrap();
        if let Some(e) = v.get("error") {
            seen.stream_error = e["message"].as_str().map(str::to_string);
            assert!(e["status"].is_string() && e["code"].is_u64(), "{ctx}: {e}");
            assert_eq!(i, events.len() - 1, "{ctx}: the error ends the stream");
            continue;
        }
        let c = &v["candidates"][0];
        gemini_parts(c, &mut seen, ctx);
        if let Some(reason) = c["finishReason"].as_str() {
            assert_eq!(
                i,
                events.len() - 1,
                "{ctx}: the finish reason is in the last chunk"
            );
            assert!(
                v["usageMetadata"].is_object(),
                "{ctx}: usage in the last chunk"
            );
            seen.stop = Some(gemini_stop(reason, !seen.tool_calls.is_empty()));
        }
    }
    if seen.stream_error.is_none() {
        assert!(
            seen.stop.is_some(),
            "{ctx}: a chunk with finishReason ends the stream"
        );
    }
    seen
}

/// System text, user text, tool names, tool results, call ids, structured output: from an upstream body.
fn upstream_view(upstream: &str, body: &Value) -> Value {
    let mut system = String::new();
    let mut user = String::new();
    let tools: Vec<Value>;
    let mut results = String::new();
    let mut ids = Vec::new();
    let text_of = |c: &Value| -> String {
        match c {
            Value::String(s) => s.clone(),
            Value::Array(a) => a
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    };
    let schema;
    match upstream {
        "chat" => {
            for m in body["messages"].as_array().unwrap() {
                match m["role"].as_str().unwrap() {
                    "system" | "developer" => system.push_str(&text_of(&m["content"])),
                    "user" => user.push_str(&text_of(&m["content"])),
                    "tool" => {
                        results.push_str(&text_of(&m["content"]));
                        ids.push(m["tool_call_id"].as_str().unwrap().to_string());
                    }
                    _ => {}
                }
            }
            tools = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["function"]["name"].clone())
                .collect();
            schema = body["response_format"]["type"] == "json_schema";
        }
        "responses" => {
            system.push_str(body["instructions"].as_str().unwrap_or(""));
            match &body["input"] {
                Value::String(s) => user.push_str(s),
                Value::Array(items) => {
                    for it in items {
                        match (
                            it["type"].as_str().unwrap_or("message"),
                            it["role"].as_str(),
                        ) {
                            ("message", Some("system" | "developer")) => {
                                system.push_str(&text_of(&it["content"]))
                            }
                            ("message", Some("user")) => user.push_str(&text_of(&it["content"])),
                            ("function_call_output", _) => {
                                results.push_str(&text_of(&it["output"]));
                                ids.push(it["call_id"].as_str().unwrap().to_string());
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            tools = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["name"].clone())
                .collect();
            schema = body["text"]["format"]["type"] == "json_schema";
        }
        "gemini" => {
            let parts_text = |c: &Value| -> String {
                c["parts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["text"].as_str())
                    .collect()
            };
            system = parts_text(&body["systemInstruction"]);
            for c in body["contents"].as_array().unwrap() {
                if c["role"] == "model" {
                    continue;
                }
                user.push_str(&parts_text(c));
                for p in c["parts"].as_array().into_iter().flatten() {
                    if let Some(r) = p.get("functionResponse") {
                        results.push_str(r["response"]["output"].as_str().unwrap_or(""));
                        ids.push(r["id"].as_str().unwrap_or("").to_string());
                    }
                }
            }
            tools = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| {
                    t["functionDeclarations"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .map(|d| d["name"].clone())
                .collect();
            let g = &body["generationConfig"];
            schema = g["responseJsonSchema"].is_object() || g["responseSchema"].is_object();
            assert!(body.get("model").is_none(), "the model is in the path");
        }
        _ => {
            system = text_of(&body["system"]);
            for m in body["messages"].as_array().unwrap() {
                if m["role"] != "user" {
                    continue;
                }
                match &m["content"] {
                    Value::String(s) => user.push_str(s),
                    Value::Array(blocks) => {
                        for b in blocks {
                            match b["type"].as_str().unwrap() {
                                "text" => user.push_str(b["text"].as_str().unwrap()),
                                "tool_result" => {
                                    results.push_str(&text_of(&b["content"]));
                                    ids.push(b["tool_use_id"].as_str().unwrap().to_string());
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            tools = body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| t["name"].clone())
                .collect();
            schema = body["output_config"]["format"]["type"] == "json_schema";
            assert!(
                body["max_tokens"].is_u64(),
                "Messages upstreams always get max_tokens"
            );
        }
    }
    json!({"system": system, "user": user, "tools": tools, "tool_result": results, "tool_call_ids": ids, "json_schema": schema})
}

fn run_case(
    gw: &Gateway,
    fake: &FakeUpstream,
    queue: &Mutex<VecDeque<Reply>>,
    case: &Path,
    client: &str,
    upstream: &str,
) {
    let name = case.file_name().unwrap().to_str().unwrap();
    let ctx = format!("{name}: {client} client -> {upstream} upstream");
    let expect: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("expect.json")).unwrap()).unwrap();
    let read = |p: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(case.join(p)).unwrap()).unwrap()
    };
    let mut request = read(&format!("{client}.request.json"));
    // Every case streams in all protocols or in none; a Gemini request says it in its path.
    let stream = read("messages.request.json")["stream"]
        .as_bool()
        .unwrap_or(false);
    if client != "gemini" {
        request["model"] = json!(model_for(upstream));
    }
    let sse = case.join(format!("{upstream}.upstream.sse"));
    let reply = if sse.exists() {
        Reply::sse(split_sse_blocks(&std::fs::read_to_string(sse).unwrap()))
    } else {
        let up: Value = serde_json::from_str(
            &std::fs::read_to_string(case.join(format!("{upstream}.upstream.json"))).unwrap(),
        )
        .unwrap();
        let mut headers: Vec<(String, String)> =
            vec![("content-type".into(), "application/json".into())];
        for (k, v) in up["headers"].as_object().into_iter().flatten() {
            headers.push((k.clone(), v.as_str().unwrap().to_string()));
        }
        Reply::Json {
            status: up["status"].as_u64().unwrap_or(200) as u16,
            headers,
            body: up["body"].to_string().into_bytes(),
        }
    };
    queue.lock().unwrap().push_back(reply);
    let before = fake.received().len();
    let resp = post(
        gw,
        client,
        &endpoint(client, model_for(upstream), stream),
        &request,
    );
    let ctx = format!("{ctx}\n{}", resp.text());
    assert_eq!(
        resp.status as u64,
        expect["status"].as_u64().unwrap(),
        "{ctx}"
    );
    let rid = resp.header("x-request-id").unwrap().to_string();

    // What the upstream received.
    let got = fake.received();
    assert_eq!(got.len(), before + 1, "{ctx}");
    let up = got.last().unwrap();
    let upstream_model = format!("real-{upstream}-model");
    assert_eq!(
        up.path,
        endpoint(upstream, &upstream_model, stream),
        "{ctx}"
    );
    let body = up.json();
    if upstream != "gemini" {
        assert_eq!(body["model"], upstream_model, "{ctx}");
    }
    assert!(
        !format!("{} {:?}{}", up.path, up.headers, body).contains(&gw.key),
        "{ctx}: client key forwarded"
    );
    if upstream == "messages" {
        assert_eq!(up.header("x-api-key"), Some(UPSTREAM_KEY), "{ctx}");
    } else if upstream == "gemini" {
        assert_eq!(up.header("x-goog-api-key"), Some(UPSTREAM_KEY), "{ctx}");
        assert!(up.header("authorization").is_none(), "{ctx}");
    } else {
        assert_eq!(
            up.header("authorization"),
            Some(format!("Bearer {UPSTREAM_KEY}").as_str()),
            "{ctx}"
        );
    }
    if stream && upstream != "gemini" {
        assert_eq!(body["stream"], true, "{ctx}");
        if upstream == "chat" {
            assert_eq!(
                body["stream_options"]["include_usage"], true,
                "{ctx}: usage requested upstream"
            );
        }
    }
    let view = upstream_view(upstream, &body);
    let sees = &expect["upstream_sees"];
    for key in ["system", "user", "tool_result"] {
        if let Some(s) = sees[key].as_str() {
            assert!(
                view[key].as_str().unwrap().contains(s),
                "{ctx}: upstream {key} lacks {s:?}: {view}"
            );
        }
    }
    if let Some(tools) = sees.get("tools") {
        assert_eq!(&view["tools"], tools, "{ctx}");
    }
    if let Some(id) = sees["tool_call_id"].as_str() {
        assert!(
            view["tool_call_ids"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i == id),
            "{ctx}: call id carried: {view}"
        );
    }
    if sees["json_schema"] == true {
        assert_eq!(
            view["json_schema"], true,
            "{ctx}: structured output requested upstream"
        );
    }

    // What the client read.
    if resp.status != 200 {
        let v = resp.json();
        let msg = if client == "messages" {
            assert_eq!(v["type"], "error", "{ctx}");
            v["error"]["message"].as_str().unwrap().to_string()
        } else {
            v["error"]["message"].as_str().unwrap().to_string()
        };
        assert!(
            msg.contains(expect["error"]["message"].as_str().unwrap()),
            "{ctx}"
        );
        assert_eq!(
            resp.header("retry-after"),
            expect["error"]["retry_after"].as_str(),
            "{ctx}"
        );
        return;
    }
    if stream {
        assert!(
            resp.header("content-type")
                .unwrap()
                .starts_with("text/event-stream"),
            "{ctx}"
        );
    }
    let seen = match client {
        "chat" => read_chat(&resp, stream, &ctx),
        "responses" => read_responses(&resp, stream, &ctx),
        "gemini" => read_gemini(&resp, stream, &ctx),
        _ => read_messages(&resp, stream, &ctx),
    };
    assert_eq!(seen.text, expect["text"].as_str().unwrap_or(""), "{ctx}");
    if let Some(err) = expect["error"]["message"].as_str() {
        let got = seen
            .stream_error
            .clone()
            .unwrap_or_else(|| panic!("{ctx}: no in-stream error"));
        assert!(got.contains(err), "{ctx}: {got}");
        let line = gw.log_line(&rid);
        assert!(line.contains("error="), "{ctx}: {line}");
        return;
    }
    assert!(seen.stream_error.is_none(), "{ctx}");
    let want_calls: Vec<(String, Value)> = expect["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["arguments"].clone(),
            )
        })
        .collect();
    assert_eq!(seen.tool_calls, want_calls, "{ctx}");
    if let Some(stop) = expect["stop"].as_str() {
        assert_eq!(seen.stop.as_deref(), Some(stop), "{ctx}");
    }
    if let Some(u) = expect.get("usage") {
        let line = gw.log_line(&rid);
        assert!(line.contains(&format!(" in={} ", u["in"])), "{ctx}: {line}");
        assert!(
            line.contains(&format!(" out={} ", u["out"])),
            "{ctx}: {line}"
        );
        assert!(!line.contains("estimated"), "{ctx}: {line}");
    }
}

fn run_matrix(cases: &[&str]) {
    let queue: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
    let q = queue.clone();
    let fake = FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
    let gw = gateway(&fake);
    for case in cases {
        let dir = fixtures().join("translate").join(case);
        for client in PROTOCOLS {
            for upstream in PROTOCOLS {
                run_case(&gw, &fake, &queue, &dir, client, upstream);
            }
        }
    }
}

#[test]
fn text_cases() {
    run_matrix(&["text", "stream_text"]);
}

#[test]
fn tool_cases() {
    run_matrix(&[
        "tool_call",
        "stream_tool_call",
        "stream_parallel_tool_calls",
        "tool_round_trip",
    ]);
}

#[test]
fn structured_output_case() {
    run_matrix(&["structured_output"]);
}

#[test]
fn error_cases() {
    run_matrix(&["upstream_error", "stream_error"]);
}

fn fake_and_gateway() -> (FakeUpstream, Arc<Mutex<VecDeque<Reply>>>, Gateway) {
    let queue: Arc<Mutex<VecDeque<Reply>>> = Arc::new(Mutex::new(VecDeque::new()));
    let q = queue.clone();
    let fake = FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
    let gw = Gateway::start_with_fake(fake.addr, "");
    (fake, queue, gw)
}

/// What cannot be translated is refused with 400 naming the parameter, before any upstream call.
#[test]
fn untranslatable_parameters_are_refused_by_name() {
    let (fake, _queue, gw) = fake_and_gateway();
    let cases = [
        (
            "/v1/responses",
            json!({"model": "m-chat", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            "/v1/responses",
            json!({"model": "m-messages", "input": "hi", "conversation": "conv_1"}),
            "conversation",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m-messages", "n": 2, "messages": [{"role": "user", "content": "hi"}]}),
            "n",
        ),
        (
            "/v1/messages",
            json!({"model": "m-responses", "max_tokens": 10, "stop_sequences": ["END"], "messages": [{"role": "user", "content": "hi"}]}),
            "stop",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m-responses", "stop": ["END"], "messages": [{"role": "user", "content": "hi"}]}),
            "stop",
        ),
    ];
    for (path, body, param) in cases {
        let r = gw.post(path, &body);
        assert_eq!(r.status, 400, "{path} {body}: {}", r.text());
        let v = r.json();
        let msg = v["error"]["message"].clone();
        assert!(msg.as_str().unwrap().contains(param), "{msg}");
        if path != "/v1/messages" {
            assert_eq!(v["error"]["param"], param);
        }
    }
    assert!(fake.received().is_empty(), "nothing reached the upstream");
}

/// Codex CLI's tools: `namespace` groups become plain functions with reversible names, hosted tools the
/// upstream cannot run are left out and named in a header; a call to a namespaced function comes back to
/// the client with its namespace.
#[test]
fn codex_tool_shapes_are_bridged() {
    let (fake, queue, gw) = fake_and_gateway();
    let body = json!({
        "model": "m-chat",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "list files"}]}],
        "tools": [
            {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
            {"type": "namespace", "name": "fs", "description": "File tools", "tools": [
                {"type": "function", "name": "list", "description": "List a directory", "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}}}
            ]},
            {"type": "web_search"}
        ],
        "tool_choice": "auto", "parallel_tool_calls": true, "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "reasoning": {"summary": "auto"}
    });
    queue.lock().unwrap().push_back(Reply::json(200, &json!({
        "id": "c1", "object": "chat.completion", "created": 1, "model": "real-chat-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "fs__list", "arguments": "{\"dir\":\".\"}"}}]}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}
    })));
    let r = gw.post("/v1/responses", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-tollgate-dropped-tools"), Some("web_search"));
    let sent = fake.last().json();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shell", "fs__list"]);
    let v = r.json();
    let call = &v["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "list");
    assert_eq!(call["namespace"], "fs");
    assert_eq!(call["call_id"], "call_9");
    let rid = r.header("x-request-id").unwrap().to_string();
    wait_for(
        || gw.all_logs().contains("left out hosted tools"),
        "the log line naming the dropped tool",
    );
    assert!(gw.log_line(&rid).contains(" in=30 "));

    // The next turn sends the call back with its namespace; the upstream sees the flattened name again.
    let mut next = body.clone();
    next["input"] = json!([
        {"role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "function_call", "call_id": "call_9", "name": "list", "namespace": "fs", "arguments": "{\"dir\":\".\"}"},
        {"type": "function_call_output", "call_id": "call_9", "output": "a.txt b.txt"}
    ]);
    queue.lock().unwrap().push_back(Reply::json(200, &json!({
        "id": "c2", "object": "chat.completion", "created": 1, "model": "real-chat-model",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Two files."}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}
    })));
    let r = gw.post("/v1/responses", &next);
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "fs__list");
    assert_eq!(
        msgs[2],
        json!({"role": "tool", "tool_call_id": "call_9", "content": "a.txt b.txt"})
    );
}

/// An upstream that reports no usage: tokens are estimated, the client still gets usage, and the record is
/// marked estimated.
#[test]
fn missing_usage_is_estimated_and_marked() {
    let (_fake, queue, gw) = fake_and_gateway();
    let chunks = [
        r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello there, friend"}}]}"#,
        r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ];
    queue.lock().unwrap().push_back(Reply::sse(
        chunks
            .iter()
            .map(|c| format!("data: {c}\n\n").into_bytes())
            .collect(),
    ));
    let r = gw.post("/v1/messages", &json!({"model": "m-chat", "max_tokens": 50, "stream": true, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 200);
    let delta = r
        .events()
        .into_iter()
        .find(|(e, _)| e.as_deref() == Some("message_delta"))
        .expect("message_delta");
    let v: Value = serde_json::from_str(&delta.1).unwrap();
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);
    let line = gw.log_line(r.header("x-request-id").unwrap());
    assert!(line.contains("estimated=true"), "{line}");
}

/// Images cross over as URL or inline data, in each protocol's own shape.
#[test]
fn images_are_carried_across() {
    let (fake, queue, gw) = fake_and_gateway();
    let answer = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "real-messages-model",
        "content": [{"type": "text", "text": "A cat."}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 5, "output_tokens": 2}});
    queue.lock().unwrap().push_back(Reply::json(200, &answer));
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m-messages", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
        ]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    let blocks = &sent["messages"][0]["content"];
    assert_eq!(
        blocks[1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="})
    );
    assert_eq!(
        blocks[2]["source"],
        json!({"type": "url", "url": "https://example.com/cat.jpg"})
    );

    queue.lock().unwrap().push_back(Reply::json(200, &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "A cat."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})));
    let r = gw.post("/v1/messages", &json!({"model": "m-chat", "max_tokens": 20, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "text", "text": "What is this?"}
    ]}]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    assert_eq!(
        sent["messages"][0]["content"][0],
        json!({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}})
    );
    assert_eq!(r.json()["content"][0]["text"], "A cat.");
}

/// What Claude Code sends (PROTOCOLS.md §9 and tests/agents): system blocks, a trailing mid-conversation
/// system message, adaptive thinking with effort, max_tokens 32000, a deferred tool, a long user id. A Chat
/// upstream gets one leading system message, the mid-conversation one in place, an output limit within the
/// model's, no reasoning parameter for a model not marked as reasoning, and no deferred tool.
#[test]
fn claude_code_shapes_are_bridged() {
    let (fake, queue, gw) = fake_and_gateway();
    queue.lock().unwrap().push_back(Reply::json(200, &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ready"}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51}})));
    let body = json!({
        "model": "m-chat", "max_tokens": 32000, "stream": false,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2"}, {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Reply with the word ready"}]},
            {"role": "system", "content": "Reminder: be brief."}
        ],
        "tools": [
            {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
            {"name": "DeferredToolPlaceholder", "description": "x", "input_schema": {"type": "object"}, "defer_loading": true}
        ],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
        "metadata": {"user_id": "{\"device_id\":\"0123456789abcdef0123456789abcdef\",\"account_uuid\":\"\",\"session_id\":\"5f0c\"}"}
    });
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request(
        "POST",
        "/v1/messages?beta=true",
        &[
            ("x-api-key", &gw.key),
            ("authorization", &auth),
            ("anthropic-version", "2023-06-01"),
            (
                "anthropic-beta",
                "claude-code-20250219,interleaved-thinking-2025-05-14",
            ),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["content"][0]["text"], "ready");
    let up = fake.last();
    assert!(
        up.header("anthropic-beta").is_none(),
        "beta headers go to Anthropic upstreams only"
    );
    let sent = up.json();
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(
        msgs[0]["content"],
        "x-anthropic-billing-header: cc_version=2\n\nYou are Claude Code."
    );
    assert_eq!(msgs.iter().filter(|m| m["role"] == "system").count(), 2);
    assert_eq!(
        msgs[2],
        json!({"role": "system", "content": "Reminder: be brief."})
    );
    assert_eq!(
        sent["max_tokens"], 8192,
        "clamped to the model's max_output_tokens"
    );
    assert!(sent.get("reasoning_effort").is_none());
    let tools: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["Read"]);
    assert!(sent["user"].as_str().unwrap().chars().count() <= 64);

    // count_tokens: estimated for a non-Anthropic upstream, forwarded to an Anthropic one.
    let count = json!({"model": "m-chat", "messages": [{"role": "user", "content": "How many tokens is this?"}], "system": "Be brief."});
    let r = gw.request(
        "POST",
        "/v1/messages/count_tokens",
        &[("x-api-key", &gw.key), ("anthropic-version", "2023-06-01")],
        count.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 5);
    queue
        .lock()
        .unwrap()
        .push_back(Reply::json(200, &json!({"input_tokens": 1234})));
    let mut count = count;
    count["model"] = json!("m-messages");
    let r = gw.request(
        "POST",
        "/v1/messages/count_tokens",
        &[("x-api-key", &gw.key), ("anthropic-version", "2023-06-01")],
        count.to_string().as_bytes(),
    );
    assert_eq!(r.json()["input_tokens"], 1234);
    let up = fake.last();
    assert_eq!(up.path, "/v1/messages/count_tokens");
    assert_eq!(up.json()["model"], "real-messages-model");

    // Errors a retry cannot fix say so, so SDKs do not retry them.
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "nope", "messages": []}),
    );
    assert_eq!(r.header("x-should-retry"), Some("false"));
}
