//! The promises about money and availability, each attacked through the real binary: upstreams that fail in
//! runs or stop answering, upstreams that ignore output limits, SIGTERM during long streams, two credentials
//! in one request, and the small truths of the HTTP edge (HTTP/1.0 streams, headers on the layer's own
//! errors, event-stream error bodies, plain JSON answers to streaming requests).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

fn chat_ok(completion_tokens: u64) -> Value {
    json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens, "total_tokens": 3 + completion_tokens}})
}

fn upstream_block(name: &str, addr: SocketAddr, extra: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"http://{addr}/v1\"\n{extra}\n\n"
    )
}

/// A port on which nothing listens (connections are refused).
fn dead_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a
}

fn admin_upstream(gw: &Gateway, model: &str, upstream: &str) -> Value {
    let models = gw.admin("/admin/models").json();
    let m = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .cloned()
        .unwrap();
    m["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == upstream)
        .cloned()
        .unwrap()
}

fn metrics(gw: &Gateway) -> String {
    gw.request("GET", "/metrics", &[], b"").text()
}

/// Five 5xx in a row from a model's only upstream (say a prompt that crashes a local server, retried by its
/// client) must not turn into an outage: every later request is still tried and gets the upstream's own
/// answer, never a 503 the gateway made up. With a healthy sibling, traffic moves there instead.
#[test]
fn a_run_of_upstream_errors_never_takes_a_model_offline() {
    let failing = Arc::new(AtomicUsize::new(1));
    let f = failing.clone();
    let flaky = FakeUpstream::start(move |_| {
        if f.load(Ordering::SeqCst) == 1 {
            Reply::json(
                500,
                &json!({"error": {"message": "the model server crashed", "type": "server_error"}}),
            )
        } else {
            Reply::json(200, &chat_ok(1))
        }
    });
    let good = FakeUpstream::start(|_| Reply::json(200, &chat_ok(1)));
    let dir = TempDir::new("guar-errors");
    let config = format!(
        "{}{}{}[[models]]\nname = \"only\"\nupstream = \"flaky\"\n\n[[models]]\nname = \"pair\"\nupstream = [\"flaky\", \"good\"]\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        upstream_block("flaky", flaky.addr, "breaker_failures = 3\nbreaker_cooldown_secs = 600"),
        upstream_block("good", good.addr, ""),
    );
    let gw = Gateway::start_with(dir, &config);
    for i in 0..12 {
        let r = gw.post("/v1/chat/completions", &chat("only", &format!("crash {i}")));
        assert_eq!(r.status, 500, "request {i}: {}", r.text());
        assert!(
            r.text().contains("the model server crashed"),
            "{}",
            r.text()
        );
    }
    assert_eq!(
        flaky.received().len(),
        12,
        "every request reached the only upstream"
    );
    let u = admin_upstream(&gw, "only", "flaky");
    assert_eq!(u["breaker"]["state"], "ejected", "{u}");
    assert!(u["breaker"]["reason"].as_str().unwrap().contains("crashed"));
    assert!(
        metrics(&gw).contains("tollgate_upstream_breaker{upstream=\"flaky\",state=\"ejected\"} 1")
    );

    // The pair's healthy sibling takes the traffic while `flaky` is ejected.
    let before = flaky.received().len();
    for _ in 0..5 {
        assert_eq!(
            gw.post("/v1/chat/completions", &chat("pair", "hi")).status,
            200
        );
    }
    assert_eq!(flaky.received().len(), before, "ejected: passed over");
    assert_eq!(good.received().len(), 5);

    // It recovers: the only-upstream model keeps being served, and one good answer closes the breaker.
    failing.store(0, Ordering::SeqCst);
    assert_eq!(
        gw.post("/v1/chat/completions", &chat("only", "back"))
            .status,
        200
    );
    assert_eq!(
        admin_upstream(&gw, "only", "flaky")["breaker"]["state"],
        "closed"
    );
}

/// An upstream that does not answer at all (connection refused) is short-circuited when it is the model's
/// last one: after `breaker_failures` the client gets 503 with retry-after naming the upstream and what
/// failed, without a connection attempt; when it answers again, a probe finds it and traffic resumes.
#[test]
fn a_silent_last_upstream_is_short_circuited_then_probed_back() {
    let addr = dead_port();
    let dir = TempDir::new("guar-silent");
    let config = format!(
        "{}{}[[models]]\nname = \"m\"\nupstream = \"local\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        upstream_block("local", addr, "breaker_failures = 2\nbreaker_cooldown_secs = 1"),
    );
    let gw = Gateway::start_with(dir, &config);
    for _ in 0..2 {
        let r = gw.post("/v1/chat/completions", &chat("m", "hi"));
        assert_eq!(r.status, 502, "{}", r.text());
    }
    // Open now (or, a second later, being probed): the next requests are refused at once until it is back.
    let r = gw.post("/v1/chat/completions", &chat("m", "hi"));
    if r.status == 503 {
        let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry), "retry-after {retry}");
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("`local`"), "{msg}");
        assert!(msg.contains("did not answer"), "{msg}");
        assert!(msg.contains("connection"), "{msg}");
        assert_eq!(r.json()["error"]["code"], "upstream_unavailable");
    } else {
        // The cool-down had already passed: this request was the probe and found it still silent.
        assert_eq!(r.status, 502, "{}", r.text());
    }
    let u = admin_upstream(&gw, "m", "local");
    assert!(
        ["open", "probing"].contains(&u["breaker"]["state"].as_str().unwrap()),
        "{u}"
    );
    assert!(u["breaker"]["reason"]
        .as_str()
        .unwrap()
        .contains("connection"));
    assert!(
        metrics(&gw).contains("tollgate_upstream_breaker{upstream=\"local\",state=\"open\"} 1")
            || metrics(&gw)
                .contains("tollgate_upstream_breaker{upstream=\"local\",state=\"probing\"} 1")
    );

    // The upstream comes back on its port: within a cool-down a probe gets through and it serves again.
    let listener = TcpListener::bind(addr).unwrap();
    let back = FakeUpstream::start_on(listener, |_| Reply::json(200, &chat_ok(1)));
    wait_for(
        || gw.post("/v1/chat/completions", &chat("m", "hi")).status == 200,
        "the upstream to be probed back",
    );
    assert_eq!(
        admin_upstream(&gw, "m", "local")["breaker"]["state"],
        "closed"
    );
    assert!(!back.received().is_empty());
}

/// Upstreams that ignore output limits and report huge usage cannot push a key with a finite balance
/// beyond one request's worst case: every upstream request carries the reserved limit, output beyond it is
/// not billed, and a stream that reports more than its limit is cut there.
#[test]
fn a_finite_balance_cannot_be_overspent_by_an_upstream_that_ignores_limits() {
    let fake = FakeUpstream::start(|rec| {
        let body = rec.json();
        if body["stream"] == true {
            let delta = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": null}]});
            let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 100_000, "total_tokens": 100_003}});
            let mut events: Vec<Vec<u8>> = (0..20)
                .map(|_| format!("data: {delta}\n\n").into_bytes())
                .collect();
            events.push(format!("data: {usage}\n\n").into_bytes());
            events.push(b"data: [DONE]\n\n".to_vec());
            Reply::sse(events)
        } else {
            Reply::json(200, &chat_ok(100_000))
        }
    });
    let dir = TempDir::new("guar-limits");
    // Worst case of one request: 1000 output tokens at 500 credits per 1M = 0.5 credits (input is free).
    let config = format!(
        "{}{}[[models]]\nname = \"m\"\nupstream = \"up\"\nmax_output_tokens = 1000\ninput_price = 0.0\noutput_price = 500.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        upstream_block("up", fake.addr, ""),
    );
    let gw = Gateway::start_with(dir, &config);
    let credit = 1.0;
    let worst = 0.5;
    let key = gw.add_key("capped", "default", Some(credit));

    // Non-streaming, no max_tokens from the client: the limit is injected; the huge report is billed at it.
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("m", "go"));
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.last().json();
    assert_eq!(
        sent["max_tokens"], 1000,
        "the reserved limit goes upstream: {sent}"
    );

    // Streaming, with a decoy field of another protocol: the stream is cut at the report.
    let mut body = chat("m", "stream");
    body["stream"] = json!(true);
    body["max_output_tokens"] = json!(0);
    let r = gw.post_as(&key, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    let sent = fake.last().json();
    assert!(
        sent.get("max_output_tokens").is_none(),
        "decoy dropped: {sent}"
    );
    assert_eq!(sent["max_tokens"], 1000, "{sent}");
    let events = r.events();
    let last = &events.last().unwrap().1;
    assert!(
        last.contains("output_limit_exceeded"),
        "cut with an error: {last}"
    );
    assert!(!events.iter().any(|(_, d)| d == "[DONE]"));

    // Until the balance is gone: then 429.
    let mut statuses = Vec::new();
    for i in 0..10 {
        let s = gw
            .post_as(
                &key,
                "/v1/chat/completions",
                &chat("m", &format!("more {i}")),
            )
            .status;
        statuses.push(s);
        if s == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    let records = gw.admin("/admin/usage?key=capped&limit=100").json()["data"]
        .as_array()
        .unwrap()
        .clone();
    for rec in &records {
        assert!(
            rec["output_tokens"].as_u64().unwrap() <= 1000,
            "billed beyond the limit: {rec}"
        );
    }
    let spent: f64 = records.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    assert!(
        spent <= credit + worst + 1e-9,
        "spent {spent} > credit {credit} + one worst case {worst}"
    );
}

/// The same bound against a decoy field on the other protocols, with requests in parallel: a Messages
/// request's own `max_tokens` is what is reserved and forwarded, whatever `max_completion_tokens` says.
#[test]
fn decoy_limit_fields_cannot_shrink_the_reservation() {
    let fake = FakeUpstream::start(|_| {
        Reply::json(
            200,
            &json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
                "content": [{"type": "text", "text": "long"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 8192}}),
        )
    });
    let dir = TempDir::new("guar-decoy");
    let config = format!(
        "{}[[upstreams]]\nname = \"a\"\nkind = \"anthropic\"\nbase_url = \"http://{}\"\n\n\
         [[models]]\nname = \"m\"\nupstream = \"a\"\ninput_price = 0.0\noutput_price = 100.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(
            dir.path(),
            &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")
        ),
        fake.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let credit = 1.0;
    // One request's worst case: 8192 tokens at 100 per 1M, plus a small input estimate at price 0.
    let worst = 8192.0 * 100.0 / 1e6;
    let key = gw.add_key("decoy", "default", Some(credit));
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let (addr, key) = (gw.addr, key.clone());
            std::thread::spawn(move || {
                let body = json!({"model": "m", "max_tokens": 8192, "max_completion_tokens": 0,
                                  "messages": [{"role": "user", "content": format!("decoy {i}")}]});
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                send_request(
                    &mut s,
                    "POST",
                    "/v1/messages",
                    &[("x-api-key", &key), ("anthropic-version", "2023-06-01")],
                    body.to_string().as_bytes(),
                    true,
                );
                read_response(&mut BufReader::new(s)).status
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    for rec in fake.received() {
        let v = rec.json();
        assert!(
            v.get("max_completion_tokens").is_none(),
            "decoy forwarded: {v}"
        );
        assert_eq!(v["max_tokens"], 8192);
    }
    let spent: f64 = gw.admin("/admin/usage?key=decoy&limit=100").json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cost"].as_f64().unwrap())
        .sum();
    assert!(spent <= credit + worst + 1e-9, "spent {spent}");
}

/// SIGTERM with a stream longer than the grace period: at the deadline the stream gets the protocol's
/// in-stream error, a request still waiting for its upstream gets 503, both leave a usage record saying
/// they were cut by shutdown, and the process exits 0.
#[test]
fn shutdown_cuts_what_outlives_the_grace_period_and_loses_nothing() {
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(Some(gate_rx));
    let fake = FakeUpstream::start(move |rec| {
        let body = rec.json();
        if body["stream"] == true {
            let delta = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": "partial "}, "finish_reason": null}]});
            Reply::Sse {
                events: vec![
                    format!("data: {delta}\n\n").into_bytes(),
                    b"data: [DONE]\n\n".to_vec(),
                ],
                gate: gate.lock().unwrap().take().map(|rx| (1, rx)),
                abort: false,
            }
        } else {
            Reply::Hang
        }
    });
    let dir = TempDir::new("guar-shutdown");
    let config = format!(
        "{}{}[[models]]\nname = \"m\"\nupstream = \"up\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), "shutdown_grace_secs = 1\nledger_sync_ms = 50"),
        upstream_block("up", fake.addr, "first_byte_timeout_secs = 600\nidle_timeout_secs = 600"),
    );
    let mut gw = Gateway::spawn_with(dir, &config);
    let ledger = gw.dir.path().join("data").join("usage.jsonl");

    // A stream that will not end by itself.
    let mut stream = gw.connect();
    let auth = format!("Bearer {}", gw.key);
    let mut body = chat("m", "long");
    body["stream"] = json!(true);
    send_request(
        &mut stream,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("x-client-request-id", "cut-stream"),
        ],
        body.to_string().as_bytes(),
        true,
    );
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    let first = read_chunk(&mut reader).unwrap();
    assert!(String::from_utf8_lossy(&first).contains("partial"));
    // A non-streaming request whose upstream never answers.
    let (addr, key) = (gw.addr, gw.key.clone());
    let waiting = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let auth = format!("Bearer {key}");
        send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &auth),
                ("x-client-request-id", "cut-wait"),
            ],
            chat("m", "wait").to_string().as_bytes(),
            true,
        );
        read_response(&mut BufReader::new(s))
    });
    wait_for(|| fake.received().len() == 2, "both requests upstream");

    signal(gw.pid(), "TERM");
    let mut rest = Vec::new();
    while let Some(chunk) = read_chunk(&mut reader) {
        rest.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&rest).into_owned();
    assert!(text.contains("shutting_down"), "in-stream error: {text}");
    assert!(!text.contains("[DONE]"));
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "shutting_down");
    assert_eq!(
        wait_exit(gw.child(), Duration::from_secs(30)),
        Some(0),
        "{}",
        gw.all_logs()
    );
    drop(gate_tx);
    let records: Vec<Value> = std::fs::read_to_string(&ledger)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for id in ["cut-stream", "cut-wait"] {
        let rec = records
            .iter()
            .find(|r| r["client_request_id"] == id)
            .unwrap_or_else(|| panic!("no record for {id}: {records:?}"));
        assert_eq!(rec["status"], "shutdown", "{rec}");
    }
    let stream_rec = records
        .iter()
        .find(|r| r["client_request_id"] == "cut-stream")
        .unwrap();
    assert!(
        stream_rec["output_tokens"].as_u64().unwrap() > 0,
        "tokens so far: {stream_rec}"
    );
    assert!(gw.all_logs().contains("cutting them"));
}

/// Two different credentials in one request are refused with 400 naming the conflict, never one of them
/// billed at random; the same key twice is fine.
#[test]
fn two_credentials_in_one_request_are_refused() {
    let gw = Gateway::start_mock("");
    let other = gw.add_key("other", "default", None);
    let body =
        json!({"model": "mock", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
            .to_string();
    let bearer = format!("Bearer {}", gw.key);
    let r = gw.request(
        "POST",
        "/v1/messages",
        &[
            ("authorization", &bearer),
            ("x-api-key", &other),
            ("anthropic-version", "2023-06-01"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("two different API keys"), "{msg}");
    assert!(!msg.contains(&gw.key) && !msg.contains(&other));
    let other_bearer = format!("Bearer {other}");
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &bearer), ("authorization", &other_bearer)],
        chat("mock", "x").to_string().as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = gw.request(
        "POST",
        "/v1/messages",
        &[
            ("authorization", &bearer),
            ("x-api-key", &gw.key),
            ("anthropic-version", "2023-06-01"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// An HTTP/1.0 client asking for a stream gets it without chunked framing, ended by the connection closing.
#[test]
fn an_http_1_0_stream_is_close_delimited() {
    let gw = Gateway::start_mock("");
    let mut s = gw.post_http10_stream("mock");
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("transfer-encoding"),
        "{head}"
    );
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert!(rest.starts_with("data: "), "no chunk sizes: {rest:?}");
    assert!(rest.contains("\"content\":"), "{rest:?}");
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest:?}");
}

/// Answers the HTTP layer gives by itself carry the headers every other answer carries.
#[test]
fn the_http_layers_own_errors_carry_the_usual_headers() {
    let gw = Gateway::start_mock("");
    let mut s = gw.connect();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
        .unwrap();
    let r = read_response(&mut BufReader::new(s));
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    assert!(r.header("x-tollgate-overhead-ms").is_some());
    assert!(r.header("x-request-id").is_some());
}

/// An upstream 5xx whose body is an event stream is reported with its message and code, not raw `data:`.
#[test]
fn an_event_stream_error_body_is_read_for_its_message() {
    let fake = FakeUpstream::start(|_| {
        Reply::Json {
        status: 500,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body: b"event: error\ndata: {\"error\":{\"message\":\"engine died\",\"type\":\"server_error\",\"code\":\"engine_dead\"}}\n\n".to_vec(),
    }
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let r = gw.post("/v1/chat/completions", &chat("m-chat", "x"));
    assert_eq!(r.status, 500);
    let e = &r.json()["error"];
    assert!(
        e["message"].as_str().unwrap().contains("engine died"),
        "{e}"
    );
    assert!(!e["message"].as_str().unwrap().contains("data:"), "{e}");
    assert_eq!(e["code"], "engine_dead");
}

/// A streaming request answered with one plain JSON body gets a stream in its own protocol, on passthrough
/// and translated paths alike (one documented behaviour).
#[test]
fn a_plain_json_answer_to_a_stream_becomes_a_stream_on_every_path() {
    let fake = FakeUpstream::start(|_| Reply::json(200, &chat_ok(2)));
    let gw = Gateway::start_with_fake(fake.addr, "");
    // Passthrough (Chat client, Chat upstream) and translation (Messages client, Chat upstream).
    let mut body = chat("m-chat", "x");
    body["stream"] = json!(true);
    let r = gw.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    assert!(
        events
            .iter()
            .any(|(_, d)| d.contains("\"content\":\"fine\"")),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let body = json!({"model": "m-chat", "max_tokens": 10, "stream": true,
                      "messages": [{"role": "user", "content": "x"}]});
    let r = gw.post("/v1/messages", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let names: Vec<String> = r.events().into_iter().filter_map(|(e, _)| e).collect();
    assert_eq!(names.first().map(String::as_str), Some("message_start"));
    assert_eq!(names.last().map(String::as_str), Some("message_stop"));
}
