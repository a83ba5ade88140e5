//! The operator sees every request's fate: a known key's request that tollgate refuses itself leaves a
//! record (status, reason, no upstream, no tokens, cost 0) that the usage filters and the overview count;
//! requests without a valid key leave none (anyone could send them) and are counted per hour instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use common::*;
use serde_json::{json, Value};

fn config(dir: &std::path::Path) -> String {
    format!(
        "{}[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\ninput_price = 1\noutput_price = 2\n\n\
         [[models]]\nname = \"secret\"\nupstream = \"mock\"\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"mock\"]\n\n\
         [[groups]]\nname = \"slow\"\nmodels = [\"mock\"]\nrpm = 1\n",
        base_config(dir, &format!("admin_token_env = \"{ADMIN_TOKEN_ENV}\""))
    )
}

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

fn records(gw: &Gateway, query: &str) -> Vec<Value> {
    let r = gw.admin(&format!("/admin/usage?limit=100{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["data"].as_array().unwrap().clone()
}

#[test]
fn refusals_of_a_known_key_are_recorded_and_counted() {
    let dir = TempDir::new("op-refusals");
    let text = config(dir.path());
    let gw = Gateway::spawn_with(dir, &text);
    let broke = gw.add_key("broke", "default", Some(0.0));
    let slow = gw.add_key("slow", "slow", None);
    let ok = gw.post("/v1/chat/completions", &chat("mock"));
    assert_eq!(ok.status, 200);
    let refused = [
        (
            gw.post("/v1/chat/completions", &chat("secret")),
            403,
            "model_not_allowed",
        ),
        (
            gw.post("/v1/chat/completions", &chat("nothing")),
            404,
            "model_not_found",
        ),
        (
            gw.post_as(&broke, "/v1/chat/completions", &chat("mock")),
            429,
            "insufficient_quota",
        ),
        (
            gw.post(
                "/v1/responses",
                &json!({"model": "mock", "input": "hi", "previous_response_id": "resp_1"}),
            ),
            400,
            "",
        ),
    ];
    assert_eq!(
        gw.post_as(&slow, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    let limited = gw.post_as(&slow, "/v1/chat/completions", &chat("mock"));
    assert_eq!(limited.status, 429, "{}", limited.text());
    let mut expected: Vec<(String, u16, &str)> = refused
        .iter()
        .map(|(r, s, reason)| {
            assert_eq!(r.status, *s, "{}", r.text());
            (r.header("x-request-id").unwrap().to_string(), *s, *reason)
        })
        .collect();
    expected.push((
        limited.header("x-request-id").unwrap().to_string(),
        429,
        "rate_limited",
    ));
    let all = records(&gw, "");
    for (id, status, reason) in &expected {
        let rec = all
            .iter()
            .find(|r| r["request_id"] == id.as_str())
            .unwrap_or_else(|| panic!("no record for the {status} {id}: {all:?}"));
        assert_eq!(rec["status"], *status, "{rec}");
        assert!(rec["upstream"].is_null(), "{rec}");
        assert_eq!(rec["input_tokens"], 0, "{rec}");
        assert_eq!(rec["output_tokens"], 0, "{rec}");
        assert_eq!(rec["cost"], 0.0, "{rec}");
        let got = rec["reason"].as_str().unwrap_or_default();
        if reason.is_empty() {
            assert!(!got.is_empty(), "{rec}");
        } else {
            assert_eq!(got, *reason, "{rec}");
        }
    }
    // The usage filters find them: 4xx has all of them, 429 the limited ones.
    assert_eq!(records(&gw, "&status=4xx").len(), expected.len());
    assert_eq!(records(&gw, "&status=429").len(), 2);
    // The overview counts them as errors: 5 of 7 requests.
    let o = gw.admin("/admin/overview").json();
    assert_eq!(o["last_hour"]["requests"], 7, "{o}");
    assert_eq!(o["last_hour"]["errors"], 5, "{o}");
    // Balances stay exact across a restart: refusals cost nothing.
    let spent = |gw: &Gateway| -> Value {
        let keys = gw.admin("/admin/keys").json();
        keys["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == "broke")
            .unwrap()["spent"]
            .clone()
    };
    assert_eq!(spent(&gw), json!(0.0));
    let (key, path) = (gw.key.clone(), gw.dir.path().to_path_buf());
    let mut gw = gw;
    signal(gw.pid(), "TERM");
    assert_eq!(
        wait_exit(gw.child(), std::time::Duration::from_secs(30)),
        Some(0)
    );
    gw.keep_dir();
    let gw = Gateway::restart(TempDir(path), &text, &key);
    assert_eq!(spent(&gw), json!(0.0));
    assert_eq!(records(&gw, "&status=4xx").len(), expected.len());
    // Availability survives the restart: it is rebuilt from the recent records.
    let models = gw.admin("/admin/models").json();
    let mock = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "mock")
        .unwrap()
        .clone();
    assert!(mock["availability"]["last_success"].is_string(), "{mock}");
    assert_eq!(mock["availability"]["requests"], 2, "{mock}");
}

/// A flood of requests without a valid key writes no record; the metrics and the overview count them.
#[test]
fn requests_without_a_valid_key_leave_no_record_but_are_counted() {
    let dir = TempDir::new("op-401");
    let text = config(dir.path());
    let gw = Gateway::start_with(dir, &text);
    let before = records(&gw, "").len();
    for i in 0..25 {
        let bad = format!("tg_{i:0>40}");
        let r = gw.post_as(&bad, "/v1/chat/completions", &chat("mock"));
        assert_eq!(r.status, 401);
    }
    let r = gw.request(
        "POST",
        "/v1/messages",
        &[],
        chat("mock").to_string().as_bytes(),
    );
    assert_eq!(r.status, 401);
    assert_eq!(
        records(&gw, "").len(),
        before,
        "no record for a request without a key"
    );
    let metrics = gw.admin("/metrics").text();
    assert!(
        metrics.contains("tollgate_unauthorized_requests_total 26"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_unauthorized_requests_last_hour 26"),
        "{metrics}"
    );
    let o = gw.admin("/admin/overview").json();
    assert_eq!(o["unauthorized_last_hour"], 26, "{o}");
    let ledger =
        std::fs::read_to_string(gw.dir.path().join("data").join("usage.jsonl")).unwrap_or_default();
    assert!(!ledger.contains("tg_0000"), "no presented key anywhere");
}

fn admin_call(gw: &Gateway, method: &str, path: &str, body: Value) -> Response {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = gw.request(
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    r
}

/// Every change, from the admin API or the CLI, is in the audit trail: who, what, before and after, when,
/// the request id; never a key or its hash.
#[test]
fn every_admin_action_is_audited() {
    let dir = TempDir::new("op-audit");
    let text = config(dir.path());
    let gw = Gateway::start_with(dir, &text);
    let created = admin_call(
        &gw,
        "POST",
        "/admin/keys",
        json!({"name": "app", "group": "default", "credit": 5}),
    );
    let secret = created.json()["key"].as_str().unwrap().to_string();
    admin_call(&gw, "POST", "/admin/keys/app/credit", json!({"add": 2}));
    let rotated = admin_call(&gw, "POST", "/admin/keys/app/rotate", json!({}));
    let secret2 = rotated.json()["key"].as_str().unwrap().to_string();
    admin_call(&gw, "POST", "/admin/keys/app/revoke", json!({}));
    admin_call(&gw, "POST", "/admin/keys/app/enable", json!({}));
    // With a trailing `/` (as `route` reads it): audited by the name in the answer all the same.
    admin_call(
        &gw,
        "POST",
        "/admin/groups/",
        json!({"name": "extra", "models": ["mock"]}),
    );
    admin_call(
        &gw,
        "PUT",
        "/admin/groups/extra",
        json!({"models": ["mock"], "rpm": 10}),
    );
    admin_call(&gw, "DELETE", "/admin/groups/extra", json!({}));
    admin_call(&gw, "POST", "/admin/models/mock", json!({"input_price": 3}));
    let disabled = admin_call(&gw, "POST", "/admin/models/mock", json!({"disabled": true}));
    admin_call(
        &gw,
        "POST",
        "/admin/models/mock",
        json!({"disabled": false}),
    );
    let (code, _, err) = gw.cli(&["keys", "revoke", "--name", "app"]);
    assert_eq!(code, 0, "{err}");

    let r = gw.admin("/admin/audit?limit=50");
    assert_eq!(r.status, 200, "{}", r.text());
    let entries = r.json()["data"].as_array().unwrap().clone();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "key.revoked",
            "model.enabled",
            "model.disabled",
            "model.repriced",
            "group.deleted",
            "group.changed",
            "group.created",
            "key.enabled",
            "key.revoked",
            "key.rotated",
            "key.credited",
            "key.created",
            // The harness's first key, made with `tollgate keys add` before the server started.
            "key.created",
        ],
        "newest first: {entries:?}"
    );
    let cli = &entries[0];
    assert_eq!(cli["actor"], "cli");
    assert_eq!(cli["target"], "key app");
    assert_eq!(cli["before"]["disabled"], false, "{cli}");
    assert_eq!(cli["after"]["disabled"], true, "{cli}");
    let credited = &entries[10];
    assert_eq!(credited["actor"], "admin token");
    assert_eq!(credited["before"]["credit"], 5.0, "{credited}");
    assert_eq!(credited["after"]["credit"], 7.0, "{credited}");
    let reprice = &entries[3];
    assert_eq!(reprice["before"]["input_price"], 1.0, "{reprice}");
    assert_eq!(reprice["after"]["input_price"], 3.0, "{reprice}");
    assert_eq!(
        entries[2]["request_id"].as_str(),
        disabled.header("x-request-id"),
        "the admin call's request id"
    );
    assert!(
        entries[4]["after"].is_null(),
        "a deleted group: {}",
        entries[4]
    );
    let group = &entries[6];
    assert_eq!(group["target"], "group extra", "{group}");
    assert_eq!(group["after"]["models"], json!(["mock"]), "{group}");
    let file = std::fs::read_to_string(gw.dir.path().join("data").join("audit.jsonl")).unwrap();
    for secret in [&secret, &secret2] {
        assert!(!file.contains(secret.as_str()) && !file.contains(&secret[3..]));
    }
    assert!(!file.contains("sha256:"), "no key hash in the audit log");
    assert_eq!(
        gw.admin("/admin/audit?limit=2").json()["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// Budgets that reset: a key's own daily budget, or its group's; over budget is 429 `insufficient_quota`
/// naming the budget and when it resets. Keys can expire and move between groups; the CLI shows it all.
#[test]
fn budgets_expiry_and_moves() {
    let dir = TempDir::new("op-budgets");
    let text = format!(
        "{}[[groups]]\nname = \"capped\"\nmodels = [\"mock\"]\nbudget = 0.000001\nbudget_period = \"weekly\"\n",
        config(dir.path())
    );
    let gw = Gateway::start_with(dir, &text);
    // A key's own daily budget, far below one answer's cost: the first request passes, the next does not.
    let created = admin_call(
        &gw,
        "POST",
        "/admin/keys",
        json!({"name": "daily", "group": "default", "budget": {"amount": 0.000001, "period": "daily"}}),
    );
    let daily = created.json()["key"].as_str().unwrap().to_string();
    assert_eq!(
        gw.post_as(&daily, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    let r = gw.post_as(&daily, "/v1/chat/completions", &chat("mock"));
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "insufficient_quota");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("daily budget") && msg.contains("resets at"),
        "{msg}"
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    // The group's budget for a key without its own.
    let capped = gw.add_key("in-capped", "capped", None);
    assert_eq!(
        gw.post_as(&capped, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    let r = gw.post_as(&capped, "/v1/chat/completions", &chat("mock"));
    assert!(r.text().contains("weekly budget"), "{}", r.text());
    let keys = gw.admin("/admin/keys").json();
    let row = |name: &str| {
        keys["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(row("in-capped")["budget"]["from"], "group");
    assert_eq!(row("daily")["budget"]["period"], "daily");
    assert!(row("daily")["budget"]["spent"].as_f64().unwrap() > 0.0);
    // Moving it to a group without a budget lifts the limit.
    admin_call(
        &gw,
        "POST",
        "/admin/keys/in-capped/group",
        json!({"group": "default"}),
    );
    assert_eq!(
        gw.post_as(&capped, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    // An expiry in the past stops the key (401 `key_expired`); `never` brings it back.
    admin_call(
        &gw,
        "POST",
        "/admin/keys/in-capped/expires",
        json!({"at": "2020-01-01T00:00:00Z"}),
    );
    let r = gw.post_as(&capped, "/v1/chat/completions", &chat("mock"));
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "key_expired");
    admin_call(
        &gw,
        "POST",
        "/admin/keys/in-capped/expires",
        json!({"never": true}),
    );
    assert_eq!(
        gw.post_as(&capped, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    // The CLI: a budget removed, then listed with what it spent.
    let (code, _, err) = gw.cli(&["keys", "budget", "--name", "daily", "--none"]);
    assert_eq!(code, 0, "{err}");
    // A running server picks the change up when it reloads the keys file (within about a second).
    wait_for(
        || {
            gw.post_as(&daily, "/v1/chat/completions", &chat("mock"))
                .status
                == 200
        },
        "the key without its budget",
    );
    let (code, _, err) = gw.cli(&[
        "keys", "budget", "--name", "daily", "--set", "5", "--period", "monthly",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = gw.cli(&["keys", "list"]);
    assert_eq!(code, 0);
    let line = out.lines().find(|l| l.starts_with("daily ")).unwrap();
    assert!(
        line.contains("5 monthly (key):") && line.contains("spent, resets"),
        "{line}"
    );
    let (code, _, err) = gw.cli(&[
        "keys",
        "expire",
        "--name",
        "daily",
        "--at",
        "2030-01-01T00:00:00Z",
    ]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = gw.cli(&["keys", "list"]);
    assert!(out.contains("2030-01-01T00:00:00Z"), "{out}");
    let audit = gw.admin("/admin/audit?limit=20").json();
    let actions: Vec<&str> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for a in ["key.budget_set", "key.expiry_set", "key.moved"] {
        assert!(actions.contains(&a), "{a} in {actions:?}");
    }
}
