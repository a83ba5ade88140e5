//! Legacy text completions through the gateway (issue 42): `POST /v1/completions` with `prompt` and `suffix`
//! passed through to OpenAI-compatible upstreams (the body as sent, the model renamed; the answer and the
//! stream byte for byte, the stream's usage switched on and hidden from a client that did not ask for it;
//! the limit in `max_tokens` for a key with a spending limit), refused with the endpoint the model serves
//! for the other kinds and the mock; keys, groups, balances and records (input, output, cost) as for
//! generation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::upstream::{Fixture, Queued, Reply};
use common::*;
use serde_json::{json, Value};

/// The gateway and its queued fake upstream.
struct Bench {
    gw: Gateway,
    up: Queued,
}

fn bench() -> Bench {
    let up = Queued::start();
    let gw = Gateway::start_every_kind(up.fake.addr, "input_price = 1.0\noutput_price = 2.0", "");
    Bench { gw, up }
}

fn completion(text: &str, prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "real-chat-model",
        "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })
}

fn chunk(text: &str) -> Vec<u8> {
    let c = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "real-chat-model",
                   "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": null}]});
    format!("data: {c}\n\n").into_bytes()
}

fn usage_chunk(prompt_tokens: u64, completion_tokens: u64) -> Vec<u8> {
    let c = json!({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "real-chat-model",
                   "choices": [],
                   "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}});
    format!("data: {c}\n\n").into_bytes()
}

#[test]
fn fill_in_the_middle_is_passed_through_as_sent_and_billed() {
    let b = bench();
    let answer = completion("    return a + b\n", 12, 6);
    b.up.push(Reply::json(200, &answer));
    let sent = json!({"model": "m-chat", "prompt": "def add(a, b):\n", "suffix": "\nprint(add(1, 2))",
                      "max_tokens": 64, "temperature": 0.2, "stop": ["\n\n"], "echo": false, "logprobs": 1});
    let r = b.gw.post("/v1/completions", &sent);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.body,
        serde_json::to_vec(&answer).unwrap(),
        "the answer byte for byte"
    );
    let up = b.up.fake.last();
    assert_eq!(up.path, "/v1/completions");
    let mut expected = sent.clone();
    expected["model"] = json!("real-chat-model");
    assert_eq!(up.json(), expected, "the body as sent, the model renamed");
    let rec = b.gw.record_of(&r);
    assert_eq!(rec["endpoint"], "completions");
    assert_eq!(rec["protocol"], "chat");
    assert_eq!(
        (rec["input_tokens"].as_u64(), rec["output_tokens"].as_u64()),
        (Some(12), Some(6))
    );
    assert_eq!(rec["estimated"], false);
    // 12 input tokens at 1.0 and 6 output tokens at 2.0 per million.
    assert_eq!(rec["cost"].as_f64(), Some(0.000024));

    // A Responses upstream is OpenAI-compatible: the same endpoint under its base URL.
    b.up.push(Reply::json(200, &completion("x", 1, 1)));
    let r = b.gw.post(
        "/v1/completions",
        &json!({"model": "m-responses", "prompt": "a"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(b.up.fake.last().path, "/v1/completions");
}

#[test]
fn streams_are_relayed_with_their_usage_billed_and_shown_only_when_asked() {
    let b = bench();
    let events = vec![
        chunk("Hel"),
        chunk("lo"),
        usage_chunk(3, 2),
        b"data: [DONE]\n\n".to_vec(),
    ];
    b.up.push(Reply::sse(events.clone()));
    let r = b.gw.post(
        "/v1/completions",
        &json!({"model": "m-chat", "prompt": "Say", "stream": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        text.contains("\"Hel\"") && text.contains("\"lo\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(
        !text.contains("\"usage\""),
        "the usage chunk the client did not ask for: {text}"
    );
    let up = b.up.fake.last().json();
    assert_eq!(
        up["stream_options"]["include_usage"], true,
        "usage switched on upstream"
    );
    let rec = b.gw.record_of(&r);
    assert_eq!(
        (rec["input_tokens"].as_u64(), rec["output_tokens"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(rec["stream"], true);
    assert_eq!(rec["endpoint"], "completions");

    b.up.push(Reply::sse(events));
    let r = b.gw.post(
        "/v1/completions",
        &json!({"model": "m-chat", "prompt": "Say", "stream": true,
                "stream_options": {"include_usage": true}}),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("\"usage\""),
        "asked for, so shown: {}",
        r.text()
    );
}

#[test]
fn a_key_with_a_spending_limit_sends_a_limit_and_is_refused_when_spent() {
    let b = bench();
    let credited = b.gw.add_key("credited", "default", Some(5.0));
    b.up.push(Reply::json(200, &completion("x", 1, 1)));
    let r = b.gw.post_as(
        &credited,
        "/v1/completions",
        &json!({"model": "m-chat", "prompt": "a"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        b.up.fake.last().json()["max_tokens"],
        16,
        "OpenAI's default, written so the upstream cannot spend more than was reserved"
    );
    let broke = b.gw.add_key("broke", "default", Some(0.0));
    let before = b.up.fake.received().len();
    let r = b.gw.post_as(
        &broke,
        "/v1/completions",
        &json!({"model": "m-chat", "prompt": "a"}),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(b.up.fake.received().len(), before);
}

#[test]
fn other_kinds_and_bad_requests_are_refused_in_openais_shape() {
    let b = bench();
    for (model, serves) in [
        ("m-messages", "/v1/messages"),
        ("m-gemini", ":generateContent"),
        ("mock", "built-in mock"),
    ] {
        let r = b.gw.post(
            "/v1/completions",
            &json!({"model": model, "prompt": "def f(", "suffix": ")"}),
        );
        assert_eq!(r.status, 400, "{model}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(serves), "{model}: {msg}");
        assert!(msg.contains("no text completions endpoint"), "{msg}");
    }
    assert!(
        b.up.fake.received().is_empty(),
        "no rewrite into another endpoint"
    );
    for (body, param) in [
        (json!({"model": "m-chat"}), "prompt"),
        (json!({"model": "m-chat", "prompt": {"a": 1}}), "prompt"),
        (
            json!({"model": "m-chat", "prompt": "x", "n": 2, "best_of": 1}),
            "best_of",
        ),
        (json!({"prompt": "x"}), "model"),
    ] {
        let r = b.gw.post("/v1/completions", &body);
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    assert!(b.up.fake.received().is_empty());
}

/// The text of a completion answer, whole or streamed (its chunks' `choices[].text`, and whether a chunk
/// carried `usage`).
fn text_of(body: &str, stream: bool) -> (String, bool) {
    if !stream {
        let v: Value = serde_json::from_str(body).unwrap();
        return (v["choices"][0]["text"].as_str().unwrap().to_string(), false);
    }
    let (mut text, mut usage) = (String::new(), false);
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        usage |= v.get("usage").is_some_and(|u| !u.is_null());
        for c in v["choices"].as_array().unwrap() {
            text.push_str(c["text"].as_str().unwrap_or(""));
        }
    }
    (text, usage)
}

/// The cases of `fixtures/completions/` replayed: the body as sent (the model renamed; a stream's usage
/// switched on), the text the client reads, a usage chunk it did not ask for hidden, the usage recorded.
#[test]
fn the_fixtures_replay() {
    let b = bench();
    let dir = fixtures().join("completions");
    for case in ["fim", "stream"] {
        let fx = Fixture::load(&dir, case);
        let stream = fx.request["stream"].as_bool().unwrap_or(false);
        b.up.push(fx.reply());
        let r = b.gw.post("/v1/completions", &fx.request);
        let exp = &fx.expect;
        assert_eq!(
            r.status as u64,
            exp["status"].as_u64().unwrap(),
            "{case}: {}",
            r.text()
        );
        let up = b.up.fake.last();
        assert_eq!(up.path, "/v1/completions", "{case}");
        let mut sent = up.json();
        if stream {
            assert_eq!(sent["stream_options"]["include_usage"], true, "{case}");
            sent.as_object_mut().unwrap().remove("stream_options");
        }
        let mut expected = fx.request.clone();
        expected["model"] = json!("real-chat-model");
        assert_eq!(sent, expected, "{case}: the body as sent");
        let (text, usage_shown) = text_of(&r.text(), stream);
        assert_eq!(text, exp["text"].as_str().unwrap(), "{case}");
        assert_eq!(usage_shown, stream && exp["hidden"].is_null(), "{case}");
        let rec = b.gw.record_of(&r);
        assert_eq!(rec["input_tokens"], exp["usage"]["in"], "{case}: {rec}");
        assert_eq!(rec["output_tokens"], exp["usage"]["out"], "{case}");
        assert_eq!(rec["estimated"], exp["estimated"], "{case}");
    }
}

/// A model served by an Anthropic upstream first and an OpenAI-compatible one second: text completions (and
/// embeddings) go to the one that has the endpoint, chat goes to the first.
#[test]
fn only_upstreams_with_the_endpoint_are_asked() {
    let up = Queued::start();
    let dir = TempDir::new("completions-route");
    let f = up.fake.addr;
    let config =
        format!(
        "{}[[upstreams]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"http://{f}\"\n\n\
         [[upstreams]]\nname = \"local\"\nkind = \"openai-chat\"\nbase_url = \"http://{f}/v1\"\n\n\
         [[models]]\nname = \"both\"\nupstream = [\"claude\", \"local\"]\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""))
    );
    let gw = Gateway::start_with(dir, &config);
    up.push(Reply::json(200, &completion("x", 1, 1)));
    let r = gw.post("/v1/completions", &json!({"model": "both", "prompt": "a"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        up.fake.received().len(),
        1,
        "the Anthropic upstream was not asked"
    );
    assert_eq!(up.fake.last().path, "/v1/completions");
    assert_eq!(gw.record_of(&r)["upstream"], "local");
    let vectors = json!({"object": "list", "model": "x", "usage": {"prompt_tokens": 1, "total_tokens": 1},
                         "data": [{"object": "embedding", "index": 0, "embedding": [1.0]}]});
    up.push(Reply::json(200, &vectors));
    let r = gw.post("/v1/embeddings", &json!({"model": "both", "input": "a"}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.fake.last().path, "/v1/embeddings");
}
