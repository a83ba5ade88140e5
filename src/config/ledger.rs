//! The ledger's settings (`ledger_*`, `min_free_disk_mb`, `ledger_backlog_records`): how it keeps its files
//! over time (rotation, retention, compression, checkpoints, the free-space warning) and how many records
//! may wait for a failing disk. Read by `ledger/` (which knows no other config).

use std::time::Duration;

/// Records that may wait in memory for a failing disk before model requests are refused
/// (`ledger_backlog_records`; `Ledger::set_backlog_limit`): a few seconds of a busy gateway, about 50 MB of
/// memory at worst. At 10,000, one slow `fsync` (half a second) of a gateway serving 20,000 requests a
/// second refused requests.
pub const DEFAULT_BACKLOG_LIMIT: usize = 100_000;

/// Bytes in one MB of the settings (`ledger_max_file_mb`, `min_free_disk_mb`).
pub(crate) const MB: u64 = 1024 * 1024;

/// How the ledger keeps its files (the config's `ledger_files`).
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
