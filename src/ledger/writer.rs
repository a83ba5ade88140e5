//! The ledger's writer thread. It buffers lines itself rather than through a `BufWriter`, so a failed write
//! can be undone: it knows the file length made of complete lines (`good_len`), and when a write or sync
//! fails it cuts the file back to it and keeps every unwritten record, in order, until a later write and
//! sync of all of them succeed. While the ledger has a follower (the shipper), each synced line also goes
//! into its feed with the record's facts, taken from the record before it was serialised (`feed_pending`).
//!
//! What it does to the file besides writing it (rotation, the snapshots for the keeper's checkpoints, the
//! check that the path still names the file) is in `writer/file.rs`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::keeper;
use super::options::{self, Options};
use super::totals::Totals;
use super::{Ack, FlushAck, Msg, Record, Shared, LEDGER_FILE};
use crate::util::lock;
use file::file_id;

mod file;

/// How often the backlog is retried while the disk fails.
pub(super) const RETRY_EVERY: Duration = Duration::from_millis(500);

/// While a failure lasts, at most one ERROR line this often.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Unwritten bytes that trigger a write before `sync_interval` is up.
const EARLY_WRITE_BYTES: usize = 1024 * 1024;

/// Bytes handed to one `write` call.
const CHUNK: usize = 256 * 1024;

/// Messages taken from the channel before one write attempt (so a flood cannot postpone it for ever).
const MAX_DRAIN: usize = 8192;

/// One record waiting to be written and synced: its JSON line only (550 to 650 bytes while it waits, so
/// a full backlog of 100,000 records holds 55 to 65 MB), and for a strict-mode caller that waits, the record
/// itself to hand back if its write fails. The line is shared, so a query's snapshot of the backlog costs
/// a reference count per record, not a copy.
struct Entry {
    /// The JSON line, newline included, allocated to its exact size.
    line: Arc<[u8]>,
    /// A strict-mode caller waiting for the outcome, and its record.
    waiting: Option<(Ack, Box<Record>)>,
    /// With a follower: what the record says (None inside: no record a reader would find), handed to it
    /// with the line once synced. None: taken before the follower came (its line is left to the file).
    facts: Option<Option<Box<super::RecordFacts>>>,
}

/// A stretch of failed writes, for logging.
struct Episode {
    last_log: Instant,
}

/// What the writer starts from.
pub(super) struct Setup {
    pub file: Arc<File>,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub good_len: u64,
    pub sync_interval: Duration,
    pub shared: Arc<Shared>,
    pub options: Options,
    pub keeper: Sender<keeper::Msg>,
    pub seq: u64,
    pub fingerprint: String,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
}

pub(super) struct Writer {
    file: Arc<File>,
    dir: PathBuf,
    path: PathBuf,
    /// Device and inode of `file`: what the path must still name.
    id: (u64, u64),
    /// When the path was last checked.
    last_check: Instant,
    /// The failure in progress is the path naming another file (not the disk failing).
    misplaced: bool,
    /// Length of the file made of complete, synced lines.
    good_len: u64,
    /// A cut back to `good_len` failed: it must succeed before anything else is written.
    need_truncate: bool,
    pending: VecDeque<Entry>,
    pending_bytes: usize,
    sync_interval: Duration,
    last_sync: Instant,
    last_attempt: Instant,
    /// Some while writes fail.
    episode: Option<Episode>,
    /// A `close` in progress: its deadline and who waits for the count.
    close: Option<(Instant, Sender<usize>)>,
    shared: Arc<Shared>,
    scratch: Vec<u8>,
    options: Options,
    keeper: Sender<keeper::Msg>,
    /// The active file's seq, its first line's fingerprint, and the earliest and latest `ts` in it.
    seq: u64,
    fingerprint: String,
    first_ms: Option<i64>,
    last_ms: Option<i64>,
    /// The UTC day (by the ledger's clock) the active file began on (for a file found at start: the start's).
    file_day: Option<u64>,
    /// A rotation renamed the file but could not make the new one yet.
    file_missing: bool,
    /// What the records synced since the last snapshot went to the keeper add up to, and how many.
    delta: Totals,
    since_snapshot: u64,
    last_snapshot: Instant,
}

/// Marks the writer gone when its thread ends, however it ends: records queued after that are logged.
struct Alive<'a>(&'a Shared);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.writer_alive.store(false, Ordering::Release);
        let records = std::mem::take(&mut *lock(&self.0.inbox));
        for rec in records {
            self.0.backlog.fetch_sub(1, Ordering::Relaxed);
            log_unwritten(&serde_json::to_string(&rec).unwrap_or_default());
        }
    }
}

/// Logs a record that will not reach the file, in a form an operator can recover it from.
pub(super) fn log_unwritten(json: &str) {
    log::error!(target: crate::logging::MUST_WRITE_TARGET, "unwritten usage record: {json}");
}

impl Writer {
    pub(super) fn new(s: Setup) -> io::Result<Writer> {
        let now = Instant::now();
        Ok(Writer {
            id: file_id(&s.file)?,
            file: s.file,
            dir: s.dir,
            path: s.path,
            last_check: now,
            misplaced: false,
            good_len: s.good_len,
            need_truncate: false,
            pending: VecDeque::new(),
            pending_bytes: 0,
            sync_interval: s.sync_interval,
            last_sync: now,
            last_attempt: now,
            episode: None,
            close: None,
            shared: s.shared,
            scratch: Vec::new(),
            options: s.options,
            keeper: s.keeper,
            seq: s.seq,
            fingerprint: s.fingerprint,
            // A file found at start counts as begun today: it is rotated at the next midnight.
            file_day: (s.good_len > 0).then(|| options::now() / 86_400),
            first_ms: s.first_ms,
            last_ms: s.last_ms,
            file_missing: false,
            delta: Totals::default(),
            since_snapshot: 0,
            last_snapshot: now,
        })
    }

    pub(super) fn run(mut self, rx: Receiver<Msg>) {
        let shared = self.shared.clone();
        let _alive = Alive(&shared);
        let mut flushes: Vec<(FlushAck, bool)> = Vec::new();
        loop {
            let mut urgent = false;
            let mut disconnected = false;
            match rx.recv_timeout(self.next_wait()) {
                Ok(msg) => self.take(msg, &mut urgent, &mut flushes),
                Err(RecvTimeoutError::Timeout) => self.take_inbox(),
                Err(RecvTimeoutError::Disconnected) => {
                    disconnected = true;
                    self.take_inbox();
                }
            }
            while self.shared.stall.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Whatever else is queued already goes into the same attempt.
            for _ in 0..MAX_DRAIN {
                if disconnected {
                    break;
                }
                match rx.try_recv() {
                    Ok(msg) => self.take(msg, &mut urgent, &mut flushes),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => disconnected = true,
                }
            }
            if urgent || disconnected || self.due() {
                self.attempt();
            } else if self.idle_check_due() {
                self.check_idle();
            }
            let done = self.pending.is_empty();
            for (ack, snapshot) in flushes.drain(..) {
                let unwritten = if snapshot && !done {
                    self.pending.iter().map(|e| e.line.clone()).collect()
                } else {
                    Vec::new()
                };
                let _ = ack.send((done, unwritten));
            }
            if let Some((deadline, ack)) = self.close.take() {
                if done || Instant::now() >= deadline {
                    let n = self.give_up();
                    self.close_keeper();
                    let _ = ack.send(n);
                } else {
                    self.close = Some((deadline, ack));
                }
            }
            if disconnected {
                self.give_up();
                return;
            }
            self.snapshot_if_due(false);
        }
    }

    /// Takes the records queued without a wake-up (they go before any later message's records). They move
    /// into the unsynced lines readers see while the inbox's lock is held, so no reader misses them between.
    fn take_inbox(&mut self) {
        let shared = self.shared.clone();
        let mut inbox = lock(&shared.inbox);
        if inbox.is_empty() {
            return;
        }
        let records = std::mem::take(&mut *inbox);
        let mut unsynced = lock(&shared.unsynced);
        for rec in records {
            if let Some(entry) = self.entry(Box::new(rec), None) {
                unsynced.push(entry.line.clone());
                self.pending.push_back(entry);
            }
        }
    }

    /// A record made into its pending line (None: it cannot be encoded, and is logged).
    fn entry(&mut self, rec: Box<Record>, ack: Option<Ack>) -> Option<Entry> {
        match serde_json::to_vec(&rec) {
            Ok(mut line) => {
                line.push(b'\n');
                self.pending_bytes += line.len();
                let facts = self
                    .shared
                    .feeding
                    .load(Ordering::Relaxed)
                    .then(|| super::RecordFacts::of(&rec).map(Box::new));
                Some(Entry {
                    line: Arc::from(line),
                    waiting: ack.map(|a| (a, rec)),
                    facts,
                })
            }
            Err(e) => {
                self.shared.backlog.fetch_sub(1, Ordering::Relaxed);
                log::error!("usage ledger: cannot encode a record ({e}): {rec:?}");
                if let Some(ack) = ack {
                    let _ = ack.send(Err(rec));
                }
                None
            }
        }
    }

    /// The unsynced lines readers see, made again from what is pending (after some left out of order).
    fn mirror_pending(&self) {
        let mut unsynced = lock(&self.shared.unsynced);
        unsynced.clear();
        unsynced.extend(self.pending.iter().map(|e| e.line.clone()));
    }

    /// Takes one message, after the records queued before it was sent: a flush or close then covers every
    /// record its caller queued first, also when the message is drained after this round's first look at
    /// the inbox (a query could miss a record its client already had the answer for).
    fn take(&mut self, msg: Msg, urgent: &mut bool, flushes: &mut Vec<(FlushAck, bool)>) {
        self.take_inbox();
        match msg {
            Msg::Wake => {}
            Msg::Record(rec, ack) => {
                *urgent |= ack.is_some();
                if let Some(entry) = self.entry(rec, ack) {
                    lock(&self.shared.unsynced).push(entry.line.clone());
                    self.pending.push_back(entry);
                }
            }
            Msg::Flush { ack, snapshot } => {
                *urgent = true;
                flushes.push((ack, snapshot));
            }
            Msg::Close { within, ack } => {
                *urgent = true;
                self.close = Some((Instant::now() + within, ack));
            }
        }
    }

    fn failing(&self) -> bool {
        self.episode.is_some()
    }

    /// Whether a write attempt is due without anyone asking for one.
    fn due(&self) -> bool {
        if self.failing() {
            return (self.need_truncate || !self.pending.is_empty())
                && self.last_attempt.elapsed() >= RETRY_EVERY;
        }
        !self.pending.is_empty()
            && (self.last_sync.elapsed() >= self.sync_interval
                || self.pending_bytes >= EARLY_WRITE_BYTES)
    }

    /// How long to wait for a message before something is due.
    fn next_wait(&self) -> Duration {
        let mut wait = if self.failing() && (self.need_truncate || !self.pending.is_empty()) {
            RETRY_EVERY.saturating_sub(self.last_attempt.elapsed())
        } else if !self.pending.is_empty() {
            self.sync_interval.saturating_sub(self.last_sync.elapsed())
        } else {
            // Records may be waiting in the inbox (queueing one wakes no one): look again in one interval.
            self.sync_interval
        };
        if let Some((deadline, _)) = &self.close {
            wait = wait.min(deadline.saturating_duration_since(Instant::now()));
        }
        wait
    }

    /// One attempt to write and sync every pending record.
    fn attempt(&mut self) {
        if self.need_truncate || !self.pending.is_empty() {
            self.last_attempt = Instant::now();
            self.misplaced = false;
            if let Err(e) = self.keep_in_place() {
                self.misplaced = true;
                self.failed(&e);
                return;
            }
        }
        if self.need_truncate {
            if let Err(e) = self.file.set_len(self.good_len) {
                self.failed(&e);
                return;
            }
            self.need_truncate = false;
        }
        if self.pending.is_empty() {
            return;
        }
        if let Err(e) = self.rotate_if_due() {
            self.failed(&e);
            return;
        }
        match self.write_pending() {
            Ok(()) => self.succeeded(),
            Err(e) => {
                // Cut off whatever part of the batch reached the file, so no partial line stays.
                if let Err(te) = self.file.set_len(self.good_len) {
                    log::error!(
                        "usage ledger {}: cannot cut the file back to its last complete line at {} bytes \
                         ({te}); retrying before the next write",
                        self.path.display(),
                        self.good_len
                    );
                    self.need_truncate = true;
                }
                self.failed(&e);
            }
        }
    }

    fn write_pending(&mut self) -> io::Result<()> {
        self.scratch.clear();
        for e in &self.pending {
            if !self.scratch.is_empty() && self.scratch.len() + e.line.len() > CHUNK {
                (&*self.file).write_all(&self.scratch)?;
                self.scratch.clear();
            }
            self.scratch.extend_from_slice(&e.line);
        }
        (&*self.file).write_all(&self.scratch)?;
        self.scratch.clear();
        if self.scratch.capacity() > 4 * CHUNK {
            self.scratch = Vec::new();
        }
        self.file.sync_data()
    }

    fn succeeded(&mut self) {
        let n = self.pending.len();
        self.fold_pending();
        self.feed_pending();
        self.good_len += self.pending_bytes as u64;
        self.pending_bytes = 0;
        // The counts first: a strict-mode caller told its record is synced finds it out of the backlog.
        self.shared.backlog.fetch_sub(n, Ordering::Relaxed);
        self.shared.healthy.store(true, Ordering::Relaxed);
        self.shared.set_problem(None);
        self.shared
            .synced_len
            .store(self.good_len, Ordering::Release);
        // Readers find them in the file from here on.
        lock(&self.shared.unsynced).clear();
        for e in self.pending.drain(..) {
            if let Some((ack, _)) = e.waiting {
                let _ = ack.send(Ok(()));
            }
        }
        if let Ok(g) = self.shared.synced.lock() {
            if let Some(tx) = g.as_ref() {
                let _ = tx.try_send(());
            }
        }
        self.last_sync = Instant::now();
        if self.episode.take().is_some() {
            log::info!(
                "usage ledger {}: writable again; {n} records written from the backlog",
                self.path.display()
            );
        }
    }

    /// Hands the lines about to count as synced to the ledger's follower, while it takes them (the feed is
    /// bounded: what does not fit is read from the file by the follower).
    fn feed_pending(&mut self) {
        if !self.shared.feeding.load(Ordering::Relaxed) {
            return;
        }
        let mut feed = lock(&self.shared.feed);
        let mut offset = self.good_len;
        for e in &mut self.pending {
            let start = offset;
            offset += e.line.len() as u64;
            // A full feed, or a record taken before the follower came: the rest is read from the file.
            let Some(facts) = e.facts.take().filter(|_| feed.len() < super::FEED_MAX) else {
                break;
            };
            feed.push_back(super::SyncedLine {
                seq: self.seq,
                offset: start,
                line: e.line.clone(),
                facts,
            });
        }
    }

    /// After a failed write, sync or cut-back: strict-mode records go back to their callers, the rest stay.
    fn failed(&mut self, e: &io::Error) {
        self.shared.write_errors.fetch_add(1, Ordering::Relaxed);
        self.shared.healthy.store(false, Ordering::Relaxed);
        // The reason as `/readyz` shows it: the file's name, not where the data directory is.
        let path = self.path.display().to_string();
        self.shared
            .set_problem(Some(e.to_string().replace(&path, LEDGER_FILE)));
        // Strict-mode records go back to their callers. The backlog and the lines readers see are updated
        // before a caller is told (it may look at either at once); one whose caller stopped waiting stays.
        let (waiting, rest): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.waiting.is_some());
        self.pending.extend(rest);
        let mut handed_back = waiting.len();
        if handed_back > 0 {
            self.shared
                .backlog
                .fetch_sub(handed_back, Ordering::Relaxed);
            self.pending_bytes -= waiting.iter().map(|e| e.line.len()).sum::<usize>();
            self.mirror_pending();
        }
        let mut stayed = false;
        for mut entry in waiting {
            let Some((ack, rec)) = entry.waiting.take() else {
                continue;
            };
            if ack.send(Err(rec)).is_err() {
                // Nobody waits for it any more: it stays with the others.
                handed_back -= 1;
                stayed = true;
                self.shared.backlog.fetch_add(1, Ordering::Relaxed);
                self.pending_bytes += entry.line.len();
                self.pending.push_back(entry);
            }
        }
        if stayed {
            self.mirror_pending();
        }
        let handed = if handed_back > 0 {
            format!("; {handed_back} handed back to their callers")
        } else {
            String::new()
        };
        let now = Instant::now();
        match &mut self.episode {
            None => {
                log::error!(
                    "usage ledger {}: cannot write ({e}); {} records kept in memory{handed}, retrying every \
                     500 ms",
                    self.path.display(),
                    self.pending.len()
                );
                self.episode = Some(Episode { last_log: now });
            }
            Some(ep) if now.duration_since(ep.last_log) >= LOG_EVERY => {
                log::error!(
                    "usage ledger {}: still cannot write ({e}); {} records waiting{handed}",
                    self.path.display(),
                    self.pending.len()
                );
                ep.last_log = now;
            }
            Some(_) => {}
        }
    }

    /// Drops every pending record: logged one per line so an operator can recover it (a strict-mode
    /// record goes back to its caller instead). Returns how many were logged.
    fn give_up(&mut self) -> usize {
        let mut logged = 0;
        let n = self.pending.len();
        for e in self.pending.drain(..) {
            // (A strict-mode record is only pending here if its caller stopped waiting.)
            if let Some((ack, rec)) = e.waiting {
                if ack.send(Err(rec)).is_ok() {
                    continue;
                }
            }
            log_unwritten(&String::from_utf8_lossy(&e.line[..e.line.len() - 1]));
            logged += 1;
        }
        self.pending_bytes = 0;
        self.shared.backlog.fetch_sub(n, Ordering::Relaxed);
        lock(&self.shared.unsynced).clear();
        logged
    }
}
