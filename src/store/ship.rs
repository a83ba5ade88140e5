//! Shipping: every usage record of this instance's local ledger reaches the store, exactly once and in
//! order. The ledger is the outbox: a thread follows the file as the ledger writer syncs it and sends each
//! complete line through `lua/ship.lua`, which adds the record's cost to its key's spend (and budget
//! periods), gives back its reservation, corrects its tokens in the tpm window, appends it to the shared
//! usage stream and moves this instance's cursor (the ledger offset shipped so far) in one atomic step.
//!
//! So nothing is counted twice or lost: a batch cut by a Redis failure resumes from the cursor; a Redis
//! restored from an older snapshot has the cursor of that moment and the records after it are shipped
//! again; an instance killed with `kill -9` finds its cursor at its next start and ships what it had not.
//! While Redis is down, records wait in the ledger file (nothing in memory), and the stream catches up when
//! it answers again.
//!
//! The cursor also holds the ledger's fingerprint (a hash of its first line), so a ledger file that was
//! replaced is not taken for the one the cursor counted.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::{Store, StoreError};
use crate::access::budget::Period;
use crate::ledger::Record;

/// Records sent in one round trip at most.
const BATCH: usize = 200;

/// Bytes of the ledger read at once at most.
const READ_MAX: usize = 4 << 20;

/// Where this instance's shipping stands in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub offset: u64,
    pub fingerprint: String,
}

/// The fingerprint of a ledger: the start of the SHA-256 of its first line ("" while it is empty).
pub fn fingerprint(first_line: &[u8]) -> String {
    if first_line.is_empty() {
        return String::new();
    }
    let d = Sha256::digest(first_line);
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The first line of the file at `path` ("" when there is none yet).
fn first_line(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = match crate::util::open_owned(path, std::fs::OpenOptions::new().read(true)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut have = 0;
    loop {
        let n = f.read(&mut buf[have..])?;
        if n == 0 {
            return Ok(Vec::new());
        }
        have += n;
        if let Some(i) = buf[..have].iter().position(|b| *b == b'\n') {
            buf.truncate(i);
            return Ok(buf);
        }
        if have == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
}

/// One line of the ledger, ready to ship: the keys of its account (none for a line without a key) and its
/// values (see `lua/ship.lua`).
struct Item {
    next: u64,
    keys: [String; 5],
    args: [String; 9],
    /// The request id whose reservation the record settles.
    id: Option<String>,
}

/// How shipping one stretch ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Shipped {
    /// Everything up to this offset is shipped.
    Upto(u64),
    /// The store's cursor is elsewhere (another shipper, or a restored snapshot): read it again.
    Moved,
}

impl Store {
    fn cursor_key(&self, instance: &str) -> String {
        self.k(&format!("cursor:{instance}"))
    }

    /// Instance `instance`'s cursor (offset 0 and no fingerprint when it has none).
    pub fn cursor(&self, instance: &str) -> Result<Cursor, StoreError> {
        let key = self.cursor_key(instance);
        let v: Vec<Option<String>> = self.with(|con| {
            redis::cmd("HMGET")
                .arg(&key)
                .arg("offset")
                .arg("fp")
                .query(con)
        })?;
        Ok(Cursor {
            offset: v
                .first()
                .cloned()
                .flatten()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            fingerprint: v.get(1).cloned().flatten().unwrap_or_default(),
        })
    }

    /// Sets instance `instance`'s cursor outright (a ledger that is not the one it counted).
    pub fn set_cursor(&self, instance: &str, c: &Cursor) -> Result<(), StoreError> {
        let key = self.cursor_key(instance);
        self.with(|con| {
            redis::cmd("HSET")
                .arg(&key)
                .arg("offset")
                .arg(c.offset)
                .arg("fp")
                .arg(&c.fingerprint)
                .query::<()>(con)
        })
    }

    /// Ships the complete lines of `bytes` (read from a ledger at `start`) for `instance`, in batches.
    /// Returns where shipping got to; `Err` when the store failed mid-way (what was shipped stays shipped).
    pub fn ship_lines(
        &self,
        instance: &str,
        fp: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<Shipped, StoreError> {
        let items = self.items(start, bytes);
        let mut upto = start;
        for batch in items.chunks(BATCH) {
            match self.ship_batch(instance, fp, upto, batch)? {
                Shipped::Upto(n) => upto = n,
                Shipped::Moved => return Ok(Shipped::Moved),
            }
        }
        Ok(Shipped::Upto(upto))
    }

    fn items(&self, start: u64, bytes: &[u8]) -> Vec<Item> {
        let mut out = Vec::new();
        let mut offset = start;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if line.last() != Some(&b'\n') {
                break;
            }
            let next = offset + line.len() as u64;
            offset = next;
            let text = &line[..line.len() - 1];
            let rec = std::str::from_utf8(text)
                .ok()
                .filter(|t| !t.trim().is_empty())
                .and_then(|t| serde_json::from_str::<Record>(t).ok().map(|r| (t, r)));
            let Some((json, r)) = rec else {
                // A line that is no record (blank, damaged) only moves the cursor.
                out.push(Item {
                    next,
                    keys: Default::default(),
                    args: [
                        next.to_string(),
                        String::new(),
                        "0".into(),
                        "0".into(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ],
                    id: None,
                });
                continue;
            };
            let k = self.account_keys(&r.key);
            let at = crate::util::parse_rfc3339_millis(&r.ts)
                .map_or(crate::util::unix_now(), |ms| (ms / 1000).max(0) as u64);
            let field = |p| super::accounts::period_field(p, at);
            let keyed = !r.key.is_empty();
            out.push(Item {
                next,
                keys: [k.acct, k.res, k.lease, k.winv, k.per],
                args: [
                    next.to_string(),
                    if keyed {
                        r.request_id.clone()
                    } else {
                        String::new()
                    },
                    super::accounts::units(r.cost.max(crate::money::Money::ZERO)),
                    super::accounts::script_tokens(r.input_tokens.saturating_add(r.output_tokens))
                        .to_string(),
                    field(Period::Daily),
                    field(Period::Weekly),
                    field(Period::Monthly),
                    r.ts.clone(),
                    json.to_string(),
                ],
                id: keyed.then(|| r.request_id.clone()),
            });
        }
        out
    }

    /// One round trip: the script loaded (a restarted Redis has forgotten it), then one call for the batch.
    fn ship_batch(
        &self,
        instance: &str,
        fp: &str,
        start: u64,
        batch: &[Item],
    ) -> Result<Shipped, StoreError> {
        let cut = Period::Monthly
            .start_of(crate::util::unix_now())
            .saturating_sub(40 * 86_400);
        let mut keys = vec![self.cursor_key(instance), self.k("usage")];
        let mut args = vec![
            start.to_string(),
            fp.to_string(),
            self.settings.usage_stream_max.to_string(),
            cut.to_string(),
        ];
        for it in batch {
            keys.extend(it.keys.iter().cloned());
            args.extend(it.args.iter().cloned());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT")
            .arg("LOAD")
            .arg(&self.scripts.ship_source)
            .ignore();
        pipe.cmd("EVALSHA")
            .arg(self.scripts.ship.get_hash())
            .arg(keys.len())
            .arg(&keys)
            .arg(&args);
        let (ok, at): (i64, String) = match self.with(|con| pipe.query::<((i64, String),)>(con)) {
            Ok((reply,)) => reply,
            Err(e) => {
                if !e.unavailable {
                    log::error!(
                        "store: shipping the usage records from ledger offset {start} failed: {e}"
                    );
                }
                return Err(e);
            }
        };
        if ok != 1 {
            return Ok(Shipped::Moved);
        }
        for it in batch {
            if let Some(id) = &it.id {
                self.shipped(id);
            }
        }
        Ok(Shipped::Upto(at.parse().unwrap_or_else(|_| {
            batch.last().map_or(start, |i| i.next)
        })))
    }
}

/// Ships what is left of `ledger` now, retrying until everything synced is shipped or `within` has passed.
pub fn catch_up(
    store: &Store,
    ledger: &crate::ledger::Ledger,
    within: Duration,
) -> Result<(), StoreError> {
    let deadline = std::time::Instant::now() + within;
    let path = ledger.path().to_path_buf();
    let instance = store.instance().to_string();
    let mut fp;
    let mut last: Option<StoreError> = None;
    while std::time::Instant::now() < deadline {
        let end = ledger.synced_len();
        let pos = match start_position(store, &instance, &path, end) {
            Ok((p, f)) => {
                fp = f;
                p
            }
            Err(e) => {
                last = Some(e);
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if pos >= end {
            return Ok(());
        }
        if let Err(e) = ship_from(store, &instance, &path, &mut fp, pos, end) {
            last = Some(e);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Err(last.unwrap_or(StoreError {
        unavailable: true,
        message: "out of time".into(),
    }))
}

/// Follows `ledger` and ships what it syncs, until the store is told to stop shipping. Runs on its own
/// thread.
pub fn follow(store: Arc<Store>, ledger: &crate::ledger::Ledger) {
    let path: PathBuf = ledger.path().to_path_buf();
    let wake = ledger.follow();
    let instance = store.instance().to_string();
    let mut at: Option<u64> = None;
    let mut fp = String::new();
    let mut failing = false;
    while !store.stopping() {
        if store.lost() {
            // Nothing is shipped into a store that lost its data until it is rebuilt.
            at = None;
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        let end = ledger.synced_len();
        let pos = match at {
            Some(p) => p,
            None => match start_position(&store, &instance, &path, end) {
                Ok((p, f)) => {
                    fp = f;
                    at = Some(p);
                    p
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(500));
                    continue;
                }
            },
        };
        if pos >= end {
            let _ = wake.recv_timeout(Duration::from_secs(1));
            continue;
        }
        match ship_from(&store, &instance, &path, &mut fp, pos, end) {
            Ok(Shipped::Upto(n)) => {
                if failing {
                    failing = false;
                    log::info!("store: usage records shipped again (ledger offset {n})");
                }
                at = Some(n);
            }
            Ok(Shipped::Moved) => at = None,
            Err(e) => {
                if !failing {
                    log::warn!(
                        "store: usage records wait in the local ledger until the store answers ({e})"
                    );
                }
                failing = true;
                at = None;
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// Reads `[pos, end)` of the ledger and ships its complete lines.
fn ship_from(
    store: &Store,
    instance: &str,
    path: &Path,
    fp: &mut String,
    pos: u64,
    end: u64,
) -> Result<Shipped, StoreError> {
    let io_err = |e: std::io::Error| StoreError {
        unavailable: false,
        message: format!("cannot read the ledger {}: {e}", path.display()),
    };
    if fp.is_empty() {
        *fp = fingerprint(&first_line(path).map_err(io_err)?);
    }
    let mut f =
        crate::util::open_owned(path, std::fs::OpenOptions::new().read(true)).map_err(io_err)?;
    f.seek(SeekFrom::Start(pos)).map_err(io_err)?;
    let len = ((end - pos) as usize).min(READ_MAX);
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(io_err)?;
    // Only whole lines: a read cut by READ_MAX ends at the last newline.
    let whole = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if whole == 0 {
        return Ok(Shipped::Upto(pos));
    }
    store.ship_lines(instance, fp, pos, &buf[..whole])
}

/// Where shipping starts: the store's cursor when it counted this ledger; 0 for a ledger it never saw
/// (and the cursor reset to it). Returns the offset and the ledger's fingerprint.
pub fn start_position(
    store: &Store,
    instance: &str,
    path: &Path,
    end: u64,
) -> Result<(u64, String), StoreError> {
    let io_err = |e: std::io::Error| StoreError {
        unavailable: false,
        message: format!("cannot read the ledger {}: {e}", path.display()),
    };
    let fp = fingerprint(&first_line(path).map_err(io_err)?);
    let c = store.cursor(instance)?;
    if c.offset == 0 {
        return Ok((0, fp));
    }
    if c.fingerprint == fp && c.offset <= end {
        return Ok((c.offset, fp));
    }
    if c.fingerprint == fp {
        log::error!(
            "store: the ledger {} is shorter ({end} bytes) than the {} bytes already shipped from it (was it cut \
             by hand?); shipping continues from its end",
            path.display(),
            c.offset
        );
        let to = Cursor {
            offset: end,
            fingerprint: fp.clone(),
        };
        store.set_cursor(instance, &to)?;
        return Ok((end, fp));
    }
    log::error!(
        "store: the ledger {} is not the one instance {instance:?} shipped before (its first record differs); \
         shipping it from its start. If two instances share the name {instance:?}, give each its own `instance`.",
        path.display()
    );
    store.set_cursor(
        instance,
        &Cursor {
            offset: 0,
            fingerprint: fp.clone(),
        },
    )?;
    Ok((0, fp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints() {
        assert_eq!(fingerprint(b""), "");
        assert_eq!(fingerprint(b"{\"a\":1}").len(), 16);
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}
