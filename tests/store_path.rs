//! The store's request path and shipping, watched from the real `redis-server`: a key with a credit costs
//! one script call per request (its previous settlement carried inside the next admission's call, or sent
//! by the settler thread, each exactly once), budget periods counted exactly, and the records the shipper
//! sends equal to the ledger's lines (fed from the ledger writer's memory, caught up from the file after a
//! restart and across rotation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::redis::Redis;
use common::upstream::{FakeUpstream, Reply};
use common::{base_config, wait_for, Gateway, TempDir, ADMIN_TOKEN_ENV, PRICED_MOCK};
use serde_json::{json, Value};

fn config(dir: &Path, redis: &Redis, instance: &str, top: &str) -> String {
    config_with(dir, redis, instance, top, "")
}

fn config_with(dir: &Path, redis: &Redis, instance: &str, top: &str, store: &str) -> String {
    let mut c = base_config(
        dir,
        &format!("instance = \"{instance}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\n{top}"),
    );
    c.push_str(PRICED_MOCK);
    c.push_str(
        r#"
[[groups]]
name = "limited"
models = ["*"]
rpm = 100000
tpm = 100000000
max_concurrent = 64
"#,
    );
    c.push_str(&redis.store_section(store));
    c
}

fn chat() -> Value {
    json!({"model": "mock", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]})
}

/// The script calls that touched key `name`'s account: admissions (7 keys, the last `t:terms`; each call
/// admits `n` requests, its first argument) with the ids of the settlements each carried, and the
/// settlements sent on their own (5 keys each).
#[derive(Default, Debug)]
struct Calls {
    admissions: Vec<String>,
    /// How many requests each admission call admitted.
    admission_calls: Vec<usize>,
    carried: Vec<String>,
    alone: Vec<String>,
    /// Settlement script calls (each may settle several requests).
    settle_calls: usize,
    /// Allotment calls (`allot.lua`).
    allot_calls: usize,
}

fn calls(seen: &[Vec<String>], name: &str) -> Calls {
    let acct = format!("t:acct:{name}");
    let mut c = Calls::default();
    for a in seen {
        let Some(n) = a.get(2).and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        let keys = &a[3..3 + n];
        let args = &a[3 + n..];
        if n == 7 && keys[0] == acct && keys[6] == "t:terms" {
            // n, 12 values the admissions share, 3 of each admission, then the settlements' groups.
            let count: usize = args[0].parse().unwrap();
            c.admission_calls.push(count);
            c.admissions
                .extend((0..count).map(|i| args[13 + 3 * i].clone()));
            c.carried.extend(settlement_ids(&args[13 + 3 * count..]));
        } else if n == 7 && keys[0] == acct && keys[4] == "t:terms" {
            c.allot_calls += 1;
        } else if n % 5 == 0 && keys.first().is_some_and(|k| k.starts_with("t:acct:")) {
            c.settle_calls += 1;
            // Per key its 5 keys, and in the arguments how many values its settlements take, then its
            // groups, then how many markers go, then their ids.
            let mut at = 0;
            for k in keys.chunks(5) {
                let len: usize = args[at].parse().unwrap();
                if k[0] == acct {
                    c.alone.extend(settlement_ids(&args[at + 1..at + 1 + len]));
                }
                at += 1 + len;
                let forgets: usize = args[at].parse().unwrap();
                at += 1 + forgets;
            }
        }
    }
    c
}

/// The ids of settlements as `settle_many.lua` takes them: groups of n, three period fields, the
/// allotment, then n times id, cost, tokens.
fn settlement_ids(args: &[String]) -> Vec<String> {
    let mut ids = Vec::new();
    let mut at = 0;
    while at < args.len() {
        let n: usize = args[at].parse().unwrap();
        ids.extend((0..n).map(|j| args[at + 5 + 3 * j].clone()));
        at += 5 + 3 * n;
    }
    ids
}

/// `settle.lua` (with the functions it is put after) called for key `k` of prefix `t:`: its settlements
/// `(id, cost, tokens)` in one group of period fields `d1`/`w1`/`m1` and allotment `allot` (none: ''), and
/// the drawn requests' markers `forget`. Its answer's first line.
fn settle_k(
    redis: &Redis,
    settles: &[(&str, &str, &str)],
    allot: &str,
    forget: &[&str],
) -> Option<String> {
    let script = format!(
        "{}\n{}\n{}",
        include_str!("../src/store/lua/money.lua"),
        include_str!("../src/store/lua/settle_many.lua"),
        include_str!("../src/store/lua/settle.lua")
    );
    let mut groups: Vec<String> = Vec::new();
    if !settles.is_empty() {
        groups.extend([
            settles.len().to_string(),
            "d1".into(),
            "w1".into(),
            "m1".into(),
            allot.into(),
        ]);
        for (id, cost, tokens) in settles {
            groups.extend([id.to_string(), cost.to_string(), tokens.to_string()]);
        }
    }
    let mut args: Vec<String> = [
        "EVAL",
        &script,
        "5",
        "t:acct:k",
        "t:res:k",
        "t:lease:k",
        "t:winv:k",
        "t:per:k",
    ]
    .map(String::from)
    .to_vec();
    args.push(groups.len().to_string());
    args.extend(groups);
    args.push(forget.len().to_string());
    args.extend(forget.iter().map(|id| id.to_string()));
    redis.command(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Sends requests of `key` from `threads` clients at once, `each` per client; all must be answered 200.
fn burst(gw: &Arc<Gateway>, key: &str, threads: usize, each: usize) -> usize {
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (gw, key) = (gw.clone(), key.to_string());
            std::thread::spawn(move || {
                for _ in 0..each {
                    let r = gw.post_as(&key, "/v1/chat/completions", &chat());
                    assert_eq!(r.status, 200, "{}", r.text());
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    threads * each
}

/// A fake Chat upstream whose answers wait until the test opens it (`open`), and its model `held` (priced).
struct Held {
    fake: FakeUpstream,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Held {
    fn start() -> Held {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let held = gate.clone();
        let fake = FakeUpstream::start(move |_| {
            let (open, woken) = &*held;
            let mut o = open.lock().unwrap();
            while !*o {
                o = woken.wait(o).unwrap();
            }
            Reply::json(
                200,
                &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "held",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}),
            )
        });
        Held { fake, gate }
    }

    /// The upstream and its model, for a config file.
    fn config(&self) -> String {
        format!(
            r#"
[[upstreams]]
name = "held"
kind = "openai-chat"
base_url = "http://{}/v1"

[[models]]
name = "held"
upstream = "held"
input_price = 1.0
output_price = 1.0
"#,
            self.fake.addr
        )
    }

    /// Lets every answer go, those waiting and those to come.
    fn open(&self) {
        let (open, woken) = &*self.gate;
        *open.lock().unwrap() = true;
        woken.notify_all();
    }
}

/// At most one script call per request for a key with a credit (and for one with limits): every admission
/// is in one EVALSHA (with the others of its key asked at the same moment), and every request's settlement
/// is applied exactly once, inside a later admission's call of its key (no call of its own) or by the
/// settler thread; under concurrent load on the key most ride with an admission.
#[test]
fn a_key_with_a_credit_costs_at_most_one_script_call_per_request() {
    let redis = Redis::start(false);
    let dir = TempDir::new("gw-a");
    // Request by request: the calls this test counts are those of a key without an allotment.
    let c = config_with(dir.path(), &redis, "gw-a", "", "allot_ms = 0");
    let gw = Arc::new(Gateway::start_with(dir, &c));
    for (name, group) in [("credit", "default"), ("limits", "limited")] {
        let key = gw.add_key(name, group, Some(1000.0));
        // One request first, settled: the scripts are loaded (a first call may meet NOSCRIPT and be sent
        // again) before the calls are counted.
        burst(&gw, &key, 1, 1);
        wait_for(
            || redis.hget(&format!("t:acct:{name}"), "reserved") == "0",
            "the first request settled",
        );
        let stop = Arc::new(AtomicBool::new(false));
        let seen = redis.monitor_scripts(stop.clone());
        let mut sent = 0;
        // Concurrent clients of one key: settlements meet the next admission of the key (polled for, with
        // a generous deadline, not assumed from timing).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            sent += burst(&gw, &key, 8, 25);
            let c = calls(&seen.lock().unwrap(), name);
            if !c.carried.is_empty() || Instant::now() > deadline {
                break;
            }
        }
        // Every settlement applied: nothing held in the store for the key any more.
        wait_for(
            || {
                redis.hget(&format!("t:acct:{name}"), "inflight") == "0" && {
                    let c = calls(&seen.lock().unwrap(), name);
                    c.carried.len() + c.alone.len() >= sent
                }
            },
            "every settlement of the key sent",
        );
        stop.store(true, Ordering::Relaxed);
        let c = calls(&seen.lock().unwrap(), name);
        assert_eq!(
            c.admissions.len(),
            sent,
            "every request admitted in a script call ({name})"
        );
        assert!(
            c.admission_calls.len() <= sent,
            "{name}: {} admission calls for {sent} requests",
            c.admission_calls.len()
        );
        assert!(
            !c.carried.is_empty(),
            "no settlement carried inside an admission's script call ({name}): {c:?}"
        );
        let mut settled: HashMap<&str, usize> = HashMap::new();
        for id in c.carried.iter().chain(&c.alone) {
            *settled.entry(id).or_default() += 1;
        }
        for id in &c.admissions {
            assert_eq!(
                settled.get(id.as_str()),
                Some(&1),
                "request {id} settled once ({name})"
            );
        }
        assert_eq!(settled.len(), sent, "{name}");
        // Script calls on the key's account: the admissions, and the settler's calls for the settlements no
        // admission carried (fewer calls than settlements when it sends several at once).
        assert!(c.settle_calls <= c.alone.len(), "{name}");
        assert!(
            c.admission_calls.len() + c.settle_calls < 2 * sent,
            "{name}: {} admission calls and {} settlement calls for {sent} requests",
            c.admission_calls.len(),
            c.settle_calls
        );
    }
}

/// Admissions of one key asked at the same moment go in one script call, and each is judged after those
/// before it, as if alone: with `max_concurrent = 3`, eight requests at once (held at the upstream until
/// the test lets them go) are three admitted and five refused. The test hook holds each round trip's
/// leader 300 ms before it takes the admissions waiting, so that the others surely queue behind it.
#[test]
fn admissions_asked_together_share_a_call_and_are_judged_one_after_another() {
    let redis = Redis::start(false);
    let held = Held::start();
    let dir = TempDir::new("store-path-together");
    let mut c = config(dir.path(), &redis, "gw-together", "");
    c.push_str(&held.config());
    c.push_str(
        r#"
[[groups]]
name = "three"
models = ["*"]
max_concurrent = 3
"#,
    );
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, &c).unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .env("TOLLGATE_TEST_ADMIT_PAUSE_MS", "300");
    let gw = Arc::new(Gateway::start_command(dir, &mut cmd));
    let key = gw.add_key("three", "three", Some(1000.0));
    // One request first, settled: the scripts are loaded (a first call may meet NOSCRIPT and be sent
    // again) before the calls are counted.
    assert_eq!(
        gw.post_as(&key, "/v1/chat/completions", &chat()).status,
        200
    );
    wait_for(
        || redis.hget("t:acct:three", "reserved") == "0",
        "the first request settled",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let seen = redis.monitor_scripts(stop.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (gw, key, tx) = (gw.clone(), key.clone(), tx.clone());
            std::thread::spawn(move || {
                let body = json!({"model": "held", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
                let status = gw.post_as(&key, "/v1/chat/completions", &body).status;
                tx.send(status).unwrap();
            })
        })
        .collect();
    // The refused come back while the admitted are held at the upstream.
    let refused: Vec<u16> = (0..5).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(
        refused,
        vec![429; 5],
        "five refused for the concurrency limit"
    );
    wait_for(
        || held.fake.received().len() == 3,
        "three requests at the upstream",
    );
    held.open();
    let admitted: Vec<u16> = (0..3).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(admitted, vec![200; 3]);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(
        held.fake.received().len(),
        3,
        "no more reached the upstream"
    );
    wait_for(
        || redis.hget("t:acct:three", "inflight") == "0",
        "every slot given back",
    );
    stop.store(true, Ordering::Relaxed);
    let c = calls(&seen.lock().unwrap(), "three");
    assert_eq!(c.admissions.len(), 8, "{c:?}");
    assert!(
        c.admission_calls.iter().any(|&n| n >= 2),
        "admissions asked together shared a script call: {:?}",
        c.admission_calls
    );
    assert!(c.admission_calls.len() < 8, "{:?}", c.admission_calls);
}

/// The fields of a hash (`HGETALL`), over RESP.
fn hgetall(redis: &Redis, key: &str) -> HashMap<String, String> {
    let v = common::redis::resp(redis.port, None, &["HGETALL", key]).unwrap_or_default();
    v.chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

/// Budget periods are counted exactly, to the picocredit: each period's spend of a new key equals its whole
/// spend (both as the store holds them, in units); and a period field beyond what a 64-bit increment holds
/// (more than 9.2 million credits) still adds exactly.
#[test]
fn budget_periods_count_exactly_to_the_unit() {
    let redis = Redis::start(false);
    let dir = TempDir::new("gw-a");
    // Request by request: the calls this test counts are those of a key without an allotment.
    let c = config_with(dir.path(), &redis, "gw-a", "", "allot_ms = 0");
    let gw = Arc::new(Gateway::start_with(dir, &c));
    let key = gw.add_key("budgeted", "limited", Some(1000.0));
    let r = gw.admin_post(
        "/admin/keys/budgeted/budget",
        &json!({"amount": 500.0, "period": "monthly"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    burst(&gw, &key, 1, 1);
    let acct = "t:acct:budgeted";
    let per = "t:per:budgeted";
    wait_for(
        || redis.hget(acct, "reserved") == "0",
        "the first request settled",
    );
    let first = hgetall(&redis, per);
    assert_eq!(first.len(), 3, "a day, a week and a month field: {first:?}");
    // The day's field set beyond a 64-bit integer: the next settlements add to it exactly all the same.
    let (day, _) = first.iter().find(|(f, _)| f.starts_with('d')).unwrap();
    let huge: i128 = 10_000_000_000_000_000_000_000;
    let before: i128 = first[day].parse().unwrap();
    assert_eq!(
        redis.command(&["HSET", per, day, &(huge + before).to_string()]),
        Some(":0".into())
    );
    let sent = burst(&gw, &key, 4, 10);
    wait_for(
        || redis.hget(acct, "reserved") == "0" && redis.hget(acct, "inflight") == "0",
        "every settlement sent",
    );
    let spent: i128 = redis.hget(acct, "spent").parse().unwrap();
    assert!(spent > before, "{sent} requests cost nothing: {spent}");
    let fields = hgetall(&redis, per);
    for (f, v) in &fields {
        let v: i128 = v.parse().unwrap();
        let want = if f == day { huge + spent } else { spent };
        assert_eq!(v, want, "period field {f}");
    }
}

/// Every line of the ledger's files (rotated ones first, by seq), without newlines.
fn ledger_lines(data: &Path) -> Vec<String> {
    let mut files: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(data)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_str()?.to_string();
            if name == "usage.jsonl" {
                return Some((u64::MAX, p));
            }
            let seq = name
                .strip_prefix("usage-")?
                .split('-')
                .next()?
                .parse()
                .ok()?;
            name.ends_with(".jsonl").then_some((seq, p))
        })
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|(_, p)| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The shared usage stream's records, oldest first, as shipped (the JSON text of each).
fn stream(redis: &Redis) -> Vec<String> {
    common::redis::resp(redis.port, None, &["XRANGE", "t:usage", "-", "+"])
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.starts_with('{'))
        .collect()
}

fn spawn(dir: TempDir, redis: &Redis, key: Option<&str>) -> Gateway {
    // While the store is down, requests are admitted on this instance's own limits (their records wait
    // in the ledger).
    let c = config_with(
        dir.path(),
        redis,
        "gw-s",
        "ledger_strict = true\nledger_max_file_mb = 0.01\nledger_compress_after_days = 30",
        "on_unavailable = \"local\"",
    );
    match key {
        None => Gateway::spawn_with(dir, &c),
        Some(k) => Gateway::respawn(dir, &c, k),
    }
}

/// Records shipped from the ledger writer's memory are the ledger's lines, each once, in order, across
/// rotations; records written while the store is down, left unshipped at a stop, are caught up from the
/// files at the next start.
#[test]
fn shipped_records_are_the_ledgers_lines_across_rotation_and_a_restart() {
    let mut redis = Redis::start(true);
    let gw = spawn(TempDir::new("gw-s"), &redis, None);
    let data = gw.dir.path().join("data");
    let credit = gw.add_key("credit", "default", Some(1000.0));
    let free = gw.key.clone();
    let gw_a = Arc::new(gw);
    let mut sent = burst(&gw_a, &credit, 4, 20) + burst(&gw_a, &free, 4, 20);
    wait_for(
        || ledger_lines(&data).len() >= sent && stream(&redis) == ledger_lines(&data),
        "the shared stream equal to the ledger's lines",
    );
    let lines = ledger_lines(&data);
    assert_eq!(lines.len(), sent);
    let files = std::fs::read_dir(&data)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("usage-"))
        })
        .count();
    assert!(files >= 2, "rotated by size: {files} rotated files");
    assert!(
        gw_a.all_logs()
            .contains("usage records shipped from the ledger writer's memory"),
        "the shipper was fed from memory: {}",
        gw_a.all_logs()
    );

    // The store down: requests go on (admitted locally), their records wait in the ledger.
    redis.kill();
    sent += burst(&gw_a, &free, 2, 10);
    let Ok(mut gw) = Arc::try_unwrap(gw_a) else {
        panic!("the gateway is still shared")
    };
    let dir = gw.dir.path().to_path_buf();
    gw.keep_dir();
    gw.stop();
    drop(gw);
    assert_eq!(ledger_lines(&data).len(), sent);
    assert!(stream_len_before_restart(&mut redis) < sent);

    // Started again (the store back): what was not shipped is, from the files, each line once, in order.
    let gw = spawn(TempDir(dir), &redis, Some(&free));
    wait_for(
        || stream(&redis).len() >= sent,
        "the records written while the store was down shipped",
    );
    assert_eq!(stream(&redis), ledger_lines(&data));
    let gw = Arc::new(gw);
    sent += burst(&gw, &credit, 2, 10);
    wait_for(
        || stream(&redis).len() >= sent,
        "the records after the restart shipped",
    );
    assert_eq!(stream(&redis), ledger_lines(&data));
}

/// The key `name`'s spend, as the gateway reports it, is the sum of the costs of the ledger `lines`.
fn assert_spent_is_the_ledgers_sum(gw: &Gateway, name: &str, lines: &[String]) {
    let cost: f64 = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["cost"]
                .as_f64()
                .unwrap()
        })
        .sum();
    let keys = gw.admin("/admin/keys").json();
    let spent = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .map(|k| k["spent"].as_f64().unwrap())
        .unwrap();
    assert!(
        (spent - cost).abs() < 1e-9,
        "spent {spent}, the ledger's sum {cost}"
    );
}

/// An instance on `redis`, run as a `tollgate serve` process with test hooks in its environment.
fn spawn_hooked(
    dir: TempDir,
    redis: &Redis,
    instance: &str,
    top: &str,
    hooks: &[(&str, &str)],
) -> Gateway {
    let c = config(dir.path(), redis, instance, top);
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, &c).unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .envs(hooks.iter().copied());
    Gateway::start_command(dir, &mut cmd)
}

/// Restarts the killed store (on its data) and says how many records it holds.
fn stream_len_before_restart(redis: &mut Redis) -> usize {
    redis.restart();
    stream(redis).len()
}

/// A usage query ships what is waiting itself (`catch_up`), beside the shipper thread. When both find the
/// cursor empty (a new instance's first records) and the shipper thread ships them and moves the cursor
/// while the query's shipper still holds its reading, the query's shipper must not set the cursor back:
/// every record is shipped, and counted, once. The test hook holds the query's shipper between reading the
/// cursor and setting it for 400 ms, the moment the shipper thread ships in.
#[test]
fn a_usage_query_beside_the_shipper_ships_each_record_once() {
    let redis = Redis::start(false);
    let dir = TempDir::new("store-path-once");
    let hooks = [("TOLLGATE_TEST_SHIP_PAUSE_MS", "400")];
    let gw = spawn_hooked(dir, &redis, "gw-once", "", &hooks);
    for _ in 0..8 {
        assert_eq!(gw.post("/v1/chat/completions", &chat()).status, 200);
    }
    // The query flushes the ledger (its first sync: the shipper thread wakes) and catches up itself.
    assert_eq!(gw.admin("/admin/usage?limit=100").status, 200);
    let lines = ledger_lines(&gw.dir.path().join("data"));
    assert_eq!(lines.len(), 8);
    wait_for(
        || stream(&redis).len() >= lines.len(),
        "every record shipped",
    );
    // Whatever either shipper does next, nothing more arrives.
    assert_eq!(gw.admin("/admin/usage?limit=100").status, 200);
    let shipped = stream(&redis);
    assert_eq!(
        shipped.len(),
        lines.len(),
        "each record shipped once: {} shipped for {} records",
        shipped.len(),
        lines.len()
    );
    assert_spent_is_the_ledgers_sum(&gw, "default", &lines);
}

/// A shipping call that fails on a record's stream entry (the stream's key holds a string: `WRONGTYPE`)
/// leaves that record as it was: its settled marker stays and the cursor stays before it, whatever the
/// order in which its settlement and its shipping reached the store. Once the stream can be written, every
/// record is shipped once and its cost, counted at its settlement, is not counted again: the key's spend is
/// the ledger's sum.
#[test]
fn a_record_whose_stream_entry_fails_is_shipped_later_and_counted_once() {
    let redis = Redis::start(false);
    let dir = TempDir::new("store-path-xadd");
    // Request by request: the markers this test follows are those of a key without an allotment.
    let c = config_with(dir.path(), &redis, "gw-xadd", "", "allot_ms = 0");
    let gw = Arc::new(Gateway::start_with(dir, &c));
    let key = gw.add_key("xadd", "default", Some(1000.0));
    assert_eq!(
        redis
            .command(&["SET", "t:usage", "not a stream"])
            .as_deref(),
        Some("+OK")
    );
    let sent = burst(&gw, &key, 2, 5);
    wait_for(
        || {
            redis.hget("t:acct:xadd", "reserved") == "0"
                && !redis.hget("t:acct:xadd", "spent").is_empty()
                && redis.int(&["HLEN", "t:res:xadd"]) == sent as i64
        },
        "every request settled, its marker waiting for its record",
    );
    let data = gw.dir.path().join("data");
    // The shipper keeps trying (its log says so); each try fails on the first record's stream entry. Two
    // failed tries are waited for (the server counts a script call that ended in an error).
    let failed_scripts = || {
        redis
            .command(&["INFO", "commandstats"])
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("cmdstat_evalsha:")?
                    .split(',')
                    .find_map(|f| f.strip_prefix("failed_calls=")?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let before = failed_scripts();
    wait_for(
        || failed_scripts() >= before + 2,
        "two shipping calls failed",
    );
    let spent_settled = redis.hget("t:acct:xadd", "spent");
    assert_eq!(
        redis.command(&["TYPE", "t:usage"]).as_deref(),
        Some("+string")
    );
    assert_eq!(redis.int(&["HLEN", "t:res:xadd"]), sent as i64);
    assert_eq!(redis.command(&["DEL", "t:usage"]).as_deref(), Some(":1"));
    wait_for(
        || stream(&redis).len() >= sent && redis.int(&["HLEN", "t:res:xadd"]) == 0,
        "every record shipped once the stream can be written",
    );
    assert_eq!(stream(&redis), ledger_lines(&data));
    assert_eq!(redis.hget("t:acct:xadd", "spent"), spent_settled);
    assert_spent_is_the_ledgers_sum(&gw, "xadd", &ledger_lines(&data));
}

/// A shipping call whose writes of the records' sums fail after the records' stream entries are written (the
/// key's budget-period hash holds a string: `WRONGTYPE`, as only a hand on the store makes it) still moves
/// the cursor after them: the records are shipped once, and the effects the other writes made (the key's
/// spend) are not made again by a retry. The error is logged for the operator.
#[test]
fn a_write_of_the_sums_that_fails_does_not_make_a_retry_count_the_records_again() {
    let redis = Redis::start(false);
    let dir = TempDir::new("store-path-sums");
    let c = config(dir.path(), &redis, "gw-sums", "");
    let gw = Arc::new(Gateway::start_with(dir, &c));
    // A key without a credit or limits: its records count their cost when shipped.
    let name = "default";
    assert_eq!(
        redis
            .command(&["SET", &format!("t:per:{name}"), "not a hash"])
            .as_deref(),
        Some("+OK")
    );
    let key = gw.key.clone();
    let sent = burst(&gw, &key, 2, 5);
    let data = gw.dir.path().join("data");
    wait_for(
        || stream(&redis).len() >= sent,
        "every record shipped in spite of the broken key",
    );
    wait_for(
        || gw.all_logs().contains("wrote their effects only in part"),
        "the failed write logged",
    );
    // Whatever the shipper does next (a usage query catches up too), nothing is shipped or counted again.
    assert_eq!(gw.admin("/admin/usage?limit=100").status, 200);
    assert_eq!(stream(&redis), ledger_lines(&data));
    assert_eq!(
        redis
            .command(&["TYPE", &format!("t:per:{name}")])
            .as_deref(),
        Some("+string")
    );
    assert_spent_is_the_ledgers_sum(&gw, name, &ledger_lines(&data));
}

/// The fields of hash `key`, but `except`.
fn fields_but(redis: &Redis, key: &str, except: &[&str]) -> Vec<String> {
    let mut f: Vec<String> = hgetall(redis, key)
        .into_keys()
        .filter(|k| !except.contains(&k.as_str()))
        .collect();
    f.sort();
    f
}

/// An admission of a key with rate limits judges it by the last minute only and keeps the tpm window's
/// total exact: the tokens of the entries older than a minute leave it, a settled request's estimate becomes
/// its real count, and an admission adds its own, whichever of them one call writes. Reservations of a
/// killed instance whose lease ran out give their credit and slot back at the key's next admission.
#[test]
fn a_rate_window_sheds_its_old_entries_and_keeps_its_total_exact() {
    let redis = Redis::start(false);
    let dir = TempDir::new("store-path-window");
    let c = config(dir.path(), &redis, "gw-window", "");
    let gw = Gateway::start_with(dir, &c);
    let key = gw.add_key("win", "limited", None);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let (old, fresh) = ((now_ms - 120_000).to_string(), (now_ms - 1_000).to_string());
    for cmd in [
        vec!["ZADD", "t:win:win", &old, "old-1", &fresh, "fresh-1"],
        vec![
            "HSET",
            "t:winv:win",
            "old-1",
            "1000",
            "fresh-1",
            "500",
            "_total",
            "1500",
        ],
        // A reservation of a killed instance, its lease run out.
        vec!["HSET", "t:res:win", "dead-1", "7000000 10 1"],
        vec!["ZADD", "t:lease:win", "1", "dead-1"],
        vec!["HSET", "t:acct:win", "reserved", "7000000", "inflight", "1"],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    let r = gw.post_as(&key, "/v1/chat/completions", &chat());
    assert_eq!(r.status, 200, "{}", r.text());
    // Settled: its reservation is the marker, its tokens the real ones.
    wait_for(
        || redis.hget("t:acct:win", "reserved") == "0",
        "the request settled",
    );
    let ids = fields_but(&redis, "t:winv:win", &["_total", "fresh-1"]);
    assert_eq!(
        ids.len(),
        1,
        "the window's tokens hold the request's and fresh-1's: {ids:?}"
    );
    let used: i64 = redis.hget("t:winv:win", &ids[0]).parse().unwrap();
    assert!(used > 0);
    assert_eq!(
        redis.hget("t:winv:win", "_total").parse::<i64>().unwrap(),
        500 + used
    );
    assert_eq!(redis.int(&["ZCARD", "t:win:win"]), 2);
    assert_eq!(
        redis.command(&["ZSCORE", "t:win:win", "old-1"]).as_deref(),
        Some("")
    );
    // The window's keys expire two minutes after it (set once, not at each admission: `wexp`).
    for k in ["t:win:win", "t:winv:win"] {
        let ttl = redis.int(&["PTTL", k]);
        assert!((61_000..=121_000).contains(&ttl), "{k}: {ttl} ms");
    }
    assert!(!redis.hget("t:acct:win", "wexp").is_empty());
    // The dead reservation is given back, its slot with it; its entry is the marker 'd' for another lease
    // (its instance could still hold it again), then goes at a look after that lease ran out.
    assert_eq!(redis.hget("t:res:win", "dead-1"), "d");
    assert_eq!(redis.hget("t:acct:win", "inflight"), "0");
    assert_eq!(redis.int(&["ZCARD", "t:lease:win"]), 1);
    for cmd in [
        vec!["ZADD", "t:lease:win", "1", "dead-1"],
        vec!["HDEL", "t:acct:win", "swept"],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    let r = gw.post_as(&key, "/v1/chat/completions", &chat());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(redis.hget("t:res:win", "dead-1"), "");

    // A window whose set is gone (it expired) holds no tokens, whatever total its hash kept says.
    wait_for(
        || redis.hget("t:acct:win", "reserved") == "0",
        "the second request settled",
    );
    assert_eq!(redis.command(&["DEL", "t:win:win"]).as_deref(), Some(":1"));
    assert!(redis
        .command(&["HSET", "t:winv:win", "_total", "999999"])
        .is_some());
    let r = gw.post_as(&key, "/v1/chat/completions", &chat());
    assert_eq!(r.status, 200, "{}", r.text());
    wait_for(
        || redis.hget("t:acct:win", "reserved") == "0",
        "the third request settled",
    );
    // The hash went with its set: it holds the one request in the window now, and its total is that one's.
    let ids = fields_but(&redis, "t:winv:win", &["_total"]);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(redis
        .command(&["ZSCORE", "t:win:win", &ids[0]])
        .is_some_and(|s| !s.is_empty()));
    assert_eq!(
        redis.hget("t:winv:win", "_total"),
        redis.hget("t:winv:win", &ids[0])
    );
    for k in ["t:win:win", "t:winv:win"] {
        let ttl = redis.int(&["PTTL", k]);
        assert!((61_000..=121_000).contains(&ttl), "{k}: {ttl} ms");
    }
    assert_eq!(
        redis
            .command(&["ZSCORE", "t:lease:win", "dead-1"])
            .as_deref(),
        Some("")
    );
}

/// With `on_unavailable = "local"`, requests this instance admitted through the store and still runs count
/// in the local fallback when the store stops answering: their worst cases are held against the key's
/// credit as a local request's would be. Two held at the upstream with a credit of one and a half worst cases:
/// a third, admitted locally once Redis is gone, is refused, not admitted on a spend of zero.
#[test]
fn the_local_fallback_counts_requests_in_flight_through_the_store() {
    let mut redis = Redis::start(false);
    let held = Held::start();
    let dir = TempDir::new("store-path-fallback");
    let mut c = config_with(
        dir.path(),
        &redis,
        "gw-fallback",
        "",
        "on_unavailable = \"local\"",
    );
    c.push_str(&held.config());
    let gw = Arc::new(Gateway::start_with(dir, &c));
    let key = gw.add_key("fb", "default", Some(1000.0));
    let body = json!({"model": "held", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]});
    let send = |gw: &Arc<Gateway>| {
        let (gw, key, body) = (gw.clone(), key.clone(), body.clone());
        std::thread::spawn(move || gw.post_as(&key, "/v1/chat/completions", &body).status)
    };
    let first = send(&gw);
    wait_for(
        || held.fake.received().len() == 1,
        "the first request at the upstream",
    );
    // One worst case, in picocredits, as the store holds it.
    let worst: u64 = redis.hget("t:acct:fb", "reserved").parse().unwrap();
    assert!(worst > 0);
    let credit = worst as f64 * 1.5 / 1e12;
    let r = gw.admin_post("/admin/keys/fb/credit", &json!({"set": credit}));
    assert_eq!(r.status, 200, "{}", r.text());
    let second = send(&gw);
    wait_for(
        || held.fake.received().len() == 2,
        "the second request at the upstream",
    );
    redis.kill();
    wait_for(
        || gw.request("GET", "/readyz", &[], b"").json()["store"]["state"] == "not answering",
        "the outage noticed",
    );
    // Admitted locally now: two worst cases in flight against a credit of one and a half.
    let r = gw.post_as(&key, "/v1/chat/completions", &body);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        held.fake.received().len(),
        2,
        "nothing more reached the upstream"
    );
    held.open();
    assert_eq!(first.join().unwrap(), 200);
    assert_eq!(second.join().unwrap(), 200);
}

/// A reservation that another instance's look for dead leases gave back while its request still runs here
/// (its lease ran out while this instance could not reach the store) is held again at the next renewal:
/// its worst case and slot count against the key until the request ends, and the request is then counted
/// once. The look is made by hand here, as `admit.lua` makes it: the reserved amount and the slot given
/// back, the entry made the marker 'd' under a lease of its own.
#[test]
fn a_reservation_given_back_while_its_request_runs_is_held_again() {
    let redis = Redis::start(false);
    let held = Held::start();
    let dir = TempDir::new("store-path-rehold");
    let mut c = config(dir.path(), &redis, "gw-rehold", "");
    c.push_str(&held.config());
    let gw = Arc::new(Gateway::start_with(dir, &c));
    let key = gw.add_key("rh", "limited", Some(1000.0));
    let running = {
        let (gw, key) = (gw.clone(), key.clone());
        std::thread::spawn(move || {
            let body = json!({"model": "held", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
            gw.post_as(&key, "/v1/chat/completions", &body).status
        })
    };
    wait_for(
        || held.fake.received().len() == 1,
        "the request at the upstream",
    );
    let ids = fields_but(&redis, "t:res:rh", &[]);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0].clone();
    let entry = redis.hget("t:res:rh", &id);
    let worst = redis.hget("t:acct:rh", "reserved");
    assert_eq!(redis.hget("t:acct:rh", "inflight"), "1");
    // Given back, as a look for dead leases does.
    let later = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000)
        .to_string();
    for cmd in [
        vec!["HSET", "t:res:rh", id.as_str(), "d"],
        vec!["ZADD", "t:lease:rh", later.as_str(), id.as_str()],
        vec!["HSET", "t:acct:rh", "reserved", "0", "inflight", "0"],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    wait_for(
        || redis.hget("t:res:rh", &id) == entry,
        "the reservation held again at the next renewal",
    );
    assert_eq!(redis.hget("t:acct:rh", "reserved"), worst);
    assert_eq!(redis.hget("t:acct:rh", "inflight"), "1");
    assert!(redis
        .command(&["ZSCORE", "t:lease:rh", &id])
        .is_some_and(|s| !s.is_empty()));
    assert!(
        gw.all_logs().contains("they are held again"),
        "{}",
        gw.all_logs()
    );
    // The request ends: settled once, its record shipped once.
    held.open();
    assert_eq!(running.join().unwrap(), 200);
    let data = gw.dir.path().join("data");
    wait_for(
        || {
            redis.hget("t:acct:rh", "reserved") == "0"
                && stream(&redis).len() >= ledger_lines(&data).len()
                && redis.int(&["HLEN", "t:res:rh"]) == 0
        },
        "the request settled and its record shipped",
    );
    assert_eq!(redis.hget("t:acct:rh", "inflight"), "0");
    let lines: Vec<String> = ledger_lines(&data)
        .into_iter()
        .filter(|l| l.contains("\"rh\""))
        .collect();
    assert_eq!(lines.len(), 1);
    assert_spent_is_the_ledgers_sum(&gw, "rh", &lines);
}

/// `rehold.lua` holds a reservation again only while its entry is the marker 'd' that a look for dead
/// leases left: never one whose record was shipped (the entry gone: the record counted the cost) or whose
/// request was settled ('s'), however late the call reaches Redis. A settlement settles a 'd'; a release
/// after a settlement touches nothing.
#[test]
fn a_reservation_is_held_again_only_while_it_is_the_marker_d() {
    let redis = Redis::start(false);
    let script = format!(
        "{}\n{}",
        include_str!("../src/store/lua/money.lua"),
        include_str!("../src/store/lua/rehold.lua")
    );
    let rehold = |id: &str| {
        redis.command(&[
            "EVAL",
            &script,
            "3",
            "t:acct:k",
            "t:res:k",
            "t:lease:k",
            "30000",
            id,
            "5000",
            "10",
            "1",
        ])
    };
    assert!(redis
        .command(&["HSET", "t:res:k", "given-back", "d", "settled", "s"])
        .is_some());
    assert_eq!(rehold("given-back").as_deref(), Some(":1"));
    assert_eq!(redis.hget("t:res:k", "given-back"), "5000 10 1");
    assert_eq!(redis.hget("t:acct:k", "reserved"), "5000");
    assert_eq!(redis.hget("t:acct:k", "inflight"), "1");
    for id in ["shipped", "settled", "given-back"] {
        assert_eq!(rehold(id).as_deref(), Some(":0"), "{id}");
    }
    assert_eq!(redis.hget("t:res:k", "shipped"), "");
    assert_eq!(redis.hget("t:res:k", "settled"), "s");
    assert_eq!(redis.hget("t:acct:k", "reserved"), "5000");
    assert_eq!(redis.hget("t:acct:k", "inflight"), "1");

    // A settlement that finds the 'd' counts the cost (the amount and slot were given back already) and
    // leaves 's': the reservation is not held again, and its record counts nothing more.
    let money = include_str!("../src/store/lua/money.lua");
    let later = "99999999999999";
    for cmd in [
        vec!["HSET", "t:res:k", "settling", "d"],
        vec!["ZADD", "t:lease:k", later, "settling"],
        vec!["HSET", "t:winv:k", "settling", "10", "_total", "10"],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    let settled = settle_k(&redis, &[("settling", "3000", "7")], "", &[]);
    assert_eq!(settled.as_deref(), Some(":1"));
    assert_eq!(redis.hget("t:res:k", "settling"), "s");
    assert_eq!(redis.hget("t:acct:k", "spent"), "3000");
    assert_eq!(redis.hget("t:acct:k", "reserved"), "5000");
    assert_eq!(redis.hget("t:acct:k", "inflight"), "1");
    assert_eq!(
        redis
            .command(&["ZSCORE", "t:lease:k", "settling"])
            .as_deref(),
        Some("")
    );
    assert_eq!(redis.hget("t:winv:k", "_total"), "7");
    assert_eq!(rehold("settling").as_deref(), Some(":0"));
    // A release after the settlement leaves the window's real tokens as they are.
    let release = format!("{money}\n{}", include_str!("../src/store/lua/release.lua"));
    let released = redis.command(&[
        "EVAL",
        &release,
        "4",
        "t:acct:k",
        "t:res:k",
        "t:lease:k",
        "t:winv:k",
        "settling",
    ]);
    assert_eq!(released.as_deref(), Some(":1"));
    assert_eq!(redis.hget("t:winv:k", "_total"), "7");
    assert_eq!(redis.hget("t:winv:k", "settling"), "7");
}

/// A busy key is admitted from its allotment: eight clients at once make a few script calls, not one per
/// request, and once the records are shipped and the allotment has ended, the store holds nothing for the
/// key and its spend is the sum of its records. Three times: a key with a credit; one with a credit and a
/// concurrency limit on an instance whose ledger is strict (a record is synced, and may be shipped, before
/// its request's end is counted: the allotment still ends, holding nothing); and one with rate limits too,
/// whose window then counts every request, and exactly their real tokens.
#[test]
fn a_busy_key_is_admitted_from_an_allotment_and_each_request_counted_once() {
    for (name, top, group) in [
        ("busy", "", "default"),
        ("busy-strict", "ledger_strict = true", "wide"),
        ("busy-limited", "", "limited"),
    ] {
        let redis = Redis::start(false);
        let dir = TempDir::new("store-path-allot");
        let mut c = config(dir.path(), &redis, "gw-allot", top);
        c.push_str("\n[[groups]]\nname = \"wide\"\nmodels = [\"*\"]\nmax_concurrent = 64\n");
        let gw = Arc::new(Gateway::start_with(dir, &c));
        let key = gw.add_key(name, group, Some(1000.0));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = redis.monitor_scripts(stop.clone());
        let sent = burst(&gw, &key, 8, 40);
        let data = gw.dir.path().join("data");
        let acct = format!("t:acct:{name}");
        wait_for(
            || {
                redis.hget(&acct, "reserved") == "0"
                    && redis.hget(&acct, "inflight") == "0"
                    && redis.int(&["HLEN", &format!("t:res:{name}")]) == 0
                    && stream(&redis).len() >= ledger_lines(&data).len()
            },
            "every record shipped and the allotment ended",
        );
        stop.store(true, Ordering::Relaxed);
        let c = calls(&seen.lock().unwrap(), name);
        assert!(c.allot_calls >= 1, "{name}: no allotment taken: {c:?}");
        assert!(
            c.admissions.len() + c.allot_calls < sent / 2,
            "{name}: {} admissions and {} allotment calls for {sent} requests",
            c.admissions.len(),
            c.allot_calls
        );
        let lines: Vec<String> = ledger_lines(&data)
            .into_iter()
            .filter(|l| l.contains(&format!("\"{name}\"")))
            .collect();
        assert_eq!(lines.len(), sent, "{name}");
        assert_eq!(stream(&redis), ledger_lines(&data), "{name}");
        assert_spent_is_the_ledgers_sum(&gw, name, &lines);
        // Every request, drawn or admitted, was settled by a settlement (its cost counted at its end), not
        // left to its record's shipping.
        let settled: std::collections::HashSet<&String> =
            c.carried.iter().chain(&c.alone).collect();
        for l in &lines {
            let v: Value = serde_json::from_str(l).unwrap();
            let id = v["request_id"].as_str().unwrap().to_string();
            assert!(settled.contains(&id), "{name}: {id} was not settled");
        }
        if group == "limited" {
            // Each request is in the window once: a slice's entries of requests not drawn went.
            let card = redis.int(&["ZCARD", &format!("t:win:{name}")]) as usize;
            assert_eq!(card, sent, "{name}: window entries");
            let real: u64 = lines
                .iter()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    v["input_tokens"].as_u64().unwrap() + v["output_tokens"].as_u64().unwrap()
                })
                .sum();
            assert_eq!(
                redis.hget(&format!("t:winv:{name}"), "_total"),
                real.to_string(),
                "{name}: the window's tokens are the requests' real ones"
            );
        }
    }
}

/// A shipping call whose answer is lost (the connection broke after Redis applied it) is sent again, finds
/// the cursor past its records and ships nothing twice; its drawn requests' markers still go, because the
/// cursor of the same file past them says they were shipped. The test hooks hold settlements for 300 ms (on
/// a strict ledger, records then ship first, naming their allotments) and lose the answers of the first
/// three shipping calls that applied to such records.
#[test]
fn markers_go_when_a_shipping_calls_answer_is_lost() {
    let redis = Redis::start(false);
    let dir = TempDir::new("store-path-lost-reply");
    // A strict ledger syncs a record before its request's end is counted: records may ship naming their
    // allotment.
    let hooks = [
        ("TOLLGATE_TEST_SHIP_LOSE_REPLIES", "3"),
        ("TOLLGATE_TEST_SETTLE_AFTER_MS", "300"),
    ];
    let gw = Arc::new(spawn_hooked(
        dir,
        &redis,
        "gw-lost",
        "ledger_strict = true",
        &hooks,
    ));
    let key = gw.add_key("lost", "default", Some(1000.0));
    let sent = burst(&gw, &key, 4, 10);
    let data = gw.dir.path().join("data");
    wait_for(
        || {
            redis.hget("t:acct:lost", "reserved") == "0"
                && redis.hget("t:acct:lost", "inflight") == "0"
                && stream(&redis).len() >= ledger_lines(&data).len()
        },
        "every request settled and its record shipped",
    );
    wait_for(
        || redis.int(&["HLEN", "t:res:lost"]) == 0,
        "no marker left of a record whose shipping call's answer was lost",
    );
    assert_eq!(
        stream(&redis),
        ledger_lines(&data),
        "each record shipped once"
    );
    let lines: Vec<String> = ledger_lines(&data)
        .into_iter()
        .filter(|l| l.contains("\"lost\""))
        .collect();
    assert_eq!(lines.len(), sent);
    assert_spent_is_the_ledgers_sum(&gw, "lost", &lines);
}

/// `allot.lua` takes at most half of what is left of a key's credit and of its slots, gives back what the
/// instance returns, takes nothing once the credit is cut below what is spent and held, and ends, giving
/// back all it holds; `ship.lua` takes a drawn request's cost out of its allotment as it counts it, and
/// counts it alone once the allotment is gone.
#[test]
fn an_allotment_takes_half_of_what_is_left_and_shipped_records_take_their_cost_out_of_it() {
    let redis = Redis::start(false);
    let money = include_str!("../src/store/lua/money.lua");
    let allot = format!("{money}\n{}", include_str!("../src/store/lua/allot.lua"));
    let ship = format!("{money}\n{}", include_str!("../src/store/lua/ship.lua"));
    for cmd in [
        vec!["HSET", "t:terms", "k", "10000||||a"],
        // Another instance's request holds 1000, and two slots are taken.
        vec![
            "HSET", "t:acct:k", "spent", "1000", "reserved", "1000", "inflight", "2",
        ],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    // id, then held, give, give slots, want, want slots, least, end
    let call_on = |id: &str, a: [&str; 7]| {
        let mut args = vec![
            "EVAL",
            &allot,
            "7",
            "t:acct:k",
            "t:res:k",
            "t:lease:k",
            "t:per:k",
            "t:terms",
            "t:win:k",
            "t:winv:k",
            id,
            "30000",
            "k",
            "",
            "",
            "1700000000",
            "d1",
            "w1",
            "m1",
            "1",
            "20",
        ];
        args.extend(a);
        // No rate limits: nothing in the window.
        args.extend(["", "", "1", "0", "0", "0", "", "0", "0", "50"]);
        let reply = redis.command(&args);
        assert_eq!(reply.as_deref(), Some("*13"), "{a:?}");
    };
    let call = |a: [&str; 7]| call_on("a1", a);
    let held = |entry: &str, reserved: &str, inflight: &str| {
        assert_eq!(redis.hget("t:res:k", "a1"), entry);
        assert_eq!(redis.hget("t:acct:k", "reserved"), reserved);
        assert_eq!(redis.hget("t:acct:k", "inflight"), inflight);
    };
    // 8000 left, 6000 asked: 4000; 18 slots free, 12 asked: 9.
    call(["", "0", "0", "6000", "12", "100", ""]);
    held("4000 0 9", "5000", "11");
    let ship_one = |start: &str, next: &str, id: &str, cost: &str| {
        let reply = redis.command(&[
            "EVAL",
            &ship,
            "7",
            "t:cursor",
            "t:usage",
            "t:acct:k",
            "t:res:k",
            "t:lease:k",
            "t:winv:k",
            "t:per:k",
            start,
            "",
            "1000",
            "0",
            next,
            id,
            cost,
            "5",
            "d1",
            "w1",
            "m1",
            "2026-11-28T00:00:00.000Z",
            "{}",
            "a1",
        ]);
        assert_eq!(reply.as_deref(), Some("*2"));
    };
    // A drawn request's record, shipped before its settlement: its cost counts, and leaves the allotment;
    // the marker 'p' makes the settlement, when it comes, count nothing (and go).
    ship_one("0", "10", "r1", "300");
    assert_eq!(redis.hget("t:acct:k", "spent"), "1300");
    held("3700 0 9", "4700", "11");
    assert_eq!(redis.hget("t:res:k", "r1"), "p");
    let settle_drawn = |id: &str, cost: &str| settle_k(&redis, &[(id, cost, "5")], "a1", &[]);
    // The markers of drawn requests this instance knows settled and shipped, removed.
    let forget = |ids: &[&str]| settle_k(&redis, &[], "", ids);
    assert_eq!(settle_drawn("r1", "300").as_deref(), Some(":0"));
    assert_eq!(
        settle_drawn("r1", "300").as_deref(),
        Some(":0"),
        "sent again"
    );
    assert_eq!(redis.hget("t:acct:k", "spent"), "1300");
    assert_eq!(
        redis.hget("t:res:k", "r1"),
        "p",
        "kept until this instance says"
    );
    held("3700 0 9", "4700", "11");
    // One settled first (the usual order): its cost counts then, out of the allotment, and leaves 's'; its
    // record, shipped, counts nothing and takes the marker away. Sent twice, the settlement counts once.
    assert_eq!(settle_drawn("r3", "250").as_deref(), Some(":1"));
    assert_eq!(settle_drawn("r3", "250").as_deref(), Some(":0"));
    assert_eq!(redis.hget("t:acct:k", "spent"), "1550");
    assert_eq!(redis.hget("t:per:k", "d1"), "550");
    held("3450 0 9", "4450", "11");
    assert_eq!(redis.hget("t:res:k", "r3"), "s");
    ship_one("10", "15", "r3", "250");
    assert_eq!(redis.hget("t:acct:k", "spent"), "1550");
    // Shipped naming its allotment (its settlement not yet known applied here): the marker stays, so the
    // settlement, sent again after a lost answer, still counts nothing.
    assert_eq!(redis.hget("t:res:k", "r3"), "s");
    assert_eq!(settle_drawn("r3", "250").as_deref(), Some(":0"));
    assert_eq!(redis.hget("t:acct:k", "spent"), "1550");
    held("3450 0 9", "4450", "11");
    assert_eq!(forget(&["r1", "r3"]).as_deref(), Some(":0"));
    assert_eq!(redis.hget("t:res:k", "r1"), "");
    assert_eq!(redis.hget("t:res:k", "r3"), "");
    // Given back: 2000 and four slots.
    call(["1", "2000", "4", "0", "0", "0", ""]);
    held("1450 0 5", "2450", "7");
    // The credit cut below what is spent and held: nothing more is taken, nothing is lost.
    assert!(redis
        .command(&["HSET", "t:terms", "k", "2000||||a"])
        .is_some());
    call(["1", "0", "0", "1000", "0", "100", ""]);
    held("1450 0 5", "2450", "7");
    // Ended: all it holds goes back, the entry with it.
    call(["1", "0", "0", "0", "0", "0", "1"]);
    held("", "1000", "2");
    assert_eq!(
        redis.command(&["ZSCORE", "t:lease:k", "a1"]).as_deref(),
        Some("")
    );
    // A record of it shipped after that counts its cost alone.
    ship_one("15", "20", "r2", "200");
    assert_eq!(redis.hget("t:acct:k", "spent"), "1750");
    held("", "1000", "2");
    assert_eq!(redis.int(&["XLEN", "t:usage"]), 3);
    // An allotment whose lease ran out (its instance could not renew it), asked for by its instance: the
    // call's own look gives it back, and says it is gone; what the look gave back is written.
    for cmd in [
        vec!["HSET", "t:res:k", "a2", "500 0 3"],
        vec!["ZADD", "t:lease:k", "1", "a2"],
        vec![
            "HSET", "t:acct:k", "reserved", "1500", "inflight", "5", "swept", "0",
        ],
    ] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    call_on("a2", ["1", "100", "1", "1000", "4", "100", ""]);
    assert_eq!(redis.hget("t:res:k", "a2"), "d");
    held("", "1000", "2");
}

/// `allot.lua` in the rate window: a slice takes half of the requests and tokens the window has room for at
/// most, as entries (the first carrying the tokens); the next call gives back the entries of the requests
/// not drawn and sets the slice's tokens to what its requests stand for, then takes the next slice; the end
/// gives back the last one's.
#[test]
fn an_allotment_takes_its_requests_and_tokens_as_window_entries_and_gives_back_the_unused() {
    let redis = Redis::start(false);
    let money = include_str!("../src/store/lua/money.lua");
    let allot = format!("{money}\n{}", include_str!("../src/store/lua/allot.lua"));
    // Ten admissions of other requests in the window, 100 tokens each.
    let mut seed = vec!["ZADD", "t:win:k"];
    let names: Vec<String> = (1..=10).map(|i| format!("e{i}")).collect();
    for n in &names {
        seed.extend(["9999999999999", n.as_str()]);
    }
    let mut tokens = vec!["HSET", "t:winv:k", "_total", "1000"];
    for n in &names {
        tokens.extend([n.as_str(), "100"]);
    }
    for cmd in [vec!["HSET", "t:terms", "k", "||||a"], seed, tokens] {
        assert!(redis.command(&cmd).is_some(), "{cmd:?}");
    }
    // held, end, slice number, requests asked, tokens asked, fewest tokens, slice before, its taken and
    // unused requests, then the slices' tokens now
    let call =
        |held: &str, end: &str, k: &str, want: [&str; 3], prev: [&str; 3], fixes: &[&str]| {
            let mut args = vec![
                "EVAL",
                &allot,
                "7",
                "t:acct:k",
                "t:res:k",
                "t:lease:k",
                "t:per:k",
                "t:terms",
                "t:win:k",
                "t:winv:k",
                "a3",
                "30000",
                "k",
                "",
                "",
                "1700000000",
                "d1",
                "w1",
                "m1",
                "",
                "",
                held,
                "0",
                "0",
                "0",
                "0",
                "0",
                end,
                "100",
                "10000",
                k,
            ];
            args.extend(want);
            args.extend(prev);
            args.push("50");
            args.extend(fixes);
            assert_eq!(redis.command(&args).as_deref(), Some("*13"));
        };
    let window = |card: i64, total: &str| {
        assert_eq!(redis.int(&["ZCARD", "t:win:k"]), card);
        assert_eq!(redis.hget("t:winv:k", "_total"), total);
    };
    // 90 requests and 9000 tokens of room: 45 (of 60 asked) and 4500 (of 8000).
    call("", "", "1", ["60", "8000", "400"], ["", "0", "0"], &[]);
    window(55, "5500");
    assert_eq!(redis.hget("t:winv:k", "a3:1:1"), "4500");
    assert_eq!(redis.hget("t:res:k", "a3"), "0 0 0");
    // Five requests drawn, at 100 tokens each estimated, three of them ended with 10 real tokens: the 40
    // entries not drawn go, the slice stands for 230 tokens; then 20 requests and 2000 tokens more.
    call(
        "1",
        "",
        "2",
        ["20", "2000", "400"],
        ["1", "45", "40"],
        &["a3:1:1", "230"],
    );
    window(35, "3230");
    assert_eq!(redis.hget("t:winv:k", "a3:1:1"), "230");
    assert_eq!(redis.hget("t:winv:k", "a3:2:1"), "2000");
    assert_ne!(
        redis.command(&["ZSCORE", "t:win:k", "a3:2:20"]).as_deref(),
        Some("")
    );
    // The end, nothing drawn from the second slice: its entries go, the first with its tokens.
    call(
        "1",
        "1",
        "3",
        ["0", "0", "0"],
        ["2", "20", "20"],
        &["a3:2:1", "0"],
    );
    window(15, "1230");
    assert_eq!(redis.hget("t:winv:k", "a3:2:1"), "");
    assert_eq!(redis.hget("t:res:k", "a3"), "");
}

/// An instance that drains (SIGTERM) keeps renewing the leases of the requests still running, so no other
/// instance sweeps their reservations as a dead instance's: a running request's lease deadline moves on
/// after the drain began, and the request then ends with its answer.
#[test]
fn a_draining_instance_keeps_renewing_the_leases_of_its_running_requests() {
    let redis = Redis::start(false);
    let held = Held::start();
    let dir = TempDir::new("store-path-drain");
    let mut c = config(dir.path(), &redis, "gw-drain", "shutdown_grace_secs = 120");
    c.push_str(&held.config());
    let mut gw = Gateway::spawn_with(dir, &c);
    let key = gw.add_key("draining", "limited", Some(1000.0));
    let mut s = std::net::TcpStream::connect(gw.addr).unwrap();
    let body =
        json!({"model": "held", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {key}");
    common::send_request(
        &mut s,
        "POST",
        "/v1/chat/completions",
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
        false,
    );
    let client =
        std::thread::spawn(move || common::read_response(&mut std::io::BufReader::new(s)).status);
    wait_for(
        || held.fake.received().len() == 1,
        "the request at the upstream",
    );
    let lease_key = "t:lease:draining";
    let live_past = |ms: u128| {
        common::redis::resp(
            redis.port,
            None,
            &["ZCOUNT", lease_key, &ms.to_string(), "+inf"],
        )
        .and_then(|r| r.first().cloned())
            == Some("1".to_string())
    };
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    assert!(live_past(now_ms()), "the request's lease is held");
    let drain_began = now_ms();
    common::signal(gw.pid(), "TERM");
    wait_for(|| gw.all_logs().contains("draining"), "the drain began");
    // A lease of 5 s renewed after the drain began ends 5 s after that at the earliest.
    wait_for(
        || live_past(drain_began + 5_000),
        "the lease renewed while draining",
    );
    held.open();
    assert_eq!(client.join().unwrap(), 200);
    assert_eq!(
        common::wait_exit(gw.child(), Duration::from_secs(60)),
        Some(0),
        "the drain ends once the request is done"
    );
}
