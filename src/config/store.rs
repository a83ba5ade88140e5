//! `instance` and the `[store]` section: the shared Redis (or Valkey) server that several tollgate instances
//! keep their keys, balances, limits, console changes and usage stream in, reached at its `url` or through
//! the Redis Sentinels that watch it (`sentinels` and `master_name`). Without `[store]` nothing is shared and
//! the flat files in `data_dir` are the truth.

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

/// Which writes wait for a replica's acknowledgement (`WAIT`) before they count as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaWait {
    /// None: Redis replicates asynchronously. The default with `url`.
    Off,
    /// The changes no ledger can restore: key records and their terms (credits, budgets), the console's
    /// overrides, the store's epoch. The default with `sentinels`.
    Changes,
    /// Those, and every admission and settlement on the request path.
    All,
}

impl ReplicaWait {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaWait::Off => "off",
            ReplicaWait::Changes => "changes",
            ReplicaWait::All => "all",
        }
    }
}

/// Where the sentinels are, and the name they know the primary by (`sentinels`, `master_name`).
#[derive(Debug, Clone)]
pub struct SentinelSettings {
    /// `host:port` of each sentinel, as written (the port defaults to 26379).
    pub addresses: Vec<(String, u16)>,
    pub master_name: String,
    /// The variable holding the sentinels' own password (their `requirepass`), if any.
    pub password_env: Option<String>,
    /// The password read from `sentinel_password_env` at load time. Never logged.
    pub password: Option<String>,
    /// `sentinel_password_env` names a variable that is not set.
    pub missing_password: Option<String>,
}

/// The `[store]` section, validated.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// `redis://HOST:PORT/DB` as written (never with a password in it); empty with `sentinels`.
    pub url: String,
    /// The server of `url` (empty with `sentinels`: the sentinels name it).
    pub host: String,
    pub port: u16,
    pub db: i64,
    /// An ACL user name from the URL (`redis://user@host`), or `username` with sentinels, if any.
    pub username: Option<String>,
    /// With `sentinels`: where they are and the primary's name (then `url` is not used).
    pub sentinel: Option<SentinelSettings>,
    /// Which writes wait for a replica (`replica_wait`).
    pub replica_wait: ReplicaWait,
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
    /// How long an allotment (a slice of a busy key's credit and concurrency slots that this instance takes
    /// in one call and admits from without a round trip, `store/allot/`) may be drawn from before the
    /// store is asked again: the most a credit cut, a revocation or an expiry on another instance waits to
    /// hold here. Zero: every admission asks the store.
    pub allot: Duration,
}

impl StoreSettings {
    /// The settings naming an environment variable that is not set here: (setting, variable).
    pub fn missing_variables(&self) -> Vec<(&'static str, &str)> {
        let mut out = Vec::new();
        if let Some(v) = &self.missing_password {
            out.push(("store.password_env", v.as_str()));
        }
        if let Some(v) = self
            .sentinel
            .as_ref()
            .and_then(|s| s.missing_password.as_ref())
        {
            out.push(("store.sentinel_password_env", v.as_str()));
        }
        out
    }

    /// Every address configured (the URL, or each sentinel), for `addresses::register`.
    pub fn addresses(&self) -> Vec<String> {
        match &self.sentinel {
            Some(s) => s.addresses.iter().map(|(h, p)| host_port(h, *p)).collect(),
            None => vec![self.url.clone()],
        }
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    url: Option<String>,
    sentinels: Option<Vec<String>>,
    master_name: Option<String>,
    sentinel_password_env: Option<String>,
    db: Option<i64>,
    username: Option<String>,
    replica_wait: Option<String>,
    password_env: Option<String>,
    prefix: Option<String>,
    on_unavailable: Option<String>,
    timeout_ms: Option<u64>,
    usage_stream_max: Option<u64>,
    lease_secs: Option<u64>,
    allot_ms: Option<u64>,
}

/// Default `usage_stream_max`: about a million records (a few hundred MB of Redis memory at most).
pub(crate) const DEFAULT_STREAM_MAX: u64 = 1_000_000;

/// Default `allot_ms`.
pub(crate) const DEFAULT_ALLOT: Duration = Duration::from_millis(50);

/// `[store]`, every problem at once.
pub(super) fn validate_store(
    raw: RawStore,
    env: &super::Env,
    errors: &mut Vec<ConfigError>,
) -> Option<StoreSettings> {
    let place = place(&raw, env, errors);
    let replica_wait = match raw.replica_wait.as_deref() {
        None if raw.sentinels.is_some() => ReplicaWait::Changes,
        None | Some("off") => ReplicaWait::Off,
        Some("changes") => ReplicaWait::Changes,
        Some("all") => ReplicaWait::All,
        Some(other) => {
            errors.push(err(
                "store.replica_wait",
                format!(
                    "expected \"off\", \"changes\" (key, credit and console changes wait for a replica) or \"all\" \
                     (every admission and settlement too), got {other:?}"
                ),
            ));
            ReplicaWait::Off
        }
    };
    let mut bad = |e: ConfigError| errors.push(e);
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
    let timeout = Duration::from_millis(within(
        raw.timeout_ms,
        (10..=60_000, 500),
        "store.timeout_ms",
        "10 to 60000 milliseconds",
        errors,
    ));
    let usage_stream_max = within(
        raw.usage_stream_max,
        (1_000..=100_000_000, DEFAULT_STREAM_MAX),
        "store.usage_stream_max",
        "1000 to 100000000 records",
        errors,
    );
    let lease = Duration::from_secs(within(
        raw.lease_secs,
        (5..=3600, 30),
        "store.lease_secs",
        "5 to 3600 seconds",
        errors,
    ));
    let allot = Duration::from_millis(within(
        raw.allot_ms,
        (0..=1000, DEFAULT_ALLOT.as_millis() as u64),
        "store.allot_ms",
        "0 (every admission asks the store) to 1000 milliseconds",
        errors,
    ));
    let mut bad = |e: ConfigError| errors.push(e);
    if let Some(env) = &raw.password_env {
        if env.is_empty() {
            bad(err(
                "store.password_env",
                "expected the name of an environment variable, got an empty string",
            ));
        }
    }
    let (password, missing_password) = read_password(env, raw.password_env.as_deref());
    let p = place?;
    Some(StoreSettings {
        url: p.url,
        host: p.host,
        port: p.port,
        db: p.db,
        username: p.username,
        sentinel: p.sentinel,
        replica_wait,
        password_env: raw.password_env,
        password,
        missing_password,
        prefix,
        on_unavailable,
        timeout,
        usage_stream_max,
        lease,
        allot,
    })
}

/// A number given in `value` within `range` (`default` when absent); out of it, an error naming `field`
/// with what it takes (`expected`), and the default.
fn within(
    value: Option<u64>,
    (range, default): (std::ops::RangeInclusive<u64>, u64),
    field: &str,
    expected: &str,
    errors: &mut Vec<ConfigError>,
) -> u64 {
    match value {
        None => default,
        Some(n) if range.contains(&n) => n,
        Some(n) => {
            errors.push(err(field, format!("expected {expected}, got {n}")));
            default
        }
    }
}

/// The password in the variable `env` names: (password, the variable when it is not set).
fn read_password(env: &super::Env, var: Option<&str>) -> (Option<String>, Option<String>) {
    match var {
        Some(var) if !var.is_empty() => match env.var(var) {
            Some(p) if !p.is_empty() => (Some(p), None),
            _ => (None, Some(var.to_string())),
        },
        _ => (None, None),
    }
}

/// Where the store is: its `url`, or its sentinels.
struct Place {
    url: String,
    host: String,
    port: u16,
    db: i64,
    username: Option<String>,
    sentinel: Option<SentinelSettings>,
}

/// `url`, or `sentinels` with `master_name` (and `db`, `username`, `sentinel_password_env`): exactly one.
fn place(raw: &RawStore, env: &super::Env, errors: &mut Vec<ConfigError>) -> Option<Place> {
    let sentinel_only = [
        ("store.master_name", raw.master_name.is_some()),
        (
            "store.sentinel_password_env",
            raw.sentinel_password_env.is_some(),
        ),
        ("store.db", raw.db.is_some()),
        ("store.username", raw.username.is_some()),
    ];
    match (&raw.url, &raw.sentinels) {
        (Some(_), Some(_)) => {
            errors.push(err(
                "store.sentinels",
                "give either url (one Redis server) or sentinels with master_name (a primary the sentinels \
                 watch), not both",
            ));
            None
        }
        (None, None) => {
            errors.push(err(
                "store.url",
                "expected the Redis server's address, such as redis://127.0.0.1:6379/0, or sentinels = \
                 [\"host:26379\", ...] with master_name",
            ));
            None
        }
        (Some(url), None) => {
            let mut ok = true;
            for (field, set) in sentinel_only {
                if set {
                    ok = false;
                    errors.push(err(
                        field,
                        "only with sentinels; with url the database and user are part of the url \
                         (redis://user@host:6379/0)",
                    ));
                }
            }
            match parse_url(url) {
                Ok(p) => ok.then(|| Place {
                    url: url.clone(),
                    host: p.host,
                    port: p.port,
                    db: p.db,
                    username: p.username,
                    sentinel: None,
                }),
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        }
        (None, Some(list)) => sentinels(raw, list, env, errors),
    }
}

/// `sentinels`, `master_name`, `db`, `username` and `sentinel_password_env`.
fn sentinels(
    raw: &RawStore,
    list: &[String],
    env: &super::Env,
    errors: &mut Vec<ConfigError>,
) -> Option<Place> {
    let before = errors.len();
    let mut addresses: Vec<(String, u16)> = Vec::new();
    if list.is_empty() {
        errors.push(err(
            "store.sentinels",
            "expected the address of every sentinel, such as [\"10.0.0.5:26379\", \"10.0.0.6:26379\", \
             \"10.0.0.7:26379\"]",
        ));
    }
    for a in list {
        match parse_host_port(a, 26379) {
            Some(hp) if addresses.contains(&hp) => errors.push(err(
                "store.sentinels",
                format!("{a:?} is listed twice"),
            )),
            Some(hp) => addresses.push(hp),
            None => errors.push(err(
                "store.sentinels",
                format!("expected HOST:PORT such as \"10.0.0.5:26379\" (no scheme, no password), got {a:?}"),
            )),
        }
    }
    let master_name = raw.master_name.clone().unwrap_or_default();
    if master_name.is_empty()
        || master_name.len() > 128
        || master_name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        errors.push(err(
            "store.master_name",
            match &raw.master_name {
                None => "expected the name the sentinels know the primary by (`sentinel monitor NAME ...`)"
                    .to_string(),
                Some(n) => format!("expected a name without spaces, such as \"tollgate\", got {n:?}"),
            },
        ));
    }
    let db = raw.db.unwrap_or(0);
    if !(0..=15_000).contains(&db) {
        errors.push(err(
            "store.db",
            format!("expected a database number such as 0, got {db}"),
        ));
    }
    if let Some(u) = &raw.username {
        if u.is_empty() || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
            errors.push(err(
                "store.username",
                format!("expected an ACL user name without spaces, got {u:?}"),
            ));
        }
    }
    if raw.sentinel_password_env.as_deref() == Some("") {
        errors.push(err(
            "store.sentinel_password_env",
            "expected the name of an environment variable, got an empty string",
        ));
    }
    if errors.len() > before {
        return None;
    }
    let (password, missing_password) = read_password(env, raw.sentinel_password_env.as_deref());
    Some(Place {
        url: String::new(),
        host: String::new(),
        port: 0,
        db,
        username: raw.username.clone(),
        sentinel: Some(SentinelSettings {
            addresses,
            master_name,
            password_env: raw.sentinel_password_env.clone(),
            password,
            missing_password,
        }),
    })
}

/// `host`, `host:port` or `[v6]:port` (a bare IPv6 address takes the default port).
fn parse_host_port(text: &str, default_port: u16) -> Option<(String, u16)> {
    let text = text.trim();
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (h.to_string(), after.strip_prefix(':'))
    } else if text.matches(':').count() > 1 {
        (text.to_string(), None)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (text.to_string(), None),
        }
    };
    if host.is_empty()
        || host
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '[' | ']'))
    {
        return None;
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
    };
    Some((host, port))
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
pub(crate) fn host_name() -> String {
    // uname's node name is the host name (glibc's and macOS's gethostname read the same).
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
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

    fn store(text: &str) -> (Option<StoreSettings>, Vec<String>) {
        let raw: RawStore = toml::from_str(text).unwrap();
        let mut errors = Vec::new();
        let s = validate_store(raw, &crate::config::Env::process(), &mut errors);
        (s, errors.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn sentinels_instead_of_a_url() {
        let (s, errors) = store(
            "sentinels = [\"10.0.0.5:26380\", \"sentinel-b\", \"[::1]:26381\"]\nmaster_name = \"tg\"\ndb = 2\n\
             username = \"app\"",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let s = s.unwrap();
        let sentinel = s.sentinel.as_ref().unwrap();
        assert_eq!(
            sentinel.addresses,
            vec![
                ("10.0.0.5".to_string(), 26380),
                ("sentinel-b".to_string(), 26379),
                ("::1".to_string(), 26381)
            ]
        );
        assert_eq!(sentinel.master_name, "tg");
        assert_eq!((s.db, s.username.as_deref()), (2, Some("app")));
        assert_eq!(s.replica_wait, ReplicaWait::Changes);
        assert_eq!(
            s.addresses(),
            vec!["10.0.0.5:26380", "sentinel-b:26379", "[::1]:26381"]
        );
        // With a url nothing changes: no replica waits unless asked for.
        let (s, errors) = store("url = \"redis://h:6379/1\"");
        assert!(errors.is_empty(), "{errors:?}");
        let s = s.unwrap();
        assert!(s.sentinel.is_none());
        assert_eq!((s.replica_wait, s.db), (ReplicaWait::Off, 1));
        let (s, _) = store("url = \"redis://h\"\nreplica_wait = \"all\"");
        assert_eq!(s.unwrap().replica_wait, ReplicaWait::All);
    }

    #[test]
    fn sentinel_mistakes_are_named() {
        let cases = [
            (
                "url = \"redis://h\"\nsentinels = [\"h:26379\"]\nmaster_name = \"m\"",
                "store.sentinels",
            ),
            ("sentinels = [\"h:26379\"]", "store.master_name"),
            ("sentinels = []\nmaster_name = \"m\"", "store.sentinels"),
            (
                "sentinels = [\"h:26379\", \"h:26379\"]\nmaster_name = \"m\"",
                "listed twice",
            ),
            (
                "sentinels = [\"redis://h:26379\"]\nmaster_name = \"m\"",
                "store.sentinels",
            ),
            (
                "sentinels = [\"h:0\"]\nmaster_name = \"m\"",
                "store.sentinels",
            ),
            (
                "sentinels = [\"h\"]\nmaster_name = \"a b\"",
                "store.master_name",
            ),
            ("url = \"redis://h\"\ndb = 1", "store.db"),
            (
                "url = \"redis://h\"\nmaster_name = \"m\"",
                "store.master_name",
            ),
            (
                "sentinels = [\"h\"]\nmaster_name = \"m\"\ndb = -1",
                "store.db",
            ),
            (
                "sentinels = [\"h\"]\nmaster_name = \"m\"\nreplica_wait = \"some\"",
                "store.replica_wait",
            ),
            ("prefix = \"x:\"", "sentinels"),
        ];
        for (text, want) in cases {
            let (s, errors) = store(text);
            assert!(s.is_none() || !errors.is_empty(), "{text}: accepted");
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{text}: {errors:?} names no {want}"
            );
        }
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
