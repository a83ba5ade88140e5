//! What the instances share besides the accounts: the store's epoch (so a store that lost its data is
//! noticed), the claims on instance names, the versioned maps (`keys` with the keys' terms, the console's
//! `overrides`), the shared usage stream's pages, the audit list, the store's format (which layout of its
//! data the instances write), and what the server says of itself.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::{Claim, Store, StoreError};

/// The layout of the store's data this version writes (`claim_format`). 2: allotments (an allotment's
/// reservation holds several concurrency slots, `lua/allot.lua`); 3: requests drawn from an allotment are
/// settled like the others, and a record that counted one first leaves the marker 'p' (`lua/money.lua`);
/// 1 is never written (the versions before formats wrote none). Raise it with any change of layout that an
/// older version would misread.
pub const STORE_FORMAT: u64 = 3;

impl Store {
    /// Sets the epoch if the store has none; returns the epoch in force. A store set up here (by an
    /// instance or by a `keys` command) gets this version's format too, so that the first instance to
    /// join it does not take it for one an older version used.
    pub fn init_epoch(&self, fresh: &str) -> Result<String, StoreError> {
        let key = self.k("epoch");
        let (epoch, new): (String, bool) = self.with(|con| {
            let set: Value = redis::cmd("SET")
                .arg(&key)
                .arg(fresh)
                .arg("NX")
                .query(con)?;
            if set != Value::Nil {
                self.confirm(con, "the store's epoch")?;
            }
            Ok((redis::cmd("GET").arg(&key).query(con)?, set != Value::Nil))
        })?;
        if new {
            if let Err(e) = self.claim_format() {
                log::warn!("store: the format of the store just set up is not written ({e}); the first instance writes it");
            }
        }
        Ok(epoch)
    }

    /// Sets a new epoch (after a rebuild).
    pub fn set_epoch(&self, epoch: &str) -> Result<(), StoreError> {
        let key = self.k("epoch");
        self.with(|con| {
            redis::cmd("SET").arg(&key).arg(epoch).query::<()>(con)?;
            self.confirm(con, "the store's epoch")
        })
    }

    /// Claims this instance's name for `run_id` for `ttl`, unless another process holds it.
    pub fn claim_instance(&self, run_id: &str, ttl: Duration) -> Result<Claim, StoreError> {
        let key = self.k(&format!("instance:{}", self.instance));
        let got: String = self.run(
            |s| &s.claim,
            &[key],
            &[run_id.to_string(), ttl.as_millis().to_string()],
        )?;
        Ok(if got == "ok" {
            Claim::Ours
        } else {
            Claim::HeldBy(got)
        })
    }

    /// Raises the store's format to this version's (`STORE_FORMAT`, `lua/format.lua`) and says what it was
    /// (0: none yet).
    pub fn claim_format(&self) -> Result<u64, StoreError> {
        let was: i64 = self.run(
            |s| &s.format,
            &[self.k("format")],
            &[STORE_FORMAT.to_string()],
        )?;
        Ok(was.max(0) as u64)
    }

    /// The names of the instances running on this store (each holds its name's claim while it runs; an
    /// instance of a store that lost its data holds none).
    pub fn running_instances(&self) -> Result<Vec<String>, StoreError> {
        let prefix = self.k("instance:");
        let mut names = Vec::new();
        self.scan("instance:*", |keys| {
            names.extend(
                keys.iter()
                    .filter_map(|k| k.strip_prefix(&prefix))
                    .map(str::to_string),
            );
            Ok(())
        })?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Gives up this instance's name (at a clean exit), if `run_id` still holds it.
    pub fn release_instance(&self, run_id: &str) {
        let key = self.k(&format!("instance:{}", self.instance));
        let _ = self.with(|con| {
            let cur: Option<String> = redis::cmd("GET").arg(&key).query(con)?;
            if cur.as_deref() == Some(run_id) {
                redis::cmd("DEL").arg(&key).query::<()>(con)?;
            }
            Ok(())
        });
    }

    /// A versioned map (`keys`, `overrides`): its version and every field.
    pub fn read_map(&self, name: &str) -> Result<(u64, Vec<(String, String)>), StoreError> {
        let (ver, fields): (String, Vec<(String, String)>) = self.run(
            |s| &s.map_read,
            &[self.k(&format!("{name}:ver")), self.k(name)],
            &[],
        )?;
        Ok((ver.parse().unwrap_or(0), fields))
    }

    /// Changes a versioned map if it is still at `version`: Some(new version), or None when someone changed
    /// it in between (read it again and retry).
    pub fn write_map(
        &self,
        name: &str,
        version: u64,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<Option<u64>, StoreError> {
        let mut args = vec![version.to_string(), set.len().to_string()];
        for (f, v) in set {
            args.push(f.clone());
            args.push(v.clone());
        }
        args.extend(delete.iter().cloned());
        let v: u64 = self.run_confirmed(
            |s| &s.map_write,
            &[self.k(&format!("{name}:ver")), self.k(name)],
            &args,
            Some(&format!("a change of {name}")),
        )?;
        Ok((v > 0).then_some(v))
    }

    /// Changes the key records if they are still at `version`, and with each record set its terms (the
    /// admission script's view of the key), in one atomic step: `set` holds (name, record JSON, terms);
    /// `delete` names records to remove with their terms. Some(new version), or None when someone changed the
    /// records in between (read them again and retry).
    pub fn write_keys(
        &self,
        version: u64,
        set: &[(String, String, String)],
        delete: &[String],
    ) -> Result<Option<u64>, StoreError> {
        let mut args = vec![version.to_string(), set.len().to_string()];
        for (name, record, terms) in set {
            args.extend([name.clone(), record.clone(), terms.clone()]);
        }
        args.extend(delete.iter().cloned());
        let v: u64 = self.run_confirmed(
            |s| &s.keys_write,
            &self.keys_and_terms(),
            &args,
            Some("a change of the keys"),
        )?;
        Ok((v > 0).then_some(v))
    }

    /// The version of the key records the terms were last written for (0: never).
    pub fn terms_at(&self) -> Result<u64, StoreError> {
        let key = self.k("terms:at");
        let v: Option<String> = self.with(|con| redis::cmd("GET").arg(&key).query(con))?;
        Ok(v.and_then(|s| s.parse().ok()).unwrap_or(0))
    }

    /// Writes every key's terms anew for the records at `version`: (name, terms) pairs. False when the
    /// records changed in between.
    pub fn sync_terms(&self, version: u64, terms: &[(String, String)]) -> Result<bool, StoreError> {
        let mut args = vec![version.to_string()];
        for (name, t) in terms {
            args.extend([name.clone(), t.clone()]);
        }
        let [ver, _, terms_key, at] = self.keys_and_terms();
        let done: i64 = self.run_confirmed(
            |s| &s.terms_sync,
            &[ver, terms_key, at],
            &args,
            Some("the keys' terms"),
        )?;
        Ok(done == 1)
    }

    /// `keys:ver`, `keys`, `terms`, `terms:at`.
    fn keys_and_terms(&self) -> [String; 4] {
        [
            self.k("keys:ver"),
            self.k("keys"),
            self.k("terms"),
            self.k("terms:at"),
        ]
    }

    /// Usage records from the shared stream, newest first: up to `count` entries older than the stream id
    /// `before` (None: from the newest). Returns (stream id, record JSON) pairs.
    pub fn usage_page(
        &self,
        before: Option<&str>,
        count: usize,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let key = self.k("usage");
        let end = before.map_or_else(|| "+".to_string(), |b| format!("({b}"));
        let v: Value = self.with(|con| {
            redis::cmd("XREVRANGE")
                .arg(&key)
                .arg(&end)
                .arg("-")
                .arg("COUNT")
                .arg(count)
                .query(con)
        })?;
        Ok(stream_entries(v))
    }

    /// How many records the usage stream holds.
    pub fn usage_len(&self) -> Result<u64, StoreError> {
        let key = self.k("usage");
        self.with(|con| redis::cmd("XLEN").arg(&key).query(con))
    }

    /// Adds an audit entry (newest first; the newest 10,000 are kept).
    pub fn audit_push(&self, json: &str) -> Result<(), StoreError> {
        let key = self.k("audit");
        self.with(|con| {
            redis::pipe()
                .cmd("LPUSH")
                .arg(&key)
                .arg(json)
                .ignore()
                .cmd("LTRIM")
                .arg(&key)
                .arg(0)
                .arg(9_999)
                .ignore()
                .query::<()>(con)
        })
    }

    /// The newest `limit` audit entries.
    pub fn audit_newest(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let key = self.k("audit");
        self.with(|con| {
            redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(limit.saturating_sub(1))
                .query(con)
        })
    }

    /// Deletes every key under the prefix that matches `pattern` (`acct:*`); returns how many.
    pub fn delete_matching(&self, pattern: &str) -> Result<u64, StoreError> {
        let mut deleted = 0;
        self.scan(pattern, |keys| {
            let n: u64 = self.with(|con| redis::cmd("DEL").arg(keys).query(con))?;
            deleted += n;
            Ok(())
        })?;
        Ok(deleted)
    }

    /// Hands `each` every non-empty batch of the keys under the prefix that match `pattern`, a `SCAN` at a
    /// time.
    fn scan(
        &self,
        pattern: &str,
        mut each: impl FnMut(&[String]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let pattern = self.k(pattern);
        let mut cursor = "0".to_string();
        loop {
            let (next, keys): (String, Vec<String>) = self.with(|con| {
                redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(con)
            })?;
            if !keys.is_empty() {
                each(&keys)?;
            }
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Whether Redis keeps its data across a restart (`appendonly yes`), when it says (None: CONFIG GET is
    /// not allowed for this user).
    pub fn persistence(&self) -> Result<Option<bool>, StoreError> {
        let got: Result<Vec<String>, StoreError> =
            self.with(|con| redis::cmd("CONFIG").arg("GET").arg("appendonly").query(con));
        match got {
            Ok(v) => Ok(v.get(1).map(|s| s == "yes")),
            // Refused (an ACL without CONFIG, a managed Redis): the store answered, it just will not say.
            Err(e) if !e.unavailable => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The server's version (`redis_version` of INFO server).
    pub fn server_version(&self) -> Result<String, StoreError> {
        let info: String = self.with(|con| redis::cmd("INFO").arg("server").query(con))?;
        Ok(info
            .lines()
            .find_map(|l| {
                l.strip_prefix("redis_version:")
                    .or_else(|| l.strip_prefix("valkey_version:"))
            })
            .unwrap_or("unknown")
            .trim()
            .to_string())
    }
}

/// (id, `r` field) of each stream entry in an XRANGE/XREVRANGE answer.
fn stream_entries(v: Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Value::Array(entries) = v else {
        return out;
    };
    for e in entries {
        let Value::Array(mut pair) = e else { continue };
        if pair.len() != 2 {
            continue;
        }
        let fields = pair.pop();
        let id = pair.pop();
        let (Some(id), Some(Value::Array(fields))) = (id, fields) else {
            continue;
        };
        let Ok(id) = String::from_redis_value(id) else {
            continue;
        };
        let mut it = fields.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            if String::from_redis_value(k).as_deref() == Ok("r") {
                if let Ok(v) = String::from_redis_value(v) {
                    out.push((id.clone(), v));
                }
            }
        }
    }
    out
}
