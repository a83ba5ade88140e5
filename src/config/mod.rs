//! Configuration: TOML parsed into raw structs, then validated into [`Config`]. Every error names the field
//! (`models[2].upstream`) and what was expected. Without a file, [`Config::embedded`] gives a gateway that
//! answers with the built-in mock model.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod overrides;
pub use overrides::{GroupSpec, ModelChange, Overrides, OVERRIDES_FILE};

/// A configuration problem, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// The four kinds of upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    OpenAiChat,
    OpenAiResponses,
    Anthropic,
    Mock,
}

impl UpstreamKind {
    pub fn name(self) -> &'static str {
        match self {
            UpstreamKind::OpenAiChat => "openai-chat",
            UpstreamKind::OpenAiResponses => "openai-responses",
            UpstreamKind::Anthropic => "anthropic",
            UpstreamKind::Mock => "mock",
        }
    }

    /// The wire protocol an upstream of this kind speaks (`None` for the mock, which speaks all).
    pub fn protocol(self) -> Option<crate::protocol::Protocol> {
        use crate::protocol::Protocol;
        match self {
            UpstreamKind::OpenAiChat => Some(Protocol::Chat),
            UpstreamKind::OpenAiResponses => Some(Protocol::Responses),
            UpstreamKind::Anthropic => Some(Protocol::Messages),
            UpstreamKind::Mock => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub name: String,
    pub kind: UpstreamKind,
    /// Without a trailing slash. OpenAI kinds include `/v1`; anthropic does not.
    pub base_url: String,
    /// The credential read from `api_key_env` at load time. Never logged, never sent to clients.
    pub api_key: Option<String>,
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
    pub breaker_cooldown: Duration,
    /// Chat upstreams: send the output limit as `max_completion_tokens` (OpenAI's current name; default for
    /// api.openai.com) rather than `max_tokens` (what local servers take; the default elsewhere).
    pub max_completion_tokens: bool,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub name: String,
    /// Upstream names, tried in order before the first byte.
    pub upstreams: Vec<String>,
    pub upstream_model: String,
    pub input_price: f64,
    pub cached_input_price: Option<f64>,
    pub output_price: f64,
    pub max_output_tokens: u64,
    /// Anthropic upstreams: ask for structured output with a forced tool (for Anthropic-compatible servers
    /// without `output_config.format`) instead of natively.
    pub structured_via_tool: bool,
    /// The model reasons: a client's reasoning effort is passed on when translating (OpenAI models without
    /// reasoning refuse the parameter, so it is off unless set).
    pub reasoning: bool,
    /// Switched off by the operator (console): not listed, and requests get 404.
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    pub name: String,
    pub models: Vec<String>,
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub max_concurrent: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    pub data_dir: PathBuf,
    pub admin_token_env: String,
    pub workers: usize,
    pub queue_size: usize,
    pub max_connections: usize,
    pub max_body_bytes: u64,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
    pub shutdown_grace: Duration,
    /// A stream silent for this long gets a keepalive (SSE comment, or `ping` for Messages clients).
    pub keepalive: Duration,
    /// How often the usage ledger is synced to disk (at most this much is lost to a `kill -9`).
    pub ledger_sync: Duration,
    /// Sync each usage record before its response ends.
    pub ledger_strict: bool,
    pub log_level: String,
    /// `text` or `json` (JSON lines).
    pub log_format: String,
    pub upstreams: Vec<Upstream>,
    pub models: Vec<Model>,
    pub groups: Vec<Group>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    data_dir: Option<String>,
    admin_token_env: Option<String>,
    workers: Option<usize>,
    queue_size: Option<usize>,
    max_connections: Option<usize>,
    max_body_bytes: Option<u64>,
    read_timeout_secs: Option<u64>,
    write_timeout_secs: Option<u64>,
    shutdown_grace_secs: Option<u64>,
    keepalive_secs: Option<u64>,
    ledger_sync_ms: Option<u64>,
    ledger_strict: Option<bool>,
    log_level: Option<String>,
    log_format: Option<String>,
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
    input_price: Option<f64>,
    cached_input_price: Option<f64>,
    output_price: Option<f64>,
    max_output_tokens: Option<u64>,
    structured_output: Option<String>,
    reasoning: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    models: Vec<String>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    max_concurrent: Option<u64>,
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

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            err(
                "",
                format!("cannot read config file {}: {e}", path.display()),
            )
        })?;
        let mut cfg = Config::from_toml_str(&text)?;
        // A relative data_dir is relative to the config file, so the file means the same from any cwd.
        if cfg.data_dir.is_relative() {
            if let Some(parent) = path.parent() {
                cfg.data_dir = parent.join(&cfg.data_dir);
            }
        }
        Ok(cfg)
    }

    /// Parses and validates TOML text.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            err("", format!("invalid TOML{at}: {msg}"))
        })?;
        validate(raw)
    }

    /// A model clients may call (disabled models are treated as absent).
    pub fn model(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name && !m.disabled)
    }

    /// A model, enabled or not.
    pub fn model_any(&self, name: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.name == name)
    }

    pub fn upstream(&self, name: &str) -> Option<&Upstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// The admin token from the environment variable `admin_token_env` names (None: admin API closed).
    pub fn admin_token(&self) -> Option<String> {
        std::env::var(&self.admin_token_env)
            .ok()
            .filter(|t| !t.is_empty())
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|_| {
            err(
                "listen",
                format!(
                    "expected host:port such as 127.0.0.1:8080, got {:?}",
                    self.listen
                ),
            )
        })
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
input_price = 0.0
output_price = 0.0

[[groups]]
name = "default"
models = ["*"]
"#;

fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let listen = raw.listen.unwrap_or_else(|| "127.0.0.1:8080".into());
    listen.parse::<SocketAddr>().map_err(|_| {
        err(
            "listen",
            format!("expected host:port such as 127.0.0.1:8080, got {listen:?}"),
        )
    })?;
    let positive = |field: &str, v: Option<usize>, default: usize| -> Result<usize, ConfigError> {
        match v {
            Some(0) => Err(err(field, "expected a number greater than 0, got 0")),
            Some(n) => Ok(n),
            None => Ok(default),
        }
    };
    let secs = |field: &str, v: Option<u64>, default: u64| -> Result<Duration, ConfigError> {
        match v {
            Some(0) => Err(err(
                field,
                "expected a number of seconds greater than 0, got 0",
            )),
            Some(n) => Ok(Duration::from_secs(n)),
            None => Ok(Duration::from_secs(default)),
        }
    };
    let log_level = raw.log_level.unwrap_or_else(|| "info".into());
    if !["error", "warn", "info", "debug", "trace", "off"].contains(&log_level.as_str()) {
        return Err(err(
            "log_level",
            format!("expected one of error, warn, info, debug, trace, off; got {log_level:?}"),
        ));
    }
    let admin_token_env = raw
        .admin_token_env
        .unwrap_or_else(|| "TOLLGATE_ADMIN_TOKEN".into());
    if admin_token_env.is_empty() {
        return Err(err(
            "admin_token_env",
            "expected the name of an environment variable, got an empty string",
        ));
    }

    let mut upstreams = Vec::new();
    let mut seen = HashSet::new();
    for (i, u) in raw.upstreams.into_iter().enumerate() {
        let f = |k: &str| format!("upstreams[{i}].{k}");
        if u.name.is_empty() {
            return Err(err(f("name"), "expected a non-empty name"));
        }
        if !seen.insert(u.name.clone()) {
            return Err(err(
                f("name"),
                format!("duplicate upstream name {:?}", u.name),
            ));
        }
        let kind = match u.kind.as_str() {
            "openai-chat" => UpstreamKind::OpenAiChat,
            "openai-responses" => UpstreamKind::OpenAiResponses,
            "anthropic" => UpstreamKind::Anthropic,
            "mock" => UpstreamKind::Mock,
            other => {
                return Err(err(
                    f("kind"),
                    format!(
                    "expected one of openai-chat, openai-responses, anthropic, mock; got {other:?}"
                ),
                ))
            }
        };
        let base_url = match (kind, u.base_url) {
            (UpstreamKind::Mock, b) => b.unwrap_or_default(),
            (_, None) => {
                return Err(err(
                    f("base_url"),
                    "expected a URL such as http://127.0.0.1:9001/v1",
                ))
            }
            (_, Some(b)) => {
                if !(b.starts_with("http://") || b.starts_with("https://")) {
                    return Err(err(
                        f("base_url"),
                        format!("expected an http:// or https:// URL, got {b:?}"),
                    ));
                }
                b.trim_end_matches('/').to_string()
            }
        };
        let is_openai = base_url.contains("://api.openai.com");
        let api_key = match &u.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(v) if !v.is_empty() => Some(v),
                _ => {
                    return Err(err(
                        f("api_key_env"),
                        format!("the environment variable {var} is not set; set it to the upstream's API key or remove api_key_env"),
                    ))
                }
            },
        };
        upstreams.push(Upstream {
            name: u.name,
            kind,
            base_url,
            api_key,
            connect_timeout: secs(&f("connect_timeout_secs"), u.connect_timeout_secs, 10)?,
            first_byte_timeout: secs(
                &f("first_byte_timeout_secs"),
                u.first_byte_timeout_secs,
                600,
            )?,
            idle_timeout: secs(&f("idle_timeout_secs"), u.idle_timeout_secs, 300)?,
            mock_delay: Duration::from_millis(u.mock_delay_ms.unwrap_or(0)),
            total_timeout: secs(&f("total_timeout_secs"), u.total_timeout_secs, 3600)?,
            breaker_failures: match u.breaker_failures {
                Some(0) => {
                    return Err(err(
                        f("breaker_failures"),
                        "expected a number of failures greater than 0",
                    ))
                }
                Some(n) => n,
                None => 5,
            },
            breaker_cooldown: secs(&f("breaker_cooldown_secs"), u.breaker_cooldown_secs, 30)?,
            max_completion_tokens: match u.max_tokens_field.as_deref() {
                None => is_openai,
                Some("max_tokens") => false,
                Some("max_completion_tokens") => true,
                Some(other) => {
                    return Err(err(
                        f("max_tokens_field"),
                        format!(
                            "expected \"max_tokens\" or \"max_completion_tokens\", got {other:?}"
                        ),
                    ))
                }
            },
        });
    }

    let mut models = Vec::new();
    let mut seen = HashSet::new();
    for (i, m) in raw.models.into_iter().enumerate() {
        let f = |k: &str| format!("models[{i}].{k}");
        if m.name.is_empty() || m.name.chars().any(char::is_whitespace) {
            return Err(err(
                f("name"),
                format!("expected a non-empty name without spaces, got {:?}", m.name),
            ));
        }
        if !seen.insert(m.name.clone()) {
            return Err(err(f("name"), format!("duplicate model name {:?}", m.name)));
        }
        let names = match m.upstream {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        };
        if names.is_empty() {
            return Err(err(
                f("upstream"),
                "expected an upstream name or a non-empty list of them",
            ));
        }
        for n in &names {
            if !upstreams.iter().any(|u: &Upstream| &u.name == n) {
                let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                return Err(err(
                    f("upstream"),
                    format!(
                        "unknown upstream {n:?}; expected one of [{}]",
                        known.join(", ")
                    ),
                ));
            }
        }
        for (k, v) in [
            ("input_price", m.input_price),
            ("output_price", m.output_price),
            ("cached_input_price", m.cached_input_price),
        ] {
            if let Some(p) = v {
                if !(p.is_finite() && p >= 0.0) {
                    return Err(err(
                        f(k),
                        format!("expected a price of 0 or more credits per 1M tokens, got {p}"),
                    ));
                }
            }
        }
        if m.max_output_tokens == Some(0) {
            return Err(err(
                f("max_output_tokens"),
                "expected a number greater than 0, got 0",
            ));
        }
        models.push(Model {
            upstream_model: m.upstream_model.unwrap_or_else(|| m.name.clone()),
            name: m.name,
            upstreams: names,
            input_price: m.input_price.unwrap_or(0.0),
            cached_input_price: m.cached_input_price,
            output_price: m.output_price.unwrap_or(0.0),
            max_output_tokens: m.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
            reasoning: m.reasoning.unwrap_or(false),
            disabled: false,
            structured_via_tool: match m.structured_output.as_deref() {
                None | Some("native") => false,
                Some("tool") => true,
                Some(other) => {
                    return Err(err(
                        f("structured_output"),
                        format!("expected \"native\" or \"tool\", got {other:?}"),
                    ))
                }
            },
        });
    }
    if models.is_empty() {
        return Err(err("models", "expected at least one [[models]] entry"));
    }

    let mut groups = Vec::new();
    let mut seen = HashSet::new();
    for (i, g) in raw.groups.into_iter().enumerate() {
        let f = |k: &str| format!("groups[{i}].{k}");
        if g.name.is_empty() || g.name.chars().any(char::is_whitespace) {
            return Err(err(
                f("name"),
                format!("expected a non-empty name without spaces, got {:?}", g.name),
            ));
        }
        if !seen.insert(g.name.clone()) {
            return Err(err(f("name"), format!("duplicate group name {:?}", g.name)));
        }
        for (k, v) in [
            ("rpm", g.rpm),
            ("tpm", g.tpm),
            ("max_concurrent", g.max_concurrent),
        ] {
            if v == Some(0) {
                return Err(err(
                    f(k),
                    "expected a limit greater than 0 (leave it out for no limit)",
                ));
            }
        }
        groups.push(Group {
            name: g.name,
            models: g.models,
            rpm: g.rpm,
            tpm: g.tpm,
            max_concurrent: g.max_concurrent,
        });
    }
    if groups.is_empty() {
        groups.push(Group {
            name: "default".into(),
            models: vec!["*".into()],
            rpm: None,
            tpm: None,
            max_concurrent: None,
        });
    }

    Ok(Config {
        listen,
        data_dir: PathBuf::from(raw.data_dir.unwrap_or_else(|| "./tollgate-data".into())),
        admin_token_env,
        workers: positive("workers", raw.workers, 256)?,
        queue_size: positive("queue_size", raw.queue_size, 1024)?,
        max_connections: positive("max_connections", raw.max_connections, 4096)?,
        max_body_bytes: match raw.max_body_bytes {
            Some(0) => {
                return Err(err(
                    "max_body_bytes",
                    "expected a number of bytes greater than 0",
                ))
            }
            Some(n) => n,
            None => 32 * 1024 * 1024,
        },
        read_timeout: secs("read_timeout_secs", raw.read_timeout_secs, 60)?,
        write_timeout: secs("write_timeout_secs", raw.write_timeout_secs, 60)?,
        shutdown_grace: secs("shutdown_grace_secs", raw.shutdown_grace_secs, 30)?,
        keepalive: secs("keepalive_secs", raw.keepalive_secs, 15)?,
        ledger_sync: match raw.ledger_sync_ms {
            Some(0) => {
                return Err(err(
                    "ledger_sync_ms",
                    "expected a number of milliseconds greater than 0",
                ))
            }
            Some(n) => Duration::from_millis(n),
            None => Duration::from_millis(200),
        },
        ledger_strict: raw.ledger_strict.unwrap_or(false),
        log_level,
        log_format: match raw.log_format.as_deref() {
            None | Some("text") => "text".to_string(),
            Some("json") => "json".to_string(),
            Some(other) => {
                return Err(err(
                    "log_format",
                    format!("expected \"text\" or \"json\", got {other:?}"),
                ))
            }
        },
        upstreams,
        models,
        groups,
    })
}

/// Glob match with `*` (any run) and `?` (one character), as used in group model lists.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn globs() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("m-*", "m-chat"));
        assert!(!glob_match("m-*", "x-chat"));
        assert!(glob_match("gpt-?o", "gpt-4o"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("claude-*-4*", "claude-sonnet-4-5"));
    }
}
