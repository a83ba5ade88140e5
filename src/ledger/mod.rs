//! The usage ledger: one JSON line per request that reached an upstream, in `data_dir/usage.jsonl`.
//!
//! Workers hand records to one writer thread over an unbounded channel and never wait for the disk. The
//! writer batches lines and syncs them every `sync_interval` (so a `kill -9` loses at most that much); in
//! strict mode each record is synced before the worker lets its response end. At start the file is replayed
//! to rebuild every key's spend; a torn last line (a crash mid-write) is cut off with a warning.

mod query;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use serde::{Deserialize, Serialize};

pub use query::{Filter, StatusFilter};

/// File name of the ledger inside `data_dir`.
pub const LEDGER_FILE: &str = "usage.jsonl";

/// The status a request ended with: the HTTP status the client got, or `client_closed` when the client went
/// away before the answer was complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Http(u16),
    ClientClosed,
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Status::Http(c) => s.serialize_u16(*c),
            Status::ClientClosed => s.serialize_str("client_closed"),
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
    pub upstream: String,
    pub stream: bool,
    pub status: Status,
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Tokens were estimated from the text because the upstream reported none.
    #[serde(default)]
    pub estimated: bool,
    /// Credits charged.
    pub cost: f64,
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the replay at start found.
#[derive(Debug, Default)]
pub struct Replay {
    /// Total cost per key name.
    pub spent: HashMap<String, f64>,
    pub records: u64,
    /// Lines that did not parse (skipped).
    pub bad_lines: u64,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes: u64,
}

enum Msg {
    Record(Box<Record>, Option<Sender<()>>),
    Flush(Sender<()>),
}

/// The handle workers use; cheap to share.
pub struct Ledger {
    tx: Sender<Msg>,
    path: PathBuf,
    strict: bool,
    /// False after the last write or sync failed (for `/readyz`).
    healthy: Arc<AtomicBool>,
}

impl Ledger {
    /// Replays the ledger in `data_dir`, repairs a torn tail, and starts the writer thread.
    pub fn open(
        data_dir: &Path,
        sync_interval: Duration,
        strict: bool,
    ) -> io::Result<(Ledger, Replay)> {
        let path = data_dir.join(LEDGER_FILE);
        let replay = replay(&path)?;
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let (tx, rx) = unbounded();
        let healthy = Arc::new(AtomicBool::new(true));
        let h = healthy.clone();
        std::thread::Builder::new()
            .name("tollgate-ledger".into())
            .spawn(move || writer(file, rx, sync_interval, h))?;
        Ok((
            Ledger {
                tx,
                path,
                strict,
                healthy,
            },
            replay,
        ))
    }

    /// Queues a record. In strict mode, waits until it is on disk.
    pub fn append(&self, rec: Record) {
        if self.strict {
            let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
            if self
                .tx
                .send(Msg::Record(Box::new(rec), Some(ack_tx)))
                .is_ok()
            {
                let _ = ack_rx.recv();
            }
        } else {
            let _ = self.tx.send(Msg::Record(Box::new(rec), None));
        }
    }

    /// Waits until everything queued so far is written and synced.
    pub fn flush(&self) {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Flush(ack_tx)).is_ok() {
            let _ = ack_rx.recv_timeout(Duration::from_secs(30));
        }
    }

    /// Records matching `filter`, newest first (everything queued so far is flushed first).
    pub fn query(&self, filter: &Filter) -> io::Result<Vec<Record>> {
        self.flush();
        query::scan(&self.path, filter)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the writer is alive and its last write and sync succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
}

fn writer(file: File, rx: Receiver<Msg>, sync_interval: Duration, healthy: Arc<AtomicBool>) {
    let mut out = BufWriter::with_capacity(64 * 1024, file);
    let mut dirty = false;
    let mut last_sync = Instant::now();
    let mut acks: Vec<Sender<()>> = Vec::new();
    loop {
        let wait = if dirty {
            sync_interval.saturating_sub(last_sync.elapsed())
        } else {
            Duration::from_secs(3600)
        };
        let msg = rx.recv_timeout(wait);
        let closed = matches!(msg, Err(RecvTimeoutError::Disconnected));
        match msg {
            Ok(Msg::Record(rec, ack)) => {
                match serde_json::to_vec(&rec) {
                    Ok(mut line) => {
                        line.push(b'\n');
                        if let Err(e) = out.write_all(&line) {
                            log::error!("usage ledger: cannot write a record: {e}");
                            healthy.store(false, Ordering::Relaxed);
                        }
                        dirty = true;
                    }
                    Err(e) => log::error!("usage ledger: cannot encode a record: {e}"),
                }
                if let Some(a) = ack {
                    acks.push(a);
                }
            }
            Ok(Msg::Flush(ack)) => acks.push(ack),
            Err(_) => {}
        }
        let due = dirty && last_sync.elapsed() >= sync_interval;
        if due || !acks.is_empty() || closed {
            if dirty {
                let synced = out.flush().and_then(|_| out.get_ref().sync_data());
                match synced {
                    Ok(()) => healthy.store(true, Ordering::Relaxed),
                    Err(e) => {
                        log::error!("usage ledger: cannot sync: {e}");
                        healthy.store(false, Ordering::Relaxed);
                    }
                }
                dirty = false;
            }
            last_sync = Instant::now();
            for a in acks.drain(..) {
                let _ = a.send(());
            }
        }
        if closed {
            return;
        }
    }
}

#[derive(Deserialize)]
struct Spend<'a> {
    #[serde(borrow)]
    key: std::borrow::Cow<'a, str>,
    cost: f64,
}

/// Reads the whole ledger, totalling spend per key. A last line without its newline is torn: it is cut off
/// (so new records do not glue onto it) and reported.
fn replay(path: &Path) -> io::Result<Replay> {
    let mut result = Replay::default();
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(result),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::with_capacity(1024 * 1024, &file);
    let mut line = Vec::with_capacity(512);
    let mut good_end: u64 = 0;
    let mut line_no = 0u64;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line.last() != Some(&b'\n') {
            result.torn_bytes = n as u64;
            log::warn!(
                "usage ledger {}: line {line_no} is torn (a crash mid-write?); skipping its {n} bytes",
                path.display()
            );
            break;
        }
        good_end += n as u64;
        let text = &line[..line.len() - 1];
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Spend>(text) {
            Ok(s) => {
                *result.spent.entry(s.key.into_owned()).or_insert(0.0) += s.cost;
                result.records += 1;
            }
            Err(e) => {
                result.bad_lines += 1;
                log::warn!(
                    "usage ledger {}: line {line_no} is not a record ({e}); skipped",
                    path.display()
                );
            }
        }
    }
    drop(reader);
    if result.torn_bytes > 0 {
        let mut f = file;
        f.set_len(good_end)?;
        f.seek(SeekFrom::End(0))?;
        f.sync_all()?;
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, cost: f64, n: u64) -> Record {
        Record {
            ts: crate::util::rfc3339_millis(1_700_000_000_000 + n),
            request_id: format!("req_{n}"),
            client_request_id: None,
            key: key.into(),
            group: "g".into(),
            model: "m".into(),
            protocol: "chat".into(),
            upstream: "u".into(),
            stream: false,
            status: Status::Http(200),
            input_tokens: 1,
            cached_input_tokens: 0,
            output_tokens: 2,
            reasoning_tokens: 0,
            estimated: false,
            cost,
            latency_ms: 3,
            error: None,
        }
    }

    #[test]
    fn records_roundtrip_and_replay_totals_spend() {
        let dir =
            std::env::temp_dir().join(format!("tollgate-ledger-{}", crate::util::random_base62(8)));
        std::fs::create_dir_all(&dir).unwrap();
        {
            let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(50), false).unwrap();
            assert_eq!(replay.records, 0);
            ledger.append(record("a", 1.5, 1));
            ledger.append(record("a", 2.0, 2));
            let mut closed = record("b", 0.25, 3);
            closed.status = Status::ClientClosed;
            ledger.append(closed);
            let found = ledger.query(&Filter::default()).unwrap();
            assert_eq!(found.len(), 3);
            assert_eq!(found[0].request_id, "req_3", "newest first");
            assert_eq!(found[0].status, Status::ClientClosed);
        }
        // A torn tail is cut off and reported; the rest still counts.
        let path = dir.join(LEDGER_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"ts\":\"2026-01-01T00:00:00.000Z\",\"key\":\"a\",\"co")
            .unwrap();
        drop(f);
        let (ledger, replay) = Ledger::open(&dir, Duration::from_millis(50), true).unwrap();
        assert_eq!(replay.records, 3);
        assert!(replay.torn_bytes > 0);
        assert_eq!(replay.spent["a"], 3.5);
        assert_eq!(replay.spent["b"], 0.25);
        ledger.append(record("a", 1.0, 4));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(text
            .lines()
            .all(|l| serde_json::from_str::<Record>(l).is_ok()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
