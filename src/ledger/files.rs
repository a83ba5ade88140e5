//! The ledger's files in `data_dir`: the active `usage.jsonl`, and the files it rotated into, named
//! `usage-SEQ-FROM-TO.jsonl` (`.jsonl.gz` once compressed): SEQ orders them (the order they were written in),
//! FROM and TO are the UTC seconds of the earliest and latest record inside (`20260101T000000Z`), so a reader
//! asked for a time range skips a file without opening it. A file's records are its lines; a compressed
//! file holds the same bytes, gzip'ed.
//!
//! [`History`] is one look at all of them, in order, for every reader: queries, the shipper, `store
//! rebuild`, and the start's replay.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::checkpoint::CHECKPOINT_FILE;
use super::totals::Totals;
use super::LEDGER_FILE;

/// A rotated ledger file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its place in the order files were written in (the active file has the next one).
    pub seq: u64,
    /// UTC seconds of its earliest record (`ts`, floored to the second).
    pub from: u64,
    /// UTC seconds of its latest record (`ts`, floored to the second).
    pub to: u64,
    /// Where it is, under the name it was found by (`.jsonl.gz` when compressed).
    pub path: PathBuf,
    /// It is gzip'ed (`.jsonl.gz`).
    pub compressed: bool,
}

impl Segment {
    /// Whether it may hold a record with `ts` in [since, until) (Unix milliseconds; None: unbounded).
    pub fn overlaps(&self, since: Option<i64>, until: Option<i64>) -> bool {
        let from = self.from as i64 * 1000;
        let to = (self.to as i64 + 1) * 1000;
        since.is_none_or(|s| to > s) && until.is_none_or(|u| from < u)
    }

    /// Its file name (`usage-SEQ-FROM-TO.jsonl`, or `.jsonl.gz`).
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// `20260101T000000Z`: a UTC second in the basic ISO 8601 form (no colons, for file names).
pub(super) fn basic_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (y, m, d) = crate::util::civil_from_days(days);
    let s = secs % 86_400;
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

fn parse_basic_time(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| t.get(r)?.parse::<u64>().ok();
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    let days = crate::util::days_from_civil(y as i64, m as u32, d as u32);
    (days >= 0).then(|| days as u64 * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// The name of rotated file `seq` holding records from `from` to `to` (UTC seconds).
pub fn segment_name(seq: u64, from: u64, to: u64) -> String {
    format!(
        "usage-{seq:08}-{}-{}.jsonl",
        basic_time(from),
        basic_time(to)
    )
}

/// (seq, from, to, compressed) of a rotated file's name; None for any other name.
pub(super) fn parse_name(name: &str) -> Option<(u64, u64, u64, bool)> {
    let (stem, compressed) = match name.strip_suffix(".jsonl.gz") {
        Some(s) => (s, true),
        None => (name.strip_suffix(".jsonl")?, false),
    };
    let mut parts = stem.strip_prefix("usage-")?.split('-');
    let seq = parts.next()?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let from = parse_basic_time(parts.next()?)?;
    let to = parse_basic_time(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some((seq.parse().ok()?, from, to, compressed))
}

/// Removes the temporary files a crash cut short (they are never read): of checkpoints, of compressions of
/// rotated files, of the active file made again. Their names are `.{name}.{random}.tmp`
/// (`util::create_filled`), `name` one of the ledger's own; nothing else in the directory is touched.
pub(super) fn remove_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(of) = temp_of(&name) else {
            continue;
        };
        let what = if of == CHECKPOINT_FILE {
            "a checkpoint a stop cut short (the previous one is used)"
        } else if of.ends_with(".gz") {
            "a compression a stop cut short (the plain file is kept, and compressed again)"
        } else {
            "a copy of the ledger a stop cut short"
        };
        match std::fs::remove_file(e.path()) {
            Ok(()) => log::info!("usage ledger: removed {name}, {what}"),
            Err(err) => log::warn!("usage ledger: cannot remove {name}: {err}"),
        }
    }
}

/// The ledger file a temporary file's name stands for (`.usage.jsonl.Ab3….tmp` → `usage.jsonl`), if it is
/// one of the ledger's own.
fn temp_of(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (of, random) = inner.rsplit_once('.')?;
    let ours = of == CHECKPOINT_FILE || of == LEDGER_FILE || parse_name(of).is_some();
    (ours && !random.is_empty() && random.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(of)
}

/// The rotated files in `dir`, oldest first. A file both plain and compressed (a compression cut short
/// after its result was in place) is listed once, plain.
pub(super) fn segments(dir: &Path) -> io::Result<Vec<Segment>> {
    let mut out: Vec<Segment> = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some((seq, from, to, compressed)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        out.push(Segment {
            seq,
            from,
            to,
            path: entry.path(),
            compressed,
        });
    }
    out.sort_by_key(|s| (s.seq, s.compressed));
    out.dedup_by_key(|s| s.seq);
    Ok(out)
}

/// The start of the SHA-256 of a file's first line ("" while it has none): it tells one ledger file from
/// another (the shipper's cursor and the checkpoint name the file they count by it).
pub fn fingerprint(first_line: &[u8]) -> String {
    if first_line.is_empty() {
        return String::new();
    }
    let d = Sha256::digest(first_line);
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The first complete line of `r` (without its newline; empty when it has none).
pub(super) fn first_line(r: impl Read) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    BufReader::with_capacity(64 * 1024, r).read_until(b'\n', &mut line)?;
    if line.last() == Some(&b'\n') {
        line.pop();
        Ok(line)
    } else {
        Ok(Vec::new())
    }
}

/// Opens a rotated file for reading its lines from the start (decompressed when it is compressed). A
/// plain file compressed meanwhile is found under its new name.
pub(super) fn open_segment(seg: &Segment) -> io::Result<Box<dyn Read + Send>> {
    let open = |p: &Path| crate::util::open_owned(p, OpenOptions::new().read(true));
    if seg.compressed {
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(open(
            &seg.path,
        )?)));
    }
    match open(&seg.path) {
        Ok(f) => Ok(Box::new(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let gz = PathBuf::from(format!("{}.gz", seg.path.display()));
            Ok(Box::new(flate2::read::MultiGzDecoder::new(open(&gz)?)))
        }
        Err(e) => Err(e),
    }
}

/// The file being written: its place in the order, and (while the ledger runs) the open file and how much
/// of it is complete, synced lines.
#[derive(Clone)]
pub struct Active {
    /// Its place in the order (after every rotated file).
    pub seq: u64,
    /// The file, open for reading (None: there is none on disk yet).
    pub file: Option<Arc<File>>,
    /// How many of its bytes readers may read: its complete lines (while the ledger runs, its synced ones).
    pub len: u64,
}

/// One look at a ledger's files, oldest first: the rotated ones, then the active one; and what files
/// deleted by retention held, folded (from the checkpoint).
pub struct History {
    /// The data directory the files are in.
    pub dir: PathBuf,
    /// The rotated files, oldest first.
    pub segments: Vec<Segment>,
    /// The active file (`usage.jsonl`).
    pub active: Active,
    /// Files up to this seq were deleted after their totals went into `retired` (0: none).
    pub retired_through: u64,
    /// What the deleted files' records added up to (the checkpoint's `retired`); None when none were deleted.
    pub retired: Option<Arc<Totals>>,
}

impl History {
    /// The files of the ledger in `dir` as they are on disk (no ledger running there, or one that is: the
    /// active file is read up to its last complete line).
    pub fn at(dir: &Path) -> io::Result<History> {
        let segments = segments(dir)?;
        let cp = super::checkpoint::read(dir).ok().flatten();
        let (retired_through, retired) = cp.as_ref().map_or((0, None), |c| {
            (c.retired_through, Some(Arc::new(c.retired.clone())))
        });
        let seq = active_seq(&segments, cp.as_ref().map_or(0, |c| c.seq), retired_through);
        let path = dir.join(LEDGER_FILE);
        let (file, len) = match crate::util::open_owned(&path, OpenOptions::new().read(true)) {
            Ok(f) => {
                let len = complete_len(&f)?;
                (Some(Arc::new(f)), len)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(e),
        };
        Ok(History {
            dir: dir.to_path_buf(),
            segments,
            active: Active { seq, file, len },
            retired_through,
            retired: retired.filter(|_| retired_through > 0),
        })
    }

    /// Every file's seq, oldest first (the active one last).
    pub fn seqs(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.segments.iter().map(|s| s.seq).collect();
        v.push(self.active.seq);
        v
    }

    /// The rotated file `seq`, if there is one.
    pub fn segment(&self, seq: u64) -> Option<&Segment> {
        self.segments.iter().find(|s| s.seq == seq)
    }

    /// The file after `seq` in the order, if there is one.
    pub fn next_after(&self, seq: u64) -> Option<u64> {
        self.seqs().into_iter().find(|s| *s > seq)
    }

    /// The lines of file `seq` from byte `offset` of its (decompressed) content; for the active file, up to
    /// its complete, synced length.
    pub fn open_at(&self, seq: u64, offset: u64) -> io::Result<Box<dyn Read + Send>> {
        if seq == self.active.seq {
            let Some(f) = &self.active.file else {
                return Ok(Box::new(io::empty()));
            };
            let len = self.active.len.saturating_sub(offset);
            return Ok(Box::new(At {
                file: f.clone(),
                pos: offset,
                left: len,
            }));
        }
        let seg = self.segment(seq).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no ledger file {seq}"))
        })?;
        let mut r = open_segment(seg)?;
        if offset > 0 {
            let skipped = io::copy(&mut (&mut r).take(offset), &mut io::sink())?;
            if skipped < offset {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} is shorter than {offset} bytes", seg.name()),
                ));
            }
        }
        Ok(r)
    }

    /// The fingerprint of file `seq` ("" while it has no complete line).
    pub fn fingerprint(&self, seq: u64) -> io::Result<String> {
        Ok(fingerprint(&first_line(self.open_at(seq, 0)?)?))
    }
}

/// Reads an open file from `pos` for `left` bytes (with `pread`: the file may be renamed or appended to
/// meanwhile).
struct At {
    file: Arc<File>,
    pos: u64,
    left: u64,
}

impl Read for At {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (buf.len() as u64).min(self.left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The seq of the active file: after every rotated file, and never below what the checkpoint saw.
pub(super) fn active_seq(segments: &[Segment], checkpoint_seq: u64, retired_through: u64) -> u64 {
    let after = segments.last().map_or(1, |s| s.seq + 1);
    after.max(checkpoint_seq).max(retired_through + 1)
}

/// The length of an open file up to its last complete line.
pub fn complete_len(f: &File) -> io::Result<u64> {
    let len = f.metadata()?.len();
    let mut pos = len;
    let mut buf = vec![0u8; 64 * 1024];
    while pos > 0 {
        let n = (pos as usize).min(buf.len());
        let start = pos - n as u64;
        f.read_exact_at(&mut buf[..n], start)?;
        if let Some(i) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        pos = start;
    }
    Ok(0)
}

/// Compresses rotated file `seg` next to itself (`.gz`, written to a temporary file, synced and renamed into
/// place), then removes the plain one. Returns the compressed segment.
pub(super) fn compress(seg: &Segment) -> io::Result<Segment> {
    let gz_path = PathBuf::from(format!("{}.gz", seg.path.display()));
    let mut src = crate::util::open_owned(&seg.path, OpenOptions::new().read(true))?;
    src.seek(SeekFrom::Start(0))?;
    let file = crate::util::create_filled(&gz_path, |out| {
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut src, &mut enc)?;
        enc.finish()?;
        Ok(())
    })?;
    drop(file);
    std::fs::remove_file(&seg.path)?;
    if let Some(dir) = seg.path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(Segment {
        path: gz_path,
        compressed: true,
        ..seg.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_order_and_the_time_range() {
        let from = crate::util::parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
        let to = crate::util::parse_rfc3339("2026-01-02T23:59:59Z").unwrap();
        let name = segment_name(42, from, to);
        assert_eq!(
            name,
            "usage-00000042-20260102T030405Z-20260102T235959Z.jsonl"
        );
        assert_eq!(parse_name(&name), Some((42, from, to, false)));
        assert_eq!(
            parse_name(&format!("{name}.gz")),
            Some((42, from, to, true))
        );
        for bad in [
            "usage.jsonl",
            "usage-x-20260102T030405Z-20260102T235959Z.jsonl",
            "usage-1-20261302T030405Z-20260102T235959Z.jsonl",
            "usage-1-20260102T030405Z.jsonl",
            "usage-1-20260102T030405Z-20260102T235959Z.json",
        ] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
        let seg = Segment {
            seq: 1,
            from,
            to,
            path: PathBuf::from(name),
            compressed: false,
        };
        let ms = |s: &str| crate::util::parse_rfc3339_millis(s);
        assert!(seg.overlaps(ms("2026-01-02T23:59:59.500Z"), None));
        assert!(!seg.overlaps(ms("2026-01-03T00:00:00Z"), None));
        assert!(!seg.overlaps(None, ms("2026-01-02T03:04:05Z")));
        assert!(seg.overlaps(None, ms("2026-01-02T03:04:05.001Z")));
    }
}
