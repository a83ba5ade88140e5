//! Answers are never altered: what the model wrote reaches the client byte for byte on every path (the
//! built-in model, passthrough plain and streamed, translation plain and streamed, all three client
//! protocols), whatever the upstream credentials are. The one exception: an upstream credential that is a
//! real secret, echoed by an upstream, is replaced by `[redacted]` wherever it appears, in one piece or split
//! across stream events, and nothing around it changes. (The scrub of error texts, records and logs:
//! tests/security.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::upstream::{split_sse_blocks, FakeUpstream, Recorded, Reply};
use common::*;
use serde_json::{json, Value};

/// Placeholder keys local servers document; neither is a secret.
const LLAMA_KEY: &str = "sk-no-key-required";
const OLLAMA_KEY: &str = "ollama";

/// Ordinary words a scrub of masked echoes used to take for the keys above.
const WORDS: &str =
    "The inspired crew required ollama: sk-no-key-required is what llama.cpp wants, \
                     nothing expired, nobody fired, all acquired. ollama!";

/// What an upstream writes: answer text, reasoning and one tool call's arguments, each as the pieces its
/// stream sends them in (a plain answer sends them joined).
#[derive(Clone)]
struct Script {
    text: Vec<String>,
    reasoning: Vec<String>,
    args: Vec<String>,
}

impl Script {
    fn text(&self) -> String {
        self.text.concat()
    }
    fn reasoning(&self) -> String {
        self.reasoning.concat()
    }
    fn args(&self) -> String {
        self.args.concat()
    }
}

/// `s` in pieces of `n` bytes (ASCII), so words are split across events.
fn pieces(s: &str, n: usize) -> Vec<String> {
    s.as_bytes()
        .chunks(n)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect()
}

/// `s` cut at the byte offsets `cuts`.
fn cut_at(s: &str, cuts: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(s[from..c].to_string());
        from = c;
    }
    out.push(s[from..].to_string());
    out
}

fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n").into_bytes(),
        None => format!("data: {data}\n\n").into_bytes(),
    }
}

// ---- what the fake upstream answers, per protocol ----

fn chat_plain(s: &Script) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "real-chat-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": s.text(), "reasoning_content": s.reasoning(),
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "lookup", "arguments": s.args()}}]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 40, "total_tokens": 49}
    })
}

fn chat_stream(s: &Script) -> Vec<Vec<u8>> {
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                    "model": "real-chat-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in &s.reasoning {
        out.push(chunk(json!({"reasoning_content": p}), Value::Null));
    }
    for p in &s.text {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    out.push(chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "lookup", "arguments": ""}}]}),
        Value::Null,
    ));
    for p in &s.args {
        out.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
            Value::Null,
        ));
    }
    out.push(chunk(json!({}), json!("tool_calls")));
    out.push(sse(
        None,
        &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                "model": "real-chat-model", "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 40, "total_tokens": 49}}),
    ));
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

fn responses_output(s: &Script) -> Value {
    json!([
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": s.reasoning()}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": s.text(), "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
         "arguments": s.args(), "status": "completed"}
    ])
}

fn responses_plain(s: &Script) -> Value {
    json!({"id": "resp_1", "object": "response", "created_at": 1700000000, "status": "completed",
           "model": "real-responses-model", "output": responses_output(s),
           "usage": {"input_tokens": 9, "output_tokens": 40, "total_tokens": 49}})
}

fn responses_stream(s: &Script) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut seq = 0;
    let mut ev = |out: &mut Vec<Vec<u8>>, name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        out.push(sse(Some(name), &data));
    };
    let head = json!({"id": "resp_1", "object": "response", "created_at": 1700000000,
                      "status": "in_progress", "model": "real-responses-model", "output": []});
    ev(&mut out, "response.created", json!({"response": head}));
    let items = responses_output(s);
    ev(
        &mut out,
        "response.output_item.added",
        json!({"output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
    );
    for p in &s.reasoning {
        ev(
            &mut out,
            "response.reasoning_summary_text.delta",
            json!({"item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": p}),
        );
    }
    ev(
        &mut out,
        "response.output_item.done",
        json!({"output_index": 0, "item": items[0]}),
    );
    ev(
        &mut out,
        "response.output_item.added",
        json!({"output_index": 1, "item": {"type": "message", "id": "msg_1", "role": "assistant",
                                            "status": "in_progress", "content": []}}),
    );
    for p in &s.text {
        ev(
            &mut out,
            "response.output_text.delta",
            json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "delta": p}),
        );
    }
    ev(
        &mut out,
        "response.output_text.done",
        json!({"item_id": "msg_1", "output_index": 1, "content_index": 0, "text": s.text()}),
    );
    ev(
        &mut out,
        "response.output_item.done",
        json!({"output_index": 1, "item": items[1]}),
    );
    ev(
        &mut out,
        "response.output_item.added",
        json!({"output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                                            "name": "lookup", "arguments": ""}}),
    );
    for p in &s.args {
        ev(
            &mut out,
            "response.function_call_arguments.delta",
            json!({"item_id": "fc_1", "output_index": 2, "delta": p}),
        );
    }
    ev(
        &mut out,
        "response.function_call_arguments.done",
        json!({"item_id": "fc_1", "output_index": 2, "arguments": s.args()}),
    );
    ev(
        &mut out,
        "response.output_item.done",
        json!({"output_index": 2, "item": items[2]}),
    );
    ev(
        &mut out,
        "response.completed",
        json!({"response": responses_plain(s)}),
    );
    out
}

fn messages_plain(s: &Script) -> Value {
    let input: Value = serde_json::from_str(&s.args()).unwrap();
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "real-messages-model",
           "content": [{"type": "thinking", "thinking": s.reasoning(), "signature": "sig"},
                       {"type": "text", "text": s.text()},
                       {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": input}],
           "stop_reason": "tool_use", "stop_sequence": null,
           "usage": {"input_tokens": 9, "output_tokens": 40}})
}

fn messages_stream(s: &Script) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        out.push(sse(Some(name), &data));
    };
    ev(
        "message_start",
        json!({"message": {"id": "msg_1", "type": "message", "role": "assistant",
                           "model": "real-messages-model", "content": [], "stop_reason": null,
                           "stop_sequence": null, "usage": {"input_tokens": 9, "output_tokens": 1}}}),
    );
    let blocks = [
        (
            json!({"type": "thinking", "thinking": "", "signature": ""}),
            "thinking_delta",
            "thinking",
            &s.reasoning,
        ),
        (
            json!({"type": "text", "text": ""}),
            "text_delta",
            "text",
            &s.text,
        ),
        (
            json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}),
            "input_json_delta",
            "partial_json",
            &s.args,
        ),
    ];
    for (index, (start, kind, field, parts)) in blocks.into_iter().enumerate() {
        ev(
            "content_block_start",
            json!({"index": index, "content_block": start}),
        );
        for p in parts {
            ev(
                "content_block_delta",
                json!({"index": index, "delta": {"type": kind, field: p}}),
            );
        }
        if index == 0 {
            ev(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
            );
        }
        ev("content_block_stop", json!({"index": index}));
    }
    ev(
        "message_delta",
        json!({"delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 40}}),
    );
    ev("message_stop", json!({}));
    out
}

/// The upstream's answer to a recorded request, as the fake writes it: the JSON body, or the stream's
/// event blocks.
enum Written {
    Plain(Vec<u8>),
    Stream(Vec<Vec<u8>>),
}

fn written(rec: &Recorded, s: &Script) -> Written {
    let stream = rec.json()["stream"] == true;
    let protocol = if rec.path.ends_with("/chat/completions") {
        "chat"
    } else if rec.path.ends_with("/responses") {
        "responses"
    } else {
        "messages"
    };
    match (protocol, stream) {
        ("chat", false) => Written::Plain(chat_plain(s).to_string().into_bytes()),
        ("chat", true) => Written::Stream(chat_stream(s)),
        ("responses", false) => Written::Plain(responses_plain(s).to_string().into_bytes()),
        ("responses", true) => Written::Stream(responses_stream(s)),
        (_, false) => Written::Plain(messages_plain(s).to_string().into_bytes()),
        (_, true) => Written::Stream(messages_stream(s)),
    }
}

fn reply(w: Written) -> Reply {
    match w {
        Written::Plain(body) => Reply::Json {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body,
        },
        Written::Stream(events) => Reply::sse(events),
    }
}

/// The credential the gateway sent the upstream.
fn sent_key(rec: &Recorded) -> String {
    rec.header("authorization")
        .map(|a| a.trim_start_matches("Bearer ").to_string())
        .or_else(|| rec.header("x-api-key").map(str::to_string))
        .unwrap_or_default()
}

// ---- the client's side ----

const PROTOCOLS: [(&str, &str); 3] = [
    ("chat", "/v1/chat/completions"),
    ("responses", "/v1/responses"),
    ("messages", "/v1/messages"),
];

/// The model served by an upstream of `protocol`'s kind in `standard_config`-like configs.
fn model_of(protocol: &str) -> &'static str {
    match protocol {
        "chat" => "m-chat",
        "responses" => "m-responses",
        _ => "m-messages",
    }
}

fn request(protocol: &str, model: &str, prompt: &str, stream: bool) -> Value {
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    match protocol {
        "chat" => {
            let mut b = json!({"model": model, "stream": stream,
                               "messages": [{"role": "user", "content": prompt}],
                               "tools": [{"type": "function",
                                          "function": {"name": "lookup", "parameters": schema}}]});
            if stream {
                b["stream_options"] = json!({"include_usage": true});
            }
            b
        }
        "responses" => json!({"model": model, "stream": stream, "input": prompt,
                              "tools": [{"type": "function", "name": "lookup", "parameters": schema}]}),
        _ => json!({"model": model, "stream": stream, "max_tokens": 4000,
                    "messages": [{"role": "user", "content": prompt}],
                    "tools": [{"name": "lookup", "input_schema": schema}]}),
    }
}

/// What a client of `protocol` reads: (answer text, reasoning, tool arguments), from a plain answer or the
/// stream's deltas.
fn read_answer(protocol: &str, r: &Response, stream: bool) -> (String, String, String) {
    let (mut text, mut reasoning, mut args) = (String::new(), String::new(), String::new());
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    if !stream {
        let v = r.json();
        match protocol {
            "chat" => {
                let m = &v["choices"][0]["message"];
                text = s(&m["content"]);
                reasoning = s(&m["reasoning_content"]);
                args = s(&m["tool_calls"][0]["function"]["arguments"]);
            }
            "responses" => {
                for item in v["output"].as_array().unwrap() {
                    match item["type"].as_str() {
                        Some("message") => {
                            for c in item["content"].as_array().unwrap() {
                                text.push_str(c["text"].as_str().unwrap_or(""));
                            }
                        }
                        Some("reasoning") => {
                            for part in ["summary", "content"] {
                                for c in item[part].as_array().into_iter().flatten() {
                                    reasoning.push_str(c["text"].as_str().unwrap_or(""));
                                }
                            }
                        }
                        Some("function_call") => args.push_str(&s(&item["arguments"])),
                        _ => {}
                    }
                }
            }
            _ => {
                for c in v["content"].as_array().unwrap() {
                    match c["type"].as_str() {
                        Some("text") => text.push_str(&s(&c["text"])),
                        Some("thinking") => reasoning.push_str(&s(&c["thinking"])),
                        Some("tool_use") => args.push_str(&c["input"].to_string()),
                        _ => {}
                    }
                }
            }
        }
        return (text, reasoning, args);
    }
    for (event, data) in r.events() {
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        match protocol {
            "chat" => {
                let d = &v["choices"][0]["delta"];
                text.push_str(&s(&d["content"]));
                reasoning.push_str(&s(&d["reasoning_content"]));
                args.push_str(&s(&d["tool_calls"][0]["function"]["arguments"]));
            }
            "responses" => match event.as_deref().unwrap_or("") {
                "response.output_text.delta" => text.push_str(&s(&v["delta"])),
                "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                    reasoning.push_str(&s(&v["delta"]))
                }
                "response.function_call_arguments.delta" => args.push_str(&s(&v["delta"])),
                _ => {}
            },
            _ => match v["delta"]["type"].as_str() {
                Some("text_delta") => text.push_str(&s(&v["delta"]["text"])),
                Some("thinking_delta") => reasoning.push_str(&s(&v["delta"]["thinking"])),
                Some("input_json_delta") => args.push_str(&s(&v["delta"]["partial_json"])),
                _ => {}
            },
        }
    }
    (text, reasoning, args)
}

/// Tool arguments compared as JSON (translation may re-encode them).
fn same_json(a: &str, b: &str) -> bool {
    serde_json::from_str::<Value>(a).ok() == serde_json::from_str::<Value>(b).ok()
}

/// Every string in every JSON value of a body (a plain answer, or each event of a stream), concatenated in
/// order: any way a client could put together what it received.
fn all_strings(r: &Response) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    match serde_json::from_slice::<Value>(&r.body) {
        Ok(v) => walk(&v, &mut out),
        Err(_) => {
            for (_, data) in r.events() {
                if let Ok(v) = serde_json::from_str::<Value>(&data) {
                    walk(&v, &mut out);
                }
            }
        }
    }
    out
}

// ---- placeholder keys: nothing is touched ----

/// A gateway whose upstream keys are the placeholders of llama.cpp and Ollama, with a fake upstream that
/// answers `script` on every protocol (the admin token, a real secret, is registered too, so the
/// credential redactor runs on every stream).
fn placeholder_gateway(script: Script) -> (Gateway, FakeUpstream) {
    let fake = FakeUpstream::start(move |rec| reply(written(rec, &script)));
    let dir = TempDir::new("unaltered");
    let f = fake.addr;
    let mut config = base_config(
        dir.path(),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    );
    config.push_str(&format!(
        r#"
[[upstreams]]
name = "mock"
kind = "mock"

[[models]]
name = "mock"
upstream = "mock"

[[upstreams]]
name = "chat-up"
kind = "openai-chat"
base_url = "http://{f}/v1"
api_key_env = "TG_TEST_LLAMA_KEY"

[[upstreams]]
name = "responses-up"
kind = "openai-responses"
base_url = "http://{f}/v1"
api_key_env = "TG_TEST_OLLAMA_KEY"

[[upstreams]]
name = "anthropic-up"
kind = "anthropic"
base_url = "http://{f}"
api_key_env = "TG_TEST_LLAMA_KEY"

[[models]]
name = "m-chat"
upstream = "chat-up"

[[models]]
name = "m-responses"
upstream = "responses-up"

[[models]]
name = "m-messages"
upstream = "anthropic-up"

[[groups]]
name = "default"
models = ["*"]
"#
    ));
    let env = [
        ("TG_TEST_LLAMA_KEY", LLAMA_KEY),
        ("TG_TEST_OLLAMA_KEY", OLLAMA_KEY),
    ];
    (Gateway::start_with_env(dir, &config, &env, None), fake)
}

fn ordinary_script() -> Script {
    Script {
        // Word by word, as tokenizers send them (" required" whole in one event).
        text: WORDS.split_inclusive(' ').map(str::to_string).collect(),
        reasoning: pieces("Was it required? The user inspired it; ollama fired.", 6),
        args: pieces(r#"{"q":"required inspired ollama sk-no-key-required"}"#, 7),
    }
}

/// Passthrough, plain and streamed, on all three protocols, with placeholder keys and words a masked-echo
/// scrub mistakes for them: the client gets exactly the bytes the upstream wrote.
#[test]
fn passthrough_answers_arrive_byte_for_byte_with_placeholder_keys() {
    let script = ordinary_script();
    let (gw, fake) = placeholder_gateway(script.clone());
    for (protocol, path) in PROTOCOLS {
        for stream in [false, true] {
            let ctx = format!("{protocol} stream={stream}");
            let r = gw.post(path, &request(protocol, model_of(protocol), "hi", stream));
            assert_eq!(r.status, 200, "{ctx}: {}", r.text());
            let sent = sent_key(&fake.last());
            assert!(
                sent == LLAMA_KEY || sent == OLLAMA_KEY,
                "{ctx}: the upstream got {sent:?}"
            );
            let expected = match written(&fake.last(), &script) {
                Written::Plain(body) => body,
                Written::Stream(events) => events.concat(),
            };
            assert_eq!(
                r.text(),
                String::from_utf8(expected).unwrap(),
                "{ctx}: not relayed byte for byte"
            );
            let (text, reasoning, args) = read_answer(protocol, &r, stream);
            assert_eq!(text, WORDS, "{ctx}");
            assert_eq!(reasoning, script.reasoning(), "{ctx}");
            assert!(same_json(&args, &script.args()), "{ctx}: {args}");
        }
    }
}

/// Translation, plain and streamed, into all three client protocols, and the built-in model: the text,
/// reasoning and tool arguments the model wrote reach the client exactly, placeholder keys or not.
#[test]
fn translated_and_mock_answers_are_the_models_words() {
    let script = ordinary_script();
    let (gw, _fake) = placeholder_gateway(script.clone());
    // Each client protocol from an upstream of another protocol.
    for ((protocol, path), upstream) in PROTOCOLS.into_iter().zip(["messages", "chat", "responses"])
    {
        for stream in [false, true] {
            let ctx = format!("{protocol} from {upstream} stream={stream}");
            let r = gw.post(path, &request(protocol, model_of(upstream), "hi", stream));
            assert_eq!(r.status, 200, "{ctx}: {}", r.text());
            assert!(!r.text().contains("[redacted]"), "{ctx}: {}", r.text());
            let (text, reasoning, args) = read_answer(protocol, &r, stream);
            assert_eq!(text, WORDS, "{ctx}");
            assert!(same_json(&args, &script.args()), "{ctx}: {args}");
            assert_eq!(reasoning, script.reasoning(), "{ctx}");
        }
    }
    // The built-in model repeats what it was told.
    for (protocol, path) in PROTOCOLS {
        for stream in [false, true] {
            let ctx = format!("mock {protocol} stream={stream}");
            let r = gw.post(path, &request(protocol, "mock", WORDS, stream));
            assert_eq!(r.status, 200, "{ctx}: {}", r.text());
            let (text, _, _) = read_answer(protocol, &r, stream);
            assert!(
                text.ends_with(&format!("You said: {WORDS}")),
                "{ctx}: {text}"
            );
        }
    }
}

// ---- a real secret echoed by the upstream ----

/// What the echoing upstream writes around the key (`cuts`: byte offsets into the key where its stream
/// splits it; none: one piece).
fn echo_script(key: &str, cuts: &[usize]) -> Script {
    let split = |before: &str, after: &str| {
        let whole = format!("{before}{key}{after}");
        let cuts: Vec<usize> = cuts.iter().map(|c| before.len() + c).collect();
        cut_at(&whole, &cuts)
    };
    Script {
        text: split("Your key is ", ". Keep it required and inspired."),
        reasoning: split("I must not repeat ", " here."),
        args: split(r#"{"q":""#, r#""}"#),
    }
}

/// What the client must read instead.
fn redacted_script() -> Script {
    Script {
        text: vec!["Your key is [redacted]. Keep it required and inspired.".into()],
        reasoning: vec!["I must not repeat [redacted] here.".into()],
        args: vec![r#"{"q":"[redacted]"}"#.into()],
    }
}

/// Where the echoing upstream splits the key: from the prompt (`cuts=9,20`).
fn cuts_in(rec: &Recorded) -> Vec<usize> {
    let body = String::from_utf8_lossy(&rec.body);
    body.split("cuts=")
        .nth(1)
        .map(|rest| {
            rest.split(|c: char| !(c.is_ascii_digit() || c == ','))
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn echo_gateway() -> (Gateway, FakeUpstream) {
    let fake = FakeUpstream::start(|rec| {
        let script = echo_script(&sent_key(rec), &cuts_in(rec));
        reply(written(rec, &script))
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    (gw, fake)
}

/// The upstream echoes the real credential it was sent inside its answer, in one piece: the client gets
/// `[redacted]` in its place and every other byte as written, on every path.
#[test]
fn an_echoed_secret_is_replaced_and_nothing_else_changes() {
    let (gw, fake) = echo_gateway();
    let want = redacted_script();
    for (protocol, path) in PROTOCOLS {
        for upstream in ["chat", "responses", "messages"] {
            for stream in [false, true] {
                let ctx = format!("{protocol} from {upstream} stream={stream}");
                let r = gw.post(path, &request(protocol, model_of(upstream), "hi", stream));
                assert_eq!(r.status, 200, "{ctx}: {}", r.text());
                assert_eq!(sent_key(&fake.last()), UPSTREAM_KEY, "{ctx}");
                assert!(!r.text().contains(UPSTREAM_KEY), "{ctx}: {}", r.text());
                assert!(!all_strings(&r).contains(UPSTREAM_KEY), "{ctx}");
                let (text, reasoning, args) = read_answer(protocol, &r, stream);
                assert_eq!(text, want.text(), "{ctx}");
                assert!(same_json(&args, &want.args()), "{ctx}: {args}");
                assert_eq!(reasoning, want.reasoning(), "{ctx}");
                if protocol == upstream {
                    // Passthrough: the key's bytes replaced, every other byte as the upstream wrote it.
                    let expected = match written(&fake.last(), &echo_script(UPSTREAM_KEY, &[])) {
                        Written::Plain(body) => body,
                        Written::Stream(events) => events.concat(),
                    };
                    let expected = String::from_utf8(expected)
                        .unwrap()
                        .replace(UPSTREAM_KEY, "[redacted]");
                    assert_eq!(r.text(), expected, "{ctx}");
                }
            }
        }
    }
}

/// The upstream splits the echoed credential across two and three stream events (text, reasoning and tool
/// arguments alike): the client never receives it, in any concatenation of what it got, and the text around
/// it arrives intact; passthrough events that carry no part of it are relayed byte for byte.
#[test]
fn a_secret_split_across_stream_events_never_arrives() {
    let (gw, fake) = echo_gateway();
    let want = redacted_script();
    for cuts in [vec![14], vec![9, 20], vec![1, 12, 27]] {
        let prompt = format!(
            "cuts={}",
            cuts.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        for (protocol, path) in PROTOCOLS {
            for upstream in ["chat", "responses", "messages"] {
                let ctx = format!("{protocol} from {upstream} {prompt}");
                let r = gw.post(path, &request(protocol, model_of(upstream), &prompt, true));
                assert_eq!(r.status, 200, "{ctx}: {}", r.text());
                assert_eq!(cuts_in(&fake.last()), cuts, "{ctx}");
                assert!(!r.text().contains(UPSTREAM_KEY), "{ctx}: {}", r.text());
                assert!(!all_strings(&r).contains(UPSTREAM_KEY), "{ctx}");
                let (text, reasoning, args) = read_answer(protocol, &r, true);
                for got in [&text, &reasoning, &args] {
                    assert!(!got.contains(UPSTREAM_KEY), "{ctx}: {got}");
                }
                // Events that end in fewer of the key's first bytes than its hold threshold go out before
                // the key is recognised (a hold would be seen: see secrets.rs); the rest of it never
                // arrives, the words around it always do.
                let hold = tollgate::secrets::hold_from(UPSTREAM_KEY.len());
                let lead = &UPSTREAM_KEY[..cuts
                    .iter()
                    .copied()
                    .take_while(|&c| c < hold)
                    .last()
                    .unwrap_or(0)];
                let lead_in = |s: &str| s.replace("[redacted]", &format!("{lead}[redacted]"));
                assert_eq!(text, lead_in(&want.text()), "{ctx}");
                assert!(same_json(&args, &lead_in(&want.args())), "{ctx}: {args}");
                assert_eq!(reasoning, lead_in(&want.reasoning()), "{ctx}");
                if protocol == upstream {
                    let Written::Stream(events) =
                        written(&fake.last(), &echo_script(UPSTREAM_KEY, &cuts))
                    else {
                        panic!("{ctx}: not a stream")
                    };
                    let got = split_sse_blocks(&r.text());
                    assert_eq!(got.len(), events.len(), "{ctx}");
                    let key_parts = cut_at(UPSTREAM_KEY, &cuts);
                    for (g, e) in got.iter().zip(&events) {
                        let e = String::from_utf8_lossy(e);
                        if !key_parts
                            .iter()
                            .any(|p| p.len() > 1 && e.contains(p.as_str()))
                        {
                            assert_eq!(String::from_utf8_lossy(g), e, "{ctx}");
                        }
                    }
                }
            }
        }
    }
}

/// A stream whose text ends in the first bytes of the real key is held back only until it is clear: when
/// the text goes on otherwise, and when the stream ends there, the client gets every byte the upstream wrote,
/// in order, before the closing events; and the output-limit cut still ends a stream after a held event.
#[test]
fn held_events_go_out_in_order_and_the_limit_cut_still_works() {
    let head = &UPSTREAM_KEY[..14];
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                    "model": "real-chat-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let text = |t: &str| chunk(json!({"content": t}), Value::Null);
    let close = vec![
        chunk(json!({}), json!("stop")),
        sse(
            None,
            &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                    "model": "real-chat-model", "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}}),
        ),
        b"data: [DONE]\n\n".to_vec(),
    ];
    // The text goes on otherwise; the stream ends inside the partial match.
    let broken = [
        vec![text("Hi "), text(&format!("my {head}")), text("cond guess")],
        close.clone(),
    ]
    .concat();
    let ends = [
        vec![text("Hi "), text(&format!("my {head}"))],
        close.clone(),
    ]
    .concat();
    // Far beyond the client's limit right after the held event.
    let cut = vec![
        text("Hi "),
        text(&format!("my {head}")),
        text(&"word ".repeat(800)),
        text("never sent"),
    ];
    let cases = vec![("broken", broken), ("ends", ends), ("cut", cut)];
    let streams = cases.clone();
    let fake = FakeUpstream::start(move |rec| {
        let body = String::from_utf8_lossy(&rec.body).to_string();
        let (_, events) = streams
            .iter()
            .find(|(name, _)| body.contains(&format!("case={name}")))
            .unwrap();
        Reply::sse(events.clone())
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    for (name, events) in cases {
        let mut body = request("chat", "m-chat", &format!("case={name}"), true);
        body["max_tokens"] = json!(10);
        let r = gw.post("/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        let all = String::from_utf8(events.concat()).unwrap();
        if name != "cut" {
            assert_eq!(r.text(), all, "{name}: not relayed byte for byte");
            continue;
        }
        // The held event went out before the in-stream error; nothing after the cut did.
        let sent: String = events[..2]
            .iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect();
        assert!(r.text().starts_with(&sent), "{}", r.text());
        assert!(!r.text().contains("never sent") && !r.text().contains("word word"));
        let (_, last) = r.events().pop().unwrap();
        assert!(last.contains("error"), "{last}");
    }
}
