//! The start: the checkpoint is read and only the records after its position are replayed (every record,
//! with none or one that does not match the files), so a start costs the same with years of history as
//! with none. The active file's torn last line (a crash mid-write) is cut off with a warning; impossible
//! records (a negative cost, bad token counts) are refused.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::checkpoint::{self, Checkpoint};
use super::files::{self, Segment};
use super::totals::{Line, Totals};
use super::{Replay, LEDGER_FILE};

/// What the start found, for the writer and the keeper.
pub(super) struct Start {
    pub replay: Replay,
    /// Everything up to the end of the active file.
    pub totals: Totals,
    pub seq: u64,
    /// The active file's length (after a torn tail was cut off).
    pub good_len: u64,
    pub fingerprint: String,
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub retired_through: u64,
    pub retired: Totals,
}

/// Where replay starts: a checkpoint's position, or the first file there is.
struct From {
    seq: u64,
    offset: u64,
}

/// Reads the ledger in `dir`: the checkpoint, then every record after it. With `repair`, a torn last line of
/// the active file is cut off and temporary files of cut-short checkpoints are removed; without, nothing is
/// changed (for `tollgate keys list` next to a running server).
pub(super) fn start(dir: &Path, repair: bool, now: u64) -> io::Result<Start> {
    if repair {
        files::remove_temps(dir);
    }
    let segments = files::segments(dir)?;
    let cp = match checkpoint::read(dir) {
        Ok(cp) => cp,
        Err(e) => {
            log::warn!(
                "usage ledger: the checkpoint {} cannot be read ({e}); every record is replayed",
                checkpoint::CHECKPOINT_FILE
            );
            None
        }
    };
    let (retired_through, retired) = cp.as_ref().map_or((0, Totals::default()), |c| {
        (c.retired_through, c.retired.clone())
    });
    let seq = files::active_seq(&segments, cp.as_ref().map_or(0, |c| c.seq), retired_through);
    let path = dir.join(LEDGER_FILE);
    let mut options = OpenOptions::new();
    options.read(true).write(repair);
    let active = match crate::util::open_owned(&path, &mut options) {
        Ok(f) => Some(f),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut s = Start {
        replay: Replay::default(),
        totals: Totals::default(),
        seq,
        good_len: 0,
        fingerprint: String::new(),
        first_ms: None,
        last_ms: None,
        retired_through,
        retired,
    };
    let from = match cp {
        Some(cp) if matches(&cp, seq, &segments, active.as_ref())? => {
            s.replay.checkpoint = Some((cp.written.clone(), cp.totals.records));
            if cp.seq == seq {
                s.fingerprint = cp.fingerprint.clone();
                (s.first_ms, s.last_ms) = (cp.first_ms, cp.last_ms);
            }
            s.totals = cp.totals;
            From {
                seq: cp.seq,
                offset: cp.offset,
            }
        }
        Some(cp) => {
            log::warn!(
                "usage ledger: the checkpoint of {} does not match the ledger files (restored or edited?); every \
                 record in them is replayed",
                cp.written
            );
            s.totals = s.retired.clone();
            From {
                seq: retired_through + 1,
                offset: 0,
            }
        }
        None => From { seq: 0, offset: 0 },
    };
    // Days no budget period holding now can count are not kept while replaying.
    s.totals.scratch.floor = super::totals::first_counted_day(now);
    for seg in segments.iter().filter(|g| g.seq >= from.seq) {
        let offset = if seg.seq == from.seq { from.offset } else { 0 };
        replay_segment(seg, offset, &mut s)?;
        s.replay.files += 1;
    }
    if let Some(file) = active {
        let offset = if seq == from.seq { from.offset } else { 0 };
        replay_active(&path, file, offset, repair, &mut s)?;
        s.replay.files += 1;
    }
    s.totals.prune(now);
    s.replay.total_records = s.totals.records;
    Ok(s)
}

/// Whether the checkpoint's position is in the files as they are: its file there, at least as long, with the
/// same first line.
fn matches(
    cp: &Checkpoint,
    active_seq: u64,
    segments: &[Segment],
    active: Option<&File>,
) -> io::Result<bool> {
    let (first, len) = if cp.seq == active_seq {
        let Some(f) = active else {
            return Ok(cp.offset == 0);
        };
        let mut r = f;
        r.seek(SeekFrom::Start(0))?;
        (files::first_line(r)?, Some(f.metadata()?.len()))
    } else {
        let Some(seg) = segments.iter().find(|g| g.seq == cp.seq) else {
            return Ok(false);
        };
        let len = (!seg.compressed)
            .then(|| std::fs::metadata(&seg.path).map(|m| m.len()).ok())
            .flatten();
        (files::first_line(files::open_segment(seg)?)?, len)
    };
    if cp.offset == 0 {
        return Ok(true);
    }
    Ok(files::fingerprint(&first) == cp.fingerprint && len.is_none_or(|l| cp.offset <= l))
}

/// Counts one line, logging one that is not a record; returns a record's `ts`.
fn fold_line<'a>(s: &mut Start, name: &str, at: u64, text: &'a [u8]) -> Option<Cow<'a, str>> {
    match s.totals.fold(text) {
        Line::Record(ts) => {
            s.replay.records += 1;
            Some(ts)
        }
        Line::Blank => None,
        Line::Impossible(why) => {
            s.replay.bad_lines += 1;
            log::error!("usage ledger {name}: the line at byte {at} is an impossible record ({why}); not counted");
            None
        }
        Line::NotRecord(why) => {
            s.replay.bad_lines += 1;
            log::warn!(
                "usage ledger {name}: the line at byte {at} is not a record ({why}); skipped"
            );
            None
        }
    }
}

/// Replays a rotated file from `offset` (rotated files hold only complete lines).
fn replay_segment(seg: &Segment, offset: u64, s: &mut Start) -> io::Result<()> {
    let mut r = files::open_segment(seg)?;
    if offset > 0 {
        io::copy(&mut (&mut r).take(offset), &mut io::sink())?;
    }
    let name = seg.name();
    each_line(r, offset, |at, text, complete| {
        if complete {
            fold_line(s, &name, at, text);
        } else {
            log::warn!("usage ledger {name}: its last line is incomplete; skipped");
        }
    })
}

/// Replays the active file from `offset`; a torn last line is cut off (with `repair`).
fn replay_active(
    path: &Path,
    file: File,
    offset: u64,
    repair: bool,
    s: &mut Start,
) -> io::Result<()> {
    let mut r = &file;
    r.seek(SeekFrom::Start(offset))?;
    let mut good_end = offset;
    let mut torn = 0u64;
    let mut first_line = offset == 0;
    let name = LEDGER_FILE.to_string();
    let mut range = Range::default();
    each_line(r, offset, |at, text, complete| {
        if !complete {
            torn = text.len() as u64;
            return;
        }
        if first_line {
            s.fingerprint = files::fingerprint(text);
            first_line = false;
        }
        good_end = at + text.len() as u64 + 1;
        if let Some(ts) = fold_line(s, &name, at, text) {
            range.add(&ts);
        }
    })?;
    for ms in [range.first(), range.last()].into_iter().flatten() {
        s.first_ms = Some(s.first_ms.map_or(ms, |f| f.min(ms)));
        s.last_ms = Some(s.last_ms.map_or(ms, |l| l.max(ms)));
    }
    s.good_len = good_end;
    if torn > 0 {
        s.replay.torn_bytes = torn;
        log::warn!(
            "usage ledger {}: its last line is torn (a crash mid-write?); {} its {torn} bytes",
            path.display(),
            if repair { "cutting off" } else { "skipping" }
        );
        if repair {
            file.set_len(good_end)?;
            file.sync_all()?;
        }
    }
    Ok(())
}

/// The earliest and latest `ts` of many records: UTC ones (the ledger's own) compared as text, parsed once
/// at the end; any other parsed as it comes.
#[derive(Default)]
struct Range {
    first: Option<String>,
    last: Option<String>,
    other: Option<(i64, i64)>,
}

impl Range {
    fn add(&mut self, ts: &str) {
        if ts.len() == 24 && ts.ends_with('Z') {
            // (The buffers are reused: records come in time order, so nearly every one is a new latest.)
            for (slot, better) in [(&mut self.first, false), (&mut self.last, true)] {
                match slot {
                    Some(cur) if (ts > cur.as_str()) == better && ts != cur.as_str() => {
                        cur.clear();
                        cur.push_str(ts);
                    }
                    Some(_) => {}
                    None => *slot = Some(ts.to_string()),
                }
            }
        } else if let Some(ms) = crate::util::parse_rfc3339_millis(ts) {
            let (a, b) = self.other.unwrap_or((ms, ms));
            self.other = Some((a.min(ms), b.max(ms)));
        }
    }

    fn first(&self) -> Option<i64> {
        let text = self
            .first
            .as_deref()
            .and_then(crate::util::parse_rfc3339_millis);
        match (text, self.other) {
            (Some(t), Some((o, _))) => Some(t.min(o)),
            (t, o) => t.or(o.map(|o| o.0)),
        }
    }

    fn last(&self) -> Option<i64> {
        let text = self
            .last
            .as_deref()
            .and_then(crate::util::parse_rfc3339_millis);
        match (text, self.other) {
            (Some(t), Some((_, o))) => Some(t.max(o)),
            (t, o) => t.or(o.map(|o| o.1)),
        }
    }
}

/// Calls `f(offset, line, complete)` for each line of `r` (without its newline), `r` starting at `start`.
fn each_line(r: impl Read, start: u64, mut f: impl FnMut(u64, &[u8], bool)) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(1024 * 1024, r);
    let mut line = Vec::with_capacity(512);
    let mut at = start;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') {
            f(at, &line, false);
            return Ok(());
        }
        f(at, &line[..n - 1], true);
        at += n as u64;
    }
}
