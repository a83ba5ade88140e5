//! Every field a config file may hold, by table, with the kind of value it takes: what `shape.rs` checks a
//! file against (unknown fields with the likely intended name, values of the wrong kind, each with its line)
//! before the file is read into the raw structs of `validate.rs`. docs/CONFIG.md has one row per field here
//! (a test holds the two, and the raw structs, to the same names).

/// The kind of value a field takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A string.
    Str,
    /// A whole number of 0 or more.
    Count,
    /// Any whole number.
    Int,
    /// A number (whole or not): prices, multipliers, sizes in MB.
    Num,
    /// `true` or `false`.
    Bool,
    /// A list of strings.
    StrList,
    /// A list of whole numbers of 0 or more (`weights`).
    CountList,
    /// A string, or a list of strings.
    StrOrList,
    /// A table of names to numbers (`allow_hosted_tools = { web_search = 10 }`).
    NumMap,
    /// A table of these fields.
    Table(&'static [Field]),
    /// A list of tables of these fields (`[[models]]`).
    Tables(&'static [Field]),
}

impl FieldKind {
    /// How the kind is named in an error ("a string", "a list of tables").
    pub fn described(self) -> &'static str {
        match self {
            FieldKind::Str => "a string",
            FieldKind::Count => "a whole number of 0 or more",
            FieldKind::Int => "a whole number",
            FieldKind::Num => "a number",
            FieldKind::Bool => "true or false",
            FieldKind::StrList => "a list of strings",
            FieldKind::CountList => "a list of whole numbers",
            FieldKind::StrOrList => "a string or a list of strings",
            FieldKind::NumMap => "a table of names to numbers",
            FieldKind::Table(_) => "a table",
            FieldKind::Tables(_) => "a list of tables",
        }
    }
}

/// One field: its name, its kind, and whether a table of its kind needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The field's name as the file writes it.
    pub name: &'static str,
    /// The kind of value it takes.
    pub kind: FieldKind,
    /// Every entry of its table must have it (else `check` reports it missing).
    pub required: bool,
}

const fn f(name: &'static str, kind: FieldKind) -> Field {
    Field {
        name,
        kind,
        required: false,
    }
}

const fn required(name: &'static str, kind: FieldKind) -> Field {
    Field {
        name,
        kind,
        required: true,
    }
}

use FieldKind::*;

/// `[[upstreams]]`.
pub const UPSTREAM: &[Field] = &[
    required("name", Str),
    required("kind", Str),
    f("base_url", Str),
    f("api_key_env", Str),
    f("api_key_envs", StrList),
    f("connect_timeout_secs", Count),
    f("first_byte_timeout_secs", Count),
    f("idle_timeout_secs", Count),
    f("total_timeout_secs", Count),
    f("mock_delay_ms", Count),
    f("max_tokens_field", Str),
    f("breaker_failures", Count),
    f("breaker_cooldown_secs", Count),
];

/// `[[models.tiers]]`.
pub const TIER: &[Field] = &[
    f("above_input_tokens", Count),
    f("input_price", Num),
    f("cached_input_price", Num),
    f("cache_write_price", Num),
    f("cache_write_1h_price", Num),
    f("output_price", Num),
];

/// `[[models]]`.
pub const MODEL: &[Field] = &[
    required("name", Str),
    required("upstream", StrOrList),
    f("upstream_model", Str),
    f("aliases", StrList),
    f("route", Str),
    f("weights", CountList),
    f("input_price", Num),
    f("cached_input_price", Num),
    f("cache_write_price", Num),
    f("cache_write_1h_price", Num),
    f("output_price", Num),
    f("prices", Str),
    f("tiers", Tables(TIER)),
    f("max_output_tokens", Count),
    f("image_tokens", Count),
    f("structured_output", Str),
    f("reasoning", Bool),
    f("account_features", Bool),
    f("allow_hosted_tools", NumMap),
    f("allow_service_tiers", NumMap),
    f("max_hosted_uses", Count),
    f("allow_inference_geo", Num),
    f("cache_ttl_secs", Count),
    f("cache_scope", Str),
];

/// `[[groups]]`.
pub const GROUP: &[Field] = &[
    required("name", Str),
    required("models", StrList),
    f("rpm", Count),
    f("tpm", Count),
    f("max_concurrent", Count),
    f("budget", Num),
    f("budget_period", Str),
];

/// `[discovery]`.
pub const DISCOVERY: &[Field] = &[f("probe", StrList), f("interval_secs", Count)];

/// `[store]`.
pub const STORE: &[Field] = &[
    f("url", Str),
    f("sentinels", StrList),
    f("master_name", Str),
    f("sentinel_password_env", Str),
    f("db", Int),
    f("username", Str),
    f("password_env", Str),
    f("replica_wait", Str),
    f("prefix", Str),
    f("on_unavailable", Str),
    f("timeout_ms", Count),
    f("usage_stream_max", Count),
    f("lease_secs", Count),
    f("allot_ms", Count),
];

/// The file's top level.
pub const TOP: &[Field] = &[
    f("listen", Str),
    f("data_dir", Str),
    f("admin_token_env", Str),
    f("instance", Str),
    f("workers", Count),
    f("queue_size", Count),
    f("max_connections", Count),
    f("max_connections_per_client", Count),
    f("exempt_clients", StrList),
    f("max_body_bytes", Count),
    f("max_buffered_body_bytes", Count),
    f("read_timeout_secs", Count),
    f("write_timeout_secs", Count),
    f("shutdown_grace_secs", Count),
    f("keepalive_secs", Count),
    f("client_left_grace_secs", Count),
    f("ledger_sync_ms", Count),
    f("ledger_strict", Bool),
    f("ledger_backlog_records", Count),
    f("ledger_max_file_mb", Num),
    f("ledger_retention_days", Count),
    f("ledger_compress_after_days", Count),
    f("ledger_checkpoint_records", Count),
    f("ledger_checkpoint_secs", Count),
    f("min_free_disk_mb", Count),
    f("log_level", Str),
    f("log_format", Str),
    f("metrics_auth", Bool),
    f("currency", Str),
    f("cache_max_mb", Num),
    f("discovery", Table(DISCOVERY)),
    f("store", Table(STORE)),
    f("upstreams", Tables(UPSTREAM)),
    f("models", Tables(MODEL)),
    f("groups", Tables(GROUP)),
];

/// Every table of fields, by the name docs/CONFIG.md gives its section (`top level`, `[[models]]`, ...).
pub const TABLES: &[(&str, &[Field])] = &[
    ("top level", TOP),
    ("[[upstreams]]", UPSTREAM),
    ("[[models]]", MODEL),
    ("[[models.tiers]]", TIER),
    ("[[groups]]", GROUP),
    ("[discovery]", DISCOVERY),
    ("[store]", STORE),
];
