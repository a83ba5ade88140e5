//! The usage ledger on a disk that fills up: a real small file system (a tmpfs the test mounts; CI runs as
//! root and can, elsewhere the tests say `skipped` and pass). No 200 goes without a record: in default mode
//! records wait in memory and are written when the disk recovers, up to a bound past which new requests get
//! 503; in strict mode a record that cannot be synced turns its answer into an error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

fn config(disk: &Path, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\nledger_sync_ms = 20\n{extra}\n\
         [[upstreams]]\nname = \"mock\"\nkind = \"mock\"\nmock_delay_ms = 1\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\ninput_price = 1.0\noutput_price = 2.0\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        disk.join("data").display()
    )
}

fn chat(id: &str, stream: bool) -> Value {
    json!({"model": "mock", "stream": stream, "messages": [{"role": "user", "content": format!("disk {id}")}]})
}

fn post(gw: &Gateway, id: &str, stream: bool) -> Response {
    let auth = format!("Bearer {}", gw.key);
    gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", id)],
        chat(id, stream).to_string().as_bytes(),
    )
}

fn ledger_lines(disk: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(disk.join("data").join("usage.jsonl")).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a torn line was left in the ledger: {:?}",
        &text[text.len().saturating_sub(80)..]
    );
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad ledger line {l:?}: {e}")))
        .collect()
}

fn readyz_failing(gw: &Gateway) -> bool {
    let r = gw.request("GET", "/readyz", &[], b"");
    r.status == 503 && r.json()["ledger"] == "failing"
}

fn backlog(gw: &Gateway) -> u64 {
    let text = gw.request("GET", "/metrics", &[], b"").text();
    text.lines()
        .find_map(|l| l.strip_prefix("tollgate_ledger_backlog_records "))
        .map(|v| v.trim().parse::<f64>().unwrap() as u64)
        .unwrap()
}

/// Default mode: while the disk is full requests keep their 200s, their records wait in memory (readyz and
/// metrics say so), no torn line is left, and when the disk has room again every record is written, once.
#[test]
fn default_mode_keeps_every_record_while_the_disk_is_full() {
    let dir = TempDir::new("disk-default");
    let Some(disk) = Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let gw = Gateway::start_with(TempDir::new("disk-default-cfg"), &config(&disk.0, ""));
    assert_eq!(post(&gw, "before", false).status, 200);
    let filler = disk.fill();
    let mut ids = vec!["before".to_string()];
    // Records fill the ledger's last page first; then writes fail. Keep going until the gateway says so.
    for i in 0..400 {
        let id = format!("full-{i}");
        let r = post(&gw, &id, i % 2 == 1);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        ids.push(id);
        if i >= 10 && readyz_failing(&gw) && backlog(&gw) >= 5 {
            break;
        }
    }
    assert!(
        readyz_failing(&gw),
        "the ledger never failed on a full disk"
    );
    assert!(backlog(&gw) >= 5);
    assert!(gw.all_logs().contains("ERROR"), "the operator is told");
    ledger_lines(&disk.0);

    std::fs::remove_file(&filler).unwrap();
    wait_for(|| backlog(&gw) == 0, "the backlog to be written");
    wait_for(|| !readyz_failing(&gw), "readyz to recover");
    let lines = ledger_lines(&disk.0);
    for id in &ids {
        let n = lines
            .iter()
            .filter(|r| r["client_request_id"] == id.as_str())
            .count();
        assert_eq!(n, 1, "{id} has {n} records");
    }
    // Balances agree with the ledger.
    let spent: f64 = lines.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    let keys = gw.admin("/admin/keys").json();
    let key_spent = keys["data"][0]["spent"].as_f64().unwrap();
    assert!((spent - key_spent).abs() < 1e-9, "{spent} vs {key_spent}");
}

/// The memory bound: once `ledger_backlog_records` records are waiting, new requests get 503 until the
/// ledger writes again.
#[test]
fn the_backlog_is_bounded_and_then_requests_are_refused() {
    let dir = TempDir::new("disk-bound");
    let Some(disk) = Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let gw = Gateway::start_with(
        TempDir::new("disk-bound-cfg"),
        &config(&disk.0, "ledger_backlog_records = 3"),
    );
    let filler = disk.fill();
    let mut refused = None;
    for i in 0..400 {
        let r = post(&gw, &format!("b-{i}"), false);
        if r.status == 503 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = refused.expect("requests were never refused");
    assert_eq!(
        r.json()["error"]["code"],
        "ledger_unavailable",
        "{}",
        r.text()
    );
    assert!(r.header("retry-after").is_some());
    assert!(backlog(&gw) >= 3);
    std::fs::remove_file(&filler).unwrap();
    wait_for(|| backlog(&gw) == 0, "the backlog to be written");
    assert_eq!(post(&gw, "after", false).status, 200);
}

/// Strict mode: a record that cannot be synced turns a non-streaming answer into 503 and a stream's end into
/// the in-stream error; the record (saying so) is written once the disk recovers.
#[test]
fn strict_mode_answers_an_error_when_the_record_cannot_be_synced() {
    let dir = TempDir::new("disk-strict");
    let Some(disk) = Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let gw = Gateway::start_with(
        TempDir::new("disk-strict-cfg"),
        &config(&disk.0, "ledger_strict = true"),
    );
    assert_eq!(post(&gw, "ok", false).status, 200);
    let filler = disk.fill();
    let mut withheld = None;
    for i in 0..400 {
        let id = format!("s-{i}");
        let r = post(&gw, &id, false);
        if r.status != 200 {
            withheld = Some((id, r));
            break;
        }
    }
    let (id, r) = withheld.expect("strict mode never refused an answer on a full disk");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "ledger_unavailable");
    // While the ledger fails, strict mode refuses at once (no upstream call).
    let r = post(&gw, "refused", true);
    assert_eq!(r.status, 503, "{}", r.text());

    std::fs::remove_file(&filler).unwrap();
    wait_for(|| backlog(&gw) == 0, "the backlog to be written");
    let lines = ledger_lines(&disk.0);
    let rec = lines
        .iter()
        .find(|r| r["client_request_id"] == id.as_str())
        .expect("the withheld request's record");
    assert_eq!(rec["status"], 503, "{rec}");
    assert_eq!(rec["cost"], 0.0, "a withheld answer is not charged: {rec}");
    wait_for(
        || post(&gw, "again", false).status == 200,
        "strict mode to serve again",
    );
}

/// Strict mode, streaming: the stream's closing events give way to the in-stream error.
#[test]
fn strict_mode_turns_a_streams_end_into_an_error() {
    let dir = TempDir::new("disk-strict-stream");
    let Some(disk) = Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let gw = Gateway::start_with(
        TempDir::new("disk-strict-stream-cfg"),
        &config(&disk.0, "ledger_strict = true"),
    );
    let filler = disk.fill();
    let mut cut = None;
    for i in 0..400 {
        let r = post(&gw, &format!("st-{i}"), true);
        if r.status == 503 {
            // Refused at admission: an earlier record failed first (non-streaming requests are not sent here).
            panic!("refused before any stream failed: {}", r.text());
        }
        let events = r.events();
        if !events.iter().any(|(_, d)| d == "[DONE]") {
            cut = Some(events);
            break;
        }
    }
    let events = cut.expect("no stream ended with an error on a full disk");
    let last = &events.last().unwrap().1;
    assert!(last.contains("ledger_unavailable"), "{last}");
    assert!(
        last.contains("req_"),
        "the error carries the request id: {last}"
    );
    std::fs::remove_file(&filler).unwrap();
    wait_for(|| backlog(&gw) == 0, "the backlog to be written");
}

/// Retention frees a full disk: the checkpoint it must write before it deletes anything finds no room, so
/// the space kept for it (`.ledger-reserve`) is deleted to make room; the old files then go, the record
/// waiting is written, and the reserve is made again once there is room. (Strict: each record is written on
/// its own, so rotation by size does not depend on how requests fall into syncs.)
#[test]
fn retention_frees_a_full_disk_through_the_space_kept_for_its_checkpoint() {
    let dir = TempDir::new("disk-retention");
    let Some(disk) = Tmpfs::mount(dir.path(), "2m") else {
        return;
    };
    let clock = dir.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    let data = disk.0.join("data");
    let cfg_dir = TempDir::new("disk-retention-cfg");
    let cfg = cfg_dir.path().join("tollgate.toml");
    let extra = "ledger_strict = true\nledger_max_file_mb = 0.005\nledger_retention_days = 3\n\
                 ledger_checkpoint_records = 1000000";
    std::fs::write(&cfg, config(&disk.0, extra)).unwrap();
    let mut cmd = std::process::Command::new(bin());
    cmd.args(["serve", "--config"])
        .arg(&cfg)
        .env("TOLLGATE_TEST_CLOCK_FILE", &clock);
    let gw = Gateway::start_command(cfg_dir, &mut cmd);
    for i in 0..60 {
        assert_eq!(post(&gw, &format!("old-{i}"), false).status, 200);
    }
    let rotated = || {
        std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("usage-"))
            .count()
    };
    assert!(rotated() >= 3, "rotated by size");
    let reserve = data.join(".ledger-reserve");
    let kept = || std::fs::metadata(&reserve).is_ok_and(|m| m.len() >= 64 * 1024);
    wait_for(kept, "the reserve made");
    let filler = disk.fill();
    // Five days later (the ledger's clock): the next request rotates the file, and every rotated file is past
    // retention; their totals must be in a checkpoint before they go, and the disk has no room for one.
    std::fs::write(&clock, (5 * 86_400).to_string()).unwrap();
    let r = post(&gw, "day-5", false);
    assert!(r.status == 200 || r.status == 503, "{}", r.text());
    wait_for(|| rotated() == 0, "the files past retention deleted");
    wait_for(|| backlog(&gw) == 0, "the waiting record written");
    assert!(
        ledger_lines(&disk.0)
            .iter()
            .any(|r| r["client_request_id"] == "day-5"),
        "the record that waited"
    );
    assert!(
        gw.all_logs().contains("the space kept for this"),
        "the operator is told"
    );
    let cp: Value =
        serde_json::from_slice(&std::fs::read(data.join("ledger-checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(
        cp["retired"]["records"], 60,
        "what the deleted files held is kept"
    );
    // Room again: the next rotation's look makes the reserve again.
    std::fs::remove_file(&filler).unwrap();
    for i in 0..20 {
        assert_eq!(post(&gw, &format!("new-{i}"), false).status, 200);
    }
    wait_for(kept, "the reserve made again once there is room");
}
