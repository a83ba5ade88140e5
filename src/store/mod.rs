//! The shared store of several tollgate instances: one Redis (or Valkey) server holding the keys, the
//! console's overrides, the balances with their reservations, the rate windows and a bounded stream of usage
//! records (see docs/CLUSTER.md). This module is the only one that speaks to
//! Redis; it knows key names, scripts and timeouts, not what a key or a group means.
//!
//! Every call has a deadline (`[store] timeout_ms`, connecting included), so a store that stops answering
//! never holds a worker longer than that. A failed call marks the store down (`healthy()` false) until the
//! store thread's next successful look (every 250 ms), so requests meanwhile are refused at once instead of
//! each waiting for the deadline. Connections are pooled; a connection that failed is dropped, and a Redis
//! that restarted is reached again by the next call (its scripts are loaded again when it answers
//! NOSCRIPT).
//!
//! The server is the one at `[store] url`, or the primary that the Redis Sentinels of `[store] sentinels`
//! name (`sentinel.rs`): a call that finds it gone or turned replica makes the next call ask the sentinels
//! again, so a failover is followed by itself. With `replica_wait`, the writes no ledger can restore (key
//! records and their terms, the console's overrides, the epoch; with `all` every admission and settlement
//! too) wait for a replica's acknowledgement (`WAIT`) before they count as done.
//!
//! Layout (every key under `prefix`): `keys` (hash: key name → key record JSON) with `keys:ver`, and beside
//! it `terms` (hash: key name → what admission reads of the key: credit, own budget, expiry, state; written in
//! the same atomic step as the record, `lua/keys_write.lua`) with `terms:at` (the `keys:ver` they match);
//! `overrides` (hash: `doc` → the console's overrides JSON) with `overrides:ver`; `epoch` (set once, so a
//! store that lost its data is noticed); per key name K: `acct:K` (spent, reserved, inflight, last_used, swept, wexp),
//! `res:K` and `lease:K` (reservations in flight and their leases; in `res:K` also the markers 's', settled, and 'd', given back by a look for dead leases: `lua/money.lua`), `win:K`, `winv:K` (the rate
//! window: the last minute's admissions and their tokens), `per:K` (spend per budget period); `usage` (stream of usage records); `cursor:I` (how much of
//! instance I's local ledger was shipped); `instance:I` (which running process holds the name I); `audit`
//! (list of audit entries, newest first); `cache:*` (the answer cache's entries and their order, `cache.rs`).

pub(crate) mod accounts;
mod allot;
mod answer;
mod args;
mod batch;
pub(crate) mod cache;
mod calls;
pub(crate) mod sentinel;
mod settle;
mod shared;

pub use shared::STORE_FORMAT;
pub(crate) mod ship;
pub(crate) mod shipper;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use redis::{ConnectionLike, FromRedisValue, IntoConnectionInfo, Value};

use crate::config::store::{ReplicaWait, StoreSettings};

/// Why a store call failed.
#[derive(Debug, Clone)]
pub struct StoreError {
    /// The store did not answer (connection refused, timed out, reset): it counts as down.
    pub unavailable: bool,
    /// What went wrong, in words (the error's `Display` text).
    pub message: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for StoreError {}

/// Why no handle on the store can be made from its settings (or its sentinels asked): nothing was sent.
#[derive(Debug)]
pub enum SetupError {
    /// The client library refuses an address of the settings (`store.url`, `store.sentinels`).
    Address {
        /// The setting that holds the address.
        setting: &'static str,
        /// Why the client library refuses it.
        error: redis::RedisError,
    },
    /// The sentinels were asked of a store that has none configured.
    NoSentinels,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Address { setting, error } => write!(f, "{setting}: {error}"),
            SetupError::NoSentinels => write!(f, "store: no sentinels configured"),
        }
    }
}

impl std::error::Error for SetupError {}

/// Who holds this instance's name in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This process (the run id that asked).
    Ours,
    /// Another running process: its run id.
    HeldBy(String),
}

/// The scripts, each with the money helpers in front.
struct Scripts {
    admit: redis::Script,
    allot: redis::Script,
    settle: redis::Script,
    ship: redis::Script,
    /// The ship script's text, loaded ahead of every shipping batch.
    ship_source: String,
    release: redis::Script,
    renew: redis::Script,
    rehold: redis::Script,
    map_read: redis::Script,
    map_write: redis::Script,
    keys_write: redis::Script,
    terms_sync: redis::Script,
    claim: redis::Script,
    format: redis::Script,
    cursor_move: redis::Script,
    cache_get: redis::Script,
    cache_put: redis::Script,
}

const MONEY: &str = include_str!("lua/money.lua");

const SETTLE_MANY: &str = include_str!("lua/settle_many.lua");

fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{MONEY}\n{body}"))
}

/// A script that settles requests (`settle_many.lua` between the money helpers and its body).
fn settling_script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{MONEY}\n{SETTLE_MANY}\n{body}"))
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            admit: settling_script(include_str!("lua/admit.lua")),
            allot: script(include_str!("lua/allot.lua")),
            settle: settling_script(include_str!("lua/settle.lua")),
            ship: script(include_str!("lua/ship.lua")),
            ship_source: format!("{MONEY}\n{}", include_str!("lua/ship.lua")),
            release: script(include_str!("lua/release.lua")),
            renew: script(include_str!("lua/renew.lua")),
            rehold: script(include_str!("lua/rehold.lua")),
            map_read: script(include_str!("lua/map_read.lua")),
            map_write: script(include_str!("lua/map_write.lua")),
            keys_write: script(include_str!("lua/keys_write.lua")),
            terms_sync: script(include_str!("lua/terms_sync.lua")),
            claim: script(include_str!("lua/claim.lua")),
            format: script(include_str!("lua/format.lua")),
            cursor_move: script(include_str!("lua/cursor_move.lua")),
            cache_get: script(include_str!("lua/cache_get.lua")),
            cache_put: script(include_str!("lua/cache_put.lua")),
        }
    }
}

/// Connections kept for reuse at most (more are opened under load and closed when returned).
const POOL_MAX: usize = 64;

/// Which server the store is.
enum Target {
    /// The one at `url`.
    Url(redis::Client),
    /// The primary the sentinels name.
    Sentinels(Arc<sentinel::Follower>),
}

/// The handle every part of the gateway shares.
pub struct Store {
    settings: StoreSettings,
    target: Target,
    /// Open connections, each with the generation of the primary it reaches (always 0 with `url`).
    pool: Mutex<Vec<(u64, redis::Connection)>>,
    /// How many replicas the server said it has (`ROLE`, at each look while `replica_wait` is on or with
    /// sentinels); -1: not known (it did not say, or `ROLE` is not allowed): writes then wait anyway.
    replicas: AtomicI64,
    healthy: AtomicBool,
    /// The store lost its data (its epoch is gone): nothing it says about balances can be trusted.
    lost: AtomicBool,
    /// Shutdown: the shipper thread stops (the last records are shipped by `shipper::catch_up`).
    stopping: AtomicBool,
    /// The last failure, for `/readyz` and the log.
    last_error: Mutex<Option<String>>,
    scripts: Scripts,
    /// The instance this process is.
    instance: String,
    /// Reservations this instance holds in the store (request id → key name), renewed until settled.
    leases: Mutex<std::collections::HashMap<String, accounts::Held>>,
    /// Busy keys' slices of credit and slots, admitted from here (`allot/`).
    allots: allot::Allotments,
    /// Held by a shipping call and by a lease renewal: one runs at a time (`renew_leases` says why).
    shipping: Mutex<()>,
    /// Records of drawn requests in a shipping call whose answer did not come (`ship.rs`).
    unsure: Mutex<Vec<ship::Unsure>>,
    /// Settlements not yet sent (see `accounts.rs`).
    pending: settle::Queue,
    /// Drawn requests whose markers may go (key name, request id): sent with the settler's next call, and
    /// since when the oldest of them waits.
    forgets: Mutex<Vec<(String, String)>>,
    forget_since: Mutex<Option<std::time::Instant>>,
    /// Admissions waiting for a round trip (group commit, `batch.rs`).
    admissions: batch::CallBatch<accounts::AdmitCall, Result<Value, StoreError>>,
    /// Wakes the settler thread.
    settle_wake: (
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    ),
}

/// The versions of what instances keep a copy of, and the store's epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Versions {
    /// The version of the `keys` map (the key records).
    pub keys: u64,
    /// The version of the `overrides` map (the console's changes).
    pub overrides: u64,
    /// None: the store has no epoch (new, or it lost its data).
    pub epoch: Option<String>,
}

impl Store {
    /// A handle on the store; nothing is sent until the first call. Its addresses (the URL's, or the
    /// sentinels') are registered with `addresses`, so clients never see them.
    pub fn new(settings: &StoreSettings, instance: &str) -> Result<Store, SetupError> {
        for a in settings.addresses() {
            crate::addresses::register(&a);
        }
        let target = if settings.sentinel.is_some() {
            Target::Sentinels(sentinel::Follower::new(settings)?)
        } else {
            let refused = |error| SetupError::Address {
                setting: "store.url",
                error,
            };
            let info = redis::ConnectionAddr::Tcp(settings.host.clone(), settings.port)
                .into_connection_info()
                .map_err(refused)?
                .set_redis_settings(sentinel::node_settings(settings))
                .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
            Target::Url(redis::Client::open(info).map_err(refused)?)
        };
        Ok(Store {
            settings: settings.clone(),
            target,
            pool: Mutex::new(Vec::new()),
            replicas: AtomicI64::new(-1),
            healthy: AtomicBool::new(true),
            lost: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            last_error: Mutex::new(None),
            scripts: Scripts::new(),
            instance: instance.to_string(),
            leases: Mutex::new(std::collections::HashMap::new()),
            allots: allot::Allotments::default(),
            shipping: Mutex::new(()),
            unsure: Mutex::new(Vec::new()),
            pending: Arc::new(Mutex::new(Vec::new())),
            forgets: Mutex::new(Vec::new()),
            forget_since: Mutex::new(None),
            admissions: batch::CallBatch::new(),
            settle_wake: crossbeam_channel::bounded(1),
        })
    }

    /// The `[store]` settings this handle was made from.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// The name of the instance this process is.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Where the store is, for messages (never with a password; `addresses::hide` takes the addresses out of
    /// what clients see).
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Url(_) => format!("Redis at {}", self.settings.url),
            Target::Sentinels(f) => format!(
                "Redis primary {:?} of the sentinels at {} ({})",
                f.master_name(),
                f.sentinels().join(", "),
                f.address().map_or_else(
                    || "no primary known now".to_string(),
                    |a| format!("now at {a}")
                )
            ),
        }
    }

    /// How many replicas the server said it has at the last look (None: not known).
    pub fn replicas(&self) -> Option<u64> {
        u64::try_from(self.replicas.load(Ordering::Relaxed)).ok()
    }

    /// A key name under the prefix.
    pub fn k(&self, name: &str) -> String {
        format!("{}{name}", self.settings.prefix)
    }

    /// Whether the last call (or the store thread's last look) succeeded.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Whether the store lost its data (until `tollgate store rebuild`).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Marks the store as having lost its data, or (`false`) as holding it again.
    pub fn set_lost(&self, lost: bool) {
        self.lost.store(lost, Ordering::Relaxed);
    }

    /// Tells the shipper thread to stop.
    pub fn stop_shipping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Whether [`Store::stop_shipping`] was called: the threads that work with the store (shipper, settler,
    /// lease renewal) end at their next look.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// The last failure's text.
    pub fn last_error(&self) -> Option<String> {
        crate::util::lock(&self.last_error).clone()
    }

    fn mark_down(&self, message: &str) {
        let was = self.healthy.swap(false, Ordering::Relaxed);
        let mut last = crate::util::lock(&self.last_error);
        if was || last.as_deref() != Some(message) {
            log::error!(
                "store: {} does not answer ({message}); {}",
                self.describe(),
                match self.settings.on_unavailable {
                    crate::config::store::OnUnavailable::Closed =>
                        "model requests are refused with 503 until it does",
                    crate::config::store::OnUnavailable::Local =>
                        "requests are admitted on this instance's own limits until it does",
                }
            );
        }
        *last = Some(message.to_string());
    }

    /// Marks the store up after a successful look.
    fn mark_up(&self) {
        if !self.healthy.swap(true, Ordering::Relaxed) {
            log::info!("store: {} answers again", self.describe());
        }
    }

    /// A connection to the server (pooled, or opened within the deadline), with the generation of the
    /// primary it reaches.
    fn connection(&self) -> Result<(u64, redis::Connection), redis::RedisError> {
        let (generation, client) = match &self.target {
            Target::Url(client) => (0, client.clone()),
            Target::Sentinels(f) => {
                let p = f.primary().map_err(|e| {
                    redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        e,
                    ))
                })?;
                (p.generation, p.client)
            }
        };
        {
            let mut pool = crate::util::lock(&self.pool);
            while let Some((g, c)) = pool.pop() {
                if g == generation {
                    return Ok((g, c));
                }
            }
        }
        let t = self.settings.timeout;
        let c = client.get_connection_with_timeout(t)?;
        c.set_read_timeout(Some(t))?;
        c.set_write_timeout(Some(t))?;
        Ok((generation, c))
    }

    fn put_back(&self, generation: u64, con: redis::Connection) {
        if con.is_open() {
            let mut pool = crate::util::lock(&self.pool);
            if pool.len() < POOL_MAX {
                pool.push((generation, con));
            }
        }
    }

    /// Runs `f` on a pooled connection. A failure to reach the store drops the connection and marks the store
    /// down; an error the store answered (a script's) leaves both alone.
    pub fn with<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let (generation, mut con) = match self.connection() {
            Ok(c) => c,
            Err(e) => return Err(self.failed(&e)),
        };
        match f(&mut con) {
            Ok(v) => {
                self.put_back(generation, con);
                Ok(v)
            }
            Err(e) => {
                let err = self.failed(&e);
                if !err.unavailable {
                    self.put_back(generation, con);
                }
                Err(err)
            }
        }
    }

    fn failed(&self, e: &redis::RedisError) -> StoreError {
        // With sentinels, a server that says it is a replica now (or lost its primary) is no primary.
        let demoted = matches!(self.target, Target::Sentinels(_))
            && matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
                )
            );
        let unavailable = e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
            || demoted;
        let message = crate::secrets::scrubbed(&e.to_string());
        if unavailable {
            self.lost_primary(&message);
        }
        StoreError {
            unavailable,
            message,
        }
    }

    /// The server did not answer (or is no primary): every open connection goes, the store is down until a
    /// look succeeds, and with sentinels the next call asks them again.
    fn lost_primary(&self, message: &str) {
        // Connections opened before the failure are suspect (a restarted Redis closed them all).
        crate::util::lock(&self.pool).clear();
        if let Target::Sentinels(f) = &self.target {
            f.forget();
        }
        self.mark_down(message);
    }

    /// Runs a script, loading it again when the server forgot it (a restart).
    fn run<T: FromRedisValue>(
        &self,
        s: impl Fn(&Scripts) -> &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        self.run_confirmed(s, keys, args, None)
    }

    /// Runs a script like `run`; with `confirm` (what it writes, for the log), its writes then wait for a
    /// replica (`confirm`).
    fn run_confirmed<T: FromRedisValue>(
        &self,
        s: impl Fn(&Scripts) -> &redis::Script,
        keys: &[String],
        args: &[String],
        confirm: Option<&str>,
    ) -> Result<T, StoreError> {
        let script = s(&self.scripts);
        self.with(|con| {
            let mut inv = script.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            for a in args {
                inv.arg(a);
            }
            let v = inv.invoke(con)?;
            if let Some(what) = confirm {
                self.confirm(con, what)?;
            }
            Ok(v)
        })
    }

    /// One look at the store: the versions and the epoch (the store thread calls this every 250 ms). Marks
    /// the store up when it answers. With sentinels or `replica_wait`, it also asks the server's `ROLE`: how
    /// many replicas it has, and (with sentinels) whether it is the primary still; and the sentinels are asked
    /// again once a second.
    pub fn versions(&self) -> Result<Versions, StoreError> {
        let names = [self.k("keys:ver"), self.k("overrides:ver"), self.k("epoch")];
        let role = matches!(self.target, Target::Sentinels(_))
            || self.settings.replica_wait != ReplicaWait::Off;
        let (got, role): (Vec<Option<String>>, Option<Value>) = self.with(|con| {
            let got = redis::cmd("MGET").arg(&names).query(con)?;
            // ROLE may not be allowed (an ACL without @admin): then the replicas are not known.
            let role = if role {
                redis::cmd("ROLE").query::<Value>(con).ok()
            } else {
                None
            };
            Ok((got, role))
        })?;
        if let Some(role) = role {
            self.note_role(role)?;
        }
        if let Target::Sentinels(f) = &self.target {
            f.refresh();
        }
        self.mark_up();
        let n = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
        Ok(Versions {
            keys: n(&got[0]),
            overrides: n(&got[1]),
            epoch: got.get(2).cloned().flatten(),
        })
    }

    /// What `ROLE` said: the replicas of a primary; with sentinels, a server that is no primary any more is
    /// left (an error that counts as not answering: the sentinels are asked again).
    fn note_role(&self, role: Value) -> Result<(), StoreError> {
        let Value::Array(parts) = role else {
            return Ok(());
        };
        let kind = parts
            .first()
            .and_then(|v| String::from_redis_value(v.clone()).ok())
            .unwrap_or_default();
        if kind == "master" {
            let n = match parts.get(2) {
                Some(Value::Array(r)) => r.len() as i64,
                _ => -1,
            };
            self.replicas.store(n, Ordering::Relaxed);
            return Ok(());
        }
        if matches!(self.target, Target::Sentinels(_)) {
            let message = format!("the server named as the primary says it is a {kind}");
            self.lost_primary(&message);
            return Err(StoreError {
                unavailable: true,
                message,
            });
        }
        Ok(())
    }

    /// After a write that must survive a failover (on `con`, the connection that made it): waits for a
    /// replica to acknowledge it (`WAIT 1`), when `replica_wait` asks for it and the server has replicas.
    /// Unconfirmed (no replica, or none within half the store's deadline), it is logged, not undone: the
    /// write is on the primary, and only a failover in the next moment could lose it.
    fn confirm(&self, con: &mut redis::Connection, what: &str) -> redis::RedisResult<()> {
        if self.settings.replica_wait == ReplicaWait::Off {
            return Ok(());
        }
        if self.replicas.load(Ordering::Relaxed) == 0 {
            log::warn!(
                "store: {what} is not confirmed by a replica: the primary has none connected; a failover now \
                 would lose it"
            );
            return Ok(());
        }
        let ms = self.wait_ms();
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(ms).query(con)?;
        if acked < 1 {
            log::warn!(
                "store: {what} is not confirmed by a replica within {ms} ms; a failover now would lose it"
            );
        }
        Ok(())
    }

    /// How long a `WAIT` waits: half the store's deadline, so it ends before the call's own deadline.
    fn wait_ms(&self) -> u64 {
        (self.settings.timeout.as_millis() as u64 / 2).max(1)
    }

    /// With `replica_wait = "all"` and replicas: a `WAIT 1` at the end of a pipeline of request-path writes
    /// (its answer ignored: an admission or settlement that is not confirmed stands, its record restores it).
    fn wait_in(&self, pipe: &mut redis::Pipeline) {
        if self.settings.replica_wait == ReplicaWait::All
            && self.replicas.load(Ordering::Relaxed) != 0
        {
            pipe.cmd("WAIT").arg(1).arg(self.wait_ms()).ignore();
        }
    }
}
