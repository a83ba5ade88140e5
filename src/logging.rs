//! Logging to stderr: human-readable lines (simple_logger) by default, or JSON lines (`log_format = "json"`
//! or `tollgate serve --log-format json`) for log shippers. Never a key, an upstream credential or a prompt:
//! nothing logged carries them.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static JSON: AtomicBool = AtomicBool::new(false);

/// The target of the one-line-per-request summaries.
pub const REQUEST_TARGET: &str = "tollgate::request";

/// Whether logs are JSON lines.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Starts logging at `level` (`info`, `debug`, ...), as text or JSON lines.
pub fn init(level: &str, json: bool) {
    let level = level.parse().unwrap_or(log::LevelFilter::Info);
    if json {
        JSON.store(true, Ordering::Relaxed);
        if log::set_boxed_logger(Box::new(JsonLogger { level })).is_ok() {
            log::set_max_level(level);
        }
    } else {
        let _ = simple_logger::SimpleLogger::new()
            .with_level(level)
            .with_utc_timestamps()
            .init();
    }
}

struct JsonLogger {
    level: log::LevelFilter,
}

impl log::Log for JsonLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        let line = if record.target() == REQUEST_TARGET && msg.starts_with('{') {
            // Request summaries are already JSON objects with their own fields.
            msg
        } else {
            serde_json::json!({
                "ts": crate::util::rfc3339_millis(crate::util::unix_millis()),
                "level": record.level().as_str(),
                "target": record.target(),
                "message": msg,
            })
            .to_string()
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}
