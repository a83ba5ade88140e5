//! The HTTP layer, against the real binary: each of the four defects that rule out stock tiny_http
//! (DESIGN.md, "The HTTP layer") is reproduced and shown absent, plus overload answers and HTTP/1.1 details.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::json;
use tollgate::http::{self, Exchange, HttpConfig, ParseLimits, ServerState};

fn chat_body(text: &str) -> Vec<u8> {
    json!({"model": "mock", "messages": [{"role": "user", "content": text}]})
        .to_string()
        .into_bytes()
}

/// Defect 1 (keep-alive starvation): 16 clients each open a keep-alive connection at the same moment and
/// send three requests on it; every request on every connection is answered.
#[test]
fn sixteen_concurrent_keepalive_clients_are_all_served() {
    let gw = Gateway::start_mock("");
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let barrier = barrier.clone();
            let (addr, key) = (gw.addr, gw.key.clone());
            std::thread::spawn(move || {
                let s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                barrier.wait();
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                let auth = format!("Bearer {key}");
                for n in 0..3 {
                    let body = chat_body(&format!("client {i} request {n}"));
                    send_request(
                        &mut w,
                        "POST",
                        "/v1/chat/completions",
                        &[("authorization", &auth)],
                        &body,
                        false,
                    );
                    let resp = read_response(&mut r);
                    assert_eq!(resp.status, 200);
                    let text = resp.json()["choices"][0]["message"]["content"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    assert!(text.ends_with(&format!("client {i} request {n}")), "{text}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a client was not served");
    }
}

/// Defect 2: a 50 GB Content-Length is refused with 413 before any body is read, and the server lives on.
#[test]
fn huge_content_length_gets_413_and_the_server_lives() {
    let gw = Gateway::start_mock("");
    let mut s = gw.connect();
    let auth = format!("Bearer {}", gw.key);
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nauthorization: {auth}\r\nanthropic-version: 2023-06-01\r\nContent-Length: 50000000000\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(b"{\"model\":").unwrap();
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 413);
    assert_eq!(
        resp.json()["type"],
        "error",
        "Messages path: Anthropic shape"
    );
    assert_eq!(resp.json()["error"]["type"], "request_too_large");
    let again = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "alive?"}]}),
    );
    assert_eq!(again.status, 200);
}

/// The configured body limit holds for bodies that are really sent, chunked ones included.
#[test]
fn body_limit_holds_for_sent_and_chunked_bodies() {
    let gw = Gateway::start_mock("max_body_bytes = 1000");
    let auth = format!("Bearer {}", gw.key);
    let big = json!({"model": "mock", "messages": [{"role": "user", "content": "x".repeat(5000)}]})
        .to_string();
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        big.as_bytes(),
    );
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");

    let mut s = gw.connect();
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nauthorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    for _ in 0..10 {
        let _ = s.write_all(format!("{:x}\r\n{}\r\n", 200, "y".repeat(200)).as_bytes());
    }
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 413);
}

/// Defect 4a: a client that connects and sends nothing is dropped after the read timeout.
#[test]
fn idle_client_is_dropped_after_the_read_timeout() {
    let gw = Gateway::start_mock("read_timeout_secs = 1");
    let mut s = gw.connect();
    let mut buf = [0u8; 64];
    // The read returns 0 (closed) long before the 30 s socket timeout of the test client.
    let n = s
        .read(&mut buf)
        .expect("the server closes the idle connection");
    assert_eq!(n, 0);
}

/// Defect 4b: a client that sends half a head, or drips its request a byte at a time, is answered 408
/// and dropped when the request deadline passes, although bytes keep arriving.
#[test]
fn slow_clients_are_dropped_after_the_read_timeout() {
    let gw = Gateway::start_mock("read_timeout_secs = 1");
    let mut s = gw.connect();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 408);

    // Slowloris: one header byte every 100 ms, forever; the server must cut it off.
    let s = gw.connect();
    let mut w = s.try_clone().unwrap();
    let dripper = std::thread::spawn(move || {
        let _ = w.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ");
        for _ in 0..600 {
            if w.write_all(b"a").is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    });
    let mut r = BufReader::new(s);
    let mut all = Vec::new();
    let _ = r.read_to_end(&mut all);
    assert!(
        String::from_utf8_lossy(&all).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&all)
    );
    assert!(
        dripper.join().unwrap(),
        "the server kept reading a drip-fed request"
    );
}

/// Defect 4c: `TCP_NODELAY` is set on every accepted socket. Checked in-process on the server's own sockets.
#[test]
fn nodelay_is_set_on_every_accepted_socket() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = Arc::new(HttpConfig {
        limits: ParseLimits::default(),
        read_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
        max_connections: 100,
        per_client: Default::default(),
        max_buffered_body_bytes: 1 << 30,
        workers: 4,
        queue_size: 16,
        screen: None,
        overloaded: None,
    });
    let record = seen.clone();
    let handler: Arc<http::Handler> = Arc::new(move |ex: &mut Exchange| {
        record
            .lock()
            .unwrap()
            .push(ex.response().nodelay().unwrap());
        let _ = ex.response().send(200, &[], b"ok");
    });
    let render: Arc<http::ErrorRenderer> = Arc::new(|_, _, m| (Vec::new(), m.as_bytes().to_vec()));
    let state = Arc::new(ServerState::default());
    http::start(listener, config, state, handler, render).unwrap();
    for _ in 0..16 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        send_request(&mut s, "GET", "/", &[], b"", true);
        assert_eq!(read_response(&mut BufReader::new(s)).status, 200);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 16);
    assert!(seen.iter().all(|&on| on), "{seen:?}");
}

/// Defect 3: the accept loop survives accept errors. With the descriptor limit exhausted (EMFILE) the loop
/// keeps retrying; once descriptors are free again, new connections are served.
#[test]
fn accept_loop_survives_running_out_of_descriptors() {
    let dir = TempDir::new("emfile");
    let config = standard_config(dir.path(), None, "workers = 4");
    std::fs::write(dir.path().join("tollgate.toml"), &config).unwrap();
    // Start under a low descriptor limit via the shell's ulimit.
    let script = format!(
        "ulimit -n 48 && exec {} serve --config {}",
        bin(),
        dir.path().join("tollgate.toml").display()
    );
    let gw = start_command(dir, std::process::Command::new("sh").args(["-c", &script]));
    let mut held = Vec::new();
    for _ in 0..60 {
        if let Ok(s) = TcpStream::connect(gw.addr) {
            held.push(s);
        }
    }
    // Wait until the gateway has reported running out.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !gw.all_logs().contains("Too many open files") {
        assert!(
            std::time::Instant::now() < deadline,
            "descriptors never ran out: {}",
            gw.all_logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(held);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "still here"}]}),
    );
    assert_eq!(r.status, 200);
}

fn start_command(dir: TempDir, cmd: &mut std::process::Command) -> Gateway {
    Gateway::start_command(dir, cmd)
}

/// A full worker queue answers 503 with retry-after at once, while the busy worker is still busy.
#[test]
fn full_queue_gets_503_with_retry_after() {
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release = Mutex::new(Some(release_rx));
    let fake = FakeUpstream::start(move |_| {
        let first = release.lock().unwrap().take();
        match first {
            // The first request holds the only worker until the test releases it.
            Some(rx) => {
                let _ = rx.recv_timeout(Duration::from_secs(60));
                Reply::json(
                    200,
                    &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}]}),
                )
            }
            None => Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "later"}, "finish_reason": "stop"}]}),
            ),
        }
    });
    let gw = Gateway::start_with_fake(
        fake.addr,
        &format!("workers = 1\nqueue_size = 1\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\""),
    );
    let body = json!({"model": "m-chat", "messages": [{"role": "user", "content": "hi"}]});
    let a = {
        let (addr, key, body) = (gw.addr, gw.key.clone(), body.clone());
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            send_request(
                &mut s,
                "POST",
                "/v1/chat/completions",
                &[("authorization", &format!("Bearer {key}"))],
                body.to_string().as_bytes(),
                true,
            );
            read_response(&mut BufReader::new(s)).status
        })
    };
    // Wait until the upstream holds request A: the worker is now busy.
    while fake.received().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let auth = format!("Bearer {}", gw.key);
    let mut conns: Vec<TcpStream> = (0..2).map(|_| gw.connect()).collect();
    for s in conns.iter_mut() {
        send_request(
            s,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            body.to_string().as_bytes(),
            true,
        );
    }
    // One of B and C waits in the queue; the other is refused at once (read before A is released).
    let mut readers: Vec<BufReader<TcpStream>> = conns.into_iter().map(BufReader::new).collect();
    let mut refused = None;
    for (i, r) in readers.iter_mut().enumerate() {
        r.get_ref()
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut peek = [0u8; 1];
        if r.get_ref().peek(&mut peek).is_ok() {
            refused = Some(i);
        }
    }
    // If neither answered within 300 ms, wait longer for whichever answers first (no timing assumption
    // beyond "the refusal comes before A is released").
    let refused = refused.unwrap_or_else(|| loop {
        for (i, r) in readers.iter().enumerate() {
            r.get_ref()
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut peek = [0u8; 1];
            if r.get_ref().peek(&mut peek).is_ok() {
                return i;
            }
        }
    });
    readers[refused]
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let resp = read_response(&mut readers[refused]);
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    assert!(resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("busy"));
    let id = resp.header("x-request-id").unwrap().to_string();
    release_tx.send(()).unwrap();
    assert_eq!(a.join().unwrap(), 200);
    let other = 1 - refused;
    readers[other]
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(read_response(&mut readers[other]).status, 200);
    // Once the worker is free: a known key's refusal leaves its record, under the id its answer carries.
    let recs = gw.admin("/admin/usage?status=503").json()["data"].clone();
    let rec = recs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no record for the overloaded {id}: {recs}"))
        .clone();
    assert_eq!(rec["reason"], "overloaded", "{rec}");
    assert_eq!(rec["model"], "m-chat", "{rec}");
}

/// Too many open connections: the next one gets 503 with retry-after and is closed.
#[test]
fn too_many_connections_get_503() {
    let gw = Gateway::start_mock("max_connections = 2");
    let held: Vec<TcpStream> = (0..2).map(|_| gw.connect()).collect();
    // Make sure both are accepted: a request on each.
    let auth = format!("Bearer {}", gw.key);
    let mut readers = Vec::new();
    for s in &held {
        let mut w = s.try_clone().unwrap();
        send_request(
            &mut w,
            "GET",
            "/healthz",
            &[("authorization", &auth)],
            b"",
            false,
        );
        let mut r = BufReader::new(s.try_clone().unwrap());
        assert_eq!(read_response(&mut r).status, 200);
        readers.push(r);
    }
    let s = gw.connect();
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    drop(held);
    drop(readers);
}

/// Keep-alive details: pipelined requests, `Expect: 100-continue`, chunked request bodies, HTTP/1.0.
#[test]
fn http11_details() {
    let gw = Gateway::start_mock("");
    let auth = format!("Bearer {}", gw.key);

    // Two pipelined requests in one write.
    let mut s = gw.connect();
    let body = chat_body("one");
    let mut both = Vec::new();
    for _ in 0..2 {
        both.extend_from_slice(
            format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nauthorization: {auth}\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
        );
        both.extend_from_slice(&body);
    }
    s.write_all(&both).unwrap();
    let mut r = BufReader::new(s);
    assert_eq!(read_response(&mut r).status, 200);
    assert_eq!(read_response(&mut r).status, 200);

    // Expect: 100-continue gets the interim response before the body is sent.
    let mut s = gw.connect();
    let body = chat_body("continue");
    s.write_all(
        format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nauthorization: {auth}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
    )
    .unwrap();
    let mut line = [0u8; 25];
    s.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(&body).unwrap();
    assert_eq!(read_response(&mut BufReader::new(s)).status, 200);

    // A chunked request body.
    let mut s = gw.connect();
    let body = chat_body("chunked body");
    let (a, b) = body.split_at(10);
    let mut raw = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nauthorization: {auth}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").into_bytes();
    for part in [a, b] {
        raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        raw.extend_from_slice(part);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&raw).unwrap();
    let resp = read_response(&mut BufReader::new(s));
    assert_eq!(resp.status, 200);
    assert!(resp.text().contains("chunked body"));

    // HTTP/1.0 without keep-alive: the server closes after the response.
    let mut s = gw.connect();
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(all.to_ascii_lowercase().contains("connection: close"));

    // HTTP/1.0 asking for keep-alive is told it is kept (else it waits for the close), and served again.
    let mut s = gw.connect();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let resp = read_response(&mut r);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.header("connection"), Some("keep-alive"));
    }
}

/// Malformed heads: garbage is 400, too many headers 431, both in JSON, and the server lives on.
#[test]
fn malformed_heads_get_clear_errors() {
    let gw = Gateway::start_mock("");
    let mut s = gw.connect();
    s.write_all(b"\x00\x01GARBAGE\r\n\r\n").unwrap();
    let r = read_response(&mut BufReader::new(s));
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"].as_str().is_some());

    let mut s = gw.connect();
    let mut head = String::from("GET /healthz HTTP/1.1\r\n");
    for i in 0..150 {
        head.push_str(&format!("X-H{i}: v\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    assert_eq!(read_response(&mut BufReader::new(s)).status, 431);

    let mut s = gw.connect();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut BufReader::new(s)).status, 400);

    assert_eq!(gw.request("GET", "/healthz", &[], b"").status, 200);
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Idle keep-alive connections cost buffers, not threads: 200 connections that each carried a request and
/// stay open add no thread to the gateway (the pool's threads are all started with it).
#[test]
fn idle_keepalive_connections_take_no_thread() {
    let gw = Gateway::spawn_mock("workers = 8");
    // One request first, so every thread that exists at all is running.
    assert_eq!(
        gw.post(
            "/v1/chat/completions",
            &json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]})
        )
        .status,
        200
    );
    let before = threads_of(gw.pid());
    let auth = format!("Bearer {}", gw.key);
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut s = gw.connect();
        send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            &chat_body("idle"),
            false,
        );
        let mut r = BufReader::new(s);
        assert_eq!(read_response(&mut r).status, 200);
        held.push(r);
    }
    let during = threads_of(gw.pid());
    assert!(
        during <= before + 2,
        "threads went from {before} to {during} with 200 idle connections open"
    );
    // Every held connection still carries requests.
    for r in held.iter_mut().step_by(20) {
        send_request(
            r.get_mut(),
            "POST",
            "/v1/chat/completions",
            &[("authorization", &auth)],
            &chat_body("again"),
            false,
        );
        assert_eq!(read_response(r).status, 200);
    }
}

/// A request still arriving never holds a worker: with one worker and a queue of one, ten connections with
/// half-sent heads and bodies do not keep a complete request from being served at once.
#[test]
fn partial_requests_hold_no_worker() {
    let gw = Gateway::start_mock("workers = 1\nqueue_size = 1");
    let auth = format!("Bearer {}", gw.key);
    let mut partial = Vec::new();
    for i in 0..10 {
        let mut s = gw.connect();
        let head = if i % 2 == 0 {
            // Half a head.
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n".to_string()
        } else {
            // A whole head and part of its body.
            format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{{\"model\":")
        };
        s.write_all(head.as_bytes()).unwrap();
        partial.push(s);
    }
    for _ in 0..3 {
        let r = gw.post(
            "/v1/chat/completions",
            &json!({"model": "mock", "messages": [{"role": "user", "content": "through"}]}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // The partial requests are still waiting, not refused: finishing one gets it answered.
    let mut s = partial.remove(1);
    let rest = format!(
        "{:<width$}",
        "\"mock\",\"messages\":[{\"role\":\"user\",\"content\":\"late\"}]}",
        width = 500 - "{\"model\":".len()
    );
    s.write_all(rest.as_bytes()).unwrap();
    assert_eq!(read_response(&mut BufReader::new(s)).status, 200);
}
