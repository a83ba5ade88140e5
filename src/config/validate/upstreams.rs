//! The `[[upstreams]]` entries: each checked (name, credentials, kind and base URL, timeouts, breaker, the
//! output limit's field), an upstream with several credentials expanded into one deployment each, and the
//! warnings for what will not work as meant (a base URL that doubles its version, an OpenAI host with a
//! wrong path).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{secs, Problems, RawUpstream};
use crate::config::{err, ConfigError, Env, Upstream, UpstreamKind};

/// The `[[upstreams]]` entries, an upstream with several credentials as one deployment each; and those
/// deployments' names by their upstream's name.
pub(super) fn validate_upstreams(
    raw: Vec<RawUpstream>,
    env: &Env,
    p: &mut Problems,
) -> (Vec<Upstream>, HashMap<String, Vec<String>>) {
    let mut seen = HashSet::new();
    let mut upstreams = Vec::new();
    let mut deployments: HashMap<String, Vec<String>> = HashMap::new();
    for (i, u) in raw.into_iter().enumerate() {
        let envs = u.api_key_envs.clone();
        let u = match validate_upstream(i, u, env, &mut seen) {
            Ok(u) => u,
            Err(errors) => {
                p.errors.extend(errors);
                continue;
            }
        };
        upstream_warnings(i, &u, &mut p.warnings);
        match envs {
            Some(envs) => {
                let name = u.name.clone();
                let each = per_credential(u, &envs, env);
                deployments.insert(name, each.iter().map(|d| d.name.clone()).collect());
                upstreams.extend(each);
            }
            None => upstreams.push(u),
        }
    }
    (upstreams, deployments)
}

/// One `[[upstreams]]` entry (`seen`: the names so far), every problem of it.
fn validate_upstream(
    i: usize,
    u: RawUpstream,
    env: &Env,
    seen: &mut HashSet<String>,
) -> Result<Upstream, Vec<ConfigError>> {
    let f = |k: &str| format!("upstreams[{i}].{k}");
    let mut p = Problems::default();
    p.take(check_upstream_name(&u.name, seen, &f), ());
    p.take(check_credentials(&u, &f), ());
    let kind_url = kind_and_url(&u.kind, u.base_url, &f);
    let is_openai = kind_url
        .as_ref()
        .is_ok_and(|(_, url)| url.contains("://api.openai.com"));
    let connect_timeout = p.take(
        secs(&f("connect_timeout_secs"), u.connect_timeout_secs, 10),
        Duration::ZERO,
    );
    let first_byte_timeout = p.take(
        secs(
            &f("first_byte_timeout_secs"),
            u.first_byte_timeout_secs,
            600,
        ),
        Duration::ZERO,
    );
    let idle_timeout = p.take(
        secs(&f("idle_timeout_secs"), u.idle_timeout_secs, 300),
        Duration::ZERO,
    );
    let total_timeout = p.take(
        secs(&f("total_timeout_secs"), u.total_timeout_secs, 3600),
        Duration::ZERO,
    );
    let breaker_failures = p.take(breaker_failures(u.breaker_failures, &f), 0);
    let breaker_cooldown = p.take(
        secs(&f("breaker_cooldown_secs"), u.breaker_cooldown_secs, 30),
        Duration::ZERO,
    );
    let max_completion_tokens = p.take(
        max_completion_tokens(u.max_tokens_field.as_deref(), is_openai, &f),
        false,
    );
    let (kind, base_url) = match kind_url {
        Ok(k) if p.errors.is_empty() => k,
        other => {
            p.errors.extend(other.err());
            return Err(p.errors);
        }
    };
    let (api_key, missing_key) = credential(env, u.api_key_env.as_deref());
    Ok(Upstream {
        name: u.name,
        kind,
        base_url,
        api_key,
        missing_key,
        connect_timeout,
        first_byte_timeout,
        idle_timeout,
        mock_delay: Duration::from_millis(u.mock_delay_ms.unwrap_or(0)),
        total_timeout,
        breaker_failures,
        breaker_cooldown,
        max_completion_tokens,
    })
}

/// An upstream's name: not empty, not taken, and without `#` (which names one credential's deployment).
fn check_upstream_name(
    name: &str,
    seen: &mut HashSet<String>,
    f: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(err(f("name"), "expected a non-empty name"));
    }
    if !seen.insert(name.to_string()) {
        return Err(err(f("name"), format!("duplicate upstream name {name:?}")));
    }
    if name.contains('#') {
        return Err(err(
            f("name"),
            format!(
                "expected a name without `#` (it names one credential's deployment), got {name:?}"
            ),
        ));
    }
    Ok(())
}

/// `api_key_env` (one credential) or `api_key_envs` (several, at least one), not both.
fn check_credentials(u: &RawUpstream, f: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    match (&u.api_key_env, &u.api_key_envs) {
        (Some(_), Some(_)) => Err(err(
            f("api_key_envs"),
            "give api_key_env (one credential) or api_key_envs (several), not both",
        )),
        (None, Some(v)) if v.is_empty() => Err(err(
            f("api_key_envs"),
            "expected at least one variable name",
        )),
        _ => Ok(()),
    }
}

/// The key in the variable `env` names, or (when it is unset or empty) the variable's name as missing. An
/// unset variable does not stop the gateway: the upstream answers 502 naming it.
fn credential(env: &Env, var: Option<&str>) -> (Option<String>, Option<String>) {
    let api_key = var.and_then(|var| env.var(var)).filter(|v| !v.is_empty());
    let missing_key = match (var, &api_key) {
        (Some(var), None) => Some(var.to_string()),
        _ => None,
    };
    (api_key, missing_key)
}

/// `breaker_failures`: failures in a row before the breaker skips the upstream (5 when unset).
fn breaker_failures(v: Option<u32>, f: &dyn Fn(&str) -> String) -> Result<u32, ConfigError> {
    match v {
        Some(0) => Err(err(
            f("breaker_failures"),
            "expected a number of failures greater than 0",
        )),
        Some(n) => Ok(n),
        None => Ok(5),
    }
}

/// `max_tokens_field`: whether the output limit is sent as `max_completion_tokens` (unset: only to
/// api.openai.com) or as `max_tokens`.
fn max_completion_tokens(
    v: Option<&str>,
    is_openai: bool,
    f: &dyn Fn(&str) -> String,
) -> Result<bool, ConfigError> {
    match v {
        None => Ok(is_openai),
        Some("max_tokens") => Ok(false),
        Some("max_completion_tokens") => Ok(true),
        Some(other) => Err(err(
            f("max_tokens_field"),
            format!("expected \"max_tokens\" or \"max_completion_tokens\", got {other:?}"),
        )),
    }
}

/// An upstream's kind and its base URL (required, http or https, without a trailing slash; none for the
/// mock).
fn kind_and_url(
    kind: &str,
    base_url: Option<String>,
    f: &dyn Fn(&str) -> String,
) -> Result<(UpstreamKind, String), ConfigError> {
    let Some(kind) = UpstreamKind::parse(kind) else {
        return Err(err(
            f("kind"),
            format!("expected one of {}; got {kind:?}", UpstreamKind::names()),
        ));
    };
    let base_url = match (kind, base_url) {
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
    Ok((kind, base_url))
}

/// One deployment per credential of an upstream with `api_key_envs`: `name#1`, `name#2`, ..., each with its
/// own key (or the variable it misses), balanced and cooled down one by one. Only the deployment's name
/// appears in records, metrics and logs, never the credential.
fn per_credential(u: Upstream, envs: &[String], env: &Env) -> Vec<Upstream> {
    envs.iter()
        .enumerate()
        .map(|(k, var)| {
            let key = env.var(var).filter(|v| !v.is_empty());
            Upstream {
                name: format!("{}#{}", u.name, k + 1),
                missing_key: key.is_none().then(|| var.clone()),
                api_key: key,
                ..u.clone()
            }
        })
        .collect()
}

/// Base URLs that cannot work as written: a full endpoint path (the gateway appends it), an Anthropic URL
/// with `/v1` (Anthropic's paths start with `/v1`), a known vendor's OpenAI-style API without `/v1`.
fn upstream_warnings(i: usize, u: &Upstream, warnings: &mut Vec<String>) {
    let Some(protocol) = u.kind.protocol() else {
        return;
    };
    let field = format!("upstreams[{i}].base_url");
    let url = u.base_url.to_ascii_lowercase();
    let path = url
        .split_once("://")
        .map_or("", |(_, rest)| rest.find('/').map_or("", |at| &rest[at..]));
    let host = url
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', ':']).next().unwrap_or(""));
    let endpoint = [
        "/chat/completions",
        "/completions",
        "/responses",
        "/messages",
        "/messages/count_tokens",
    ]
    .into_iter()
    .find(|ep| path.ends_with(ep));
    if let Some(ep) = endpoint {
        let base = &u.base_url[..u.base_url.len() - ep.len()];
        warnings.push(format!(
            "{field}: {:?} ends with the endpoint path `{ep}`, which tollgate appends itself (requests would go to \
             `…{ep}{ep}`); use {base:?}",
            u.base_url
        ));
    } else if let Some(version) = doubled_version(protocol, path) {
        let sent = protocol.upstream_path;
        warnings.push(format!(
            "{field}: an {} upstream's base URL goes without `{version}` (tollgate sends to `{sent}` under it; \
             this one would get `{version}{sent}`); use {:?}",
            u.kind.name(),
            &u.base_url[..u.base_url.len() - version.len()]
        ));
    } else if protocol.base_url_has_v1 && !path.ends_with("/v1") {
        if let Some(expected) = known_openai_base(host) {
            warnings.push(format!(
                "{field}: {host} serves its OpenAI-style API under `{expected}`; use \"https://{host}{expected}\" \
                 (tollgate appends `/chat/completions` or `/responses` to the base URL)"
            ));
        }
    }
}

/// The version (`/v1`, `/v1beta`) a base URL ends with that the protocol's upstream path begins with
/// itself (so requests would carry it twice), for protocols whose base URLs go without one.
fn doubled_version(protocol: crate::protocol::Protocol, path: &str) -> Option<&'static str> {
    if protocol.base_url_has_v1 {
        return None;
    }
    let sent = protocol.upstream_path;
    let version = sent[1..].find('/').map(|at| &sent[..at + 1])?;
    path.ends_with(version).then_some(version)
}

/// The API path of known vendors' OpenAI-compatible endpoints.
fn known_openai_base(host: &str) -> Option<&'static str> {
    match host {
        "api.openai.com" | "api.mistral.ai" | "api.together.xyz" | "api.x.ai"
        | "api.fireworks.ai" => Some("/v1"),
        "api.groq.com" => Some("/openai/v1"),
        "openrouter.ai" => Some("/api/v1"),
        _ => None,
    }
}
