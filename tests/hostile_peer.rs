//! A hostile network peer against the real binary, through raw sockets: heads that announce large bodies
//! and send none lock nothing (whatever the path, the method or the credential), a key holder's slow body
//! holds only what it sent, client-chosen strings cannot forge log fields (text or JSON), and no answer to a
//! client nor any endpoint without the admin token names an internal address (an upstream's, the store's).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::redis::Redis;
use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

/// The default `max_body_bytes`: nine such bodies are more than the default `max_buffered_body_bytes`.
const ANNOUNCED: u64 = 33_554_432;
/// Connections per attack: twice what it took to fill the body budget.
const ATTACKERS: usize = 16;

fn small_chat() -> Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]})
}

/// Opens `n` connections that each send `head` and nothing more.
fn send_heads(gw: &Gateway, head: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = gw.connect();
            s.write_all(head.as_bytes()).unwrap();
            s
        })
        .collect()
}

/// What the gateway answered on `s`, read until it closes the connection (it must close it: the read
/// fails on the harness's 30 s timeout otherwise).
fn answer_and_close(mut s: TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .expect("the gateway answers the head and closes the connection");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// A value of a `/metrics` line without labels.
fn gauge(gw: &Gateway, name: &str) -> f64 {
    let text = gw.request("GET", "/metrics", &[], b"").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Heads that announce 32 MiB and send nothing, sixteen connections at a time, to every kind of path a
/// caller may not send a body to: each is answered from its head with its path's status and closed, nothing
/// is reserved, and a key holder's small request goes through meanwhile and after.
#[test]
fn heads_that_may_not_have_a_body_reserve_nothing() {
    let gw = Gateway::start_mock(&format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""));
    let key = format!("Authorization: Bearer {}\r\n", gw.key);
    let wrong_key = "Authorization: Bearer tg_wrongwrongwrongwrongwrongwrongwrongwrong\r\n";
    let cases: Vec<(&str, String, &[u16])> = vec![
        ("POST /nonexistent", String::new(), &[404]),
        ("PUT /v1/anything", key.clone(), &[404]),
        ("POST /v1/chat/completions", String::new(), &[401]),
        ("POST /v1/responses", wrong_key.to_string(), &[401]),
        (
            "POST /v1/messages",
            "anthropic-version: 2023-06-01\r\n".into(),
            &[401],
        ),
        (
            "POST /v1/messages/count_tokens",
            "x-api-key: tg_a\r\nx-api-key: tg_b\r\n".into(),
            &[400],
        ),
        ("PUT /v1/chat/completions", key.clone(), &[405]),
        ("GET /v1/models", String::new(), &[401]),
        ("POST /v1/models", wrong_key.to_string(), &[401]),
        ("GET /v1/models", key.clone(), &[400]),
        ("GET /console", String::new(), &[400]),
        ("POST /console/app.js", String::new(), &[404]),
        ("GET /healthz", String::new(), &[400]),
        ("POST /readyz", String::new(), &[405]),
        // Wrong admin tokens: 401, then held off (429) after four.
        (
            "POST /admin/usage",
            "Authorization: Bearer wrong-token\r\n".into(),
            &[401, 429],
        ),
        ("POST /admin/keys", key.clone(), &[401, 429]),
    ];
    for (line, headers, statuses) in cases {
        for framing in [
            format!("Content-Length: {ANNOUNCED}\r\n"),
            "Transfer-Encoding: chunked\r\n".to_string(),
        ] {
            let head = format!("{line} HTTP/1.1\r\nHost: x\r\n{headers}{framing}\r\n");
            let held = send_heads(&gw, &head, ATTACKERS);
            let r = gw.post("/v1/chat/completions", &small_chat());
            assert_eq!(r.status, 200, "{line} ({framing:?}): {}", r.text());
            for s in held {
                let (status, text) = answer_and_close(s);
                assert!(statuses.contains(&status), "{line}: {text}");
                assert!(!text.contains("100 Continue"), "{line}: {text}");
                assert!(text.contains("x-request-id"), "{line}: {text}");
            }
            let r = gw.post("/v1/chat/completions", &small_chat());
            assert_eq!(r.status, 200, "{line}: {}", r.text());
        }
    }
    // Every reservation is given back (the last small request's own, once its connection is parked again).
    wait_for(
        || gauge(&gw, "tollgate_buffered_body_bytes") == 0.0,
        "every body reservation given back",
    );
    // The path's own answer: the hints of a 404, the protocol's shape, `allow` on a 405.
    let mut s = send_heads(
        &gw,
        &format!(
            "POST /chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
        ),
        1,
    );
    let (status, text) = answer_and_close(s.remove(0));
    assert_eq!(status, 404);
    assert!(text.contains("missing `/v1`"), "{text}");
    let mut s = send_heads(
        &gw,
        &format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nanthropic-version: 2023-06-01\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
        ),
        1,
    );
    let (status, text) = answer_and_close(s.remove(0));
    assert_eq!(status, 401);
    assert!(text.contains("\"authentication_error\""), "{text}");
    let mut s = send_heads(
        &gw,
        &format!(
            "DELETE /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{key}Content-Length: 10\r\n\r\n"
        ),
        1,
    );
    let (status, text) = answer_and_close(s.remove(0));
    assert_eq!(status, 405);
    assert!(text.to_ascii_lowercase().contains("allow: post"), "{text}");
}

/// A key holder's connections that announce 32 MiB and send 1 KiB each hold what they sent, not what they
/// announced: sixteen of them leave room for everyone else.
#[test]
fn a_slow_body_holds_only_what_has_arrived() {
    let gw = Gateway::start_mock("");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {ANNOUNCED}\r\n\r\n",
        gw.key
    );
    let held = send_heads(&gw, &head, ATTACKERS);
    for mut s in &held {
        s.write_all(&[b' '; 1024]).unwrap();
    }
    wait_for(
        || gauge(&gw, "tollgate_buffered_body_bytes") >= (ATTACKERS * 1024) as f64,
        "the slow bodies counted",
    );
    let r = gw.post("/v1/chat/completions", &small_chat());
    assert_eq!(r.status, 200, "{}", r.text());
    // At most one 64 KiB step per slow connection, and one for the small request (its reservation may not
    // be given back yet when /metrics is read).
    let held_bytes = gauge(&gw, "tollgate_buffered_body_bytes");
    assert!(
        held_bytes <= ((ATTACKERS + 1) * 64 * 1024) as f64,
        "held {held_bytes} bytes for {ATTACKERS} KiB received"
    );
    drop(held);
    wait_for(
        || gauge(&gw, "tollgate_buffered_body_bytes") == 0.0,
        "the bodies given back",
    );
}

/// Bodies that may be sent still are: a 4 MB generation request with a key, and an admin call with the
/// admin token.
#[test]
fn bodies_with_credentials_still_go_through() {
    let gw = Gateway::start_mock(&format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""));
    let big = json!({"model": "mock", "messages": [{"role": "user", "content": "word ".repeat(800_000)}]});
    let r = gw.post("/v1/chat/completions", &big);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = gw.admin_post(
        "/admin/keys",
        &json!({"name": "second", "group": "default"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Chunked, with a key.
    let mut s = gw.connect();
    let body = small_chat().to_string();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        gw.key,
        body.len()
    )
    .unwrap();
    let (status, text) = answer_and_close(s);
    assert_eq!(status, 200, "{text}");
    // Every reservation is given back (the last small request's own, once its connection is parked again).
    wait_for(
        || gauge(&gw, "tollgate_buffered_body_bytes") == 0.0,
        "every body reservation given back",
    );
}

/// The fields of a text request line (`... [tollgate::request] req_x name=value name="quoted \" value"`),
/// unquoted and unescaped, in order.
fn fields(line: &str) -> Vec<(String, String)> {
    let rest = line
        .split_once("[tollgate::request] ")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("not a request line: {line}"));
    let mut chars = rest.chars().peekable();
    let mut out = Vec::new();
    let mut token = || -> Option<(String, String)> {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        chars.peek()?;
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ' ' {
                break;
            }
            name.push(c);
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            return Some((String::new(), name));
        }
        chars.next();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next().expect("an unterminated quoted value") {
                    '"' => break,
                    '\\' => match chars.next().unwrap() {
                        'n' => value.push('\n'),
                        'r' => value.push('\r'),
                        't' => value.push('\t'),
                        'u' => {
                            assert_eq!(chars.next(), Some('{'));
                            let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                            value.push(
                                char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap(),
                            );
                        }
                        c => value.push(c),
                    },
                    c => value.push(c),
                }
            }
            assert!(matches!(chars.peek(), None | Some(' ')), "{line}");
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        Some((name, value))
    };
    while let Some(f) = token() {
        out.push(f);
    }
    out
}

const BIDI_AND_SEPARATORS: [char; 10] = [
    '\u{2028}', '\u{2029}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{202e}', '\u{2066}',
    '\u{2069}', '\u{200f}',
];

/// Sends a request with a forged-looking client request id and model name; returns the answer.
fn forged_request(gw: &Gateway, client_id: &str, model: &str) -> Response {
    let auth = format!("Bearer {}", gw.key);
    gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", client_id)],
        json!({"model": model, "messages": [{"role": "user", "content": "x"}]})
            .to_string()
            .as_bytes(),
    )
}

/// A request id `x key=victim group=admins` and model names holding `key=`, quotes, backslashes, line and
/// paragraph separators and bidi overrides: each stays one quoted field of its own name in the text log,
/// and neither the text nor the JSON log carries a separator or a bidi control as it is.
#[test]
fn client_strings_cannot_forge_log_fields() {
    let client_id = "x key=victim group=admins \u{202e}snimda\u{202c}";
    let model = "mock\u{2028}2026-01-01T00:00:00.000Z INFO  [tollgate::request] req_f key=victim\u{202e} \"q\\";
    let gw = Gateway::start_mock("");
    for (id, model) in [(client_id, "mock"), (client_id, model)] {
        let r = forged_request(&gw, id, model);
        let request_id = r.header("x-request-id").unwrap().to_string();
        let line = gw.log_line(&request_id);
        for c in BIDI_AND_SEPARATORS {
            assert!(!line.contains(c), "raw U+{:04X} in {line:?}", c as u32);
        }
        let f = fields(&line);
        let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[0], "", "the request id first: {line}");
        assert_eq!(f[0].1, request_id);
        for name in ["client_request_id", "key", "group", "model", "status"] {
            assert_eq!(
                names.iter().filter(|n| **n == name).count(),
                1,
                "one {name}= in {line}"
            );
        }
        let get = |name: &str| f.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(get("client_request_id"), id);
        assert_eq!(get("key"), "default", "{line}");
        assert_eq!(get("group"), "default", "{line}");
        assert_eq!(get("model"), model, "{line}");
    }
    for line in gw.all_logs().lines() {
        for c in BIDI_AND_SEPARATORS {
            assert!(!line.contains(c), "raw U+{:04X} in {line:?}", c as u32);
        }
    }

    // JSON lines: the same strings, escaped (`\u2028`), each in its own field.
    let gw = Gateway::start_mock("log_format = \"json\"");
    let r = forged_request(&gw, client_id, model);
    assert_eq!(r.status, 404, "{}", r.text());
    let request_id = r.header("x-request-id").unwrap().to_string();
    let mut line = String::new();
    wait_for(
        || {
            line = gw
                .all_logs()
                .lines()
                .find(|l| l.contains(&request_id) && l.contains("\"status\""))
                .unwrap_or_default()
                .to_string();
            !line.is_empty()
        },
        "the JSON request line",
    );
    for c in BIDI_AND_SEPARATORS {
        assert!(!line.contains(c), "raw U+{:04X} in {line:?}", c as u32);
    }
    assert!(
        line.contains("\\u2028") && line.contains("\\u202e"),
        "{line}"
    );
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["client_request_id"], client_id);
    assert_eq!(v["model"], model);
    assert_eq!(v["key"], "default");
    for line in gw.all_logs().lines() {
        for c in BIDI_AND_SEPARATORS {
            assert!(!line.contains(c), "raw U+{:04X} in {line:?}", c as u32);
        }
    }
}

/// A local server found by discovery is listed without its address (`owned_by` says `local`), and when it
/// stops answering, the error its model's request gets does not name it either; the operator's log does.
#[test]
fn discovered_servers_are_not_named_by_address() {
    let down = Arc::new(AtomicBool::new(false));
    let fake = {
        let down = down.clone();
        FakeUpstream::start(move |rec| {
            if down.load(Ordering::SeqCst) {
                return Reply::Close;
            }
            if rec.method == "GET" {
                // `mock` collides with the embedded config's model: served as `mock@host:port`, never listed.
                return Reply::json(
                    200,
                    &json!({"data": [{"id": "peer-local-model"}, {"id": "mock"}]}),
                );
            }
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "peer-local-model",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
            )
        })
    };
    let dir = TempDir::new("peer-discovery");
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", "127.0.0.1:0")
        .env("TOLLGATE_DISCOVER", format!("http://{}/v1", fake.addr));
    let gw = Gateway::start_command(TempDir(dir.path().to_path_buf()), &mut cmd);
    std::mem::forget(dir);
    let port = format!(":{}", fake.addr.port());
    let auth = format!("Bearer {}", gw.key);
    let list = |path: &str| gw.request("GET", path, &[("authorization", &auth)], b"");
    wait_for(
        || list("/v1/models").text().contains("peer-local-model"),
        "the discovered model listed",
    );
    for path in ["/v1/models", "/v1/models/peer-local-model"] {
        let r = list(path);
        assert_eq!(r.status, 200);
        assert!(!r.text().contains(&port), "{path}: {}", r.text());
    }
    let r = gw.request("GET", "/v1beta/models", &[("x-goog-api-key", &gw.key)], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("peer-local-model"), "{}", r.text());
    assert!(!r.text().contains(&port), "/v1beta/models: {}", r.text());
    let one = list("/v1/models/peer-local-model").json();
    assert_eq!(one["owned_by"], "local");
    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    assert!(!metrics.contains(&port), "{metrics}");

    down.store(true, Ordering::SeqCst);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "peer-local-model", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert!(r.status >= 500, "{}", r.text());
    assert!(!r.text().contains(&port), "{}", r.text());
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "peer-local-model", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert!(!r.text().contains(&port), "{}", r.text());
    let request_id = r.header("x-request-id").unwrap().to_string();
    assert!(
        gw.log_line(&request_id).contains(&port),
        "the operator's log names the server: {}",
        gw.log_line(&request_id)
    );
}

/// With the shared store down, neither `/readyz` nor the 503 a model request gets (plain or in the
/// Messages shape) shows the Redis URL or its port; the log and the console's overview do, for the operator.
#[test]
fn the_store_address_stays_with_the_operator() {
    let mut redis = Redis::start(false);
    let dir = TempDir::new("peer-store");
    let top = format!("instance = \"peer\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"");
    let mut config = standard_config(dir.path(), None, &top);
    config.push_str(&redis.store_section(""));
    let gw = Gateway::start_with(dir, &config);
    assert_eq!(gw.post("/v1/chat/completions", &small_chat()).status, 200);
    let port = format!(
        ":{}",
        redis
            .url()
            .rsplit(':')
            .next()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
    );
    let ready = gw.request("GET", "/readyz", &[], b"");
    assert!(!ready.text().contains(&port), "{}", ready.text());
    redis.kill();
    let mut r = gw.post("/v1/chat/completions", &small_chat());
    wait_for(
        || {
            r = gw.post("/v1/chat/completions", &small_chat());
            r.status == 503
        },
        "503 with the store down",
    );
    let messages = gw.post(
        "/v1/messages",
        &json!({"model": "mock", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(messages.status, 503);
    let ready = gw.request("GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()["store"]["state"], "not answering");
    for (what, text) in [
        ("chat 503", r.text()),
        ("messages 503", messages.text()),
        ("/readyz", ready.text()),
        ("/healthz", gw.request("GET", "/healthz", &[], b"").text()),
        ("/metrics", gw.request("GET", "/metrics", &[], b"").text()),
    ] {
        assert!(!text.contains("redis://"), "{what}: {text}");
        assert!(!text.contains(&port), "{what}: {text}");
    }
    assert!(r.text().contains("shared store"), "{}", r.text());
    assert!(
        gw.all_logs()
            .contains(&redis.url()[..redis.url().len() - 2]),
        "the operator's log names the store"
    );
    let overview = gw.admin("/admin/overview");
    assert_eq!(overview.status, 200, "{}", overview.text());
    assert!(
        overview.json()["store"]["at"]
            .as_str()
            .is_some_and(|a| a.contains(&redis.url())),
        "the console names the store: {}",
        overview.text()
    );
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.2: another client on this host).
fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> TcpStream {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let std::net::SocketAddr::V4(to) = to else {
        panic!("an IPv4 gateway address")
    };
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    bind(&fd, &std::net::SocketAddrV4::new(from, 0))
        .and_then(|()| connect(&fd, &to))
        .unwrap_or_else(|e| panic!("could not connect from {from}: {e}"));
    TcpStream::from(fd)
}

/// A `GET /healthz` on `s` (kept open): its status.
fn health(s: &mut TcpStream) -> u16 {
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    head.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Third review, 6: one keyless peer cannot take every connection slot. Once more than half of
/// `max_connections` are open, an address holding its share (`max_connections_per_client`) gets 503 for
/// another, so another client still gets in; an address named in `exempt_clients` (a reverse proxy, a load
/// test) is not held to the share.
#[test]
fn one_peer_cannot_hold_every_connection_slot() {
    let run = |exempt: &str| {
        let dir = TempDir::new("peer-share");
        let top = format!("max_connections = 40\nmax_connections_per_client = 5\n{exempt}");
        let config = standard_config(dir.path(), None, &top);
        let gw = Gateway::start_with(dir, &config);
        let mut held = Vec::new();
        let mut refused = None;
        for _ in 0..40 {
            let mut s = TcpStream::connect(gw.addr).unwrap();
            match health(&mut s) {
                200 => held.push(s),
                other => {
                    refused = Some(other);
                    break;
                }
            }
        }
        let mut other = connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), gw.addr);
        let other_status = health(&mut other);
        (held.len(), refused, other_status)
    };
    let (held, refused, other) = run("");
    assert_eq!(held, 20, "the peer keeps half the slots, no more");
    assert_eq!(refused, Some(503));
    assert_eq!(other, 200, "another client still gets in");
    let (held, refused, other) = run("exempt_clients = [\"127.0.0.1/32\"]\n");
    assert_eq!(
        (held, refused),
        (40, None),
        "an exempt address is held to the total only"
    );
    assert_eq!(other, 503, "and the total holds");
}
