//! Routing among a model's upstreams: a provider's 429 is respected (no new request until its retry-after,
//! never an outage tollgate makes), weights give exact shares, and least-busy sends the load to the upstream
//! that keeps up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn ok() -> Reply {
    Reply::json(
        200,
        &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
    )
}

fn limited() -> Reply {
    Reply::Json {
        status: 429,
        headers: vec![("retry-after".into(), "30".into())],
        body: json!({"error": {"message": "slow down", "type": "rate_limit_error"}})
            .to_string()
            .into_bytes(),
    }
}

fn upstream(name: &str, addr: SocketAddr) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\nkind = \"openai-chat\"\nbase_url = \"http://{addr}/v1\"\n\n")
}

fn start(upstreams: &str, models: &str) -> Gateway {
    let dir = TempDir::new("routing");
    let config = format!(
        "{}{upstreams}{models}\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        base_config(
            dir.path(),
            &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")
        )
    );
    Gateway::start_with(dir, &config)
}

fn chat(gw: &Gateway, model: &str) -> Response {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
    )
}

fn upstream_view(gw: &Gateway, model: &str, upstream: &str) -> Value {
    let models = gw.admin("/admin/models").json();
    models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == model)
        .unwrap()["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == upstream)
        .unwrap()
        .clone()
}

/// An upstream that answers 429 `retry-after: 30` gets no new request for 30 s: the next ones go to its
/// sibling at once (one wasted call, not twenty). Alone, it keeps being asked and the client gets its 429.
#[test]
fn a_provider_429_is_respected_without_an_outage() {
    let a = FakeUpstream::start(|_| limited());
    let b = FakeUpstream::start(|_| ok());
    let gw = start(
        &format!("{}{}", upstream("a", a.addr), upstream("b", b.addr)),
        "[[models]]\nname = \"pair\"\nupstream = [\"a\", \"b\"]\n\n[[models]]\nname = \"lone\"\nupstream = \"a\"\n",
    );
    for _ in 0..20 {
        assert_eq!(chat(&gw, "pair").status, 200);
    }
    assert_eq!(
        a.received().len(),
        1,
        "only the first request asked the limited upstream"
    );
    assert_eq!(b.received().len(), 20);
    let view = upstream_view(&gw, "pair", "a");
    assert!(view["routing"]["cooling_until"].is_string(), "{view}");
    let metrics = gw.admin("/metrics").text();
    assert!(
        metrics.contains("tollgate_upstream_cooling{upstream=\"a\"} 1"),
        "{metrics}"
    );
    // The model whose only upstream cools down is still served: the provider's 429 reaches the client.
    for _ in 0..3 {
        let r = chat(&gw, "lone");
        assert_eq!(r.status, 429, "{}", r.text());
        assert_eq!(r.header("retry-after"), Some("30"));
    }
    assert_eq!(a.received().len(), 4);
}

/// Weights 3:1 give exactly 300 and 100 of 400 requests (a smooth weighted round robin, no chance).
#[test]
fn weights_spread_the_load_in_their_shares() {
    let a = FakeUpstream::start(|_| ok());
    let b = FakeUpstream::start(|_| ok());
    let gw = start(
        &format!("{}{}", upstream("a", a.addr), upstream("b", b.addr)),
        "[[models]]\nname = \"spread\"\nupstream = [\"a\", \"b\"]\nroute = \"weighted\"\nweights = [3, 1]\n",
    );
    for _ in 0..400 {
        assert_eq!(chat(&gw, "spread").status, 200);
    }
    assert_eq!(a.received().len(), 300);
    assert_eq!(b.received().len(), 100);
    let models = gw.admin("/admin/models").json();
    let m = &models["data"][0];
    assert_eq!(m["route"], "weighted");
    assert_eq!(m["weights"], json!([3, 1]));
}

/// With one upstream slow (300 ms) and one fast, least-busy at 16 concurrent clients sends most requests to
/// the fast one.
#[test]
fn least_busy_sends_the_load_where_it_is_served() {
    let slow = FakeUpstream::start(|_| {
        std::thread::sleep(Duration::from_millis(300));
        ok()
    });
    let fast = FakeUpstream::start(|_| ok());
    let gw = std::sync::Arc::new(start(
        &format!(
            "{}{}",
            upstream("slow", slow.addr),
            upstream("fast", fast.addr)
        ),
        "[[models]]\nname = \"busy\"\nupstream = [\"slow\", \"fast\"]\nroute = \"least-busy\"\n",
    ));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let gw = gw.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    assert_eq!(chat(&gw, "busy").status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (s, f) = (slow.received().len(), fast.received().len());
    assert_eq!(s + f, 160);
    assert!(
        f * 10 >= 160 * 7,
        "the fast upstream got {f} of 160 (the slow one {s})"
    );
}

/// A route that does not fit the model is refused with the field named.
#[test]
fn bad_routes_are_refused_by_check() {
    let dir = TempDir::new("routing-check");
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        "[[upstreams]]\nname = \"m\"\nkind = \"mock\"\n\n[[models]]\nname = \"x\"\nupstream = \"m\"\nroute = \"weighted\"\nweights = [1, 2]\n\n\
         [[models]]\nname = \"y\"\nupstream = \"m\"\nroute = \"random\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("models[0].weights"), "{err}");
    assert!(err.contains("models[1].route"), "{err}");
}

/// Several credentials on one upstream: each is a deployment of its own (`up#1`, `up#2`), taking turns,
/// cooled down one by one, named in records and metrics, never shown.
#[test]
fn several_credentials_are_deployments_of_their_own() {
    // The harness sets both variables in the gateway's environment.
    let fake = FakeUpstream::start(|rec| {
        if rec.header("authorization") == Some(&format!("Bearer {UPSTREAM_KEY}")) {
            limited()
        } else {
            ok()
        }
    });
    let up = format!(
        "[[upstreams]]\nname = \"up\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\
         api_key_envs = [\"{UPSTREAM_KEY_ENV}\", \"{ADMIN_TOKEN_ENV}\"]\n\n",
        fake.addr
    );
    let gw = start(&up, "[[models]]\nname = \"m\"\nupstream = \"up\"\n");
    for _ in 0..10 {
        assert_eq!(chat(&gw, "m").status, 200);
    }
    let keys: Vec<String> = fake
        .received()
        .iter()
        .map(|r| r.header("authorization").unwrap_or_default().to_string())
        .collect();
    let first = keys.iter().filter(|k| k.ends_with(UPSTREAM_KEY)).count();
    assert_eq!(
        first, 1,
        "the limited credential was asked once, then cooled down: {keys:?}"
    );
    assert_eq!(keys.len(), 11);
    let records = gw.admin("/admin/usage?limit=20").json()["data"].clone();
    let upstreams: std::collections::BTreeSet<String> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["upstream"].as_str().unwrap_or("-").to_string())
        .collect();
    assert_eq!(upstreams.into_iter().collect::<Vec<_>>(), ["up#2"]);
    let view = upstream_view(&gw, "m", "up#1");
    assert!(view["routing"]["cooling_until"].is_string(), "{view}");
    let everything = format!(
        "{}{}{}",
        gw.admin("/admin/models").text(),
        gw.admin("/metrics").text(),
        gw.all_logs()
    );
    assert!(!everything.contains(UPSTREAM_KEY) && !everything.contains(ADMIN_TOKEN));
}

/// Without a 429, the credentials take turns.
#[test]
fn credentials_take_turns() {
    let fake = FakeUpstream::start(|_| ok());
    let up = format!(
        "[[upstreams]]\nname = \"up\"\nkind = \"openai-chat\"\nbase_url = \"http://{}/v1\"\n\
         api_key_envs = [\"{UPSTREAM_KEY_ENV}\", \"{ADMIN_TOKEN_ENV}\"]\n\n",
        fake.addr
    );
    let gw = start(&up, "[[models]]\nname = \"m\"\nupstream = \"up\"\n");
    for _ in 0..10 {
        assert_eq!(chat(&gw, "m").status, 200);
    }
    let first = fake
        .received()
        .iter()
        .filter(|r| r.header("authorization") == Some(&format!("Bearer {UPSTREAM_KEY}")))
        .count();
    assert_eq!(first, 5);
}

/// Aliases and name patterns: an alias reaches its entry, a pattern serves the names it matches (and
/// forwards the name asked for with `{model}`), exact names and aliases win over patterns, `/v1/models` lists
/// names and aliases, records keep both names, and permissions never widen.
#[test]
fn aliases_and_patterns() {
    let fake = FakeUpstream::start(|_| ok());
    let dir = TempDir::new("routing-names");
    let config = format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n{}\
         [[models]]\nname = \"sonnet\"\nupstream = \"mock\"\naliases = [\"fast\", \"claude-sonnet-4-6\"]\n\n\
         [[models]]\nname = \"claude-*\"\nupstream = \"up\"\nupstream_model = \"{{model}}\"\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"sonnet\", \"claude-opus-*\"]\n\n\
         [[groups]]\nname = \"alias-only\"\nmodels = [\"fast\"]\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        upstream("up", fake.addr)
    );
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, &config).unwrap();
    let check = std::process::Command::new(bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        out.contains("only an alias"),
        "check warns about a group listing an alias: {out}"
    );
    let gw = Gateway::start_with(dir, &config);
    // An alias reaches its entry; the answer and the record keep the name asked for.
    let r = chat(&gw, "fast");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "fast");
    // An alias beats a pattern that also matches.
    assert_eq!(chat(&gw, "claude-sonnet-4-6").status, 200);
    assert!(
        fake.received().is_empty(),
        "the alias, not the pattern, served it"
    );
    // A pattern serves a name it matches, forwarding that name.
    let r = chat(&gw, "claude-opus-9");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["model"], "claude-opus-9");
    // The group may use `claude-opus-*` only: other names the pattern entry matches stay refused.
    assert_eq!(chat(&gw, "claude-haiku-1").status, 403);
    let records = gw.admin("/admin/usage?limit=10").json()["data"].clone();
    let rec = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["requested_model"] == "fast")
        .unwrap()
        .clone();
    assert_eq!(rec["model"], "sonnet", "{rec}");
    // The model list shows names and aliases the group may use, never a pattern.
    let auth = format!("Bearer {}", gw.key);
    let list = gw
        .request("GET", "/v1/models", &[("authorization", &auth)], b"")
        .json();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["sonnet", "fast", "claude-sonnet-4-6"]);
    // An alias never grants access by itself.
    let only_alias = gw.add_key("a", "alias-only", None);
    let r = gw.post_as(
        &only_alias,
        "/v1/chat/completions",
        &json!({"model": "fast", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(r.status, 403, "{}", r.text());
}
