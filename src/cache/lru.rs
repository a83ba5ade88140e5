//! The answer cache in this process's memory: entries by fingerprint, each with its expiry, bounded in bytes;
//! when a new entry does not fit, the least recently used ones go first. An entry is held as its serialized
//! bytes, one allocation (a long-lived tree of small strings per entry slows every allocation of the
//! process down).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::protocol::fingerprint::Fingerprint;

struct Slot {
    entry: Arc<Vec<u8>>,
    /// The model it answers for (its bytes and evictions are counted per model).
    model: Arc<str>,
    size: u64,
    expires: Instant,
    /// Its place in the order of use (`Lru::order`).
    used: u64,
}

/// What storing an entry changed in the bytes per model.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Changes {
    /// (model, bytes added or removed), expired entries removed on the way included.
    pub bytes: Vec<(Arc<str>, i64)>,
    /// The model of each entry evicted to make room.
    pub evicted: Vec<Arc<str>>,
}

/// An entry to store, with what the cache knows of it.
pub(crate) struct Item {
    /// The entry, serialized.
    pub entry: Arc<Vec<u8>>,
    /// The model it answers for.
    pub model: Arc<str>,
    /// The memory it takes (its bytes, and the bookkeeping beside them).
    pub size: u64,
    pub expires: Instant,
}

#[derive(Default)]
pub(crate) struct Lru {
    slots: HashMap<Fingerprint, Slot>,
    /// Use counter → fingerprint, oldest first.
    order: BTreeMap<u64, Fingerprint>,
    clock: u64,
    bytes: u64,
}

impl Lru {
    /// The fresh entry under `fp` (marked used), or None; an expired one is removed (its model and size
    /// returned in `gone`).
    pub(crate) fn get(
        &mut self,
        fp: &Fingerprint,
        now: Instant,
        gone: &mut Option<(Arc<str>, u64)>,
    ) -> Option<Arc<Vec<u8>>> {
        let slot = self.slots.get_mut(fp)?;
        if slot.expires <= now {
            *gone = self.remove(fp).map(|s| (s.model, s.size));
            return None;
        }
        self.clock += 1;
        self.order.remove(&slot.used);
        slot.used = self.clock;
        self.order.insert(self.clock, *fp);
        Some(slot.entry.clone())
    }

    /// Stores `item` under `fp`, evicting the least recently used entries while the whole is above `cap`.
    /// An entry larger than the cap is not stored.
    pub(crate) fn put(&mut self, fp: Fingerprint, item: Item, cap: u64, now: Instant) -> Changes {
        let Item {
            entry,
            model,
            size,
            expires,
        } = item;
        let mut changes = Changes::default();
        if size > cap {
            return changes;
        }
        if let Some(old) = self.remove(&fp) {
            changes.bytes.push((old.model, -(old.size as i64)));
        }
        while self.bytes + size > cap {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(s) = self.remove_slot(&oldest) {
                changes.bytes.push((s.model.clone(), -(s.size as i64)));
                if s.expires > now {
                    changes.evicted.push(s.model);
                }
            }
        }
        self.clock += 1;
        self.order.insert(self.clock, fp);
        self.bytes += size;
        changes.bytes.push((model.clone(), size as i64));
        self.slots.insert(
            fp,
            Slot {
                entry,
                model,
                size,
                expires,
                used: self.clock,
            },
        );
        changes
    }

    fn remove(&mut self, fp: &Fingerprint) -> Option<Slot> {
        let slot = self.remove_slot(fp)?;
        self.order.remove(&slot.used);
        Some(slot)
    }

    /// Takes the slot out (its place in the order is the caller's to remove).
    fn remove_slot(&mut self, fp: &Fingerprint) -> Option<Slot> {
        let slot = self.slots.remove(fp)?;
        self.bytes -= slot.size;
        Some(slot)
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry() -> Arc<Vec<u8>> {
        Arc::new(b"{}".to_vec())
    }

    fn item(model: &Arc<str>, size: u64, expires: Instant) -> Item {
        Item {
            entry: entry(),
            model: model.clone(),
            size,
            expires,
        }
    }

    fn fp(n: u8) -> Fingerprint {
        Fingerprint([n; 32])
    }

    #[test]
    fn the_least_recently_used_go_first_and_expired_ones_are_not_served() {
        let mut lru = Lru::default();
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let m: Arc<str> = Arc::from("m");
        for n in 1..=3 {
            let c = lru.put(fp(n), item(&m, 100, later), 300, now);
            assert!(c.evicted.is_empty());
        }
        // 1 is used, so 2 is the least recently used when 4 needs room.
        assert!(lru.get(&fp(1), now, &mut None).is_some());
        let c = lru.put(fp(4), item(&m, 100, later), 300, now);
        assert_eq!(c.evicted, vec![m.clone()]);
        assert!(lru.get(&fp(2), now, &mut None).is_none());
        assert!(lru.get(&fp(1), now, &mut None).is_some());
        assert_eq!(lru.bytes(), 300);
        // Too big for the cap: not stored, nothing evicted.
        let c = lru.put(fp(5), item(&m, 301, later), 300, now);
        assert_eq!(c, Changes::default());
        // Expired: not served, and its bytes go.
        let mut gone = None;
        assert!(lru.get(&fp(3), later, &mut gone).is_none());
        assert_eq!(gone.map(|g| g.1), Some(100));
        assert_eq!(lru.bytes(), 200);
    }
}
