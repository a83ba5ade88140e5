//! Local model servers found with no file: OpenAI-compatible servers at their well-known local addresses
//! (Ollama, vLLM, LM Studio, llama.cpp, text-generation-webui, KoboldCpp, Jan), asked for their model list
//! (`GET /v1/models`, or Ollama's `/api/tags`), each model served under its own id beside the configured
//! ones, at price 0. A configured model of the same name, alias or pattern wins (the id is then served as
//! `id@host:port`, unless a configured pattern matches that too); when two servers list the same id, the
//! first in probe order serves the plain id and the others `id@host:port`. Ids holding `*` or `?` are
//! skipped: a discovered server is never a catch-all. A server that stops answering keeps its
//! models (requests to them name the server and get 502) until it answers again without them.

use std::time::Duration;

use serde_json::Value;

use crate::config::{Config, Model, Route, Upstream, UpstreamKind};
use crate::protocol::LOCAL;

/// How long one probe may take: short, and in a background thread, so it never delays the start.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

/// What one server said the last time it was asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LocalServer {
    pub base_url: String,
    pub models: Vec<String>,
    /// It answered the last probe.
    pub up: bool,
    /// Why the last probe failed.
    pub error: Option<String>,
}

/// Asks one server for its models: the list of the protocol local servers speak (`protocol::LOCAL`), else
/// Ollama's tags.
pub(crate) fn probe(agent: &ureq::Agent, base_url: &str) -> Result<Vec<String>, ProbeError> {
    let get = |url: &str| -> Result<Value, ProbeError> {
        let mut resp = agent
            .get(url)
            .config()
            .timeout_global(Some(PROBE_TIMEOUT))
            .build()
            .call()
            .map_err(ProbeError::Call)?;
        if resp.status().as_u16() != 200 {
            return Err(ProbeError::Status(resp.status().as_u16()));
        }
        let text = resp
            .body_mut()
            .with_config()
            .limit(4 * 1024 * 1024)
            .read_to_string()
            .map_err(ProbeError::Body)?;
        serde_json::from_str(&text).map_err(ProbeError::Json)
    };
    let tags = |v: &Value| -> Option<Vec<String>> {
        let items = v.get("models")?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(|m| m.get("name").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
        )
    };
    match get(&format!("{base_url}{}", LOCAL.models_path)).map(|v| LOCAL.model_ids(&v)) {
        Ok(Some(models)) => Ok(models),
        first => {
            let root = base_url.strip_suffix("/v1").unwrap_or(base_url);
            match get(&format!("{root}/api/tags")).map(|v| tags(&v)) {
                Ok(Some(models)) => Ok(models),
                _ => Err(match first {
                    Err(e) => e,
                    _ => ProbeError::NoList,
                }),
            }
        }
    }
}

/// Why a server gave no model list.
#[derive(Debug)]
pub(crate) enum ProbeError {
    /// No answer (refused, unreachable, past the probe's timeout).
    Call(ureq::Error),
    /// An answer with another status than 200.
    Status(u16),
    /// An answer whose body could not be read.
    Body(ureq::Error),
    /// An answer that is not JSON.
    Json(serde_json::Error),
    /// An answer with neither the protocol's model list nor Ollama's tags.
    NoList,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Call(e) | ProbeError::Body(e) => write!(f, "{e}"),
            ProbeError::Status(s) => write!(f, "HTTP {s}"),
            ProbeError::Json(e) => write!(f, "{e}"),
            ProbeError::NoList => write!(f, "no model list in its answer"),
        }
    }
}

impl std::error::Error for ProbeError {}

/// The upstream's name for a discovered server: `local@127.0.0.1:11434`.
pub(crate) fn upstream_name(base_url: &str) -> String {
    let host = base_url
        .split_once("://")
        .map_or(base_url, |(_, rest)| rest.split('/').next().unwrap_or(rest));
    format!("local@{host}")
}

/// Whether a listed model id can be served under its own name: not empty, no whitespace or control
/// characters, and no `*` or `?` (a discovered server is never a catch-all: such ids are skipped, not taken
/// literally, since no client name could be told apart from a pattern).
pub(crate) fn servable(id: &str) -> bool {
    !id.is_empty()
        && !crate::config::names::is_pattern(id)
        && !id.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// `config` with the discovered servers' models added. Configured names win: an id that any configured
/// entry serves (its name, an alias or a pattern matching it) is served as `id@host:port`, or not at all
/// when a configured pattern matches that too; so does a second server's copy of an id. The lookup itself
/// (`config::names`) asks discovered models last, by exact name only.
pub(crate) fn apply(config: &Config, servers: &[LocalServer]) -> Config {
    let mut c = config.clone();
    let template = Config::embedded().models[0].clone();
    for s in servers.iter().filter(|s| !s.models.is_empty()) {
        let name = upstream_name(&s.base_url);
        let host = name.trim_start_matches("local@").to_string();
        c.upstreams.push(Upstream {
            name: name.clone(),
            kind: UpstreamKind::Speaks(LOCAL),
            base_url: s.base_url.clone(),
            api_key: None,
            missing_key: None,
            connect_timeout: Duration::from_secs(2),
            max_completion_tokens: false,
            mock_delay: Duration::ZERO,
            ..config
                .upstreams
                .first()
                .cloned()
                .unwrap_or_else(|| Config::embedded().upstreams[0].clone())
        });
        for id in s.models.iter().filter(|id| servable(id)) {
            // A name any configured entry serves (exact, alias or pattern) stays the operator's.
            let configured = |n: &str| config.model_index.configured(&config.models, n).is_some();
            let listed = |n: &str| c.models[config.models.len()..].iter().any(|m| m.name == n);
            let model_name = if configured(id) || listed(id) {
                format!("{id}@{host}")
            } else {
                id.clone()
            };
            // A second name a configured pattern also matches would be listed yet never reached.
            if configured(&model_name) || listed(&model_name) {
                continue;
            }
            c.models.push(Model {
                name: model_name,
                upstreams: vec![name.clone()],
                upstream_model: id.clone(),
                prices: crate::pricing::PriceSheet::default(),
                aliases: Vec::new(),
                route: Route::Ordered,
                weights: Vec::new(),
                disabled: false,
                discovered: Some(s.base_url.clone()),
                ..template.clone()
            });
        }
    }
    c.model_index = crate::config::names::ModelIndex::build(&c.models);
    c
}

/// The base URLs to probe: `TOLLGATE_DISCOVER` (comma-separated; `off`: none) or the configured list.
pub(crate) fn probe_list(configured: &[String]) -> Vec<String> {
    match std::env::var("TOLLGATE_DISCOVER") {
        Ok(v) if v.trim() == "off" => Vec::new(),
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|s| s.trim().trim_end_matches('/').to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        _ => configured.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Money;

    #[test]
    fn discovered_models_join_the_configured_ones_without_taking_their_names() {
        let config = Config::embedded();
        let servers = vec![
            LocalServer {
                base_url: "http://127.0.0.1:11434/v1".into(),
                models: vec!["qwen3:8b".into(), "mock".into()],
                up: true,
                error: None,
            },
            LocalServer {
                base_url: "http://127.0.0.1:1234/v1".into(),
                models: vec!["qwen3:8b".into()],
                up: true,
                error: None,
            },
        ];
        let c = apply(&config, &servers);
        let m = c.model("qwen3:8b").unwrap();
        assert_eq!(m.upstreams, ["local@127.0.0.1:11434"]);
        assert_eq!(m.prices.base.input, Money::ZERO);
        assert!(
            c.model("qwen3:8b@127.0.0.1:1234").is_some(),
            "the second server's copy"
        );
        assert_eq!(
            c.model("mock").unwrap().discovered,
            None,
            "the configured mock wins"
        );
        assert!(c.model("mock@127.0.0.1:11434").is_some());
        assert!(c.upstream("local@127.0.0.1:1234").is_some());
    }

    /// A local process listing `gpt-4*`, `*` or `gpt-4o` takes nothing from a configured `gpt-*`.
    #[test]
    fn a_discovered_server_never_takes_configured_patterns_nor_becomes_a_catch_all() {
        let config = Config::from_toml_str(
            "[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
             [[models]]\nname = \"gpt-*\"\nupstream = \"mock\"\ninput_price = 1.0\noutput_price = 2.0\n\n\
             [[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        )
        .unwrap();
        let servers = vec![LocalServer {
            base_url: "http://127.0.0.1:11434/v1".into(),
            models: vec![
                "gpt-4*".into(),
                "*".into(),
                "gpt-4o".into(),
                "qwen3".into(),
                "".into(),
                "a b".into(),
            ],
            up: true,
            error: None,
        }];
        let c = apply(&config, &servers);
        for asked in ["gpt-4o", "gpt-4omni", "gpt-4o@127.0.0.1:11434"] {
            let m = c.model(asked).unwrap();
            assert_eq!(m.name, "gpt-*", "{asked} goes to the configured pattern");
            assert_eq!(m.discovered, None);
        }
        assert_eq!(
            c.model("qwen3").unwrap().discovered.as_deref(),
            Some("http://127.0.0.1:11434/v1")
        );
        assert!(c.model("llama3").is_none(), "no catch-all");
        let names: Vec<&str> = c.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["gpt-*", "qwen3"], "nothing unreachable is added");
    }
}
