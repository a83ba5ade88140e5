//! The usage ledger: one JSON line per request that reached an upstream, in `data_dir/usage.jsonl`, rotated
//! into `usage-SEQ-FROM-TO.jsonl` files (`files.rs`) by size (`ledger_max_file_mb`) and at UTC midnight.
//!
//! Workers hand records to one writer thread (`writer.rs`) and never wait for the disk: a record nobody waits
//! for goes into an inbox the writer takes at its next sync (queueing it wakes no thread); a strict-mode
//! record, a flush and the close go over a channel that wakes the writer at once. The writer batches lines and writes and syncs them every `sync_interval` (so a `kill -9` loses at
//! most that much); in strict mode each record is synced before the worker lets its response end. A record
//! leaves the writer's memory only once it is written and synced: when a write or sync fails (disk full, I/O
//! error) the file is cut back to its last complete line and every unwritten record is kept, in order, and
//! retried every 500 ms (strict-mode records are handed back to their caller at once instead). Rotation
//! happens between two writes, so no record is split, lost, repeated or reordered by it.
//!
//! What the records add up to (`totals.rs`) is kept in a checkpoint (`checkpoint.rs`) every
//! `ledger_checkpoint_records` records or `ledger_checkpoint_secs`; a start reads it and replays only the
//! records after it (`replay.rs`). The keeper thread (`keeper.rs`) writes checkpoints, compresses and deletes
//! old rotated files, and measures the files and the disk. Readers see every file (`query.rs`, [`History`]).
//! The one follower of the ledger (the store's shipper) also gets each synced line from the writer's memory
//! with what its record says ([`SyncedLine`], `take_synced`), bounded, the files staying the truth.
//!
//! The ledger opens only regular files this user owns, never through a symbolic link (checked on the open
//! descriptor); the writer notices its file moved away, deleted or replaced while it runs (`writer.rs`).

mod checkpoint;
mod files;
mod keeper;
pub mod options;
mod query;
mod replay;
pub mod totals;
mod writer;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{unbounded, SendError, Sender};
use serde::{Deserialize, Serialize};

use crate::budget::PeriodSpend;
use crate::money::Money;

pub use checkpoint::CHECKPOINT_FILE;
pub use files::{complete_len, fingerprint, segment_name, Active, History, Segment};
pub use options::Options;
pub use query::{CacheFilter, Filter, StatusFilter};
pub use totals::{KeyTotals, Totals};

/// File name of the ledger inside `data_dir`.
pub const LEDGER_FILE: &str = "usage.jsonl";

/// Default for [`Ledger::set_backlog_limit`] (a setting, so the config's).
pub use crate::config::ledger::DEFAULT_BACKLOG_LIMIT;

/// How long `flush` waits for the writer's answer (it answers after one write attempt; only a disk that
/// hangs inside a write or sync makes it wait this long).
const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// How long `query` waits for its flush before reading the file anyway.
const QUERY_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// The status a request ended with: the HTTP status the client got, `client_closed` when the client went
/// away before the answer was complete, or `shutdown` when the server's shutdown deadline cut it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Http(u16),
    ClientClosed,
    Shutdown,
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Status::Http(c) => s.serialize_u16(*c),
            Status::ClientClosed => s.serialize_str("client_closed"),
            Status::Shutdown => s.serialize_str("shutdown"),
        }
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Code(u16),
            Text(String),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Code(c) => Status::Http(c),
            Raw::Text(t) if t == "client_closed" => Status::ClientClosed,
            Raw::Text(t) if t == "shutdown" => Status::Shutdown,
            Raw::Text(t) => Status::Http(t.parse().unwrap_or(0)),
        })
    }
}

/// One request's usage record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// When the request arrived (RFC 3339, UTC, milliseconds).
    pub ts: String,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_request_id: Option<String>,
    pub key: String,
    pub group: String,
    pub model: String,
    pub protocol: String,
    /// The upstream that answered; empty (`null` in the file) for a request the gateway refused itself.
    #[serde(serialize_with = "upstream_out", deserialize_with = "upstream_in")]
    pub upstream: String,
    pub stream: bool,
    pub status: Status,
    /// All input: uncached, cache reads and cache writes.
    pub input_tokens: u64,
    /// The input read from a cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// The input written to a cache for five minutes (or for a lifetime the upstream did not state).
    #[serde(default)]
    pub cache_write_5m_tokens: u64,
    /// The input written to a cache for an hour.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
    /// All output, reasoning included.
    pub output_tokens: u64,
    /// The output that was reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// The long-context tier the request was billed at (its `above_input_tokens`); none: the base prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_above_input_tokens: Option<u64>,
    /// Tokens were estimated from the text because the upstream reported none.
    #[serde(default)]
    pub estimated: bool,
    /// Credits charged.
    pub cost: Money,
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model name the client asked for, when it is not the serving entry's `model` (an alias, or a
    /// name a pattern matched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
    /// Why the gateway refused the request itself (no upstream was called): `model_not_allowed`,
    /// `model_not_found`, `rate_limited`, `insufficient_quota`, `upstream_unavailable`, `invalid_request`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The instance that served the request (with a `[store]`, or when `instance` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Uses of paid hosted tools billed, per tool family (`web_search`: 3); their cost is in `cost`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosted_uses: BTreeMap<String, u64>,
    /// The paid service tier billed (`priority`); its price is in `cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// A field that raised the rate of every token (`inference_geo=us`); its multiplier is in `cost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surcharge: Option<String>,
    /// A request to a model whose answers are cached: `hit` (answered from the cache, at no cost), `miss`
    /// or `bypass` (not looked up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheUse>,
}

/// What the answer cache did for a request (`Record::cache`, the `x-tollgate-cache` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheUse {
    /// Answered from the cache.
    Hit,
    /// Looked up and not found (or the shared store did not answer): answered by an upstream.
    Miss,
    /// Not looked up: the client said `no-store` or `no-cache`, or the request is not one the cache keeps.
    Bypass,
}

impl CacheUse {
    pub fn name(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Bypass => "bypass",
        }
    }
}

fn upstream_out<S: serde::Serializer>(u: &str, s: S) -> Result<S::Ok, S::Error> {
    if u.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(u)
    }
}

fn upstream_in<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// What the replay at start found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Total cost per key name.
    pub spent: HashMap<String, Money>,
    /// Spend per key in the day, week and month holding the replay time (for budgets).
    pub periods: HashMap<String, PeriodSpend>,
    /// When each key was last used (the latest `ts` of its records).
    pub last_used: HashMap<String, String>,
    /// Records read at this start (those after the checkpoint).
    pub records: u64,
    /// Records counted in all, the checkpoint's included.
    pub total_records: u64,
    /// The checkpoint the start began from: when it was written, and how many records it covers.
    pub checkpoint: Option<(String, u64)>,
    /// Files read (or read from the checkpoint's position on).
    pub files: u64,
    /// Lines that did not parse or held an impossible record (skipped, not counted).
    pub bad_lines: u64,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes: u64,
}

/// The ledger's files and disk as last measured (every 2 s), for metrics, `/admin/settings` and `/readyz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Bytes of every ledger file (compressed ones as they are on disk).
    pub bytes: u64,
    /// Files, the active one included.
    pub files: u64,
    pub compressed_files: u64,
    /// The `ts` of the oldest record kept (RFC 3339; None while there is none).
    pub oldest_record: Option<String>,
    /// Free bytes on the data disk for tollgate's user (None when it cannot be measured).
    pub free_bytes: Option<u64>,
    /// `free_bytes` is under `min_free_bytes`.
    pub low_disk: bool,
    pub min_free_bytes: u64,
    /// When the last checkpoint was written, and how many records it covers.
    pub checkpoint_written: Option<String>,
    pub checkpoint_records: u64,
    /// Records replayed at start (those after the checkpoint).
    pub replayed_at_start: u64,
}

/// A lock, also when a thread panicked holding it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// What a strict-mode caller gets back: `Err` hands the record back when its write failed.
type Ack = Sender<Result<(), Box<Record>>>;

/// The answer to a flush: whether nothing is left unwritten, and (when asked for) the lines of what is, oldest
/// first.
type FlushAck = Sender<(bool, Vec<Arc<[u8]>>)>;

enum Msg {
    /// A record; the sender is there when the caller waits (strict mode).
    Record(Box<Record>, Option<Ack>),
    /// The inbox has grown large: write before the sync interval is up.
    Wake,
    /// One write attempt of everything queued, answered with whether nothing is left unwritten (and, when
    /// asked and something is, copies of the unwritten records).
    Flush { ack: FlushAck, snapshot: bool },
    /// Retry the backlog for up to this long, then log what is left; answered with that count.
    Close {
        within: Duration,
        ack: Sender<usize>,
    },
}

/// State the handle and the writer share.
struct Shared {
    /// False from a failed write or sync until a later write and sync succeed.
    healthy: AtomicBool,
    /// Records handed to the ledger and not yet written and synced.
    backlog: AtomicUsize,
    backlog_limit: AtomicUsize,
    /// Failed write, sync or cut-back attempts so far.
    write_errors: AtomicU64,
    /// Length of the file made of complete, synced lines (what a reader may take).
    synced_len: AtomicU64,
    /// Told (without waiting) after each successful sync, when someone follows the file.
    synced: std::sync::Mutex<Option<Sender<()>>>,
    /// With a follower: the lines synced and not yet taken by it, from the writer's memory (at most
    /// `FEED_MAX`; beyond, lines are left to be read from the file).
    feed: std::sync::Mutex<VecDeque<SyncedLine>>,
    feeding: AtomicBool,
    /// Records of callers that do not wait (every record outside strict mode): taken by the writer at its
    /// next sync, so queueing one wakes no thread.
    inbox: std::sync::Mutex<Vec<Record>>,
    /// The lines the writer holds and has not synced (its pending records, in order), for a query the
    /// writer does not answer in time: a record is here before it leaves the inbox (moved under the inbox's
    /// lock) and until the file's synced length counts it, so a reader that looks at the inbox, then this,
    /// then the file never misses one.
    unsynced: std::sync::Mutex<Vec<Arc<[u8]>>>,
    /// Set by tests only: the writer waits while it is (a disk or a machine too slow to answer a query).
    stall: AtomicBool,
    /// False once the writer thread has ended.
    writer_alive: AtomicBool,
    /// Why the last write attempt failed, while it does.
    problem: std::sync::Mutex<Option<String>>,
    /// The file being written: its seq and the open file. Readers take both (and `synced_len`) under this
    /// lock, so a rotation between looking and reading changes nothing: the file stays open under its new name.
    active: Mutex<(u64, Arc<File>)>,
    /// With a shipper: the files before this seq are shipped (compression and retention wait for that);
    /// `u64::MAX` without one.
    shipped_before: AtomicU64,
    /// Files up to this seq were deleted by retention, and what they held.
    retired: Mutex<(u64, Option<Arc<Totals>>)>,
    stats: Mutex<Stats>,
}

impl Shared {
    fn set_problem(&self, reason: Option<String>) {
        *match self.problem.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        } = reason;
    }
}

/// Synced lines held for the follower at most (about 600 bytes each, shared with nothing once written).
pub const FEED_MAX: usize = 8192;

/// A line the writer synced, handed to the follower of the ledger (the shipper) from its memory, so the
/// follower neither reads the file back nor parses the line.
#[derive(Debug, Clone)]
pub struct SyncedLine {
    /// The file (its seq) and where the line starts in it.
    pub seq: u64,
    pub offset: u64,
    /// The line, newline included.
    pub line: Arc<[u8]>,
    /// What the line says of the request, as a reader parsing it would find (None: it would find no record).
    pub facts: Option<Box<RecordFacts>>,
}

/// The fields of a record that the store counts.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordFacts {
    pub key: String,
    pub request_id: String,
    /// The cost as written in the line (a JSON number: what reading it gives back).
    pub cost: Money,
    /// Input and output tokens.
    pub tokens: u64,
    pub ts: String,
}

impl RecordFacts {
    /// The facts of `rec` as its line gives them back (None: its cost has no JSON number). The cost is the
    /// number as written, read back by the same parser a reader of the line uses (so it is the same to the
    /// unit however that parser rounds).
    pub fn of(rec: &Record) -> Option<RecordFacts> {
        let written = serde_json::to_string(&rec.cost).ok()?;
        Some(RecordFacts {
            key: rec.key.clone(),
            request_id: rec.request_id.clone(),
            cost: serde_json::from_str(&written).ok()?,
            tokens: rec.input_tokens.saturating_add(rec.output_tokens),
            ts: rec.ts.clone(),
        })
    }
}

/// Records in the inbox that wake the writer before its sync interval is up.
const INBOX_WAKE: usize = 4096;

/// The handle workers use; cheap to share.
pub struct Ledger {
    tx: Sender<Msg>,
    dir: PathBuf,
    path: PathBuf,
    strict: bool,
    shared: Arc<Shared>,
}

impl Ledger {
    /// Replays the ledger in `data_dir` (with the default file settings), repairs a torn tail, and starts
    /// the writer and keeper threads.
    pub fn open(
        data_dir: &Path,
        sync_interval: Duration,
        strict: bool,
    ) -> io::Result<(Ledger, Replay)> {
        Ledger::open_with(data_dir, sync_interval, strict, &Options::default())
    }

    /// [`open`](Ledger::open) with these file settings.
    pub fn open_with(
        data_dir: &Path,
        sync_interval: Duration,
        strict: bool,
        options: &Options,
    ) -> io::Result<(Ledger, Replay)> {
        let path = data_dir.join(LEDGER_FILE);
        let now = crate::util::unix_now();
        let mut start = replay::start(data_dir, true, now)?;
        let file = Arc::new(open_for_append(&path)?);
        let good_len = file.metadata()?.len();
        let balances = start.totals.balances(now);
        start.replay.spent = balances.spent;
        start.replay.periods = balances.periods;
        start.replay.last_used = balances.last_used;
        let (tx, rx) = unbounded();
        let shared = Arc::new(Shared {
            healthy: AtomicBool::new(true),
            backlog: AtomicUsize::new(0),
            backlog_limit: AtomicUsize::new(DEFAULT_BACKLOG_LIMIT),
            write_errors: AtomicU64::new(0),
            synced_len: AtomicU64::new(good_len),
            synced: std::sync::Mutex::new(None),
            feed: std::sync::Mutex::new(VecDeque::new()),
            feeding: AtomicBool::new(false),
            inbox: std::sync::Mutex::new(Vec::new()),
            unsynced: std::sync::Mutex::new(Vec::new()),
            stall: AtomicBool::new(false),
            writer_alive: AtomicBool::new(true),
            problem: std::sync::Mutex::new(None),
            active: Mutex::new((start.seq, file.clone())),
            shipped_before: AtomicU64::new(u64::MAX),
            retired: Mutex::new((
                start.retired_through,
                (start.retired_through > 0).then(|| Arc::new(start.retired.clone())),
            )),
            stats: Mutex::new(Stats {
                min_free_bytes: options.min_free_disk_bytes,
                checkpoint_records: start.replay.checkpoint.as_ref().map_or(0, |c| c.1),
                checkpoint_written: start.replay.checkpoint.as_ref().map(|c| c.0.clone()),
                replayed_at_start: start.replay.records,
                ..Stats::default()
            }),
        });
        let (keeper_tx, keeper_rx) = unbounded();
        let keeper = keeper::Keeper {
            dir: data_dir.to_path_buf(),
            options: options.clone(),
            shared: shared.clone(),
            position: keeper::Position {
                seq: start.seq,
                offset: good_len,
                fingerprint: start.fingerprint.clone(),
                first_ms: start.first_ms,
                last_ms: start.last_ms,
            },
            // A start that replayed records (or found no checkpoint) writes one at once.
            dirty: start.replay.records > 0
                || start.replay.checkpoint.is_none() && start.totals.records > 0,
            totals: std::mem::take(&mut start.totals),
            retired_through: start.retired_through,
            retired: std::mem::take(&mut start.retired),
            rotated: false,
        };
        let w = writer::Writer::new(writer::Setup {
            file,
            dir: data_dir.to_path_buf(),
            path: path.clone(),
            good_len,
            sync_interval,
            shared: shared.clone(),
            options: options.clone(),
            keeper: keeper_tx,
            seq: start.seq,
            fingerprint: start.fingerprint,
            first_ms: start.first_ms,
            last_ms: start.last_ms,
        })?;
        crate::logging::thread(
            std::thread::Builder::new().name("tollgate-ledger-keeper".into()),
            move || keeper.run(keeper_rx),
        )?;
        crate::logging::thread(
            std::thread::Builder::new().name("tollgate-ledger".into()),
            move || w.run(rx),
        )?;
        Ok((
            Ledger {
                tx,
                dir: data_dir.to_path_buf(),
                path,
                strict,
                shared,
            },
            start.replay,
        ))
    }

    /// Queues a record. In strict mode, waits until it is on disk; if its write fails it is queued again
    /// (kept in memory and retried), so it is never lost.
    pub fn append(&self, rec: Record) {
        if self.strict {
            if let Err(rec) = self.try_append(rec) {
                self.requeue(*rec);
            }
        } else {
            self.requeue(rec);
        }
    }

    /// Default mode: queues the record and returns `Ok` at once. Strict mode: waits until the record is
    /// written and synced; if that write or sync fails, the record is handed back at once (it is no longer
    /// queued) so the caller can amend it and [`requeue`](Ledger::requeue) it.
    pub fn try_append(&self, rec: Record) -> Result<(), Box<Record>> {
        if !self.strict {
            self.requeue(rec);
            return Ok(());
        }
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        self.shared.backlog.fetch_add(1, Ordering::Relaxed);
        if let Err(SendError(msg)) = self.tx.send(Msg::Record(Box::new(rec), Some(ack_tx))) {
            self.shared.backlog.fetch_sub(1, Ordering::Relaxed);
            return match msg {
                Msg::Record(rec, _) => Err(rec),
                _ => Ok(()),
            };
        }
        match ack_rx.recv() {
            Ok(result) => result,
            Err(_) => {
                // Only a writer thread that died with the record could get here.
                log::error!("usage ledger: the writer thread is gone; a record may be lost");
                Ok(())
            }
        }
    }

    /// Queues a record without waiting, in either mode (kept in memory while the disk is failing). Never
    /// fails, never blocks on the disk, and wakes no thread: the writer takes it at its next sync (within
    /// `sync_interval`), or earlier when many records are waiting.
    pub fn requeue(&self, rec: Record) {
        self.shared.backlog.fetch_add(1, Ordering::Relaxed);
        if !self.shared.writer_alive.load(Ordering::Acquire) {
            self.shared.backlog.fetch_sub(1, Ordering::Relaxed);
            writer::log_unwritten(&serde_json::to_string(&rec).unwrap_or_default());
            return;
        }
        let waiting = {
            let mut inbox = match self.shared.inbox.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            inbox.push(rec);
            inbox.len()
        };
        if waiting == INBOX_WAKE {
            let _ = self.tx.send(Msg::Wake);
        }
    }

    /// Makes one attempt to write and sync everything queued so far; true when nothing is left unwritten.
    /// Returns after that one attempt even when the disk is failing.
    pub fn flush(&self) -> bool {
        self.flush_within(FLUSH_WAIT, false).0 == Some(true)
    }

    /// Asks the writer to write and sync what is queued, waiting up to `wait`: whether nothing is left
    /// unwritten (None: the writer did not answer in time), and with `snapshot` the lines that are.
    fn flush_within(&self, wait: Duration, snapshot: bool) -> (Option<bool>, Vec<Arc<[u8]>>) {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self
            .tx
            .send(Msg::Flush {
                ack: ack_tx,
                snapshot,
            })
            .is_err()
        {
            return (None, Vec::new());
        }
        match ack_rx.recv_timeout(wait) {
            Ok((done, lines)) => (Some(done), lines),
            Err(_) => (None, Vec::new()),
        }
    }

    /// At shutdown: keeps retrying the backlog for up to `within`; each record still unwritten then is
    /// logged at ERROR as `unwritten usage record: {json}` and dropped. Returns how many were.
    pub fn close(&self, within: Duration) -> usize {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self
            .tx
            .send(Msg::Close {
                within,
                ack: ack_tx,
            })
            .is_err()
        {
            return self.backlog();
        }
        // The writer answers at `within`; more only if a write or sync hangs.
        ack_rx
            .recv_timeout(within + FLUSH_WAIT)
            .unwrap_or_else(|_| self.backlog())
    }

    /// Records matching `filter`, newest first. Everything queued so far is flushed first; records the
    /// disk does not take right now are found in memory. A writer that does not answer in time (a slow
    /// disk, a busy machine) is not waited for: the records it has not synced, and those still queued, are
    /// read from memory, so a record is found from the moment it was queued.
    pub fn query(&self, filter: &Filter) -> io::Result<Vec<Record>> {
        let (answered, unwritten) = self.flush_within(QUERY_FLUSH_WAIT, true);
        if answered.is_some() {
            return query::scan_with_unwritten(&self.history()?, filter, &unwritten);
        }
        let unwritten = self.in_memory();
        let mut out = query::scan_with_unwritten(&self.history()?, filter, &unwritten)?;
        // A record synced while this was read is in memory and in the file: once.
        let mut seen = std::collections::HashSet::new();
        out.retain(|r| seen.insert(r.request_id.clone()));
        Ok(out)
    }

    /// The records not yet synced, oldest first: the writer's (in order), then those still queued. The
    /// inbox's lock is held while both are read, as the writer holds it while it moves records out of it.
    fn in_memory(&self) -> Vec<Arc<[u8]>> {
        let inbox = lock(&self.shared.inbox);
        let mut lines: Vec<Arc<[u8]>> = lock(&self.shared.unsynced).clone();
        for rec in inbox.iter() {
            if let Ok(mut line) = serde_json::to_vec(rec) {
                line.push(b'\n');
                lines.push(Arc::from(line));
            }
        }
        lines
    }

    /// One look at every file of the ledger, oldest first, the active one read up to its synced length.
    pub fn history(&self) -> io::Result<History> {
        let (seq, file, len) = {
            let a = lock(&self.shared.active);
            (
                a.0,
                a.1.clone(),
                self.shared.synced_len.load(Ordering::Acquire),
            )
        };
        let mut segments = files::segments(&self.dir)?;
        // The active file just rotated is read through the descriptor already taken.
        segments.retain(|s| s.seq < seq);
        let (retired_through, retired) = lock(&self.shared.retired).clone();
        Ok(History {
            dir: self.dir.clone(),
            segments,
            active: Active {
                seq,
                file: Some(file),
                len,
            },
            retired_through,
            retired,
        })
    }

    /// The files and the disk as last measured.
    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).clone()
    }

    /// Tells the ledger that every file before `seq` is shipped (compression and retention of a file wait for
    /// that once a shipper follows the ledger).
    pub fn shipped_before(&self, seq: u64) {
        self.shared.shipped_before.store(seq, Ordering::Release);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the writer is alive and its last write and sync succeeded.
    pub fn healthy(&self) -> bool {
        self.shared.healthy.load(Ordering::Relaxed)
    }

    /// Why the ledger is not healthy (a disk error, its file replaced by another), for `/readyz`; None
    /// while it is. Names the file, never the data directory's place.
    pub fn problem(&self) -> Option<String> {
        if self.healthy() {
            return None;
        }
        match self.shared.problem.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Records handed to the ledger and not yet written and synced (about 0 in normal operation).
    pub fn backlog(&self) -> usize {
        self.shared.backlog.load(Ordering::Relaxed)
    }

    /// The backlog at which [`accepting`](Ledger::accepting) turns false (default 100,000).
    pub fn set_backlog_limit(&self, n: usize) {
        self.shared.backlog_limit.store(n, Ordering::Relaxed);
    }

    /// Whether new requests should be taken: false when the backlog reached its limit, and in strict mode
    /// also while the last write attempt failed (until a later one succeeds).
    pub fn accepting(&self) -> bool {
        self.backlog() < self.shared.backlog_limit.load(Ordering::Relaxed)
            && (!self.strict || self.healthy())
    }

    /// Failed write, sync or cut-back attempts so far.
    pub fn write_errors(&self) -> u64 {
        self.shared.write_errors.load(Ordering::Relaxed)
    }

    /// How much of the file is complete, synced lines: a reader that follows the file reads up to here.
    pub fn synced_len(&self) -> u64 {
        self.shared.synced_len.load(Ordering::Acquire)
    }

    /// A receiver told after every successful sync (for the one follower of the file; a later call
    /// replaces it).
    pub fn follow(&self) -> crossbeam_channel::Receiver<()> {
        // Until the follower says what it shipped, no file is compressed or deleted.
        self.shared.shipped_before.store(0, Ordering::Release);
        let (tx, rx) = crossbeam_channel::bounded(1);
        *match self.shared.synced.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        } = Some(tx);
        self.shared.feeding.store(true, Ordering::Release);
        rx
    }

    /// Takes up to `max` of the lines synced since the follower last took them (`follow` starts the feed),
    /// oldest first. The feed holds `FEED_MAX` lines at most: lines synced while it is full are left out
    /// (the follower finds the gap by their offsets and reads them from the file).
    pub fn take_synced(&self, max: usize) -> Vec<SyncedLine> {
        let mut feed = lock(&self.shared.feed);
        let n = max.min(feed.len());
        feed.drain(..n).collect()
    }
}

/// Opens the ledger for reading and appending; a new file gets mode 0600 whatever the umask. Only a regular
/// file this user owns is opened, never through a symbolic link (`util::open_owned`).
fn open_for_append(path: &Path) -> io::Result<File> {
    let f = match crate::util::open_owned(
        path,
        OpenOptions::new().read(true).append(true).create_new(true),
    ) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return crate::util::open_owned(path, OpenOptions::new().read(true).append(true))
        }
        Err(e) => return Err(e),
    };
    f.set_permissions(Permissions::from_mode(0o600))?;
    // Make the new directory entry durable too (best effort).
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(f)
}

/// Spend per key in the day, week and month holding `now`, read from the ledger in `data_dir` without
/// changing it (for `tollgate keys list` next to a running server: the checkpoint, then the records after it;
/// lines it cannot read are skipped).
pub fn period_spend(data_dir: &Path, now: u64) -> HashMap<String, PeriodSpend> {
    balances(data_dir, now).periods
}

/// Records matching `filter` in the ledger of `data_dir`, newest first, read from its files without a
/// running server (`tollgate usage`): every line synced so far.
pub fn read(data_dir: &Path, filter: &Filter) -> io::Result<Vec<Record>> {
    query::scan(&History::at(data_dir)?, filter)
}

/// What each key spent, in all and in the periods holding `now`, as the ledger of `data_dir` has it (read
/// without a running server: `tollgate keys list`).
pub fn balances(data_dir: &Path, now: u64) -> totals::Balances {
    match replay::start(data_dir, false, now) {
        Ok(s) => s.totals.balances(now),
        Err(_) => totals::Balances::default(),
    }
}

#[cfg(test)]
mod tests;
