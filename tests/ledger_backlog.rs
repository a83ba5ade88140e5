//! The ledger's backlog while it cannot write: the default limit of 100,000 waiting records fits in well under
//! 100 MB, and every waiting record is found by a query. Memory is counted by this test binary's own
//! allocator (exact, whatever else the machine runs), so the bound is a measurement, not a timing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)] // a test may unwrap and run long
#![allow(
    unsafe_code,
    reason = "a counting global allocator: GlobalAlloc is an unsafe trait"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use tollgate::ledger::{Filter, Ledger, Record, Status, DEFAULT_BACKLOG_LIMIT, LEDGER_FILE};
use tollgate::money::Money;

/// Bytes allocated and not yet freed, by every thread of this binary.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is passed to the system allocator with the caller's own arguments, so its contract
// is the system allocator's; the counter is an atomic that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires of it.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by this allocator (so by System) with `layout`, as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as in dealloc, and `new_size` is the caller's, valid for `layout`'s alignment.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A record as a busy gateway writes them (ids, names and an error of realistic length).
fn record(n: u64) -> Record {
    Record {
        ts: tollgate::util::rfc3339_millis(1_790_000_000_000 + n),
        request_id: format!("req_{n:024}"),
        client_request_id: Some(format!("client-{n:020}")),
        key: "production-app".into(),
        group: "default".into(),
        model: "claude-sonnet-4-6".into(),
        protocol: "messages".into(),
        upstream: "anthropic".into(),
        endpoint: None,
        stream: n.is_multiple_of(2),
        status: Status::Http(200),
        input_tokens: 1234,
        cached_input_tokens: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        output_tokens: 567,
        reasoning_tokens: 0,
        tier_above_input_tokens: None,
        estimated: false,
        cost: Money::from_f64(0.012345).unwrap(),
        latency_ms: 842,
        error: None,
        reason: None,
        requested_model: None,
        instance: Some("gw-1".into()),
        hosted_uses: Default::default(),
        service_tier: None,
        surcharge: None,
        cache: None,
    }
}

#[test]
fn a_full_backlog_fits_well_under_100_mb_and_every_waiting_record_is_found() {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-backlog-{}",
        tollgate::util::random_base62(8)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (ledger, _) = Ledger::open(&dir, Duration::from_millis(20), false).unwrap();
    // The ledger's path now names another file: the writer refuses to write through it and keeps every
    // record in memory (as when the disk is full).
    let path = dir.join(LEDGER_FILE);
    std::fs::hard_link(&path, dir.join("moved.jsonl")).unwrap();
    std::fs::write(dir.join("other.jsonl"), b"").unwrap();
    std::fs::rename(dir.join("other.jsonl"), &path).unwrap();
    ledger.append(record(0));
    assert!(!ledger.flush(), "the writer wrote through a replaced path");
    let n = DEFAULT_BACKLOG_LIMIT as u64 - 1;
    let before = LIVE.load(Ordering::Relaxed);
    for i in 1..=n {
        ledger.append(record(i));
    }
    // One write attempt: everything queued is now in the writer's backlog.
    assert!(!ledger.flush());
    assert_eq!(ledger.backlog(), DEFAULT_BACKLOG_LIMIT);
    let held = LIVE.load(Ordering::Relaxed) - before;
    let per_record = held / n as isize;
    eprintln!(
        "backlog of {n} records: {} MB, {per_record} bytes each",
        held >> 20
    );
    assert!(
        held < 80 << 20,
        "a backlog of {n} records holds {} MB ({per_record} bytes each)",
        held >> 20
    );
    // Records still waiting are found, the newest and the oldest.
    for i in [n, 0, n / 2] {
        let found = ledger
            .query(&Filter {
                client_request_id: Some(format!("client-{i:020}")),
                ..Filter::default()
            })
            .unwrap();
        assert_eq!(found.len(), 1, "record {i} while waiting");
        assert_eq!(found[0].request_id, format!("req_{i:024}"));
    }
    // Once the path names the ledger's file again, everything is written, once.
    std::fs::rename(dir.join("moved.jsonl"), &path).unwrap();
    let mut written = false;
    for _ in 0..200 {
        if ledger.flush() {
            written = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        written,
        "the backlog was not written after the path was put back"
    );
    let lines = std::fs::read_to_string(&path).unwrap().lines().count();
    assert_eq!(lines as u64, n + 1);
    let _ = std::fs::remove_dir_all(&dir);
}
