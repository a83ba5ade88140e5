//! The answer cache's entries in the store (with a `[store]`, every instance's cache is this one): each
//! entry a string under `cache:e:FINGERPRINT` with its TTL, and beside them `cache:lru` (zset: fingerprint →
//! last use), `cache:meta` (hash: fingerprint → size and model) and `cache:bytes` (hash: bytes in all and
//! per model). Redis runs `noeviction` for the balances, so the cache bounds itself: the put script removes
//! the least recently used entries until the entries fit in `cache_max_mb` (`lua/cache_put.lua`).

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::{Store, StoreError};

/// An entry found.
#[derive(Debug)]
pub struct Got {
    pub entry: String,
    /// The model it answers for, and the bytes of that model's entries.
    pub model: String,
    pub model_bytes: u64,
}

/// What storing an entry came to.
#[derive(Debug, Default)]
pub struct CachePut {
    /// The bytes of the model's entries in the store now.
    pub model_bytes: u64,
    /// The model of each entry evicted to make room.
    pub evicted: Vec<String>,
}

impl Store {
    fn cache_keys(&self, fingerprint: &str) -> [String; 4] {
        [
            self.k(&format!("cache:e:{fingerprint}")),
            self.k("cache:lru"),
            self.k("cache:meta"),
            self.k("cache:bytes"),
        ]
    }

    /// The entry stored under `fingerprint`, if it is there and fresh (marked used now), with its model and
    /// the bytes of that model's entries.
    pub fn cache_get(&self, fingerprint: &str) -> Result<Option<Got>, StoreError> {
        let keys = self.cache_keys(fingerprint);
        let v: Value = self.run(|s| &s.cache_get, &keys, &[fingerprint.to_string()])?;
        let Value::Array(parts) = v else {
            return Ok(None);
        };
        let mut it = parts.into_iter();
        let text = |v: Option<Value>| v.and_then(|v| String::from_redis_value(v).ok());
        let (Some(entry), model) = (text(it.next()), text(it.next())) else {
            return Ok(None);
        };
        let model_bytes = text(it.next()).and_then(|b| b.parse().ok()).unwrap_or(0);
        Ok(Some(Got {
            entry,
            model: model.unwrap_or_default(),
            model_bytes,
        }))
    }

    /// Stores `entry` under `fingerprint` for `ttl`, then evicts the least recently used entries until all
    /// fit in `cap` bytes.
    pub fn cache_put(
        &self,
        fingerprint: &str,
        entry: String,
        ttl: Duration,
        model: &str,
        cap: u64,
    ) -> Result<CachePut, StoreError> {
        let keys = self.cache_keys(fingerprint);
        let args = [
            fingerprint.to_string(),
            entry,
            ttl.as_millis().max(1).to_string(),
            model.to_string(),
            cap.to_string(),
            self.k("cache:e:"),
        ];
        let v: Vec<Value> = self.run(|s| &s.cache_put, &keys, &args)?;
        let mut it = v.into_iter();
        let model_bytes = it
            .next()
            .and_then(|v| i64::from_redis_value(v).ok())
            .map_or(0, |n| n.max(0) as u64);
        let evicted = it
            .filter_map(|v| String::from_redis_value(v).ok())
            .collect();
        Ok(CachePut {
            model_bytes,
            evicted,
        })
    }
}
