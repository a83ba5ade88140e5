//! The checkpoint: what every record up to a position of the ledger adds up to (`data_dir/ledger-checkpoint.json`),
//! so a start reads it and replays only the records after that position.
//!
//! It is written whole to a new temporary file, synced, renamed over the previous one, and the directory is
//! synced: a crash at any point leaves the previous checkpoint (or this one) whole, and a temporary file left
//! behind is removed at the next start. It names the position by the file's seq, a byte offset at a line
//! boundary and the fingerprint of the file's first line, so a checkpoint that does not match the files (a
//! ledger restored from a backup, a file edited by hand) is noticed and not used.
//!
//! It also holds what files deleted by retention held (`retired`), so that spend and budgets are not
//! forgotten when a file goes, even by a start that cannot use the position or by a store rebuilt from the
//! ledger.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::totals::Totals;

/// File name of the checkpoint inside `data_dir`.
pub const CHECKPOINT_FILE: &str = "ledger-checkpoint.json";

const VERSION: u32 = 1;

/// Test hook: with `TOLLGATE_TEST_CHECKPOINT_PAUSE=N`, the Nth checkpoint this process writes stops (for up
/// to a minute) with its temporary file complete and synced, just before the rename, and says so in the log:
/// the moment a `kill -9` tests.
pub(super) const PAUSE_ENV: &str = "TOLLGATE_TEST_CHECKPOINT_PAUSE";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    pub version: u32,
    /// When it was written (RFC 3339).
    pub written: String,
    /// The position covered: everything before byte `offset` of file `seq` (and in every earlier file) is
    /// in `totals`.
    pub seq: u64,
    pub offset: u64,
    /// The fingerprint of file `seq`'s first line ("" when `offset` is 0).
    #[serde(default)]
    pub fingerprint: String,
    /// The earliest and latest `ts` (Unix ms) of the covered part of file `seq`.
    #[serde(default)]
    pub first_ms: Option<i64>,
    #[serde(default)]
    pub last_ms: Option<i64>,
    pub totals: Totals,
    /// Files up to this seq were deleted by retention; `retired` is what they held (0: none deleted).
    #[serde(default)]
    pub retired_through: u64,
    #[serde(default)]
    pub retired: Totals,
}

impl Checkpoint {
    pub(super) fn new(seq: u64, offset: u64, fingerprint: String, totals: Totals) -> Checkpoint {
        Checkpoint {
            version: VERSION,
            written: crate::util::rfc3339_millis(crate::util::unix_millis()),
            seq,
            offset,
            fingerprint,
            first_ms: None,
            last_ms: None,
            totals,
            retired_through: 0,
            retired: Totals::default(),
        }
    }
}

/// The checkpoint in `dir`: None when there is none; an error when it cannot be read or is not one.
pub(super) fn read(dir: &Path) -> io::Result<Option<Checkpoint>> {
    let text = match crate::util::read_owned(&dir.join(CHECKPOINT_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let cp: Checkpoint =
        serde_json::from_slice(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if cp.version != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("version {} (this tollgate reads {VERSION})", cp.version),
        ));
    }
    Ok(Some(cp))
}

static WRITES: AtomicU64 = AtomicU64::new(0);

/// Writes `cp` in `dir` atomically and durably (see the module comment).
pub(super) fn write(dir: &Path, cp: &Checkpoint) -> io::Result<()> {
    let data = serde_json::to_vec(cp).map_err(io::Error::other)?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    let pause = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        == Some(n);
    crate::util::write_atomic_then(&dir.join(CHECKPOINT_FILE), &data, || {
        if pause {
            log::warn!(
                "usage ledger: checkpoint {n} written to its temporary file and paused before the rename \
                 ({PAUSE_ENV})"
            );
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    })
}
