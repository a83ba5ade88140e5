//! Attacks on what SECURITY.md promises, through the real binary: secrets that must never leave (an upstream
//! that echoes the credential it was sent, trace-level logging), log lines a client cannot forge, quota that
//! is metered even when it costs nothing, and a data directory open to other users. (Framing and bodies:
//! tests/edge.rs; the operator's upstream account: tests/tenancy.rs; private files and symlinks:
//! tests/keys_file.rs; overspend with decoy fields: tests/guarantees.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

/// The masked form real providers echo: the key's first characters and its last four.
fn masked(key: &str) -> String {
    format!("{}****************{}", &key[..8], &key[key.len() - 4..])
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn assert_clean(what: &str, text: &str, client_key: &str) {
    let tail = &UPSTREAM_KEY[UPSTREAM_KEY.len() - 4..];
    for needle in [
        UPSTREAM_KEY.to_string(),
        masked(UPSTREAM_KEY),
        hex(UPSTREAM_KEY),
        client_key.to_string(),
        hex(client_key),
    ] {
        assert!(!text.contains(&needle), "{what} leaks {needle:?}:\n{text}");
    }
    // Not even the visible tail of the upstream credential next to a mask.
    assert!(
        !text.contains(&format!("****{tail}")),
        "{what} leaks the tail:\n{text}"
    );
}

/// An upstream that answers every call with an error echoing the credential it was sent, in full and masked,
/// as JSON and inside a stream: no client, record, console page or log line ever sees it.
#[test]
fn an_upstream_echoing_its_credential_leaks_it_nowhere() {
    let fake = FakeUpstream::start(|rec| {
        let sent = rec
            .header("authorization")
            .map(|a| a.trim_start_matches("Bearer ").to_string())
            .or_else(|| rec.header("x-api-key").map(str::to_string))
            .unwrap_or_default();
        let text = format!(
            "Incorrect API key provided: {}. Also got {sent}",
            masked(&sent)
        );
        if rec.json()["stream"] == true {
            let ev = json!({"error": {"message": text, "type": "server_error", "code": sent}});
            Reply::sse(vec![format!("data: {ev}\n\n").into_bytes()])
        } else {
            Reply::json(
                401,
                &json!({"error": {"message": text, "type": "invalid_request_error", "param": sent, "code": "invalid_api_key"}}),
            )
        }
    });
    let dir = TempDir::new("sec-echo");
    let config = standard_config(
        dir.path(),
        Some(fake.addr),
        &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"\nlog_level = \"trace\""),
    );
    let gw = Gateway::start_with(dir, &config);
    let mut answers = Vec::new();
    for (path, model) in [
        ("/v1/chat/completions", "m-chat"),
        ("/v1/chat/completions", "m-messages"),
        ("/v1/messages", "m-messages"),
        ("/v1/messages", "m-chat"),
        ("/v1/responses", "m-responses"),
    ] {
        for stream in [false, true] {
            let body = json!({"model": model, "stream": stream, "max_tokens": 10, "input": "hi",
                              "messages": [{"role": "user", "content": "hi"}]});
            let r = gw.post(path, &body);
            answers.push(format!(
                "{path} {model} stream={stream}: {} {}",
                r.status,
                r.text()
            ));
        }
    }
    assert!(fake.received().len() >= 10);
    let all = answers.join("\n");
    assert!(
        all.contains("[redacted]"),
        "the echo reached the answers, scrubbed: {all}"
    );
    assert_clean("answers", &all, &gw.key);
    let usage = gw.admin("/admin/usage?limit=100").text();
    assert!(usage.contains("request_id"));
    assert_clean("usage records", &usage, &gw.key);
    assert_clean(
        "the CSV export",
        &gw.admin("/admin/usage.csv").text(),
        &gw.key,
    );
    assert_clean("the model list", &gw.admin("/admin/models").text(), &gw.key);
    assert_clean(
        "metrics",
        &gw.request("GET", "/metrics", &[], b"").text(),
        &gw.key,
    );
    // Trace level: third-party wire dumps are capped, and every line is scrubbed.
    wait_for(|| gw.all_logs().lines().count() > 10, "logs");
    assert_clean("the log at trace level", &gw.all_logs(), &gw.key);
}

/// Third review, 8 and 11: a provider's 429 naming the operator's organization and project, and an upstream
/// echoing a short hand-written credential (`upstream-secret`, under 16 characters), reach the tenant with
/// those replaced and the vendor's message otherwise whole.
#[test]
fn account_ids_and_short_credentials_never_reach_the_tenant() {
    let fake = FakeUpstream::start(|rec| {
        let sent = rec.header("authorization").unwrap_or_default().to_string();
        let text = format!(
            "Rate limit reached for gpt-x in organization org-AbCdEf0123456789xYz, project \
             proj_9aZk2LmN4pQrS7tU, consumer projects/987654321 (account 123456789012). headers seen: \
             authorization={sent}"
        );
        Reply::json(
            429,
            &json!({"error": {"message": text, "type": "requests", "code": "rate_limit_exceeded"}}),
        )
    });
    let dir = TempDir::new("sec-accounts");
    let config = format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\n\
         [[upstreams]]\nname = \"up\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\
         api_key_env = \"TG_TEST_SHORT_KEY\"\n\
         [[models]]\nname = \"m\"\nupstream = \"up\"\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        dir.path().display(),
        fake.addr
    );
    let gw = Gateway::start_with_env(
        dir,
        &config,
        &[("TG_TEST_SHORT_KEY", "upstream-secret")],
        None,
    );
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    let text = r.json()["error"]["message"].as_str().unwrap().to_string();
    for leak in [
        "AbCdEf0123456789xYz",
        "9aZk2LmN4pQrS7tU",
        "987654321",
        "123456789012",
        "upstream-secret",
    ] {
        assert!(!text.contains(leak), "{leak} reached the tenant: {text}");
    }
    assert!(
        text.contains("Rate limit reached for gpt-x in organization org-[redacted]"),
        "the vendor's message stays: {text}"
    );
    assert!(text.contains("authorization=Bearer [redacted]"), "{text}");
}

/// A model name (or client request id) with a line break cannot forge a log line in the text format.
#[test]
fn client_strings_cannot_forge_log_lines() {
    let gw = Gateway::start_mock("");
    let forged =
        "2026-01-01T00:00:00.000Z INFO  [tollgate::request] req_forged key=admin status=200";
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": format!("nope\n{forged}"), "messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!(r.status, 404);
    let auth = format!("Bearer {}", gw.key);
    let id = format!("id\r\n{forged}");
    let _ = gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", &id)],
        json!({"model": "mock", "messages": [{"role": "user", "content": "x"}]})
            .to_string()
            .as_bytes(),
    );
    wait_for(
        || gw.all_logs().contains("nope\\n2026-01-01"),
        "the escaped model name in the log",
    );
    for line in gw.all_logs().lines() {
        assert!(
            !line.starts_with("2026-01-01T00:00:00.000Z"),
            "forged line: {line}"
        );
    }
}

/// `count_tokens` spends upstream quota: the key's rate limit applies and each forwarded call leaves a
/// usage record at no cost.
#[test]
fn count_tokens_is_metered() {
    let fake = FakeUpstream::start(|_| Reply::json(200, &json!({"input_tokens": 42})));
    let dir = TempDir::new("sec-count");
    let config = format!(
        "{}[[upstreams]]\nname = \"a\"\nkind = \"anthropic\"\nbase_url = \"http://{}\"\n\n\
         [[models]]\nname = \"claude\"\nupstream = \"a\"\ninput_price = 1000000.0\noutput_price = 1000000.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\nrpm = 3\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        fake.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let body = json!({"model": "claude", "messages": [{"role": "user", "content": "count me"}]});
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let auth = format!("Bearer {}", gw.key);
        let r = gw.request(
            "POST",
            "/v1/messages/count_tokens",
            &[
                ("authorization", &auth),
                ("anthropic-version", "2023-06-01"),
            ],
            body.to_string().as_bytes(),
        );
        statuses.push(r.status);
        if r.status == 200 {
            assert_eq!(r.json()["input_tokens"], 42);
        } else {
            assert!(
                r.header("retry-after").is_some(),
                "{} {}",
                r.status,
                r.text()
            );
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(
        fake.received().len(),
        3,
        "refused calls never reach the upstream"
    );
    let records: Vec<Value> = gw.admin("/admin/usage?limit=10").json()["data"]
        .as_array()
        .unwrap()
        .clone();
    // Three forwarded counts, and the two refusals (rate limited: no upstream, no tokens).
    assert_eq!(records.len(), 5, "{records:?}");
    for r in &records {
        assert_eq!(r["cost"], 0.0, "{r}");
        if r["status"] == 200 {
            assert_eq!(r["input_tokens"], 42, "{r}");
            assert_eq!(r["upstream"], "a");
        } else {
            assert_eq!(r["reason"], "rate_limited", "{r}");
            assert!(r["upstream"].is_null(), "{r}");
        }
    }
}

/// A data directory open to other users is reported by `check`, at start and by `doctor --config`.
#[test]
fn an_open_data_dir_is_reported() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("sec-perms");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = standard_config(dir.path(), None, "");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, &config).unwrap();
    let out = Command::new(bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("open to other users") && text.contains("chmod 700"),
        "{text}"
    );
    let gw = Gateway::start_with(dir, &config);
    wait_for(
        || gw.all_logs().contains("open to other users"),
        "the warning at start",
    );
    let out = Command::new(bin())
        .args([
            "doctor",
            "--base-url",
            &format!("http://{}", gw.addr),
            "--key",
            &gw.key,
        ])
        .args(["--model", "mock", "--protocol", "chat", "--config"])
        .arg(gw.config_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("open to other users"), "{text}");
}
