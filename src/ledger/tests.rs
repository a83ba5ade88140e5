//! Ledger tests; the disk-full ones run on a real, small tmpfs.

use super::*;
use crate::money::Money;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

fn record(key: &str, cost: f64, n: u64) -> Record {
    Record {
        ts: crate::util::rfc3339_millis(1_700_000_000_000 + n),
        request_id: format!("req_{n}"),
        client_request_id: None,
        key: key.into(),
        group: "g".into(),
        model: "m".into(),
        protocol: "chat".into(),
        upstream: "u".into(),
        endpoint: None,
        stream: false,
        status: Status::Http(200),
        input_tokens: 1,
        cached_input_tokens: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        output_tokens: 2,
        reasoning_tokens: 0,
        tier_above_input_tokens: None,
        estimated: false,
        cost: Money::from_f64(cost).unwrap(),
        latency_ms: 3,
        error: None,
        reason: None,
        requested_model: None,
        instance: None,
        hosted_uses: Default::default(),
        service_tier: None,
        surcharge: None,
        cache: None,
    }
}

#[test]
fn records_roundtrip_and_replay_totals_spend() {
    let dir =
        std::env::temp_dir().join(format!("tollgate-ledger-{}", crate::util::random_base62(8)));
    std::fs::create_dir_all(&dir).unwrap();
    {
        let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(50), false).unwrap();
        assert_eq!(replay.records, 0);
        ledger.append(record("a", 1.5, 1));
        ledger.append(record("a", 2.0, 2));
        let mut closed = record("b", 0.25, 3);
        closed.status = Status::ClientClosed;
        ledger.append(closed);
        let found = ledger.query(&Filter::default()).unwrap();
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].request_id, "req_3", "newest first");
        assert_eq!(found[0].status, Status::ClientClosed);
    }
    // A torn tail is cut off and reported; the rest still counts.
    let path = dir.join(LEDGER_FILE);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"ts\":\"2026-01-01T00:00:00.000Z\",\"key\":\"a\",\"co")
        .unwrap();
    drop(f);
    let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(50), true).unwrap();
    assert_eq!(replay.records, 3);
    assert!(replay.torn_bytes > 0);
    assert_eq!(replay.spent["a"], Money::from_f64(3.5).unwrap());
    assert_eq!(replay.spent["b"], Money::from_f64(0.25).unwrap());
    ledger.append(record("a", 1.0, 4));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4);
    ledger.try_append(record("a", 1.0, 5)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().count(),
        5,
        "strict: on disk when try_append returns"
    );
    assert_eq!(ledger.backlog(), 0);
    assert!(ledger.healthy() && ledger.accepting());
    assert_eq!(ledger.write_errors(), 0);
    assert!(text
        .lines()
        .all(|l| serde_json::from_str::<Record>(l).is_ok()));
    std::fs::remove_dir_all(dir).unwrap();
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tollgate-{tag}-{}", crate::util::random_base62(8)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A record whose line is about 600 bytes, so a few of them need more than one page of a file system.
fn big_record(n: u64) -> Record {
    let mut r = record("big", 0.5, n);
    r.error = Some(format!("padding {}", "x".repeat(500)));
    r
}

/// Request ids of a ledger file, checking that it ends with a complete line and every line is a record.
fn ids_in(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "torn line at the end of {}",
        path.display()
    );
    text.lines()
        .map(|l| {
            serde_json::from_str::<Record>(l)
                .unwrap_or_else(|e| panic!("not a record ({e}): {l}"))
                .request_id
        })
        .collect()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A small tmpfs, unmounted (lazily, so open files do not block it) and removed on drop, even when the
/// test fails.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = temp_dir("tmpfs");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output();
        let failure = match out {
            Ok(o) if o.status.success() => return Ok(Tmpfs { dir }),
            Ok(o) => format!(
                "{}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => e.to_string(),
        };
        let _ = std::fs::remove_dir(&dir);
        Err(failure)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Writes into `path` until the file system has no space left.
fn fill(path: &Path) -> File {
    let mut f = File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling the file system: {e}"),
        }
    }
    f
}

#[test]
fn a_full_disk_keeps_records_in_memory_until_it_has_room_again() {
    let fs = match Tmpfs::mount("512k") {
        Ok(fs) => fs,
        Err(e) => {
            println!("skipped: cannot mount tmpfs ({e})");
            return;
        }
    };
    let (dir_a, dir_s, dir_c) = (fs.dir.join("a"), fs.dir.join("s"), fs.dir.join("c"));
    for d in [&dir_a, &dir_s, &dir_c] {
        std::fs::create_dir(d).unwrap();
    }
    let sync = Duration::from_millis(20);
    let (ledger, _) = Ledger::open(&dir_a, sync, false).unwrap();
    let (strict, _) = Ledger::open(&dir_s, sync, true).unwrap();
    let (closing, _) = Ledger::open(&dir_c, sync, false).unwrap();
    let (path_a, path_s, path_c) = (
        dir_a.join(LEDGER_FILE),
        dir_s.join(LEDGER_FILE),
        dir_c.join(LEDGER_FILE),
    );
    for i in 0..3 {
        ledger.append(big_record(i));
    }
    assert!(ledger.flush());
    assert_eq!(ids_in(&path_a).len(), 3);

    let filler_path = fs.dir.join("filler");
    let filler = fill(&filler_path);

    // Default mode: every record is taken at once and kept in memory (37 lines need more than the page
    // the file already has, so the write fails part-way and is cut back).
    for i in 3..40 {
        assert!(ledger.try_append(big_record(i)).is_ok());
    }
    assert!(!ledger.flush(), "flush returns after one failed attempt");
    assert!(!ledger.healthy());
    assert!(ledger.write_errors() >= 1);
    assert_eq!(ledger.backlog(), 37);
    assert!(ledger.accepting(), "default mode accepts below the limit");
    ledger.set_backlog_limit(37);
    assert!(!ledger.accepting(), "backlog at its limit");
    ledger.set_backlog_limit(DEFAULT_BACKLOG_LIMIT);
    assert_eq!(
        ids_in(&path_a),
        ["req_0", "req_1", "req_2"],
        "the failed batch left nothing behind"
    );
    // Queries find the records still in memory, newest first, paged across memory and file.
    let all = ledger.query(&Filter::default()).unwrap();
    assert_eq!(all.len(), 40);
    assert_eq!(all[0].request_id, "req_39");
    assert_eq!(all[39].request_id, "req_0");
    let page = ledger
        .query(&Filter {
            offset: 35,
            limit: 4,
            ..Filter::default()
        })
        .unwrap();
    let page: Vec<&str> = page.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(page, ["req_4", "req_3", "req_2", "req_1"]);

    // Strict mode: the record comes back at once; requeued (amended), it waits in memory. (Whatever another
    // writer freed meanwhile, a temporary checkpoint say, is taken first: the disk is full again.)
    let filler_again = fill(&fs.dir.join("filler-again"));
    let rec = big_record(100);
    let back = strict.try_append(rec.clone()).unwrap_err();
    assert_eq!(*back, rec);
    assert!(!strict.healthy());
    assert!(!strict.accepting(), "strict mode refuses while writes fail");
    assert_eq!(strict.backlog(), 0);
    let mut amended = *back;
    amended.status = Status::Http(500);
    strict.requeue(amended);
    assert_eq!(strict.backlog(), 1);
    assert_eq!(std::fs::metadata(&path_s).unwrap().len(), 0);

    // Closing while the disk is full: what cannot be written is logged and counted.
    for i in 200..203 {
        closing.append(big_record(i));
    }
    assert_eq!(closing.close(Duration::from_millis(300)), 3);
    assert_eq!(closing.backlog(), 0);

    // Room again: the backlogs are written by the writer's own retries, each record exactly once.
    drop(filler);
    std::fs::remove_file(&filler_path).unwrap();
    drop(filler_again);
    std::fs::remove_file(fs.dir.join("filler-again")).unwrap();
    wait_until("the backlogs to be written", || {
        ledger.backlog() == 0 && strict.backlog() == 0
    });
    assert!(ledger.healthy() && strict.healthy() && strict.accepting());
    let expected: Vec<String> = (0..40).map(|i| format!("req_{i}")).collect();
    assert_eq!(ids_in(&path_a), expected);
    assert_eq!(ids_in(&path_s), ["req_100"]);
    let text = std::fs::read_to_string(&path_s).unwrap();
    assert_eq!(
        serde_json::from_str::<Record>(text.trim_end())
            .unwrap()
            .status,
        Status::Http(500)
    );
    assert!(
        ids_in(&path_c).is_empty(),
        "closed records are not written later"
    );
    assert!(ledger.flush());
}

/// Issue 39, 0: a record is found from the moment it is queued, also when the writer does not answer the
/// query in time (a busy machine, a slow disk): what is queued and what the writer holds unsynced are read
/// from memory, each record once.
#[test]
fn a_queued_record_is_found_when_the_writer_does_not_answer_in_time() {
    let dir = temp_dir("ledger-stalled");
    let (ledger, _) = Ledger::open(&dir, Duration::from_secs(3600), false).unwrap();
    ledger.append(record("a", 1.0, 1));
    assert!(ledger.flush());
    ledger.append(record("a", 1.0, 2));
    ledger.shared.stall.store(true, Ordering::SeqCst);
    ledger.append(record("a", 1.0, 3));
    let found = ledger.query(&Filter::default()).unwrap();
    let ids: Vec<&str> = found.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["req_3", "req_2", "req_1"]);
    ledger.shared.stall.store(false, Ordering::SeqCst);
    assert!(ledger.flush());
    assert_eq!(ledger.in_memory().len(), 0, "nothing left unsynced");
    assert_eq!(ledger.query(&Filter::default()).unwrap().len(), 3);
}

/// The soak's missed look-up after the first fix: a query's flush drained in the same round as another
/// message, after that round's first look at the inbox, was answered "all written" while the record its
/// client had queued before asking still waited in the inbox; the file was read without it.
#[test]
fn a_flush_drained_later_in_a_round_covers_what_was_queued_before_it() {
    let dir = temp_dir("ledger-drained-flush");
    let (ledger, _) = Ledger::open(&dir, Duration::from_secs(3600), false).unwrap();
    ledger.shared.stall.store(true, Ordering::SeqCst);
    ledger.append(record("a", 1.0, 1));
    std::thread::scope(|s| {
        // A first flush: the writer takes it with the inbox (record 1), then is held.
        s.spawn(|| ledger.flush_within(Duration::from_millis(1), false));
        while lock(&ledger.shared.unsynced).is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Record 2 is queued, then a query's flush waits in the channel behind the held round.
        ledger.append(record("a", 1.0, 2));
        let query = s.spawn(|| ledger.query(&Filter::default()).unwrap());
        while ledger.tx.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        ledger.shared.stall.store(false, Ordering::SeqCst);
        let found = query.join().unwrap();
        let ids: Vec<&str> = found.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["req_2", "req_1"]);
    });
    assert!(ledger.flush());
}

#[test]
fn replay_refuses_impossible_records() {
    let dir = temp_dir("ledger-replay");
    let good = serde_json::to_string(&record("a", 1.0, 1)).unwrap();
    let negative = serde_json::to_string(&record("a", -1000.0, 2)).unwrap();
    let huge = good.replace("\"cost\":1.0", "\"cost\":1e999");
    let minus_tokens = good.replace("\"input_tokens\":1", "\"input_tokens\":-5");
    let float_tokens = good.replace("\"output_tokens\":2", "\"output_tokens\":1.5");
    for (a, b) in [
        (&huge, &good),
        (&minus_tokens, &good),
        (&float_tokens, &good),
    ] {
        assert_ne!(a, b, "the test's replacement must change the line");
    }
    let lines = [
        good.as_str(),
        &negative,
        &huge,
        &minus_tokens,
        &float_tokens,
        "not json",
    ];
    std::fs::write(dir.join(LEDGER_FILE), lines.join("\n") + "\n").unwrap();
    let (_ledger, replay) = Ledger::open(&dir, Duration::from_millis(50), false).unwrap();
    assert_eq!(replay.records, 1);
    assert_eq!(replay.bad_lines, 5);
    assert_eq!(replay.spent.len(), 1);
    assert_eq!(replay.spent["a"], Money::from_f64(1.0).unwrap());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_ledger_file_is_private_whatever_the_umask() {
    let dir = temp_dir("ledger-mode");
    let old = rustix::process::umask(rustix::fs::Mode::empty());
    let opened = Ledger::open(&dir, Duration::from_millis(50), false);
    rustix::process::umask(old);
    let (ledger, _) = opened.unwrap();
    ledger.append(record("a", 1.0, 1));
    assert!(ledger.flush());
    let mode = std::fs::metadata(dir.join(LEDGER_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn shutdown_status_roundtrips_and_filters() {
    let mut r = record("a", 1.0, 1);
    r.status = Status::Shutdown;
    let line = serde_json::to_string(&r).unwrap();
    assert!(line.contains("\"status\":\"shutdown\""), "{line}");
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.status, Status::Shutdown);
    let by = |s: &str| Filter {
        status: StatusFilter::parse(s),
        ..Filter::default()
    };
    assert!(by("shutdown").matches(&back));
    assert!(by("error").matches(&back));
    assert!(!by("client_closed").matches(&back));
    assert!(!by("200").matches(&back));
}

fn tmp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-ledger-{tag}-{}",
        crate::util::random_base62(8)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A ledger file moved away while in use is made again at the path with everything written so far, and
/// records continue there: a replay counts every record, once.
#[test]
fn a_ledger_moved_away_is_made_again_with_what_it_held() {
    let dir = tmp_dir("moved");
    let path = dir.join(LEDGER_FILE);
    let (ledger, _) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
    ledger.append(record("a", 1.0, 1));
    ledger.append(record("a", 2.0, 2));
    assert!(ledger.flush());
    std::fs::rename(&path, dir.join("moved.jsonl")).unwrap();
    ledger.append(record("a", 4.0, 3));
    assert!(ledger.flush());
    assert!(ledger.healthy(), "{:?}", ledger.problem());
    let lines = lines_of(&path);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines_of(&dir.join("moved.jsonl")).len(), 2);
    // Deleted, with nothing queued: the idle check makes it again.
    std::fs::remove_file(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::symlink_metadata(&path).is_err() {
        assert!(Instant::now() < deadline, "the ledger was not made again");
        std::thread::sleep(Duration::from_millis(20));
    }
    ledger.append(record("b", 8.0, 4));
    assert!(ledger.flush());
    drop(ledger);
    let (_, replay) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
    assert_eq!(replay.records, 4);
    assert_eq!(replay.spent["a"], Money::from_f64(7.0).unwrap());
    assert_eq!(replay.spent["b"], Money::from_f64(8.0).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ledger path that names another file (or a link) is never written: records wait in memory, the
/// ledger is unhealthy with the reason (naming the file, not the directory), and when the file is moved
/// away every record is written, once, in a ledger made again with what it held.
#[test]
fn a_ledger_replaced_by_another_file_is_not_written() {
    let dir = tmp_dir("replaced");
    let path = dir.join(LEDGER_FILE);
    let (ledger, _) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
    ledger.append(record("a", 1.0, 1));
    assert!(ledger.flush());
    std::fs::rename(&path, dir.join("old.jsonl")).unwrap();
    std::fs::write(&path, "planted\n").unwrap();
    ledger.append(record("a", 2.0, 2));
    assert!(!ledger.flush());
    assert!(!ledger.healthy());
    let why = ledger.problem().unwrap();
    assert!(why.contains("replaced by another file"), "{why}");
    assert!(!why.contains(&*dir.to_string_lossy()), "{why}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "planted\n");
    assert_eq!(ledger.backlog(), 1);
    // A link is no better.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.join("old.jsonl"), &path).unwrap();
    assert!(!ledger.flush());
    assert_eq!(lines_of(&dir.join("old.jsonl")).len(), 1);
    std::fs::remove_file(&path).unwrap();
    assert!(ledger.flush());
    assert!(ledger.healthy() && ledger.problem().is_none());
    let lines = lines_of(&path);
    assert_eq!(lines.len(), 2, "{lines:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A ledger that is a link, or another user's file, is refused at open, and nothing is written through it.
#[test]
fn a_planted_ledger_is_refused_at_open() {
    use std::os::unix::fs::MetadataExt;
    let dir = tmp_dir("planted");
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join(LEDGER_FILE)).unwrap();
    let e = Ledger::open(&dir, Duration::from_millis(20), false)
        .err()
        .unwrap();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    std::fs::remove_file(dir.join(LEDGER_FILE)).unwrap();
    if crate::util::effective_uid() == 0 {
        std::fs::write(dir.join(LEDGER_FILE), "").unwrap();
        std::os::unix::fs::chown(dir.join(LEDGER_FILE), Some(65534), Some(65534)).unwrap();
        let e = Ledger::open(&dir, Duration::from_millis(20), false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("belongs to another user"), "{e}");
        assert_eq!(std::fs::metadata(dir.join(LEDGER_FILE)).unwrap().size(), 0);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_that_does_not_match_the_files_is_not_used() {
    let dir = temp_dir("cp-mismatch");
    {
        let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
        assert!(replay.checkpoint.is_none());
        for n in 0..5 {
            ledger.append(record("a", 1.0, n));
        }
        assert_eq!(ledger.close(Duration::from_secs(5)), 0);
    }
    assert!(
        dir.join(CHECKPOINT_FILE).exists(),
        "a clean close writes one"
    );
    {
        let (_ledger, replay) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
        assert_eq!(replay.records, 0, "nothing after the checkpoint");
        assert_eq!(replay.total_records, 5);
        assert_eq!(replay.spent["a"], Money::from_f64(5.0).unwrap());
    }
    // The ledger replaced by another one (restored from elsewhere): its first line differs.
    let other: String = (10..13)
        .map(|n| serde_json::to_string(&record("b", 2.0, n)).unwrap() + "\n")
        .collect();
    std::fs::write(dir.join(LEDGER_FILE), other).unwrap();
    let (_ledger, replay) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
    assert!(replay.checkpoint.is_none(), "not used");
    assert_eq!(replay.records, 3, "every record of the files there");
    assert!(!replay.spent.contains_key("a"));
    assert_eq!(replay.spent["b"], Money::from_f64(6.0).unwrap());
    std::fs::remove_dir_all(dir).unwrap();
}

/// What the writer hands the shipper of a record is what a reader parsing its line finds, to the unit.
#[test]
fn record_facts_are_what_the_line_gives_back() {
    let units = [
        0,
        1,
        123_456_789,
        1_224_000_000_000,
        987_654_321_987_654_321,
        123_456_789_012_345_678_901,
    ];
    for (n, u) in units.into_iter().enumerate() {
        let mut rec = record("k", 0.0, n as u64);
        rec.cost = Money::from_units(u);
        rec.output_tokens = 7 + n as u64;
        let facts = RecordFacts::of(&rec).unwrap();
        let line = serde_json::to_string(&rec).unwrap();
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(facts.cost, back.cost, "{u}");
        assert_eq!(facts.key, back.key);
        assert_eq!(facts.request_id, back.request_id);
        assert_eq!(facts.ts, back.ts);
        assert_eq!(facts.tokens, back.input_tokens + back.output_tokens);
    }
}
