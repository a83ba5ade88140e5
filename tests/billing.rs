//! Billing as the providers bill (issue 27), through the real binary: a fake upstream reports usage in each
//! vendor's own semantics (OpenAI: cache reads and writes inside the prompt, reasoning inside the
//! completion; Anthropic: uncached input, reads and writes split by lifetime as separate buckets, a stream
//! whose `message_delta` repeats the cumulative counts or leaves them out), on all nine client × upstream
//! pairs, streamed and not, below and above a long-context tier; each record's cost is compared to the
//! price sheet to the unit, and each client reads the usage in its own protocol's semantics. Also: the
//! reservation at the tier of the estimated input, the built-in list prices, `check`'s refusals and
//! warnings, the CSV export, `/metrics`, and old ledger lines.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::upstream::{FakeUpstream, Recorded, Reply};
use common::*;
use serde_json::{json, Value};
use tollgate::money::Money;

/// The usage a vendor reports for one scenario, in normalised parts.
#[derive(Clone, Copy, Debug)]
struct Parts {
    uncached: u64,
    reads: u64,
    writes_5m: u64,
    writes_1h: u64,
    output: u64,
    reasoning: u64,
}

impl Parts {
    fn input(&self) -> u64 {
        self.uncached + self.reads + self.writes_5m + self.writes_1h
    }
}

/// Below the tier: 4,000 input tokens.
const SMALL: Parts = Parts {
    uncached: 1_000,
    reads: 2_000,
    writes_5m: 300,
    writes_1h: 700,
    output: 500,
    reasoning: 200,
};

/// Above the 200,000-token tier: 205,000 input tokens.
const BIG: Parts = Parts {
    uncached: 150_000,
    reads: 40_000,
    writes_5m: 10_000,
    writes_1h: 5_000,
    output: 2_000,
    reasoning: 800,
};

/// What the model `tiny` reports: 40 input tokens, 5 output.
const TINY: Parts = Parts {
    uncached: 40,
    reads: 0,
    writes_5m: 0,
    writes_1h: 0,
    output: 5,
    reasoning: 0,
};

/// The price sheet of the test models (credits per 1M tokens) as TOML.
const PRICES: &str = "input_price = 3\ncached_input_price = 0.3\ncache_write_price = 3.75\n\
    cache_write_1h_price = 6\noutput_price = 15\n\n[[models.tiers]]\nabove_input_tokens = 200000\n\
    input_price = 6\ncached_input_price = 0.6\ncache_write_price = 7.5\ncache_write_1h_price = 12\n\
    output_price = 22.5\n";

/// The same sheet in units (10⁻¹² credits) per token: input, reads, 5m writes, 1h writes, output.
const BASE_UNITS: [i128; 5] = [3_000_000, 300_000, 3_750_000, 6_000_000, 15_000_000];
const TIER_UNITS: [i128; 5] = [6_000_000, 600_000, 7_500_000, 12_000_000, 22_500_000];

/// What the vendor's usage is, as tollgate must see it: OpenAI does not say a write's lifetime (billed at
/// the 5-minute price) and reports reasoning; Anthropic splits writes by lifetime and reports no reasoning.
fn seen(vendor: &str, p: Parts) -> Parts {
    match vendor {
        "anthropic" => Parts { reasoning: 0, ..p },
        _ => Parts {
            writes_5m: p.writes_5m + p.writes_1h,
            writes_1h: 0,
            ..p
        },
    }
}

/// The cost by the price sheet, in units.
fn expected_cost(p: Parts) -> Money {
    let u = if p.input() > 200_000 {
        TIER_UNITS
    } else {
        BASE_UNITS
    };
    let kinds = [p.uncached, p.reads, p.writes_5m, p.writes_1h, p.output];
    Money::from_units(kinds.iter().zip(u).map(|(n, u)| *n as i128 * u).sum())
}

fn chat_usage(p: Parts) -> Value {
    json!({"prompt_tokens": p.input(), "completion_tokens": p.output, "total_tokens": p.input() + p.output,
           "prompt_tokens_details": {"cached_tokens": p.reads, "cache_write_tokens": p.writes_5m + p.writes_1h,
                                     "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": p.reasoning, "audio_tokens": 0}})
}

fn responses_usage(p: Parts) -> Value {
    json!({"input_tokens": p.input(), "output_tokens": p.output, "total_tokens": p.input() + p.output,
           "input_tokens_details": {"cached_tokens": p.reads, "cache_write_tokens": p.writes_5m + p.writes_1h},
           "output_tokens_details": {"reasoning_tokens": p.reasoning}})
}

fn messages_usage(p: Parts, output: u64) -> Value {
    json!({"input_tokens": p.uncached, "cache_read_input_tokens": p.reads,
           "cache_creation_input_tokens": p.writes_5m + p.writes_1h,
           "cache_creation": {"ephemeral_5m_input_tokens": p.writes_5m, "ephemeral_1h_input_tokens": p.writes_1h},
           "output_tokens": output})
}

fn sse(event: Option<&str>, data: &Value) -> Vec<u8> {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n").into_bytes(),
        None => format!("data: {data}\n\n").into_bytes(),
    }
}

/// The fake upstream's answer, in the vendor's own semantics. A `BIG` request gets the big usage; an
/// Anthropic stream's `message_delta` repeats the cumulative counts (small) or gives only the output (big).
fn answer(r: &Recorded) -> Reply {
    let body = r.json();
    let text = body.to_string();
    let big = text.contains("SCENARIO-big");
    let p = match (big, body["model"].as_str()) {
        (true, _) => BIG,
        (false, Some("tiny")) => TINY,
        _ => SMALL,
    };
    let stream = body["stream"] == json!(true);
    match (r.path.as_str(), stream) {
        ("/v1/chat/completions", false) => Reply::json(
            200,
            &json!({"id": "chatcmpl-b", "object": "chat.completion", "created": 1, "model": "up",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Billed."},
                                 "finish_reason": "stop"}],
                    "usage": chat_usage(p)}),
        ),
        ("/v1/chat/completions", true) => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1, "model": "up",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null})
            };
            Reply::sse(vec![
                sse(
                    None,
                    &chunk(json!({"role": "assistant", "content": "Bil"}), Value::Null),
                ),
                sse(None, &chunk(json!({"content": "led."}), Value::Null)),
                sse(None, &chunk(json!({}), json!("stop"))),
                sse(
                    None,
                    &json!({"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1,
                            "model": "up", "choices": [], "usage": chat_usage(p)}),
                ),
                b"data: [DONE]\n\n".to_vec(),
            ])
        }
        ("/v1/responses", false) => Reply::json(200, &responses_object(p, "completed")),
        ("/v1/responses", true) => {
            let created = responses_object(p, "in_progress");
            let item = json!({"type": "message", "id": "msg_b", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": "Billed.", "annotations": []}]});
            Reply::sse(vec![
                sse(
                    Some("response.created"),
                    &json!({"type": "response.created", "sequence_number": 0, "response": created}),
                ),
                sse(
                    Some("response.output_item.added"),
                    &json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                    "item": {"type": "message", "id": "msg_b", "status": "in_progress", "role": "assistant", "content": []}}),
                ),
                sse(
                    Some("response.content_part.added"),
                    &json!({"type": "response.content_part.added", "sequence_number": 2, "item_id": "msg_b",
                    "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
                ),
                sse(
                    Some("response.output_text.delta"),
                    &json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_b",
                    "output_index": 0, "content_index": 0, "delta": "Billed."}),
                ),
                sse(
                    Some("response.output_text.done"),
                    &json!({"type": "response.output_text.done", "sequence_number": 4, "item_id": "msg_b",
                    "output_index": 0, "content_index": 0, "text": "Billed."}),
                ),
                sse(
                    Some("response.output_item.done"),
                    &json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": item}),
                ),
                sse(
                    Some("response.completed"),
                    &json!({"type": "response.completed", "sequence_number": 6, "response": responses_object(p, "completed")}),
                ),
            ])
        }
        ("/v1/messages", false) => Reply::json(
            200,
            &json!({"id": "msg_b", "type": "message", "role": "assistant", "model": "up",
                    "content": [{"type": "text", "text": "Billed."}], "stop_reason": "end_turn",
                    "stop_sequence": null, "usage": messages_usage(p, p.output)}),
        ),
        ("/v1/messages", true) => {
            let delta_usage = if big {
                json!({"output_tokens": p.output})
            } else {
                // The cumulative counts again, without the split by lifetime.
                json!({"input_tokens": p.uncached, "cache_read_input_tokens": p.reads,
                       "cache_creation_input_tokens": p.writes_5m + p.writes_1h, "output_tokens": p.output})
            };
            Reply::sse(vec![
                sse(
                    Some("message_start"),
                    &json!({"type": "message_start", "message": {"id": "msg_b", "type": "message",
                    "role": "assistant", "content": [], "model": "up", "stop_reason": null, "stop_sequence": null,
                    "usage": messages_usage(p, 1)}}),
                ),
                sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Billed."}}),
                ),
                sse(
                    Some("content_block_stop"),
                    &json!({"type": "content_block_stop", "index": 0}),
                ),
                sse(
                    Some("message_delta"),
                    &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": delta_usage}),
                ),
                sse(Some("message_stop"), &json!({"type": "message_stop"})),
            ])
        }
        _ => Reply::json(404, &json!({"error": {"message": "no such path"}})),
    }
}

fn responses_object(p: Parts, status: &str) -> Value {
    let done = status == "completed";
    json!({"id": "resp_b", "object": "response", "created_at": 1, "model": "up", "status": status,
           "error": null, "incomplete_details": null,
           "output": if done { json!([{"type": "message", "id": "msg_b", "status": "completed", "role": "assistant",
                                        "content": [{"type": "output_text", "text": "Billed.", "annotations": []}]}]) }
                     else { json!([]) },
           "usage": if done { responses_usage(p) } else { Value::Null }})
}

/// A gateway with one priced model per upstream kind (`b-chat`, `b-responses`, `b-messages`) at `fake`,
/// plus whatever `extra` adds (models, upstreams).
fn gateway(fake: &FakeUpstream, extra: &str) -> Gateway {
    gateway_with(fake, "", extra, "")
}

/// [`gateway`] with lines at the top of the config and a section at its end (`[store]`).
fn gateway_with(fake: &FakeUpstream, top: &str, extra: &str, end: &str) -> Gateway {
    let dir = TempDir::new("billing");
    let f = fake.addr;
    let mut c = base_config(
        dir.path(),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"\n{top}"),
    );
    for (kind, url) in [
        ("openai-chat", format!("http://{f}/v1")),
        ("openai-responses", format!("http://{f}/v1")),
        ("anthropic", format!("http://{f}")),
    ] {
        c.push_str(&format!(
            "[[upstreams]]\nname = \"{kind}\"\nkind = \"{kind}\"\nbase_url = \"{url}\"\napi_key_env = \"{UPSTREAM_KEY_ENV}\"\n\n"
        ));
    }
    for (name, up) in [
        ("b-chat", "openai-chat"),
        ("b-responses", "openai-responses"),
        ("b-messages", "anthropic"),
    ] {
        c.push_str(&format!(
            "[[models]]\nname = \"{name}\"\nupstream = \"{up}\"\nupstream_model = \"up\"\n{PRICES}\n"
        ));
    }
    c.push_str(extra);
    c.push_str("\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n");
    c.push_str(end);
    Gateway::start_with(dir, &c)
}

fn path(client: &str) -> &'static str {
    match client {
        "chat" => "/v1/chat/completions",
        "responses" => "/v1/responses",
        _ => "/v1/messages",
    }
}

fn request(client: &str, model: &str, text: &str, stream: bool) -> Value {
    match client {
        "chat" => {
            let mut b = json!({"model": model, "messages": [{"role": "user", "content": text}], "stream": stream});
            if stream {
                b["stream_options"] = json!({"include_usage": true});
            }
            b
        }
        "responses" => json!({"model": model, "input": text, "stream": stream}),
        _ => {
            json!({"model": model, "max_tokens": 4096, "messages": [{"role": "user", "content": text}],
                    "stream": stream})
        }
    }
}

/// The usage a client reads, in its own protocol's semantics, as normalised parts (`writes_5m` holds every
/// write for the OpenAI protocols, which do not say a write's lifetime; Messages says no reasoning).
fn client_usage(client: &str, r: &Response, stream: bool) -> Parts {
    let u = if !stream {
        r.json()["usage"].clone()
    } else {
        let mut found = Value::Null;
        for (event, data) in r.events() {
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            match client {
                "chat" if !v["usage"].is_null() => found = v["usage"].clone(),
                "responses" if event.as_deref() == Some("response.completed") => {
                    found = v["response"]["usage"].clone()
                }
                // As the Anthropic SDK accumulates: message_start's usage, then each non-null count of
                // message_delta's.
                "messages" if event.as_deref() == Some("message_start") => {
                    found = v["message"]["usage"].clone()
                }
                "messages" if event.as_deref() == Some("message_delta") => {
                    for (k, x) in v["usage"].as_object().unwrap() {
                        if !x.is_null() {
                            found[k] = x.clone();
                        }
                    }
                }
                _ => {}
            }
        }
        found
    };
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    match client {
        "messages" => {
            let writes = n("/cache_creation_input_tokens");
            let h1 = n("/cache_creation/ephemeral_1h_input_tokens");
            Parts {
                uncached: n("/input_tokens"),
                reads: n("/cache_read_input_tokens"),
                writes_5m: writes - h1,
                writes_1h: h1,
                output: n("/output_tokens"),
                reasoning: 0,
            }
        }
        _ => {
            let (input, details, output, out_details) = match client {
                "chat" => (
                    "/prompt_tokens",
                    "/prompt_tokens_details",
                    "/completion_tokens",
                    "/completion_tokens_details",
                ),
                _ => (
                    "/input_tokens",
                    "/input_tokens_details",
                    "/output_tokens",
                    "/output_tokens_details",
                ),
            };
            let reads = n(&format!("{details}/cached_tokens"));
            let writes = n(&format!("{details}/cache_write_tokens"));
            Parts {
                uncached: n(input) - reads - writes,
                reads,
                writes_5m: writes,
                writes_1h: 0,
                output: n(output),
                reasoning: n(&format!("{out_details}/reasoning_tokens")),
            }
        }
    }
}

fn record(gw: &Gateway, r: &Response) -> Value {
    let id = r.header("x-request-id").expect("x-request-id").to_string();
    let v = gw.admin(&format!("/admin/usage?request_id={id}")).json();
    v["data"][0].clone()
}

fn money(v: &Value) -> Money {
    Money::from_f64(v.as_f64().unwrap_or_else(|| panic!("not an amount: {v}"))).unwrap()
}

/// Every pair, streamed and not, below and above the tier: the record names every kind and costs what the
/// price sheet says, to the unit; the same usage costs the same on every pair; each client reads the usage
/// in its own protocol's semantics.
#[test]
fn every_pair_bills_every_token_kind_at_its_price() {
    let fake = FakeUpstream::start(answer);
    let gw = gateway(&fake, "");
    for (scenario, parts) in [("small", SMALL), ("big", BIG)] {
        for (model, vendor) in [
            ("b-chat", "openai"),
            ("b-responses", "openai"),
            ("b-messages", "anthropic"),
        ] {
            let want = seen(vendor, parts);
            let cost = expected_cost(want);
            for client in ["chat", "responses", "messages"] {
                for stream in [false, true] {
                    let ctx = format!("{client} → {model}, {scenario}, stream {stream}");
                    let text = format!("Bill me. SCENARIO-{scenario}");
                    let r = gw.post(path(client), &request(client, model, &text, stream));
                    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
                    let rec = record(&gw, &r);
                    assert_eq!(money(&rec["cost"]), cost, "{ctx}: {rec}");
                    assert_eq!(rec["input_tokens"], want.input(), "{ctx}: {rec}");
                    assert_eq!(rec["cached_input_tokens"], want.reads, "{ctx}");
                    assert_eq!(rec["cache_write_5m_tokens"], want.writes_5m, "{ctx}");
                    assert_eq!(rec["cache_write_1h_tokens"], want.writes_1h, "{ctx}");
                    assert_eq!(rec["output_tokens"], want.output, "{ctx}");
                    assert_eq!(rec["reasoning_tokens"], want.reasoning, "{ctx}");
                    let tier = (scenario == "big").then_some(200_000);
                    assert_eq!(rec["tier_above_input_tokens"], json!(tier), "{ctx}: {rec}");
                    assert_eq!(rec["estimated"], false, "{ctx}");
                    // The client's own semantics give back the same usage (what each protocol can say).
                    let got = client_usage(client, &r, stream);
                    let expect = match client {
                        // A write of unstated lifetime is shown, and billed, as a 5-minute one.
                        "messages" => Parts {
                            reasoning: 0,
                            ..want
                        },
                        _ => Parts {
                            writes_5m: want.writes_5m + want.writes_1h,
                            writes_1h: 0,
                            ..want
                        },
                    };
                    assert_eq!(format!("{got:?}"), format!("{expect:?}"), "{ctx}");
                }
            }
        }
    }
    // Chat clients see prompt_tokens with reads and writes inside plus cached_tokens; Messages clients the
    // buckets apart (spelled out for one pair each way).
    let r = gw.post(
        "/v1/chat/completions",
        &request("chat", "b-messages", "SCENARIO-small", false),
    );
    let u = &r.json()["usage"];
    assert_eq!(u["prompt_tokens"], 4_000, "{u}");
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 2_000, "{u}");
    assert_eq!(
        u["prompt_tokens_details"]["cache_write_tokens"], 1_000,
        "{u}"
    );
    let r = gw.post(
        "/v1/messages",
        &request("messages", "b-chat", "SCENARIO-small", false),
    );
    let u = &r.json()["usage"];
    assert_eq!(
        (
            &u["input_tokens"],
            &u["cache_read_input_tokens"],
            &u["cache_creation_input_tokens"]
        ),
        (&json!(1_000), &json!(2_000), &json!(1_000)),
        "{u}"
    );
}

/// A key with a credit is reserved at the tier its estimated input falls in: while a request estimated
/// above the tier's threshold is in flight, its reservation (at the tier's prices) uses up the credit and the
/// next request is refused; one estimated below it reserves little at the base prices and the next goes
/// through.
#[test]
fn the_reservation_uses_the_tier_of_the_estimated_input() {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Arc, Mutex};
    let gates: Arc<Mutex<Vec<Sender<()>>>> = Arc::default();
    let g = gates.clone();
    let fake = FakeUpstream::start(move |r| match answer(r) {
        Reply::Sse { events, .. } if String::from_utf8_lossy(&r.body).contains("HOLD") => {
            let (tx, rx) = channel();
            g.lock().unwrap().push(tx);
            Reply::Sse {
                events,
                gate: Some((1, rx)),
                abort: false,
            }
        }
        other => other,
    });
    let gw = gateway(
        &fake,
        "[[models]]\nname = \"b-steep\"\nupstream = \"openai-chat\"\nupstream_model = \"tiny\"\n\
         input_price = 1\noutput_price = 1\n\n[[models.tiers]]\nabove_input_tokens = 1000\ninput_price = 100\n",
    );
    let key = gw.add_key("tiered", "default", Some(0.01));
    let body = |text: &str, stream: bool| {
        json!({"model": "b-steep", "max_tokens": 10, "stream": stream,
               "messages": [{"role": "user", "content": text}]})
    };
    // Holds a streamed request of `words` words in flight, then asks again with a small one.
    let second_while_held = |words: usize| {
        let before = fake.received().len();
        let held = std::thread::scope(|s| {
            let first = s.spawn(|| {
                gw.post_as(
                    &key,
                    "/v1/chat/completions",
                    &body(&format!("HOLD {}", "word ".repeat(words)), true),
                )
            });
            wait_for(
                || fake.received().len() > before,
                "the held request upstream",
            );
            let second = gw.post_as(&key, "/v1/chat/completions", &body("small", false));
            for tx in gates.lock().unwrap().drain(..) {
                let _ = tx.send(());
            }
            assert_eq!(first.join().unwrap().status, 200);
            second
        });
        held
    };
    // About 750 tokens estimated (below the tier): about 0.00076 credits reserved of 0.01.
    let r = second_while_held(600);
    assert_eq!(r.status, 200, "{}", r.text());
    // About 2,000 tokens estimated: 0.2 credits reserved at the tier (0.002 at the base prices).
    let r = second_while_held(1_600);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");
    // What was billed is what the upstream reported (40 input and 5 output tokens, below the tier).
    let rec = record(&gw, &r);
    assert!(rec.get("tier_above_input_tokens").is_none(), "{rec}");
    let usage = gw.admin("/admin/usage?key=tiered&status=200").json();
    for rec in usage["data"].as_array().unwrap() {
        assert_eq!(
            money(&rec["cost"]),
            Money::from_units(45 * 1_000_000),
            "{rec}"
        );
    }
}

/// A model whose upstream model is in the built-in table and that sets no prices takes the list prices
/// (tier included), said once in the log, marked in the console and shown by `check`; explicit prices win;
/// `prices = "none"` opts out; the table's output limit is the default limit reserved and sent upstream.
#[test]
fn list_prices_apply_where_no_price_is_set() {
    let fake = FakeUpstream::start(answer);
    let gw = gateway(
        &fake,
        "[[models]]\nname = \"haiku\"\nupstream = \"anthropic\"\nupstream_model = \"claude-haiku-5-5\"\n\n\
         [[models]]\nname = \"haiku-own\"\nupstream = \"anthropic\"\nupstream_model = \"claude-haiku-5-5\"\n\
         input_price = 1\noutput_price = 1\n\n\
         [[models]]\nname = \"haiku-free\"\nupstream = \"anthropic\"\nupstream_model = \"claude-haiku-5-5\"\n\
         prices = \"none\"\n\n\
         [[models]]\nname = \"four-o\"\nupstream = \"openai-chat\"\nupstream_model = \"gpt-4o-2024-08-06\"\n",
    );
    // Claude Haiku 5.5: 0.1 / reads 0.01 / 5m 0.125 / 1h 0.2 / out 0.5; above 100,000 input tokens
    // 0.5 / 0.05 / 0.625 / 1 / 2.5 (units per token below).
    let list = |p: Parts| {
        let u: [i128; 5] = if p.input() > 100_000 {
            [500_000, 50_000, 625_000, 1_000_000, 2_500_000]
        } else {
            [100_000, 10_000, 125_000, 200_000, 500_000]
        };
        let kinds = [p.uncached, p.reads, p.writes_5m, p.writes_1h, p.output];
        Money::from_units(kinds.iter().zip(u).map(|(n, u)| *n as i128 * u).sum())
    };
    for (scenario, parts) in [("small", SMALL), ("big", BIG)] {
        for stream in [false, true] {
            let r = gw.post(
                "/v1/messages",
                &request("messages", "haiku", &format!("SCENARIO-{scenario}"), stream),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            let rec = record(&gw, &r);
            let want = seen("anthropic", parts);
            assert_eq!(
                money(&rec["cost"]),
                list(want),
                "{scenario} {stream}: {rec}"
            );
            let tier = (scenario == "big").then_some(100_000);
            assert_eq!(rec["tier_above_input_tokens"], json!(tier), "{rec}");
        }
    }
    // Explicit prices win; opting out costs nothing.
    let r = gw.post(
        "/v1/messages",
        &request("messages", "haiku-own", "SCENARIO-small", false),
    );
    let own = SMALL.input() as i128 * 1_000_000 + SMALL.output as i128 * 1_000_000;
    assert_eq!(money(&record(&gw, &r)["cost"]), Money::from_units(own));
    let r = gw.post(
        "/v1/messages",
        &request("messages", "haiku-free", "SCENARIO-small", false),
    );
    assert_eq!(money(&record(&gw, &r)["cost"]), Money::ZERO);
    // The console marks them.
    let models = gw.admin("/admin/models").json();
    let m = |name: &str| {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap()
    };
    let haiku = m("haiku");
    assert_eq!(haiku["price_source"], "list", "{haiku}");
    assert_eq!(haiku["list_model"], "claude-haiku-5-5");
    assert_eq!(haiku["list_date"], "2026-11-25");
    assert_eq!(
        money(&haiku["cache_write_1h_price"]),
        Money::parse("0.2").unwrap()
    );
    assert_eq!(haiku["tiers"][0]["above_input_tokens"], 100_000);
    assert_eq!(haiku["max_output_tokens"], 128_000);
    assert_eq!(m("haiku-own")["price_source"], "config");
    assert_eq!(m("haiku-free")["price_source"], "none");
    // Said once at start.
    let logs = gw.all_logs();
    assert_eq!(
        logs.matches("\"haiku\" takes the list prices of claude-haiku-5-5")
            .count(),
        1,
        "{logs}"
    );
    assert!(!logs.contains("\"haiku-own\" takes"), "{logs}");
    // A dated snapshot finds its row; the row's output limit is the default a credit key's request is
    // reserved and capped at.
    let key = gw.add_key("credited", "default", Some(100.0));
    let r = gw.post_as(
        &key,
        "/v1/chat/completions",
        &json!({"model": "four-o", "messages": [{"role": "user", "content": "SCENARIO-small"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        fake.last().json()["max_tokens"],
        16_384,
        "{}",
        fake.last().json()
    );
    // gpt-4o: input 2.5, reads 1.25, writes at input (no write fee before GPT-5.6), output 10.
    let s = seen("openai", SMALL);
    let units = (s.uncached + s.writes_5m) as i128 * 2_500_000
        + s.reads as i128 * 1_250_000
        + s.output as i128 * 10_000_000;
    assert_eq!(money(&record(&gw, &r)["cost"]), Money::from_units(units));
    // `check` shows them; `models --list-prices` prints the table.
    let (code, out, err) = gw.cli(&["check"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("list price: model \"haiku\" takes the list prices of claude-haiku-5-5"),
        "{out}"
    );
    assert!(out.contains("above 100000 input tokens"), "{out}");
    let out = std::process::Command::new(bin())
        .args(["models", "--list-prices"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("2026-11-25"), "{table}");
    for model in [
        "claude-haiku-5-5",
        "gpt-6.2-sol",
        "gemini-2.5-pro",
        "gpt-4o",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(model)),
            "{model} missing: {table}"
        );
    }
}

/// `check` refuses negative prices, a tier without a threshold and tiers out of order; it warns of cache
/// writes priced below reads and of a model that serves a paid upstream for nothing (not of one opted
/// out, one on a local server, or one the list prices).
#[test]
fn check_refuses_bad_prices_and_warns_of_unpriced_paid_traffic() {
    let dir = TempDir::new("billing-check");
    let head = "[[upstreams]]\nname = \"paid\"\nkind = \"openai-chat\"\nbase_url = \"https://api.example.com/v1\"\n\n\
                [[upstreams]]\nname = \"local\"\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:11434/v1\"\n\n\
                [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n";
    let check = |models: &str| {
        let cfg = dir.path().join("t.toml");
        std::fs::write(&cfg, format!("{head}{models}")).unwrap();
        let out = std::process::Command::new(bin())
            .args(["check", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let model = |body: &str| format!("[[models]]\nname = \"m\"\nupstream = \"paid\"\n{body}\n");
    for (body, field, says) in [
        (
            "input_price = -1\noutput_price = 1",
            "models[0].input_price",
            "0 or more",
        ),
        (
            "input_price = 1\ncache_write_1h_price = -2",
            "models[0].cache_write_1h_price",
            "0 or more",
        ),
        (
            "input_price = 1\n[[models.tiers]]\ninput_price = 2",
            "models[0].tiers[0].above_input_tokens",
            "above_input_tokens = 200000",
        ),
        (
            "input_price = 1\n[[models.tiers]]\nabove_input_tokens = 200000\ninput_price = 2\n\
             [[models.tiers]]\nabove_input_tokens = 100000\ninput_price = 3",
            "models[0].tiers[1].above_input_tokens",
            "rising",
        ),
        (
            "input_price = 1\n[[models.tiers]]\nabove_input_tokens = 1000\noutput_price = -1",
            "models[0].tiers[0].output_price",
            "0 or more",
        ),
        (
            "prices = \"none\"\ninput_price = 1",
            "models[0].prices",
            "free",
        ),
    ] {
        let (code, out, err) = check(&model(body));
        assert_eq!(code, 1, "{body}: {out}{err}");
        assert!(err.contains(field) && err.contains(says), "{body}: {err}");
    }
    // Writes below reads: a warning, not an error.
    let (code, out, err) = check(&model(
        "input_price = 3\ncached_input_price = 0.3\ncache_write_price = 0.1\noutput_price = 15",
    ));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("warning: line 15: models[0]: ") && out.contains("below cache reads"),
        "{out}"
    );
    // A paid upstream with no price: warned, naming the model and the upstream.
    let (code, out, err) = check(&model("upstream_model = \"our-own-model\""));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("models[0]: model \"m\" sends paid traffic to upstream \"paid\"")
            && out.contains("no price"),
        "{out}"
    );
    // Prices set by hand for a listed model, without its cache prices: warned (writes would cost the input
    // price).
    let (code, out, _) = check(&model(
        "upstream_model = \"claude-sonnet-4-6\"\ninput_price = 3\noutput_price = 15",
    ));
    assert_eq!(code, 0);
    assert!(
        out.contains("not cached_input_price or cache_write_price")
            && out.contains("claude-sonnet-4-6"),
        "{out}"
    );
    // Not warned: opted out, a local server, a model the list prices.
    for body in [
        "[[models]]\nname = \"m\"\nupstream = \"paid\"\nprices = \"none\"\n",
        "[[models]]\nname = \"m\"\nupstream = \"local\"\n",
        "[[models]]\nname = \"m\"\nupstream = \"paid\"\nupstream_model = \"gpt-5.4\"\n",
    ] {
        let (code, out, err) = check(body);
        assert_eq!(code, 0, "{err}");
        assert!(
            !out.contains("no price") && !out.contains("warning: models"),
            "{body}: {out}"
        );
    }
    // The warning is also logged at start (once).
    let d = TempDir::new("billing-warn");
    let cfg = format!(
        "{}[[upstreams]]\nname = \"paid\"\nkind = \"openai-chat\"\nbase_url = \"https://api.example.com/v1\"\n\n\
         [[models]]\nname = \"m\"\nupstream = \"paid\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(d.path(), "")
    );
    let gw = Gateway::start_with(d, &cfg);
    let logs = gw.all_logs();
    assert_eq!(
        logs.matches("sends paid traffic to upstream").count(),
        1,
        "{logs}"
    );
}

/// The CSV export and `/metrics` carry the same breakdown as the record: reads, writes by lifetime,
/// reasoning, the tier.
#[test]
fn csv_and_metrics_show_every_kind() {
    let fake = FakeUpstream::start(answer);
    let gw = gateway(&fake, "");
    let r = gw.post(
        "/v1/messages",
        &request("messages", "b-messages", "SCENARIO-big", false),
    );
    assert_eq!(r.status, 200);
    let r = gw.post(
        "/v1/chat/completions",
        &request("chat", "b-chat", "SCENARIO-small", false),
    );
    assert_eq!(r.status, 200);
    let csv = gw.admin("/admin/usage.csv").text();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let col = |row: &Vec<&str>, name: &str| {
        row[header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name}: {header:?}"))]
        .to_string()
    };
    let messages = rows
        .iter()
        .find(|r| col(r, "model") == "b-messages")
        .unwrap();
    assert_eq!(col(messages, "input_tokens"), "205000");
    assert_eq!(col(messages, "cached_input_tokens"), "40000");
    assert_eq!(col(messages, "cache_write_5m_tokens"), "10000");
    assert_eq!(col(messages, "cache_write_1h_tokens"), "5000");
    assert_eq!(col(messages, "tier_above_input_tokens"), "200000");
    assert_eq!(
        Money::parse(&col(messages, "cost")).unwrap(),
        expected_cost(seen("anthropic", BIG))
    );
    let chat = rows.iter().find(|r| col(r, "model") == "b-chat").unwrap();
    assert_eq!(col(chat, "reasoning_tokens"), "200");
    assert_eq!(col(chat, "cache_write_5m_tokens"), "1000");
    assert_eq!(col(chat, "tier_above_input_tokens"), "");
    // Totals of the usage view add the kinds up.
    let totals = &gw.admin("/admin/usage").json()["totals"];
    assert_eq!(totals["cache_write_1h_tokens"], 5_000, "{totals}");
    assert_eq!(totals["cached_input_tokens"], 42_000, "{totals}");
    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    for line in [
        "tollgate_tokens_total{model=\"b-messages\",kind=\"cache_write_5m\"} 10000",
        "tollgate_tokens_total{model=\"b-messages\",kind=\"cache_write_1h\"} 5000",
        "tollgate_tokens_total{model=\"b-messages\",kind=\"cached_input\"} 40000",
        "tollgate_tokens_total{model=\"b-chat\",kind=\"reasoning\"} 200",
        "tollgate_tier_requests_total{model=\"b-messages\",above_input_tokens=\"200000\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
}

/// Ledger lines written before the new fields existed still replay and read back (the missing kinds as 0).
#[test]
fn old_ledger_lines_still_replay() {
    let dir = TempDir::new("billing-old");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let line = json!({"ts": "2026-11-01T10:00:00.000Z", "request_id": "req_old", "key": "default",
                      "group": "default", "model": "mock", "protocol": "chat", "upstream": "mock",
                      "stream": false, "status": 200, "input_tokens": 10, "cached_input_tokens": 4,
                      "output_tokens": 3, "cost": 0.5, "latency_ms": 1});
    std::fs::write(data.join("usage.jsonl"), format!("{line}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(
            data.join("usage.jsonl"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    let cfg = standard_config(
        dir.path(),
        None,
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    );
    let gw = Gateway::start_with(dir, &cfg);
    let rec = gw.admin("/admin/usage?request_id=req_old").json()["data"][0].clone();
    assert_eq!(rec["cached_input_tokens"], 4, "{rec}");
    assert_eq!(rec["cache_write_5m_tokens"], 0, "{rec}");
    assert_eq!(rec["cache_write_1h_tokens"], 0, "{rec}");
    assert_eq!(money(&rec["cost"]), Money::parse("0.5").unwrap());
    assert!(!gw.all_logs().contains("ERROR"), "{}", gw.all_logs());
}

/// With a shared store, what the store settles and what the shipped records say are the same costs, every
/// kind of token billed: a key's spend in the store is the sum of its records' costs to the unit, and the
/// shared usage stream carries the breakdown.
#[test]
fn the_store_settles_and_ships_the_same_cost() {
    let redis = common::redis::Redis::start(false);
    let fake = FakeUpstream::start(answer);
    let gw = gateway_with(&fake, "instance = \"bill-a\"", "", &redis.store_section(""));
    let key = gw.add_key("stored", "default", Some(100.0));
    let mut want = Money::ZERO;
    for (scenario, parts) in [("small", SMALL), ("big", BIG)] {
        for stream in [false, true] {
            let r = gw.post_as(
                &key,
                "/v1/messages",
                &request(
                    "messages",
                    "b-messages",
                    &format!("SCENARIO-{scenario}"),
                    stream,
                ),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            want += expected_cost(seen("anthropic", parts));
        }
    }
    let mut records = Vec::new();
    wait_for(
        || {
            records = gw.admin("/admin/usage?key=stored").json()["data"]
                .as_array()
                .unwrap()
                .clone();
            records.len() == 4
        },
        "the four records in the shared usage stream",
    );
    let shipped: Money = records.iter().map(|r| money(&r["cost"])).sum();
    assert_eq!(shipped, want);
    assert!(
        records.iter().all(|r| r["cache_write_1h_tokens"] != 0),
        "{records:?}"
    );
    let spent = || {
        let keys = gw.admin("/admin/keys").json();
        let k = keys["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == "stored")
            .cloned()
            .unwrap();
        money(&k["spent"])
    };
    wait_for(|| spent() == want, "the store's spend to match the records");
}
