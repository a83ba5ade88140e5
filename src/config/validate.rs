//! The config file's raw TOML shape and its validation into [`Config`]: every error names the field
//! (`models[2].upstream`) and says what was expected. Here: the raw structs, the order of the checks and the
//! top-level settings; the lists' entries in `validate/upstreams.rs`, `validate/models.rs` and
//! `validate/groups.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::Env;
use super::{err, Config, ConfigError};
use crate::money::Money;
use groups::{coverage_warnings, validate_groups};
use models::{check_names, expand_deployments, validate_models};
use upstreams::validate_upstreams;

mod groups;
mod models;
mod upstreams;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    listen: Option<String>,
    data_dir: Option<String>,
    admin_token_env: Option<String>,
    workers: Option<usize>,
    queue_size: Option<usize>,
    max_connections: Option<usize>,
    max_connections_per_client: Option<usize>,
    #[serde(default)]
    exempt_clients: Vec<String>,
    max_body_bytes: Option<u64>,
    max_buffered_body_bytes: Option<u64>,
    read_timeout_secs: Option<u64>,
    write_timeout_secs: Option<u64>,
    shutdown_grace_secs: Option<u64>,
    keepalive_secs: Option<u64>,
    client_left_grace_secs: Option<u64>,
    ledger_sync_ms: Option<u64>,
    ledger_strict: Option<bool>,
    ledger_backlog_records: Option<u64>,
    ledger_max_file_mb: Option<f64>,
    ledger_retention_days: Option<u64>,
    ledger_compress_after_days: Option<u64>,
    ledger_checkpoint_records: Option<u64>,
    ledger_checkpoint_secs: Option<u64>,
    min_free_disk_mb: Option<u64>,
    log_level: Option<String>,
    log_format: Option<String>,
    metrics_auth: Option<bool>,
    currency: Option<String>,
    cache_max_mb: Option<f64>,
    discovery: Option<RawDiscovery>,
    instance: Option<String>,
    store: Option<super::store::RawStore>,
    #[serde(default)]
    upstreams: Vec<RawUpstream>,
    #[serde(default)]
    models: Vec<RawModel>,
    #[serde(default)]
    groups: Vec<RawGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    name: String,
    kind: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    /// Several credentials: each makes a deployment of its own (`name#1`, `name#2`, ...).
    api_key_envs: Option<Vec<String>>,
    connect_timeout_secs: Option<u64>,
    first_byte_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    mock_delay_ms: Option<u64>,
    max_tokens_field: Option<String>,
    total_timeout_secs: Option<u64>,
    breaker_failures: Option<u32>,
    breaker_cooldown_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: String,
    upstream: OneOrMany,
    upstream_model: Option<String>,
    input_price: Option<Money>,
    cached_input_price: Option<Money>,
    cache_write_price: Option<Money>,
    cache_write_1h_price: Option<Money>,
    output_price: Option<Money>,
    /// `"none"`: no prices, not even the built-in list prices.
    prices: Option<String>,
    #[serde(default)]
    tiers: Vec<super::prices::RawTier>,
    max_output_tokens: Option<u64>,
    image_tokens: Option<u64>,
    structured_output: Option<String>,
    reasoning: Option<bool>,
    account_features: Option<bool>,
    allow_hosted_tools: Option<std::collections::BTreeMap<String, Money>>,
    allow_service_tiers: Option<std::collections::BTreeMap<String, Money>>,
    max_hosted_uses: Option<u64>,
    allow_inference_geo: Option<Money>,
    route: Option<String>,
    weights: Option<Vec<u32>>,
    #[serde(default)]
    aliases: Vec<String>,
    cache_ttl_secs: Option<u64>,
    cache_scope: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDiscovery {
    probe: Option<Vec<String>>,
    interval_secs: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    models: Vec<String>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    max_concurrent: Option<u64>,
    /// Credits per `budget_period` for each key of the group without a budget of its own.
    budget: Option<Money>,
    budget_period: Option<String>,
}

/// Problems found in a config: errors (it cannot be used) and warnings (it can, but something will not work
/// as meant). Validation goes on past an error, so one run reports all of them.
#[derive(Default)]
struct Problems {
    errors: Vec<ConfigError>,
    warnings: Vec<String>,
}

impl Problems {
    /// The value, or `default` with the error noted.
    fn take<T>(&mut self, r: Result<T, ConfigError>, default: T) -> T {
        r.unwrap_or_else(|e| {
            self.errors.push(e);
            default
        })
    }

    /// A count above 0 (`default` when unset).
    fn positive(&mut self, field: &str, v: Option<usize>, default: usize) -> usize {
        self.take(positive(field, v, default), default)
    }

    /// Seconds above 0 (`default` when unset).
    fn secs(&mut self, field: &str, v: Option<u64>, default: u64) -> Duration {
        self.take(secs(field, v, default), Duration::ZERO)
    }

    /// Milliseconds above 0 (`default` when unset).
    fn millis(&mut self, field: &str, v: Option<u64>, default: u64) -> Duration {
        self.take(millis(field, v, default), Duration::ZERO)
    }

    /// Bytes above 0 (`default` when unset).
    fn bytes(&mut self, field: &str, v: Option<u64>, default: u64) -> u64 {
        self.take(bytes(field, v, default), 0)
    }
}

/// A config that cannot be used: its errors (each naming its field), and its warnings.
pub(super) struct Invalid {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<String>,
}

/// The whole config: every problem is collected (in the order below, which is the order they are reported
/// in) before the first one stops it.
pub(super) fn validate(raw: RawConfig, env: &Env) -> Result<Config, Invalid> {
    let mut p = Problems::default();
    let ledger_files = ledger_files(&raw, &mut p);
    let listen = p.take(listen(raw.listen), String::new());
    let log_level = p.take(log_level(raw.log_level), String::new());
    let admin_token_env_named = raw.admin_token_env.is_some();
    let admin_token_env = p.take(admin_token_env(raw.admin_token_env), String::new());
    let declared: Vec<String> = raw.upstreams.iter().map(|u| u.name.clone()).collect();
    let (upstreams, deployments) = validate_upstreams(raw.upstreams, env, &mut p);
    let discovery = raw.discovery.map(|d| validate_discovery(d, &mut p));
    let (mut models, hosted) = validate_models(raw.models, &declared, discovery.is_some(), &mut p);
    for m in &mut models {
        expand_deployments(m, &deployments);
    }
    let groups = validate_groups(raw.groups, &mut p);
    let (instance, instance_set) = p.take(
        super::store::validate_instance(raw.instance),
        (String::new(), false),
    );
    let store = raw
        .store
        .and_then(|s| super::store::validate_store(s, env, &mut p.errors));
    check_names(&models, &mut p);
    coverage_warnings(&models, &groups, &mut p.warnings);
    let currency = p.take(currency(raw.currency), String::new());
    super::prices::warnings(&models, &upstreams, &currency, &mut p.warnings);
    let max_connections = p.positive("max_connections", raw.max_connections, 4096);
    let per_client = p.positive(
        "max_connections_per_client",
        raw.max_connections_per_client,
        (max_connections / 8).max(max_connections.min(32)),
    );
    let mut exempt_clients = Vec::new();
    for (i, r) in raw.exempt_clients.iter().enumerate() {
        if let Some(range) = p.take(
            crate::peer::Range::parse(r)
                .map(Some)
                .map_err(|m| err(format!("exempt_clients[{i}]"), m.0)),
            None,
        ) {
            exempt_clients.push(range);
        }
    }
    let config = Config {
        path: None,
        admin_token: env.var(&admin_token_env).filter(|t| !t.is_empty()),
        admin_token_env_named,
        listen,
        data_dir: PathBuf::from(raw.data_dir.unwrap_or_else(|| "./tollgate-data".into())),
        admin_token_env,
        workers: p.positive("workers", raw.workers, 256),
        queue_size: p.positive("queue_size", raw.queue_size, 1024),
        max_connections,
        per_client: crate::http::PerClient {
            max: per_client,
            exempt: exempt_clients,
        },
        max_body_bytes: p.bytes("max_body_bytes", raw.max_body_bytes, 32 << 20),
        max_buffered_body_bytes: p.bytes(
            "max_buffered_body_bytes",
            raw.max_buffered_body_bytes,
            256 << 20,
        ),
        read_timeout: p.secs("read_timeout_secs", raw.read_timeout_secs, 60),
        write_timeout: p.secs("write_timeout_secs", raw.write_timeout_secs, 60),
        shutdown_grace: p.secs("shutdown_grace_secs", raw.shutdown_grace_secs, 30),
        keepalive: p.secs("keepalive_secs", raw.keepalive_secs, 15),
        client_left_grace: Duration::from_secs(raw.client_left_grace_secs.unwrap_or(30)),
        ledger_sync: p.millis("ledger_sync_ms", raw.ledger_sync_ms, 200),
        ledger_strict: raw.ledger_strict.unwrap_or(false),
        ledger_backlog_records: p.take(backlog(raw.ledger_backlog_records), 0),
        ledger_files,
        log_level,
        log_format: p.take(log_format(raw.log_format.as_deref()), String::new()),
        metrics_auth: raw.metrics_auth.unwrap_or(false),
        currency,
        discovery,
        instance,
        instance_set,
        store,
        cache_max_bytes: p.take(cache_max(raw.cache_max_mb), 0),
        upstreams,
        model_index: super::names::ModelIndex::build(&models),
        models,
        hosted,
        groups,
        warnings: Vec::new(),
    };
    if !p.errors.is_empty() {
        return Err(Invalid {
            errors: p.errors,
            warnings: p.warnings,
        });
    }
    Ok(Config {
        warnings: p.warnings,
        ..config
    })
}

/// `listen`: host:port (127.0.0.1:8080 when unset).
fn listen(v: Option<String>) -> Result<String, ConfigError> {
    let listen = v.unwrap_or_else(|| "127.0.0.1:8080".into());
    if listen.parse::<SocketAddr>().is_err() {
        return Err(err(
            "listen",
            format!("expected host:port such as 127.0.0.1:8080, got {listen:?}"),
        ));
    }
    Ok(listen)
}

/// `log_level`: one of the levels (`info` when unset).
fn log_level(v: Option<String>) -> Result<String, ConfigError> {
    let log_level = v.unwrap_or_else(|| "info".into());
    if !["error", "warn", "info", "debug", "trace", "off"].contains(&log_level.as_str()) {
        return Err(err(
            "log_level",
            format!("expected one of error, warn, info, debug, trace, off; got {log_level:?}"),
        ));
    }
    Ok(log_level)
}

/// `admin_token_env`: the name of a variable (`TOLLGATE_ADMIN_TOKEN` when unset).
fn admin_token_env(v: Option<String>) -> Result<String, ConfigError> {
    let name = v.unwrap_or_else(|| "TOLLGATE_ADMIN_TOKEN".into());
    if name.is_empty() {
        return Err(err(
            "admin_token_env",
            "expected the name of an environment variable, got an empty string",
        ));
    }
    Ok(name)
}

/// `[discovery]`: the base URLs to probe (default: the well-known local ones) and how often.
fn validate_discovery(d: RawDiscovery, p: &mut Problems) -> crate::config::Discovery {
    let probe = d
        .probe
        .unwrap_or_else(|| crate::config::WELL_KNOWN.map(str::to_string).to_vec());
    for (i, u) in probe.iter().enumerate() {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            p.errors.push(err(
                format!("discovery.probe[{i}]"),
                format!("expected an http:// or https:// base URL such as http://127.0.0.1:11434/v1, got {u:?}"),
            ));
        }
    }
    let interval = p.take(
        secs("discovery.interval_secs", d.interval_secs, 30),
        Duration::from_secs(30),
    );
    crate::config::Discovery {
        probe: probe
            .into_iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect(),
        interval,
    }
}

fn positive(field: &str, v: Option<usize>, default: usize) -> Result<usize, ConfigError> {
    match v {
        Some(0) => Err(err(field, "expected a number greater than 0, got 0")),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

fn secs(field: &str, v: Option<u64>, default: u64) -> Result<Duration, ConfigError> {
    match v {
        Some(0) => Err(err(
            field,
            "expected a number of seconds greater than 0, got 0",
        )),
        Some(n) => Ok(Duration::from_secs(n)),
        None => Ok(Duration::from_secs(default)),
    }
}

fn millis(field: &str, v: Option<u64>, default: u64) -> Result<Duration, ConfigError> {
    match v {
        Some(0) => Err(err(
            field,
            "expected a number of milliseconds greater than 0",
        )),
        Some(n) => Ok(Duration::from_millis(n)),
        None => Ok(Duration::from_millis(default)),
    }
}

fn bytes(field: &str, v: Option<u64>, default: u64) -> Result<u64, ConfigError> {
    match v {
        Some(0) => Err(err(field, "expected a number of bytes greater than 0")),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

/// The ledger's file settings (`ledger_max_file_mb`, `ledger_retention_days`, `ledger_compress_after_days`,
/// `ledger_checkpoint_records`, `ledger_checkpoint_secs`, `min_free_disk_mb`).
fn ledger_files(raw: &RawConfig, p: &mut Problems) -> crate::config::ledger::Options {
    use crate::config::ledger::MB;
    let d = crate::config::ledger::Options::default();
    let max_file_bytes = match raw.ledger_max_file_mb {
        None => d.max_file_bytes,
        Some(mb) if mb.is_finite() && (mb * MB as f64) >= 1024.0 && mb <= 1_048_576.0 => {
            (mb * MB as f64) as u64
        }
        Some(mb) => {
            p.errors.push(err(
                "ledger_max_file_mb",
                format!("expected a size in MB from 0.001 to 1048576, got {mb}"),
            ));
            d.max_file_bytes
        }
    };
    let mut days = |field: &str, v: Option<u64>, min: u64| match v {
        Some(n) if n < min || n > 100_000 => {
            p.errors.push(err(
                field,
                format!("expected a number of days from {min} to 100000, got {n}"),
            ));
            None
        }
        v => v,
    };
    let retention_days = days("ledger_retention_days", raw.ledger_retention_days, 1);
    let compress_after_days = days(
        "ledger_compress_after_days",
        raw.ledger_compress_after_days,
        0,
    );
    crate::config::ledger::Options {
        max_file_bytes,
        retention_days,
        compress_after_days,
        checkpoint_records: p.positive(
            "ledger_checkpoint_records",
            raw.ledger_checkpoint_records.map(|n| n as usize),
            d.checkpoint_records as usize,
        ) as u64,
        checkpoint_interval: p.secs(
            "ledger_checkpoint_secs",
            raw.ledger_checkpoint_secs,
            d.checkpoint_interval.as_secs(),
        ),
        min_free_disk_bytes: raw
            .min_free_disk_mb
            .map_or(d.min_free_disk_bytes, |mb| mb.saturating_mul(MB)),
    }
}

fn backlog(v: Option<u64>) -> Result<usize, ConfigError> {
    match v {
        None => Ok(crate::config::ledger::DEFAULT_BACKLOG_LIMIT),
        Some(n) if (1..=10_000_000).contains(&n) => Ok(n as usize),
        Some(n) => Err(err(
            "ledger_backlog_records",
            format!("expected 1 to 10000000 records, got {n}"),
        )),
    }
}

/// The label money is shown with (`credits` unless set): a short word, shown as text.
fn currency(v: Option<String>) -> Result<String, ConfigError> {
    let c = v.unwrap_or_else(|| "credits".into());
    if c.is_empty() || c.chars().count() > 16 || c.chars().any(char::is_control) {
        return Err(err(
            "currency",
            format!("expected a short label such as \"credits\", \"USD\" or \"EUR\", got {c:?}"),
        ));
    }
    Ok(c)
}

fn log_format(v: Option<&str>) -> Result<String, ConfigError> {
    match v {
        None | Some("text") => Ok("text".to_string()),
        Some("json") => Ok("json".to_string()),
        Some(other) => Err(err(
            "log_format",
            format!("expected \"text\" or \"json\", got {other:?}"),
        )),
    }
}

/// `cache_max_mb`: the answer cache's bound (64 MB when unset; fractions allowed).
fn cache_max(v: Option<f64>) -> Result<u64, ConfigError> {
    match v {
        None => Ok(64 << 20),
        Some(mb) if mb.is_finite() && mb * 1_048_576.0 >= 1024.0 && mb <= 1_048_576.0 => {
            Ok((mb * 1_048_576.0) as u64)
        }
        Some(mb) => Err(err(
            "cache_max_mb",
            format!("expected a size in MB from 0.001 to 1048576, got {mb}"),
        )),
    }
}
