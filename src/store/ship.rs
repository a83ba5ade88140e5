//! Shipping: every usage record of this instance's local ledger reaches the store, exactly once and in
//! order. The ledger is the outbox: a thread follows it as the ledger writer syncs it and sends each
//! complete line through `lua/ship.lua`, which adds the record's cost to its key's spend (and budget
//! periods), gives back its reservation, corrects its tokens in the tpm window, appends it to the shared
//! usage stream and moves this instance's cursor (the ledger file and offset shipped so far) in one atomic
//! step.
//!
//! The lines come from the writer's memory (`Ledger::take_synced`: each synced line with what its record
//! says, so it is neither read back nor parsed) as long as they continue exactly where shipping stands (same
//! file, same offset); otherwise (at start, at the end of a rotated file, past lines the bounded feed left
//! out, and at least once a second) the files are read, and they stay the truth.
//!
//! So nothing is counted twice or lost: a batch cut by a Redis failure resumes from the cursor; a Redis
//! restored from an older snapshot has the cursor of that moment and the records after it are shipped
//! again; an instance killed with `kill -9` finds its cursor at its next start and ships what it had not.
//! While Redis is down, records wait in the ledger files (nothing in memory), and the stream catches up when
//! it answers again.
//!
//! The cursor names the file by its fingerprint (a hash of its first line): a file rotated away is still
//! found by it, and one that replaced the ledger is not taken for the one the cursor counted. At the end of a
//! rotated file the cursor moves to the start of the next file (`lua/cursor_move.lua`, only while it is
//! where the shipper left it), so files are shipped in order, none twice, none skipped. What files deleted
//! by retention held is shipped first, from the checkpoint, when the cursor starts from nothing (a new or
//! rebuilt store): its cursor is then `retired:SEQ`, counting the per-key items of that total.
//!
//! This file holds the store's side (the cursor, the items, the script calls); `shipper.rs` walks the ledger.

use redis::FromRedisValue;

use super::{Store, StoreError};
use crate::budget::Period;
use crate::ledger::{Record, SyncedLine, Totals};
use crate::util::lock;

/// Records sent in one round trip at most.
pub(super) const BATCH: usize = 200;

/// Bytes of the ledger read at once at most.
pub(super) const READ_MAX: usize = 4 << 20;

/// Test hook: with `TOLLGATE_TEST_SHIP_LOSE_REPLIES=N`, the answers of the first N shipping calls that
/// applied and shipped a record naming its allotment are taken as lost (the connection broke after the
/// call reached Redis): the shipper tries again.
pub(crate) const SHIP_LOSE_ENV: &str = "TOLLGATE_TEST_SHIP_LOSE_REPLIES";

fn lose_a_reply_for_a_test(batch: &[ShipLine]) -> bool {
    if !batch.iter().any(|it| it.drawn_key.is_some()) {
        return false;
    }
    static LEFT: std::sync::OnceLock<std::sync::atomic::AtomicU64> = std::sync::OnceLock::new();
    let left = LEFT.get_or_init(|| {
        let n = std::env::var(SHIP_LOSE_ENV)
            .ok()
            .and_then(|v| v.parse().ok());
        std::sync::atomic::AtomicU64::new(n.unwrap_or(0))
    });
    use std::sync::atomic::Ordering::SeqCst;
    let lost = left
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if lost {
        log::warn!("test hook: the answer of a shipping call is taken as lost");
    }
    lost
}

/// The record of a drawn request in a shipping call whose answer did not come.
pub(super) struct Unsure {
    /// The ledger file's fingerprint and where the line after the record begins.
    fp: String,
    next: u64,
    key: String,
    id: String,
}

/// Where this instance's shipping stands in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub offset: u64,
    pub fingerprint: String,
}

/// One line of the ledger, ready to ship: the keys of its account (none for a line without a key) and its
/// values (see `lua/ship.lua`).
pub(super) struct ShipLine {
    /// Where the line after it begins (what shipping it reaches).
    pub(super) next: u64,
    keys: [String; 5],
    args: [String; 10],
    /// The request id whose reservation the record settles.
    id: Option<String>,
    /// Its key's name, when the record names the allotment its request was drawn from (`allot/`).
    drawn_key: Option<String>,
}

/// What an item is made of: a record's key, request id (none: the line only moves the cursor), cost,
/// tokens, `ts` and JSON (none: no usage stream entry).
#[derive(Default, Clone, Copy)]
struct Entry<'a> {
    key: &'a str,
    id: &'a str,
    cost: crate::money::Money,
    tokens: u64,
    ts: &'a str,
    json: &'a str,
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
        let c = Cursor {
            offset: v
                .first()
                .cloned()
                .flatten()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            fingerprint: v.get(1).cloned().flatten().unwrap_or_default(),
        };
        self.cursor_seen(&c);
        Ok(c)
    }

    /// A shipping call whose answer did not come may have applied: its drawn requests' records are
    /// followed until the cursor says.
    fn unsure_of(&self, fp: &str, batch: &[ShipLine]) {
        let mut unsure = lock(&self.unsure);
        for it in batch {
            if let (Some(key), Some(id)) = (&it.drawn_key, &it.id) {
                unsure.push(Unsure {
                    fp: fp.to_string(),
                    next: it.next,
                    key: key.clone(),
                    id: id.clone(),
                });
            }
        }
    }

    /// The cursor as this instance's store holds it: the records of a call whose answer did not come that
    /// are before it in the same file were shipped (the call applied, or another shipper of this instance
    /// shipped them), so their drawn requests' markers may go. Those after it are shipped again, and said
    /// so by that call's answer; those of another file are no longer followed.
    fn cursor_seen(&self, c: &Cursor) {
        let shipped: Vec<Unsure> = {
            let mut unsure = lock(&self.unsure);
            if unsure.is_empty() {
                return;
            }
            std::mem::take(&mut *unsure)
                .into_iter()
                .filter(|u| u.fp == c.fingerprint && u.next <= c.offset)
                .collect()
        };
        self.records_shipped(shipped.iter().map(|u| (u.key.as_str(), u.id.as_str())));
    }

    /// Ships the complete lines of `bytes` (read from a ledger file at `start`) for `instance`, in batches.
    /// Returns where shipping got to; `Err` when the store failed mid-way (what was shipped stays shipped).
    pub fn ship_lines(
        &self,
        instance: &str,
        fp: &str,
        start: u64,
        bytes: &[u8],
    ) -> Result<Shipped, StoreError> {
        let items = self.items(start, bytes);
        self.ship_items(instance, fp, start, &items)
    }

    pub(super) fn ship_items(
        &self,
        instance: &str,
        fp: &str,
        start: u64,
        items: &[ShipLine],
    ) -> Result<Shipped, StoreError> {
        let mut upto = start;
        for batch in items.chunks(BATCH) {
            match self.ship_batch(instance, fp, upto, batch)? {
                Shipped::Upto(n) => upto = n,
                Shipped::Moved => return Ok(Shipped::Moved),
            }
        }
        Ok(Shipped::Upto(upto))
    }

    pub(super) fn items(&self, start: u64, bytes: &[u8]) -> Vec<ShipLine> {
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
            out.push(match rec {
                Some((json, r)) => {
                    let keyed = !r.key.is_empty();
                    let id = if keyed { r.request_id.as_str() } else { "" };
                    let tokens = r.input_tokens.saturating_add(r.output_tokens);
                    self.item(
                        next,
                        &Entry {
                            key: &r.key,
                            id,
                            cost: r.cost,
                            tokens,
                            ts: &r.ts,
                            json,
                        },
                    )
                }
                // A line that is no record (blank, damaged) only moves the cursor.
                None => self.item(next, &Entry::default()),
            });
        }
        out
    }

    /// Items of lines the ledger writer synced, from its memory: the same as `items` makes of them when read
    /// from the file and parsed, without either.
    pub(super) fn fed_items<'a>(
        &self,
        lines: impl Iterator<Item = &'a SyncedLine>,
    ) -> Vec<ShipLine> {
        lines
            .map(|l| {
                let next = l.offset + l.line.len() as u64;
                let json = std::str::from_utf8(&l.line[..l.line.len().saturating_sub(1)]).ok();
                match (&l.facts, json) {
                    (Some(f), Some(json)) => self.item(
                        next,
                        &Entry {
                            key: &f.key,
                            id: if f.key.is_empty() { "" } else { &f.request_id },
                            cost: f.cost,
                            tokens: f.tokens,
                            ts: &f.ts,
                            json,
                        },
                    ),
                    _ => self.item(next, &Entry::default()),
                }
            })
            .collect()
    }

    /// One item: the keys of its account (none without a request id) and the script's values.
    fn item(&self, next: u64, e: &Entry) -> ShipLine {
        let Entry {
            key,
            id,
            cost,
            tokens,
            ts,
            json,
        } = *e;
        if id.is_empty() {
            return ShipLine {
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
                    json.to_string(),
                    String::new(),
                ],
                id: None,
                drawn_key: None,
            };
        }
        let k = self.account_keys(key);
        let allot = self.allotment_of(id);
        let at = crate::util::parse_rfc3339_millis(ts)
            .map_or(crate::util::unix_now(), |ms| (ms / 1000).max(0) as u64);
        let field = |p| super::args::period_field(p, at);
        ShipLine {
            next,
            keys: [k.acct, k.res, k.lease, k.winv, k.per],
            args: [
                next.to_string(),
                id.to_string(),
                super::args::units(cost.max(crate::money::Money::ZERO)),
                super::args::script_tokens(tokens).to_string(),
                field(Period::Daily),
                field(Period::Weekly),
                field(Period::Monthly),
                ts.to_string(),
                json.to_string(),
                // The allotment its request was drawn from, while it is not settled (a record shipped
                // first counts its cost, out of the allotment; after a restart none is known, and an
                // unsettled request's record counts its cost alone: its allotment's lease gave back what it
                // held).
                allot.clone().unwrap_or_default(),
            ],
            id: Some(id.to_string()),
            drawn_key: allot.map(|_| key.to_string()),
        }
    }

    /// What files deleted by retention held, as items (no usage stream entry): per key, the spend older than
    /// the days kept, each day's spend, and its last use. Their offsets count them from 1.
    pub(super) fn retired_items(&self, through: u64, t: &Totals) -> Vec<ShipLine> {
        let mut names: Vec<&String> = t.keys.keys().collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let k = &t.keys[name];
            let days: crate::money::Money = k.days.values().copied().sum();
            let mut parts: Vec<(crate::money::Money, String)> = Vec::new();
            if k.spent > days {
                parts.push((k.spent - days, crate::util::rfc3339_millis(0)));
            }
            for (day, m) in &k.days {
                parts.push((*m, crate::util::rfc3339_millis(day * 1000)));
            }
            if !k.last_used.is_empty() {
                parts.push((crate::money::Money::ZERO, k.last_used.clone()));
            }
            for (cost, ts) in parts {
                let next = out.len() as u64 + 1;
                let id = format!("retired:{through}:{next}");
                let e = Entry {
                    key: name,
                    id: &id,
                    cost,
                    ts: &ts,
                    ..Entry::default()
                };
                out.push(self.item(next, &e));
            }
        }
        out
    }

    /// Moves `instance`'s cursor from `from` to `to`, only while it is at `from`. Returns whether it moved.
    pub fn move_cursor(
        &self,
        instance: &str,
        from: &Cursor,
        to: &Cursor,
    ) -> Result<bool, StoreError> {
        let key = self.cursor_key(instance);
        let moved: i64 = self.with(|con| {
            self.scripts
                .cursor_move
                .key(&key)
                .arg(from.offset)
                .arg(&from.fingerprint)
                .arg(to.offset)
                .arg(&to.fingerprint)
                .invoke(con)
        })?;
        Ok(moved == 1)
    }

    /// One round trip: one call for the batch (and, when Redis has forgotten the script, a second one that
    /// loads it first).
    fn ship_batch(
        &self,
        instance: &str,
        fp: &str,
        start: u64,
        batch: &[ShipLine],
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
        let call = |pipe: &mut redis::Pipeline| {
            pipe.cmd("EVALSHA")
                .arg(self.scripts.ship.get_hash())
                .arg(keys.len())
                .arg(&keys)
                .arg(&args);
        };
        // A lease renewal waits meanwhile: these records' requests have ended, so whatever this call does
        // they leave `leases` in the same step (below), and none whose record counted its cost is held again
        // (`Store::renew_leases`; its settlement would count the cost a second time).
        let _renewals = lock(&self.shipping);
        let result = self.with(|con| {
            let mut pipe = redis::pipe();
            call(&mut pipe);
            match pipe.query::<(Vec<redis::Value>,)>(con) {
                // A Redis that forgot the script (restarted) ran nothing: loaded, and the call made again.
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    let mut again = redis::pipe();
                    again
                        .cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(&self.scripts.ship_source)
                        .ignore();
                    call(&mut again);
                    again.query(con)
                }
                other => other,
            }
        });
        for it in batch {
            if let Some(id) = &it.id {
                self.shipped(id);
            }
        }
        let reply = match result {
            Ok((reply,)) => reply,
            Err(e) => {
                self.unsure_of(fp, batch);
                if !e.unavailable {
                    log::error!(
                        "store: shipping the usage records from ledger offset {start} failed: {e}"
                    );
                }
                return Err(e);
            }
        };
        let mut texts = reply
            .into_iter()
            .map(|v| String::from_redis_value(v).unwrap_or_default());
        if lose_a_reply_for_a_test(batch) {
            self.unsure_of(fp, batch);
            return Err(StoreError {
                unavailable: true,
                message: "the shipping call's answer was lost (test hook)".into(),
            });
        }
        let (ok, at) = (
            texts.next().unwrap_or_default(),
            texts.next().unwrap_or_default(),
        );
        if ok != "1" {
            self.cursor_seen(&Cursor {
                offset: at.parse().unwrap_or(0),
                fingerprint: texts.next().unwrap_or_default(),
            });
            return Ok(Shipped::Moved);
        }
        // Records of drawn requests sent naming their allotment kept their markers (`allot/`).
        self.records_shipped(
            batch
                .iter()
                .filter_map(|it| Some((it.drawn_key.as_deref()?, it.id.as_deref()?))),
        );
        let late = texts.next().unwrap_or_default();
        if !late.is_empty() {
            // The records are shipped and the cursor is after them: shipping them again would count again
            // what the other writes counted. The key that refused is broken by a hand on the store.
            log::error!(
                "store: shipping the usage records from ledger offset {start} wrote their effects only in part \
                 ({late}); they are not shipped again. Mend the key it names; then, with every instance \
                 stopped, `tollgate store rebuild` sets the balances from the ledgers"
            );
        }
        Ok(Shipped::Upto(at.parse().unwrap_or_else(|_| {
            batch.last().map_or(start, |i| i.next)
        })))
    }
}

#[cfg(test)]
mod tests {
    use crate::ledger::fingerprint;

    /// The fingerprint a shipped file is known by.
    #[test]
    fn fingerprints() {
        assert_eq!(fingerprint(b""), "");
        assert_eq!(fingerprint(b"{\"a\":1}").len(), 16);
        assert_ne!(fingerprint(b"a"), fingerprint(b"b"));
    }
}
