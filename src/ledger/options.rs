//! How the ledger keeps its files over time: rotation, retention, compression, checkpoints and the
//! free-space warning (the config's `ledger_*` and `min_free_disk_mb` settings).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// Bytes in one MB of the settings (`ledger_max_file_mb`, `min_free_disk_mb`).
pub const MB: u64 = 1024 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The active file is rotated before it grows past this (`ledger_max_file_mb`, default 256 MB); it is
    /// also rotated at UTC midnight.
    pub max_file_bytes: u64,
    /// Rotated files whose newest record is older than this many days are deleted, once their totals are in
    /// a checkpoint (`ledger_retention_days`; None: everything is kept).
    pub retention_days: Option<u64>,
    /// Rotated files whose newest record is older than this many days are compressed
    /// (`ledger_compress_after_days`; None: never).
    pub compress_after_days: Option<u64>,
    /// A checkpoint is written after this many records (`ledger_checkpoint_records`, default 10,000: a start
    /// after a `kill -9` replays at most about that many) ...
    pub checkpoint_records: u64,
    /// ... or this long after the last one when records came since (`ledger_checkpoint_secs`, default 60 s),
    /// at each rotation, after the start's replay, and at shutdown.
    pub checkpoint_interval: Duration,
    /// Below this much free space on the data disk: a WARN and a `/readyz` detail (`min_free_disk_mb`,
    /// default 1,024 MB).
    pub min_free_disk_bytes: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_file_bytes: 256 * MB,
            retention_days: None,
            compress_after_days: None,
            checkpoint_records: 10_000,
            checkpoint_interval: Duration::from_secs(60),
            min_free_disk_bytes: 1024 * MB,
        }
    }
}

/// Test hook: `TOLLGATE_TEST_CLOCK_FILE` names a file holding a number of seconds added to the ledger's
/// clock (the one rotation at midnight, retention and compression go by), read each time the clock is read.
pub const CLOCK_ENV: &str = "TOLLGATE_TEST_CLOCK_FILE";

/// The ledger's clock, Unix seconds (the system's, unless a test moves it: [`CLOCK_ENV`]).
pub fn now() -> u64 {
    let real = crate::util::unix_now();
    let Some(path) = std::env::var_os(CLOCK_ENV) else {
        return real;
    };
    // A file read while it is rewritten keeps the shift read last.
    static LAST: AtomicI64 = AtomicI64::new(0);
    let shift = match std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
    {
        Some(s) => {
            LAST.store(s, Ordering::Relaxed);
            s
        }
        None => LAST.load(Ordering::Relaxed),
    };
    (real as i64).saturating_add(shift).max(0) as u64
}
