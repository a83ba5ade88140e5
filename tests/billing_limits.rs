//! Billing and spending limits against a hostile tenant, through the real binary: upstream work a client
//! walks away from, Chat's `n`, the output limit in the field the upstream reads, budgets without a
//! credit, image inputs in small bodies, and token counts near 2^64.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn chat_answer(prompt: u64, completion: u64, choices: u64) -> Value {
    let choices: Vec<Value> = (0..choices)
        .map(|i| json!({"index": i, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}))
        .collect();
    json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x", "choices": choices,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt.saturating_add(completion)}})
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// A test config: the admin token, the given upstreams, models and groups (`default` allows every model).
fn config(dir: &TempDir, upstreams: &str, models: &str, groups: &str) -> String {
    format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n{upstreams}\n[[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n\
         {models}\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n{groups}",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
    )
}

fn chat_upstream(name: &str, addr: SocketAddr, extra: &str) -> String {
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

/// A key's usage records, newest first.
fn records(gw: &Gateway, key: &str) -> Vec<Value> {
    gw.admin(&format!("/admin/usage?key={key}&limit=1000"))
        .json()["data"]
        .as_array()
        .unwrap()
        .clone()
}

/// A key with a daily budget of its own and no credit.
fn add_budget_key(gw: &Gateway, name: &str, group: &str, budget: &str) -> String {
    let args = [
        "keys", "add", "--name", name, "--group", group, "--budget", budget, "--period", "daily",
    ];
    let (code, out, err) = gw.cli(&args);
    assert_eq!(code, 0, "keys add: {err}");
    let key = out.lines().last().unwrap().to_string();
    let auth = format!("Bearer {key}");
    wait_for(
        || {
            gw.request("GET", "/v1/models", &[("authorization", &auth)], b"")
                .status
                == 200
        },
        "the new key",
    );
    key
}

/// POSTs `body` with `key` from several threads at once; the statuses, in the order of `bodies`.
fn post_all(gw: &Gateway, key: &str, path: &str, bodies: Vec<Value>) -> Vec<u16> {
    let handles: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let (addr, key, path) = (gw.addr, key.to_string(), path.to_string());
            std::thread::spawn(move || post_raw(addr, &key, &path, &body))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn post_raw(addr: SocketAddr, key: &str, path: &str, body: &Value) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let auth = format!("Bearer {key}");
    let mut headers = vec![("authorization", auth.as_str())];
    if path == "/v1/messages" {
        headers.push(("anthropic-version", "2023-06-01"));
    }
    send_request(
        &mut s,
        "POST",
        path,
        &headers,
        body.to_string().as_bytes(),
        true,
    );
    read_response(&mut BufReader::new(s)).status
}

/// Break 2. A client that goes away before the upstream's first byte still pays for the work it started:
/// the upstream had the whole request, so the record carries the estimated input (marked estimated) at
/// the model's price and the balance drops, streamed or not, on passthrough and translated paths alike.
/// A request the upstream never took (connection refused) or refused with its own error answer is not
/// billed.
#[test]
fn a_request_its_upstream_took_is_billed_when_the_client_leaves_first() {
    let (closed_tx, closed_rx) = mpsc::channel();
    let closed_tx = Mutex::new(closed_tx);
    // Answers nothing until the gateway gives up the call (it closes the connection when its client left).
    let late = FakeUpstream::start(move |_| Reply::HoldUntilClosed {
        prelude: Vec::new(),
        closed: closed_tx.lock().unwrap().clone(),
    });
    let failing = FakeUpstream::start(|_| {
        Reply::json(
            500,
            &json!({"error": {"message": "the model server crashed", "type": "server_error"}}),
        )
    });
    let dir = TempDir::new("bill-late");
    let prices = "input_price = 1000.0\noutput_price = 1000.0\n";
    let cfg = config(
        &dir,
        &format!(
            "{}{}{}",
            chat_upstream("late", late.addr, ""),
            chat_upstream("failing", failing.addr, ""),
            chat_upstream("dead", dead_port(), "")
        ),
        &format!(
            "[[models]]\nname = \"m\"\nupstream = \"late\"\n{prices}\n\
             [[models]]\nname = \"m-fail\"\nupstream = \"failing\"\n{prices}\n\
             [[models]]\nname = \"m-dead\"\nupstream = \"dead\"\n{prices}\n"
        ),
        "",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let key = gw.add_key("walker", "default", Some(100.0));
    let text = "Summarise the history of the printing press in great detail, please.";
    let mut stream_chat = chat("m", text);
    stream_chat["stream"] = json!(true);
    let cases = [
        ("/v1/chat/completions", chat("m", text)),
        ("/v1/chat/completions", stream_chat),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 100, "stream": true,
                   "messages": [{"role": "user", "content": text}]}),
        ),
        ("/v1/responses", json!({"model": "m", "input": text})),
    ];
    let auth = format!("Bearer {key}");
    for (i, (path, body)) in cases.iter().enumerate() {
        let mut s = TcpStream::connect(gw.addr).unwrap();
        let mut headers = vec![("authorization", auth.as_str())];
        if *path == "/v1/messages" {
            headers.push(("anthropic-version", "2023-06-01"));
        }
        send_request(
            &mut s,
            "POST",
            path,
            &headers,
            body.to_string().as_bytes(),
            false,
        );
        wait_for(
            || late.received().len() > i,
            "the upstream to have the request",
        );
        // The client leaves before the upstream's first byte.
        s.shutdown(std::net::Shutdown::Both).unwrap();
        drop(s);
        closed_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the gateway to give up the upstream call once its client left");
        wait_for(|| records(&gw, "walker").len() > i, "the usage record");
        let rec = records(&gw, "walker")[0].clone();
        assert_eq!(rec["status"], "client_closed", "{path} {i}: {rec}");
        assert!(
            rec["input_tokens"].as_u64().unwrap() > 0,
            "{path} {i}: {rec}"
        );
        assert_eq!(rec["estimated"], true, "{path} {i}: {rec}");
        assert!(rec["cost"].as_f64().unwrap() > 0.0, "{path} {i}: {rec}");
    }
    let recs = records(&gw, "walker");
    let total: f64 = recs.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    let row = gw.key_row("walker");
    assert!(row["spent"].as_f64().unwrap() > 0.0, "{row}");
    assert!(
        (row["spent"].as_f64().unwrap() - total).abs() < 1e-9,
        "{row}"
    );
    assert!(row["balance"].as_f64().unwrap() < 100.0, "{row}");

    // Not taken: refused connections and the upstream's own error answers are not billed.
    for (model, status) in [("m-dead", 502), ("m-fail", 500)] {
        let r = gw.post_as(&key, "/v1/chat/completions", &chat(model, text));
        assert_eq!(r.status, status, "{}", r.text());
        let id = r.header("x-request-id").unwrap().to_string();
        let rec = records(&gw, "walker")
            .into_iter()
            .find(|r| r["request_id"] == id.as_str())
            .expect("a record");
        assert_eq!(rec["cost"].as_f64().unwrap(), 0.0, "{rec}");
        assert_eq!(rec["input_tokens"], 0, "{rec}");
    }
}

/// A Chat stream that writes a short answer, pauses after its finish chunk (until the test lets it go on),
/// then reports its usage (20,000 output tokens, nearly all hidden reasoning) and ends; or, `report` false,
/// ends after the pause without any usage.
fn reasoning_stream(report: bool, go_on: mpsc::Receiver<()>) -> Reply {
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n").into_bytes()
    };
    let mut events = vec![
        chunk(
            json!({"role": "assistant", "content": "The answer is 42."}),
            Value::Null,
        ),
        chunk(json!({}), json!("stop")),
    ];
    if report {
        let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
            "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 20000, "total_tokens": 20012,
            "completion_tokens_details": {"reasoning_tokens": 19990}}});
        events.push(format!("data: {usage}\n\n").into_bytes());
        events.push(b"data: [DONE]\n\n".to_vec());
    } else {
        // Something after the pause, then the connection drops.
        events.push(b": still here\n\n".to_vec());
    }
    Reply::Sse {
        events,
        gate: Some((2, go_on)),
        abort: !report,
    }
}

/// Third review, 4: what the upstream did is billed however the client leaves. A client that reads the
/// answer to its end (the finish) and closes before the usage report: the gateway reads the upstream's
/// stream on to its usage and bills the hidden reasoning (20,000 output tokens, not the visible text's
/// few), on passthrough and on translation; a stream that then ends without any usage is billed the output
/// limit, not the visible text.
#[test]
fn hidden_reasoning_is_billed_when_the_client_leaves_before_the_usage() {
    let gates: Arc<Mutex<Vec<mpsc::Receiver<()>>>> = Arc::new(Mutex::new(Vec::new()));
    let report = Arc::new(Mutex::new(true));
    let (g, rep) = (gates.clone(), report.clone());
    let fake = FakeUpstream::start(move |_| {
        let go_on = g.lock().unwrap().remove(0);
        reasoning_stream(*rep.lock().unwrap(), go_on)
    });
    let dir = TempDir::new("bill-reasoning");
    let cfg = format!(
        "log_level = \"debug\"\n{}",
        config(
            &dir,
            &chat_upstream("up", fake.addr, ""),
            "[[models]]\nname = \"m\"\nupstream = \"up\"\ninput_price = 1.0\noutput_price = 1.0\n\
             max_output_tokens = 32000\n\n",
            "",
        )
    );
    let gw = Gateway::start_with(dir, &cfg);
    let key = gw.add_key("thinker", "default", Some(100.0));
    let auth = format!("Bearer {key}");
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "stream": true, "max_tokens": 30000,
                   "messages": [{"role": "user", "content": "think"}]}),
            "\"finish_reason\":\"stop\"",
            true,
        ),
        (
            "/v1/messages",
            json!({"model": "m", "stream": true, "max_tokens": 30000,
                   "messages": [{"role": "user", "content": "think"}]}),
            // The Messages stream's closing events wait for the usage: the client has read the text.
            "The answer is 42.",
            true,
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "stream": true, "max_tokens": 30000,
                   "messages": [{"role": "user", "content": "think"}]}),
            "\"finish_reason\":\"stop\"",
            false,
        ),
    ];
    for (i, (path, body, end, reports)) in cases.into_iter().enumerate() {
        *report.lock().unwrap() = reports;
        let (go, go_on) = mpsc::channel();
        gates.lock().unwrap().push(go_on);
        let mut s = TcpStream::connect(gw.addr).unwrap();
        let headers = [
            ("authorization", auth.as_str()),
            ("anthropic-version", "2023-06-01"),
        ];
        send_request(
            &mut s,
            "POST",
            path,
            &headers,
            body.to_string().as_bytes(),
            false,
        );
        // The client reads its answer to the end of the text, and leaves.
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains(end) {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap();
            assert!(
                n > 0,
                "{path}: the stream ended early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        s.shutdown(std::net::Shutdown::Both).unwrap();
        drop(s);
        // The upstream goes on once the gateway has seen the client leave.
        let head = String::from_utf8_lossy(&seen).to_string();
        let at = head.to_ascii_lowercase().find("x-request-id: ").unwrap() + "x-request-id: ".len();
        let id = head[at..].split("\r\n").next().unwrap().to_string();
        let left = format!("{id}: the client left");
        wait_for(
            || gw.all_logs().contains(&left),
            "the gateway to see its client leave",
        );
        // Longer than the upstream wait's slice: a gateway that gave up the call when its client left has
        // given it up by now (passing does not depend on it: the drain lasts 30 s).
        std::thread::sleep(Duration::from_millis(600));
        go.send(()).unwrap();
        wait_for(|| records(&gw, "thinker").len() > i, "the usage record");
        let rec = records(&gw, "thinker")[0].clone();
        assert_eq!(rec["status"], "client_closed", "{path}: {rec}");
        if reports {
            assert_eq!(rec["output_tokens"], 20000, "{path}: {rec}");
            assert_eq!(rec["reasoning_tokens"], 19990, "{path}: {rec}");
            assert_eq!(rec["input_tokens"], 12, "{path}: {rec}");
            assert_eq!(rec["estimated"], false, "{path}: {rec}");
        } else {
            assert_eq!(
                rec["output_tokens"], 30000,
                "no usage came: the limit is billed: {rec}"
            );
            assert_eq!(rec["estimated"], true, "{rec}");
        }
    }
}

/// Break 3, `n`. On Chat passthrough `n` is honoured and paid for: the reservation is the limit times
/// `n` (a tpm limit that one choice fits but eight do not refuses eight), and the answer is billed up to
/// the limit times `n`. Paths that cannot give several choices (translation, the built-in model) refuse
/// `n` above 1 with 400 naming it.
#[test]
fn chat_n_is_reserved_and_billed_per_choice() {
    let fake = FakeUpstream::start(|rec| {
        let n = rec.json()["n"].as_u64().unwrap_or(1);
        // Each choice writes 10 tokens.
        Reply::json(200, &chat_answer(5, 10 * n, n))
    });
    let dir = TempDir::new("bill-n");
    let cfg = config(
        &dir,
        &format!(
            "{}[[upstreams]]\nname = \"msgs\"\nkind = \"anthropic\"\nbase_url = \"http://{}\"\n\n",
            chat_upstream("chat", fake.addr, ""),
            fake.addr
        ),
        "[[models]]\nname = \"m\"\nupstream = \"chat\"\ninput_price = 0.0\noutput_price = 1000.0\n\n\
         [[models]]\nname = \"m-tr\"\nupstream = \"msgs\"\n\n",
        "[[groups]]\nname = \"tight\"\nmodels = [\"*\"]\ntpm = 60\n",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let key = gw.add_key("chooser", "default", Some(100.0));
    let mut body = chat("m", "hi");
    body["n"] = json!(8);
    body["max_tokens"] = json!(10);
    let r = gw.post_as(&key, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"].as_array().unwrap().len(), 8);
    let sent = fake.last().json();
    assert_eq!(sent["n"], 8, "{sent}");
    assert_eq!(sent["max_tokens"], 10, "{sent}");
    let rec = records(&gw, "chooser")[0].clone();
    assert_eq!(rec["output_tokens"], 80, "billed per choice: {rec}");
    assert!(
        (rec["cost"].as_f64().unwrap() - 0.08).abs() < 1e-12,
        "{rec}"
    );

    // The reservation counts every choice: under a tpm of 60, one choice of 10 passes, eight do not.
    let tight = gw.add_key("tight", "tight", None);
    let mut one = chat("m", "hi");
    one["max_tokens"] = json!(10);
    assert_eq!(gw.post_as(&tight, "/v1/chat/completions", &one).status, 200);
    let r = gw.post_as(&tight, "/v1/chat/completions", &body);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("tokens-per-minute"), "{}", r.text());

    // Where `n` cannot be honoured it is refused, naming it; so is a nonsensical `n`.
    let before = fake.received().len();
    for model in ["m-tr", "mock"] {
        let mut b = chat(model, "hi");
        b["n"] = json!(2);
        let r = gw.post_as(&key, "/v1/chat/completions", &b);
        assert_eq!(r.status, 400, "{model}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "n", "{model}: {}", r.text());
    }
    let mut zero = chat("m", "hi");
    zero["n"] = json!(0);
    let r = gw.post_as(&key, "/v1/chat/completions", &zero);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "n");
    assert_eq!(
        fake.received().len(),
        before,
        "refused before any upstream call"
    );
}

/// Break 3, the field. Whatever field the client used, the one output limit goes upstream in the field that
/// upstream reads (`max_tokens_field`), and only there; so an upstream that reads `max_tokens` cannot be
/// handed a `max_completion_tokens` it ignores. A stream from an upstream that ignores the limit anyway is
/// cut there and billed at the limit.
#[test]
fn the_output_limit_goes_in_the_field_the_upstream_reads() {
    let fake = FakeUpstream::start(|rec| {
        if rec.json()["stream"] == true {
            // Ignores every limit: 3,000 words, no usage.
            let delta = json!({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": null}]});
            let mut events: Vec<Vec<u8>> = (0..3000)
                .map(|_| format!("data: {delta}\n\n").into_bytes())
                .collect();
            events.push(b"data: [DONE]\n\n".to_vec());
            Reply::sse(events)
        } else {
            Reply::json(200, &chat_answer(3, 3000, 1))
        }
    });
    let dir = TempDir::new("bill-field");
    let cfg = config(
        &dir,
        &format!(
            "{}{}",
            chat_upstream("reads-mt", fake.addr, "max_tokens_field = \"max_tokens\""),
            chat_upstream(
                "reads-mct",
                fake.addr,
                "max_tokens_field = \"max_completion_tokens\""
            )
        ),
        "[[models]]\nname = \"a\"\nupstream = \"reads-mt\"\nmax_output_tokens = 300\noutput_price = 1000.0\n\n\
         [[models]]\nname = \"b\"\nupstream = \"reads-mct\"\nmax_output_tokens = 300\noutput_price = 1000.0\n\n",
        "",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let unlimited = gw.key.clone();
    let capped = gw.add_key("capped", "default", Some(100.0));
    let cases = [
        (
            &unlimited,
            "a",
            json!({"max_completion_tokens": 10}),
            "max_tokens",
            Some(10),
        ),
        (
            &unlimited,
            "b",
            json!({"max_tokens": 10}),
            "max_completion_tokens",
            Some(10),
        ),
        (
            &unlimited,
            "a",
            json!({"max_tokens": 50, "max_completion_tokens": 10}),
            "max_tokens",
            Some(10),
        ),
        (&unlimited, "a", json!({}), "max_tokens", None),
        (&capped, "a", json!({}), "max_tokens", Some(300)),
        (
            &capped,
            "b",
            json!({"max_completion_tokens": 20}),
            "max_completion_tokens",
            Some(20),
        ),
    ];
    for (key, model, limit, field, expected) in cases {
        let mut body = chat(model, "hi");
        for (k, v) in limit.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = gw.post_as(key, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let sent = fake.last().json();
        assert_eq!(
            sent.get(field).and_then(Value::as_u64),
            expected,
            "{model} {limit}: {sent}"
        );
        for other in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
            if other != field {
                assert!(sent.get(other).is_none(), "{model} {limit}: {sent}");
            }
        }
    }
    // The non-streamed answer reached the client as written, but only the limit is billed.
    let rec = records(&gw, "capped")[0].clone();
    assert_eq!(rec["output_tokens"], 20, "{rec}");

    let mut body = chat("a", "go on");
    body["stream"] = json!(true);
    body["max_completion_tokens"] = json!(10);
    let r = gw.post_as(&capped, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200);
    let sent = fake.last().json();
    assert_eq!(sent["max_tokens"], 10, "{sent}");
    assert!(sent.get("max_completion_tokens").is_none(), "{sent}");
    let events = r.events();
    assert!(
        events.len() < 200,
        "cut near the limit: {} events",
        events.len()
    );
    let last = &events.last().unwrap().1;
    assert!(last.contains("output_limit_exceeded"), "{last}");
    let rec = records(&gw, "capped")[0].clone();
    assert!(rec["output_tokens"].as_u64().unwrap() <= 10, "{rec}");
}

/// Break 4. A key with a budget and no credit is held like one with a credit: every upstream request
/// carries the reserved limit, so twelve concurrent requests against an upstream that ignores limits and
/// reports 100,000 output tokens spend at most the budget plus one request's worst case. The same for a
/// key whose budget is its group's.
#[test]
fn a_budget_caps_spend_like_a_credit() {
    let fake = FakeUpstream::start(|_| Reply::json(200, &chat_answer(3, 100_000, 1)));
    let dir = TempDir::new("bill-budget");
    let cfg = config(
        &dir,
        &chat_upstream("up", fake.addr, ""),
        // Worst case of one request: 1000 output tokens at 500 per 1M = 0.5 (input is free).
        "[[models]]\nname = \"m\"\nupstream = \"up\"\nmax_output_tokens = 1000\ninput_price = 0.0\noutput_price = 500.0\n\n",
        "[[groups]]\nname = \"team\"\nmodels = [\"*\"]\nbudget = 1.0\nbudget_period = \"daily\"\n",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let (budget, worst) = (1.0, 0.5);
    let key = add_budget_key(&gw, "budgeted", "default", "1");
    let bodies: Vec<Value> = (0..12).map(|i| chat("m", &format!("spend {i}"))).collect();
    let statuses = post_all(&gw, &key, "/v1/chat/completions", bodies);
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(
        statuses.contains(&429),
        "the budget must run out: {statuses:?}"
    );
    for rec in fake.received() {
        assert_eq!(rec.json()["max_tokens"], 1000, "{}", rec.json());
    }
    let spent = gw.key_row("budgeted")["spent"].as_f64().unwrap();
    assert!(
        spent <= budget + worst + 1e-9,
        "spent {spent} > budget {budget} + one worst case {worst}"
    );

    let grouped = gw.add_key("grouped", "team", None);
    let r = gw.post_as(&grouped, "/v1/chat/completions", &chat("m", "hi"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["max_tokens"], 1000);
    let rec = records(&gw, "grouped")[0].clone();
    assert_eq!(rec["output_tokens"], 1000, "{rec}");
}

/// Break 5. Images are reserved at their providers' cost, not by the size of a body that merely links to
/// them: fifty URL images in a 3.5 KB body reserve fifty images, so of six concurrent requests against a
/// small balance one is admitted and five are refused while it is in flight. Every protocol's part shapes
/// count, nested ones included (a tpm limit refuses each).
#[test]
fn images_are_reserved_at_their_cost() {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let g = gate.clone();
    let fake = FakeUpstream::start(move |_| {
        let (open, cv) = &*g;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        // What fifty images really cost upstream.
        Reply::json(200, &chat_answer(100_000, 1, 1))
    });
    let dir = TempDir::new("bill-images");
    let cfg = config(
        &dir,
        &chat_upstream("up", fake.addr, ""),
        // 100,000 input tokens at 10 per 1M = 1 credit a request.
        "[[models]]\nname = \"m\"\nupstream = \"up\"\ninput_price = 10.0\noutput_price = 0.0\nmax_output_tokens = 10\n\n",
        "[[groups]]\nname = \"t\"\nmodels = [\"*\"]\ntpm = 10000\n",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let credit = 1.0;
    let key = gw.add_key("viewer", "default", Some(credit));
    let images: Vec<Value> = (0..50)
        .map(|i| json!({"type": "image_url", "image_url": {"url": format!("https://example.com/{i}.png")}}))
        .collect();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": images}]});
    assert!(body.to_string().len() < 3600, "{}", body.to_string().len());

    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (addr, key, body, tx) = (gw.addr, key.clone(), body.clone(), tx.clone());
            std::thread::spawn(move || {
                let status = post_raw(addr, &key, "/v1/chat/completions", &body);
                tx.send(status).unwrap();
            })
        })
        .collect();
    let mut early = Vec::new();
    wait_for(
        || {
            early.extend(rx.try_iter());
            fake.received().len() == 1 && early.len() == 5
        },
        "one request at the upstream and five refused",
    );
    assert!(early.iter().all(|s| *s == 429), "{early:?}");
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), [200]);
    let spent = gw.key_row("viewer")["spent"].as_f64().unwrap();
    // One request's worst case: fifty images at 3,800 tokens and the text, at 10 per 1M: under 2 credits.
    assert!(spent <= credit + 2.0, "spent {spent}");

    // Every protocol's shapes count at admission: five images (19,000 tokens) pass no tpm of 10,000.
    let t = gw.add_key("t", "t", None);
    let url = "https://example.com/a.png";
    let chat_img = json!({"type": "image_url", "image_url": {"url": url}});
    let resp_img = json!({"type": "input_image", "image_url": url});
    let msg_img = json!({"type": "image", "source": {"type": "url", "url": url}});
    let cases = [
        (
            "/v1/chat/completions",
            json!({"model": "mock", "messages": [{"role": "user", "content": vec![chat_img; 5]}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "mock", "input": [
            {"type": "function_call_output", "call_id": "c", "output": vec![resp_img; 5]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": vec![msg_img; 5]}]}]}),
        ),
    ];
    for (path, body) in cases {
        let r = gw.post_as(&t, path, &body);
        assert_eq!(r.status, 429, "{path}: {}", r.text());
        assert!(
            r.text().contains("tokens-per-minute"),
            "{path}: {}",
            r.text()
        );
    }
    let r = gw.post_as(&t, "/v1/chat/completions", &chat("mock", "no images"));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Third review, 2: whatever the upstream fetches is reserved at its provider's worst case, on every
/// protocol: a Gemini `fileData` of text is a document (its size is not its URL's), remote audio and video
/// at the longest a request may hold, a remote file of no stated type at the largest bound, the video and
/// audio URLs OpenAI-compatible servers fetch too. A tpm of 500,000 refuses each (a document's bound is
/// 680,000); a request of text passes.
#[test]
fn what_the_upstream_fetches_is_reserved_at_its_worst_case() {
    let dir = TempDir::new("bill-remote");
    let cfg = config(
        &dir,
        "",
        "",
        "[[groups]]\nname = \"t\"\nmodels = [\"*\"]\ntpm = 500000\n",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let t = gw.add_key("t", "t", None);
    let gemini = "/v1beta/models/mock:generateContent";
    let file = |mime: Option<&str>| {
        let mut data = json!({"fileUri": "https://example.com/f"});
        if let Some(m) = mime {
            data["mimeType"] = json!(m);
        }
        json!({"contents": [{"role": "user", "parts": [{"text": "read it"}, {"fileData": data}]}]})
    };
    let chat_part =
        |part: Value| json!({"model": "mock", "messages": [{"role": "user", "content": [part]}]});
    let cases = [
        (gemini, file(Some("text/plain"))),
        (gemini, file(Some("text/html"))),
        (gemini, file(Some("audio/mpeg"))),
        (gemini, file(Some("video/mp4"))),
        (gemini, file(None)),
        (
            "/v1/chat/completions",
            chat_part(
                json!({"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}),
            ),
        ),
        (
            "/v1/chat/completions",
            chat_part(
                json!({"type": "audio_url", "audio_url": {"url": "https://example.com/a.mp3"}}),
            ),
        ),
        (
            "/v1/responses",
            json!({"model": "mock", "input": [{"role": "user", "content": [
                {"type": "input_file", "file_url": "https://example.com/notes.txt"}]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "mock", "max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}]}),
        ),
    ];
    for (path, body) in cases {
        let r = gw.post_as(&t, path, &body);
        assert_eq!(r.status, 429, "{path} {body}: {}", r.text());
        assert!(
            r.text().contains("tokens-per-minute"),
            "{path}: {}",
            r.text()
        );
    }
    let r = gw.post_as(
        &t,
        gemini,
        &json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Third review, 5: an output limit of 0 in the client protocol's own field is refused with 400 naming
/// it, on every protocol (sent as it was, an upstream that reads 0 as "no limit" answered whole, billed 0
/// output tokens); Gemini's `maxOutputTokens: 0` is Google's JSON for unset and is served as absent.
#[test]
fn an_output_limit_of_zero_is_refused_naming_its_field() {
    let dir = TempDir::new("bill-zero");
    let cfg = config(&dir, "", "", "");
    let gw = Gateway::start_with(dir, &cfg);
    let key = gw.add_key("k", "default", Some(5.0));
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (path, body, field) in [
        (
            "/v1/chat/completions",
            json!({"model": "mock", "messages": msgs, "max_tokens": 0}),
            "max_tokens",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "mock", "messages": msgs, "max_completion_tokens": 0}),
            "max_completion_tokens",
        ),
        (
            "/v1/responses",
            json!({"model": "mock", "input": "hi", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            "/v1/messages",
            json!({"model": "mock", "messages": msgs, "max_tokens": 0}),
            "max_tokens",
        ),
    ] {
        let r = gw.post_as(&key, path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(
            r.text().contains(field) && r.text().contains("at least 1"),
            "{path}: {}",
            r.text()
        );
    }
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                        "generationConfig": {"maxOutputTokens": 0}});
    let r = gw.post_as(&key, "/v1beta/models/mock:generateContent", &gemini);
    assert_eq!(r.status, 200, "{}", r.text());
}

/// Break 10. A limit of 2^64 - 1 is a huge request, never a small one by wrap-around: a tpm of 1,000
/// refuses it in every protocol before any upstream call; and an upstream reporting usage near 2^64 is
/// recorded saturated, with the gateway still standing and the key's balance gone.
#[test]
fn token_counts_near_2_64_saturate() {
    let fake = FakeUpstream::start(|_| Reply::json(200, &chat_answer(u64::MAX, u64::MAX, 1)));
    let dir = TempDir::new("bill-overflow");
    let cfg = config(
        &dir,
        &chat_upstream("up", fake.addr, ""),
        "[[models]]\nname = \"m\"\nupstream = \"up\"\ninput_price = 1.0\noutput_price = 1.0\n\n",
        "[[groups]]\nname = \"t\"\nmodels = [\"*\"]\ntpm = 1000\n",
    );
    let gw = Gateway::start_with(dir, &cfg);
    let t = gw.add_key("t", "t", None);
    let max = u64::MAX;
    for model in ["mock", "m"] {
        let cases = [
            (
                "/v1/chat/completions",
                json!({"model": model, "max_tokens": max, "messages": [{"role": "user", "content": "x"}]}),
            ),
            (
                "/v1/chat/completions",
                json!({"model": model, "n": max, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}),
            ),
            (
                "/v1/responses",
                json!({"model": model, "max_output_tokens": max, "input": "x"}),
            ),
            (
                "/v1/messages",
                json!({"model": model, "max_tokens": max, "messages": [{"role": "user", "content": "x"}]}),
            ),
        ];
        for (path, body) in cases {
            let r = gw.post_as(&t, path, &body);
            assert_eq!(r.status, 429, "{path} {body}: {}", r.text());
            assert!(r.text().contains("tokens-per-minute"), "{}", r.text());
        }
    }
    assert!(fake.received().is_empty(), "nothing reached the upstream");

    let key = gw.add_key("rich", "default", Some(1000.0));
    let mut body = chat("m", "x");
    body["max_tokens"] = json!(max);
    let r = gw.post_as(&key, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let rec = records(&gw, "rich")[0].clone();
    assert_eq!(rec["input_tokens"].as_u64(), Some(max), "{rec}");
    assert_eq!(rec["output_tokens"].as_u64(), Some(max), "{rec}");
    assert!(rec["cost"].as_f64().unwrap() > 1000.0, "{rec}");
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("m", "x"));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");
}

/// Break 10 on a shared store: the admission script gets saturated, exact arguments (its numbers are
/// doubles, and whole credits beyond 2^63 no longer print as integers), so a limit of 2^64 - 1 at a high
/// price is refused by tpm, or reserved whole for a key with a credit: while it is in flight the key's next
/// request is refused by its balance, and afterwards the balance is right.
#[test]
fn token_counts_near_2_64_saturate_in_the_shared_store() {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let g = gate.clone();
    let fake = FakeUpstream::start(move |_| {
        let (open, cv) = &*g;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        Reply::json(200, &chat_answer(3, 5, 1))
    });
    let redis = common::redis::Redis::start(false);
    let dir = TempDir::new("bill-overflow-store");
    let cfg = format!(
        "{}{}",
        config(
            &dir,
            &chat_upstream("held", fake.addr, ""),
            "[[models]]\nname = \"priced\"\nupstream = \"mock\"\ninput_price = 1000.0\noutput_price = 1000.0\n\n\
             [[models]]\nname = \"held\"\nupstream = \"held\"\ninput_price = 1000000.0\noutput_price = 1000000.0\n\n",
            "[[groups]]\nname = \"t\"\nmodels = [\"*\"]\ntpm = 1000\n",
        ),
        redis.store_section("")
    );
    let gw = Gateway::start_with(dir, &cfg);
    let t = gw.add_key("t", "t", None);
    let mut huge = chat("priced", "x");
    huge["max_tokens"] = json!(u64::MAX);
    let r = gw.post_as(&t, "/v1/chat/completions", &huge);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("tokens-per-minute"), "{}", r.text());

    let key = gw.add_key("rich", "default", Some(10.0));
    huge["model"] = json!("held");
    let held = {
        let (addr, key, huge) = (gw.addr, key.clone(), huge.clone());
        std::thread::spawn(move || post_raw(addr, &key, "/v1/chat/completions", &huge))
    };
    wait_for(|| fake.received().len() == 1, "the huge request in flight");
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("priced", "y"));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        r.json()["error"]["code"],
        "insufficient_quota",
        "{}",
        r.text()
    );
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    assert_eq!(held.join().unwrap(), 200);
    // Settled: nothing stays reserved, and the spend is the records' sum.
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("priced", "z"));
    assert_eq!(r.status, 200, "{}", r.text());
    let total: f64 = records(&gw, "rich")
        .iter()
        .map(|r| r["cost"].as_f64().unwrap())
        .sum();
    wait_for(
        || {
            let row = gw.key_row("rich");
            (row["spent"].as_f64().unwrap() - total).abs() < 1e-9
        },
        "the spend to be settled",
    );
}
