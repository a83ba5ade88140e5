//! The handle workers use, [`Ledger`]: opening the ledger (the replay, then the writer and keeper threads),
//! handing it records (in strict mode, waiting until each is synced), flushing and closing it, and what
//! readers ask of it: queries, the files, the measured stats, its health and backlog, the follower's feed.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{unbounded, SendError};

use super::files::{self, Active, History};
use super::{keeper, open_for_append, query, replay, writer, Filter, Ledger, Msg, Options};
use super::{Record, Replay, Shared, Stats, SyncedLine, DEFAULT_BACKLOG_LIMIT, LEDGER_FILE};
use crate::util::lock;

/// How long `flush` waits for the writer's answer (it answers after one write attempt; only a disk that
/// hangs inside a write or sync makes it wait this long).
const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// How long `query` waits for its flush before reading the file anyway.
const QUERY_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Records in the inbox that wake the writer before its sync interval is up.
const INBOX_WAKE: usize = 4096;

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
            let mut inbox = crate::util::lock(&self.shared.inbox);
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

    /// The active file (`usage.jsonl` in `data_dir`).
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
        crate::util::lock(&self.shared.problem).clone()
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
        *crate::util::lock(&self.shared.synced) = Some(tx);
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
