//! A ledger that lives for years (issue 32), through the real binary: a start replays only the records
//! after the checkpoint; a `kill -9` while a checkpoint is written loses nothing; the ledger rotates by size
//! and at UTC midnight (a test clock) under concurrent load without losing, repeating or reordering a record,
//! in strict mode too; retention deletes only files whose totals are in a checkpoint, and balances stay the
//! same across a restart; usage queries, the CSV and the overview read rotated and compressed files and
//! skip files outside the asked range; the free-space warning on a small tmpfs; the store's shipper and
//! `store rebuild` across rotated files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::redis::Redis;
use common::*;
use serde_json::{json, Value};

/// A config with a priced mock model, the admin token, a daily group budget (so budget periods are seen),
/// and `extra` at the top.
fn config(data: &Path, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nadmin_token_env = \"{ADMIN_TOKEN_ENV}\"\nledger_sync_ms = 10\n{extra}\n\
         [[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\ninput_price = 1.5\noutput_price = 2.25\n\n\
         [[groups]]\nname = \"default\"\nmodels = [\"*\"]\nbudget = 1000000.0\nbudget_period = \"daily\"\n",
        data.display()
    )
}

fn data(dir: &TempDir) -> PathBuf {
    dir.path().join("data")
}

fn start(dir: TempDir, extra: &str) -> Gateway {
    let c = config(&data(&dir), extra);
    Gateway::start_with(dir, &c)
}

/// As [`start`], as a `tollgate serve` process (to be killed with kill -9).
fn spawn(dir: TempDir, extra: &str) -> Gateway {
    let c = config(&data(&dir), extra);
    Gateway::spawn_with(dir, &c)
}

/// Starts again on the same data (a key made before), with the config written with `extra`.
fn restart(gw: Gateway, extra: &str) -> Gateway {
    let mut gw = gw;
    let key = gw.key.clone();
    let dir = TempDir(gw.dir.path().to_path_buf());
    gw.keep_dir();
    drop(gw);
    let c = config(&data(&dir), extra);
    Gateway::restart(dir, &c, &key)
}

/// Starts with `env` set for the server (a key is made first with the CLI).
fn start_env(dir: TempDir, extra: &str, env: &[(&str, &str)]) -> Gateway {
    let c = config(&data(&dir), extra);
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, &c).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config"]).arg(&cfg);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Gateway::start_command(dir, &mut cmd)
}

fn chat(id: &str) -> Value {
    json!({"model": "mock", "messages": [{"role": "user", "content": format!("history {id}")}]})
}

fn post(gw: &Gateway, id: &str) -> Response {
    let auth = format!("Bearer {}", gw.key);
    gw.request(
        "POST",
        "/v1/chat/completions",
        &[("authorization", &auth), ("x-client-request-id", id)],
        chat(id).to_string().as_bytes(),
    )
}

/// Waits for a log line containing `needle` and returns it.
fn log_wait(gw: &Gateway, needle: &str) -> String {
    let mut found = String::new();
    wait_for(
        || match gw.logs.lock().unwrap().iter().find(|l| l.contains(needle)) {
            Some(l) => {
                found = l.clone();
                true
            }
            None => false,
        },
        &format!("a log line with {needle:?}"),
    );
    found
}

/// The number before `word` in `line` ("12 records replayed" → 12).
fn number_before(line: &str, word: &str) -> u64 {
    let i = line
        .find(word)
        .unwrap_or_else(|| panic!("{word:?} in {line}"));
    line[..i]
        .split_whitespace()
        .last()
        .unwrap()
        .trim_start_matches('(')
        .parse()
        .unwrap_or_else(|_| panic!("a number before {word:?} in {line}"))
}

/// The rotated files of a data directory, oldest first: (seq, from, to, path, compressed).
fn segments(data: &Path) -> Vec<(u64, String, String, PathBuf, bool)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(data).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let (stem, gz) = match name.strip_suffix(".jsonl.gz") {
            Some(s) => (s, true),
            None => match name.strip_suffix(".jsonl") {
                Some(s) => (s, false),
                None => continue,
            },
        };
        let Some(rest) = stem.strip_prefix("usage-") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('-').collect();
        assert_eq!(parts.len(), 3, "a rotated file's name: {name}");
        out.push((
            parts[0].parse().unwrap(),
            parts[1].to_string(),
            parts[2].to_string(),
            e.path(),
            gz,
        ));
    }
    out.sort_by_key(|s| s.0);
    out
}

/// The text of a ledger file, decompressed when it is compressed (a plain file compressed since it was
/// listed is read under its new name).
fn read_text(path: &Path, gz: bool) -> String {
    let (bytes, gz) = match std::fs::read(path) {
        Ok(b) => (b, gz),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !gz => {
            let gz_path = PathBuf::from(format!("{}.gz", path.display()));
            (std::fs::read(gz_path).unwrap(), true)
        }
        Err(e) => panic!("{}: {e}", path.display()),
    };
    if !gz {
        return String::from_utf8(bytes).unwrap();
    }
    let mut out = String::new();
    flate2::read::MultiGzDecoder::new(&bytes[..])
        .read_to_string(&mut out)
        .unwrap();
    out
}

/// Every record of every ledger file, in the order written (rotated files by seq, then `usage.jsonl`).
fn all_records(data: &Path) -> Vec<Value> {
    let mut texts: Vec<String> = segments(data)
        .iter()
        .map(|s| read_text(&s.3, s.4))
        .collect();
    texts.push(std::fs::read_to_string(data.join("usage.jsonl")).unwrap_or_default());
    let mut out = Vec::new();
    for t in texts {
        assert!(
            t.is_empty() || t.ends_with('\n'),
            "a torn line in a ledger file"
        );
        out.extend(
            t.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{l}: {e}"))),
        );
    }
    out
}

/// The latest `ts` of the records in the ledger files.
fn newest_ts(data: &Path) -> String {
    all_records(data)
        .iter()
        .filter_map(|r| r["ts"].as_str().map(str::to_string))
        .max()
        .unwrap()
}

/// A key's figures as `/admin/keys` shows them: spent, spent in the budget period, last used.
fn balance(gw: &Gateway, name: &str) -> (f64, f64, Value) {
    let keys = gw.admin("/admin/keys").json();
    let k = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("no key {name} in {keys}"))
        .clone();
    (
        k["spent"].as_f64().unwrap(),
        k["budget"]["spent"].as_f64().unwrap(),
        k["last_used"].clone(),
    )
}

/// A generated record line.
fn line(n: u64, key: &str, ts_ms: u64, micro: u64) -> String {
    format!(
        "{{\"ts\":\"{}\",\"request_id\":\"req_gen{n:012}\",\"key\":\"{key}\",\"group\":\"default\",\"model\":\"mock\",\
         \"protocol\":\"chat\",\"upstream\":\"mock\",\"stream\":false,\"status\":200,\"input_tokens\":10,\
         \"output_tokens\":20,\"cost\":{}.{:06},\"latency_ms\":5,\"a_field_added_later\":{{\"x\":1}}}}\n",
        tollgate::util::rfc3339_millis(ts_ms),
        micro / 1_000_000,
        micro % 1_000_000
    )
}

/// Writes a generated history into `data`: `files` rotated files of `per_file` records (the last
/// `compressed` of them gzip'ed), then `usage.jsonl` with `per_file` more, every record of key `key`,
/// stamped from `from_ms` on, `step_ms` apart. Returns (records, total cost in micro-credits).
fn generate(
    data: &Path,
    key: &str,
    files: u64,
    compressed: u64,
    per_file: u64,
    from_ms: u64,
    step_ms: u64,
) -> (u64, u64) {
    std::fs::create_dir_all(data).unwrap();
    let mut n = 0u64;
    let mut total = 0u64;
    for f in 0..=files {
        let first = from_ms + n * step_ms;
        let mut text = String::new();
        for _ in 0..per_file {
            let micro = 1 + (n * 7919) % 10_000;
            text.push_str(&line(n, key, from_ms + n * step_ms, micro));
            total += micro;
            n += 1;
        }
        let last = from_ms + (n - 1) * step_ms;
        if f == files {
            std::fs::write(data.join("usage.jsonl"), text).unwrap();
            break;
        }
        let name = tollgate::ledger::segment_name(f + 1, first / 1000, last / 1000);
        if f >= files - compressed {
            let mut enc = flate2::write::GzEncoder::new(
                std::fs::File::create(data.join(format!("{name}.gz"))).unwrap(),
                flate2::Compression::fast(),
            );
            enc.write_all(text.as_bytes()).unwrap();
            enc.finish().unwrap();
        } else {
            std::fs::write(data.join(name), text).unwrap();
        }
    }
    (n, total)
}

/// Moves the ledger's test clock `shift` seconds ahead of the real one (written whole: the server may be
/// reading it).
fn set_clock(clock: &Path, shift: u64) {
    let tmp = clock.with_extension("tmp");
    std::fs::write(&tmp, shift.to_string()).unwrap();
    std::fs::rename(&tmp, clock).unwrap();
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(1.0)
}

/// Item 1: a generated history (rotated files, one compressed) is replayed whole at the first start, which
/// writes a checkpoint; after a `kill -9` the next start replays only the records written since, and every
/// balance (total, budget period, last use) is the same as before.
#[test]
fn a_start_replays_only_the_records_after_the_checkpoint() {
    let dir = TempDir::new("hist-checkpoint");
    // The key's records must be counted for the key the CLI makes: its name is `default`. They are all in
    // the past (the 2,000 s they span end a minute ago), so some are from yesterday when the test runs soon
    // after midnight (UTC): the budget period is what today's records sum to.
    let now = now_ms();
    let (generated, micro) = generate(&data(&dir), "default", 4, 1, 40_000, now - 2_060_000, 10);
    let today = tollgate::util::rfc3339_millis(now / 86_400_000 * 86_400_000);
    let todays: f64 = all_records(&data(&dir))
        .iter()
        .filter(|r| r["ts"].as_str().is_some_and(|t| t >= today.as_str()))
        .map(|r| r["cost"].as_f64().unwrap())
        .sum();
    let extra = "ledger_checkpoint_secs = 3600\nledger_checkpoint_records = 10000000";
    let gw = spawn(dir, extra);
    let l = log_wait(&gw, "replayed");
    assert_eq!(number_before(&l, "records replayed"), generated, "{l}");
    assert!(!l.contains("after the checkpoint"), "{l}");
    let cp = data(&gw.dir).join("ledger-checkpoint.json");
    wait_for(|| cp.exists(), "the checkpoint the start writes");
    let (spent, period, last) = balance(&gw, "default");
    assert!(close(spent, micro as f64 / 1e6), "{spent} vs {micro}");
    assert!(close(period, todays), "{period} vs today's {todays}");
    // Requests after the checkpoint.
    for i in 0..7 {
        assert_eq!(post(&gw, &format!("after-{i}")).status, 200);
    }
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    let (spent2, period2, last2) = balance(&gw, "default");
    assert!(spent2 > spent && last2 != last);
    signal(gw.pid(), "KILL");

    let gw = restart(gw, extra);
    let l = log_wait(&gw, "replayed");
    assert_eq!(
        number_before(&l, "records replayed"),
        7,
        "only what followed: {l}"
    );
    assert!(l.contains("after the checkpoint"), "{l}");
    assert_eq!(number_before(&l, "records in all"), generated + 7, "{l}");
    let (spent3, period3, last3) = balance(&gw, "default");
    assert!(close(spent3, spent2), "{spent3} vs {spent2}");
    assert!(close(period3, period2), "{period3} vs {period2}");
    // (A running gateway notes a key's last use when a request settles; a start reads it from the records.)
    assert!(last3.as_str() <= last2.as_str());
    assert_eq!(last3.as_str(), Some(newest_ts(&data(&gw.dir)).as_str()));
    let settings = gw.admin("/admin/settings").json();
    assert_eq!(settings["ledger"]["replayed_at_start"], 7);
    wait_for(
        || gw.admin("/admin/settings").json()["ledger"]["files"] == 5,
        "five files measured",
    );
}

/// Item 1: a `kill -9` while a checkpoint is being written (its temporary file complete, the rename not
/// done) loses nothing: the next start uses the previous checkpoint and replays more; the cut-short file,
/// and a torn one, are removed and never read.
#[test]
fn a_kill_during_a_checkpoint_write_loses_nothing() {
    let dir = TempDir::new("hist-kill");
    let extra = "ledger_checkpoint_secs = 3600\nledger_checkpoint_records = 5";
    let gw = start_env(dir, extra, &[("TOLLGATE_TEST_CHECKPOINT_PAUSE", "2")]);
    let data_dir = data(&gw.dir);
    let cp_path = data_dir.join("ledger-checkpoint.json");
    // Records until the first checkpoint is in place (a slow disk may take a while to sync it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut i = 0;
    while !cp_path.exists() {
        assert_eq!(post(&gw, &format!("first-{i}")).status, 200);
        i += 1;
        assert!(std::time::Instant::now() < deadline, "no checkpoint");
    }
    let cp1: Value = serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    let covered = cp1["totals"]["records"].as_u64().unwrap();
    assert!(covered >= 5, "{cp1}");
    // More records: the second checkpoint pauses before its rename.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut made = i;
    while !gw.all_logs().contains("paused before the rename") {
        assert_eq!(post(&gw, &format!("second-{made}")).status, 200);
        made += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "the second checkpoint never started"
        );
    }
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    let temps = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".ledger-checkpoint.json.") && n.ends_with(".tmp"))
            .collect()
    };
    assert_eq!(
        temps(&data_dir).len(),
        1,
        "the paused checkpoint's temporary file"
    );
    let (spent, _, _) = balance(&gw, "default");
    signal(gw.pid(), "KILL");
    // A torn temporary file too (a crash mid-write of its bytes).
    std::fs::write(
        data_dir.join(".ledger-checkpoint.json.torn0000000000.tmp"),
        "{\"version\":1,\"seq\":9,\"offset\":99999,\"tot",
    )
    .unwrap();
    // A compression of a rotated file cut short, and a temporary file that is not the ledger's.
    let gz_temp = data_dir
        .join(".usage-00000001-20260101T000000Z-20260102T000000Z.jsonl.gz.Ab3dEf9hIj2kLm4n.tmp");
    std::fs::write(&gz_temp, [0x1f, 0x8b, 8]).unwrap();
    let not_ours = data_dir.join(".notes.txt.Ab3dEf9hIj2kLm4n.tmp");
    std::fs::write(&not_ours, "mine").unwrap();
    let still: Value = serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    assert_eq!(
        still["totals"]["records"], covered,
        "the previous checkpoint is in force"
    );

    let gw = restart(gw, extra);
    let l = log_wait(&gw, "replayed");
    assert_eq!(number_before(&l, "records replayed"), made - covered, "{l}");
    assert_eq!(number_before(&l, "records in all"), made, "{l}");
    assert!(temps(&data_dir).is_empty(), "cut-short checkpoints removed");
    assert!(!gz_temp.exists(), "a cut-short compression removed");
    assert!(not_ours.exists(), "what is not the ledger's is left alone");
    let (spent2, _, _) = balance(&gw, "default");
    assert!(close(spent2, spent), "{spent2} vs {spent}");
    let records = all_records(&data_dir);
    assert_eq!(records.len() as u64, made);
    let sum: f64 = records.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    assert!(close(spent2, sum));
}

/// Whether a record is in the ledger files: the active file is read before the rotated ones are listed, so
/// a rotation in between cannot hide a record that was on disk.
fn on_disk(data: &Path, id: &str) -> bool {
    let needle = format!("\"client_request_id\":\"{id}\"");
    let active = std::fs::read_to_string(data.join("usage.jsonl")).unwrap_or_default();
    active.contains(&needle)
        || segments(data)
            .iter()
            .any(|s| read_text(&s.3, s.4).contains(&needle))
}

/// Sends requests from `clients` threads at once (ids `c{client}-{n}`), each up to `per_client` of them or
/// until `stop` is set; returns every id sent, per client in order. With `check`, client 0 looks now and then
/// that its record is on disk when its answer has ended (strict mode).
fn load(
    gw: &Arc<Gateway>,
    clients: usize,
    per_client: usize,
    stop: Arc<AtomicBool>,
    check: bool,
) -> Vec<Vec<String>> {
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (gw, stop) = (gw.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for n in 0..per_client {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let id = format!("c{c}-{n:05}");
                    let r = post(&gw, &id);
                    assert_eq!(r.status, 200, "{}", r.text());
                    if check && c == 0 && n % 20 == 0 {
                        assert!(
                            on_disk(&data(&gw.dir), &id),
                            "{id} answered before its record was on disk"
                        );
                    }
                    ids.push(id);
                }
                ids
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Stops the load threads when a test ends, also by a failure (so they let go of the gateway, which is then
/// stopped).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn no_stop() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// Every record once, each client's in the order it sent them, and rotated files named after what they hold.
fn check_every_record(data: &Path, sent: &[Vec<String>]) {
    let records = all_records(data);
    let ids: Vec<String> = records
        .iter()
        .map(|r| r["client_request_id"].as_str().unwrap().to_string())
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "a record written twice");
    let want: usize = sent.iter().map(Vec::len).sum();
    assert_eq!(ids.len(), want, "a record lost");
    let pos: HashMap<&String, usize> = ids.iter().enumerate().map(|(i, id)| (id, i)).collect();
    for client in sent {
        let order: Vec<usize> = client.iter().map(|id| pos[id]).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "records reordered");
    }
    for (seq, from, to, path, gz) in segments(data) {
        let text = read_text(&path, gz);
        let mut stamps: Vec<String> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["ts"].as_str().unwrap().to_string()
            })
            .collect();
        assert!(!stamps.is_empty(), "rotated file {seq} is empty");
        stamps.sort();
        let basic = |ts: &str| -> String { ts[..19].replace(['-', ':'], "") + "Z" };
        assert_eq!(basic(&stamps[0]), from, "file {seq}'s first time");
        assert_eq!(basic(stamps.last().unwrap()), to, "file {seq}'s last time");
    }
    let seqs: Vec<u64> = segments(data).iter().map(|s| s.0).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "rotated files numbered in order: {seqs:?}"
    );
}

/// Item 2: rotation by size under concurrent load, in strict mode: every record once, in order, each on
/// disk when its answer ends; usage queries read every file.
#[test]
fn rotation_by_size_under_load_keeps_every_record_in_strict_mode() {
    let dir = TempDir::new("hist-size");
    let gw = Arc::new(start(
        dir,
        "ledger_strict = true\nledger_max_file_mb = 0.02\nledger_checkpoint_records = 50",
    ));
    let sent = load(&gw, 8, 60, no_stop(), true);
    let data_dir = data(&gw.dir);
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200);
    let rotated = segments(&data_dir).len();
    assert!(
        rotated >= 5,
        "{rotated} rotations for ~150 KB at 20 KB a file"
    );
    for (_, _, _, p, _) in segments(&data_dir) {
        let len = std::fs::metadata(&p).unwrap().len();
        assert!(len <= 21_000, "{} is {len} bytes", p.display());
    }
    check_every_record(&data_dir, &sent);
    let usage = gw.admin("/admin/usage?limit=10000").json();
    assert_eq!(usage["data"].as_array().unwrap().len(), 480);
    assert_eq!(usage["totals"]["requests"], 480);
    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    wait_for(
        || {
            let s = gw.admin("/admin/settings").json();
            s["ledger"]["files"].as_u64() == Some(rotated as u64 + 1)
        },
        "the file count measured",
    );
    assert!(metrics.contains("tollgate_ledger_files "), "{metrics}");
    assert!(metrics.contains("tollgate_ledger_bytes "));
    assert!(metrics.contains("tollgate_data_disk_free_bytes "));
}

/// Item 2: rotation at UTC midnight (a test clock moved a day forward, twice) under concurrent load.
#[test]
fn rotation_at_midnight_under_load_keeps_every_record() {
    let dir = TempDir::new("hist-day");
    let clock = dir.path().join("clock");
    set_clock(&clock, 0);
    let clock_env = clock.display().to_string();
    let gw = Arc::new(start_env(
        dir,
        "",
        &[("TOLLGATE_TEST_CLOCK_FILE", &clock_env)],
    ));
    let stop = no_stop();
    let _stop_on_failure = StopOnDrop(stop.clone());
    let runner = {
        let (gw, stop) = (gw.clone(), stop.clone());
        std::thread::spawn(move || load(&gw, 6, 2_000, stop, false))
    };
    let data_dir = data(&gw.dir);
    // This thread's own requests, in order, besides the load: each is a write, so a moved clock is seen.
    let mut mine = Vec::new();
    let mut post_mine = |gw: &Gateway| {
        let id = format!("main-{:05}", mine.len());
        assert_eq!(post(gw, &id).status, 200);
        mine.push(id);
    };
    for (shift, files) in [(86_400, 1), (2 * 86_400, 2)] {
        for _ in 0..20 {
            post_mine(&gw);
        }
        // Written (so the file has begun on the day before the shift), then past midnight.
        assert_eq!(gw.admin("/admin/usage?limit=1").status, 200);
        set_clock(&clock, shift);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while segments(&data_dir).len() != files {
            assert!(
                std::time::Instant::now() < deadline,
                "no rotation at midnight: {:?} {:?} clock {:?}\n{}",
                segments(&data_dir),
                std::fs::read_dir(&data_dir)
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect::<Vec<_>>(),
                std::fs::read_to_string(&clock),
                gw.all_logs()
                    .lines()
                    .filter(|l| !l.contains("tollgate::request"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            post_mine(&gw);
        }
    }
    for _ in 0..20 {
        post_mine(&gw);
    }
    stop.store(true, Ordering::Relaxed);
    let mut sent = runner.join().unwrap();
    sent.push(mine);
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200);
    assert_eq!(
        segments(&data_dir).len(),
        2,
        "one rotation per midnight, no more"
    );
    check_every_record(&data_dir, &sent);
    wait_for(
        || gw.all_logs().contains("rotated usage.jsonl"),
        "the rotation logged",
    );
}

/// Item 3 and 4: old rotated files are compressed, then deleted by retention only once a checkpoint holds
/// their totals; queries and the CSV read compressed files; balances stay the same, also across a restart.
#[test]
fn retention_deletes_only_folded_files_and_balances_survive_a_restart() {
    let dir = TempDir::new("hist-retention");
    let clock = dir.path().join("clock");
    std::fs::write(&clock, "0").unwrap();
    let clock_env = clock.display().to_string();
    // Strict: each request's record is written on its own, so rotation by size does not depend on timing.
    let extra =
        "ledger_strict = true\nledger_max_file_mb = 0.005\nledger_retention_days = 3\nledger_compress_after_days = 1\n\
                 ledger_checkpoint_secs = 3600\nledger_checkpoint_records = 1000000";
    let gw = start_env(dir, extra, &[("TOLLGATE_TEST_CLOCK_FILE", &clock_env)]);
    let data_dir = data(&gw.dir);
    for i in 0..100 {
        assert_eq!(post(&gw, &format!("old-{i}")).status, 200);
    }
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    assert!(segments(&data_dir).len() >= 3, "rotated by size");
    let before = balance(&gw, "default");

    // Two days later (by the ledger's clock): the next request rotates the file (a new day), and every file
    // whose newest record is over a day old is compressed.
    set_clock(&clock, 2 * 86_400);
    assert_eq!(post(&gw, "day-2").status, 200);
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    // Files counted by their sequence number: while one is being compressed, its plain and compressed forms
    // may both be listed for a moment.
    let distinct = |d: &Path| {
        segments(d)
            .iter()
            .map(|s| s.0)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    let old = distinct(&data_dir);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !segments(&data_dir).iter().all(|s| s.4) {
        assert!(
            std::time::Instant::now() < deadline,
            "the old files not compressed: {:?}\n{}",
            segments(&data_dir),
            gw.all_logs()
                .lines()
                .filter(|l| !l.contains("tollgate::request"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(distinct(&data_dir), old);
    assert_eq!(segments(&data_dir).len(), old, "a file left in both forms");
    let usage = gw.admin("/admin/usage?limit=10000").json();
    assert_eq!(
        usage["data"].as_array().unwrap().len(),
        101,
        "compressed files are read"
    );
    assert_eq!(usage["totals"]["requests"], 101);
    let csv = gw.admin("/admin/usage.csv").text();
    assert_eq!(csv.lines().count(), 102, "a header and every record");
    assert!(csv.contains(",old-0,"));
    let one = gw.admin("/admin/usage?client_request_id=old-3").json();
    assert_eq!(one["data"].as_array().unwrap().len(), 1);

    // Five days later: the next request rotates again, and every rotated file (all hold records of the real
    // day, now five days old) goes, once the checkpoint holds what it held.
    set_clock(&clock, 5 * 86_400);
    assert_eq!(post(&gw, "day-5").status, 200);
    wait_for(
        || segments(&data_dir).is_empty(),
        "the files past retention deleted",
    );
    // The log line comes through the log writer thread: it may reach the harness a moment later.
    wait_for(
        || gw.all_logs().contains("ledger_retention_days"),
        "the retention logged",
    );
    let cp: Value =
        serde_json::from_slice(&std::fs::read(data_dir.join("ledger-checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(cp["retired_through"].as_u64().unwrap(), old as u64 + 1);
    assert_eq!(cp["retired"]["records"], 101, "what the deleted files held");
    assert_eq!(
        cp["totals"]["records"], 101,
        "and everything up to the rotation"
    );
    let after = balance(&gw, "default");
    assert!(after.0 > before.0);
    let usage = gw.admin("/admin/usage?limit=10000").json();
    assert_eq!(usage["data"].as_array().unwrap().len(), 1, "what is kept");

    // A restart counts the same balances: the deleted files' spend comes from the checkpoint.
    signal(gw.pid(), "KILL");
    let gw = restart(gw, extra);
    let again = balance(&gw, "default");
    assert!(close(again.0, after.0), "{again:?} vs {after:?}");
    assert!(close(again.1, after.1));
    assert_eq!(again.2.as_str(), Some(newest_ts(&data_dir).as_str()));
}

/// Item 4: queries with a time range, the CSV, the overview and a key's page read across rotated and
/// compressed files, and skip the files outside the range without opening them (a damaged file outside the
/// range does not stop them; asked for, it does).
#[test]
fn queries_read_across_files_and_skip_those_outside_the_range() {
    let dir = TempDir::new("hist-query");
    let data_dir = data(&dir);
    let now = now_ms();
    // Four files over the last 20 hours (the newest compressed), then usage.jsonl.
    let (n, _) = generate(
        &data_dir,
        "default",
        4,
        1,
        500,
        now - 20 * 3_600_000,
        20_000,
    );
    assert_eq!(n, 2500);
    let gw = start(dir, "");
    // A damaged compressed file from ten days ago (put there after the start, which would refuse it):
    // reading it fails.
    let old = now / 1000 - 10 * 86_400;
    std::fs::write(
        data_dir.join(format!(
            "{}.gz",
            tollgate::ledger::segment_name(0, old, old + 3600)
        )),
        b"not gzip at all",
    )
    .unwrap();
    let since = tollgate::util::rfc3339_millis(now - 20 * 3_600_000 + 700 * 20_000);
    let until = tollgate::util::rfc3339_millis(now - 20 * 3_600_000 + 1900 * 20_000);
    let r = gw.admin(&format!(
        "/admin/usage?limit=10000&since={since}&until={until}"
    ));
    assert_eq!(r.status, 200, "{}", r.text());
    let data = r.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 1200, "records 700..1900, from three files");
    assert_eq!(data[0]["request_id"], "req_gen000000001899", "newest first");
    assert_eq!(data[1199]["request_id"], "req_gen000000000700");
    let csv = gw.admin(&format!("/admin/usage.csv?since={since}&until={until}"));
    assert_eq!(csv.status, 200);
    assert_eq!(csv.text().lines().count(), 1201);
    // The compressed file alone, by paging from the newest.
    let page = gw
        .admin(&format!("/admin/usage?limit=3&offset=600&since={since}"))
        .json();
    assert_eq!(page["data"][0]["request_id"], "req_gen000000001899");
    let overview = gw.admin("/admin/overview?range=24h").json();
    assert_eq!(overview["last_day"]["requests"], 2500, "{overview}");
    let key_page = gw.admin("/admin/overview?range=24h&key=default").json();
    assert_eq!(key_page["last_day"]["requests"], 2500);
    // Everything asked for includes the damaged file: that is an error, not a silent gap.
    let all = gw.admin("/admin/usage?limit=100000");
    assert_eq!(all.status, 500, "{}", all.text());
}

/// Item 5: free space under `min_free_disk_mb` is a WARN, a `/readyz` detail (still ready), a metric and a
/// settings field, before any write fails; it clears when space comes back.
#[test]
fn low_free_space_is_warned_before_writes_fail() {
    let dir = TempDir::new("hist-disk");
    let Some(disk) = Tmpfs::mount(dir.path(), "32m") else {
        return;
    };
    let c = config(&disk.0.join("data"), "min_free_disk_mb = 16");
    let gw = Gateway::start_with(dir, &c);
    assert_eq!(post(&gw, "roomy").status, 200);
    let ready = gw.request("GET", "/readyz", &[], b"").json();
    assert_eq!(ready["disk"]["low"], false, "{ready}");
    // Fill the disk to about 24 MB used: 8 MB free.
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![1u8; 24 << 20]).unwrap();
    log_wait(&gw, "under min_free_disk_mb = 16");
    let r = gw.request("GET", "/readyz", &[], b"");
    assert_eq!(r.status, 200, "low space is a warning, not unready");
    let ready = r.json();
    assert_eq!(ready["disk"]["low"], true, "{ready}");
    assert!(ready["disk"]["warning"].as_str().unwrap().contains("free"));
    let metrics = gw.request("GET", "/metrics", &[], b"").text();
    assert!(metrics.contains("tollgate_data_disk_low 1"), "{metrics}");
    let s = gw.admin("/admin/settings").json();
    assert_eq!(s["ledger"]["low_disk"], true);
    assert!(s["ledger"]["free_disk_bytes"].as_u64().unwrap() < 16 << 20);
    assert_eq!(post(&gw, "still-written").status, 200, "writes still work");
    std::fs::remove_file(&filler).unwrap();
    log_wait(&gw, "free again");
    let ready = gw.request("GET", "/readyz", &[], b"").json();
    assert_eq!(ready["disk"]["low"], false);
}

/// The shipper follows the ledger across rotations: every record reaches the shared stream once; `store
/// rebuild` reads rotated and compressed files.
#[test]
fn the_store_gets_every_record_across_rotations_and_rebuilds_from_them() {
    let mut redis = Redis::start(false);
    let dir = TempDir::new("hist-store");
    let clock = dir.path().join("clock");
    set_clock(&clock, 0);
    let clock_env = clock.display().to_string();
    let extra = format!(
        "instance = \"gw-h\"\nledger_strict = true\nledger_max_file_mb = 0.005\nledger_compress_after_days = 0\n\
         ledger_retention_days = 3\n{}",
        // A machine busy with other tests may be slow to answer: no refusal for that here.
        redis.store_section("timeout_ms = 5000")
    );
    let gw = Arc::new(start_env(
        dir,
        &extra,
        &[("TOLLGATE_TEST_CLOCK_FILE", &clock_env)],
    ));
    let sent = load(&gw, 4, 40, no_stop(), false);
    let data_dir = data(&gw.dir);
    let usage = |gw: &Gateway| -> Vec<String> {
        gw.admin("/admin/usage?limit=10000").json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["client_request_id"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_for(|| usage(&gw).len() == 160, "every record shipped");
    let ids = usage(&gw);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 160, "none twice");
    check_every_record(&data_dir, &sent);
    assert!(segments(&data_dir).len() >= 3, "rotated by size");
    wait_for(
        || segments(&data_dir).iter().any(|s| s.4),
        "shipped files compressed",
    );
    let (spent, ..) = balance(&gw, "default");

    // The store loses its data; rebuilt from the ledger's files, it has the same spend.
    redis.restart();
    wait_for(
        || {
            let r = post(&gw, "while-lost");
            r.status == 503 && r.text().contains("lost its data")
        },
        "refusals while the store has lost its data",
    );
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    let (code, out, err) = gw.cli(&["store", "rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    let written = all_records(&data_dir).len();
    assert!(
        out.contains(&format!(": {written} records")),
        "{written}: {out}"
    );
    wait_for(
        || post(&gw, "after-rebuild").status == 200,
        "admission after the rebuild",
    );
    let (spent2, ..) = balance(&gw, "default");
    assert!(spent2 > spent - 1e-9, "{spent2} vs {spent}");
    wait_for(|| usage(&gw).len() >= 161, "the new record shipped");

    // Five days later the shipped files are past retention and go (their totals kept in the checkpoint).
    // The store loses its data again: rebuilt from the checkpoint's retired totals and what is left, every
    // balance, budget period included, is what it was.
    set_clock(&clock, 5 * 86_400);
    assert_eq!(post(&gw, "five-days-on").status, 200);
    wait_for(
        || segments(&data_dir).is_empty(),
        "the files past retention deleted",
    );
    wait_for(|| usage(&gw).len() >= 162, "the newest record shipped");
    let before = balance(&gw, "default");
    redis.restart();
    wait_for(
        || {
            let r = post(&gw, "lost-again");
            r.status == 503 && r.text().contains("lost its data")
        },
        "refusals while the store has lost its data",
    );
    assert_eq!(gw.admin("/admin/usage?limit=1").status, 200, "flushed");
    let (code, out, err) = gw.cli(&["store", "rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_for(
        || gw.request("GET", "/readyz", &[], b"").status == 200,
        "ready after the second rebuild",
    );
    let after = balance(&gw, "default");
    assert!(close(after.0, before.0), "spent {after:?} vs {before:?}");
    assert!(
        close(after.1, before.1),
        "budget period {after:?} vs {before:?}"
    );
    assert!(
        after.2.as_str() >= before.2.as_str(),
        "last use (refusals since count too)"
    );
}
