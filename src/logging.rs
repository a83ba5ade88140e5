//! Logging to stderr: human-readable lines by default, or JSON lines (`log_format = "json"` or
//! `tollgate serve --log-format json`) for log shippers. Never a key, an upstream credential or a prompt:
//! nothing logged carries them, every line is scrubbed of upstream credentials as a last line of defence,
//! third-party crates that dump wire data are capped at info, and no client-chosen string can forge a line
//! or a field: the request line quotes its values ([`field`]), and every character that does not print
//! (controls, bidi and other format characters, line separators) is escaped in text and JSON lines alike.
//!
//! A line is formatted on the thread that logs it and written by one writer thread, so a slow consumer of
//! stderr (a pipe, journald under pressure) never holds up a request; the queue is bounded, and when it is
//! full a line is dropped rather than making a request thread wait (counted in
//! `tollgate_log_lines_dropped_total`, and said in the log once the queue has room again); only lines that
//! carry data nothing else holds (`MUST_WRITE_TARGET`: unwritten usage records at shutdown) wait for room.
//! `log::logger().flush()` returns once every line logged before it is written (the binary calls it before
//! it exits).
//!
//! A server run inside another program (a test starting several gateways in one process) logs into a
//! [`Capture`] of its own instead: its level, its format, its lines. The capture belongs to the threads of
//! that server: the thread that starts it, and every thread the gateway starts, since they are all started
//! through [`thread`], which hands the starting thread's capture to the new one.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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

/// Whether logs are JSON lines (those of the calling thread's [`Capture`], if it has one).
pub fn json() -> bool {
    capture().map_or_else(|| JSON.load(Ordering::Relaxed), |c| c.json)
}

/// The log of one server run inside another program: lines at or above its level, formatted as text or
/// JSON lines, handed to its sink (one line each, without the newline) instead of stderr.
pub struct Capture {
    level: log::LevelFilter,
    json: bool,
    sink: Box<dyn Fn(&str) + Send + Sync>,
}

impl Capture {
    /// A capture at `level` (`info`, `debug`, ...). Installs the process's logger if none is (its own
    /// lines, from threads without a capture, go nowhere).
    pub fn new(
        level: &str,
        json: bool,
        sink: impl Fn(&str) + Send + Sync + 'static,
    ) -> Arc<Capture> {
        let level = level.parse().unwrap_or(log::LevelFilter::Info);
        let installed = log::set_boxed_logger(Box::new(Logger {
            level: log::LevelFilter::Off,
            json: false,
            tx: None,
        }));
        if installed.is_ok() || log::max_level() < level {
            log::set_max_level(level.max(log::max_level()));
        }
        Arc::new(Capture {
            level,
            json,
            sink: Box::new(sink),
        })
    }
}

thread_local! {
    static CAPTURE: RefCell<Option<Arc<Capture>>> = const { RefCell::new(None) };
}

/// The calling thread's capture.
fn capture() -> Option<Arc<Capture>> {
    CAPTURE.with(|c| c.borrow().clone())
}

/// Starts a scoped thread in `scope` with `builder` that logs where the starting thread logs (see
/// [`thread`]).
pub fn scoped<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    builder: std::thread::Builder,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, T>> {
    let capture = capture();
    builder.spawn_scoped(scope, move || {
        let _guard = capture_into(capture);
        f()
    })
}

/// Sends the calling thread's lines to `capture` (None: to stderr) until the guard is dropped.
pub fn capture_into(capture: Option<Arc<Capture>>) -> CaptureGuard {
    CaptureGuard(CAPTURE.with(|c| c.replace(capture)))
}

/// Puts the thread's previous capture back when dropped.
pub struct CaptureGuard(Option<Arc<Capture>>);

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        let previous = self.0.take();
        CAPTURE.with(|c| *c.borrow_mut() = previous);
    }
}

/// Starts a thread with `builder`; it logs where the starting thread logs (its [`Capture`], or stderr).
/// Every thread of the gateway is started here.
pub fn thread<T: Send + 'static>(
    builder: std::thread::Builder,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    let capture = capture();
    builder.spawn(move || {
        let _guard = capture_into(capture);
        f()
    })
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
        format_line(record, self.json)
    }
}

/// One log line (with its newline), as text or a JSON line.
fn format_line(record: &log::Record, json: bool) -> String {
    let ts = crate::util::rfc3339_millis(crate::util::unix_millis());
    // No log line carries an upstream credential, whatever was logged.
    let msg = crate::secrets::scrubbed(&record.args().to_string());
    let mut line = if !json {
        // Client-chosen strings (model names, request ids) cannot forge a line: what does not print is
        // escaped (and the request line quotes its fields, `field`).
        format!(
            "{ts} {:<5} [{}] {}",
            record.level().as_str(),
            record.target(),
            escape_unprintable(&msg)
        )
    } else if record.target() == REQUEST_TARGET && msg.starts_with('{') {
        // Request summaries are already JSON objects with their own fields.
        json_escape_unprintable(msg)
    } else {
        json_escape_unprintable(
            serde_json::json!({
                "ts": ts,
                "level": record.level().as_str(),
                "target": record.target(),
                "message": msg,
            })
            .to_string(),
        )
    };
    line.push('\n');
    line
}

/// Whether `c` does not print as itself: a control character, a format character (the bidi controls
/// U+202A–U+202E and U+2066–U+2069, the marks U+200E/U+200F, zero-width characters), the line and paragraph
/// separators U+2028/U+2029, a space other than ' ', a private-use or unassigned code point (everything
/// Rust's `{:?}` escapes). Such a character in a log line could start a line or reorder what is shown.
pub fn unprintable(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}')
        || c.is_control()
        || c.is_whitespace()
        || c.escape_debug().next() == Some('\\')
}

/// Pushes `c` as it reads in a text log line: `\n`, `\r`, `\t`, or `\u{…}` for what does not print.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if unprintable(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// A value in a `key=value` text log line, chosen by a client or not (request ids, key, group and model
/// names, error texts): as it is when it holds only printable ASCII other than `"`, `\` and `=`; otherwise
/// in double quotes, with `"` and `\` escaped and every character that does not print ([`unprintable`])
/// written as an escape. One value can never pass for two fields, nor start a line.
pub fn field(v: &str) -> Cow<'_, str> {
    let safe = |b: u8| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'=');
    if !v.is_empty() && v.bytes().all(safe) {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => push_escaped(&mut out, c),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// Characters that do not print (line breaks above all) written as escapes, so one log record is one line
/// and shows as what it is.
fn escape_unprintable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unprintable) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        push_escaped(&mut out, c);
    }
    Cow::Owned(out)
}

/// A JSON line with every character that does not print written as a JSON `\uXXXX` escape (serde_json
/// escapes only the ASCII controls; such characters stand only inside strings, where the escape means the
/// same character).
fn json_escape_unprintable(line: String) -> String {
    if !line.chars().any(unprintable) {
        return line;
    }
    let mut out = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if unprintable(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{:04x}", u);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Third-party crates that can dump wire data (request headers with credentials) at debug or trace level
/// are capped at info, whatever `log_level` says.
fn third_party_capped(target: &str) -> bool {
    ["ureq", "ureq_proto", "rustls", "httparse"]
        .iter()
        .any(|c| target == *c || target.starts_with(&format!("{c}::")))
}

/// Whether a line at `metadata` is written at `level`.
fn enabled_at(metadata: &log::Metadata, level: log::LevelFilter) -> bool {
    if metadata.level() > log::Level::Info && third_party_capped(metadata.target()) {
        return false;
    }
    metadata.level() <= level
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        match capture() {
            Some(c) => enabled_at(metadata, c.level),
            None => enabled_at(metadata, self.level),
        }
    }

    fn log(&self, record: &log::Record) {
        if let Some(c) = capture() {
            if enabled_at(record.metadata(), c.level) {
                let line = format_line(record, c.json);
                (c.sink)(line.trim_end_matches('\n'));
            }
            return;
        }
        if !enabled_at(record.metadata(), self.level) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_unless_plainly_safe() {
        assert_eq!(field("gpt-4o-mini"), "gpt-4o-mini");
        assert_eq!(field("req_AbC.1:2/3@x"), "req_AbC.1:2/3@x");
        assert_eq!(field(""), "\"\"");
        assert_eq!(
            field("x key=victim group=admins"),
            "\"x key=victim group=admins\""
        );
        assert_eq!(field("a=b"), "\"a=b\"");
        assert_eq!(field(r#"q"\"#), r#""q\"\\""#);
        assert_eq!(field("é"), "\"é\"");
        assert_eq!(field("a\nb\tc"), "\"a\\nb\\tc\"");
        assert_eq!(
            field("a\u{2028}b\u{202e}c\u{2066}d\u{200e}e\u{feff}\u{a0}\u{7f}"),
            "\"a\\u{2028}b\\u{202e}c\\u{2066}d\\u{200e}e\\u{feff}\\u{00a0}\\u{007f}\""
        );
    }

    #[test]
    fn what_does_not_print_is_escaped_in_text_and_json() {
        for c in [
            '\u{0}', '\u{1b}', '\u{85}', '\u{200b}', '\u{200f}', '\u{2028}', '\u{2029}',
            '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{2060}', '\u{feff}', '\u{e000}',
            '\u{3000}',
        ] {
            assert!(unprintable(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', '"', '\\', 'é', '中', '€', 'ß'] {
            assert!(!unprintable(c), "{c}");
        }
        assert_eq!(escape_unprintable("a\u{2028}b"), "a\\u{2028}b");
        let line = serde_json::json!({"m": "a\u{2028}b\u{202e}\u{1f600}\u{e0001}"}).to_string();
        let escaped = json_escape_unprintable(line);
        assert_eq!(escaped, r#"{"m":"a\u2028b\u202e😀\udb40\udc01"}"#);
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back["m"], "a\u{2028}b\u{202e}\u{1f600}\u{e0001}");
    }
}
