//! Gateways in the test's process (`tollgate::server::run`): several at once in one process, each with its
//! own configuration, log (level and format), metrics and data; stopped through their `Shutdown` with the
//! drain's exit code; a start that cannot happen is a typed `StartError`, not an exit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::BufReader;
use std::sync::Mutex;

use common::upstream::{FakeUpstream, Reply};
use common::{read_chunk, read_head, send_request, Gateway, TempDir, ADMIN_TOKEN_ENV};
use serde_json::{json, Value};

fn chat(content: &str) -> Value {
    json!({"model": "mock", "max_tokens": 20, "messages": [{"role": "user", "content": content}]})
}

fn metric(gw: &Gateway, name: &str) -> String {
    let text = gw.admin("/metrics").text();
    text.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .to_string()
}

#[test]
fn two_gateways_in_one_process_keep_their_logs_and_gauges_apart() {
    // A stream held open on A (its upstream waits at a gate after the first event).
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate = Mutex::new(Some(gate_rx));
    let first = b"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n".to_vec();
    let fake = FakeUpstream::start(move |_| Reply::Sse {
        events: vec![first.clone(), b"data: [DONE]\n\n".to_vec()],
        gate: gate.lock().unwrap().take().map(|rx| (1, rx)),
        abort: false,
    });
    let admin = format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"");
    let a = Gateway::start_with_fake(fake.addr, &format!("{admin}\nlog_format = \"json\""));
    let b = Gateway::start_mock(&format!("{admin}\nlog_level = \"warn\""));
    assert_ne!(a.addr, b.addr);

    let on_a = a.post("/v1/chat/completions", &chat("to a"));
    let on_b = b.post("/v1/chat/completions", &chat("to b"));
    assert_eq!((on_a.status, on_b.status), (200, 200));
    let (id_a, id_b) = (
        on_a.header("x-request-id").unwrap().to_string(),
        on_b.header("x-request-id").unwrap().to_string(),
    );
    // A logs JSON lines at info: its request line is there, B's is not.
    common::wait_for(|| a.all_logs().contains(&id_a), "A's request line");
    let line = a
        .all_logs()
        .lines()
        .find(|l| l.contains(&id_a) && l.contains("\"status\""))
        .unwrap_or_else(|| panic!("no request line for {id_a}: {}", a.all_logs()))
        .to_string();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["request_id"], id_a.as_str(), "{line}");
    assert!(!a.all_logs().contains(&id_b), "B's request in A's log");
    // B logs at warn: no request line, no start-up line, and nothing of A's.
    let b_logs = b.all_logs();
    assert!(
        !b_logs.contains(&id_b) && !b_logs.contains(&id_a),
        "{b_logs}"
    );
    assert!(!b_logs.contains("listening on"), "{b_logs}");
    assert!(a.all_logs().contains("listening on"));

    // A stream open on A counts on A only.
    let mut s = a.connect();
    let body =
        json!({"model": "m-chat", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let auth = format!("Bearer {}", a.key);
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
    assert!(read_chunk(&mut r).is_some(), "the first event");
    assert_eq!(
        metric(&a, "tollgate_active_streams"),
        "tollgate_active_streams 1"
    );
    assert_eq!(
        metric(&b, "tollgate_active_streams"),
        "tollgate_active_streams 0"
    );
    gate_tx.send(()).unwrap();
    while read_chunk(&mut r).is_some() {}
    common::wait_for(
        || metric(&a, "tollgate_active_streams") == "tollgate_active_streams 0",
        "the stream's end on A",
    );
}

#[test]
fn a_stop_drains_and_returns_the_exit_code() {
    let mut gw = Gateway::start_mock("");
    assert_eq!(gw.post("/v1/chat/completions", &chat("hi")).status, 200);
    let addr = gw.addr;
    assert_eq!(gw.stop(), 0);
    let logs = gw.all_logs();
    assert!(
        logs.contains("received a stop asked by the test") && logs.contains("recorded; bye"),
        "{logs}"
    );
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
    // Its record was written before the stop returned.
    let ledger = std::fs::read_to_string(gw.dir.path().join("data/usage.jsonl")).unwrap();
    assert_eq!(ledger.lines().count(), 1, "{ledger}");
}

#[test]
fn a_start_that_cannot_happen_is_a_typed_error() {
    let dir = TempDir::new("in-process-refused");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // The ledger's name taken by a link: the start refuses it.
    std::os::unix::fs::symlink("/etc/hostname", data.join("usage.jsonl")).unwrap();
    let text = common::standard_config(dir.path(), None, "");
    let config = tollgate::config::Config::from_toml_in(&text, &common::test_env()).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = match tollgate::server::run(listener, config, tollgate::server::Shutdown::new()) {
        Ok(_) => panic!("the gateway started with a link for its ledger"),
        Err(e) => e,
    };
    assert!(
        matches!(err, tollgate::server::StartError::DataFiles(ref p) if p.len() == 1),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("data_dir: "), "{err}");
    assert!(err.to_string().contains("usage.jsonl"), "{err}");
}
