//! Logging to stderr: human-readable lines by default, or JSON lines (`log_format = "json"` or
//! `tollgate serve --log-format json`) for log shippers. Never a key, an upstream credential or a prompt:
//! nothing logged carries them, every line is scrubbed of upstream credentials as a last line of defence,
//! third-party crates that dump wire data are capped at info, and control characters in text lines are
//! escaped so that no client-chosen string can forge a line.
//!
//! A line is formatted on the thread that logs it and written by one writer thread, so a slow consumer of
//! stderr (a pipe, journald under pressure) never holds up a request; the queue is bounded, and when it is
//! full a line is dropped rather than making a request thread wait (counted in
//! `tollgate_log_lines_dropped_total`, and said in the log once the queue has room again); only lines that
//! carry data nothing else holds (`MUST_WRITE_TARGET`: unwritten usage records at shutdown) wait for room.
//! `log::logger().flush()` returns once every line logged before it is written (the binary calls it before
//! it exits).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_channel::{Receiver, Sender};

static JSON: AtomicBool = AtomicBool::new(false);

/// Lines dropped because the writer's queue was full (a metric), and those not yet reported in the log.
static DROPPED: AtomicU64 = AtomicU64::new(0);
static DROPPED_SINCE_REPORT: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped so far because stderr could not keep up.
pub fn dropped_lines() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Lines of this target are never dropped: they carry data nothing else holds (usage records the ledger
/// could not write at shutdown).
pub const MUST_WRITE_TARGET: &str = "tollgate::ledger::unwritten";

/// The target of the one-line-per-request summaries.
pub const REQUEST_TARGET: &str = "tollgate::request";

/// Lines waiting for the writer; beyond them a line is dropped (and counted).
const QUEUE: usize = 16 * 1024;

/// Whether logs are JSON lines.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Starts logging at `level` (`info`, `debug`, ...), as text or JSON lines.
pub fn init(level: &str, json: bool) {
    let level = level.parse().unwrap_or(log::LevelFilter::Info);
    JSON.store(json, Ordering::Relaxed);
    let (tx, rx) = crossbeam_channel::bounded(QUEUE);
    let writer = std::thread::Builder::new()
        .name("tollgate-log".into())
        .spawn(move || write_lines(rx));
    // Without the writer thread, lines are written by the thread that logs them.
    let tx = writer.ok().map(|_| tx);
    if log::set_boxed_logger(Box::new(Logger { level, json, tx })).is_ok() {
        log::set_max_level(level);
    }
}

enum Msg {
    Line(String),
    Flush(Sender<()>),
}

fn write_lines(rx: Receiver<Msg>) {
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr());
    for msg in rx.iter() {
        match msg {
            Msg::Line(line) => {
                let _ = out.write_all(line.as_bytes());
                if rx.is_empty() {
                    let _ = out.flush();
                }
            }
            Msg::Flush(done) => {
                let _ = out.flush();
                let _ = done.send(());
            }
        }
    }
    let _ = out.flush();
}

struct Logger {
    level: log::LevelFilter,
    json: bool,
    tx: Option<Sender<Msg>>,
}

impl Logger {
    fn format(&self, record: &log::Record) -> String {
        let ts = crate::util::rfc3339_millis(crate::util::unix_millis());
        // No log line carries an upstream credential, whatever was logged.
        let msg = crate::secrets::scrubbed(&record.args().to_string());
        let mut line = if !self.json {
            // Client-chosen strings (model names, request ids) cannot forge a line: control characters are
            // escaped.
            format!(
                "{ts} {:<5} [{}] {}",
                record.level().as_str(),
                record.target(),
                escape_controls(&msg)
            )
        } else if record.target() == REQUEST_TARGET && msg.starts_with('{') {
            // Request summaries are already JSON objects with their own fields.
            msg
        } else {
            serde_json::json!({
                "ts": ts,
                "level": record.level().as_str(),
                "target": record.target(),
                "message": msg,
            })
            .to_string()
        };
        line.push('\n');
        line
    }
}

/// Control characters (line breaks above all) written as escapes, so one log record is one line.
fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Third-party crates that can dump wire data (request headers with credentials) at debug or trace level
/// are capped at info, whatever `log_level` says.
fn third_party_capped(target: &str) -> bool {
    ["ureq", "ureq_proto", "rustls", "httparse"]
        .iter()
        .any(|c| target == *c || target.starts_with(&format!("{c}::")))
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        if metadata.level() > log::Level::Info && third_party_capped(metadata.target()) {
            return false;
        }
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = self.format(record);
        let line = match &self.tx {
            // Never wait on the writer: a full queue drops the line and counts it.
            Some(tx) if record.target() == MUST_WRITE_TARGET => match tx.send(Msg::Line(line)) {
                Ok(()) => return,
                Err(e) => match e.into_inner() {
                    Msg::Line(line) => line,
                    Msg::Flush(_) => return,
                },
            },
            Some(tx) => match tx.try_send(Msg::Line(line)) {
                Ok(()) => {
                    let dropped = DROPPED_SINCE_REPORT.swap(0, Ordering::Relaxed);
                    if dropped > 0 {
                        let note = format!(
                            "{} WARN  [tollgate::logging] {dropped} log lines were dropped: stderr could not \
                             keep up\n",
                            crate::util::rfc3339_millis(crate::util::unix_millis())
                        );
                        let _ = tx.try_send(Msg::Line(note));
                    }
                    return;
                }
                Err(crossbeam_channel::TrySendError::Full(_)) => {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                    DROPPED_SINCE_REPORT.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(crossbeam_channel::TrySendError::Disconnected(m)) => match m {
                    Msg::Line(line) => line,
                    Msg::Flush(_) => return,
                },
            },
            None => line,
        };
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (done_tx, done_rx) = crossbeam_channel::bounded(1);
            if tx.send(Msg::Flush(done_tx)).is_ok() {
                let _ = done_rx.recv();
            }
        }
        let _ = std::io::stderr().flush();
    }
}
