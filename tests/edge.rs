//! The edge an attacker reaches first, through raw sockets against the real binary: no body is read for a
//! caller without a valid key, request bodies are bounded in total across connections, and admin-token
//! guessing is held off per address.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn read_all(s: &mut std::net::TcpStream) -> String {
    let mut text = Vec::new();
    let _ = s.read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// A request without a valid key gets 401 from its head alone: its (announced, never sent) 30 MB body is
/// not waited for, and the connection closes.
#[test]
fn no_body_is_read_before_the_key_is_checked() {
    let gw = Gateway::start_mock("");
    for (path, auth) in [
        (
            "/v1/chat/completions",
            "Authorization: Bearer tg_wrongwrongwrongwrongwrongwrongwrongwrong\r\n",
        ),
        ("/v1/messages", ""),
        ("/v1/responses", "Authorization: Basic abc\r\n"),
    ] {
        let mut s = gw.connect();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}anthropic-version: 2023-06-01\r\nContent-Length: 31457280\r\nExpect: 100-continue\r\n\r\n"
        )
        .unwrap();
        let text = read_all(&mut s);
        assert!(text.starts_with("HTTP/1.1 401"), "{path}: {text}");
        assert!(
            !text.contains("100 Continue"),
            "{path}: no body was asked for: {text}"
        );
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{path}"
        );
        assert!(text.contains("x-request-id"), "{path}");
    }
    // With a valid key the same head is answered normally (the body is read).
    let body = br#"{"model":"mock","messages":[{"role":"user","content":"hi"}]}"#;
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth)],
        body,
    );
    assert_eq!(r.status, 200);
}

/// Twenty connections sending 20 MB bodies with no credential do not grow the gateway's memory: each is
/// refused from its head (today's code buffered 400 MB).
#[test]
fn unauthenticated_bodies_cost_no_memory() {
    let gw = Gateway::spawn_mock("");
    let before = rss_kib(gw.pid());
    let body_len = 20 * 1024 * 1024;
    let handles: Vec<_> = (0..20)
        .map(|_| {
            let addr = gw.addr;
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let head = format!(
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {body_len}\r\n\r\n"
                );
                s.write_all(head.as_bytes()).unwrap();
                let chunk = vec![b'a'; 1024 * 1024];
                for _ in 0..20 {
                    if s.write_all(&chunk).is_err() {
                        break; // the gateway answered and closed
                    }
                }
                let mut first = [0u8; 12];
                let _ = s.read_exact(&mut first);
                String::from_utf8_lossy(&first).into_owned()
            })
        })
        .collect();
    for h in handles {
        let line = h.join().unwrap();
        assert!(
            line.is_empty() || line.starts_with("HTTP/1.1 401"),
            "{line:?}"
        );
    }
    let after = rss_kib(gw.pid());
    assert!(
        after < before + 100 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}

/// Bodies are bounded in total across connections: one beyond the budget gets 503 before it is read.
#[test]
fn buffered_bodies_are_bounded_in_total() {
    let gw = Gateway::start_mock("max_buffered_body_bytes = 1000000");
    let mut s = gw.connect();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 2000000\r\n\r\n",
        gw.key
    )
    .unwrap();
    let text = read_all(&mut s);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.to_ascii_lowercase().contains("retry-after"), "{text}");
    // Within the budget, requests go through as usual (and give their bytes back).
    for _ in 0..3 {
        let r = gw.post(
            "/v1/chat/completions",
            &serde_json::json!({"model": "mock", "messages": [{"role": "user", "content": "x".repeat(300_000)}]}),
        );
        assert_eq!(r.status, 200);
    }
}

/// Admin-token guessing from one address is held off (429 with retry-after, the token not even compared)
/// after four wrong tokens; once the hold is over, the right token gets in and resets the count.
#[test]
fn admin_token_guessing_is_held_off() {
    let gw = Gateway::start_mock(&format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""));
    let wrong = |gw: &Gateway| {
        gw.request(
            "GET",
            "/admin/keys",
            &[("authorization", "Bearer guess")],
            b"",
        )
    };
    for _ in 0..4 {
        assert_eq!(wrong(&gw).status, 401);
    }
    assert_eq!(
        wrong(&gw).status,
        401,
        "the fifth wrong token starts the hold"
    );
    let r = gw.admin("/admin/keys");
    assert_eq!(
        r.status,
        429,
        "held off, even with the right token: {}",
        r.text()
    );
    assert_eq!(r.json()["error"]["code"], "admin_auth_throttled");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    wait_for(|| gw.admin("/admin/keys").status == 200, "the hold to end");
    assert_eq!(wrong(&gw).status, 401, "a success reset the count");
}
