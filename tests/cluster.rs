//! Several instances as one gateway on a real `redis-server`: keys, revocations, limits, credit, usage and
//! the console shared; Redis killed mid-load and restarted; an instance killed with `kill -9`; a Redis that
//! lost its data rebuilt from the instances' ledgers. Every test starts its own Redis on a free port.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::Redis;
use common::{base_config, wait_for, Gateway, TempDir, ADMIN_TOKEN_ENV};
use serde_json::{json, Value};

/// A gateway config on `redis` as instance `instance`: the mock model at a price (so requests cost
/// something), a slow one, and groups with limits.
fn config(dir: &Path, redis: &Redis, instance: &str, top: &str, store: &str) -> String {
    let mut c = base_config(
        dir,
        &format!("instance = \"{instance}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\n{top}"),
    );
    c.push_str(
        r#"
[[upstreams]]
name = "mock"
kind = "mock"

[[upstreams]]
name = "slowmock"
kind = "mock"
mock_delay_ms = 100

[[models]]
name = "mock"
upstream = "mock"
input_price = 1000.0
output_price = 10000.0

[[models]]
name = "slow"
upstream = "slowmock"
input_price = 1000.0
output_price = 10000.0

[[groups]]
name = "default"
models = ["*"]

[[groups]]
name = "rpm5"
models = ["*"]
rpm = 5

[[groups]]
name = "one"
models = ["*"]
max_concurrent = 1

"#,
    );
    c.push_str(&redis.store_section(store));
    c
}

/// Instance A (it makes the first key, `default`, with the CLI before it starts).
fn start_a(redis: &Redis, top: &str, store: &str) -> Gateway {
    let dir = TempDir::new("gw-a");
    let c = config(dir.path(), redis, "gw-a", top, store);
    Gateway::start_with(dir, &c)
}

/// Instance A as a `tollgate serve` process (to be killed with kill -9).
fn spawn_a(redis: &Redis, top: &str, store: &str) -> Gateway {
    let dir = TempDir::new("gw-a");
    let c = config(dir.path(), redis, "gw-a", top, store);
    Gateway::spawn_with(dir, &c)
}

/// Another instance on the same store, knowing `key` (made on A).
fn start_other(redis: &Redis, name: &str, key: &str, top: &str, store: &str) -> Gateway {
    let dir = TempDir::new(name);
    let c = config(dir.path(), redis, name, top, store);
    Gateway::restart(dir, &c, key)
}

/// Waits until `gw` knows `key` (made on another instance).
fn key_on(gw: &Gateway, key: &str) {
    wait_for(
        || {
            gw.request(
                "GET",
                "/v1/models",
                &[("authorization", &format!("Bearer {key}"))],
                b"",
            )
            .status
                == 200
        },
        "the key on B",
    );
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
}

/// The usage records of a gateway's own ledger.
fn ledger(gw: &Gateway) -> Vec<Value> {
    let text = std::fs::read_to_string(gw.dir.path().join("data/usage.jsonl")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Records of the shared stream, as `/admin/usage` on `gw` shows them (every instance's).
fn shared_usage(gw: &Gateway, query: &str) -> Value {
    let r = gw.admin(&format!("/admin/usage?limit=10000{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Waits until the shared stream holds every record of the given ledgers (shipping follows the ledger's
/// syncs), and returns the stream's request ids. Reading usage on an instance first writes and ships its own
/// records, so its ledger then holds every request it answered.
fn all_shipped(via: &Gateway, ledgers: &[&Gateway]) -> HashSet<String> {
    for g in ledgers {
        assert_eq!(g.admin("/admin/usage?limit=1").status, 200);
    }
    let want: HashSet<String> = ledgers
        .iter()
        .flat_map(|g| ledger(g))
        .map(|r| r["request_id"].as_str().unwrap().to_string())
        .collect();
    let mut got = HashSet::new();
    wait_for(
        || {
            got = shared_usage(via, "")["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["request_id"].as_str().unwrap().to_string())
                .collect();
            want.is_subset(&got)
        },
        "every ledger record in the shared usage stream",
    );
    got
}

/// A key's spend as the store has it (`/admin/keys`).
fn spent(gw: &Gateway, name: &str) -> f64 {
    let keys = gw.admin("/admin/keys").json();
    keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .map(|k| k["spent"].as_f64().unwrap())
        .unwrap_or_else(|| panic!("no key {name} in {keys}"))
}

/// The sum of a key's costs in the given ledgers.
fn ledger_cost(gws: &[&Gateway], name: &str) -> f64 {
    gws.iter()
        .flat_map(|g| ledger(g))
        .filter(|r| r["key"] == name)
        .map(|r| r["cost"].as_f64().unwrap())
        .sum()
}

#[test]
fn two_instances_share_keys_revocations_limits_usage_and_the_console() {
    let redis = Redis::start(true);
    let a = start_a(&redis, "", "");
    let b = start_other(&redis, "gw-b", &a.key, "", "");

    // A key made on A (with the CLI, before A started) works on B.
    let r = b.post("/v1/chat/completions", &chat("mock"));
    assert_eq!(r.status, 200, "{}", r.text());
    let on_b = r.header("x-request-id").unwrap().to_string();

    // A key made through A's console works on B once the store says so.
    let made = a.admin_post("/admin/keys", &json!({"name": "app", "group": "default"}));
    assert_eq!(made.status, 200, "{}", made.text());
    let app = made.json()["key"].as_str().unwrap().to_string();
    wait_for(
        || {
            b.post_as(&app, "/v1/chat/completions", &chat("mock"))
                .status
                == 200
        },
        "A's new key working on B",
    );

    // Revoked on B: refused on A (at A's next look at the keys' versions, every 250 ms; how soon is a
    // matter for benchmarks, not for a test that must pass on a loaded machine).
    assert_eq!(
        b.admin_post("/admin/keys/app/revoke", &json!({})).status,
        200
    );
    wait_for(
        || {
            a.post_as(&app, "/v1/chat/completions", &chat("mock"))
                .status
                == 401
        },
        "the key revoked on B refused on A",
    );

    // An rpm limit of 5 admits 5 in a minute across both instances.
    let limited = a.add_key("limited", "rpm5", None);
    wait_for(
        || {
            b.request(
                "GET",
                "/v1/models",
                &[("authorization", &format!("Bearer {limited}"))],
                b"",
            )
            .status
                == 200
        },
        "the limited key on B",
    );
    let mut admitted = 0;
    for i in 0..12 {
        let gw = if i % 2 == 0 { &a } else { &b };
        let r = gw.post_as(&limited, "/v1/chat/completions", &chat("mock"));
        match r.status {
            200 => admitted += 1,
            429 => assert!(
                r.text().contains("requests-per-minute limit of 5"),
                "{}",
                r.text()
            ),
            s => panic!("unexpected {s}: {}", r.text()),
        }
    }
    assert_eq!(admitted, 5, "rpm 5 across two instances");

    // The console on A lists B's records, with the instance named, and the cluster's totals.
    all_shipped(&a, &[&a, &b]);
    let usage = shared_usage(&a, "");
    let from_b = usage["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == on_b.as_str())
        .unwrap_or_else(|| panic!("B's request {on_b} not listed on A: {usage}"));
    assert_eq!(from_b["instance"], "gw-b");
    let instances: HashSet<&str> = usage["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["instance"].as_str())
        .collect();
    assert_eq!(instances, HashSet::from(["gw-a", "gw-b"]));
    assert_eq!(
        usage["totals"]["requests"].as_u64().unwrap() as usize,
        ledger(&a).len() + ledger(&b).len()
    );

    // A model disabled in A's console is disabled on B; the audit trail on B shows A's change.
    let r = a.admin_post("/admin/models/slow", &json!({"disabled": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        || b.post("/v1/chat/completions", &chat("slow")).status == 404,
        "the model disabled on A refused on B",
    );
    let audit = b.admin("/admin/audit?limit=50").json();
    assert!(
        audit["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["target"] == "model slow" && e["action"] == "model.disabled"),
        "{audit}"
    );
}

#[test]
fn a_credit_spent_through_both_instances_at_once_stays_within_the_bound() {
    let redis = Redis::start(true);
    let a = start_a(&redis, "", "");
    let b = start_other(&redis, "gw-b", &a.key, "", "");
    let key = a.add_key("wallet", "default", Some(2.0));
    key_on(&b, &key);
    // Four clients on each instance spend the credit at once until both refuse.
    let gws = [Arc::new(a), Arc::new(b)];
    let mut threads = Vec::new();
    for i in 0..8 {
        let gw = gws[i % 2].clone();
        let key = key.clone();
        threads.push(std::thread::spawn(move || {
            let mut n = (0, 0);
            loop {
                let r = gw.post_as(&key, "/v1/chat/completions", &chat("mock"));
                match r.status {
                    200 => n.0 += 1,
                    429 => {
                        n.1 += 1;
                        assert!(r.text().contains("insufficient_quota"), "{}", r.text());
                        return n;
                    }
                    s => panic!("unexpected {s}: {}", r.text()),
                }
            }
        }));
    }
    let mut ok: u64 = threads.into_iter().map(|t| t.join().unwrap().0).sum();
    let (a, b) = (&gws[0], &gws[1]);
    // Then one request at a time on one instance, with nothing else in flight, until a refusal says the
    // credit is used up. (The end of a request is settled with the next admission of its key on the same
    // instance, or 2 ms later: on another instance a request this soon after may still find the last one's
    // reservation held, and be refused early.)
    for i in 0.. {
        let r = a.post_as(&key, "/v1/chat/completions", &chat("mock"));
        if r.status == 429 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        ok += 1;
        // The spend counts once the record is shipped; until then the reservation holds the credit.
        assert!(i < 200, "the credit never ran out");
    }
    all_shipped(a, &[a, b]);
    let spent = spent(a, "wallet");
    assert!(
        (spent - ledger_cost(&[a, b], "wallet")).abs() < 1e-9,
        "the store's spend {spent} is not the ledgers' sum {} ({} + {} records; {:?})",
        ledger_cost(&[a, b], "wallet"),
        ledger(a).len(),
        ledger(b).len(),
        ledger(a).last()
    );
    // The worst case of one request: its input estimate and its 50-token output limit at the model's prices.
    let worst = 50.0 * 10000.0 / 1e6 + 200.0 * 1000.0 / 1e6;
    assert!(ok > 3, "only {ok} requests were admitted");
    assert!(
        spent <= 2.0 + worst,
        "overspent: {spent} of a credit of 2 ({ok} requests; one worst case {worst})"
    );
    assert!(
        spent >= 2.0,
        "refused before the credit was used up: {spent}"
    );
}

/// Sends requests on both instances from two threads until `stop`; returns (status, request id) of each.
fn load(
    gws: &[Arc<Gateway>],
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<(u16, String, String)>>> {
    gws.iter()
        .map(|gw| {
            let (gw, stop) = (gw.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let r = gw.post("/v1/chat/completions", &chat("mock"));
                    out.push((
                        r.status,
                        r.header("x-request-id").unwrap_or("").to_string(),
                        r.text(),
                    ));
                    std::thread::sleep(Duration::from_millis(5));
                }
                out
            })
        })
        .collect()
}

#[test]
fn redis_killed_mid_load_refuses_in_the_clients_protocol_loses_no_record_and_recovers() {
    let mut redis = Redis::start(true);
    let a = Arc::new(start_a(&redis, "", ""));
    let b = Arc::new(start_other(&redis, "gw-b", &a.key, "", ""));
    let gws = [a.clone(), b.clone()];
    let stop = Arc::new(AtomicBool::new(false));
    let threads = load(&gws, &stop);
    wait_for(
        || ledger(&a).len() >= 5 && ledger(&b).len() >= 5,
        "load on both instances",
    );

    // Redis dies: requests are refused with 503 naming the store, /readyz says why.
    redis.kill();
    wait_for(
        || {
            let r = a.post("/v1/chat/completions", &chat("mock"));
            r.status == 503 && r.json()["error"]["code"] == "store_unavailable"
        },
        "503 store_unavailable on A",
    );
    // B notices within its next look at the store (or its next call to it); a Messages client gets the
    // refusal in its own protocol's shape.
    let mut m = b.post("/v1/messages", &json!({}));
    wait_for(
        || {
            m = b.post(
                "/v1/messages",
                &json!({"model": "mock", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}),
            );
            m.status == 503
        },
        "503 on B",
    );
    assert_eq!(
        m.json()["type"],
        "error",
        "an Anthropic-shaped error: {}",
        m.text()
    );
    assert!(m.text().contains("shared store"), "{}", m.text());
    let ready = a.request("GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503);
    assert_eq!(ready.json()["store"]["state"], "not answering");

    // Redis comes back on its data: the same instances admit again, with no restart.
    redis.restart();
    wait_for(
        || {
            a.post("/v1/chat/completions", &chat("mock")).status == 200
                && b.post("/v1/chat/completions", &chat("mock")).status == 200
        },
        "both instances admitting again",
    );
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let answered: Vec<(u16, String, String)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(
        answered.iter().any(|(s, _, _)| *s == 503),
        "the load saw the outage"
    );
    assert!(
        answered
            .iter()
            .all(|(s, _, t)| *s == 200 || (*s == 503 && t.contains("store_unavailable"))),
        "only 200s and store 503s"
    );

    // Every answer has its record in its instance's ledger, and every record reached the shared stream.
    let answered_ids: HashSet<String> = answered.iter().map(|(_, id, _)| id.clone()).collect();
    let mut ids = HashSet::new();
    wait_for(
        || {
            ids = ledger(&a)
                .iter()
                .chain(ledger(&b).iter())
                .map(|r| r["request_id"].as_str().unwrap().to_string())
                .collect();
            answered_ids.is_subset(&ids)
        },
        "a ledger record of every answer",
    );
    let shipped = all_shipped(&a, &[&a, &b]);
    assert_eq!(
        shipped.len(),
        ids.len(),
        "the stream holds each record once"
    );
    assert!((spent(&a, "default") - ledger_cost(&[&a, &b], "default")).abs() < 1e-9);
}

#[test]
fn an_instance_killed_with_kill_9_loses_nothing_the_other_or_redis_needs() {
    let redis = Redis::start(true);
    // A syncs each record before its answer ends (strict), so every answer it gave has its record on disk.
    let mut a = spawn_a(&redis, "ledger_strict = true", "");
    let b = start_other(&redis, "gw-b", &a.key, "", "");
    let one = a.add_key("single", "one", Some(100.0));
    key_on(&b, &one);
    for _ in 0..5 {
        assert_eq!(a.post("/v1/chat/completions", &chat("mock")).status, 200);
    }
    // A slow request of the max_concurrent = 1 key is in flight on A when A is killed.
    let addr = a.addr;
    let slow_key = one.clone();
    let inflight = std::thread::spawn(move || {
        let body = json!({"model": "slow", "stream": true, "max_tokens": 50,
                          "messages": [{"role": "user", "content": "a long answer please"}]});
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        common::send_request(
            &mut s,
            "POST",
            "/v1/chat/completions",
            &[
                ("authorization", &format!("Bearer {slow_key}")),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
            true,
        );
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut buf);
    });
    wait_for(
        || redis.hget("t:acct:single", "inflight") == "1",
        "A's slow request in flight",
    );
    let r = b.post_as(&one, "/v1/chat/completions", &chat("mock"));
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("concurrent"), "{}", r.text());
    let before = ledger(&a);
    let dir = a.dir.path().to_path_buf();
    let config_text = std::fs::read_to_string(a.config_path()).unwrap();
    let key = a.key.clone();
    a.keep_dir();
    a.child().kill().unwrap(); // SIGKILL
    let _ = a.child().wait();
    inflight.join().unwrap();

    // B goes on; the killed instance's reservation gives its slot back when its lease runs out.
    assert_eq!(b.post("/v1/chat/completions", &chat("mock")).status, 200);
    wait_for(
        || {
            b.post_as(&one, "/v1/chat/completions", &chat("mock"))
                .status
                == 200
        },
        "the slot of the killed instance's request back after its lease",
    );

    // A starts again on its data: what it had not shipped is shipped, nothing twice.
    let a2 = Gateway::restart(TempDir(dir), &config_text, &key);
    assert!(ledger(&a2).len() >= before.len());
    let shipped = all_shipped(&b, &[&a2, &b]);
    assert_eq!(shipped.len(), ledger(&a2).len() + ledger(&b).len());
    for name in ["default", "single"] {
        assert!(
            (spent(&b, name) - ledger_cost(&[&a2, &b], name)).abs() < 1e-9,
            "{name}: the store's spend is the ledgers' sum"
        );
    }
}

#[test]
fn a_redis_that_lost_its_data_is_refused_then_rebuilt_from_the_ledgers() {
    let mut redis = Redis::start(false);
    let a = start_a(&redis, "", "");
    let b = start_other(&redis, "gw-b", &a.key, "", "");
    let wallet = a.add_key("wallet", "default", Some(50.0));
    key_on(&b, &wallet);
    for gw in [&a, &b] {
        for _ in 0..4 {
            assert_eq!(
                gw.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
                    .status,
                200
            );
            assert_eq!(gw.post("/v1/chat/completions", &chat("mock")).status, 200);
        }
    }
    all_shipped(&a, &[&a, &b]);
    let spent_before: HashMap<&str, f64> = ["default", "wallet"]
        .iter()
        .map(|k| (*k, spent(&a, k)))
        .collect();

    // A store that still has its data, with instances running on it, is not rebuilt: the rebuild would
    // delete and recount the balances while they admit, settle and ship.
    let (code, out, err) = a.cli(&["store", "rebuild"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("running on it (gw-a, gw-b)") && err.contains("stop them first"),
        "{err}"
    );
    for (name, before) in &spent_before {
        assert_eq!(spent(&a, name), *before, "{name}: untouched");
    }

    // Redis restarts without its data: both instances refuse rather than trust empty balances.
    redis.restart();
    assert_eq!(redis.int(&["DBSIZE"]), 0);
    for gw in [&a, &b] {
        wait_for(
            || {
                let r = gw.post_as(&wallet, "/v1/chat/completions", &chat("mock"));
                r.status == 503 && r.text().contains("lost its data")
            },
            "refusals while the store has lost its data",
        );
    }
    assert_eq!(
        a.request("GET", "/readyz", &[], b"").json()["store"]["state"],
        "lost its data"
    );

    // Rebuilt from the ledgers of both instances: keys, and every balance exactly as before.
    let ledger_b = b.dir.path().join("data/usage.jsonl");
    let (code, out, err) = a.cli(&[
        "store",
        "rebuild",
        "--ledger",
        &format!("gw-b={}", ledger_b.display()),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("keys: 2 restored"), "{out}");
    wait_for(
        || {
            a.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
                .status
                == 200
                && b.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
                    .status
                    == 200
        },
        "both instances admitting after the rebuild",
    );
    all_shipped(&a, &[&a, &b]);
    for (name, before) in spent_before {
        let now = spent(&a, name);
        assert!(
            (now - ledger_cost(&[&a, &b], name)).abs() < 1e-9,
            "{name}: spend is the ledgers' sum"
        );
        assert!(
            now >= before - 1e-9,
            "{name}: {now} < {before} before the loss"
        );
    }
}

#[test]
fn check_connect_and_the_keys_commands_work_on_the_store() {
    let mut redis = Redis::start(true);
    let a = start_a(&redis, "", "");
    let (code, out, _) = a.cli(&["check", "--connect"]);
    assert_eq!(code, 0);
    assert!(out.contains("answers") && out.contains("gw-a"), "{out}");
    let (code, out, err) = a.cli(&["keys", "credit", "--name", "default", "--set", "7.5"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("7.5"), "{out}");
    let (code, out, err) = a.cli(&["keys", "list"]);
    assert_eq!(code, 0);
    assert!(err.contains("Redis at"), "{err}");
    assert!(out.contains("default") && out.contains("7.5"), "{out}");
    // The running instance has the new credit from the store.
    wait_for(
        || {
            a.admin("/admin/keys").json()["data"][0]["credit"]
                .as_f64()
                .is_some_and(|c| (c - 7.5).abs() < 1e-12)
        },
        "the new credit in force",
    );
    redis.kill();
    let (code, _, err) = a.cli(&["check", "--connect"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the store"), "{err}");
    let (code, _, err) = a.cli(&["keys", "revoke", "--name", "default"]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the store"), "{err}");
}

#[test]
fn local_mode_admits_on_this_instances_limits_while_redis_is_down_and_reconciles_exactly() {
    let mut redis = Redis::start(true);
    let store = "on_unavailable = \"local\"";
    let a = start_a(&redis, "", store);
    let b = start_other(&redis, "gw-b", &a.key, "", store);
    let wallet = a.add_key("wallet", "default", Some(50.0));
    let unseen = a.add_key("unseen", "default", Some(50.0));
    wait_for(
        || {
            b.request(
                "GET",
                "/v1/models",
                &[("authorization", &format!("Bearer {unseen}"))],
                b"",
            )
            .status
                == 200
        },
        "the keys on B",
    );
    // Both instances learn the wallet's spend from the store.
    for gw in [&a, &b] {
        assert_eq!(
            gw.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
                .status,
            200
        );
    }
    redis.kill();
    for gw in [&a, &b] {
        // A key with a credit this instance has seen, and a key without one, are admitted locally.
        wait_for(
            || gw.request("GET", "/readyz", &[], b"").json()["store"]["state"] == "not answering",
            "the outage noticed",
        );
        assert_eq!(
            gw.request("GET", "/readyz", &[], b"").status,
            200,
            "local mode stays ready"
        );
        for _ in 0..3 {
            let r = gw.post_as(&wallet, "/v1/chat/completions", &chat("mock"));
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(gw.post("/v1/chat/completions", &chat("mock")).status, 200);
        }
        // A key with a credit whose spend this instance never learnt cannot be checked.
        let r = gw.post_as(&unseen, "/v1/chat/completions", &chat("mock"));
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.text().contains("store_unavailable"), "{}", r.text());
    }
    redis.restart();
    wait_for(
        || a.request("GET", "/readyz", &[], b"").json()["store"]["state"] == "answers",
        "the store answering again",
    );
    all_shipped(&a, &[&a, &b]);
    for name in ["wallet", "default"] {
        assert!(
            (spent(&a, name) - ledger_cost(&[&a, &b], name)).abs() < 1e-9,
            "{name}: the spend of the outage reconciled exactly"
        );
    }
}

#[test]
fn the_store_password_comes_from_the_environment_and_never_shows() {
    const PASSWORD: &str = "redis-secret-9f8e7d6c";
    let redis = Redis::start_with(true, Some(PASSWORD));
    let dir = TempDir::new("gw-pw");
    let c = config(
        dir.path(),
        &redis,
        "gw-a",
        "",
        "password_env = \"TG_TEST_REDIS_PASSWORD\"",
    );
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, &c).unwrap();
    let run = |password: &str, args: &[&str]| {
        let out = std::process::Command::new(common::bin())
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .env("TG_TEST_REDIS_PASSWORD", password)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (code, out) = run(PASSWORD, &["check", "--connect"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains(PASSWORD), "{out}");
    let (code, out) = run("wrong-password", &["check", "--connect"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cannot reach the store"), "{out}");
    assert!(
        !out.contains("wrong-password") && !out.contains(PASSWORD),
        "{out}"
    );
    // The URL may not carry a password at all.
    std::fs::write(
        &cfg,
        c.replace(
            "redis://127.0.0.1",
            &format!("redis://:{PASSWORD}@127.0.0.1"),
        ),
    )
    .unwrap();
    let (code, out) = run(PASSWORD, &["check"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("password_env") && !out.contains(PASSWORD),
        "{out}"
    );
    // A gateway with the password serves; its log never shows it.
    std::fs::write(&cfg, &c).unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .env("TG_TEST_REDIS_PASSWORD", PASSWORD);
    let gw = Gateway::start_command(dir, &mut cmd);
    assert_eq!(gw.post("/v1/chat/completions", &chat("mock")).status, 200);
    assert!(!gw.all_logs().contains(PASSWORD));
}

#[test]
fn a_redis_that_stops_answering_holds_no_worker_past_the_timeout() {
    let redis = Redis::start(true);
    let a = start_a(&redis, "", "timeout_ms = 200");
    let wallet = a.add_key("wallet", "default", Some(50.0));
    assert_eq!(
        a.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
            .status,
        200
    );
    // Redis busy for 3 s (as a stalled or overloaded server): the request that needs it is refused when
    // the call's deadline passes, not when Redis answers again.
    let port = redis.port;
    let sleeper = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut s, b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n3\r\n")
            .unwrap();
        let mut buf = [0u8; 16];
        let _ = std::io::Read::read(&mut s, &mut buf);
    });
    // Until Redis is seen asleep: a PING on a connection of its own gets no answer for a while.
    wait_for(
        || {
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                return false;
            };
            let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
            let _ = std::io::Write::write_all(&mut s, b"PING\r\n");
            let mut buf = [0u8; 16];
            std::io::Read::read(&mut s, &mut buf).is_err()
        },
        "Redis asleep",
    );
    let began = Instant::now();
    let r = a.post_as(&wallet, "/v1/chat/completions", &chat("mock"));
    let took = began.elapsed();
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("store_unavailable"), "{}", r.text());
    assert!(
        took < Duration::from_millis(2500),
        "the worker waited {took:?} for a Redis that slept 3 s"
    );
    sleeper.join().unwrap();
    wait_for(
        || {
            a.post_as(&wallet, "/v1/chat/completions", &chat("mock"))
                .status
                == 200
        },
        "admitting again once Redis answers",
    );
}

/// A credit large enough to be shared out in allotments, spent through both instances at once: most
/// requests are admitted from slices (far fewer script calls than requests), and still the spend ends
/// within one request's worst case of the credit, and is the ledgers' sum.
#[test]
fn a_credit_spent_through_both_instances_from_allotments_stays_within_the_bound() {
    let redis = Redis::start(true);
    let a = start_a(&redis, "", "");
    let b = start_other(&redis, "gw-b", &a.key, "", "");
    let credit = 60.0;
    let key = a.add_key("purse", "default", Some(credit));
    key_on(&b, &key);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = redis.monitor_scripts(stop.clone());
    let gws = [Arc::new(a), Arc::new(b)];
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (gw, key) = (gws[i % 2].clone(), key.clone());
            std::thread::spawn(move || {
                let mut ok = 0u64;
                loop {
                    let r = gw.post_as(&key, "/v1/chat/completions", &chat("mock"));
                    match r.status {
                        200 => ok += 1,
                        429 => {
                            assert!(r.text().contains("insufficient_quota"), "{}", r.text());
                            return ok;
                        }
                        s => panic!("unexpected {s}: {}", r.text()),
                    }
                }
            })
        })
        .collect();
    let ok: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    // Admission calls (7 keys, the last `t:terms`) admit one request each at most here; allotments' calls
    // (7 keys, the fifth `t:terms`) a slice each.
    let (mut admissions, mut allotments) = (0, 0);
    for args in seen.lock().unwrap().iter() {
        let keys = &args[3..];
        if args.get(2).map(String::as_str) == Some("7") && keys.len() >= 7 {
            if keys[6] == "t:terms" {
                admissions += 1;
            } else if keys[4] == "t:terms" {
                allotments += 1;
            }
        }
    }
    assert!(allotments >= 2, "{allotments} allotment calls");
    assert!(
        admissions + allotments < ok / 2,
        "{admissions} admission and {allotments} allotment calls for {ok} requests"
    );
    let (a, b) = (&gws[0], &gws[1]);
    // A slice whose clients stopped holds what it did not draw until its instance gives it back (at its
    // next look): once nothing is held, one request at a time spends what is left, until a refusal.
    wait_for(
        || redis.hget("t:acct:purse", "reserved") == "0",
        "the slices given back",
    );
    for i in 0.. {
        let r = a.post_as(&key, "/v1/chat/completions", &chat("mock"));
        if r.status == 429 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(i < 200, "the credit never ran out");
        wait_for(
            || redis.hget("t:acct:purse", "reserved") == "0",
            "the request settled",
        );
    }
    all_shipped(a, &[a, b]);
    let spent = spent(a, "purse");
    assert!(
        (spent - ledger_cost(&[a, b], "purse")).abs() < 1e-9,
        "the store's spend {spent} is not the ledgers' sum {}",
        ledger_cost(&[a, b], "purse")
    );
    let worst = 50.0 * 10000.0 / 1e6 + 200.0 * 1000.0 / 1e6;
    assert!(
        spent <= credit + worst,
        "overspent: {spent} of a credit of {credit} ({ok} requests; one worst case {worst})"
    );
    assert!(
        spent >= credit,
        "refused before the credit was used up: {spent} of {credit}"
    );
}

/// A store a newer tollgate wrote (its format above this version's) is refused at start, saying what to do:
/// this version would misread what the newer one writes. The format this version writes is set on a store
/// that had none.
#[test]
fn a_store_a_newer_tollgate_wrote_is_refused_at_start() {
    let redis = Redis::start(true);
    let a = start_a(&redis, "", "");
    assert_eq!(
        redis.command(&["GET", "t:format"]).as_deref(),
        Some(tollgate::store::STORE_FORMAT.to_string().as_str())
    );
    // The store was set up by the first key's `keys add` (the harness makes one before the start): of this
    // version, not one an older tollgate used.
    assert!(
        !a.all_logs().contains("used by an older tollgate"),
        "{}",
        a.all_logs()
    );
    drop(a);
    assert!(redis.command(&["SET", "t:format", "99"]).is_some());
    let dir = TempDir::new("gw-newer");
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, config(dir.path(), &redis, "gw-newer", "", "")).unwrap();
    let mut child = std::process::Command::new(common::bin())
        .args(["serve", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It exits at once; one that serves instead is stopped (and the test fails) after a generous wait.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("newer tollgate") && text.contains("store format 99"),
        "{text}"
    );
    assert_eq!(redis.command(&["GET", "t:format"]).as_deref(), Some("99"));
}
