//! What the request pipeline (`crate::server`) and the console (`crate::console`) share: the state every
//! worker shares, [`Gateway`] (the configuration in force with the console's overrides, keys, accounts,
//! the ledger, the answer cache, breakers, metrics and the HTTP layer's counters), and what it is made of and hands to a
//! request: `trace.rs` (a request's `Trace`), `respond.rs` (answers and errors in the client's protocol),
//! `watchdog.rs` (cancelling requests whose client went away; keepalives), `stats.rs` (availability per
//! model), `metrics/` (the counters and the `/metrics` scrape).

pub(crate) mod metrics;
pub(crate) mod respond;
pub(crate) mod stats;
pub(crate) mod trace;
pub(crate) mod watchdog;

use std::sync::Arc;

use crate::access::KeyStore;
use crate::config::{Config, Overrides};
use crate::store::Store;

use crate::http::ServerState;

/// What every worker shares.
pub(crate) struct Gateway {
    /// The config file (or embedded defaults) as loaded; the console's overrides apply on top.
    pub(crate) base: Config,
    /// `base` with the overrides applied: what requests see. Swapped whole when the console changes it.
    pub(crate) live: std::sync::RwLock<Arc<Config>>,
    pub(crate) overrides: std::sync::Mutex<crate::config::Overrides>,
    /// Local model servers found by discovery, and what they serve.
    pub(crate) discovered: std::sync::Mutex<Vec<crate::upstream::discovery::LocalServer>>,
    pub keys: Arc<KeyStore>,
    pub agent: ureq::Agent,
    pub started_unix: u64,
    pub watchdog: Arc<watchdog::Watchdog>,
    pub ledger: crate::ledger::Ledger,
    pub accounts: Arc<crate::access::accounts::Accounts>,
    /// SHA-256 of the admin token (None: the admin API refuses every call).
    pub admin_token: crate::access::admin_token::AdminToken,
    /// Holds off addresses that keep presenting wrong admin tokens.
    pub admin_guard: crate::access::guard::Guard,
    /// Live per-model availability for the console.
    pub stats: stats::UsageStats,
    pub metrics: metrics::Metrics,
    pub breakers: crate::upstream::breaker::Breakers,
    /// Requests in flight, first-byte times and 429 cool-downs per upstream; weighted models' rotation.
    pub routing: crate::upstream::routing::Routing,
    /// Connection and overload counters of the HTTP layer.
    pub state: Arc<ServerState>,
    /// The shared store of several instances (`[store]`), if any.
    pub store: Option<Arc<crate::store::Store>>,
    /// The answer cache of the models that opt in (in the store, when there is one).
    pub cache: crate::cache::AnswerCache,
    /// The `instance` usage records carry (with a store, or when `instance` is set).
    pub record_instance: Option<String>,
}

impl Gateway {
    /// The configuration in force (a request keeps the one it started with).
    pub(crate) fn config(&self) -> Arc<Config> {
        crate::util::read_lock(&self.live).clone()
    }

    /// Where key changes go: the shared store, or the keys file in `data_dir`.
    pub(crate) fn keys_at(&self) -> crate::access::key_ops::KeysAt<'_> {
        match &self.store {
            Some(store) => crate::access::key_ops::KeysAt::Store(store),
            None => crate::access::key_ops::KeysAt::Dir(&self.base.data_dir),
        }
    }

    /// Puts the key records in force again after a change made here (the store's, or the keys file's).
    pub(crate) fn reload_keys(&self) {
        match &self.store {
            Some(store) => {
                crate::access::key_ops::install_from_store(&self.keys, store, false);
            }
            None => {
                self.keys.reload_if_changed();
            }
        }
    }

    /// The configuration in force: the file's (or the defaults), the console's overrides, and the models of
    /// local servers discovery found.
    fn compose(
        &self,
        overrides: &crate::config::Overrides,
    ) -> Result<Config, crate::config::ConfigError> {
        let config = self.base.with_overrides(overrides)?;
        let servers = crate::util::lock(&self.discovered).clone();
        Ok(if servers.is_empty() {
            config
        } else {
            crate::upstream::discovery::apply(&config, &servers)
        })
    }

    /// Discovery's latest look at the local servers: what changed is logged, and put in force at once.
    pub(crate) fn discovered(&self, servers: Vec<crate::upstream::discovery::LocalServer>) {
        {
            let mut d = crate::util::lock(&self.discovered);
            if *d == servers {
                return;
            }
            for s in &servers {
                let before = d.iter().find(|x| x.base_url == s.base_url);
                if before.map(|b| (&b.models, b.up)) != Some((&s.models, s.up)) {
                    match (&s.error, s.models.is_empty()) {
                        (None, _) => log::info!(
                            "discovery: {} serves {} model(s): {}",
                            s.base_url,
                            s.models.len(),
                            s.models.join(", ")
                        ),
                        (Some(e), false) => log::warn!(
                            "discovery: {} stopped answering ({e}); its {} model(s) stay listed until it answers again",
                            s.base_url,
                            s.models.len()
                        ),
                        (Some(_), true) => {}
                    }
                }
            }
            *d = servers;
        }
        let overrides = crate::util::lock(&self.overrides).clone();
        match self.compose(&overrides) {
            Ok(config) => *crate::util::write_lock(&self.live) = Arc::new(config),
            Err(e) => log::error!(
                "discovery: the configuration with the discovered models is invalid: {e}"
            ),
        }
    }

    /// The servers discovery knows of.
    pub(crate) fn discovered_servers(&self) -> Vec<crate::upstream::discovery::LocalServer> {
        crate::util::lock(&self.discovered).clone()
    }

    /// Changes the console's overrides: `f` edits them; the result is validated, saved (in the store when
    /// there is one, written only if no other instance changed them in between, else read again and
    /// retried; else atomically in `data_dir`) and put in force at once.
    pub(crate) fn change_overrides(
        &self,
        f: impl Fn(&mut crate::config::Overrides) -> Result<(), crate::config::ConfigError>,
    ) -> Result<(), crate::config::ConfigError> {
        let mut o = crate::util::lock(&self.overrides);
        let save_error = |e: &dyn std::fmt::Display| crate::config::ConfigError {
            field: String::new(),
            message: format!("cannot save the overrides: {e}"),
            ..Default::default()
        };
        let (next, config) = match &self.store {
            None => {
                let mut next = o.clone();
                f(&mut next)?;
                let config = self.compose(&next)?;
                next.save(&self.base.data_dir).map_err(|e| save_error(&e))?;
                (next, config)
            }
            Some(store) => self.change_in_store(store, &f)?,
        };
        *o = next;
        *crate::util::write_lock(&self.live) = Arc::new(config);
        Ok(())
    }

    fn change_in_store(
        &self,
        store: &crate::store::Store,
        f: &dyn Fn(&mut crate::config::Overrides) -> Result<(), crate::config::ConfigError>,
    ) -> Result<(crate::config::Overrides, Config), crate::config::ConfigError> {
        let save_error = |e: &dyn std::fmt::Display| crate::config::ConfigError {
            field: String::new(),
            message: format!("cannot save the overrides in the store: {e}"),
            ..Default::default()
        };
        for _ in 0..50 {
            let (version, mut next) = read_overrides(store).map_err(|e| save_error(&e))?;
            f(&mut next)?;
            let config = self.compose(&next)?;
            let doc = serde_json::to_string(&next).map_err(|e| save_error(&e))?;
            let written = store
                .write_map(OVERRIDES_MAP, version, &[("doc".to_string(), doc)], &[])
                .map_err(|e| save_error(&e))?;
            if written.is_some() {
                return Ok((next, config));
            }
        }
        Err(save_error(
            &"they kept changing on other instances; try again",
        ))
    }

    /// Puts overrides read from the store in force (another instance changed them).
    pub(crate) fn install_overrides(&self, next: crate::config::Overrides) {
        let mut o = crate::util::lock(&self.overrides);
        if *o == next {
            return;
        }
        match self.compose(&next) {
            Ok(config) => {
                *o = next;
                *crate::util::write_lock(&self.live) = Arc::new(config);
                log::info!(
                    "the console's overrides changed on another instance; in force here too"
                );
            }
            Err(e) => log::error!(
                "the overrides in the store do not apply to this instance's config: {e}"
            ),
        }
    }
}

/// The map in the store holding the console's overrides (one field, `doc`).
pub(crate) const OVERRIDES_MAP: &str = "overrides";

/// The store's overrides and their version.
pub(crate) fn read_overrides(store: &Store) -> Result<(u64, Overrides), crate::store::StoreError> {
    let (version, fields) = store.read_map(OVERRIDES_MAP)?;
    let doc = fields
        .iter()
        .find(|(k, _)| k == "doc")
        .and_then(|(_, v)| match serde_json::from_str::<Overrides>(v) {
            Ok(o) => Some(o),
            Err(e) => {
                log::error!("store: the overrides in the store are not valid ({e}); ignored");
                None
            }
        })
        .unwrap_or_default();
    Ok((version, doc))
}
