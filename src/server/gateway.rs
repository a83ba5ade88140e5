//! The state every worker shares: the configuration in force (with the console's overrides), keys,
//! accounts, the ledger, breakers, metrics and the HTTP layer's counters.

use std::sync::Arc;

use super::{metrics, stats, watchdog};
use crate::access::KeyStore;
use crate::config::Config;
use crate::http::{Exchange, ServerState};

/// What every worker shares.
pub struct Gateway {
    /// The config file (or embedded defaults) as loaded; the console's overrides apply on top.
    pub(super) base: Config,
    /// `base` with the overrides applied: what requests see. Swapped whole when the console changes it.
    pub(super) live: std::sync::RwLock<Arc<Config>>,
    pub(super) overrides: std::sync::Mutex<crate::config::Overrides>,
    pub keys: Arc<KeyStore>,
    pub agent: ureq::Agent,
    pub started_unix: u64,
    pub watchdog: Arc<watchdog::Watchdog>,
    pub ledger: crate::ledger::Ledger,
    pub accounts: Arc<crate::access::accounts::Accounts>,
    /// SHA-256 of the admin token (None: the admin API refuses every call).
    pub admin_token: Option<[u8; 32]>,
    /// Holds off addresses that keep presenting wrong admin tokens.
    pub admin_guard: crate::console::guard::Guard,
    /// Live per-model availability for the console.
    pub stats: stats::Stats,
    pub metrics: metrics::Metrics,
    pub breakers: crate::upstream::breaker::Breakers,
    /// Requests in flight, first-byte times and 429 cool-downs per upstream; weighted models' rotation.
    pub routing: crate::upstream::routing::Routing,
    /// Connection and overload counters of the HTTP layer.
    pub state: Arc<ServerState>,
    /// The worker queue's sending side (for its depth).
    pub queue: crossbeam_channel::Sender<Exchange>,
}

impl Gateway {
    /// The configuration in force (a request keeps the one it started with).
    pub fn config(&self) -> Arc<Config> {
        match self.live.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Changes the console's overrides: `f` edits them; the result is validated, saved atomically and put
    /// in force at once.
    pub fn change_overrides(
        &self,
        f: impl FnOnce(&mut crate::config::Overrides) -> Result<(), crate::config::ConfigError>,
    ) -> Result<(), crate::config::ConfigError> {
        let mut o = match self.overrides.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut next = o.clone();
        f(&mut next)?;
        let config = self.base.with_overrides(&next)?;
        next.save(&self.base.data_dir)
            .map_err(|e| crate::config::ConfigError {
                field: String::new(),
                message: format!("cannot save the overrides: {e}"),
            })?;
        *o = next;
        match self.live.write() {
            Ok(mut g) => *g = Arc::new(config),
            Err(p) => *p.into_inner() = Arc::new(config),
        }
        Ok(())
    }
}
