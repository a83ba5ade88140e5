//! The HTTP layer's edge cases for the request body received in place, the recycled receive buffer and the
//! reused answer buffer (issue 31's leaner hot path): none may let a byte of one exchange reach another, on
//! one connection (keep-alive, pipelining, `Expect: 100-continue`, HEAD, HTTP/1.0, an early answer, a
//! withheld answer) or across connections.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tollgate::http::{
    self, Early, Exchange, HttpConfig, Incoming, ParseLimits, ServerState, Withheld,
};

/// Echo server: `/echo` answers the body (HEAD too); `/owned` answers the body through the writer's reused
/// buffer (500 if that buffer is not empty when taken); `/withhold` sends a held answer of its body through
/// `send_owned`, takes it back and answers 503 instead. The screen answers `/deny` 401 from its head.
fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let screen: Arc<http::Screen> = Arc::new(|i: &Incoming| {
        (i.request.path == "/deny").then(|| Early {
            status: 401,
            headers: vec![],
            body: b"denied".to_vec(),
        })
    });
    let config = Arc::new(HttpConfig {
        limits: ParseLimits::default(),
        read_timeout: Duration::from_secs(30),
        write_timeout: Duration::from_secs(30),
        max_connections: 100,
        per_client: Default::default(),
        max_buffered_body_bytes: 1 << 30,
        workers: 2,
        queue_size: 16,
        screen: Some(screen),
        overloaded: None,
    });
    let handler: Arc<http::Handler> = Arc::new(|ex: &mut Exchange| {
        let body = ex.request.body.to_vec();
        let path = ex.request.path.clone();
        let w = ex.response();
        match path.as_str() {
            "/owned" | "/withhold" => {
                let mut buf = w.take_buffer();
                if !buf.is_empty() {
                    let _ = w.send(500, &[], b"stale answer buffer");
                    return;
                }
                buf.extend_from_slice(&body);
                if path == "/withhold" {
                    w.hold_end();
                    let _ = w.send_owned(200, &[], buf);
                    assert_eq!(w.withhold(), Withheld::Whole);
                    let _ = w.send(503, &[], b"withheld");
                } else {
                    let _ = w.send_owned(200, &[], buf);
                }
            }
            _ => {
                let _ = w.send(200, &[], &body);
            }
        }
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
    std::mem::forget(server);
    addr
}

fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u32 * 11 + seed as u32) % 26) as u8)
        .collect()
}

fn req(method: &str, path: &str, extra: &str, b: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET-{path}\r\n{extra}Content-Length: {}\r\n\r\n",
        b.len()
    )
    .into_bytes();
    v.extend_from_slice(b);
    v
}

fn connect(addr: SocketAddr) -> (TcpStream, BufReader<TcpStream>) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn expect(r: &mut BufReader<TcpStream>, status: u16, want: &[u8], what: &str) {
    let resp = read_response(r);
    assert_eq!(resp.status, status, "{what}: {}", resp.text());
    assert!(
        resp.body == want,
        "{what}: body differs ({} bytes, want {})",
        resp.body.len(),
        want.len()
    );
    assert!(
        !resp.text().contains("SECRET"),
        "{what}: a request head reached an answer"
    );
}

#[test]
fn expect_continue_head_pipelining_and_a_large_body_keep_every_exchange_apart() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    // 100-continue, body over the recycled cap (64 KiB), then a small one in the same connection.
    let big = body(200_000, 1);
    let head = req("POST", "/echo", "Expect: 100-continue\r\n", &[]);
    let head = String::from_utf8(head).unwrap().replace(
        "Content-Length: 0",
        &format!("Content-Length: {}", big.len()),
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line}");
    r.read_line(&mut line).unwrap();
    s.write_all(&big).unwrap();
    expect(&mut r, 200, &big, "100-continue large body");
    let small = body(9, 2);
    s.write_all(&req("POST", "/echo", "", &small)).unwrap();
    expect(&mut r, 200, &small, "small after large");
    // HEAD with a body: head only, its length announced; then a GET sees nothing of it.
    let hb = body(3_000, 3);
    s.write_all(&req("HEAD", "/echo", "", &hb)).unwrap();
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 200);
    let cl = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .unwrap();
    assert_eq!(cl.1, "3000");
    s.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    expect(&mut r, 200, b"", "GET after HEAD");
    // Pipelined: body, no body, chunked, body, all in one write.
    let (a, c, d) = (body(5_000, 4), body(70_000, 5), body(17, 6));
    let mut all = req("POST", "/owned", "", &a);
    all.extend_from_slice(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    all.extend_from_slice(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    all.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
    all.extend_from_slice(&c);
    all.extend_from_slice(b"\r\n0\r\n\r\n");
    all.extend_from_slice(&req("POST", "/owned", "", &d));
    s.write_all(&all).unwrap();
    expect(&mut r, 200, &a, "pipelined 1");
    expect(&mut r, 200, b"", "pipelined 2");
    expect(&mut r, 200, &c, "pipelined 3 (chunked)");
    expect(&mut r, 200, &d, "pipelined 4");
}

#[test]
fn a_withheld_owned_answer_never_reaches_the_client_nor_the_next_answer() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    for (i, len) in [40_000usize, 10, 60_000, 3].into_iter().enumerate() {
        let b = body(len, 10 + i as u8);
        s.write_all(&req("POST", "/withhold", "", &b)).unwrap();
        expect(&mut r, 503, b"withheld", "withheld");
        let small = body(5, 20 + i as u8);
        s.write_all(&req("POST", "/owned", "", &small)).unwrap();
        expect(&mut r, 200, &small, "owned after withheld");
        s.write_all(&req("HEAD", "/owned", "", &small)).unwrap();
        let (status, _) = read_head(&mut r);
        assert_eq!(status, 200);
    }
}

#[test]
fn an_early_answer_before_the_body_closes_and_leaves_other_connections_alone() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    let (mut s2, mut r2) = connect(addr);
    let first = body(100, 7);
    s.write_all(&req("POST", "/echo", "", &first)).unwrap();
    expect(&mut r, 200, &first, "before");
    // 401 from the head, part of the body already sent, the rest after.
    let denied = body(50_000, 8);
    let raw = req("POST", "/deny", "", &denied);
    s.write_all(&raw[..raw.len() - 40_000]).unwrap();
    expect(&mut r, 401, b"denied", "screened");
    let _ = s.write_all(&raw[raw.len() - 40_000..]);
    let _ = s.write_all(&req("POST", "/echo", "", b"smuggled"));
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "after the 401: {:?}",
        String::from_utf8_lossy(&rest)
    );
    // Another connection, a client gone mid-body on a third.
    let (mut s3, _r3) = connect(addr);
    s3.write_all(&req("POST", "/echo", "", &body(10_000, 9))[..5_000])
        .unwrap();
    drop(s3);
    let other = body(33, 10);
    s2.write_all(&req("POST", "/echo", "", &other)).unwrap();
    expect(&mut r2, 200, &other, "other connection");
}

/// A HEAD the screen answers gets the answer's head alone: its length announced, no body, then the close.
#[test]
fn a_screened_head_request_gets_no_body() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    s.write_all(&req("HEAD", "/deny", "", &body(500, 12)))
        .unwrap();
    let (status, headers) = read_head(&mut r);
    assert_eq!(status, 401);
    let cl = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.as_str());
    assert_eq!(cl, Some("6"), "the length of the answer a GET would get");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "a body after a HEAD's head: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

#[test]
fn http10_with_a_body_is_answered_and_closed() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    let b = body(20_000, 11);
    let mut raw = format!(
        "POST /owned HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        b.len()
    )
    .into_bytes();
    raw.extend_from_slice(&b);
    s.write_all(&raw).unwrap();
    expect(&mut r, 200, &b, "HTTP/1.0");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty());
}

/// Several credentials through the real gateway: the same key twice is served, two different ones are refused
/// (400) whatever the header names' case and wherever they sit, and a refused request bills neither.
#[test]
fn several_credentials_in_one_request() {
    let gw = Gateway::start_mock("");
    let other = gw.add_key("other", "default", None);
    let body = serde_json::json!({"model": "mock", "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}]})
    .to_string();
    let bearer = format!("Bearer {}", gw.key);
    let other_bearer = format!("Bearer {other}");
    let v = ("anthropic-version", "2023-06-01");
    let cases: Vec<(Vec<(&str, &str)>, u16)> = vec![
        (
            vec![
                ("x-api-key", gw.key.as_str()),
                ("authorization", bearer.as_str()),
                v,
            ],
            200,
        ),
        (
            vec![
                ("X-Api-Key", gw.key.as_str()),
                ("x-api-key", gw.key.as_str()),
                v,
            ],
            200,
        ),
        (
            vec![
                ("X-API-KEY", gw.key.as_str()),
                ("x-api-key", other.as_str()),
                v,
            ],
            400,
        ),
        (
            vec![
                ("x-api-key", gw.key.as_str()),
                ("x-api-key", gw.key.as_str()),
                ("Authorization", other_bearer.as_str()),
                v,
            ],
            400,
        ),
        (
            vec![
                ("authorization", bearer.as_str()),
                ("x-api-key", ""),
                ("AUTHORIZATION", other_bearer.as_str()),
                v,
            ],
            400,
        ),
        (
            vec![
                ("x-api-key", gw.key.as_str()),
                ("authorization", "Basic abc"),
                v,
            ],
            200,
        ),
    ];
    for (i, (headers, status)) in cases.iter().enumerate() {
        let r = gw.request("POST", "/v1/messages", headers, body.as_bytes());
        assert_eq!(r.status, *status, "case {i}: {}", r.text());
    }
}

/// A body over the recycled cap with the next request in the same write; a chunked body behind
/// `Expect: 100-continue`; a head of many (duplicate, empty, odd-case) fields before a body.
#[test]
fn large_body_with_a_pipelined_successor_and_chunked_continue() {
    let addr = server();
    let (mut s, mut r) = connect(addr);
    let (big, small) = (body(150_000, 30), body(12, 31));
    let mut raw = req("POST", "/owned", "", &big);
    raw.extend_from_slice(&req("POST", "/owned", "", &small));
    s.write_all(&raw).unwrap();
    expect(&mut r, 200, &big, "large, pipelined");
    expect(&mut r, 200, &small, "its successor");
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 100"), "{line}");
    r.read_line(&mut line).unwrap();
    let c = body(9_000, 32);
    s.write_all(format!("{:x}\r\n", c.len()).as_bytes())
        .unwrap();
    s.write_all(&c).unwrap();
    s.write_all(b"\r\n0\r\n\r\n").unwrap();
    expect(&mut r, 200, &c, "chunked after 100-continue");
    let mut extra = String::new();
    for i in 0..90 {
        extra.push_str(&format!("X-Dup: {}\r\nx-EMPTY:\r\n", "v".repeat(i)));
    }
    let b = body(777, 33);
    s.write_all(&req("POST", "/echo", &extra, &b)).unwrap();
    let resp = read_response(&mut r);
    // 181+ fields is over the header cap: refused with 431, never a body of another request.
    assert!(
        resp.status == 431 || resp.body == b,
        "{}: {}",
        resp.status,
        resp.text()
    );
}
