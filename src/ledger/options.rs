//! The ledger's clock, and how it keeps its files over time: rotation, retention, compression, checkpoints
//! and the free-space warning (the config's `ledger_*` and `min_free_disk_mb` settings, whose type is the
//! config's: `config/ledger.rs`).

use std::sync::atomic::{AtomicI64, Ordering};

pub(crate) use crate::config::ledger::{Options, MB};

/// Test hook: `TOLLGATE_TEST_CLOCK_FILE` names a file holding a number of seconds added to the ledger's
/// clock (the one rotation at midnight, retention and compression go by), read each time the clock is read.
pub(crate) const CLOCK_ENV: &str = "TOLLGATE_TEST_CLOCK_FILE";

/// The ledger's clock, Unix seconds (the system's, unless a test moves it: [`CLOCK_ENV`]).
pub(crate) fn now() -> u64 {
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
