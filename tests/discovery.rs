//! Local model servers found with no file: `tollgate serve` with no config serves the models of the
//! OpenAI-compatible servers it finds (here fake ones named by `TOLLGATE_DISCOVER`) beside `mock`; with a
//! config, a `[discovery]` table turns it on, finds a server that starts later within one interval, lets
//! configured names win, reads Ollama's tags, and keeps a server's models while it is down.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::upstream::{FakeUpstream, Reply};
use common::*;
use serde_json::{json, Value};

fn server(models: &'static [&'static str], down: Arc<AtomicBool>) -> FakeUpstream {
    FakeUpstream::start(move |rec| {
        if down.load(Ordering::SeqCst) {
            return Reply::Close;
        }
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
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "local"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
        )
    })
}

fn model_ids(gw: &Gateway) -> Vec<String> {
    let auth = format!("Bearer {}", gw.key);
    let list = gw
        .request("GET", "/v1/models", &[("authorization", &auth)], b"")
        .json();
    list["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["id"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn chat(gw: &Gateway, model: &str) -> Response {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
    )
}

#[test]
fn serve_with_no_config_serves_the_local_servers_it_finds() {
    let fake = server(&["qwen3:8b"], Arc::default());
    let dir = TempDir::new("discovery-defaults");
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .current_dir(dir.path())
        .env("TOLLGATE_LISTEN", "127.0.0.1:0")
        .env("TOLLGATE_DISCOVER", format!("http://{}/v1", fake.addr));
    let gw = Gateway::start_command(TempDir(dir.path().to_path_buf()), &mut cmd);
    std::mem::forget(dir);
    wait_for(
        || model_ids(&gw).contains(&"qwen3:8b".to_string()),
        "the discovered model listed",
    );
    let r = chat(&gw, "qwen3:8b");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(fake.last().json()["model"], "qwen3:8b");
    assert_eq!(chat(&gw, "mock").status, 200, "the mock model stays");
    assert!(
        gw.all_logs().contains("discovery: http://"),
        "{}",
        gw.all_logs()
    );
}

#[test]
fn a_discovery_table_finds_servers_that_start_later_and_keeps_names_apart() {
    let first = server(&["shared", "mock"], Arc::default());
    // A port for a server that starts after the gateway: bound now, answered later (until then, probes
    // to it get no answer and time out).
    let later_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let later_addr = later_listener.local_addr().unwrap();
    let dir = TempDir::new("discovery-table");
    let config = format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n[[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n\
         [discovery]\nprobe = [\"http://{}/v1\", \"http://{}/v1\"]\ninterval_secs = 1\n",
        base_config(dir.path(), &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\"")),
        first.addr,
        later_addr
    );
    let gw = Gateway::start_with(dir, &config);
    wait_for(
        || model_ids(&gw).contains(&"shared".to_string()),
        "the first server's models",
    );
    // The configured `mock` wins; the server's own `mock` is reachable under its address, which the list
    // tenants read never shows.
    let ids = model_ids(&gw);
    assert!(!ids.iter().any(|i| i.contains('@')), "{ids:?}");
    assert_eq!(chat(&gw, &format!("mock@{}", first.addr)).status, 200);
    assert_eq!(
        chat(&gw, "mock").json()["choices"][0]["message"]["content"]
            .as_str()
            .map(|t| t.contains("hi")),
        Some(true)
    );
    // A second server, started now, listing the same id: found within an interval, under its address.
    let down = Arc::new(AtomicBool::new(false));
    let later = {
        let down = down.clone();
        FakeUpstream::start_on(later_listener, move |rec| {
            if down.load(Ordering::SeqCst) {
                return Reply::Close;
            }
            if rec.method == "GET" {
                return Reply::json(
                    200,
                    &json!({"data": [{"id": "shared"}, {"id": "late-model"}]}),
                );
            }
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "late-model",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "later"}, "finish_reason": "stop"}]}),
            )
        })
    };
    wait_for(
        || model_ids(&gw).contains(&"late-model".to_string()),
        "the later server's models",
    );
    assert!(!model_ids(&gw).iter().any(|i| i.contains('@')));
    assert_eq!(chat(&gw, &format!("shared@{later_addr}")).status, 200);
    assert_eq!(chat(&gw, "late-model").status, 200);
    // It stops answering: its models stay listed, and a request fails without saying where the server is
    // (the operator's log does).
    down.store(true, Ordering::SeqCst);
    wait_for(
        || {
            let m = gw.admin("/admin/models").json();
            m["discovery"].as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["up"] == false && s["models"].as_array().is_some_and(|x| !x.is_empty())
                })
            })
        },
        "the later server seen down with its models kept",
    );
    assert!(model_ids(&gw).contains(&"late-model".to_string()));
    let r = chat(&gw, "late-model");
    assert!(r.status >= 500, "{}", r.text());
    assert!(!r.text().contains(&later_addr.to_string()), "{}", r.text());
    assert!(r.text().contains("internal address"), "{}", r.text());
    drop(later);
}

#[test]
fn ollama_tags_are_read_when_there_is_no_openai_list() {
    let fake = FakeUpstream::start(|rec| {
        if rec.path == "/api/tags" {
            return Reply::json(200, &json!({"models": [{"name": "llama3.2:latest"}]}));
        }
        Reply::json(404, &json!({"error": "not found"}))
    });
    let dir = TempDir::new("discovery-ollama");
    let config = format!(
        "{}[discovery]\nprobe = [\"http://{}/v1\"]\n",
        base_config(dir.path(), ""),
        fake.addr
    );
    let gw = Gateway::start_with(dir, &config);
    wait_for(
        || model_ids(&gw).contains(&"llama3.2:latest".to_string()),
        "Ollama's model",
    );
}
