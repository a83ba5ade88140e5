//! Groups, prices, balances, rate limits, the usage ledger, the admin API and the key lifecycle, through
//! HTTP against the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::BufReader;
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

/// Prices of 1 and 2 credits per token make costs easy to check.
fn config(dir: &std::path::Path, extra: &str) -> String {
    format!(
        r#"{}admin_token_env = "{ADMIN_TOKEN_ENV}"
ledger_sync_ms = 50

[[upstreams]]
name = "mock"
kind = "mock"

[[upstreams]]
name = "slow"
kind = "mock"
mock_delay_ms = 100

[[models]]
name = "m-basic"
upstream = "mock"
input_price = 1000000.0
output_price = 2000000.0

[[models]]
name = "m-slow"
upstream = "slow"
input_price = 1000000.0
output_price = 1000000.0

[[models]]
name = "x-premium"
upstream = "mock"

[[groups]]
name = "basic"
models = ["m-*"]

[[groups]]
name = "premium"
models = ["*"]

[[groups]]
name = "limited"
models = ["*"]
rpm = 2

[[groups]]
name = "tokens"
models = ["*"]
tpm = 300

[[groups]]
name = "single"
models = ["*"]
max_concurrent = 1
"#,
        base_config(dir, extra)
    )
}

fn start(extra: &str) -> Gateway {
    let dir = TempDir::new("access");
    let c = config(dir.path(), extra);
    Gateway::start_with(dir, &c)
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

fn usage_records(gw: &Gateway, query: &str) -> Vec<Value> {
    let r = gw.admin(&format!("/admin/usage?{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"].as_array().unwrap().clone()
}

#[test]
fn permissions_follow_the_group() {
    let gw = start("");
    // The first key belongs to the first group, `basic` (m-*).
    assert_eq!(
        gw.post("/v1/chat/completions", &chat("m-basic", "hi"))
            .status,
        200
    );
    let r = gw.post("/v1/chat/completions", &chat("x-premium", "hi"));
    assert_eq!(r.status, 403);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("x-premium") && msg.contains("basic"), "{msg}");
    assert!(
        !msg.contains("m-slow"),
        "other models are not revealed: {msg}"
    );
    assert_eq!(r.json()["error"]["code"], "model_not_allowed");
    let r = gw.post("/v1/messages", &json!({"model": "x-premium", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["type"], "permission_error");
    assert_eq!(
        gw.post("/v1/chat/completions", &chat("nope", "hi")).status,
        404
    );

    let auth = format!("Bearer {}", gw.key);
    let ids = |r: Response| -> Vec<String> {
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        ids(gw.request("GET", "/v1/models", &[("authorization", &auth)], b"")),
        ["m-basic", "m-slow"]
    );
    let premium = gw.add_key("p", "premium", None);
    let auth = format!("Bearer {premium}");
    assert_eq!(
        ids(gw.request("GET", "/v1/models", &[("authorization", &auth)], b"")),
        ["m-basic", "m-slow", "x-premium"]
    );
    assert_eq!(
        gw.post_as(&premium, "/v1/chat/completions", &chat("x-premium", "hi"))
            .status,
        200
    );
}

#[test]
fn cost_is_computed_from_usage_and_recorded() {
    let gw = start("");
    let auth = format!("Bearer {}", gw.key);
    let body = chat("m-basic", "price check").to_string();
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", "cost-1")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    let u = &r.json()["usage"];
    let (input, output) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    let recs = usage_records(&gw, "client_request_id=cost-1");
    assert_eq!(recs.len(), 1);
    let rec = &recs[0];
    assert_eq!(rec["cost"].as_f64().unwrap(), (input + 2 * output) as f64);
    assert_eq!(rec["request_id"], r.header("x-request-id").unwrap());
    for (k, v) in [
        ("key", json!("default")),
        ("group", json!("basic")),
        ("model", json!("m-basic")),
        ("protocol", json!("chat")),
        ("upstream", json!("mock")),
        ("stream", json!(false)),
        ("status", json!(200)),
        ("input_tokens", json!(input)),
        ("output_tokens", json!(output)),
        ("cached_input_tokens", json!(0)),
        ("reasoning_tokens", json!(0)),
        ("estimated", json!(false)),
    ] {
        assert_eq!(rec[k], v, "{k}: {rec}");
    }
    assert!(rec["ts"].as_str().unwrap().ends_with('Z') && rec["latency_ms"].is_u64());
    // Spend shows in /admin/keys.
    assert_eq!(
        gw.key_row("default")["spent"].as_f64().unwrap(),
        (input + 2 * output) as f64
    );
    // A refused request (403 here) never reached an upstream: its record costs nothing and names no upstream.
    gw.post("/v1/chat/completions", &chat("x-premium", "hi"));
    let records = usage_records(&gw, "key=default");
    assert_eq!(records.len(), 2);
    let refusal = records.iter().find(|r| r["status"] == 403).unwrap();
    assert_eq!(refusal["cost"], 0.0, "{refusal}");
    assert!(refusal["upstream"].is_null(), "{refusal}");
    assert_eq!(
        gw.key_row("default")["spent"].as_f64().unwrap(),
        (input + 2 * output) as f64
    );
}

#[test]
fn an_exhausted_balance_gets_429_before_any_upstream_call() {
    let gw = start("");
    let key = gw.add_key("small", "basic", Some(60.0));
    // Each answer costs well over 30 credits (prompt + 2 × ~25 output tokens).
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "one"));
    assert_eq!(r.status, 200);
    let second = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "two"));
    let refused = if second.status == 200 {
        gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "three"))
    } else {
        second
    };
    assert_eq!(refused.status, 429, "{}", refused.text());
    let e = &refused.json()["error"];
    assert_eq!(e["code"], "insufficient_quota");
    assert_eq!(e["type"], "insufficient_quota");
    assert!(e["message"].as_str().unwrap().contains("balance"), "{e}");
    let before = usage_records(&gw, "key=small").len();
    let r = gw.post_as(&key, "/v1/messages", &json!({"model": "m-basic", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]}));
    assert_eq!(r.status, 429);
    let after = usage_records(&gw, "key=small");
    assert_eq!(after.len(), before + 1, "the refusal has its record");
    let refusal = after.iter().find(|r| r["status"] == 429).unwrap();
    assert_eq!(refusal["reason"], "insufficient_quota", "{refusal}");
    assert_eq!(
        refusal["cost"], 0.0,
        "refused before any upstream call: {refusal}"
    );
    let row = gw.key_row("small");
    assert!(row["balance"].as_f64().unwrap() <= 0.0, "{row}");

    // A top-up takes effect without a restart.
    let (code, out, err) = gw.cli(&["keys", "credit", "--name", "small", "--add", "1000"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1060"), "{out}");
    wait_for(
        || {
            gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "again"))
                .status
                == 200
        },
        "the top-up",
    );
}

/// Twenty concurrent requests race a small balance: the overspend stays within one request's worst case.
#[test]
fn concurrent_requests_cannot_overspend() {
    let gw = start("");
    let credit = 300.0;
    let key = gw.add_key("racer", "basic", Some(credit));
    let max_tokens = 40u64;
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let (addr, key) = (gw.addr, key.clone());
            std::thread::spawn(move || {
                let body = json!({"model": "m-slow", "max_tokens": max_tokens, "stream": true,
                                  "messages": [{"role": "user", "content": format!("racer {i}")}]});
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                let auth = format!("Bearer {key}");
                send_request(
                    &mut s,
                    "POST",
                    "/v1/chat/completions",
                    &[("authorization", &auth)],
                    body.to_string().as_bytes(),
                    true,
                );
                read_response(&mut BufReader::new(s)).status
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + refused, 20, "{statuses:?}");
    assert!(refused > 0, "the balance must run out: {statuses:?}");
    let spent = gw.key_row("racer")["spent"].as_f64().unwrap();
    // The bound: credit plus one request's worst case (its input estimate, well under 100 tokens here,
    // plus max_tokens, at 1 credit per token).
    let worst = 100.0 + max_tokens as f64;
    assert!(
        spent <= credit + worst,
        "spent {spent} > {credit} + {worst}"
    );
    // And the ledger agrees with the balance.
    let total: f64 = usage_records(&gw, "key=racer&limit=1000")
        .iter()
        .map(|r| r["cost"].as_f64().unwrap())
        .sum();
    assert!(
        (total - spent).abs() < 1e-6,
        "ledger {total} vs spent {spent}"
    );
}

#[test]
fn rate_limits_answer_429_with_retry_after_and_headers() {
    let gw = start("");
    let key = gw.add_key("rl", "limited", None);
    for _ in 0..2 {
        let r = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "hi"));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("2"));
    }
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "hi"));
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert!(r.header("x-ratelimit-reset-requests").is_some());
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("requests-per-minute limit of 2"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    let r = gw.post_as(&key, "/v1/messages", &json!({"model": "m-basic", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");

    // Tokens per minute: a request estimated over the limit is refused, naming the limit.
    let key = gw.add_key("tk", "tokens", None);
    let big = "word ".repeat(400);
    let r = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", &big));
    assert_eq!(r.status, 429);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tokens-per-minute limit of 300"));
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("300"));
    assert_eq!(
        gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "small"))
            .status,
        200
    );

    // Concurrency: while one stream is open, the next request is refused.
    let key = gw.add_key("one", "single", None);
    let mut s = gw.connect();
    let auth = format!("Bearer {key}");
    let body = json!({"model": "m-slow", "stream": true, "messages": [{"role": "user", "content": "a long stream please"}]});
    send_request(
        &mut s,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        body.to_string().as_bytes(),
        true,
    );
    let mut r = BufReader::new(s);
    assert_eq!(read_head(&mut r).0, 200);
    read_chunk(&mut r).unwrap();
    let second = gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "me too"));
    assert_eq!(second.status, 429);
    assert!(second.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1 concurrent"));
    while read_chunk(&mut r).is_some() {}
    wait_for(
        || {
            gw.post_as(&key, "/v1/chat/completions", &chat("m-basic", "now"))
                .status
                == 200
        },
        "the slot to free",
    );
}

/// Success, upstream error, client disconnect and a broken stream each leave exactly one record.
#[test]
fn the_ledger_records_every_outcome() {
    let fake = FakeUpstream::start(|rec| {
        let body: Value = serde_json::from_slice(&rec.body).unwrap();
        match body["messages"][0]["content"].as_str().unwrap_or("") {
            "fail" => Reply::json(500, &json!({"error": {"message": "boom", "type": "server_error"}})),
            "cut" => Reply::Sse {
                events: vec![b"data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Some words then\"}}]}\n\n".to_vec()],
                gate: None,
                abort: true,
            },
            _ => Reply::json(200, &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "fine"}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})),
        }
    });
    let dir = TempDir::new("ledger");
    let c = standard_config(
        dir.path(),
        Some(fake.addr),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"\nledger_sync_ms = 50"),
    )
    .replace(
        "name = \"mock\"\nkind = \"mock\"",
        "name = \"mock\"\nkind = \"mock\"\nmock_delay_ms = 100",
    );
    let gw = Gateway::start_with(dir, &c);
    let ok = gw.post("/v1/chat/completions", &chat("m-chat", "ok"));
    assert_eq!(ok.status, 200);
    let fail = gw.post("/v1/chat/completions", &chat("m-chat", "fail"));
    assert_eq!(fail.status, 500);
    let cut = gw.post("/v1/chat/completions", &json!({"model": "m-chat", "stream": true, "messages": [{"role": "user", "content": "cut"}]}));
    assert_eq!(cut.status, 200);
    // A client that goes away mid-stream.
    let mut s = gw.connect();
    let auth = format!("Bearer {}", gw.key);
    let body = json!({"model": "mock", "stream": true, "messages": [{"role": "user", "content": "talk to me for a while please"}]});
    send_request(
        &mut s,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", "leaver")],
        body.to_string().as_bytes(),
        true,
    );
    let mut r = BufReader::new(s);
    assert_eq!(read_head(&mut r).0, 200);
    read_chunk(&mut r).unwrap();
    read_chunk(&mut r).unwrap();
    drop(r);

    let by_id = |rid: &str| usage_records(&gw, &format!("request_id={rid}"));
    let rec = &by_id(ok.header("x-request-id").unwrap())[0];
    assert_eq!(
        (
            rec["status"].clone(),
            rec["input_tokens"].clone(),
            rec["output_tokens"].clone()
        ),
        (json!(200), json!(7), json!(3))
    );
    let rec = &by_id(fail.header("x-request-id").unwrap())[0];
    assert_eq!(rec["status"], 500);
    assert!(rec["error"].as_str().unwrap().contains("boom"));
    let rec = &by_id(cut.header("x-request-id").unwrap())[0];
    assert_eq!(rec["status"], 200);
    assert!(rec["error"].as_str().unwrap().contains("stream"), "{rec}");
    assert_eq!(rec["estimated"], true);
    assert!(rec["output_tokens"].as_u64().unwrap() > 0);
    let mut left = Vec::new();
    wait_for(
        || {
            left = usage_records(&gw, "client_request_id=leaver");
            !left.is_empty()
        },
        "the disconnect record",
    );
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["status"], "client_closed");
    assert!(
        left[0]["output_tokens"].as_u64().unwrap() > 0,
        "tokens produced so far: {}",
        left[0]
    );
    // Exactly one record per request.
    assert_eq!(usage_records(&gw, "limit=100").len(), 4);
    assert_eq!(usage_records(&gw, "status=5xx").len(), 1);
    assert_eq!(usage_records(&gw, "status=client_closed").len(), 1);
    assert_eq!(usage_records(&gw, "model=m-chat&limit=2").len(), 2);
}

/// Records survive a clean stop, a torn last line is skipped with a warning, and after `kill -9` under
/// load a restart leaves balances equal to the sum of the surviving records.
#[test]
fn the_ledger_survives_restarts_torn_lines_and_kill_9() {
    let dir = TempDir::new("restart");
    let path = dir.path().to_path_buf();
    let c = config(&path, "");
    let mut gw = Gateway::spawn_with(dir, &c);
    for i in 0..3 {
        assert_eq!(
            gw.post("/v1/chat/completions", &chat("m-basic", &format!("r{i}")))
                .status,
            200
        );
    }
    let spent = gw.key_row("default")["spent"].as_f64().unwrap();
    signal(gw.pid(), "TERM");
    assert_eq!(wait_exit(gw.child(), Duration::from_secs(30)), Some(0));
    let ledger = path.join("data/usage.jsonl");
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap().lines().count(),
        3,
        "flushed on shutdown"
    );

    // A crash mid-write leaves half a line.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&ledger)
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        b"{\"ts\":\"2026-11-22T00:00:00.000Z\",\"request_id\":\"req_x\",\"key\":\"default\",\"co",
    )
    .unwrap();
    drop(f);
    let key = gw.key.clone();
    gw.keep_dir();
    let gw2 = Gateway::respawn(TempDir(path.clone()), &c, &key);
    assert!(gw2.all_logs().contains("torn"), "{}", gw2.all_logs());
    assert_eq!(gw2.key_row("default")["spent"].as_f64().unwrap(), spent);
    assert_eq!(
        gw2.post("/v1/chat/completions", &chat("m-basic", "after"))
            .status,
        200
    );
    usage_records(&gw2, ""); // a query flushes the ledger
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "no corrupt line: {text}"
    );

    // kill -9 in the middle of a burst.
    let mut gw2 = gw2;
    let addr = gw2.addr;
    let burst: Vec<_> = (0..8)
        .map(|i| {
            let key = key.clone();
            std::thread::spawn(move || {
                let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                    return;
                };
                let body = chat("m-slow", &format!("burst {i}"));
                send_request(
                    &mut s,
                    "POST",
                    "/v1/chat/completions",
                    &[("authorization", &format!("Bearer {key}"))],
                    body.to_string().as_bytes(),
                    true,
                );
                let _ = std::io::Read::read_to_end(&mut s, &mut Vec::new());
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    signal(gw2.pid(), "KILL");
    let _ = gw2.child().wait();
    for b in burst {
        let _ = b.join();
    }
    gw2.keep_dir();
    let gw3 = Gateway::restart(TempDir(path.clone()), &c, &key);
    let records = usage_records(&gw3, "key=default&limit=1000");
    let total: f64 = records.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    let spent = gw3.key_row("default")["spent"].as_f64().unwrap();
    assert!(
        (total - spent).abs() < 1e-6,
        "balance {spent} = sum of surviving records {total}"
    );
    let text = std::fs::read_to_string(&ledger).unwrap();
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "no corrupt state"
    );
}

#[test]
fn the_admin_api_needs_its_token_and_is_closed_without_one() {
    // The config names a variable that is not set: every call refused, saying which variable.
    let closed = Gateway::start_mock("admin_token_env = \"TG_TEST_UNSET_ADMIN\"");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    for path in ["/admin/keys", "/admin/usage"] {
        let r = closed.request("GET", path, &[("authorization", &auth)], b"");
        assert_eq!(r.status, 403, "{path}");
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TG_TEST_UNSET_ADMIN"));
    }
    // It names none, and no token was made in the data directory yet (`serve` makes one at its first
    // start; this gateway runs in the test's process): refused, saying how to make one.
    let unmade = Gateway::start_mock("");
    let r = unmade.request("GET", "/admin/keys", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 403);
    assert!(
        r.text().contains("tollgate admin-token rotate"),
        "{}",
        r.text()
    );
    let gw = start("");
    assert_eq!(gw.request("GET", "/admin/keys", &[], b"").status, 401);
    assert_eq!(
        gw.request(
            "GET",
            "/admin/keys",
            &[("authorization", "Bearer wrong")],
            b""
        )
        .status,
        401
    );
    let key_auth = format!("Bearer {}", gw.key);
    assert_eq!(
        gw.request("GET", "/admin/keys", &[("authorization", &key_auth)], b"")
            .status,
        401,
        "an API key is not an admin token"
    );
    let r = gw.admin("/admin/keys");
    assert_eq!(r.status, 200);
    let row = &r.json()["data"][0];
    assert_eq!(row["name"], "default");
    assert!(row.get("hash").is_none(), "hashes are not shown");
    for i in 0..3 {
        gw.post("/v1/chat/completions", &chat("m-basic", &format!("q{i}")));
    }
    let all = usage_records(&gw, "");
    assert_eq!(all.len(), 3);
    assert!(
        all[0]["ts"].as_str() >= all[2]["ts"].as_str(),
        "newest first"
    );
    assert_eq!(usage_records(&gw, "limit=1").len(), 1);
    assert_eq!(gw.admin("/admin/usage?limit=2").json()["has_more"], true);
    assert_eq!(gw.admin("/admin/usage?limit=3").json()["has_more"], false);
    assert_eq!(usage_records(&gw, "limit=2&offset=2").len(), 1);
    assert_eq!(usage_records(&gw, "key=nobody").len(), 0);
    assert_eq!(usage_records(&gw, "model=m-basic&status=200").len(), 3);
    assert_eq!(
        usage_records(&gw, "since=2000-01-01T00:00:00Z&until=2100-01-01T00:00:00Z").len(),
        3
    );
    assert_eq!(usage_records(&gw, "until=2000-01-01T00:00:00Z").len(), 0);
    assert_eq!(usage_records(&gw, "since=4102444800").len(), 0);
    let r = gw.admin("/admin/usage?since=yesterday");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "since");
}

#[test]
fn rotated_keys_and_broken_key_files() {
    let gw = start("");
    let old = gw.add_key("app", "basic", None);
    assert_eq!(
        gw.post_as(&old, "/v1/chat/completions", &chat("m-basic", "hi"))
            .status,
        200
    );
    let (code, out, err) = gw.cli(&["keys", "rotate", "--name", "app"]);
    assert_eq!(code, 0, "{err}");
    let new = out.lines().last().unwrap().to_string();
    assert!(new.starts_with("tg_") && new != old);
    wait_for(
        || {
            gw.post_as(&old, "/v1/chat/completions", &chat("m-basic", "hi"))
                .status
                == 401
        },
        "the old key to stop",
    );
    assert_eq!(
        gw.post_as(&new, "/v1/chat/completions", &chat("m-basic", "hi"))
            .status,
        200
    );
    let before = usage_records(&gw, "key=app&limit=1000").len();
    assert_eq!(
        gw.post_as(&new, "/v1/chat/completions", &chat("m-basic", "again"))
            .status,
        200
    );
    assert_eq!(
        usage_records(&gw, "key=app&limit=1000").len(),
        before + 1,
        "same name: the history continues"
    );

    // A hand edit that breaks the file keeps the last good set in force and names the line.
    let keys = gw.dir.path().join("data/keys.jsonl");
    let mut text = std::fs::read_to_string(&keys).unwrap();
    text.push_str("{this is not json\n");
    std::fs::write(&keys, text).unwrap();
    wait_for(
        || gw.all_logs().contains("keeping the previous"),
        "the broken file to be noticed",
    );
    assert!(gw.all_logs().contains("line 4"), "{}", gw.all_logs());
    assert_eq!(
        gw.post_as(&new, "/v1/chat/completions", &chat("m-basic", "still"))
            .status,
        200
    );
    assert_eq!(
        gw.post("/v1/chat/completions", &chat("m-basic", "still"))
            .status,
        200
    );
}

/// Strict mode: a request's record is on disk before the client sees the end of the answer.
#[test]
fn strict_mode_syncs_before_the_response_ends() {
    let dir = TempDir::new("strict");
    let c = config(dir.path(), "ledger_strict = true")
        .replace("ledger_sync_ms = 50", "ledger_sync_ms = 60000");
    let gw = Gateway::start_with(dir, &c);
    let ledger = gw.dir.path().join("data/usage.jsonl");
    for (i, stream) in [false, true, false].into_iter().enumerate() {
        let r = gw.post("/v1/chat/completions", &json!({"model": "m-basic", "stream": stream, "messages": [{"role": "user", "content": format!("s{i}")}]}));
        assert_eq!(r.status, 200);
        let text = std::fs::read_to_string(&ledger).unwrap();
        assert_eq!(
            text.lines().count(),
            i + 1,
            "record {i} on disk when the response ended"
        );
        assert!(text.contains(r.header("x-request-id").unwrap()));
    }
}
