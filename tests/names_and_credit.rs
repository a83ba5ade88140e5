//! Names that stay the operator's, and a credit with one source (issue 25, breaks 8, 9 and 12):
//!
//! - a local process found by discovery never takes a configured name, alias or pattern, and is never a
//!   catch-all (`gpt-4*`, `*` and `gpt-4o` listed beside a configured `gpt-*`);
//! - a group's globs match the name asked for, never a pattern entry's text (`o?` is not served by `o*` for
//!   `oxy`), and aliases never widen access;
//! - with several instances on a real `redis-server`, a credit cut, a revocation or an expiry on one instance
//!   holds on the other at its very next admission (no sleep in between), or, where the other admits a busy
//!   key from an allotment, when that ends (`allot_ms`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::path::Path;

use common::redis::Redis;
use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

/// An OpenAI-compatible server that lists `models` and answers every chat request with `says`.
fn chat_server(models: &'static [&'static str], says: &'static str) -> FakeUpstream {
    FakeUpstream::start(move |rec| {
        if rec.method == "GET" && rec.path == "/v1/models" {
            let data: Vec<Value> = models
                .iter()
                .map(|m| json!({"id": m, "object": "model"}))
                .collect();
            return Reply::json(200, &json!({"object": "list", "data": data}));
        }
        Reply::json(
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": rec.json()["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": says}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000}}),
        )
    })
}

fn ids(gw: &Gateway, key: &str) -> Vec<String> {
    let auth = format!("Bearer {key}");
    gw.request("GET", "/v1/models", &[("authorization", &auth)], b"")
        .json()["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["id"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn chat_as(gw: &Gateway, key: &str, model: &str) -> Response {
    gw.post_as(
        key,
        "/v1/chat/completions",
        &json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
    )
}

/// Break 8: a local process on a probed port lists `gpt-4*`, `*` and `gpt-4o` beside a configured `gpt-*`
/// pattern. Tenants' `gpt-4o` (and any other `gpt-` name, and the `@host` form) still go to the configured
/// upstream at its price; names nobody configured are not caught by the local server; only its own plain id
/// (`qwen3`) reaches it.
#[test]
fn a_discovered_server_never_takes_a_configured_pattern_nor_becomes_a_catch_all() {
    let configured = chat_server(&[], "configured");
    let local = chat_server(&["gpt-4*", "*", "gpt-4o", "qwen3", "o?"], "local");
    let dir = TempDir::new("names-discovery");
    let config =
        format!(
        "{}[[upstreams]]\nname = \"real\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\
         api_key_env = \"{UPSTREAM_KEY_ENV}\"\n\n\
         [[models]]\nname = \"gpt-*\"\nupstream = \"real\"\nupstream_model = \"{{model}}\"\n\
         input_price = 1.0\noutput_price = 2.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n\
         [discovery]\nprobe = [\"http://{}/v1\"]\ninterval_secs = 1\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        configured.addr,
        local.addr
    );
    let gw = Gateway::start_with(dir, &config);
    let key = gw.key.clone();
    wait_for(
        || ids(&gw, &key).contains(&"qwen3".to_string()),
        "the local server's models",
    );
    let listed = ids(&gw, &key);
    assert!(
        listed.iter().all(|n| !n.contains(['*', '?'])),
        "no pattern is listed: {listed:?}"
    );
    assert!(
        !listed.iter().any(|n| n.starts_with("gpt-")),
        "nothing a configured pattern serves is listed as local: {listed:?}"
    );
    let host = local.addr.to_string();
    for asked in ["gpt-4o", "gpt-4o-mini", &format!("gpt-4o@{host}")] {
        let r = chat_as(&gw, &key, asked);
        assert_eq!(r.status, 200, "{asked}: {}", r.text());
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            "configured",
            "{asked} reached the configured upstream"
        );
    }
    // Names nobody configured are not caught by the local `*`; glob characters name nothing.
    for asked in ["llama3", "claude-x", "*", "gpt-4*", "o?"] {
        let r = chat_as(&gw, &key, asked);
        assert_eq!(r.status, 404, "{asked}: {}", r.text());
    }
    // The local server's own plain id is served, at price 0.
    let r = chat_as(&gw, &key, "qwen3");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "local");
    let got: Vec<String> = local
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.json()["model"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(got, ["qwen3"], "only qwen3 reached the local server");
    // The configured requests were billed at the configured price: 1000 input tokens at 1 per 1M, and the
    // 50 output tokens of the limit sent (output beyond it is not billed) at 2 per 1M.
    let usage = gw.admin("/admin/usage?limit=100").json();
    let costs: Vec<f64> = usage["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["model"] == "gpt-*")
        .map(|r| r["cost"].as_f64().unwrap_or(0.0))
        .collect();
    assert_eq!(costs.len(), 3, "{usage}");
    assert!(
        costs.iter().all(|c| (c - 0.0011).abs() < 1e-12),
        "{costs:?}"
    );
}

/// Break 9: a group allowing `o?` is served by the pattern entry `o*` only for names `o?` matches (`ox`,
/// not `oxy`), and a name with glob characters is no name. Aliases: allowing the entry grants its aliases;
/// allowing only an alias grants nothing; a pattern entry cannot have aliases (`check` refuses it); `check`
/// sees that `o?` may use `o*` (no "may use no model" warning).
#[test]
fn group_globs_match_the_name_asked_for_never_a_pattern_entry() {
    let dir = TempDir::new("names-groups");
    let config = format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"o*\"\nupstream = \"mock\"\nupstream_model = \"{{model}}\"\n\n\
         [[models]]\nname = \"sonnet\"\nupstream = \"mock\"\naliases = [\"fast\"]\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n\
         [[groups]]\nname = \"narrow\"\nmodels = [\"o?\"]\n\n\
         [[groups]]\nname = \"entry\"\nmodels = [\"sonnet\"]\n\n\
         [[groups]]\nname = \"alias\"\nmodels = [\"fast\"]\n",
        base_config(
            dir.path(),
            &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")
        )
    );
    let check = |text: &str| {
        let path = dir.path().join("check.toml");
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(bin())
            .args(["check", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, out) = check(&config);
    assert!(ok, "{out}");
    assert!(
        !out.contains("\"narrow\" may use no"),
        "`o?` may use `o*`: {out}"
    );
    let (ok, out) = check(&config.replace(
        "upstream_model = \"{model}\"\n",
        "upstream_model = \"{model}\"\naliases = [\"oz\"]\n",
    ));
    assert!(!ok, "a pattern entry with an alias is refused: {out}");
    assert!(out.contains("cannot have aliases"), "{out}");

    let gw = Gateway::start_with(dir, &config);
    let narrow = gw.add_key("narrow", "narrow", None);
    assert_eq!(chat_as(&gw, &narrow, "ox").status, 200);
    for asked in ["oxy", "o-long-name", "sonnet"] {
        let r = chat_as(&gw, &narrow, asked);
        assert_eq!(r.status, 403, "{asked}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "model_not_allowed");
    }
    // A name holding glob characters is matched by no glob, not even by a group's `?` or `*`: the entry's
    // own text is refused, another pattern is no model.
    assert_eq!(chat_as(&gw, &narrow, "o*").status, 403);
    assert_eq!(chat_as(&gw, &narrow, "o?").status, 404);
    // The default group (`*`) reaches `o*` for concrete names only.
    assert_eq!(chat_as(&gw, &gw.key, "oxy").status, 200);
    assert_eq!(chat_as(&gw, &gw.key, "o*").status, 403);
    // Aliases: the entry grants its alias, the alias alone grants nothing.
    let entry = gw.add_key("entry", "entry", None);
    assert_eq!(chat_as(&gw, &entry, "fast").status, 200);
    assert_eq!(chat_as(&gw, &entry, "sonnet").status, 200);
    let alias = gw.add_key("alias", "alias", None);
    assert_eq!(chat_as(&gw, &alias, "fast").status, 403);
    assert_eq!(chat_as(&gw, &alias, "sonnet").status, 403);
    assert_eq!(ids(&gw, &alias), Vec::<String>::new());
}

/// Two instances on one store: the mock model at a price, so requests cost something.
fn cluster_config(dir: &Path, redis: &Redis, instance: &str) -> String {
    let mut c = base_config(
        dir,
        &format!("instance = \"{instance}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\n"),
    );
    c.push_str(
        "[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\ninput_price = 1000.0\noutput_price = 10000.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n\n",
    );
    c.push_str(&redis.store_section(""));
    c
}

/// Break 12: a credit cut on instance A (admin API, then `tollgate keys credit`) holds on instance B at its
/// very next admission, while B's own copy of the keys still says 50; so do a revocation and an expiry (once
/// an allotment B holds for the key, busy there, has ended).
/// What admission reads is kept in the store with the record, and an instance that joins a store whose
/// terms are missing writes them anew.
#[test]
fn a_credit_cut_on_one_instance_holds_on_the_other_at_once() {
    let redis = Redis::start(true);
    let dir_a = TempDir::new("credit-a");
    let ca = cluster_config(dir_a.path(), &redis, "gw-a");
    let a = Gateway::start_with(dir_a, &ca);
    let dir_b = TempDir::new("credit-b");
    let cb = cluster_config(dir_b.path(), &redis, "gw-b");
    let b = Gateway::restart(dir_b, &cb, &a.key);
    let key = a.add_key("wallet", "default", Some(50.0));
    wait_for(|| chat_as(&b, &key, "mock").status == 200, "the key on B");
    assert_eq!(redis.hget("t:terms", "wallet"), "50000000000000||||a");
    // The worst case of one request: its input estimate and its 50-token output limit at the prices.
    let worst = 50.0 * 10000.0 / 1e6 + 200.0 * 1000.0 / 1e6;

    // Cut to nothing left on A; B (whose copy still says 50) refuses at once, every time.
    let spent = a.key_row("wallet")["spent"].as_f64().unwrap();
    let r = a.admin_post("/admin/keys/wallet/credit", &json!({"set": spent}));
    assert_eq!(r.status, 200, "{}", r.text());
    for i in 0..10 {
        let r = chat_as(&b, &key, "mock");
        assert_eq!(r.status, 429, "request {i} after the cut: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "insufficient_quota");
    }

    // Back to 50, then cut to 1 credit left with the CLI on A's config: B admits no more than that plus
    // one worst case.
    let r = a.admin_post("/admin/keys/wallet/credit", &json!({"set": 50.0}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_as(&b, &key, "mock").status, 200);
    let spent = a.key_row("wallet")["spent"].as_f64().unwrap();
    let credit = spent + 1.0;
    let (code, _, err) = a.cli(&[
        "keys",
        "credit",
        "--name",
        "wallet",
        "--set",
        &credit.to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mut admitted = 0;
    loop {
        let r = chat_as(&b, &key, "mock");
        if r.status == 429 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        admitted += 1;
        assert!(admitted < 100, "the cut credit never ran out on B");
    }
    // Every request settles in the store (its reservation turns into spend); the spend then passes the
    // new credit by at most one worst case.
    wait_for(
        || redis.hget("t:acct:wallet", "reserved") == "0",
        "every reservation settled",
    );
    let after = a.key_row("wallet");
    let balance = credit - after["spent"].as_f64().unwrap();
    assert!(admitted >= 1, "the credit left admitted nothing");
    assert!(
        balance >= -worst,
        "overspent: balance {balance} after a cut to {credit} ({admitted} admitted on B; worst case {worst})"
    );

    // A revocation and an expiry on A hold on B too (the key has a credit): at its next admission, or,
    // while B admits the key from an allotment (it was busy there: the loop above), when that ends
    // (`allot_ms`, CLUSTER.md).
    let r = a.admin_post("/admin/keys/wallet/credit", &json!({"add": 10.0}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat_as(&b, &key, "mock").status, 200);
    let r = a.admin_post(
        "/admin/keys/wallet/expires",
        &json!({"at": "2001-01-01T00:00:00Z"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        || chat_as(&b, &key, "mock").status == 401,
        "the expiry on B",
    );
    let r = a.admin_post("/admin/keys/wallet/expires", &json!({"never": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = a.admin_post("/admin/keys/wallet/revoke", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    let mut last = String::new();
    wait_for(
        || {
            let r = chat_as(&b, &key, "mock");
            last = r.text();
            r.status == 401
        },
        "the revocation on B",
    );
    assert!(last.contains("revoked"), "{last}");
    let r = a.admin_post("/admin/keys/wallet/enable", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(redis.hget("t:terms", "wallet").ends_with("||a"));

    // A store whose terms are gone (set up by an earlier version): the next instance to join writes them.
    redis.command(&["DEL", "t:terms", "t:terms:at"]);
    let r = chat_as(&b, &key, "mock");
    assert_eq!(
        r.status,
        401,
        "a key the store holds no terms for is refused: {}",
        r.text()
    );
    let dir_c = TempDir::new("credit-c");
    let cc = cluster_config(dir_c.path(), &redis, "gw-c");
    let _c = Gateway::restart(dir_c, &cc, &a.key);
    assert!(redis.hget("t:terms", "wallet").ends_with("|a"));
    // Terms written again lift the refusal on B once B looks again (what holds at once is a cut, not this).
    wait_for(
        || chat_as(&b, &key, "mock").status == 200,
        "the key served on B again",
    );
}
