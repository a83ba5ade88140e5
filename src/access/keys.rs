//! API keys: generation, SHA-256 hashing, the flat keys file (`keys.jsonl` in `data_dir`) and the in-memory
//! set the request path checks against. The operator's changes to keys (add, revoke, rotate, credit, ...)
//! are in `key_ops.rs`.
//!
//! The file holds one JSON object per line: name, group, the key's SHA-256 (hex), optional credit, whether
//! it is disabled, and when it was created. The plaintext key is never stored. Rewrites are atomic (write a
//! temporary file, fsync, rename, fsync the directory) and private (mode 0600). A running server reloads the
//! file when it changes (any rewrite: inode, length, times and a SHA-256 of the content are compared); a file
//! that no longer parses, has disappeared or holds no keys leaves the last good set in force and logs an
//! error once. Keys end by being revoked, never by a file going missing.
//!
//! A key that is not in memory makes the set look at its source once before it is refused ([`KeyStore::check`]):
//! the keys file's metadata (one `stat`), or, with a shared store, the store's key version (one call). Looks
//! are single-flight: a miss waits for a look that started after it arrived, and shares it with every miss
//! that arrived before that look began, so a flood of wrong keys costs one look at a time, and a key made a
//! moment ago (`tollgate keys add`, the console) works at its first use.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::money::Money;
use sha2::{Digest, Sha256};

/// File name of the keys file inside `data_dir`.
pub const KEYS_FILE: &str = "keys.jsonl";

/// Length of the random part of a key.
pub const KEY_RANDOM_LEN: usize = 40;
/// What every key starts with, before its random part.
pub const KEY_PREFIX: &str = "tg_";

/// One line of the keys file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyRecord {
    /// The key's name, unique among the records (deleted keys' included); its usage is recorded under it.
    pub name: String,
    /// The group whose models and limits apply to the key.
    pub group: String,
    /// `sha256:` followed by the hex digest of the key.
    pub hash: String,
    /// The key's credit (absent: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit: Option<Money>,
    /// Revoked: the key is refused until it is enabled again.
    #[serde(default)]
    pub disabled: bool,
    /// When the key was made (RFC 3339, UTC; empty when not recorded).
    #[serde(default)]
    pub created: String,
    /// The key's first characters (`tg_3dRk`), to tell keys apart in lists without showing the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// A spend budget per period, on top of the credit (its group's applies when it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// When the key stops working (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Deleted after it was revoked: kept (without its hash) only so that its name is not given to another
    /// key, whose usage records would then mix with this one's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// A new random key: `tg_` and 40 base62 characters (~238 bits).
pub fn generate_key() -> String {
    format!("{KEY_PREFIX}{}", crate::util::random_base62(KEY_RANDOM_LEN))
}

/// What lists show of a key: its prefix and four characters (about 24 of its 238 bits).
pub fn hint_of(key: &str) -> String {
    key.chars().take(KEY_PREFIX.len() + 4).collect()
}

/// The stored form of a key.
pub fn hash_key(key: &str) -> String {
    KeyHash::of(key).as_str().to_string()
}

/// [`hash_key`] on the stack (what each request's key check looks up, with nothing allocated).
struct KeyHash([u8; 7 + 64]);

impl KeyHash {
    fn of(key: &str) -> KeyHash {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(key.as_bytes());
        let mut out = [0u8; 7 + 64];
        out[..7].copy_from_slice(b"sha256:");
        for (i, b) in digest.iter().enumerate() {
            out[7 + 2 * i] = HEX[(b >> 4) as usize];
            out[8 + 2 * i] = HEX[(b & 15) as usize];
        }
        KeyHash(out)
    }

    fn as_str(&self) -> &str {
        // ASCII by construction.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// Why a keys file could not be read.
#[derive(Debug)]
pub enum KeysFileError {
    /// The file could not be read (or is not valid UTF-8).
    Io(io::Error),
    /// A line (1-based) that is not a valid record.
    Line(usize, String),
}

impl std::fmt::Display for KeysFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeysFileError::Io(e) => write!(f, "{e}"),
            KeysFileError::Line(n, m) => write!(f, "line {n}: {m}"),
        }
    }
}

/// Reads the keys file; a missing file is an empty set.
pub fn read_keys(path: &Path) -> Result<Vec<KeyRecord>, KeysFileError> {
    let text = match crate::util::read_owned_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(KeysFileError::Io(e)),
    };
    parse_keys(&text)
}

/// Parses keys file text. Blank lines and lines starting with `#` are skipped.
pub fn parse_keys(text: &str) -> Result<Vec<KeyRecord>, KeysFileError> {
    let mut out: Vec<KeyRecord> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let rec: KeyRecord =
            serde_json::from_str(line).map_err(|e| KeysFileError::Line(i + 1, e.to_string()))?;
        let hex_ok = rec.hash.strip_prefix("sha256:").is_some_and(|h| {
            h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        let tombstone = rec.deleted && rec.hash.is_empty();
        if !(hex_ok || tombstone) {
            return Err(KeysFileError::Line(
                i + 1,
                "hash must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        if rec.name.is_empty() {
            return Err(KeysFileError::Line(i + 1, "name must not be empty".into()));
        }
        if out.iter().any(|r| r.name == rec.name) {
            return Err(KeysFileError::Line(
                i + 1,
                format!("duplicate key name {:?}", rec.name),
            ));
        }
        out.push(rec);
    }
    Ok(out)
}

/// Writes the keys file atomically: temp file, fsync, rename over the old one, fsync the directory.
pub fn write_keys(path: &Path, keys: &[KeyRecord]) -> io::Result<()> {
    let mut text = String::from(
        "# tollgate keys: one JSON object per line; only SHA-256 hashes of keys are stored\n",
    );
    for k in keys {
        text.push_str(&serde_json::to_string(k).map_err(io::Error::other)?);
        text.push('\n');
    }
    crate::util::write_atomic(path, text.as_bytes())
}

/// Who a valid key belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The key's name.
    pub name: String,
    /// The key's group.
    pub group: String,
    /// The key's credit (`None`: unlimited).
    pub credit: Option<Money>,
    /// The key's own spend budget (its group's applies when it has none).
    pub budget: Option<Budget>,
    /// When the key stops working (Unix seconds).
    pub expires: Option<u64>,
}

/// The outcome of checking a presented key.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyCheck {
    /// A key in force, and who it belongs to (an expired key is still valid here; the caller checks).
    Valid(Arc<Identity>),
    /// A revoked key, with its name.
    Revoked(String),
    /// Not a key of this set, also after a look at its source.
    Unknown,
}

#[derive(Default)]
struct KeySet {
    by_hash: HashMap<String, (Arc<Identity>, bool)>,
    records: Vec<KeyRecord>,
}

impl KeySet {
    fn from_records(records: &[KeyRecord]) -> KeySet {
        let records: Vec<KeyRecord> = records.iter().filter(|r| !r.deleted).cloned().collect();
        let by_hash = records
            .iter()
            .map(|r| {
                let id = Identity {
                    name: r.name.clone(),
                    group: r.group.clone(),
                    credit: r.credit,
                    budget: r.budget,
                    expires: r.expires.as_deref().and_then(crate::util::parse_rfc3339),
                };
                (r.hash.clone(), (Arc::new(id), r.disabled))
            })
            .collect();
        KeySet { by_hash, records }
    }
}

/// How a key set looks at its source again when a presented key is not in it (see the module doc).
pub type MissLook = Box<dyn Fn(&KeyStore) + Send + Sync>;

/// The keys the server accepts, reloaded when the file changes.
pub struct KeyStore {
    path: PathBuf,
    set: RwLock<Arc<KeySet>>,
    /// What the last look at the file saw; also serialises reloads.
    seen: Mutex<Seen>,
    /// With a shared store: the version of its key records in force.
    version: AtomicU64,
    /// What a miss does before refusing (the keys file: a quick reload; a store: set by the server).
    miss_look: OnceLock<MissLook>,
    /// When the last look on a miss started (held while a look runs: looks are single-flight).
    last_look: Mutex<Option<Instant>>,
}

/// The file's identity and metadata: a rewrite in place changes the length or the times, a replacement
/// (an atomic rename, an editor's save) the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileMeta {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn file_meta(path: &Path) -> Option<FileMeta> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::symlink_metadata(path).ok()?;
    Some(FileMeta {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// Seconds within which a file's timestamps cannot tell two writes apart (coarse filesystem clocks): a
/// file modified this close to the moment it was read is read again and its hash compared.
const RACY_SECS: i64 = 2;

/// What the reload last saw of the keys file.
struct Seen {
    /// None when the file was missing (or could not be examined).
    meta: Option<FileMeta>,
    /// SHA-256 of the content read; None when the file was missing.
    digest: Option<[u8; 32]>,
    /// When it was read (Unix seconds).
    read_at: i64,
}

impl Seen {
    /// Whether a rewrite could have kept every timestamp: the file was read within `RACY_SECS` of its last
    /// modification (the trick git uses for its index).
    fn racy(&self) -> bool {
        self.meta
            .is_some_and(|m| self.read_at <= m.mtime.0.max(m.ctime.0) + RACY_SECS)
    }
}

fn now_secs() -> i64 {
    i64::try_from(crate::util::unix_now()).unwrap_or(i64::MAX)
}

/// The file's bytes, None when it is missing.
fn read_bytes(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match crate::util::read_owned(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn parse_bytes(bytes: &[u8]) -> Result<Vec<KeyRecord>, KeysFileError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        KeysFileError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not valid UTF-8 ({e})"),
        ))
    })?;
    parse_keys(text)
}

impl KeyStore {
    /// Loads the keys file in `data_dir` (a missing file is an empty set).
    pub fn open(data_dir: &Path) -> Result<KeyStore, KeysFileError> {
        let path = data_dir.join(KEYS_FILE);
        let meta = file_meta(&path);
        let read_at = now_secs();
        let bytes = read_bytes(&path).map_err(KeysFileError::Io)?;
        let records = match &bytes {
            Some(b) => parse_bytes(b)?,
            None => Vec::new(),
        };
        let store = KeyStore {
            set: RwLock::new(Arc::new(KeySet::from_records(&records))),
            path,
            seen: Mutex::new(Seen {
                meta,
                digest: bytes.map(|b| Sha256::digest(&b).into()),
                read_at,
            }),
            version: AtomicU64::new(0),
            miss_look: OnceLock::new(),
            last_look: Mutex::new(None),
        };
        let quick: MissLook = Box::new(|k: &KeyStore| {
            k.reload(false);
        });
        let _ = store.miss_look.set(quick);
        Ok(store)
    }

    /// A key set kept in a shared store: starts from `records` (the store's, or the local copy while the
    /// store does not answer) and is replaced by [`KeyStore::install`], never reloaded from a file.
    pub fn from_records(data_dir: &Path, records: &[KeyRecord]) -> KeyStore {
        KeyStore {
            set: RwLock::new(Arc::new(KeySet::from_records(records))),
            path: data_dir.join(KEYS_FILE),
            seen: Mutex::new(Seen {
                meta: None,
                digest: None,
                read_at: 0,
            }),
            version: AtomicU64::new(0),
            miss_look: OnceLock::new(),
            last_look: Mutex::new(None),
        }
    }

    /// Sets how a key set kept in a shared store looks at the store on a miss (once; later calls are ignored).
    pub fn set_miss_look(&self, look: MissLook) {
        let _ = self.miss_look.set(look);
    }

    /// The version of the store's key records in force (0: none installed by version).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// [`KeyStore::install`] of the store's records at `version`, unless a newer version is in force already
    /// (a look on a miss and the store thread may read the store at the same time). `force`: install whatever
    /// the version (the store was rebuilt and counts its versions anew).
    pub fn install_version(
        &self,
        records: &[KeyRecord],
        from: &str,
        version: u64,
        force: bool,
    ) -> bool {
        let _serial = crate::util::lock(&self.seen);
        if !force && version <= self.version() {
            return false;
        }
        let installed = self.install(records, from);
        if installed {
            self.version.store(version, Ordering::SeqCst);
        }
        installed
    }

    /// Puts the store's key records in force. Like a keys file that comes back empty, a store that holds no
    /// key records while keys are in force is taken for a mistake (a store that lost its data): the keys in
    /// force stay, with an ERROR. Returns true when the new set was installed.
    pub fn install(&self, records: &[KeyRecord], from: &str) -> bool {
        let in_force = self.current().records.len();
        if records.is_empty() && in_force > 0 {
            log::error!(
                "{from} holds no keys; keeping the previous {in_force} keys in force. If the store lost its \
                 data, restore it with `tollgate store rebuild`"
            );
            return false;
        }
        let set = Arc::new(KeySet::from_records(records));
        *crate::util::write_lock(&self.set) = set;
        true
    }

    /// The keys file (`keys.jsonl` in `data_dir`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many keys are in force (revoked ones included, deleted ones not).
    pub fn len(&self) -> usize {
        self.current().by_hash.len()
    }

    /// Whether no key is in force.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn current(&self) -> Arc<KeySet> {
        match self.set.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Every key record currently in force (hashes included; never shown to clients).
    pub fn records(&self) -> Vec<KeyRecord> {
        self.current().records.clone()
    }

    /// Checks a presented key. A key not in force makes the set look at its source once (single-flight; see
    /// the module doc) before it is called unknown.
    pub fn check(&self, key: &str) -> KeyCheck {
        let arrived = Instant::now();
        let hash = KeyHash::of(key);
        let hash = hash.as_str();
        match self.lookup(hash) {
            KeyCheck::Unknown if self.miss_look.get().is_some() => {
                self.look_since(arrived);
                self.lookup(hash)
            }
            found => found,
        }
    }

    fn lookup(&self, hash: &str) -> KeyCheck {
        let set = self.current();
        match set.by_hash.get(hash) {
            Some((id, false)) => KeyCheck::Valid(id.clone()),
            Some((id, true)) => KeyCheck::Revoked(id.name.clone()),
            None => KeyCheck::Unknown,
        }
    }

    /// Makes sure a look at the source that started at or after `arrived` has completed: waits for the look
    /// in progress, and starts one unless a look that started after `arrived` has ended meanwhile.
    fn look_since(&self, arrived: Instant) {
        let Some(look) = self.miss_look.get() else {
            return;
        };
        let mut last = crate::util::lock(&self.last_look);
        if last.is_some_and(|t| t >= arrived) {
            return;
        }
        let started = Instant::now();
        look(self);
        *last = Some(started);
    }

    /// Reloads the file if it changed: its inode, length or times differ, or (while its timestamps cannot
    /// tell writes apart) the SHA-256 of its content does. Returns true when a new set was installed.
    ///
    /// The current set stays in force, with one ERROR per change of the file, when the file fails to parse
    /// (the log names the line), cannot be read, has disappeared or holds no key records: an empty keys file
    /// is far more often a mistake than an intent, and keys end by being revoked.
    pub fn reload_if_changed(&self) -> bool {
        self.reload(true)
    }

    /// [`KeyStore::reload_if_changed`]; `thorough`: also read a file whose timestamps cannot tell writes
    /// apart (the reload thread does; a look on a miss only compares metadata, which every rewrite tollgate
    /// makes changes: it replaces the file).
    fn reload(&self, thorough: bool) -> bool {
        let mut seen = crate::util::lock(&self.seen);
        let meta = file_meta(&self.path);
        if meta == seen.meta && !(thorough && seen.racy()) {
            return false;
        }
        let read_at = now_secs();
        let bytes = match read_bytes(&self.path) {
            Ok(b) => b,
            Err(e) => {
                // Logged once per change of what the file looks like; the digest is kept, so the same
                // content readable again is no change.
                if meta != seen.meta {
                    log::error!(
                        "cannot read the keys file {} ({e}); keeping the previous {} keys in force",
                        self.path.display(),
                        self.current().records.len()
                    );
                }
                seen.meta = meta;
                seen.read_at = read_at;
                return false;
            }
        };
        let digest: Option<[u8; 32]> = bytes.as_ref().map(|b| Sha256::digest(b).into());
        let changed = digest != seen.digest;
        *seen = Seen {
            meta,
            digest,
            read_at,
        };
        if !changed {
            return false;
        }
        let in_force = self.current().records.len();
        let records = match bytes {
            None if in_force == 0 => {
                log::info!("keys file {} is missing; no keys", self.path.display());
                return false;
            }
            None => {
                self.log_kept("has disappeared", in_force);
                return false;
            }
            Some(b) => match parse_bytes(&b) {
                Ok(records) => records,
                Err(e) => {
                    log::error!(
                        "keys file {} is invalid ({e}); keeping the previous {in_force} keys in force",
                        self.path.display(),
                    );
                    return false;
                }
            },
        };
        if records.is_empty() && in_force > 0 {
            self.log_kept("holds no keys (no key records)", in_force);
            return false;
        }
        let set = Arc::new(KeySet::from_records(&records));
        *crate::util::write_lock(&self.set) = set;
        log::info!(
            "keys reloaded from {} ({})",
            self.path.display(),
            crate::util::plural(records.len(), "key")
        );
        true
    }

    fn log_kept(&self, what: &str, in_force: usize) {
        log::error!(
            "keys file {} {what}; keeping the previous {in_force} keys in force. An empty or missing keys \
             file is taken for a mistake: restore the file (a valid one is loaded as usual). To end a key, \
             revoke it: tollgate keys revoke --name NAME",
            self.path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tollgate-keys-{name}-{}",
            crate::util::random_base62(8)
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn keys_are_long_random_and_hashed() {
        let k = generate_key();
        assert!(k.starts_with("tg_") && k.len() == 43);
        assert_ne!(k, generate_key());
        assert_eq!(
            hash_key("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn store_checks_and_reloads() {
        let dir = tmpdir("reload");
        let key = generate_key();
        let rec = KeyRecord {
            name: "a".into(),
            group: "default".into(),
            hash: hash_key(&key),
            credit: None,
            disabled: false,
            created: String::new(),
            deleted: false,
            budget: None,
            expires: None,
            hint: None,
        };
        write_keys(&dir.join(KEYS_FILE), std::slice::from_ref(&rec)).unwrap();
        let store = KeyStore::open(&dir).unwrap();
        assert!(matches!(store.check(&key), KeyCheck::Valid(_)));
        assert_eq!(store.check(&key[..key.len() - 1]), KeyCheck::Unknown);

        let mut revoked = rec.clone();
        revoked.disabled = true;
        revoked.created = "changed".into();
        write_keys(&dir.join(KEYS_FILE), &[revoked]).unwrap();
        assert!(store.reload_if_changed());
        assert_eq!(store.check(&key), KeyCheck::Revoked("a".into()));

        fs::write(
            dir.join(KEYS_FILE),
            "{\"name\":\"a\"}\nnot json at all, and longer\n",
        )
        .unwrap();
        assert!(!store.reload_if_changed());
        assert_eq!(store.check(&key), KeyCheck::Revoked("a".into()));
        fs::remove_dir_all(dir).unwrap();
    }

    fn record(name: &str, key: &str, disabled: bool, created: &str) -> KeyRecord {
        KeyRecord {
            name: name.into(),
            group: "default".into(),
            hash: hash_key(key),
            credit: None,
            disabled,
            created: created.into(),
            deleted: false,
            budget: None,
            expires: None,
            hint: None,
        }
    }

    #[test]
    fn a_missing_or_empty_file_keeps_the_keys_in_force() {
        let dir = tmpdir("empty");
        let path = dir.join(KEYS_FILE);
        let key = generate_key();
        write_keys(&path, &[record("a", &key, false, "")]).unwrap();
        let store = KeyStore::open(&dir).unwrap();
        fs::remove_file(&path).unwrap();
        assert!(!store.reload_if_changed());
        assert!(matches!(store.check(&key), KeyCheck::Valid(_)));
        fs::write(&path, "# only a comment\n\n").unwrap();
        assert!(!store.reload_if_changed());
        assert!(matches!(store.check(&key), KeyCheck::Valid(_)));
        assert_eq!(store.records().len(), 1);
        // A valid file coming back is loaded as usual.
        let other = generate_key();
        write_keys(&path, &[record("b", &other, false, "")]).unwrap();
        assert!(store.reload_if_changed());
        assert_eq!(store.check(&key), KeyCheck::Unknown);
        assert!(matches!(store.check(&other), KeyCheck::Valid(_)));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_rewrite_that_keeps_every_timestamp_is_noticed_by_its_hash() {
        let dir = tmpdir("samesize");
        let path = dir.join(KEYS_FILE);
        let key = generate_key();
        let line = |disabled, created| {
            serde_json::to_string(&record("a", &key, disabled, created)).unwrap() + "\n"
        };
        let (before, after) = (line(false, "x"), line(true, "xy"));
        assert_eq!(before.len(), after.len());
        fs::write(&path, &before).unwrap();
        let store = KeyStore::open(&dir).unwrap();
        fs::write(&path, &after).unwrap();
        // As if the rewrite fell in the same timestamp tick: the metadata looks unchanged.
        store.seen.lock().unwrap().meta = file_meta(&path);
        assert!(store.reload_if_changed());
        assert_eq!(store.check(&key), KeyCheck::Revoked("a".into()));
        // Once the file is older than its last read by more than the racy window, it is not read again.
        store.seen.lock().unwrap().read_at = now_secs() + 3 * RACY_SECS;
        fs::write(&path, &before).unwrap();
        store.seen.lock().unwrap().meta = file_meta(&path);
        assert!(!store.reload_if_changed());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn hashes_must_be_lowercase_hex() {
        let mut r = record("a", "k", false, "");
        let good = serde_json::to_string(&r).unwrap();
        assert_eq!(parse_keys(&good).unwrap().len(), 1);
        let h = r.hash.clone();
        let upper = format!("sha256:{}", h[7..].to_uppercase());
        assert_ne!(upper, h);
        for bad in [
            upper,
            format!("sha256:g{}", &h[8..]),
            format!("{} ", &h[..70]),
        ] {
            assert_eq!(bad.len(), 71);
            r.hash = bad;
            match parse_keys(&serde_json::to_string(&r).unwrap()) {
                Err(KeysFileError::Line(1, m)) => assert!(m.contains("lowercase hex"), "{m}"),
                other => panic!("{} accepted: {other:?}", r.hash),
            }
        }
    }

    #[test]
    fn broken_lines_are_reported_by_number() {
        let text = format!(
            "# c\n{}\n{{bad\n",
            serde_json::to_string(&KeyRecord {
                name: "a".into(),
                group: "g".into(),
                hash: hash_key("x"),
                credit: None,
                disabled: false,
                created: String::new(),
                deleted: false,
                budget: None,
                expires: None,
                hint: None,
            })
            .unwrap()
        );
        match parse_keys(&text) {
            Err(KeysFileError::Line(3, _)) => {}
            other => panic!("expected a line-3 error, got {other:?}"),
        }
    }
}
