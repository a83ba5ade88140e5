//! The lean hot path keeps every byte: a request body is handed to the handler in the connection's own
//! receive buffer (no copy) and that buffer is reused for the connection's next request, so what a handler
//! reads must be exactly the body sent, whatever came before it on the connection (a larger body, pipelined
//! requests, a body split across writes, a chunked one), and an answer written from the handler's bytes
//! must reach the client as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tollgate::http::{self, Exchange, HttpConfig, ParseLimits, ServerState};

/// An in-process server whose handler answers each request with its body, as it received it.
fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = Arc::new(HttpConfig {
        limits: ParseLimits::default(),
        read_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
        max_connections: 100,
        per_client: Default::default(),
        max_buffered_body_bytes: 1 << 30,
        workers: 2,
        queue_size: 16,
        screen: None,
        overloaded: None,
    });
    let handler: Arc<http::Handler> = Arc::new(|ex: &mut Exchange| {
        let body = ex.request.body.to_vec();
        let _ = ex.response().send(200, &[], &body);
    });
    let render: Arc<http::ErrorRenderer> = Arc::new(|_, _, m| (Vec::new(), m.as_bytes().to_vec()));
    let server = http::start(
        listener,
        config,
        Arc::new(ServerState::default()),
        handler,
        render,
    )
    .unwrap();
    // The server lives as long as the test process.
    std::mem::forget(server);
    addr
}

fn head(len: usize) -> Vec<u8> {
    format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n").into_bytes()
}

/// A body whose every byte depends on its position and on `seed`, so a stale byte cannot pass for it.
fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u32 * 7 + seed as u32) % 26) as u8)
        .collect()
}

fn connect(addr: std::net::SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn expect(r: &mut BufReader<TcpStream>, want: &[u8], what: &str) {
    let resp = read_response(r);
    assert_eq!(resp.status, 200, "{what}");
    assert_eq!(resp.body.len(), want.len(), "{what}: length");
    assert!(resp.body == want, "{what}: the body differs");
}

/// On one keep-alive connection, bodies of every shape: each is read as sent, none sees its
/// predecessor's bytes in the reused buffer.
#[test]
fn a_reused_connection_buffer_gives_each_request_exactly_its_body() {
    let addr = echo_server();
    let (mut s, mut r) = connect(addr);

    // A large body (several reads), then a small one in the buffer it grew.
    for (len, seed) in [(300_000, 1), (10, 2), (40_000, 3), (1, 4)] {
        let b = body(len, seed);
        s.write_all(&[head(len), b.clone()].concat()).unwrap();
        expect(&mut r, &b, &format!("body of {len} bytes"));
    }

    // Head and part of the body in one write, the rest in another.
    let b = body(5_000, 5);
    s.write_all(&[head(b.len()), b[..1_234].to_vec()].concat())
        .unwrap();
    s.flush().unwrap();
    s.write_all(&b[1_234..]).unwrap();
    expect(&mut r, &b, "a body split across writes");

    // Three pipelined requests in one write, the last one's head cut short until a second write.
    let (b1, b2, b3) = (body(700, 6), body(3, 7), body(90, 8));
    let mut both = [head(b1.len()), b1.clone(), head(b2.len()), b2.clone()].concat();
    let third = [head(b3.len()), b3.clone()].concat();
    both.extend_from_slice(&third[..9]);
    s.write_all(&both).unwrap();
    expect(&mut r, &b1, "first pipelined");
    expect(&mut r, &b2, "second pipelined");
    s.write_all(&third[9..]).unwrap();
    expect(&mut r, &b3, "third pipelined, completed later");

    // A chunked body, then a request without a body: neither sees an earlier body.
    let b = body(2_000, 9);
    let mut raw = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in b.chunks(700) {
        raw.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        raw.extend_from_slice(part);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&raw).unwrap();
    expect(&mut r, &b, "chunked");
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    expect(&mut r, b"", "no body");
    s.write_all(&[head(0)].concat()).unwrap();
    expect(&mut r, b"", "Content-Length: 0");
}

/// A Chat answer as an upstream might write it (its own key order and spacing), with `text` as content.
fn chat_answer(text: &str) -> Vec<u8> {
    format!(
        "{{ \"usage\": {{\"prompt_tokens\": 3, \"completion_tokens\": 2, \"total_tokens\": 5}},\n  \"id\": \"chatcmpl-x\", \
         \"object\": \"chat.completion\", \"model\": \"real-chat-model\", \"created\": 1,\n  \"choices\": [{{\"index\": 0, \
         \"finish_reason\": \"stop\", \"message\": {{\"role\": \"assistant\", \"content\": {}}}}}] }}",
        serde_json::to_string(text).unwrap()
    )
    .into_bytes()
}

/// Through the real gateway, on one keep-alive connection: passthrough answers of falling and rising sizes
/// reach the client byte for byte (each read into the connection's reused answer buffer and sent from it),
/// translated ones carry their own text, and the upstream receives each request's own prompt.
#[test]
fn answers_through_a_reused_buffer_arrive_byte_for_byte() {
    let texts: Vec<String> = [30_000usize, 12, 4_000, 0, 70_000, 7]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (0..n)
                .map(|j| (b'A' + ((i * 5 + j) % 26) as u8) as char)
                .collect()
        })
        .collect();
    let answers: Vec<Vec<u8>> = texts.iter().map(|t| chat_answer(t)).collect();
    let queue = std::sync::Mutex::new(std::collections::VecDeque::new());
    for a in answers.iter().chain(answers.iter()) {
        queue.lock().unwrap().push_back(a.clone());
    }
    let fake = common::upstream::FakeUpstream::start(move |_| common::upstream::Reply::Json {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: queue.lock().unwrap().pop_front().unwrap_or_default(),
    });
    let gw = Gateway::start_with_fake(fake.addr, "");
    let auth = format!("Bearer {}", gw.key);
    let mut s = gw.connect();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for (i, answer) in answers.iter().enumerate() {
        let prompt = format!("prompt {i} {}", "p".repeat(i * 3_000));
        let body = serde_json::json!({"model": "m-chat", "messages": [{"role": "user", "content": prompt}]});
        let bytes = body.to_string().into_bytes();
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &headers,
            &bytes,
            false,
        );
        let resp = read_response(&mut r);
        assert_eq!(resp.status, 200, "answer {i}: {}", resp.text());
        assert!(resp.body == *answer, "answer {i} was altered");
        assert_eq!(
            fake.last().json()["messages"][0]["content"],
            prompt.as_str()
        );
    }
    // The same answers translated for a Messages client, on the same connection.
    for (i, text) in texts.iter().enumerate() {
        let body = serde_json::json!({"model": "m-chat", "max_tokens": 100,
            "messages": [{"role": "user", "content": format!("again {i}")}]});
        let bytes = body.to_string().into_bytes();
        let headers = [
            ("x-api-key", gw.key.as_str()),
            ("anthropic-version", "2023-06-01"),
        ];
        send_request(&mut s, "POST", "/v1/messages", &headers, &bytes, false);
        let resp = read_response(&mut r);
        assert_eq!(resp.status, 200, "translated {i}: {}", resp.text());
        let v = resp.json();
        let got = v["content"][0]["text"].as_str().unwrap_or("");
        assert_eq!(got, text.as_str(), "translated {i}");
    }
}
