//! A newcomer's first hour: every mistake explains itself. `check` reports every problem at once and warns
//! about what will not work; an upstream without its credential fails alone, loudly; a taken port, an empty
//! key list, a lost path and a missing `max_tokens` each say what to do next.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::json;

fn tollgate(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write_config(dir: &TempDir, text: &str) -> String {
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn check_reports_every_error_at_once() {
    let dir = TempDir::new("fh-errors");
    let config = write_config(
        &dir,
        "workers = 0\nlog_level = \"loud\"\n\n[[upstreams]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"http://x/v1\"\n\n\
         [[models]]\nname = \"m\"\nupstream = \"nowhere\"\n\n[[groups]]\nname = \"g\"\nmodels = [\"*\"]\nrpm = 0\n",
    );
    let (code, _, err) = tollgate(&["check", "--config", &config], &[]);
    assert_eq!(code, 1, "{err}");
    for field in [
        "workers",
        "log_level",
        "upstreams[0].kind",
        "models[0].upstream",
        "groups[0].rpm",
    ] {
        assert!(err.contains(field), "{field} not reported: {err}");
    }
    assert!(err.contains("5 errors"), "{err}");
}

/// Issue 40: one run names every problem of a file, in file order, each with its line: a misspelt field
/// with the field it most likely meant (not "invalid TOML", and not hiding the rest), an unknown upstream,
/// a negative price, a value of the wrong kind; errors before warnings. `serve` refuses with the same list.
#[test]
fn check_names_every_problem_in_file_order_with_its_line() {
    let dir = TempDir::new("fh-lines");
    let config = write_config(
        &dir,
        "listen = \"127.0.0.1:0\"\nadmin_token_env = \"X\"\n\n[[upstreams]]\nname = \"oa\"\nkind = \"openai-chat\"\n\
         base_ulr = \"http://127.0.0.1:9001/v1\"\n\n[[models]]\nname = \"m\"\nupstream = \"nope\"\n\
         upstream_modle = \"real\"\ninput_price = -1.0\nmax_output_tokens = \"lots\"\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"m\"]\n",
    );
    let (code, _, err) = tollgate(&["check", "--config", &config], &[]);
    assert_eq!(code, 1, "{err}");
    let want = [
        "line 7: upstreams[0].base_ulr: unknown field `base_ulr`; did you mean `base_url`?",
        "line 11: models[0].upstream: unknown upstream \"nope\"",
        "line 12: models[0].upstream_modle: unknown field `upstream_modle`; did you mean `upstream_model`?",
        "line 13: models[0].input_price: expected a price of 0 or more",
        "line 14: models[0].max_output_tokens: expected a whole number of 0 or more, got string",
    ];
    let mut at = 0;
    for w in want {
        let found = err[at..]
            .find(w)
            .unwrap_or_else(|| panic!("{w:?} not reported in order: {err}"));
        at += found + w.len();
    }
    assert!(err.contains("5 errors"), "{err}");
    assert!(!err.contains("invalid TOML"), "{err}");
    assert!(
        !err.contains("base_url: expected a URL"),
        "the misspelling is told once: {err}"
    );
    let (code, _, serve_err) = tollgate(&["serve", "--config", &config], &[]);
    assert_eq!(code, 1);
    for w in want {
        assert!(serve_err.contains(w), "serve: {serve_err}");
    }
}

#[test]
fn check_warns_about_what_will_not_work() {
    let dir = TempDir::new("fh-warnings");
    let config = write_config(
        &dir,
        r#"
[[upstreams]]
name = "claude"
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_key_env = "TG_FIRST_HOUR_UNSET_KEY"

[[upstreams]]
name = "openai"
kind = "openai-chat"
base_url = "https://api.openai.com"

[[upstreams]]
name = "local"
kind = "openai-chat"
base_url = "http://127.0.0.1:9001/v1/chat/completions"

[[models]]
name = "sonnet"
upstream = "claude"

[[models]]
name = "gpt"
upstream = "openai"

[[models]]
name = "llama"
upstream = "local"

[[groups]]
name = "apps"
models = ["sonnet", "gpt"]

[[groups]]
name = "typo"
models = ["gtp-*"]
"#,
    );
    let (code, out, err) = tollgate(&["check", "--config", &config], &[]);
    assert_eq!(code, 0, "warnings do not fail check: {out}{err}");
    let expect = [
        "TG_FIRST_HOUR_UNSET_KEY",
        "upstreams[0].base_url",
        "https://api.anthropic.com\"",
        "upstreams[1].base_url",
        "https://api.openai.com/v1",
        "upstreams[2].base_url",
        "`/chat/completions`",
        "group \"typo\" may use no configured model",
        "model \"llama\" is in no group",
    ];
    for e in expect {
        assert!(out.contains(e), "missing {e:?} in:\n{out}");
    }
}

/// An upstream whose `api_key_env` is unset does not stop the gateway: its model answers 502 naming the
/// variable, the log says so at start, and every other model works.
#[test]
fn a_missing_upstream_credential_fails_only_its_model() {
    let fake = FakeUpstream::start(|_| Reply::json(200, &json!({})));
    let dir = TempDir::new("fh-missing-key");
    let config = format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[upstreams]]\nname = \"paid\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\napi_key_env = \"TG_FIRST_HOUR_MISSING\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n[[models]]\nname = \"paid\"\nupstream = \"paid\"\n",
        base_config(dir.path(), ""),
        fake.addr
    );
    let gw = Gateway::spawn_with(dir, &config);
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "paid", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("TG_FIRST_HOUR_MISSING"), "{msg}");
    assert_eq!(r.json()["error"]["code"], "upstream_credential_missing");
    assert!(
        fake.received().is_empty(),
        "nothing is sent without its credential"
    );
    let r = gw.post(
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let logs = gw.all_logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("ERROR") && l.contains("TG_FIRST_HOUR_MISSING")),
        "{logs}"
    );
}

#[test]
fn a_taken_port_says_how_to_choose_another() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = TempDir::new("fh-port");
    let out = Command::new(bin())
        .arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", &addr)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr), "{err}");
    assert!(err.contains("TOLLGATE_LISTEN"), "{err}");
    assert!(err.contains("`listen`"), "{err}");
}

#[test]
fn keys_list_says_which_directory_it_read() {
    let dir = TempDir::new("fh-keys-list");
    let config = write_config(
        &dir,
        "data_dir = \"./somewhere\"\n\n[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n[[models]]\nname = \"mock\"\nupstream = \"mock\"\n",
    );
    let (code, out, err) = tollgate(&["keys", "list", "--config", &config], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("NAME"), "the table alone on stdout: {out}");
    assert!(
        err.contains("somewhere") && err.contains("keys.jsonl") && err.contains("0 keys"),
        "{err}"
    );
}

#[test]
fn lost_requests_are_told_where_to_go() {
    let gw = Gateway::spawn_mock("");
    let r = gw.request("GET", "/", &[], b"");
    assert_eq!(r.status, 404);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    for place in ["/console", "/healthz", "/v1/models", "/v1/chat/completions"] {
        assert!(msg.contains(place), "{place} missing: {msg}");
    }
    let r = gw.post(
        "/v1/messages",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("max_tokens") && msg.contains("1024"), "{msg}");
}

fn admin_call(gw: &Gateway, method: &str, path: &str, body: &serde_json::Value) -> Response {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    gw.request(
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn chat_as(gw: &Gateway, key: &str) -> u16 {
    gw.post_as(
        key,
        "/v1/chat/completions",
        &json!({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .status
}

/// A revoked key can be enabled again or deleted (its name stays taken); a group no key is in can be
/// deleted; a cached-input price can be cleared; `/metrics` can be put behind the admin token.
#[test]
fn keys_groups_prices_and_metrics_have_a_whole_lifecycle() {
    let extra = format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"\nmetrics_auth = true");
    let gw = Gateway::spawn_mock(&extra);
    // Revoke, enable again (CLI): the same key works.
    let key = gw.add_key("app", "default", None);
    assert_eq!(chat_as(&gw, &key), 200);
    let (code, _, err) = gw.cli(&["keys", "revoke", "--name", "app"]);
    assert_eq!(code, 0, "{err}");
    wait_for(|| chat_as(&gw, &key) == 401, "the revoked key refused");
    let (code, _, err) = gw.cli(&["keys", "enable", "--name", "app"]);
    assert_eq!(code, 0, "{err}");
    wait_for(|| chat_as(&gw, &key) == 200, "the enabled key accepted");
    // Delete (admin API): only once revoked; then it is gone and its name is not given out again.
    let r = admin_call(&gw, "DELETE", "/admin/keys/app", &json!({}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("revoke it first"), "{}", r.text());
    assert_eq!(
        admin_call(&gw, "POST", "/admin/keys/app/revoke", &json!({})).status,
        200
    );
    let r = admin_call(&gw, "DELETE", "/admin/keys/app", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let listed = gw.admin("/admin/keys").json();
    assert!(
        !listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["name"] == "app"),
        "{listed}"
    );
    assert_eq!(chat_as(&gw, &key), 401);
    let r = admin_call(
        &gw,
        "POST",
        "/admin/keys",
        &json!({"name": "app", "group": "default"}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("deleted"), "{}", r.text());
    let (_, out, _) = gw.cli(&["keys", "list"]);
    assert!(!out.contains("\napp "), "{out}");
    // Groups: one with keys cannot go; an empty one can.
    let r = admin_call(&gw, "DELETE", "/admin/groups/default", &json!({}));
    assert_eq!(r.status, 409, "{}", r.text());
    let r = admin_call(
        &gw,
        "POST",
        "/admin/groups",
        &json!({"name": "spare", "models": ["mock"]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = admin_call(&gw, "DELETE", "/admin/groups/spare", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let groups = gw.admin("/admin/groups").json();
    assert!(
        !groups["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "spare"),
        "{groups}"
    );
    // A cached-input price set, then cleared back to the input price.
    let r = admin_call(
        &gw,
        "POST",
        "/admin/models/mock",
        &json!({"cached_input_price": "0.5"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.json()["cached_input_price"].is_null(), "{}", r.text());
    let r = admin_call(
        &gw,
        "POST",
        "/admin/models/mock",
        &json!({"cached_input_price": null}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["cached_input_price"].is_null(), "{}", r.text());
    // /metrics behind the admin token.
    assert_eq!(gw.request("GET", "/metrics", &[], b"").status, 401);
    let r = gw.admin("/metrics");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("tollgate_requests_total"));
}

/// The README's example config passes `tollgate check` as printed (an unset `api_key_env` is a warning).
#[test]
fn the_readme_example_config_passes_check() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let start = readme
        .find("```toml\n# tollgate.toml\n")
        .expect("the README's example config")
        + "```toml\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let dir = TempDir::new("fh-readme");
    let config = write_config(&dir, block);
    let (code, out, err) = tollgate(&["check", "--config", &config], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OK ("), "{out}");
}

/// Issue 40: the front page fits a screen: at most 250 lines, the two commands first, a quick start per
/// client family, and every document it points to exists.
#[test]
fn the_readme_fits_a_screen_and_points_to_what_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 250,
        "{} lines",
        readme.lines().count()
    );
    let two = readme
        .find("cargo run --release -- serve")
        .expect("the command that runs the gateway");
    let tests = readme
        .find("scripts/test.sh")
        .expect("the command that runs every test");
    assert!(two < 2000 && tests < 3000, "the two commands come first");
    for family in [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        ":generateContent",
        "claude",
        "codex",
        "gemini",
    ] {
        assert!(readme.contains(family), "no quick start for {family}");
    }
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        let target = &tail[..tail.find(')').unwrap()];
        if !target.starts_with("http") {
            assert!(
                root.join(target).exists(),
                "README points to {target}, which does not exist"
            );
        }
        rest = tail;
    }
}
