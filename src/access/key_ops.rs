//! The operator's changes to keys: add, revoke, enable, delete, rotate, credit, budget, expiry, group; made
//! where the key records live (`KeysAt`: the keys file in a data directory, rewritten under a lock, or the
//! shared store, written with compare-and-set), so the CLI, the console, other instances and hand edits
//! never lose each other's changes.

use std::collections::HashMap;
use std::path::Path;

use super::keys::{generate_key, hash_key, hint_of, read_keys, write_keys, KeyRecord, KEYS_FILE};
use crate::budget::Budget;
use crate::money::Money;

/// A refused key operation: which input was wrong (`name`, `group`, `credit`) and why, or what failed.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyOpError {
    /// The input that was wrong (`name`, `group`, `credit`); empty when where the records live failed.
    pub field: &'static str,
    /// What was wrong or what failed, for the operator to read.
    pub message: String,
    /// What kind of failure it is, for callers to answer by (never by the message).
    pub kind: KeyOpKind,
}

/// What kind of failure a key operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOpKind {
    /// An input is wrong (`field` names it).
    Invalid,
    /// No key has the name given.
    NoSuchKey,
    /// The shared store does not answer.
    StoreDown,
    /// Where the records live failed otherwise: a file, an encoding, other writers that kept changing them.
    Failed,
}

impl KeyOpError {
    /// An input that is wrong (`field`), or with no field, a failure of where the records live.
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        KeyOpError {
            field,
            message: message.into(),
            kind: if field.is_empty() {
                KeyOpKind::Failed
            } else {
                KeyOpKind::Invalid
            },
        }
    }

    fn of_kind(self, kind: KeyOpKind) -> Self {
        KeyOpError { kind, ..self }
    }
}

impl std::fmt::Display for KeyOpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Where the key records live: the keys file in a data directory, or a shared store.
#[derive(Clone, Copy)]
pub enum KeysAt<'a> {
    /// The keys file (`keys.jsonl`) in this data directory, rewritten under its lock (`keys.lock`).
    Dir(&'a Path),
    /// The shared store's `keys` map ([`STORE_MAP`]), written with compare-and-set.
    Store(&'a crate::store::Store),
}

/// The map in the store that holds the key records (key name → record JSON).
pub const STORE_MAP: &str = "keys";

/// Every key record (tombstones of deleted keys included), oldest first.
pub fn read_all(at: KeysAt) -> Result<Vec<KeyRecord>, KeyOpError> {
    match at {
        KeysAt::Dir(dir) => {
            let path = dir.join(KEYS_FILE);
            read_keys(&path)
                .map_err(|e| KeyOpError::new("", format!("cannot read {}: {e}", path.display())))
        }
        KeysAt::Store(store) => {
            let (_, fields) = store.read_map(STORE_MAP).map_err(store_error)?;
            Ok(records_of(&fields))
        }
    }
}

/// The local copy of the store's key records (hashes only) in `data_dir`, kept for a start while the store
/// is down and for `tollgate store rebuild`.
pub const KEYS_COPY: &str = "store-keys.jsonl";

/// Reads the store's key records and puts them in force in `keys` (unless a newer version is in force
/// already, or `force`: after a rebuild, versions are counted anew), keeping the local copy of what is in
/// force. Returns the version read; None when the store did not answer.
pub fn install_from_store(
    keys: &crate::access::KeyStore,
    store: &crate::store::Store,
    force: bool,
) -> Option<u64> {
    let (ver, fields) = store.read_map(STORE_MAP).ok()?;
    let records = records_of(&fields);
    let from = format!("the store ({})", store.describe());
    if keys.install_version(&records, &from, ver, force) {
        log::info!(
            "keys reloaded from the store ({})",
            crate::util::plural(records.len(), "key")
        );
        if let Some(dir) = keys.path().parent() {
            keep_keys_copy(dir, &records);
        }
    }
    Some(ver)
}

/// Writes the local copy of the store's key records (errors are logged: it is a copy).
pub fn keep_keys_copy(dir: &Path, records: &[KeyRecord]) {
    if let Err(e) = write_keys(&dir.join(KEYS_COPY), records) {
        log::warn!(
            "store: cannot keep the local copy of the keys in {}: {e}",
            dir.display()
        );
    }
}

/// The key records of a store map's fields, oldest first (a field that is not a record is skipped and
/// logged).
pub fn records_of(fields: &[(String, String)]) -> Vec<KeyRecord> {
    let mut out: Vec<KeyRecord> = fields
        .iter()
        .filter_map(
            |(name, json)| match serde_json::from_str::<KeyRecord>(json) {
                Ok(r) if &r.name == name => Some(r),
                _ => {
                    log::error!("store: the key record {name:?} is not valid; ignored");
                    None
                }
            },
        )
        .collect();
    out.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    out
}

fn store_error(e: crate::store::StoreError) -> KeyOpError {
    KeyOpError::new("", format!("the store does not answer: {e}")).of_kind(KeyOpKind::StoreDown)
}

/// The lock file of the keys file inside `data_dir`.
pub const KEYS_LOCK: &str = "keys.lock";

/// Reads, changes and writes the key records: in a data directory, the keys file is rewritten atomically
/// under an exclusive lock (`keys.lock`); in a store, the change is written only if nobody changed the
/// records in between (else read again and retried). So the CLI, the console, other instances and hand
/// edits never lose each other's changes.
pub fn update_keys<T>(
    at: KeysAt,
    mut f: impl FnMut(&mut Vec<KeyRecord>) -> Result<T, KeyOpError>,
) -> Result<T, KeyOpError> {
    let data_dir = match at {
        KeysAt::Dir(d) => d,
        KeysAt::Store(store) => return update_in_store(store, f),
    };
    let io = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
        KeyOpError::new("", format!("cannot {what} {}: {e}", p.display()))
    };
    crate::util::create_private_dir_all(data_dir).map_err(|e| io("create", data_dir, &e))?;
    let lock_path = data_dir.join(KEYS_LOCK);
    let lock = crate::util::open_private(&lock_path).map_err(|e| io("open", &lock_path, &e))?;
    lock.lock().map_err(|e| io("lock", &lock_path, &e))?;
    let path = data_dir.join(KEYS_FILE);
    let mut records = read_keys(&path).map_err(|e| io("read", &path, &e))?;
    let result = f(&mut records)?;
    write_keys(&path, &records).map_err(|e| io("write", &path, &e))?;
    Ok(result)
}

fn update_in_store<T>(
    store: &crate::store::Store,
    mut f: impl FnMut(&mut Vec<KeyRecord>) -> Result<T, KeyOpError>,
) -> Result<T, KeyOpError> {
    for _ in 0..50 {
        let (version, fields) = store.read_map(STORE_MAP).map_err(store_error)?;
        let mut records = records_of(&fields);
        let result = f(&mut records)?;
        let before: HashMap<&str, &str> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut set = Vec::new();
        for r in &records {
            let json = serde_json::to_string(r)
                .map_err(|e| KeyOpError::new("", format!("cannot encode the key: {e}")))?;
            if before.get(r.name.as_str()) != Some(&json.as_str()) {
                set.push((r.name.clone(), json, terms_of(r)));
            }
        }
        let delete: Vec<String> = fields
            .iter()
            .filter(|(k, _)| !records.iter().any(|r| &r.name == k))
            .map(|(k, _)| k.clone())
            .collect();
        if set.is_empty() && delete.is_empty() {
            return Ok(result);
        }
        // The records and their terms (what admission reads) in one atomic step.
        if store
            .write_keys(version, &set, &delete)
            .map_err(store_error)?
            .is_some()
        {
            return Ok(result);
        }
    }
    Err(KeyOpError::new(
        "",
        "the keys in the store kept changing while this change was made; try again",
    ))
}

/// What the store's admission script reads of a key (`store/lua/admit.lua`), written with its record in the
/// same atomic step: `credit|budget|period|expires|state`, amounts in units of 10⁻¹² credits, the period as
/// `d`/`w`/`m`, the expiry in Unix seconds, the state `a` (active), `r` (revoked) or `x` (deleted); empty:
/// none (no credit is unlimited, no budget is the group's).
pub fn terms_of(r: &KeyRecord) -> String {
    let credit = r
        .credit
        .map_or_else(String::new, |c| c.max(Money::ZERO).units().to_string());
    let (budget, period) = r.budget.map_or_else(
        || (String::new(), String::new()),
        |b| {
            (
                b.amount.max(Money::ZERO).units().to_string(),
                b.period.letter().to_string(),
            )
        },
    );
    let expires = r
        .expires
        .as_deref()
        .and_then(crate::util::parse_rfc3339)
        .map_or_else(String::new, |t| t.to_string());
    let state = if r.deleted {
        'x'
    } else if r.disabled {
        'r'
    } else {
        'a'
    };
    format!("{credit}|{budget}|{period}|{expires}|{state}")
}

/// Writes every key's terms anew when they were last written for another version of the records (a store
/// set up before terms were kept, or changed by a writer that did not keep them); an instance does this as
/// it joins the store. Returns whether anything was written.
pub fn sync_terms(store: &crate::store::Store) -> Result<bool, KeyOpError> {
    for _ in 0..50 {
        let (version, fields) = store.read_map(STORE_MAP).map_err(store_error)?;
        if store.terms_at().map_err(store_error)? == version && version > 0 {
            return Ok(false);
        }
        let terms: Vec<(String, String)> = records_of(&fields)
            .iter()
            .map(|r| (r.name.clone(), terms_of(r)))
            .collect();
        if store.sync_terms(version, &terms).map_err(store_error)? {
            return Ok(true);
        }
    }
    Err(KeyOpError::new(
        "",
        "the keys in the store kept changing while their terms were written; try again",
    ))
}

fn valid_name(name: &str) -> Result<(), KeyOpError> {
    if name.is_empty()
        || name.len() > 128
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(KeyOpError::new(
            "name",
            format!("expected a non-empty name without spaces, got {name:?}"),
        ));
    }
    Ok(())
}

fn valid_credit(credit: Option<Money>) -> Result<(), KeyOpError> {
    match credit {
        Some(c) if c.is_negative() => Err(KeyOpError::new(
            "credit",
            format!("expected an amount of 0 or more, got {c}"),
        )),
        _ => Ok(()),
    }
}

/// Creates a key (the group must exist: the caller checks it against the config). Returns the plaintext.
pub fn add_key(
    at: KeysAt,
    name: &str,
    group: &str,
    credit: Option<Money>,
) -> Result<String, KeyOpError> {
    valid_name(name)?;
    valid_credit(credit)?;
    update_keys(at, |records| {
        if let Some(existing) = records.iter().find(|r| r.name == name) {
            let state = if existing.deleted {
                " (deleted; its usage records keep the name)"
            } else if existing.disabled {
                " (revoked)"
            } else {
                ""
            };
            return Err(KeyOpError::new(
                "name",
                format!("a key named {name:?} already exists{state}; choose another name"),
            ));
        }
        let key = generate_key();
        let hint = Some(hint_of(&key));
        records.push(KeyRecord {
            name: name.to_string(),
            group: group.to_string(),
            hash: hash_key(&key),
            credit,
            disabled: false,
            created: crate::util::rfc3339(crate::util::unix_now()),
            deleted: false,
            budget: None,
            expires: None,
            hint,
        });
        Ok(key)
    })
}

fn find<'a>(records: &'a mut [KeyRecord], name: &str) -> Result<&'a mut KeyRecord, KeyOpError> {
    records
        .iter_mut()
        .find(|r| r.name == name && !r.deleted)
        .ok_or_else(|| {
            KeyOpError::new("name", format!("no key named {name:?}")).of_kind(KeyOpKind::NoSuchKey)
        })
}

/// Sets a key's own spend budget (None: its group's applies, if any).
pub fn set_budget(at: KeysAt, name: &str, budget: Option<Budget>) -> Result<(), KeyOpError> {
    if let Some(b) = budget {
        valid_credit(Some(b.amount))?;
    }
    update_keys(at, |records| {
        find(records, name)?.budget = budget;
        Ok(())
    })
}

/// Sets when a key stops working (Unix seconds; None: never).
pub fn set_expiry(at: KeysAt, name: &str, expires: Option<u64>) -> Result<(), KeyOpError> {
    update_keys(at, |records| {
        find(records, name)?.expires = expires.map(crate::util::rfc3339);
        Ok(())
    })
}

/// Moves a key to another group (the caller checks that the group exists).
pub fn move_key(at: KeysAt, name: &str, group: &str) -> Result<(), KeyOpError> {
    update_keys(at, |records| {
        find(records, name)?.group = group.to_string();
        Ok(())
    })
}

/// Lets a revoked key work again (same key, name, group and credit).
pub fn enable_key(at: KeysAt, name: &str) -> Result<(), KeyOpError> {
    update_keys(at, |records| {
        find(records, name)?.disabled = false;
        Ok(())
    })
}

/// Deletes a revoked key: it disappears from every list and its hash is forgotten. Its name stays taken,
/// so that its usage records are never mixed with another key's.
pub fn delete_key(at: KeysAt, name: &str) -> Result<(), KeyOpError> {
    update_keys(at, |records| {
        let r = find(records, name)?;
        if !r.disabled {
            return Err(KeyOpError::new(
                "name",
                format!("the key {name:?} is active; revoke it first, then delete it"),
            ));
        }
        r.deleted = true;
        r.hash = String::new();
        r.credit = None;
        Ok(())
    })
}

/// Revokes a key at once (a running server notices within about a second).
pub fn revoke_key(at: KeysAt, name: &str) -> Result<(), KeyOpError> {
    update_keys(at, |records| {
        find(records, name)?.disabled = true;
        Ok(())
    })
}

/// Replaces a key with a new one under the same name, group and credit; the old key stops working at once.
pub fn rotate_key(at: KeysAt, name: &str) -> Result<String, KeyOpError> {
    update_keys(at, |records| {
        let r = find(records, name)?;
        if r.disabled {
            return Err(KeyOpError::new(
                "name",
                format!("the key {name:?} is revoked; create a new key instead"),
            ));
        }
        let key = generate_key();
        r.hash = hash_key(&key);
        r.hint = Some(hint_of(&key));
        Ok(key)
    })
}

/// How to change a key's credit.
#[derive(Debug, Clone, Copy)]
pub enum CreditChange {
    /// Top up by this amount (the key must have a credit).
    Add(Money),
    /// Set the credit to this amount.
    Set(Money),
    /// Remove the limit.
    Unlimited,
}

/// Changes a key's credit; returns the new credit.
pub fn change_credit(
    at: KeysAt,
    name: &str,
    change: CreditChange,
) -> Result<Option<Money>, KeyOpError> {
    match change {
        CreditChange::Add(a) => valid_credit(Some(a))?,
        CreditChange::Set(a) => valid_credit(Some(a))?,
        CreditChange::Unlimited => {}
    }
    update_keys(at, |records| {
        let r = find(records, name)?;
        r.credit = match (change, r.credit) {
            (CreditChange::Add(a), Some(c)) => Some(c + a),
            (CreditChange::Add(_), None) => {
                return Err(KeyOpError::new(
                    "credit",
                    format!("the key {name:?} has no credit limit (unlimited); set one instead of adding to it"),
                ))
            }
            (CreditChange::Set(a), _) => Some(a),
            (CreditChange::Unlimited, _) => None,
        };
        Ok(r.credit)
    })
}

/// One change an operator makes to a key. The CLI's `keys` commands and the admin API make theirs through
/// [`apply`] (the CLI with its audit entry, `audit::change_key`); the audit trail names each by
/// `audit::Action::of_key`.
#[derive(Debug, Clone)]
pub enum KeyChange {
    /// A new key in `group` (checked against the config by the caller), with its terms.
    Add {
        /// The key's group.
        group: String,
        /// The key's credit (`None`: unlimited).
        credit: Option<Money>,
        /// The key's own spend budget (`None`: its group's applies, if any).
        budget: Option<Budget>,
        /// When the key stops working (Unix seconds; `None`: never).
        expires: Option<u64>,
    },
    /// Revokes the key at once ([`revoke_key`]).
    Revoke,
    /// Lets a revoked key work again ([`enable_key`]).
    Enable,
    /// Deletes a revoked key; its name stays taken ([`delete_key`]).
    Delete,
    /// Replaces the key with a new one under the same name, group and credit ([`rotate_key`]).
    Rotate,
    /// Tops up, sets or removes the key's credit ([`change_credit`]).
    Credit(CreditChange),
    /// Sets the key's own spend budget (`None`: its group's applies, if any).
    Budget(Option<Budget>),
    /// Sets when the key stops working (Unix seconds; `None`: never).
    Expiry(Option<u64>),
    /// To another group (checked against the config by the caller).
    Move(String),
}

/// What a key change gives back.
#[derive(Debug, Clone)]
pub enum Changed {
    /// The change is made; nothing to give back.
    Done,
    /// The new key's plaintext (add, rotate): shown once.
    Key(String),
    /// The credit after the change.
    Credit(Option<Money>),
}

/// Makes `change` to the key `name` where the keys live.
pub fn apply(at: KeysAt, name: &str, change: &KeyChange) -> Result<Changed, KeyOpError> {
    match change {
        KeyChange::Add {
            group,
            credit,
            budget,
            expires,
        } => {
            // Budget and expiry (checked by the caller) are set right after the key is made.
            let key = add_key(at, name, group, *credit)?;
            if budget.is_some() {
                set_budget(at, name, *budget)?;
            }
            if expires.is_some() {
                set_expiry(at, name, *expires)?;
            }
            Ok(Changed::Key(key))
        }
        KeyChange::Revoke => revoke_key(at, name).map(|()| Changed::Done),
        KeyChange::Enable => enable_key(at, name).map(|()| Changed::Done),
        KeyChange::Delete => delete_key(at, name).map(|()| Changed::Done),
        KeyChange::Rotate => rotate_key(at, name).map(Changed::Key),
        KeyChange::Credit(c) => change_credit(at, name, *c).map(Changed::Credit),
        KeyChange::Budget(b) => set_budget(at, name, *b).map(|()| Changed::Done),
        KeyChange::Expiry(t) => set_expiry(at, name, *t).map(|()| Changed::Done),
        KeyChange::Move(group) => move_key(at, name, group).map(|()| Changed::Done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_exact_integers_and_name_the_state() {
        let mut r = KeyRecord {
            name: "k".into(),
            group: "g".into(),
            hash: String::new(),
            credit: Some(Money::parse("50.000000000001").unwrap()),
            disabled: false,
            created: String::new(),
            hint: None,
            budget: Some(Budget::new(Money::parse("2.5").unwrap(), "weekly").unwrap()),
            expires: Some("2026-01-01T00:00:00Z".into()),
            deleted: false,
        };
        assert_eq!(terms_of(&r), "50000000000001|2500000000000|w|1767225600|a");
        r.credit = None;
        r.budget = None;
        r.expires = None;
        r.disabled = true;
        assert_eq!(terms_of(&r), "||||r");
        r.deleted = true;
        assert_eq!(terms_of(&r), "||||x");
    }

    #[test]
    fn a_refusal_says_its_kind() {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-key-ops-{}",
            crate::util::random_base62(8)
        ));
        let at = KeysAt::Dir(&dir);
        let e = revoke_key(at, "nobody").unwrap_err();
        assert_eq!((e.kind, e.field), (KeyOpKind::NoSuchKey, "name"));
        let e = add_key(at, "two words", "default", None).unwrap_err();
        assert_eq!((e.kind, e.field), (KeyOpKind::Invalid, "name"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
