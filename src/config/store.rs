//! `instance` and the `[store]` section: the shared Redis (or Valkey) server that several tollgate instances
//! keep their keys, balances, limits, console changes and usage stream in. Without `[store]` nothing is
//! shared and the flat files in `data_dir` are the truth.

use std::time::Duration;

use serde::Deserialize;

use super::{err, ConfigError};

/// What admission does while the store does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// Refuse model requests with 503 naming the store (`/readyz` is 503 too). The default.
    Closed,
    /// Admit with this instance's own limits and the balances last read from the store; the spend is
    /// shipped, exactly, when the store answers again.
    Local,
}

impl OnUnavailable {
    pub fn name(self) -> &'static str {
        match self {
            OnUnavailable::Closed => "closed",
            OnUnavailable::Local => "local",
        }
    }
}

/// The `[store]` section, validated.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `redis://HOST:PORT/DB` as written (never with a password in it).
    pub url: String,
    pub host: String,
    pub port: u16,
    pub db: i64,
    /// An ACL user name from the URL (`redis://user@host`), if any.
    pub username: Option<String>,
    /// The variable holding the password, if any.
    pub password_env: Option<String>,
    /// The password read from `password_env` at load time. Never logged.
    pub password: Option<String>,
    /// `password_env` names a variable that is not set.
    pub missing_password: Option<String>,
    /// Prefix of every Redis key (`tollgate:`), so that two gateways can share one server.
    pub prefix: String,
    pub on_unavailable: OnUnavailable,
    /// The longest any one Redis call may take (connecting included) before the store counts as down.
    pub timeout: Duration,
    /// The usage stream keeps about this many records (older ones are trimmed).
    pub usage_stream_max: u64,
    /// How long a reservation of an instance that stopped renewing it (killed) holds its credit and its
    /// concurrency slot.
    pub lease: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    url: Option<String>,
    password_env: Option<String>,
    prefix: Option<String>,
    on_unavailable: Option<String>,
    timeout_ms: Option<u64>,
    usage_stream_max: Option<u64>,
    lease_secs: Option<u64>,
}

/// Default `usage_stream_max`: about a million records (a few hundred MB of Redis memory at most).
pub const DEFAULT_STREAM_MAX: u64 = 1_000_000;

/// `[store]`, every problem at once.
pub(super) fn validate_store(
    raw: RawStore,
    errors: &mut Vec<ConfigError>,
) -> Option<StoreSettings> {
    let mut bad = |e: ConfigError| errors.push(e);
    let url = match raw.url {
        Some(u) => u,
        None => {
            bad(err(
                "store.url",
                "expected the Redis server's address, such as redis://127.0.0.1:6379/0",
            ));
            return None;
        }
    };
    let parts = match parse_url(&url) {
        Ok(p) => Some(p),
        Err(e) => {
            bad(e);
            None
        }
    };
    let prefix = raw.prefix.unwrap_or_else(|| "tollgate:".into());
    if prefix.is_empty()
        || prefix.len() > 64
        || prefix.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        bad(err(
            "store.prefix",
            format!(
                "expected a short prefix without spaces, such as \"tollgate:\", got {prefix:?}"
            ),
        ));
    }
    let on_unavailable = match raw.on_unavailable.as_deref() {
        None | Some("closed") => OnUnavailable::Closed,
        Some("local") => OnUnavailable::Local,
        Some(other) => {
            bad(err(
                "store.on_unavailable",
                format!("expected \"closed\" (refuse with 503) or \"local\" (admit on this instance's own limits), got {other:?}"),
            ));
            OnUnavailable::Closed
        }
    };
    let timeout = match raw.timeout_ms {
        None => Duration::from_millis(500),
        Some(n) if (10..=60_000).contains(&n) => Duration::from_millis(n),
        Some(n) => {
            bad(err(
                "store.timeout_ms",
                format!("expected 10 to 60000 milliseconds, got {n}"),
            ));
            Duration::from_millis(500)
        }
    };
    let usage_stream_max = match raw.usage_stream_max {
        None => DEFAULT_STREAM_MAX,
        Some(n) if (1_000..=100_000_000).contains(&n) => n,
        Some(n) => {
            bad(err(
                "store.usage_stream_max",
                format!("expected 1000 to 100000000 records, got {n}"),
            ));
            DEFAULT_STREAM_MAX
        }
    };
    let lease = match raw.lease_secs {
        None => Duration::from_secs(30),
        Some(n) if (5..=3600).contains(&n) => Duration::from_secs(n),
        Some(n) => {
            bad(err(
                "store.lease_secs",
                format!("expected 5 to 3600 seconds, got {n}"),
            ));
            Duration::from_secs(30)
        }
    };
    if let Some(env) = &raw.password_env {
        if env.is_empty() {
            bad(err(
                "store.password_env",
                "expected the name of an environment variable, got an empty string",
            ));
        }
    }
    let (password, missing_password) = match raw.password_env.as_deref() {
        Some(env) if !env.is_empty() => match std::env::var(env) {
            Ok(p) if !p.is_empty() => (Some(p), None),
            _ => (None, Some(env.to_string())),
        },
        _ => (None, None),
    };
    let p = parts?;
    Some(StoreSettings {
        url,
        host: p.host,
        port: p.port,
        db: p.db,
        username: p.username,
        password_env: raw.password_env,
        password,
        missing_password,
        prefix,
        on_unavailable,
        timeout,
        usage_stream_max,
        lease,
    })
}

#[derive(Debug)]
struct UrlParts {
    host: String,
    port: u16,
    db: i64,
    username: Option<String>,
}

/// `redis://[user@]host[:port][/db]`; a password in the URL is refused (it belongs in `password_env`).
fn parse_url(url: &str) -> Result<UrlParts, ConfigError> {
    let field = "store.url";
    let expected = "expected redis://HOST:PORT/DB, such as redis://127.0.0.1:6379/0";
    if url.starts_with("rediss://") {
        return Err(err(
            field,
            "TLS (rediss://) is not built into tollgate: reach Redis over a private network or a local TLS \
             tunnel (stunnel, spiped) and give its redis:// address",
        ));
    }
    let Some(rest) = url.strip_prefix("redis://") else {
        return Err(err(field, format!("{expected}; got {url:?}")));
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if user.is_some_and(|u| u.contains(':')) {
        return Err(err(
            field,
            "the URL holds a password: keep it out of the file and name the variable that holds it with \
             store.password_env",
        ));
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| err(field, format!("{expected}; got {url:?}")))?;
        (h.to_string(), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(err(field, format!("{expected}; got {url:?}")));
    }
    let port = match port {
        None => 6379,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| err(field, format!("the port must be 1 to 65535; got {url:?}")))?,
    };
    let db = match path.trim_end_matches('/') {
        "" => 0,
        d => d
            .parse::<i64>()
            .ok()
            .filter(|d| (0..=15_000).contains(d))
            .ok_or_else(|| {
                err(
                    field,
                    format!("the database must be a number such as 0; got {url:?}"),
                )
            })?,
    };
    Ok(UrlParts {
        host,
        port,
        db,
        username: user.filter(|u| !u.is_empty()).map(str::to_string),
    })
}

/// `instance`: a short name for this instance in usage records (the host name when unset).
pub(super) fn validate_instance(v: Option<String>) -> Result<(String, bool), ConfigError> {
    let (name, set) = match v {
        Some(n) => (n, true),
        None => (host_name(), false),
    };
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        let what = if set { "" } else { " (the host name)" };
        return Err(err(
            "instance",
            format!(
                "expected a short name of letters, digits, `-`, `_` and `.`, such as \"gw-1\"; got {name:?}{what}"
            ),
        ));
    }
    Ok((name, set))
}

/// This machine's host name (`tollgate` when it cannot be read).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "tollgate".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).to_string();
    // The first label only: `gw-1.example.net` is `gw-1`.
    let first = name.split('.').next().unwrap_or("").to_string();
    if first.is_empty() {
        "tollgate".into()
    } else {
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = parse_url("redis://127.0.0.1:6380/2").unwrap();
        assert_eq!((p.host.as_str(), p.port, p.db), ("127.0.0.1", 6380, 2));
        let p = parse_url("redis://cache").unwrap();
        assert_eq!((p.host.as_str(), p.port, p.db), ("cache", 6379, 0));
        let p = parse_url("redis://app@[::1]:7000/").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("::1", 7000));
        assert_eq!(p.username.as_deref(), Some("app"));
        let e = parse_url("redis://:secret@host:6379/0").unwrap_err();
        assert!(e.message.contains("password_env"), "{e}");
        assert!(!e.message.contains("secret"));
        assert!(parse_url("rediss://host")
            .unwrap_err()
            .message
            .contains("TLS"));
        assert!(parse_url("http://host").is_err());
        assert!(parse_url("redis://host:0").is_err());
        assert!(parse_url("redis://host/x").is_err());
    }

    #[test]
    fn instance_names() {
        assert_eq!(
            validate_instance(Some("gw-1".into())).unwrap(),
            ("gw-1".to_string(), true)
        );
        assert!(validate_instance(Some("gw 1".into())).is_err());
        assert!(validate_instance(Some(String::new())).is_err());
        assert!(validate_instance(None).is_ok());
    }
}
