//! Configuration: TOML parsed into raw structs, then validated into [`Config`]. Every error names the field
//! (`models[2].upstream`) and what was expected. Without a file, [`Config::embedded`] gives a gateway that
//! answers with the built-in mock model.

use std::fmt;

use std::path::{Path, PathBuf};
use std::time::Duration;

mod env;
pub(crate) mod hosted;
pub(crate) mod ledger;
pub(crate) mod names;
mod overrides;
mod prices;
pub mod schema;
mod shape;
pub(crate) mod store;
mod validate;
pub use env::Env;
pub use overrides::{GroupSpec, ModelChange, Overrides, OVERRIDES_FILE};
pub use prices::list_price_lines;

/// A configuration problem, naming the field (and its line, where it comes from a file); or, from
/// [`ConfigError::all`], every problem of a file at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigError {
    /// The field the problem is in, by its path in the file (`models[2].upstream`); empty when it is not one
    /// field's (an unreadable file, invalid TOML, several problems at once).
    pub field: String,
    /// What is wrong, and what was expected; from [`ConfigError::all`], every problem and warning on a line
    /// of its own.
    pub message: String,
    /// The line of the file the problem is on, where it is known.
    pub line: Option<usize>,
    /// From [`ConfigError::all`]: each problem (in file order) and the warnings, for a reader of their
    /// own (`check --json`).
    pub problems: Vec<ConfigError>,
    /// From [`ConfigError::all`]: the warnings found with the problems (see [`Config::warnings`]).
    pub warnings: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(l) = self.line {
            write!(f, "line {l}: ")?;
        }
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// One error standing for several, in the order of the file's lines (those without a line last), each
    /// on a line of its own, then the warnings.
    pub fn all(mut errors: Vec<ConfigError>, warnings: Vec<String>) -> ConfigError {
        errors.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
        if errors.len() == 1 {
            let mut e = errors[0].clone();
            for w in &warnings {
                e.message.push_str(&format!("\n  warning: {w}"));
            }
            e.problems = errors;
            e.warnings = warnings;
            return e;
        }
        let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let count = crate::util::plural(errors.len(), "error");
        lines.extend(warnings.iter().map(|w| format!("warning: {w}")));
        ConfigError {
            field: String::new(),
            message: format!("{count}:\n  {}", lines.join("\n  ")),
            line: None,
            problems: errors,
            warnings,
        }
    }
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
        ..ConfigError::default()
    }
}

/// What an upstream speaks: one of the wire protocols (its config `kind` is that protocol's codec's
/// `upstream_kind`, such as `openai-chat`), or the built-in mock model, which answers in every protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    /// One of the wire protocols: the upstream's API is that protocol's (`openai-chat`, `anthropic`, ...).
    Speaks(crate::protocol::Protocol),
    /// The built-in mock model (`mock`), which answers in every protocol and needs no base URL.
    Mock,
}

impl UpstreamKind {
    /// The kind as config writes it.
    pub fn name(self) -> &'static str {
        match self {
            UpstreamKind::Speaks(p) => p.upstream_kind,
            UpstreamKind::Mock => "mock",
        }
    }

    /// The kind config's `name` stands for.
    pub fn parse(name: &str) -> Option<UpstreamKind> {
        if name == "mock" {
            return Some(UpstreamKind::Mock);
        }
        crate::protocol::Protocol::of_upstream_kind(name).map(UpstreamKind::Speaks)
    }

    /// Every kind's name, for messages: `openai-chat, openai-responses, anthropic, mock`.
    pub fn names() -> String {
        let kinds = crate::protocol::ALL.iter().map(|p| p.upstream_kind);
        kinds.chain(["mock"]).collect::<Vec<_>>().join(", ")
    }

    /// The wire protocol an upstream of this kind speaks (`None` for the mock, which speaks all).
    pub fn protocol(self) -> Option<crate::protocol::Protocol> {
        match self {
            UpstreamKind::Speaks(p) => Some(p),
            UpstreamKind::Mock => None,
        }
    }
}

/// An upstream stands for its name where upstreams are ordered (see `upstream::routing`).
impl AsRef<str> for Upstream {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

/// One server tollgate sends requests to, from `[[upstreams]]`: an entry with `api_key_envs` becomes one of
/// these per credential.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The name models refer to it by (`name`); a deployment of one credential of `api_key_envs` is `name#1`,
    /// `name#2`, ...
    pub name: String,
    /// What it speaks (`kind`).
    pub kind: UpstreamKind,
    /// Without a trailing slash; with `/v1` where its protocol's SDKs take one (OpenAI's), not otherwise
    /// (Anthropic's).
    pub base_url: String,
    /// The credential read from `api_key_env` at load time. Never logged, never sent to clients.
    pub api_key: Option<String>,
    /// The variable `api_key_env` names when it was not set: requests to this upstream get 502 naming it.
    pub missing_key: Option<String>,
    /// Time allowed to connect (`connect_timeout_secs`, default 10).
    pub connect_timeout: Duration,
    /// Time allowed until the upstream's response head arrives.
    pub first_byte_timeout: Duration,
    /// Longest silence allowed between two reads of a response body (stream events).
    pub idle_timeout: Duration,
    /// Mock only: pause between streamed deltas.
    pub mock_delay: Duration,
    /// Longest a whole call may take, streams included.
    pub total_timeout: Duration,
    /// Failures in a row before the breaker skips this upstream, and for how long.
    pub breaker_failures: u32,
    /// How long the breaker acts before the upstream is tried again (`breaker_cooldown_secs`, default 30).
    pub breaker_cooldown: Duration,
    /// Chat upstreams: send the output limit as `max_completion_tokens` (OpenAI's current name; default for
    /// api.openai.com) rather than `max_tokens` (what local servers take; the default elsewhere).
    pub max_completion_tokens: bool,
}

/// One model entry of `[[models]]`, or one found by discovery: the name clients ask for, where it is sent and
/// how it is billed.
#[derive(Debug, Clone)]
pub struct Model {
    /// What clients send as the model: a plain name, or a pattern with `*` and `?` (`claude-*`).
    pub name: String,
    /// Upstream names, tried in order before the first byte.
    pub upstreams: Vec<String>,
    /// The model name sent upstream (`upstream_model`, default the `name`); `{model}` in it stands for the
    /// name the client asked for.
    pub upstream_model: String,
    /// Its prices (credits per 1M tokens), tiers and where they came from.
    pub prices: crate::pricing::PriceSheet,
    /// The output limit a request is reserved and (keys with a spending limit) capped at when it sets none:
    /// the config's, else the list's for its upstream model, else [`DEFAULT_MAX_OUTPUT_TOKENS`].
    pub max_output_tokens: u64,
    /// The input tokens one image may cost at most on this model's upstreams (admission counts every image
    /// part at it; see `protocol::estimate`).
    pub image_tokens: u64,
    /// Anthropic upstreams: ask for structured output with a forced tool (for Anthropic-compatible servers
    /// without `output_config.format`) instead of natively.
    pub structured_via_tool: bool,
    /// The model reasons: a client's reasoning effort is passed on when translating (OpenAI models without
    /// reasoning refuse the parameter, so it is off unless set).
    pub reasoning: bool,
    /// Single-tenant opt-in: requests may reach state kept in the upstream account (stored responses,
    /// files, containers, MCP; see `protocol::account`). Off: such fields are refused.
    pub account_features: bool,
    /// Switched off by the operator (console): not listed, and requests get 404.
    pub disabled: bool,
    /// Other names clients may ask for it by (resolved to this entry; they never widen a group's access).
    pub aliases: Vec<String>,
    /// Found on a local model server (its base URL), not configured.
    pub discovered: Option<String>,
    /// How the first upstream of a request is chosen (failover then tries the others once each).
    pub route: Route,
    /// `weighted`: one weight per upstream, in the order of `upstreams`.
    pub weights: Vec<u32>,
    /// Its answers are cached (`cache_ttl_secs` above 0): for how long, shared by whom.
    pub cache: Option<Caching>,
}

/// A model's answer cache: how long a complete answer is kept and who may be served it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caching {
    /// How long a complete answer is kept and served again (`cache_ttl_secs`).
    pub ttl: Duration,
    /// Who may be served it again (`cache_scope`, default `key`).
    pub scope: CacheScope,
}

/// Who shares a cached answer (`cache_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheScope {
    /// The key that asked (the default: a tenant never learns from a hit what another asked).
    Key,
    /// Every key of its group.
    Group,
    /// Every key.
    All,
}

impl CacheScope {
    /// The scope a `cache_scope` value names (`key`, `group`, `all`); None for any other.
    pub fn parse(v: &str) -> Option<CacheScope> {
        match v {
            "key" => Some(CacheScope::Key),
            "group" => Some(CacheScope::Group),
            "all" => Some(CacheScope::All),
            _ => None,
        }
    }

    /// The scope as config writes it.
    pub fn name(self) -> &'static str {
        match self {
            CacheScope::Key => "key",
            CacheScope::Group => "group",
            CacheScope::All => "all",
        }
    }
}

/// Where and how often local model servers are looked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    /// Base URLs (`http://127.0.0.1:11434/v1`), in probe order.
    pub probe: Vec<String>,
    /// How often the servers are asked again, so one started later is found (`interval_secs`, default 30).
    pub interval: Duration,
}

/// The well-known local addresses, in probe order: what `[discovery]` probes unless
/// told otherwise (`upstream/discovery.rs` asks them).
pub const WELL_KNOWN: [&str; 7] = [
    "http://127.0.0.1:11434/v1", // Ollama
    "http://127.0.0.1:8000/v1",  // vLLM
    "http://127.0.0.1:1234/v1",  // LM Studio
    "http://127.0.0.1:8080/v1",  // llama.cpp
    "http://127.0.0.1:5000/v1",  // text-generation-webui
    "http://127.0.0.1:5001/v1",  // KoboldCpp
    "http://127.0.0.1:1337/v1",  // Jan
];

/// How a model's upstream is chosen for each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// In the configured order.
    Ordered,
    /// Spread by weight (smooth weighted round robin: exact shares, no randomness).
    Weighted,
    /// The one with the fewest requests in flight; ties go to the faster first byte.
    LeastBusy,
}

impl Route {
    /// The route as config writes it (`route`).
    pub fn name(self) -> &'static str {
        match self {
            Route::Ordered => "ordered",
            Route::Weighted => "weighted",
            Route::LeastBusy => "least-busy",
        }
    }
}

/// A group from `[[groups]]` or the console: the models its keys may use, and the limits each of its keys is
/// held to on its own.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    /// The group's name, given to keys with `--group`.
    pub name: String,
    /// The model names its keys may use, globs with `*` and `?` allowed; other models get 403.
    pub models: Vec<String>,
    /// Requests per minute per key, over a sliding minute (None: no limit).
    pub rpm: Option<u64>,
    /// Tokens per minute per key: the input estimated at admission plus the requested output limit, corrected
    /// with the real usage afterwards (None: no limit).
    pub tpm: Option<u64>,
    /// Requests in flight at once per key (None: no limit).
    pub max_concurrent: Option<u64>,
    /// The spend budget of each key in the group that has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
}

/// A validated configuration: the config file's settings (or the embedded defaults), defaults filled in. Each
/// field's key, unit and default: docs/CONFIG.md.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from (None: the embedded defaults, or text).
    pub path: Option<PathBuf>,
    /// The `host:port` the gateway binds (`listen`, default `127.0.0.1:8080`; `TOLLGATE_LISTEN` overrides it
    /// for `serve`).
    pub listen: String,
    /// The directory of tollgate's files: keys, the usage ledger, the audit log, overrides (`data_dir`,
    /// default `./tollgate-data`; a relative path is taken from the config file's directory).
    pub data_dir: PathBuf,
    /// The environment variable holding the admin token (`admin_token_env`, default `TOLLGATE_ADMIN_TOKEN`).
    pub admin_token_env: String,
    /// The file names `admin_token_env` (else: `TOLLGATE_ADMIN_TOKEN` when set, or the token kept in the data
    /// directory, `access::admin_token`).
    pub admin_token_env_named: bool,
    /// The admin token, read from `admin_token_env` with the config (None or empty: not set).
    admin_token: Option<String>,
    /// Requests served at once: a worker carries one request from its complete head to its last byte
    /// (`workers`, default 256).
    pub workers: usize,
    /// Complete requests that may wait for a worker while all are busy; beyond it, 503 (`queue_size`, default
    /// 1024).
    pub queue_size: usize,
    /// Open client connections allowed; beyond it, 503 and the connection is closed (`max_connections`,
    /// default 4096).
    pub max_connections: usize,
    /// A client address's share of the connections once more than half are open
    /// (`max_connections_per_client`, default an eighth of them, at least 32), and the addresses exempt from it
    /// (`exempt_clients`).
    pub per_client: crate::http::PerClient,
    /// The largest request body, in bytes; a larger one gets 413 before it is read (`max_body_bytes`, default
    /// 32 MiB).
    pub max_body_bytes: u64,
    /// Request-body bytes held at once across all connections (beyond: 503).
    pub max_buffered_body_bytes: u64,
    /// Time allowed for a whole request, head and body (else 408), and how long an idle keep-alive connection
    /// is kept (`read_timeout_secs`, default 60).
    pub read_timeout: Duration,
    /// A client that stops reading for this long is dropped (`write_timeout_secs`, default 60).
    pub write_timeout: Duration,
    /// On SIGTERM or SIGINT, how long requests in flight may finish before what is still running is cut
    /// (`shutdown_grace_secs`, default 30).
    pub shutdown_grace: Duration,
    /// A stream silent for this long gets a keepalive (SSE comment, or `ping` for Messages clients).
    pub keepalive: Duration,
    /// How long a streamed answer is still read after its client left, for the usage report that bills
    /// what the upstream did (`client_left_grace_secs`, 30; 0: the upstream call ends at once, and the
    /// stream is billed its output limit).
    pub client_left_grace: Duration,
    /// How often the usage ledger is synced to disk (at most this much is lost to a `kill -9`).
    pub ledger_sync: Duration,
    /// Sync each usage record before its response ends.
    pub ledger_strict: bool,
    /// Usage records kept in memory while the ledger's disk fails; when reached, new requests get 503.
    pub ledger_backlog_records: usize,
    /// Rotation, retention, compression, checkpoints and the free-space warning of the ledger's files.
    pub ledger_files: ledger::Options,
    /// One of `error`, `warn`, `info`, `debug`, `trace`, `off` (`log_level`, default `info`).
    pub log_level: String,
    /// `text` or `json` (JSON lines).
    pub log_format: String,
    /// The `[[upstreams]]` entries (one deployment per credential of an entry with `api_key_envs`), then any
    /// local servers discovery found.
    pub upstreams: Vec<Upstream>,
    /// The `[[models]]` entries in file order, then any models discovery found ([`Model::discovered`]).
    pub models: Vec<Model>,
    /// What each model entry (by name) allows of paid hosted features; see [`Config::hosted_prices`].
    pub hosted: std::collections::HashMap<String, hosted::HostedPrices>,
    /// The `[[groups]]` entries (one group `default` allowing `*` when the file has none), with the console's
    /// changes once [`Config::with_overrides`] laid them over.
    pub groups: Vec<Group>,
    /// `/metrics` needs the admin token (`Authorization: Bearer`).
    pub metrics_auth: bool,
    /// The label money is shown with in the console (`credits` by default; amounts are not converted).
    pub currency: String,
    /// Model lookup by name, alias and pattern (rebuilt whenever `models` is).
    pub model_index: names::ModelIndex,
    /// Finding local model servers (`[discovery]`; on for the embedded defaults).
    pub discovery: Option<Discovery>,
    /// This instance's name in usage records (`instance`; the host name when unset).
    pub instance: String,
    /// `instance` was set in the file.
    pub instance_set: bool,
    /// The shared store of several instances (`[store]`); None: flat files only.
    pub store: Option<store::StoreSettings>,
    /// The most the answer cache holds (`cache_max_mb`, default 64), in bytes: in memory, or with a store in
    /// it (least recently used entries go first).
    pub cache_max_bytes: u64,
    /// What validation found that does not stop the gateway but will not work as meant (`check` prints
    /// them, `serve` logs them).
    pub warnings: Vec<String>,
}

/// Default `max_tokens` sent to an upstream that requires one when the client gave none.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 8192;

impl Config {
    /// The embedded defaults: 127.0.0.1:8080, `./tollgate-data`, one mock model `mock`, one group `default`
    /// allowed everything.
    pub fn embedded() -> Config {
        Config::from_toml_str(EMBEDDED)
            .unwrap_or_else(|e| panic!("embedded config is invalid: {e}"))
    }

    /// Reads and validates a config file, with the process's environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_in(path, &Env::process())
    }

    /// Reads and validates a config file, its environment variables read from `env`.
    pub fn load_in(path: &Path, env: &Env) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            err(
                "",
                format!("cannot read config file {}: {e}", path.display()),
            )
        })?;
        let mut cfg = Config::from_toml_in(&text, env)?;
        cfg.path = Some(path.to_path_buf());
        // A relative data_dir is relative to the config file, so the file means the same from any cwd.
        if cfg.data_dir.is_relative() {
            if let Some(parent) = path.parent() {
                cfg.data_dir = parent.join(&cfg.data_dir);
            }
        }
        Ok(cfg)
    }

    /// Parses and validates TOML text, with the process's environment.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_in(text, &Env::process())
    }

    /// Parses and validates TOML text, its environment variables read from `env`. Every problem is found in
    /// one run (`shape.rs`, then validation), each with its line, in the order of the file.
    pub fn from_toml_in(text: &str, env: &Env) -> Result<Config, ConfigError> {
        use serde::de::{Deserialize, IntoDeserializer};
        let lines = shape::Lines::new(text);
        let (mut table, syntax) = toml::de::DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            let errors = syntax
                .iter()
                .map(|e| ConfigError {
                    message: format!("invalid TOML: {}", e.message().trim_end()),
                    line: e.span().map(|s| lines.of(s.start)),
                    ..ConfigError::default()
                })
                .collect();
            return Err(ConfigError::all(errors, Vec::new()));
        }
        let checked = shape::check(&mut table, schema::TOP, &lines);
        let mut errors = checked.errors.clone();
        let raw = match validate::RawConfig::deserialize(table.into_deserializer()) {
            Ok(raw) => raw,
            Err(e) => {
                errors.push(ConfigError {
                    message: e.message().trim_end().to_string(),
                    line: e.span().map(|s| lines.of(s.start)),
                    ..ConfigError::default()
                });
                return Err(ConfigError::all(errors, Vec::new()));
            }
        };
        let placed = |w: String| match w.split_once(": ") {
            Some((path, _)) if !path.contains(' ') => match checked.line_of(path) {
                Some(l) => format!("line {l}: {w}"),
                None => w,
            },
            _ => w,
        };
        match validate::validate(raw, env) {
            Ok(mut c) => {
                c.warnings = c.warnings.into_iter().map(placed).collect();
                if errors.is_empty() {
                    Ok(c)
                } else {
                    Err(ConfigError::all(errors, c.warnings))
                }
            }
            Err(invalid) => {
                for mut e in invalid.errors {
                    if checked.already_told(&e.field) {
                        continue;
                    }
                    if e.line.is_none() {
                        e.line = checked.line_of(&e.field);
                    }
                    errors.push(e);
                }
                let warnings = invalid.warnings.into_iter().map(placed).collect();
                Err(ConfigError::all(errors, warnings))
            }
        }
    }

    /// A model clients may call (disabled models are treated as absent).
    pub fn model(&self, name: &str) -> Option<&Model> {
        self.model_any(name).filter(|m| !m.disabled)
    }

    /// The model entry serving `name` (its name, an alias, or a matching pattern), enabled or not.
    pub fn model_any(&self, name: &str) -> Option<&Model> {
        self.model_index
            .resolve(&self.models, name)
            .and_then(|i| self.models.get(i))
    }

    /// The upstream (or one credential's deployment, `name#1`) of this name.
    pub fn upstream(&self, name: &str) -> Option<&Upstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// Whether one of `model`'s upstreams speaks `protocol`: a request of it may go upstream as it came.
    pub fn passes_through(&self, model: &Model, protocol: crate::protocol::Protocol) -> bool {
        model
            .upstreams
            .iter()
            .filter_map(|n| self.upstream(n))
            .any(|u| u.kind.protocol() == Some(protocol))
    }

    /// The admin token from the environment variable `admin_token_env` names, as it was when the config
    /// was read (None: admin API closed).
    pub fn admin_token(&self) -> Option<String> {
        self.admin_token.clone()
    }

    /// The group of this name.
    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }
}

const EMBEDDED: &str = r#"
listen = "127.0.0.1:8080"
data_dir = "./tollgate-data"

[[upstreams]]
name = "mock"
kind = "mock"
mock_delay_ms = 20

[[models]]
name = "mock"
upstream = "mock"
prices = "none"

[[groups]]
name = "default"
models = ["*"]

# Local model servers at their well-known addresses are found and served with no file.
[discovery]
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::names::glob_match;

    #[test]
    fn embedded_defaults_are_valid() {
        let c = Config::embedded();
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("./tollgate-data"));
        assert_eq!(c.model("mock").unwrap().upstreams, vec!["mock"]);
        assert_eq!(c.workers, 256);
    }

    #[test]
    fn errors_name_the_field() {
        let e = Config::from_toml_str(
            "[[upstreams]]\nname='a'\nkind='mock'\n[[models]]\nname='m'\nupstream='b'\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "models[0].upstream");
        assert!(e.message.contains("unknown upstream \"b\""));
        let e = Config::from_toml_str("[[upstreams]]\nname='a'\nkind='grpc'\n").unwrap_err();
        assert_eq!(e.field, "upstreams[0].kind");
        let e = Config::from_toml_str("workers = 'many'\n").unwrap_err();
        assert!(e.message.contains("line 1"), "{e}");
        let e = Config::from_toml_str("bogus = 1\n").unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        let e = Config::from_toml_str(
            "[[upstreams]]\nname='a'\nkind='openai-chat'\n[[models]]\nname='m'\nupstream='a'\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "upstreams[0].base_url");
    }

    #[test]
    fn the_answer_cache_is_opt_in_per_model_and_bounded_globally() {
        let model = |extra: &str| {
            format!("cache_max_mb = 0.5\n[[upstreams]]\nname='a'\nkind='mock'\n[[models]]\nname='m'\nupstream='a'\n{extra}")
        };
        let c = Config::from_toml_str(&model("")).unwrap();
        assert_eq!(c.cache_max_bytes, 512 * 1024);
        assert_eq!(c.model("m").unwrap().cache, None);
        assert_eq!(Config::embedded().cache_max_bytes, 64 << 20);
        let c = Config::from_toml_str(&model("cache_ttl_secs = 0")).unwrap();
        assert_eq!(c.model("m").unwrap().cache, None, "0 is off");
        let c = Config::from_toml_str(&model("cache_ttl_secs = 60")).unwrap();
        let want = Caching {
            ttl: Duration::from_secs(60),
            scope: CacheScope::Key,
        };
        assert_eq!(c.model("m").unwrap().cache, Some(want), "key by default");
        let c = Config::from_toml_str(&model("cache_ttl_secs = 60\ncache_scope = 'all'")).unwrap();
        assert_eq!(c.model("m").unwrap().cache.unwrap().scope, CacheScope::All);
        let e = Config::from_toml_str(&model("cache_ttl_secs = 60\ncache_scope = 'tenant'"))
            .unwrap_err();
        assert_eq!(e.field, "models[0].cache_scope");
        let e = Config::from_toml_str(&model("").replace("0.5", "0")).unwrap_err();
        assert_eq!(e.field, "cache_max_mb");
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("m-*", "m-chat"));
        assert!(!glob_match("m-*", "x-chat"));
        assert!(glob_match("gpt-?o", "gpt-4o"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("claude-*-4*", "claude-sonnet-4-5"));
        // Never against a string holding glob characters: `?` does not stand for `*`, `*` not for `?`.
        assert!(!glob_match("o?", "o*"));
        assert!(!glob_match("*", "gpt-*"));
        assert!(!glob_match("gpt-*", "gpt-?"));
        assert!(!glob_match("a*", "a*"));
    }
}
