//! Exact by construction: time bounds compared as instants (RFC 3339 with offsets, Unix seconds meaning the
//! start of that second, impossible dates refused), money as integers, paths decoded as paths.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::*;
use serde_json::json;

fn usage_count(gw: &Gateway, query: &str) -> (u16, usize) {
    let r = gw.admin(&format!("/admin/usage?{query}"));
    let n = if r.status == 200 {
        r.json()["data"].as_array().unwrap().len()
    } else {
        0
    };
    (r.status, n)
}

#[test]
fn time_bounds_are_instants() {
    let gw = Gateway::start_mock(&format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""));
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "t"}]}),
    );
    assert_eq!(r.status, 200);
    let rec = &gw.admin("/admin/usage").json()["data"][0];
    let ts = rec["ts"].as_str().unwrap().to_string();
    // The record's own second, as Unix seconds: the record (stamped later in that second) is included.
    let secs = {
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &ts, "+%s"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        usage_count(&gw, &format!("since={secs}")),
        (200, 1),
        "since={secs} ts={ts}"
    );
    assert_eq!(usage_count(&gw, &format!("until={secs}")), (200, 0));
    // The same instant written with an offset.
    let hh: i64 = ts[11..13].parse().unwrap();
    let shifted = format!("{}{:02}{}%2B02:00", &ts[..11], (hh + 2) % 24, &ts[13..19]);
    if hh < 22 {
        assert_eq!(
            usage_count(&gw, &format!("since={shifted}")),
            (200, 1),
            "{shifted}"
        );
        assert_eq!(
            usage_count(
                &gw,
                &format!("since={}{:02}{}Z", &ts[..11], hh + 2, &ts[13..19])
            ),
            (200, 0),
            "the offset is not ignored"
        );
    }
    for bad in [
        "2026-02-31T00:00:00Z",
        "2026-11-24T10:00:00garbage",
        "yesterday",
    ] {
        let r = gw.admin(&format!("/admin/usage?since={bad}"));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], "since");
    }
}

/// Paths are decoded as paths (`+` stays `+`, a malformed escape is 400), framing is digits only.
#[test]
fn paths_and_framing_are_parsed_strictly() {
    use std::io::{Read, Write};
    let gw = Gateway::start_mock("");
    let auth = format!("Bearer {}", gw.key);
    let r = gw.request("GET", "/v1/models/mock", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 200);
    let r = gw.request("GET", "/v1/models/mo%63k", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 200, "an escape is decoded");
    let r = gw.request("GET", "/v1/models/mock+x", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 404);
    assert!(r.text().contains("mock+x"), "`+` stays `+`: {}", r.text());
    let r = gw.request("GET", "/v1/models/%+1", &[("authorization", &auth)], b"");
    assert_eq!(r.status, 400, "{}", r.text());
    for (name, head) in [
        ("a signed length", "Content-Length: +5\r\n"),
        (
            "a coding before chunked",
            "Transfer-Encoding: gzip, chunked\r\n",
        ),
    ] {
        let mut s = gw.connect();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n{head}\r\nhello"
        )
        .unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        assert!(
            text.starts_with("HTTP/1.1 400") || text.starts_with("HTTP/1.1 501"),
            "{name}: {text}"
        );
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{name}: {text}"
        );
    }
    let mut s = gw.connect();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nTransfer-Encoding: chunked\r\n\r\n 5 \r\nhello\r\n0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    assert!(
        text.starts_with("HTTP/1.1 400"),
        "chunk size with spaces: {text}"
    );
}

/// Money is an integer count of 10⁻¹² credits: 25 requests at prices 0.3 / 1.2 per 1M tokens (floats gave
/// `0.000033299999999999996`) record costs without noise, and the balance is exactly the credit minus their
/// sum; a top-up writes an exact amount into the keys file; a price finer than the unit is refused.
#[test]
fn money_adds_up_to_the_unit() {
    use tollgate::money::Money;
    let dir = TempDir::new("money");
    let config = format!(
        "{}admin_token_env = \"{ADMIN_TOKEN_ENV}\"\n[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"cheap\"\nupstream = \"mock\"\ninput_price = 0.3\noutput_price = 1.2\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(dir.path(), "")
    );
    let gw = Gateway::start_with(dir, &config);
    let key = gw.add_key("exact", "default", Some(1.0));
    for i in 0..25 {
        let r = gw.post_as(
            &key,
            "/v1/chat/completions",
            &json!({"model": "cheap", "messages": [{"role": "user", "content": format!("request number {i} {}", "x".repeat(i))}]}),
        );
        assert_eq!(r.status, 200);
    }
    // A query flushes the ledger to its file.
    let records = gw.admin("/admin/usage?key=exact&limit=100").json();
    assert_eq!(records["data"].as_array().unwrap().len(), 25);
    let ledger = std::fs::read_to_string(gw.dir.path().join("data/usage.jsonl")).unwrap();
    let mut sum = Money::ZERO;
    for line in ledger.lines().filter(|l| l.contains("\"key\":\"exact\"")) {
        let text = line.split("\"cost\":").nth(1).unwrap();
        let text = &text[..text.find([',', '}']).unwrap()];
        let cost = Money::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(
            text.len() <= 16 && !text.contains("9999") && !text.contains("0000000"),
            "float noise in {text}"
        );
        sum += cost;
    }
    let row = gw.admin("/admin/keys").json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "exact")
        .cloned()
        .unwrap();
    let balance = Money::from_f64(row["balance"].as_f64().unwrap()).unwrap();
    assert_eq!(balance, Money::credits(1) - sum, "{row}");
    // A top-up is written exactly.
    let (code, _, err) = gw.cli(&["keys", "credit", "--name", "exact", "--add", "0.1"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = gw.cli(&["keys", "credit", "--name", "exact", "--add", "0.2"]);
    assert_eq!(code, 0, "{err}");
    let keys = std::fs::read_to_string(gw.dir.path().join("data/keys.jsonl")).unwrap();
    assert!(keys.contains("\"credit\":1.3"), "{keys}");
    assert!(!keys.contains("1.3000000"), "{keys}");
    // A price finer than the unit (7 decimals per 1M tokens) is refused by check.
    let bad = gw.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        config.replace("input_price = 0.3", "input_price = 0.0000001"),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("input_price"));
}
