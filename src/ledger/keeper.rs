//! The keeper thread: everything about the ledger's files that must not hold up a write. It writes the
//! checkpoints the writer hands it (`checkpoint.rs`); it compresses rotated files past
//! `ledger_compress_after_days` and deletes those past `ledger_retention_days`, oldest first, each only once a
//! checkpoint holds its totals (and, with a store, once it is shipped); and every few seconds it measures
//! the ledger (size, files, oldest record) and the free space of its disk, with a WARN when that falls
//! under `min_free_disk_mb`.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::checkpoint::{self, Checkpoint};
use super::files::{self, Segment};
use super::options::{self, Options, MB};
use super::totals::{Line, Totals};
use super::{Shared, Stats};
use crate::util::lock;

/// How often the files and the disk are measured.
const STATS_EVERY: Duration = Duration::from_secs(2);

/// How often rotated files are looked at for compression and retention.
const MAINTAIN_EVERY: Duration = Duration::from_secs(30);

/// While the disk stays low, the WARN is repeated this often.
const WARN_EVERY: Duration = Duration::from_secs(600);

/// Space kept beside the ledger (a file of zeros) for the one write retention must make before it deletes
/// anything, its checkpoint: on a full disk it is deleted to make room for that checkpoint, so retention can
/// still free the disk, and it is made again once there is room (four times its size free).
pub(super) const RESERVE_FILE: &str = ".ledger-reserve";
/// Its size: twice the checkpoint's, 64 KiB at least.
const RESERVE_MIN: u64 = 64 * 1024;

const DAY: u64 = 86_400;

/// A position of the ledger (everything before byte `offset` of file `seq`) and what the records written
/// since the previous snapshot add up to, from the writer.
pub(super) struct Snapshot {
    pub position: Position,
    pub delta: Totals,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Position {
    pub seq: u64,
    pub offset: u64,
    pub fingerprint: String,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
}

pub(super) enum Msg {
    Snapshot(Box<Snapshot>),
    /// Write the checkpoint if it is behind, then end; answered when done.
    Close(Sender<()>),
}

pub(super) struct Keeper {
    pub dir: PathBuf,
    pub options: Options,
    pub shared: Arc<Shared>,
    /// What every record before `position` adds up to (the writer sends only what came since), and whether
    /// that is not in a checkpoint on disk yet.
    pub position: Position,
    pub totals: Totals,
    pub dirty: bool,
    pub retired_through: u64,
    pub retired: Totals,
    /// Rotated files were made since the last look (a checkpoint at a rotation prompts one).
    pub rotated: bool,
}

impl Keeper {
    pub(super) fn run(mut self, rx: Receiver<Msg>) {
        let mut last_maintain = Instant::now() - MAINTAIN_EVERY;
        let mut last_stats = Instant::now() - STATS_EVERY;
        let mut low_since: Option<Instant> = None;
        let mut shipped = self.shared.shipped_before.load(Ordering::Acquire);
        loop {
            let mut closing = None;
            match rx.recv_timeout(STATS_EVERY) {
                Ok(Msg::Snapshot(s)) => self.take(*s),
                Ok(Msg::Close(ack)) => closing = Some(ack),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while closing.is_none() {
                match rx.try_recv() {
                    Ok(Msg::Snapshot(s)) => self.take(*s),
                    Ok(Msg::Close(ack)) => closing = Some(ack),
                    Err(_) => break,
                }
            }
            if self.dirty {
                self.write_checkpoint(None);
            }
            if let Some(ack) = closing {
                let _ = ack.send(());
                return;
            }
            // A file the shipper finished may be due for compression or retention now.
            let shipped_now = self.shared.shipped_before.load(Ordering::Acquire);
            if self.rotated || shipped_now != shipped || last_maintain.elapsed() >= MAINTAIN_EVERY {
                self.rotated = false;
                shipped = shipped_now;
                last_maintain = Instant::now();
                self.maintain();
            }
            if last_stats.elapsed() >= STATS_EVERY {
                last_stats = Instant::now();
                self.measure(&mut low_since);
            }
        }
    }

    fn take(&mut self, s: Snapshot) {
        if s.position.seq != self.position.seq {
            self.rotated = true;
        }
        self.totals.merge(&s.delta);
        self.position = s.position;
        self.dirty = true;
    }

    /// Writes the totals at the newest position as the checkpoint, with `retired` in place of the current
    /// retired totals when given. Returns whether it is on disk.
    fn write_checkpoint(&mut self, retired: Option<(u64, &Totals)>) -> bool {
        let (through, retired) = match retired {
            Some((t, r)) => (t, r.clone()),
            None => (self.retired_through, std::mem::take(&mut self.retired)),
        };
        self.totals.prune(crate::util::unix_now());
        let p = &self.position;
        let mut cp = Checkpoint::new(
            p.seq,
            p.offset,
            p.fingerprint.clone(),
            std::mem::take(&mut self.totals),
        );
        cp.first_ms = p.first_ms;
        cp.last_ms = p.last_ms;
        cp.retired_through = through;
        cp.retired = retired;
        let result = checkpoint::write(&self.dir, &cp);
        self.totals = cp.totals;
        if through == self.retired_through {
            self.retired = cp.retired;
        }
        match result {
            Ok(()) => {
                self.dirty = false;
                let mut st = lock(&self.shared.stats);
                st.checkpoint_written = Some(cp.written.clone());
                st.checkpoint_records = self.totals.records;
                drop(st);
                log::debug!(
                    "usage ledger: checkpoint written ({} records, file {} at byte {})",
                    self.totals.records,
                    self.position.seq,
                    self.position.offset
                );
                true
            }
            Err(e) => {
                log::error!(
                    "usage ledger: cannot write the checkpoint {} ({e}); the previous one stays in force and a \
                     start replays more",
                    checkpoint::CHECKPOINT_FILE
                );
                false
            }
        }
    }

    /// Compression and retention of rotated files.
    fn maintain(&mut self) {
        let segs = match files::segments(&self.dir) {
            Ok(s) => s,
            Err(e) => {
                log::warn!("usage ledger: cannot list the ledger's files: {e}");
                return;
            }
        };
        // Files folded into `retired` by a keeper stopped before it deleted them.
        for s in segs
            .iter()
            .filter(|s| self.retired_through > 0 && s.seq <= self.retired_through)
        {
            remove(s);
        }
        let now = options::now();
        let shipped_before = self.shared.shipped_before.load(Ordering::Acquire);
        // Only files before the checkpoint's (about to be written) position may go.
        let covered = self.position.seq;
        let old = |s: &Segment, days: Option<u64>| {
            days.is_some_and(|d| s.to.saturating_add(d.saturating_mul(DAY)) < now)
        };
        let expired: Vec<&Segment> = segs
            .iter()
            .filter(|s| s.seq > self.retired_through)
            .take_while(|s| {
                old(s, self.options.retention_days) && s.seq < covered && s.seq < shipped_before
            })
            .collect();
        if !expired.is_empty() {
            self.retire(&expired);
        }
        for s in segs.iter().filter(|s| {
            !s.compressed
                && s.seq > self.retired_through
                && s.seq < shipped_before
                && old(s, self.options.compress_after_days)
        }) {
            let gz = PathBuf::from(format!("{}.gz", s.path.display()));
            if gz.exists() {
                remove(s);
                continue;
            }
            match files::compress(s) {
                Ok(c) => log::info!("usage ledger: compressed {} into {}", s.name(), c.name()),
                Err(e) => log::warn!("usage ledger: cannot compress {}: {e}", s.name()),
            }
        }
        self.keep_reserve();
    }

    /// Makes the reserve (`RESERVE_FILE`) as large as it should be, when the disk has room for it four
    /// times over (never the last space the ledger could write its records in).
    fn keep_reserve(&self) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(RESERVE_FILE);
        let checkpoint =
            std::fs::metadata(self.dir.join(checkpoint::CHECKPOINT_FILE)).map_or(0, |m| m.len());
        let want = (2 * checkpoint).max(RESERVE_MIN);
        let have = std::fs::metadata(&path).map_or(0, |m| m.len());
        if have >= want || free_bytes(&self.dir).is_none_or(|f| f < 4 * (want - have)) {
            return;
        }
        let grown = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| {
                let zeros = vec![0u8; (want - have) as usize];
                f.write_all(&zeros)?;
                f.sync_all()
            });
        if let Err(e) = grown {
            log::warn!("usage ledger: cannot keep {RESERVE_FILE}, the space retention needs on a full disk: {e}");
        }
    }

    /// Deletes the reserve to make room for a checkpoint the disk had no room for; whether there was one.
    fn use_reserve(&self) -> bool {
        let path = self.dir.join(RESERVE_FILE);
        if std::fs::remove_file(&path).is_err() {
            return false;
        }
        log::warn!(
            "usage ledger: the disk is full; deleted {RESERVE_FILE} (the space kept for this) to write the \
             checkpoint retention needs before it deletes old files"
        );
        true
    }

    /// Deletes `expired` (the oldest rotated files, in order) once a checkpoint holds what they held.
    fn retire(&mut self, expired: &[&Segment]) {
        let mut retired = self.retired.clone();
        let mut through = self.retired_through;
        for s in expired {
            if let Err(e) = fold_file(s, &mut retired) {
                log::error!(
                    "usage ledger: cannot read {} to retire it: {e}; it is kept",
                    s.name()
                );
                break;
            }
            through = s.seq;
        }
        if through == self.retired_through {
            return;
        }
        retired.prune(crate::util::unix_now());
        // On a full disk the checkpoint has no room until files go, and they go only after it: the reserve
        // makes the room.
        let written = self.write_checkpoint(Some((through, &retired)))
            || (self.use_reserve() && self.write_checkpoint(Some((through, &retired))));
        if !written {
            return;
        }
        self.retired = retired;
        self.retired_through = through;
        *lock(&self.shared.retired) = (through, Some(Arc::new(self.retired.clone())));
        for s in expired.iter().filter(|s| s.seq <= through) {
            remove(s);
        }
        log::info!(
            "usage ledger: deleted {} older than {} days (ledger_retention_days); what they held is kept in \
             the checkpoint",
            crate::util::plural(expired.iter().filter(|s| s.seq <= through).count(), "file"),
            self.options.retention_days.unwrap_or(0)
        );
    }

    /// Measures the files and the disk for metrics, `/admin/settings` and `/readyz`; WARNs on low space.
    fn measure(&self, low_since: &mut Option<Instant>) {
        let segs = files::segments(&self.dir).unwrap_or_default();
        let mut bytes = self.shared.synced_len.load(Ordering::Acquire);
        for s in &segs {
            bytes += std::fs::metadata(&s.path).map_or(0, |m| m.len());
        }
        let oldest = match segs.first() {
            Some(s) => Some(crate::util::rfc3339(s.from)),
            None => self.active_first_ts(),
        };
        let free = free_bytes(&self.dir);
        let min = self.options.min_free_disk_bytes;
        let low = free.is_some_and(|f| f < min);
        {
            let mut st = lock(&self.shared.stats);
            st.bytes = bytes;
            st.files = segs.len() as u64 + 1;
            st.compressed_files = segs.iter().filter(|s| s.compressed).count() as u64;
            st.oldest_record = oldest;
            st.free_bytes = free;
            st.low_disk = low;
        }
        match (low, *low_since) {
            (true, None) => {
                *low_since = Some(Instant::now());
                warn_low(free, min);
            }
            (true, Some(t)) if t.elapsed() >= WARN_EVERY => {
                *low_since = Some(Instant::now());
                warn_low(free, min);
            }
            (false, Some(_)) => {
                *low_since = None;
                log::info!(
                    "data disk: {} MB free again (min_free_disk_mb = {})",
                    free.unwrap_or(0) / MB,
                    min / MB
                );
            }
            _ => {}
        }
    }

    /// The `ts` of the active file's first record.
    fn active_first_ts(&self) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let f = lock(&self.shared.active).1.clone();
        let len = self
            .shared
            .synced_len
            .load(Ordering::Acquire)
            .min(64 * 1024) as usize;
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, 0).ok()?;
        let end = buf[..n].iter().position(|b| *b == b'\n')?;
        #[derive(serde::Deserialize)]
        struct Ts {
            ts: String,
        }
        serde_json::from_slice::<Ts>(&buf[..end]).ok().map(|t| t.ts)
    }
}

fn warn_low(free: Option<u64>, min: u64) {
    log::warn!(
        "data disk: only {} MB free, under min_free_disk_mb = {}: the usage ledger will stop taking records when \
         it is full (then requests are refused). Free space, lower ledger_retention_days, or set \
         ledger_compress_after_days",
        free.unwrap_or(0) / MB,
        min / MB
    );
}

/// Free bytes for this user on the file system holding `dir`.
pub(super) fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Adds every record of a rotated file to `totals`.
fn fold_file(s: &Segment, totals: &mut Totals) -> std::io::Result<()> {
    use std::io::BufRead;
    let r = std::io::BufReader::with_capacity(1024 * 1024, files::open_segment(s)?);
    for line in r.split(b'\n') {
        // A line that is no record counts as it does at the start's replay: not at all.
        let _: Line = totals.fold(&line?);
    }
    Ok(())
}

fn remove(s: &Segment) {
    match std::fs::remove_file(&s.path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!("usage ledger: cannot delete {}: {e}", s.name()),
    }
}

impl Stats {
    /// Whether free space is under the threshold, with the numbers, for `/readyz`.
    pub fn disk_warning(&self) -> Option<String> {
        self.low_disk.then(|| {
            format!(
                "{} MB free on the data disk, under min_free_disk_mb = {}",
                self.free_bytes.unwrap_or(0) / MB,
                self.min_free_bytes / MB
            )
        })
    }
}
