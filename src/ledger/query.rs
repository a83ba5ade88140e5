//! Reading the ledger newest first, across its files: each file is scanned backwards in blocks, so recent
//! records (what the console and support ask for) are found without reading the whole history, and a rotated
//! file outside the asked time range is skipped by its name.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::FileExt;

use super::files::{History, Segment};
use super::{CacheUse, Record, Status};

/// Which statuses to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusFilter {
    /// One exact HTTP status.
    Code(u16),
    /// A class such as 4xx (the leading digit).
    Class(u16),
    /// Requests whose client went away before the answer was complete.
    ClientClosed,
    /// Requests cut by the server's shutdown deadline.
    Shutdown,
    /// Any status of 400 or more, a client disconnect, a request cut by shutdown, or a stream that failed
    /// after it started.
    Error,
}

impl StatusFilter {
    /// Parses `200`, `4xx`, `client_closed`, `shutdown` or `error`.
    pub fn parse(s: &str) -> Option<StatusFilter> {
        match s {
            "client_closed" => Some(StatusFilter::ClientClosed),
            "shutdown" => Some(StatusFilter::Shutdown),
            "error" | "errors" => Some(StatusFilter::Error),
            _ if s.len() == 3 && s.ends_with("xx") => s[..1].parse().ok().map(StatusFilter::Class),
            _ => s.parse().ok().map(StatusFilter::Code),
        }
    }

    fn matches(&self, r: &Record) -> bool {
        match (self, r.status) {
            (StatusFilter::Code(c), Status::Http(s)) => *c == s,
            (StatusFilter::Class(c), Status::Http(s)) => s / 100 == *c,
            (StatusFilter::ClientClosed, Status::ClientClosed) => true,
            (StatusFilter::Shutdown, Status::Shutdown) => true,
            (StatusFilter::Error, Status::Http(s)) => s >= 400 || r.error.is_some(),
            (StatusFilter::Error, Status::ClientClosed | Status::Shutdown) => true,
            _ => false,
        }
    }
}

/// Which records the answer cache's part in keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFilter {
    /// Records marked so (`hit`, `miss`, `bypass`).
    Is(CacheUse),
    /// Every record that is not a hit (upstream answers and refusals, cached models or not).
    NotHit,
}

impl CacheFilter {
    /// Parses `hit`, `miss`, `bypass` or `not_hit`.
    pub fn parse(s: &str) -> Option<CacheFilter> {
        match s {
            "hit" => Some(CacheFilter::Is(CacheUse::Hit)),
            "miss" => Some(CacheFilter::Is(CacheUse::Miss)),
            "bypass" => Some(CacheFilter::Is(CacheUse::Bypass)),
            "not_hit" => Some(CacheFilter::NotHit),
            _ => None,
        }
    }

    fn matches(self, r: &Record) -> bool {
        match self {
            CacheFilter::Is(c) => r.cache == Some(c),
            CacheFilter::NotHit => r.cache != Some(CacheUse::Hit),
        }
    }
}

/// Conditions on records; `None` means any.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The key's name, exactly.
    pub key: Option<String>,
    /// The model, exactly (the record's `model`).
    pub model: Option<String>,
    /// Which statuses.
    pub status: Option<StatusFilter>,
    /// The client's `X-Client-Request-ID`, exactly.
    pub client_request_id: Option<String>,
    /// The gateway's request id, exactly.
    pub request_id: Option<String>,
    /// The start of the range of `ts`, as an instant in Unix milliseconds (inclusive).
    pub since: Option<i64>,
    /// The end of the range of `ts`, as an instant in Unix milliseconds (exclusive).
    pub until: Option<i64>,
    /// Skip this many matches (paging), then return at most `limit`.
    pub offset: usize,
    /// The most records to return (0: 100).
    pub limit: usize,
    /// Lowercase text to find in the key, model, error or reason (a substring).
    pub search: Option<String>,
    /// What the answer cache did.
    pub cache: Option<CacheFilter>,
}

/// Whether `q` (lowercase) is in the record's key, model, error or reason.
fn found(r: &Record, q: &str) -> bool {
    let has = |t: &str| t.to_lowercase().contains(q);
    has(&r.key)
        || has(&r.model)
        || r.error.as_deref().is_some_and(has)
        || r.reason.as_deref().is_some_and(has)
}

impl Filter {
    /// Whether `r` meets every condition set.
    pub fn matches(&self, r: &Record) -> bool {
        self.key.as_ref().is_none_or(|k| &r.key == k)
            && self.model.as_ref().is_none_or(|m| &r.model == m)
            && self.status.as_ref().is_none_or(|s| s.matches(r))
            && self
                .client_request_id
                .as_ref()
                .is_none_or(|c| r.client_request_id.as_ref() == Some(c))
            && self.request_id.as_ref().is_none_or(|c| &r.request_id == c)
            && (self.since.is_none() && self.until.is_none() || self.in_window(r))
            && self.search.as_ref().is_none_or(|q| found(r, q))
            && self.cache.is_none_or(|c| c.matches(r))
    }

    /// Whether the record's `ts`, read as an instant, is within `since` and `until`.
    fn in_window(&self, r: &Record) -> bool {
        let Some(t) = crate::util::parse_rfc3339_millis(&r.ts) else {
            return false;
        };
        self.since.is_none_or(|s| t >= s) && self.until.is_none_or(|u| t < u)
    }

    fn limit(&self) -> usize {
        if self.limit == 0 {
            100
        } else {
            self.limit
        }
    }
}

/// How far before `since` a backwards scan keeps looking.
const STOP_MARGIN_SECS: u64 = 6 * 3600;

/// A page of matches being gathered newest first, across files.
struct Page<'a> {
    filter: &'a Filter,
    out: Vec<Record>,
    skipped: usize,
    limit: usize,
    /// Records are appended when a request ends, stamped with when it began: a record more than this much
    /// older than `since` means everything before it is older still (streams longer than that are rare).
    cutoff: Option<i64>,
    done: bool,
}

impl Page<'_> {
    /// Takes one record (newest first); false once nothing more is wanted.
    fn take(&mut self, r: Record) -> bool {
        if self
            .cutoff
            .is_some_and(|c| crate::util::parse_rfc3339_millis(&r.ts).is_some_and(|t| t < c))
        {
            self.done = true;
            return false;
        }
        if self.filter.matches(&r) {
            if self.skipped < self.filter.offset {
                self.skipped += 1;
            } else {
                self.out.push(r);
            }
        }
        self.done = self.out.len() >= self.limit;
        !self.done
    }
}

/// Records of the ledger's files matching `filter`, newest first: the active file scanned backwards from its
/// end, then the rotated files from the newest, skipping without opening every one whose time range (in its
/// name) is outside `since`..`until`. A compressed file is read forwards, keeping only the newest matches.
pub(super) fn scan(history: &History, filter: &Filter) -> io::Result<Vec<Record>> {
    let mut page = Page {
        filter,
        out: Vec::new(),
        skipped: 0,
        limit: filter.limit(),
        cutoff: filter.since.map(|t| t - STOP_MARGIN_SECS as i64 * 1000),
        done: false,
    };
    if let Some(f) = &history.active.file {
        each_line_backwards_in(f, history.active.len, |line| match parse(line) {
            Some(r) => page.take(r),
            None => true,
        })?;
    }
    for seg in history.segments.iter().rev() {
        if page.done {
            break;
        }
        if !seg.overlaps(filter.since, filter.until) {
            continue;
        }
        let read = if seg.compressed {
            scan_compressed(seg, &mut page)
        } else {
            scan_plain(seg, &mut page)
        };
        match read {
            Ok(()) => {}
            // Deleted by retention meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(page.out)
}

fn parse(line: &[u8]) -> Option<Record> {
    serde_json::from_slice::<Record>(line).ok()
}

fn scan_plain(seg: &Segment, page: &mut Page) -> io::Result<()> {
    let file = match crate::util::open_owned(&seg.path, std::fs::OpenOptions::new().read(true)) {
        Ok(f) => f,
        // Compressed meanwhile.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let gz = Segment {
                path: format!("{}.gz", seg.path.display()).into(),
                compressed: true,
                ..seg.clone()
            };
            return scan_compressed(&gz, page);
        }
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    each_line_backwards_in(&file, len, |line| match parse(line) {
        Some(r) => page.take(r),
        None => true,
    })
}

/// A compressed file, read forwards: the matches it holds, of which only the newest the page can still
/// take are kept, then taken newest first.
fn scan_compressed(seg: &Segment, page: &mut Page) -> io::Result<()> {
    let want = (page.filter.offset - page.skipped) + (page.limit - page.out.len());
    let mut kept: VecDeque<Record> = VecDeque::new();
    let r = BufReader::with_capacity(256 * 1024, super::files::open_segment(seg)?);
    for line in r.split(b'\n') {
        let Some(rec) = parse(&line?) else {
            continue;
        };
        if page.filter.matches(&rec) {
            if kept.len() == want {
                kept.pop_front();
            }
            kept.push_back(rec);
        }
    }
    while let Some(r) = kept.pop_back() {
        if !page.take(r) {
            return Ok(());
        }
    }
    if page.cutoff.is_some_and(|c| (seg.from as i64) * 1000 < c) {
        page.done = true;
    }
    Ok(())
}

/// Like [`scan`], with records not yet in the file (the writer's backlog, oldest first) counted as the
/// newest.
pub(super) fn scan_with_unwritten(
    history: &History,
    filter: &Filter,
    unwritten: &[std::sync::Arc<[u8]>],
) -> io::Result<Vec<Record>> {
    let limit = filter.limit();
    // Newest first, parsed only until the page is full.
    let mut matched = unwritten
        .iter()
        .rev()
        .filter_map(|line| serde_json::from_slice::<Record>(line).ok())
        .filter(|r| filter.matches(r));
    let mut skipped = 0;
    while skipped < filter.offset && matched.next().is_some() {
        skipped += 1;
    }
    let mut out: Vec<Record> = matched.take(limit).collect();
    if out.len() < limit {
        let rest = Filter {
            offset: filter.offset - skipped,
            limit: limit - out.len(),
            ..filter.clone()
        };
        out.extend(scan(history, &rest)?);
    }
    Ok(out)
}

/// Calls `f` with each complete line of the file at `path`, last line first, until `f` returns false.
#[cfg(test)]
pub(crate) fn each_line_backwards(
    path: &std::path::Path,
    f: impl FnMut(&[u8]) -> bool,
) -> io::Result<()> {
    let file = match crate::util::open_owned(path, std::fs::OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    each_line_backwards_in(&file, len, f)
}

/// Calls `f` with each line of the first `len` bytes of `file`, last line first, until `f` returns false.
pub(super) fn each_line_backwards_in(
    file: &File,
    len: u64,
    mut f: impl FnMut(&[u8]) -> bool,
) -> io::Result<()> {
    let mut pos = len;
    let mut carry: Vec<u8> = Vec::new();
    let mut block = vec![0u8; 64 * 1024];
    while pos > 0 {
        let n = (pos as usize).min(block.len());
        pos -= n as u64;
        file.read_exact_at(&mut block[..n], pos)?;
        let mut chunk = block[..n].to_vec();
        chunk.extend_from_slice(&carry);
        let mut end = chunk.len();
        // Lines are complete only once their start is known; the part before the first newline carries on.
        while let Some(i) = chunk[..end].iter().rposition(|&b| b == b'\n') {
            let line = &chunk[i + 1..end];
            if !line.is_empty() && !f(line) {
                return Ok(());
            }
            end = i;
        }
        carry = chunk[..end].to_vec();
    }
    if !carry.is_empty() {
        f(&carry);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_back_last_first_across_blocks() {
        let dir =
            std::env::temp_dir().join(format!("tollgate-scan-{}", crate::util::random_base62(8)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let lines: Vec<String> = (0..20_000)
            .map(|i| format!("line-{i}-{}", "x".repeat(i % 7)))
            .collect();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let mut got = Vec::new();
        each_line_backwards(&path, |l| {
            got.push(String::from_utf8(l.to_vec()).unwrap());
            true
        })
        .unwrap();
        got.reverse();
        assert_eq!(got, lines);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn status_filters() {
        assert_eq!(StatusFilter::parse("5xx"), Some(StatusFilter::Class(5)));
        assert_eq!(StatusFilter::parse("429"), Some(StatusFilter::Code(429)));
        assert_eq!(
            StatusFilter::parse("client_closed"),
            Some(StatusFilter::ClientClosed)
        );
        assert_eq!(
            StatusFilter::parse("shutdown"),
            Some(StatusFilter::Shutdown)
        );
        assert_eq!(StatusFilter::parse("nope"), None);
    }
}
