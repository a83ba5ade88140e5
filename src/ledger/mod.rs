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
//! descriptor); the writer notices its file moved away, deleted or replaced while it runs (`writer/file.rs`).
//!
//! The handle, [`Ledger`], is in `handle.rs` and the records in `record.rs`; this file holds what the handle
//! and the threads share, and the readers that need no server.

mod checkpoint;
mod files;
mod handle;
mod keeper;
pub(crate) mod options;
mod query;
mod record;
mod replay;
pub(crate) mod totals;
mod writer;

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

use crate::util::lock;
use std::time::Duration;

use crossbeam_channel::Sender;
use serde::Serialize;

use crate::budget::PeriodSpend;
use crate::money::Money;

pub use checkpoint::CHECKPOINT_FILE;
pub use files::{complete_len, fingerprint, segment_name, Active, History, Segment};
pub(crate) use options::Options;
pub use query::{CacheFilter, Filter, StatusFilter};
pub use record::{CacheUse, Record, RecordFacts, Status};
pub use totals::{KeyTotals, Totals};

/// File name of the ledger inside `data_dir`.
pub const LEDGER_FILE: &str = "usage.jsonl";

/// Default for [`Ledger::set_backlog_limit`] (a setting, so the config's).
pub use crate::config::ledger::DEFAULT_BACKLOG_LIMIT;

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
    /// Of them, the rotated files that are gzip'ed.
    pub compressed_files: u64,
    /// The `ts` of the oldest record kept (RFC 3339; None while there is none).
    pub oldest_record: Option<String>,
    /// Free bytes on the data disk for tollgate's user (None when it cannot be measured).
    pub free_bytes: Option<u64>,
    /// `free_bytes` is under `min_free_bytes`.
    pub low_disk: bool,
    /// Free bytes under which the disk counts as low (`min_free_disk_mb`).
    pub min_free_bytes: u64,
    /// When the last checkpoint was written.
    pub checkpoint_written: Option<String>,
    /// How many records the last checkpoint covers.
    pub checkpoint_records: u64,
    /// Records replayed at start (those after the checkpoint).
    pub replayed_at_start: u64,
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
        *crate::util::lock(&self.problem) = reason;
    }
}

/// Synced lines held for the follower at most (about 600 bytes each, shared with nothing once written).
pub const FEED_MAX: usize = 8192;

/// A line the writer synced, handed to the follower of the ledger (the shipper) from its memory, so the
/// follower neither reads the file back nor parses the line.
#[derive(Debug, Clone)]
pub struct SyncedLine {
    /// The file (its seq) the line is in.
    pub seq: u64,
    /// Where the line starts in the file (bytes).
    pub offset: u64,
    /// The line, newline included.
    pub line: Arc<[u8]>,
    /// What the line says of the request, as a reader parsing it would find (None: it would find no record).
    pub facts: Option<Box<RecordFacts>>,
}

/// The handle workers use; cheap to share.
pub struct Ledger {
    tx: Sender<Msg>,
    dir: PathBuf,
    path: PathBuf,
    strict: bool,
    shared: Arc<Shared>,
}

/// What the handle asks of the writer and reads of the state it shares (its API is in `handle.rs`).
impl Ledger {
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
