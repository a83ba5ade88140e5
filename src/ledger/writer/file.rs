//! The file the ledger's writer (`ledger/writer.rs`) writes, kept over time: rotated, followed by the
//! keeper's checkpoints, and checked to be the file the ledger's path names.
//!
//! Before each write, and about once a second when idle, the writer checks that the ledger's path still names
//! the file it holds open (device and inode of the path against those of its descriptor). A file moved away
//! or deleted while in use is made again at the path with every line written so far (so a restart still
//! counts that spend; nothing is written twice), with an ERROR, and records continue there. A path that
//! names another file (or a link) is never written: that is a failure like a full disk (records kept in
//! memory, `/readyz` not ready with the reason; in strict mode requests refused) until it is moved away.
//!
//! Rotation happens here, between two writes: before writing a batch, a file that would grow past
//! `ledger_max_file_mb`, or that began on an earlier UTC day, is renamed to its rotated name and a new
//! `usage.jsonl` is made (a failure there is a failed write: records kept, strict-mode ones handed back).
//! Each synced line is folded into what the records since the last snapshot add up to, which goes to the
//! keeper (it holds the whole totals and writes the checkpoint) every `ledger_checkpoint_records` records
//! or `ledger_checkpoint_secs`, and at each rotation: the writer never copies the whole totals.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Writer, CHUNK, RETRY_EVERY};
use crate::ledger::keeper::{self, Position, Snapshot};
use crate::ledger::totals::Line;
use crate::ledger::{options, LEDGER_FILE};
use crate::util::lock;

/// How often an idle writer checks that the ledger's path still names its file.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Writer {
    /// Hands the keeper the totals so far when enough records came since the last time (or `force`).
    pub(super) fn snapshot_if_due(&mut self, force: bool) {
        let due = self.since_snapshot >= self.options.checkpoint_records
            || self.since_snapshot > 0
                && self.last_snapshot.elapsed() >= self.options.checkpoint_interval;
        if !(force || due) || self.file_missing {
            return;
        }
        let s = Snapshot {
            position: Position {
                seq: self.seq,
                offset: self.good_len,
                fingerprint: self.fingerprint.clone(),
                first_ms: self.first_ms,
                last_ms: self.last_ms,
            },
            delta: std::mem::take(&mut self.delta),
        };
        let _ = self.keeper.send(keeper::Msg::Snapshot(Box::new(s)));
        self.since_snapshot = 0;
        self.last_snapshot = Instant::now();
    }

    /// At shutdown: the last checkpoint written before the close returns.
    pub(super) fn close_keeper(&mut self) {
        if self.since_snapshot > 0 {
            self.snapshot_if_due(true);
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.keeper.send(keeper::Msg::Close(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }

    /// Whether the path is to be checked with nothing to write: about once a second, and while the path
    /// names another file, at the retry pace (never while the disk fails: a check is no write).
    pub(super) fn idle_check_due(&self) -> bool {
        if !self.pending.is_empty() || self.need_truncate {
            return false;
        }
        match (self.failing(), self.misplaced) {
            (false, _) => self.last_check.elapsed() >= CHECK_EVERY,
            (true, true) => self.last_check.elapsed() >= RETRY_EVERY,
            (true, false) => false,
        }
    }

    /// The path checked with nothing to write: a failure is reported like a failed write; a path in order
    /// again ends the failure it caused.
    pub(super) fn check_idle(&mut self) {
        match self.keep_in_place() {
            Ok(()) if self.misplaced => {
                self.misplaced = false;
                self.succeeded();
            }
            Ok(()) => {}
            Err(e) => {
                self.misplaced = true;
                self.failed(&e);
            }
        }
    }

    /// Checks that the path still names the file being written. A file moved away or deleted is made again
    /// at the path, holding every complete line written so far, and writing continues in it. A path that
    /// names anything else is an error: nothing is written there.
    pub(super) fn keep_in_place(&mut self) -> io::Result<()> {
        self.last_check = Instant::now();
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.file_missing => self.new_file(),
            Ok(m) if (m.dev(), m.ino()) == self.id => Ok(()),
            Ok(_) => Err(io::Error::other(format!(
                "{LEDGER_FILE} was replaced by another file while in use; nothing is written to that file and \
                 records are kept in memory: move it away (the ledger is then made again with everything it \
                 held), or restart tollgate to replay it"
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.recreate(),
            Err(e) => Err(e),
        }
    }

    /// Makes the ledger again at its path (moved away or deleted while in use) with the complete lines of
    /// the file still held open, and writes there from now on.
    fn recreate(&mut self) -> io::Result<()> {
        let len = self.good_len;
        let old = &*self.file;
        let file = crate::util::create_filled(&self.path, |new| copy_prefix(old, new, len))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{LEDGER_FILE} was moved away or deleted while in use and cannot be made again ({e})"
                    ),
                )
            })?;
        self.id = file_id(&file)?;
        self.file = Arc::new(file);
        *lock(&self.shared.active) = (self.seq, self.file.clone());
        self.need_truncate = false;
        log::error!(
            "usage ledger {}: the file was moved away or deleted while in use; made it again with the {len} bytes \
             written so far, and records continue there (the ledger is tollgate's record of spend: do not move \
             or rotate it while tollgate runs)",
            self.path.display()
        );
        Ok(())
    }

    /// Adds the lines about to count as synced to the totals and to the active file's time range.
    pub(super) fn fold_pending(&mut self) {
        if self.good_len == 0 {
            if let Some(first) = self.pending.front() {
                self.fingerprint =
                    crate::ledger::files::fingerprint(&first.line[..first.line.len() - 1]);
                self.file_day = Some(options::now() / 86_400);
            }
        }
        for e in &self.pending {
            if let Line::Record(ts) = self.delta.fold(&e.line[..e.line.len() - 1]) {
                if let Some(ms) = crate::util::parse_rfc3339_millis(&ts) {
                    self.first_ms = Some(self.first_ms.map_or(ms, |f| f.min(ms)));
                    self.last_ms = Some(self.last_ms.map_or(ms, |l| l.max(ms)));
                }
            }
        }
        self.since_snapshot += self.pending.len() as u64;
    }

    /// Rotates before the pending records are written when the file would grow past its size, or began on
    /// an earlier UTC day.
    pub(super) fn rotate_if_due(&mut self) -> io::Result<()> {
        if self.good_len == 0 {
            return Ok(());
        }
        let too_big = self.good_len + self.pending_bytes as u64 > self.options.max_file_bytes;
        let new_day = self.file_day.is_some_and(|d| options::now() / 86_400 > d);
        if too_big || new_day {
            self.rotate()?;
        }
        Ok(())
    }

    /// Renames the active file to its rotated name and makes a new one.
    fn rotate(&mut self) -> io::Result<()> {
        let now = options::now();
        let secs = |ms: Option<i64>| ms.map_or(now, |ms| (ms / 1000).max(0) as u64);
        let name =
            crate::ledger::files::segment_name(self.seq, secs(self.first_ms), secs(self.last_ms));
        let target = self.dir.join(&name);
        if std::fs::symlink_metadata(&target).is_ok() {
            return Err(io::Error::other(format!(
                "cannot rotate {LEDGER_FILE}: {name} already exists"
            )));
        }
        std::fs::rename(&self.path, &target).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot rotate {LEDGER_FILE} to {name}: {e}"),
            )
        })?;
        // From here the old file is done: what follows goes into a new one.
        let bytes = self.good_len;
        self.snapshot_if_due(true);
        self.seq += 1;
        self.good_len = 0;
        self.fingerprint.clear();
        (self.first_ms, self.last_ms, self.file_day) = (None, None, None);
        self.file_missing = true;
        log::info!("usage ledger: rotated {LEDGER_FILE} ({bytes} bytes) to {name}");
        self.new_file()
    }

    /// Makes the new active file after a rotation and has readers use it.
    fn new_file(&mut self) -> io::Result<()> {
        let file = crate::ledger::open_for_append(&self.path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot make a new {LEDGER_FILE} after a rotation: {e}"),
            )
        })?;
        self.id = file_id(&file)?;
        self.file = Arc::new(file);
        self.file_missing = false;
        {
            let mut a = lock(&self.shared.active);
            *a = (self.seq, self.file.clone());
            self.shared.synced_len.store(0, Ordering::Release);
        }
        // The checkpoint at the rotation: the keeper also looks at the rotated files then.
        self.snapshot_if_due(true);
        Ok(())
    }
}

/// Device and inode of an open file.
pub(super) fn file_id(f: &File) -> io::Result<(u64, u64)> {
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// Copies the first `len` bytes of `from` to the end of `to`.
fn copy_prefix(from: &File, to: &mut File, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < len {
        let want = ((len - at) as usize).min(buf.len());
        let n = from.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file held open is shorter than the {len} bytes written to it"),
            ));
        }
        to.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}
