//! Starting and stopping the gateway. [`run`] takes a bound listener and a configuration, goes through the
//! start-up steps (the secrets to scrub, the data directory, the store, the keys, the ledger, the threads)
//! and returns the [`Running`] server, or the [`StartError`] that stopped it. Whoever owns the process asks
//! for the shutdown through the [`Shutdown`] it passed in: the binary on SIGTERM/SIGINT (`cli/serve.rs`), a
//! test when it is done. [`Running::join`] waits for that request and drains: no new connections, requests
//! in flight get the grace period, those still running are cut (each keeps its usage record), the ledger
//! is closed; then the server's threads end. The request and the drain are in `shutdown.rs`.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shutdown::{drain, Shutdown};
use super::thread::{spawn, ThreadError};
use super::{accounting, cluster, screen, Shared};
use crate::access::KeyStore;
use crate::config::Config;
use crate::gateway::Gateway;
use crate::gateway::{metrics, stats, watchdog};
use crate::http::{self, Exchange, HttpConfig, ParseLimits, ServerState};

/// Why the gateway did not start. Its text is what the operator reads in the log (one line per problem).
#[derive(Debug)]
pub enum StartError {
    /// `data_dir` cannot be created.
    DataDir(String),
    /// Files in `data_dir` that are not this user's regular files, one problem each.
    DataFiles(Vec<String>),
    /// The shared store cannot be joined.
    Store(cluster::ClusterError),
    /// The keys file cannot be read.
    Keys(String),
    /// The usage ledger cannot be opened.
    Ledger(String),
    /// The console's overrides cannot be read or do not apply.
    Overrides(String),
    /// A thread of the gateway could not be started.
    Thread(ThreadError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::DataFiles(problems) => {
                let lines: Vec<String> =
                    problems.iter().map(|p| format!("data_dir: {p}")).collect();
                write!(f, "{}", lines.join("\n"))
            }
            StartError::DataDir(m)
            | StartError::Keys(m)
            | StartError::Ledger(m)
            | StartError::Overrides(m) => write!(f, "{m}"),
            StartError::Store(e) => write!(f, "{e}"),
            StartError::Thread(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A started gateway.
pub struct Running {
    gw: Arc<Gateway>,
    http: http::Server,
    shutdown: Shutdown,
    addr: Option<SocketAddr>,
}

impl Running {
    /// Where it listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The request that stops it.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Waits until a stop is asked for, then drains (see the module comment) and ends the server's threads.
    /// Returns the exit code: 0, or 1 when usage records could not be written to the ledger.
    pub fn join(self) -> i32 {
        let stop = self.shutdown.wait();
        let code = drain(&self.gw, &self.http, &stop);
        // Threads that still serve a request that would not end are left to the process's exit.
        if self.gw.state.in_flight.load(Ordering::SeqCst) == 0 {
            self.http.stop();
        }
        self.gw.watchdog.stop();
        code
    }
}

/// Starts the gateway on `listener`, stopped by `shutdown`: every start-up step in order, each of which
/// can refuse the start.
pub fn run(
    listener: TcpListener,
    config: Config,
    shutdown: Shutdown,
) -> Result<Running, StartError> {
    register_secrets(&config);
    data_dir_ready(&config)?;
    log_config_problems(&config);
    let shared = cluster::join_at_start(&config).map_err(StartError::Store)?;
    let keys = open_keys(&config, shared.as_ref())?;
    let (ledger, replay) = open_ledger(&config)?;
    let addr = listener.local_addr().ok();
    log::info!(
        "tollgate {} listening on http://{} ({}, {}, {} workers, data in {})",
        env!("CARGO_PKG_VERSION"),
        addr.map_or_else(|| config.listen.clone(), |a| a.to_string()),
        crate::util::plural(config.models.len(), "model"),
        crate::util::plural(keys.len(), "key"),
        config.workers,
        config.data_dir.display()
    );
    let versions = shared
        .as_ref()
        .map(|s| (s.joined.keys_version, s.joined.overrides_version));
    let gw = build(config, keys, ledger, replay, shared)?;
    // A key made on another instance is looked for in the store from the first request on.
    if let Some(store) = &gw.store {
        cluster::look_on_miss(&gw.keys, store);
    }
    let http = start(&gw, listener).map_err(StartError::Thread)?;
    let running = Running {
        gw,
        http,
        shutdown,
        addr,
    };
    if let Some((k, o)) = versions {
        if let Err(e) = cluster::start(&running.gw, k, o) {
            running.shutdown.request_now("a start that failed");
            running.join();
            return Err(StartError::Thread(e));
        }
    }
    Ok(running)
}

/// Upstream credentials (and the admin token, the store's password) are scrubbed from every error text
/// and log line, and the real secrets among them from answers (placeholder keys are no secrets).
fn register_secrets(config: &Config) {
    let admin_token = config.admin_token();
    crate::secrets::register(config.upstreams.iter().filter_map(|u| u.api_key.as_deref()));
    crate::secrets::register_own(
        admin_token
            .as_deref()
            .into_iter()
            .chain(config.store.as_ref().and_then(|s| s.password.as_deref())),
    );
}

/// `data_dir` exists (created private when missing), and every file tollgate keeps in it that is there is
/// a regular file this user owns (not a link, not another user's). Every later open checks again, on its
/// descriptor.
pub fn data_dir_ready(config: &Config) -> Result<(), StartError> {
    let dir = &config.data_dir;
    crate::util::create_private_dir_all(dir).map_err(|e| {
        StartError::DataDir(format!("cannot create data_dir {}: {e}", dir.display()))
    })?;
    let mut names = vec![
        crate::ledger::LEDGER_FILE,
        crate::ledger::CHECKPOINT_FILE,
        crate::audit::AUDIT_FILE,
        crate::access::keys::KEYS_FILE,
        crate::access::key_ops::KEYS_LOCK,
        crate::access::admin_token::FILE,
        crate::config::OVERRIDES_FILE,
    ];
    names.extend(cluster::FILES);
    let problems = crate::util::check_data_files(dir, &names);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(StartError::DataFiles(problems))
    }
}

/// What validation found that does not stop the gateway: an upstream without its credential (ERROR: its
/// requests get 502), base URLs and groups that will not work as meant, an exposed data directory.
fn log_config_problems(config: &Config) {
    for u in &config.upstreams {
        if let Some(var) = &u.missing_key {
            log::error!(
                "upstream `{}`: the environment variable {var} (its api_key_env) is not set; requests to it get \
                 502 until it is set and tollgate restarted",
                u.name
            );
        }
    }
    for w in &config.warnings {
        log::warn!("config: {w}");
    }
    for l in crate::config::list_price_lines(&config.models) {
        log::info!("{l}");
    }
    if let Some(w) = crate::util::data_dir_exposure(&config.data_dir) {
        log::warn!("{w}");
    }
}

/// The group a first key (and the advice to add one) names.
pub fn first_group(config: &Config) -> String {
    config
        .groups
        .first()
        .map(|g| g.name.clone())
        .unwrap_or_else(|| "default".into())
}

/// The keys in force at start: the store's (or its local copy), or the keys file's. Warns when there are
/// none.
fn open_keys(config: &Config, shared: Option<&Shared>) -> Result<KeyStore, StartError> {
    let keys_path = config.data_dir.join(crate::access::keys::KEYS_FILE);
    let keys = match shared {
        Some(s) => KeyStore::from_records(&config.data_dir, &s.joined.keys),
        None => KeyStore::open(&config.data_dir)
            .map_err(|e| StartError::Keys(format!("cannot read {}: {e}", keys_path.display())))?,
    };
    if keys.records().is_empty() {
        let keys_place = match shared {
            Some(s) => s.store.describe(),
            None => keys_path.display().to_string(),
        };
        let config_flag = config
            .path
            .as_ref()
            .map(|p| format!(" --config {}", p.display()))
            .unwrap_or_default();
        log::warn!(
            "no API keys in {keys_place}: every request is refused (401) until you add one with \
             `tollgate keys add{config_flag} --name NAME --group {}` (it prints the key; a running server \
             accepts it at once)",
            first_group(config)
        );
    }
    Ok(keys)
}

/// The usage ledger, replayed.
fn open_ledger(
    config: &Config,
) -> Result<(crate::ledger::Ledger, crate::ledger::Replay), StartError> {
    let (ledger, replay) = crate::ledger::Ledger::open_with(
        &config.data_dir,
        config.ledger_sync,
        config.ledger_strict,
        &config.ledger_files,
    )
    .map_err(|e| {
        StartError::Ledger(format!(
            "cannot open the usage ledger in {}: {e}",
            config.data_dir.display()
        ))
    })?;
    let from = match &replay.checkpoint {
        Some((written, n)) => format!(
            " after the checkpoint of {written} ({} in all",
            crate::util::plural(*n as usize + replay.records as usize, "record")
        ),
        None => format!(" ({}", crate::util::plural(replay.files as usize, "file")),
    };
    log::info!(
        "usage ledger: {} replayed{from}, {} with spend{}{})",
        crate::util::plural(replay.records as usize, "record"),
        crate::util::plural(replay.spent.len(), "key"),
        if replay.bad_lines > 0 {
            format!(", {} unreadable lines skipped", replay.bad_lines)
        } else {
            String::new()
        },
        if replay.torn_bytes > 0 {
            format!(", a torn last line of {} bytes cut off", replay.torn_bytes)
        } else {
            String::new()
        },
    );
    Ok((ledger, replay))
}

/// Builds the shared state: the configuration with the console's overrides, keys, accounts, the ledger.
fn build(
    config: Config,
    keys: KeyStore,
    ledger: crate::ledger::Ledger,
    replay: crate::ledger::Replay,
    shared: Option<Shared>,
) -> Result<Arc<Gateway>, StartError> {
    let admin_token = crate::access::admin_token::AdminToken::for_config(&config);
    match crate::access::admin_token::source(&config) {
        crate::access::admin_token::TokenSource::Closed(var) => {
            log::info!("admin API closed: {var} (admin_token_env) is not set")
        }
        crate::access::admin_token::TokenSource::File(path) if admin_token.digest().is_none() => {
            log::info!(
                "admin API closed until an admin token is made: `tollgate admin-token rotate` makes one ({} holds \
                 its SHA-256)",
                path.display()
            )
        }
        _ => {}
    }
    // Where the upstreams and the store are is never told to clients (`addresses::hide`).
    for u in &config.upstreams {
        crate::addresses::register(&u.base_url);
    }
    if let Some(s) = &shared {
        crate::addresses::register(&s.store.settings().url);
    }
    let (overrides, accounts, store) = match shared {
        Some(s) => (
            s.joined.overrides,
            crate::access::accounts::Accounts::shared(s.store.clone()),
            Some(s.store),
        ),
        None => (
            crate::config::Overrides::load(&config.data_dir)
                .map_err(|e| StartError::Overrides(e.to_string()))?,
            crate::access::accounts::Accounts::new(replay.spent, replay.periods, replay.last_used),
            None,
        ),
    };
    let live = config
        .with_overrides(&overrides)
        .map_err(|e| StartError::Overrides(format!("the console's overrides do not apply: {e}")))?;
    ledger.set_backlog_limit(config.ledger_backlog_records);
    let gw = Arc::new(Gateway {
        metrics: metrics::Metrics::default(),
        breakers: Default::default(),
        routing: Default::default(),
        state: Arc::new(ServerState::default()),
        agent: crate::upstream::http::agent(config.workers),
        live: std::sync::RwLock::new(Arc::new(live)),
        overrides: std::sync::Mutex::new(overrides),
        discovered: std::sync::Mutex::new(Vec::new()),
        keys: Arc::new(keys),
        started_unix: crate::util::unix_now(),
        watchdog: Arc::new(watchdog::Watchdog::new(config.keepalive)),
        ledger,
        accounts: Arc::new(accounts),
        record_instance: (store.is_some() || config.instance_set).then(|| config.instance.clone()),
        cache: crate::cache::AnswerCache::new(config.cache_max_bytes, store.clone()),
        store,
        admin_token,
        admin_guard: Default::default(),
        stats: stats::UsageStats::default(),
        base: config,
    });
    // Availability survives a restart: the last day's records feed the recent history.
    let day_ago = (crate::util::unix_millis() as i64) - 86_400_000;
    let recent = crate::ledger::Filter {
        since: Some(day_ago),
        limit: 5_000,
        ..Default::default()
    };
    if let Ok(mut records) = gw.ledger.query(&recent) {
        records.reverse();
        gw.stats.replay(&records);
    }
    Ok(gw)
}

/// Starts the watchdog, the key reloader, discovery, the workers and the accept loop. A thread that cannot
/// be started stops startup.
fn start(gw: &Arc<Gateway>, listener: TcpListener) -> Result<http::Server, ThreadError> {
    let config = &gw.base;
    let watchdog = gw.watchdog.clone();
    spawn("tollgate-watchdog", move || watchdog.run())?;
    // Keys reload: notice edits by `tollgate keys` (or by hand) within about a second. With a store, the
    // store thread (`cluster.rs`) follows the store's keys instead.
    if gw.store.is_none() {
        let (keys, state) = (gw.keys.clone(), gw.state.clone());
        spawn("tollgate-keys", move || {
            while !state.shutting_down.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
                keys.reload_if_changed();
            }
        })?;
    }
    if let Some(d) = &config.discovery {
        let probe = crate::upstream::discovery::probe_list(&d.probe);
        for url in &probe {
            crate::addresses::register(url);
        }
        if !probe.is_empty() {
            let listen = listener
                .local_addr()
                .map_or_else(|_| config.listen.clone(), |a| a.to_string());
            let (gw, interval) = (gw.clone(), d.interval);
            spawn("tollgate-discovery", move || {
                discover(&gw, &probe, interval, &listen)
            })?;
        }
    }
    let busy = gw.clone();
    let http_config = Arc::new(HttpConfig {
        limits: ParseLimits {
            max_body_bytes: config.max_body_bytes,
            ..ParseLimits::default()
        },
        read_timeout: config.read_timeout,
        write_timeout: config.write_timeout,
        max_connections: config.max_connections,
        per_client: config.per_client.clone(),
        max_buffered_body_bytes: config.max_buffered_body_bytes,
        workers: config.workers,
        queue_size: config.queue_size,
        screen: Some(screen::screen(gw.clone())),
        overloaded: Some(Arc::new(move |ex: &mut Exchange| {
            accounting::refuse_overloaded(&busy, ex)
        })),
    });
    let handler = gw.clone();
    http::start(
        listener,
        http_config,
        gw.state.clone(),
        Arc::new(move |ex: &mut Exchange| super::work(&handler, ex)),
        Arc::new(super::render_http_error),
    )
    .map_err(ThreadError::Http)
}

/// Looks for local model servers now and every `interval` until shutdown (its own address skipped); what it
/// finds is served at once. The first look runs as the gateway starts and never delays it.
fn discover(gw: &Gateway, probe: &[String], interval: Duration, listen: &str) {
    use crate::upstream::discovery::{self, LocalServer};
    let agent = crate::upstream::http::agent(4);
    let own =
        |url: &str| url.contains(&format!("//{listen}/")) || url.ends_with(&format!("//{listen}"));
    while !gw.state.shutting_down.load(Ordering::SeqCst) {
        let known = gw.discovered_servers();
        let servers: Vec<LocalServer> = probe
            .iter()
            .filter(|u| !own(u))
            .map(|u| match discovery::probe(&agent, u) {
                Ok(models) => LocalServer {
                    base_url: u.clone(),
                    models,
                    up: true,
                    error: None,
                },
                // A server that stops answering keeps the models it had.
                Err(e) => LocalServer {
                    base_url: u.clone(),
                    models: known
                        .iter()
                        .find(|s| &s.base_url == u)
                        .map(|s| s.models.clone())
                        .unwrap_or_default(),
                    up: false,
                    error: Some(e.to_string()),
                },
            })
            .collect();
        gw.discovered(servers);
        let until = Instant::now() + interval;
        while Instant::now() < until && !gw.state.shutting_down.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200).min(interval));
        }
    }
}
