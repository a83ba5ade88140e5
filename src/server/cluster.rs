//! This instance's part in a cluster of instances on one shared store (`[store]`).
//!
//! At start ([`join`]): the instance's name is claimed (two running instances with one name would ship
//! into one cursor), the store's epoch is checked, and the keys and the console's overrides are read from the
//! store, or from the local copies (`store-keys.jsonl`, `store-overrides.json` in `data_dir`) while it does
//! not answer. A brand-new store (no epoch, and this instance never used one) takes this instance's keys file
//! and overrides, and its ledger is shipped from the start: a single instance that gets a `[store]` carries
//! its keys and balances over.
//!
//! Then the store thread ([`start`]) looks at the store every 250 ms: a new version of the keys or of the
//! overrides is read and put in force (so a key revoked on any instance is refused here within about a
//! quarter of a second), the epoch is checked (a store without its epoch lost its data: model requests are
//! refused until `tollgate store rebuild`), and this instance's reservation leases and name claim are
//! renewed. The keys' terms (what the admission script reads of each key: credit, own budget, expiry,
//! state) are written with their records (`access/key_ops.rs`); at start, and when the records changed
//! without them, they are written anew (`key_ops::sync_terms`). The shipper thread (`store::ship`) sends the
//! ledger's records as they are synced.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::thread::ThreadError;
use crate::access::key_ops::{self, KeyOpError};
use crate::access::keys::{self, KeyRecord, KeysFileError};
use crate::config::{Config, ConfigError, Overrides};
use crate::gateway::{read_overrides, Gateway, OVERRIDES_MAP};
use crate::store::{Claim, SetupError, Store, StoreError};

/// The local copy of the store's key records (hashes only), kept for a start while the store is down and
/// for `tollgate store rebuild`.
pub(crate) const KEYS_COPY: &str = key_ops::KEYS_COPY;
/// The local copy of the store's overrides.
pub(crate) const OVERRIDES_COPY: &str = "store-overrides.json";
/// The store epoch this data directory last saw.
const EPOCH_FILE: &str = "store-epoch";
/// This data directory's run id: the holder of its instance name in the store.
const RUN_ID_FILE: &str = "store-run-id";

/// The files of the data directory this module reads and writes.
pub(crate) const FILES: [&str; 4] = [KEYS_COPY, OVERRIDES_COPY, EPOCH_FILE, RUN_ID_FILE];

/// The start of an epoch written by `tollgate store rebuild`: only such a new epoch ends the refusals of
/// instances that saw the store lose its data.
pub(crate) const REBUILT: &str = "rebuilt_";

/// How long a claim on the instance name lasts without renewal.
const CLAIM_TTL: Duration = Duration::from_secs(30);

/// How often the store is looked at.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Why this instance cannot take its part in the cluster: its start stops (or `store rebuild` says why).
#[derive(Debug)]
pub enum ClusterError {
    /// No handle on the store can be made from its settings.
    Setup(SetupError),
    /// Another running instance holds this instance's name.
    NameHeld {
        instance: String,
        holder: String,
        store: String,
    },
    /// A file of the data directory cannot be written.
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The store failed a call.
    Store(StoreError),
    /// The key records could not be read or written in the store.
    Keys(KeyOpError),
    /// This instance's keys file cannot be read.
    KeysFile(KeysFileError),
    /// This instance's overrides cannot be read.
    Overrides(ConfigError),
    /// The overrides do not serialize.
    Json(serde_json::Error),
    /// The store holds data of a newer tollgate than this one (its format).
    Newer { store: String, format: u64 },
}

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterError::Setup(e) => write!(f, "{e}"),
            ClusterError::Newer { store, format } => write!(
                f,
                "store: {store} holds data a newer tollgate wrote (store format {format}; this one knows \
                 format {} and would misread it): upgrade this instance to the version of the others",
                crate::store::STORE_FORMAT
            ),
            ClusterError::NameHeld {
                instance,
                holder,
                store,
            } => write!(
                f,
                "the instance name {instance:?} is held by another running tollgate ({holder}) on {store}; give \
                 each instance its own `instance` in its config (two instances with one name would mix their \
                 usage records)"
            ),
            ClusterError::Write { path, error } => {
                write!(f, "cannot write {}: {error}", path.display())
            }
            ClusterError::Store(e) => write!(f, "{e}"),
            ClusterError::Keys(e) => write!(f, "{e}"),
            ClusterError::KeysFile(e) => write!(f, "{e}"),
            ClusterError::Overrides(e) => write!(f, "{e}"),
            ClusterError::Json(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<StoreError> for ClusterError {
    fn from(e: StoreError) -> ClusterError {
        ClusterError::Store(e)
    }
}

impl From<KeyOpError> for ClusterError {
    fn from(e: KeyOpError) -> ClusterError {
        ClusterError::Keys(e)
    }
}

impl From<serde_json::Error> for ClusterError {
    fn from(e: serde_json::Error) -> ClusterError {
        ClusterError::Json(e)
    }
}

/// What the store held at start.
pub struct Joined {
    pub keys: Vec<KeyRecord>,
    pub overrides: Overrides,
    pub keys_version: u64,
    pub overrides_version: u64,
}

fn read_text(path: &Path) -> Option<String> {
    match crate::util::read_owned_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::error!("{e}");
            None
        }
    }
}

/// The run id of this data directory (made on first use).
fn run_id(data_dir: &Path) -> Result<String, ClusterError> {
    let path = data_dir.join(RUN_ID_FILE);
    if let Some(id) = read_text(&path).map(|t| t.trim().to_string()) {
        if !id.is_empty() {
            return Ok(id);
        }
    }
    let id = crate::util::new_id("run_");
    crate::util::write_atomic(&path, id.as_bytes())
        .map_err(|error| ClusterError::Write { path, error })?;
    Ok(id)
}

/// Joins the store at start. Errors stop the start: the instance name is held by another running
/// instance, or a local file cannot be written. A store that does not answer is no error: the local copies
/// serve until it does (and model requests get 503 meanwhile, by the failure policy).
pub(crate) fn join(config: &Config, store: &Store) -> Result<Joined, ClusterError> {
    let dir = &config.data_dir;
    let run = run_id(dir)?;
    match store.claim_instance(&run, CLAIM_TTL) {
        Ok(Claim::Ours) => {}
        Ok(Claim::HeldBy(holder)) => {
            return Err(ClusterError::NameHeld {
                instance: store.instance().to_string(),
                holder,
                store: store.describe(),
            })
        }
        Err(e) => {
            log::error!(
                "store: {} does not answer at start ({e}); serving from the local copies of the keys and overrides, \
                 and refusing model requests until it answers",
                store.describe()
            );
            return Ok(local_copies(dir));
        }
    }
    let known_epoch = read_text(&dir.join(EPOCH_FILE)).map(|t| t.trim().to_string());
    let versions = store.versions()?;
    match (&versions.epoch, &known_epoch) {
        (None, Some(_)) => {
            log::error!(
                "store: {} has lost its data (it holds no epoch, and this instance used it before); model requests \
                 are refused until it is restored with `tollgate store rebuild`",
                store.describe()
            );
            store.set_lost(true);
            return Ok(local_copies(dir));
        }
        (None, None) => {
            let epoch = set_up(config, store)?;
            remember_epoch(dir, &epoch)?;
            log::info!(
                "store: {} is new; this instance's keys and overrides were copied into it",
                store.describe()
            );
        }
        (Some(e), Some(known)) if e != known && !e.starts_with(REBUILT) => {
            log::error!(
                "store: {} is not the store this instance used (its epoch changed without a rebuild: it lost its \
                 data and was set up anew?); model requests are refused until `tollgate store rebuild`",
                store.describe()
            );
            store.set_lost(true);
            return Ok(local_copies(dir));
        }
        (Some(e), known) => {
            if known.as_deref() != Some(e.as_str()) {
                remember_epoch(dir, e)?;
            }
        }
    }
    check_format(store, versions.epoch.is_some())?;
    // What admission reads of each key is kept with its record; a store whose terms are not those of its
    // records (set up before they were kept) gets them now.
    if key_ops::sync_terms(store)? {
        log::info!("store: the keys' terms (what admission reads of each key) were written anew");
    }
    let (keys_version, fields) = store.read_map(key_ops::STORE_MAP)?;
    let records = key_ops::records_of(&fields);
    let (overrides_version, overrides) = read_overrides(store)?;
    key_ops::keep_keys_copy(dir, &records);
    keep_overrides_copy(dir, &overrides);
    Ok(Joined {
        keys: records,
        overrides,
        keys_version,
        overrides_version,
    })
}

fn remember_epoch(dir: &Path, epoch: &str) -> Result<(), ClusterError> {
    let path = dir.join(EPOCH_FILE);
    crate::util::write_atomic(&path, epoch.as_bytes())
        .map_err(|error| ClusterError::Write { path, error })
}

/// The local copies (what the store held when it last answered).
fn local_copies(dir: &Path) -> Joined {
    let keys = keys::read_keys(&dir.join(KEYS_COPY)).unwrap_or_default();
    let overrides = read_text(&dir.join(OVERRIDES_COPY))
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    Joined {
        keys,
        overrides,
        keys_version: 0,
        overrides_version: 0,
    }
}

/// Writes the local copy of the store's overrides (errors are logged: it is a copy).
fn keep_overrides_copy(dir: &Path, overrides: &Overrides) {
    let written = serde_json::to_vec_pretty(overrides)
        .map_err(std::io::Error::other)
        .and_then(|text| crate::util::write_atomic(&dir.join(OVERRIDES_COPY), &text));
    if let Err(e) = written {
        log::warn!(
            "store: cannot keep the local copy of the overrides in {}: {e}",
            dir.display()
        );
    }
}

/// Sets up a brand-new store: it takes this instance's keys file and overrides (when it has none), and
/// gets its epoch. Returns the epoch.
pub(crate) fn set_up(config: &Config, store: &Store) -> Result<String, ClusterError> {
    import_local(config, store)?;
    Ok(store.init_epoch(&crate::util::new_id("epoch_"))?)
}

/// `store rebuild`: the overrides from this instance's local copy, when the store has none.
pub(crate) fn restore_overrides(config: &Config, store: &Store) -> Result<(), ClusterError> {
    let (version, current) = read_overrides(store)?;
    if current != Overrides::default() {
        println!("overrides: the store still holds them (kept)");
        return Ok(());
    }
    let path = config.data_dir.join(OVERRIDES_COPY);
    let Some(local) = read_text(&path).and_then(|t| serde_json::from_str::<Overrides>(&t).ok())
    else {
        return Ok(());
    };
    if local == Overrides::default() {
        return Ok(());
    }
    let doc = serde_json::to_string(&local)?;
    store.write_map(OVERRIDES_MAP, version, &[("doc".to_string(), doc)], &[])?;
    println!("overrides: restored from {}", path.display());
    Ok(())
}

/// A brand-new store takes this instance's keys file and overrides (when the store has none).
fn import_local(config: &Config, store: &Store) -> Result<(), ClusterError> {
    let dir = &config.data_dir;
    let records = keys::read_keys(&dir.join(keys::KEYS_FILE)).map_err(ClusterError::KeysFile)?;
    if !records.is_empty() {
        let n = records.len();
        key_ops::update_keys(key_ops::KeysAt::Store(store), |in_store| {
            if in_store.is_empty() {
                in_store.extend(records.iter().cloned());
            }
            Ok(())
        })?;
        log::info!(
            "store: {} copied from {} into the new store",
            crate::util::plural(n, "key"),
            dir.join(keys::KEYS_FILE).display()
        );
    }
    let local = Overrides::load(dir).map_err(ClusterError::Overrides)?;
    if local != Overrides::default() {
        let (version, current) = read_overrides(store)?;
        if current == Overrides::default() {
            let doc = serde_json::to_string(&local)?;
            store.write_map(OVERRIDES_MAP, version, &[("doc".to_string(), doc)], &[])?;
        }
    }
    Ok(())
}

/// The store's format raised to this version's: a store a newer tollgate wrote is not for this one (an
/// error); one an older tollgate used (`used`: it was not new) may still have such instances running beside
/// this one (a warning).
fn check_format(store: &Store, used: bool) -> Result<(), ClusterError> {
    let format = store.claim_format()?;
    if format > crate::store::STORE_FORMAT {
        return Err(ClusterError::Newer {
            store: store.describe(),
            format,
        });
    }
    if format < crate::store::STORE_FORMAT && used {
        log::warn!(
            "store: {} was used by an older tollgate (store format {format}; this one writes {}): instances of \
             that version still running beside this one misread some of what it writes; upgrade them together \
             (docs/CLUSTER.md)",
            store.describe(),
            crate::store::STORE_FORMAT
        );
    }
    Ok(())
}

/// At start: the store joined (None without a `[store]`). A store that does not answer is no error.
pub(crate) fn join_at_start(config: &Config) -> Result<Option<super::Shared>, ClusterError> {
    let Some(settings) = &config.store else {
        return Ok(None);
    };
    for (field, var) in settings.missing_variables() {
        log::error!(
            "{field}: the environment variable {var} is not set; the store will refuse this instance"
        );
    }
    let store = Arc::new(Store::new(settings, &config.instance).map_err(ClusterError::Setup)?);
    let joined = join(config, &store)?;
    log::info!(
        "store: {} as instance {:?} ({}; on_unavailable = {})",
        store.describe(),
        config.instance,
        crate::util::plural(joined.keys.len(), "key"),
        settings.on_unavailable.name()
    );
    Ok(Some(super::Shared { store, joined }))
}

/// Starts the store thread and the shipper.
pub(crate) fn start(
    gw: &Arc<Gateway>,
    joined_keys: u64,
    joined_overrides: u64,
) -> Result<(), ThreadError> {
    let Some(store) = gw.store.clone() else {
        return Ok(());
    };
    let (g, s) = (gw.clone(), store.clone());
    super::spawn("tollgate-store", move || {
        look_loop(&g, &s, joined_keys, joined_overrides)
    })?;
    let s = store.clone();
    super::spawn("tollgate-settler", move || s.settler())?;
    let g = gw.clone();
    super::spawn("tollgate-shipper", move || {
        crate::store::shipper::follow(store, &g.ledger)
    })
}

/// At shutdown, after the ledger is closed: ships what the shipper has not yet (for up to `within`), and
/// gives up the instance name.
pub(crate) fn leave(store: &Store, ledger: &crate::ledger::Ledger, within: Duration) {
    store.stop_shipping();
    if let Err(e) = store.settle_due(true) {
        log::warn!("store: settlements left to the records ({e})");
    }
    match crate::store::shipper::catch_up(store, ledger, within) {
        Ok(()) => {}
        Err(e) => log::warn!(
            "store: not every usage record was shipped before exiting ({e}); the rest is shipped from the local \
             ledger at the next start"
        ),
    }
    // Every request has ended and its record is shipped: the allotments end, giving back what they hold.
    store.return_allotments(true);
    if let Ok(run) = run_id(&ledger_dir(ledger)) {
        store.release_instance(&run);
    }
}

fn ledger_dir(ledger: &crate::ledger::Ledger) -> PathBuf {
    ledger
        .path()
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// What the store thread has put in force.
struct Seen {
    keys: u64,
    overrides: u64,
    epoch: Option<String>,
}

fn look_loop(gw: &Gateway, store: &Store, keys: u64, overrides: u64) {
    let dir: PathBuf = gw.base.data_dir.clone();
    let mut seen = Seen {
        keys,
        overrides,
        epoch: read_text(&dir.join(EPOCH_FILE)).map(|t| t.trim().to_string()),
    };
    let run = run_id(&dir).unwrap_or_default();
    let mut last_renew = Instant::now();
    let mut renew_failed = false;
    let renew_every = (store.settings().lease / 3).min(CLAIM_TTL / 3);
    // Until the instance leaves the store (`leave`, after the drain), not only until the drain begins: the
    // requests still running while it drains keep their leases, or another instance would sweep their
    // reservations and concurrency slots as a dead instance's.
    while !store.stopping() {
        std::thread::sleep(LOOK_EVERY);
        // `leave` may have begun meanwhile: it gives the allotments back and the name up itself.
        if store.stopping() {
            break;
        }
        let Ok(v) = store.versions() else { continue };
        if !epoch_ok(store, &mut seen, v.epoch.as_deref(), &dir) {
            continue;
        }
        if v.keys != seen.keys {
            // After a rebuild (versions counted anew) whatever the store holds goes in force.
            let force = seen.keys == u64::MAX;
            if let Some(ver) = key_ops::install_from_store(&gw.keys, store, force) {
                seen.keys = ver;
                // Records written without their terms (by a writer that does not keep them): written now.
                if store.terms_at().is_ok_and(|at| at != ver) {
                    if let Err(e) = key_ops::sync_terms(store) {
                        log::warn!("store: {e}");
                    }
                }
            }
        }
        // Allotments over their time give back what they do not need.
        store.return_allotments(false);
        if v.overrides != seen.overrides {
            if let Ok((ver, o)) = read_overrides(store) {
                keep_overrides_copy(&dir, &o);
                gw.install_overrides(o);
                seen.overrides = ver;
            }
        }
        // Renewed every third of a lease, and again at each look after a renewal failed (the store was down),
        // so that reservations whose lease ran short during an outage are renewed as soon as it answers.
        if renew_failed || last_renew.elapsed() >= renew_every {
            last_renew = Instant::now();
            match store.renew_leases() {
                Ok(_) => renew_failed = false,
                Err(e) => {
                    if !renew_failed {
                        log::warn!(
                            "store: renewing this instance's reservations failed ({e}); retrying at each look"
                        );
                    }
                    renew_failed = true;
                }
            }
            if let Ok(Claim::HeldBy(holder)) = store.claim_instance(&run, CLAIM_TTL) {
                log::error!(
                    "store: the instance name {:?} is now held by another running tollgate ({holder}); give each \
                     instance its own `instance`",
                    store.instance()
                );
            }
        }
    }
}

/// A key not in force makes the key set look at the store's key version once before it is refused (so a
/// key made on any instance works here at once): a newer version is read and put in force. While the store
/// does not answer, nothing is asked (a flood of wrong keys must not wait on a store that is down).
pub(crate) fn look_on_miss(keys: &crate::access::KeyStore, store: &Arc<Store>) {
    let store = store.clone();
    keys.set_miss_look(Box::new(move |keys| {
        if !store.healthy() || store.lost() {
            return;
        }
        if let Ok(v) = store.versions() {
            if v.keys != keys.version() {
                key_ops::install_from_store(keys, &store, false);
            }
        }
    }));
}

/// Checks the store's epoch against the one in force; false while the store has lost its data.
fn epoch_ok(store: &Store, seen: &mut Seen, epoch: Option<&str>, dir: &Path) -> bool {
    match (epoch, seen.epoch.as_deref()) {
        (None, Some(_)) => {
            if !store.lost() {
                log::error!(
                    "store: {} has lost its data (its epoch is gone: restarted without persistence?); model \
                     requests are refused until it is restored with `tollgate store rebuild`",
                    store.describe()
                );
                store.set_lost(true);
            }
            false
        }
        (Some(now), Some(before)) if before != now && !now.starts_with(REBUILT) => {
            if !store.lost() {
                log::error!(
                    "store: {} has a new epoch that no rebuild wrote (it lost its data and was set up anew?); model \
                     requests are refused until `tollgate store rebuild`",
                    store.describe()
                );
                store.set_lost(true);
            }
            false
        }
        (Some(now), before) if before != Some(now) => {
            if before.is_some() {
                log::warn!(
                    "store: {} was rebuilt (new epoch); reading its keys and overrides again",
                    store.describe()
                );
            }
            let _ = remember_epoch(dir, now);
            seen.epoch = Some(now.to_string());
            // Read everything again.
            seen.keys = u64::MAX;
            seen.overrides = u64::MAX;
            if store.lost() {
                log::info!(
                    "store: {} holds data again; model requests are admitted",
                    store.describe()
                );
            }
            store.set_lost(false);
            true
        }
        (None, None) => {
            // A new store this instance could not set up at start (it did not answer then).
            if let Ok(e) = store.init_epoch(&crate::util::new_id("epoch_")) {
                let _ = remember_epoch(dir, &e);
                seen.epoch = Some(e);
            }
            true
        }
        _ => true,
    }
}
