//! The running gateway: worker pool, key reloading, signal handling and graceful shutdown, on top of the
//! protocol-agnostic HTTP layer in `crate::http`.

mod accounting;
mod admit;
mod attempt;
mod builtin;
mod cached;
mod call;
pub mod cluster;
mod complete;
mod count_tokens;
mod events;
mod failover;
pub mod gateway;
mod generate;
mod hosted;
pub mod metrics;
mod outcome;
mod passthrough;
mod prepared;
mod report;
pub mod respond;
mod router;
mod screen;
mod stats;
pub mod trace;
mod translate;
mod watchdog;

use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::gateway::Gateway;
use crate::access::KeyStore;
use crate::config::Config;
use crate::http::{self, Exchange, HttpConfig, Limits, ServerState};
use crate::protocol::{ApiError, Protocol};

/// Renders errors the HTTP layer answers by itself, in the shape of the protocol at that path, with the
/// headers every other answer carries (`x-request-id`, `x-should-retry` where a retry cannot help,
/// `x-tollgate-overhead-ms`).
fn render_http_error(
    path: Option<&str>,
    status: u16,
    message: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let began = Instant::now();
    let protocol = Protocol::for_errors_at(path);
    let request_id = crate::util::new_id("req_");
    let mut err = ApiError::new(status, ApiError::kind_for_status(status), message);
    if status == 503 {
        err = err.with_retry_after(1);
    }
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("x-request-id".to_string(), request_id.clone()),
    ];
    if let Some(name) = protocol.id_header() {
        headers.push((name.to_string(), request_id.clone()));
    }
    if let Some(v) = respond::should_retry(status) {
        headers.push(("x-should-retry".to_string(), v.to_string()));
    }
    let body = protocol.error_body(&err, &request_id);
    headers.push((
        "x-tollgate-overhead-ms".to_string(),
        format!("{:.3}", began.elapsed().as_secs_f64() * 1000.0),
    ));
    (headers, body)
}

/// A shared store joined at start, with what it held then.
pub struct Shared {
    pub store: Arc<crate::store::Store>,
    pub joined: cluster::Joined,
}

/// Starts the gateway on `listener` and blocks until a shutdown signal has been handled; returns the exit
/// code.
pub fn run(
    config: Config,
    keys: KeyStore,
    ledger: crate::ledger::Ledger,
    replay: crate::ledger::Replay,
    listener: TcpListener,
    shared: Option<Shared>,
) -> i32 {
    let versions = shared
        .as_ref()
        .map(|s| (s.joined.keys_version, s.joined.overrides_version));
    let gw = match build(config, keys, ledger, replay, shared) {
        Ok(built) => built,
        Err(e) => {
            log::error!("{e}");
            return 1;
        }
    };
    // A key made on another instance is looked for in the store from the first request on.
    if let Some(store) = &gw.store {
        cluster::look_on_miss(&gw.keys, store);
    }
    let local = listener.local_addr().ok();
    let signals = match start(&gw, listener) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return 1;
        }
    };
    if let Some((k, o)) = versions {
        if let Err(e) = cluster::start(&gw, k, o) {
            log::error!("{e}");
            return 1;
        }
    }
    drain(&gw, signals, local)
}

/// Builds the shared state: the configuration with the console's overrides, keys, accounts, the ledger.
fn build(
    config: Config,
    keys: KeyStore,
    ledger: crate::ledger::Ledger,
    replay: crate::ledger::Replay,
    shared: Option<Shared>,
) -> Result<Arc<Gateway>, String> {
    let admin_token = config
        .admin_token()
        .map(|t| crate::access::token_digest(&t));
    if admin_token.is_none() {
        log::info!("admin API closed: {} is not set", config.admin_token_env);
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
            crate::config::Overrides::load(&config.data_dir).map_err(|e| e.to_string())?,
            crate::access::accounts::Accounts::new(replay.spent, replay.periods, replay.last_used),
            None,
        ),
    };
    let live = config
        .with_overrides(&overrides)
        .map_err(|e| format!("the console's overrides do not apply: {e}"))?;
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
        stats: stats::Stats::default(),
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

/// Starts the watchdog, the workers, the key reloader and the accept loop, and installs the signal
/// handlers. A thread that cannot be started stops startup.
fn start(
    gw: &Arc<Gateway>,
    listener: TcpListener,
) -> Result<signal_hook::iterator::Signals, String> {
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
        limits: Limits {
            max_body_bytes: config.max_body_bytes,
            ..Limits::default()
        },
        read_timeout: config.read_timeout,
        write_timeout: config.write_timeout,
        max_connections: config.max_connections,
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
        Arc::new(move |ex: &mut Exchange| work(&handler, ex)),
        Arc::new(render_http_error),
    )?;
    signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
        .map_err(|e| format!("could not install signal handlers: {e}"))
}

/// Looks for local model servers now and every `interval` until shutdown (its own address skipped); what it
/// finds is served at once. The first look runs as the gateway starts and never delays it.
fn discover(gw: &Gateway, probe: &[String], interval: Duration, listen: &str) {
    use crate::upstream::discovery::{self, Server};
    let agent = crate::upstream::http::agent(4);
    let own =
        |url: &str| url.contains(&format!("//{listen}/")) || url.ends_with(&format!("//{listen}"));
    while !gw.state.shutting_down.load(Ordering::SeqCst) {
        let known = gw.discovered_servers();
        let servers: Vec<Server> = probe
            .iter()
            .filter(|u| !own(u))
            .map(|u| match discovery::probe(&agent, u) {
                Ok(models) => Server {
                    base_url: u.clone(),
                    models,
                    up: true,
                    error: None,
                },
                // A server that stops answering keeps the models it had.
                Err(e) => Server {
                    base_url: u.clone(),
                    models: known
                        .iter()
                        .find(|s| &s.base_url == u)
                        .map(|s| s.models.clone())
                        .unwrap_or_default(),
                    up: false,
                    error: Some(e),
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

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("could not start the {name} thread: {e}"))
}

/// Waits for the first signal, then drains: no new connections, requests in flight get the grace period,
/// those still running are cut (each keeps its usage record), and the ledger is closed. Returns the exit
/// code.
fn drain(
    gw: &Gateway,
    mut signals: signal_hook::iterator::Signals,
    local: Option<std::net::SocketAddr>,
) -> i32 {
    let config = &gw.base;
    let state = &gw.state;
    let first = signals.forever().next();
    log::info!(
        "received {}; no longer accepting, draining {} in-flight requests (up to {} s)",
        signal_name(first),
        state.in_flight.load(Ordering::SeqCst),
        config.shutdown_grace.as_secs()
    );
    state.shutting_down.store(true, Ordering::SeqCst);
    // Wake the accept loop so it sees the flag.
    if let Some(addr) = local {
        let _ = std::net::TcpStream::connect_timeout(&wake_addr(addr), Duration::from_millis(200));
    }
    // A second signal stops at once.
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            log::warn!("second signal: exiting without waiting");
            std::process::exit(1);
        }
    });
    wait_until_idle(state, config.shutdown_grace);
    let left = state.in_flight.load(Ordering::SeqCst);
    if left > 0 {
        // Nothing is lost at the deadline: every request still running is cut (its upstream call ends,
        // the client gets the protocol's in-stream error or 503) and leaves its usage record.
        log::warn!(
            "shutdown grace of {} s has passed with {left} requests still in flight: cutting them (each ends \
             with an error and keeps its usage record)",
            config.shutdown_grace.as_secs()
        );
        gw.watchdog.cut_all_for_shutdown();
        wait_until_idle(state, CUT_WAIT);
        let stuck = state.in_flight.load(Ordering::SeqCst);
        if stuck > 0 {
            log::error!(
                "{stuck} requests did not end within {} s of being cut; exiting without them",
                CUT_WAIT.as_secs()
            );
        }
    }
    let unwritten = gw.ledger.close(Duration::from_secs(5));
    if let Some(store) = &gw.store {
        cluster::leave(store, &gw.ledger, Duration::from_secs(3));
    }
    if unwritten > 0 {
        log::error!(
            "{unwritten} usage records could not be written to the ledger; they are in the log above as \
             `unwritten usage record` lines"
        );
        return 1;
    }
    log::info!("all requests finished and recorded; bye");
    0
}

/// Waits until no request is in flight, or `limit` has passed.
fn wait_until_idle(state: &ServerState, limit: Duration) {
    let deadline = Instant::now() + limit;
    while state.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long requests cut at the shutdown deadline get to end (their upstream waits end within a slice).
const CUT_WAIT: Duration = Duration::from_secs(10);

fn signal_name(sig: Option<i32>) -> &'static str {
    match sig {
        Some(signal_hook::consts::SIGTERM) => "SIGTERM",
        Some(signal_hook::consts::SIGINT) => "SIGINT",
        _ => "a signal",
    }
}

/// The address to connect to in order to wake an accept loop bound to `addr` (0.0.0.0 → loopback).
fn wake_addr(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    let mut a = addr;
    if a.ip().is_unspecified() {
        a.set_ip(match a {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    a
}

/// Runs one exchange on a worker; a panic is caught, answered with 500 if nothing was sent yet, and logged.
fn work(gw: &Gateway, ex: &mut Exchange) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| router::route(gw, ex)));
    if result.is_err() {
        log::error!(
            "a worker panicked while handling {} {}; the worker continues",
            ex.request.method,
            ex.request.path
        );
        let w = ex.response();
        if !w.is_started() {
            let (headers, body) =
                render_http_error(Some(&ex.request.path), 500, "internal error in the gateway");
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let w = ex.response();
            w.close_after();
            let _ = w.send(500, &headers, &body);
        }
    }
}
