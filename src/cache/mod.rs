//! The answer cache: complete answers of the models that opt in (`cache_ttl_secs`), in canonical form, by
//! the fingerprint of the request they answered (`protocol/fingerprint.rs`), each for its model's TTL. In
//! this process's memory (`lru.rs`, bounded by `cache_max_mb`), or with a `[store]` in the store, so every
//! instance serves what any stored (`store/cache.rs`; a store that does not answer is a miss, never an
//! error). It also counts, per model, what it did: hits, misses, bypasses, the bytes held, evictions. What
//! is cached and when is the request path's to say (`server/cached.rs`).

pub(crate) mod lru;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ledger::CacheUse;
use crate::protocol::canon::Response;
use crate::protocol::embed::Embeddings;
use crate::protocol::fingerprint::Fingerprint;
use crate::store::Store;

/// One cached answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// A generation's answer, its usage the one its request was recorded with (its id, model name and time
    /// are the replay's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Response>,
    /// An embeddings answer: its vectors and the input tokens its request was recorded with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors: Option<Embeddings>,
    /// The upstream that gave it.
    pub upstream: String,
}

/// The bookkeeping beside an entry's bytes in memory (its slot, its place in the order, the model's name).
const SLOT_BYTES: u64 = 160;

/// What the cache did for one model.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Requests looked up and not found (answered by an upstream).
    pub misses: u64,
    /// Requests not looked up (`no-store`, `no-cache`, or not one the cache keeps).
    pub bypasses: u64,
    /// The bytes of its entries (with a store: there, as this instance last learnt).
    pub bytes: u64,
    /// Entries evicted to make room under `cache_max_mb`.
    pub evictions: u64,
}

#[derive(Default)]
struct Inner {
    lru: lru::Lru,
    stats: BTreeMap<String, ModelStats>,
}

impl Inner {
    /// Changes the model's counts (its name copied only the first time).
    fn stats(&mut self, model: &str, change: impl FnOnce(&mut ModelStats)) {
        match self.stats.get_mut(model) {
            Some(s) => change(s),
            None => change(self.stats.entry(model.to_string()).or_default()),
        }
    }
}

/// The answer cache every worker shares.
pub struct AnswerCache {
    /// `cache_max_mb`, in bytes.
    cap: u64,
    store: Option<Arc<Store>>,
    inner: Mutex<Inner>,
}

impl AnswerCache {
    /// An empty cache of at most `cap` bytes (`cache_max_mb`), in memory, or in `store` when there is one.
    pub fn new(cap: u64, store: Option<Arc<Store>>) -> AnswerCache {
        AnswerCache {
            cap,
            store,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::util::lock(&self.inner)
    }

    /// The fresh entry for `fp`, if there is one (a store that does not answer has none).
    pub fn get(&self, fp: &Fingerprint) -> Option<Entry> {
        if let Some(store) = &self.store {
            return shared_get(self, store, fp);
        }
        let found = {
            let mut inner = self.lock();
            let mut gone = None;
            let found = inner.lru.get(fp, Instant::now(), &mut gone);
            if let Some((model, size)) = gone {
                inner.stats(&model, |s| s.bytes = s.bytes.saturating_sub(size));
            }
            found
        };
        serde_json::from_slice(&found?).ok()
    }

    /// Stores `entry`, the answer of `model` to the request `fp`, for `ttl`.
    pub fn put(&self, model: &str, fp: Fingerprint, entry: &Entry, ttl: Duration) {
        let Ok(bytes) = serde_json::to_vec(entry) else {
            return;
        };
        if let Some(store) = &self.store {
            return self.shared_put(store, model, fp, bytes, ttl);
        }
        let now = Instant::now();
        let item = lru::Item {
            size: bytes.len() as u64 + SLOT_BYTES,
            entry: Arc::new(bytes),
            model: Arc::from(model),
            expires: now + ttl,
        };
        let mut inner = self.lock();
        let changes = inner.lru.put(fp, item, self.cap, now);
        for (m, delta) in changes.bytes {
            inner.stats(&m, |s| s.bytes = s.bytes.saturating_add_signed(delta));
        }
        for m in changes.evicted {
            inner.stats(&m, |s| s.evictions += 1);
        }
    }

    fn shared_put(
        &self,
        store: &Store,
        model: &str,
        fp: Fingerprint,
        bytes: Vec<u8>,
        ttl: Duration,
    ) {
        if !store.healthy() || bytes.len() as u64 > self.cap {
            return;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return;
        };
        match store.cache_put(&fp.hex(), text, ttl, model, self.cap) {
            Ok(put) => {
                let mut inner = self.lock();
                inner.stats(model, |s| s.bytes = put.model_bytes);
                for m in put.evicted {
                    inner.stats(&m, |s| s.evictions += 1);
                }
            }
            Err(e) => log::debug!("cache: the store did not take an entry: {e}"),
        }
    }

    /// Counts what the cache did for a request to `model`.
    pub fn count(&self, model: &str, used: CacheUse) {
        self.lock().stats(model, |s| match used {
            CacheUse::Hit => s.hits += 1,
            CacheUse::Miss => s.misses += 1,
            CacheUse::Bypass => s.bypasses += 1,
        });
    }

    /// What the cache did, per model (by name).
    pub fn stats(&self) -> Vec<(String, ModelStats)> {
        let inner = self.lock();
        inner.stats.iter().map(|(m, s)| (m.clone(), *s)).collect()
    }

    /// The bytes held in this process's memory (none with a store).
    pub fn local_bytes(&self) -> u64 {
        self.lock().lru.bytes()
    }
}

/// The entry in the store, if it answers and has one; the bytes of its model's entries are noted.
fn shared_get(cache: &AnswerCache, store: &Store, fp: &Fingerprint) -> Option<Entry> {
    if !store.healthy() {
        return None;
    }
    match store.cache_get(&fp.hex()) {
        Ok(Some(got)) => {
            if !got.model.is_empty() {
                let bytes = got.model_bytes;
                cache.lock().stats(&got.model, |s| s.bytes = bytes);
            }
            serde_json::from_str(&got.entry).ok()
        }
        Ok(None) => None,
        Err(e) => {
            log::debug!("cache: the store did not answer a look-up: {e}");
            None
        }
    }
}
