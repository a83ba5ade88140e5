//! The command line's arguments: every command and its options, parsed by `argh` (an unusable value is
//! refused with the usage text).

use std::path::PathBuf;

use argh::FromArgs;

#[derive(FromArgs)]
/// tollgate: one small binary that serves OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and
/// Gemini API clients in front of any upstream, with keys, groups, limits, budgets and usage records.
pub struct Args {
    /// the command to run (serve, keys, check, models, store, doctor, admin-token or usage)
    #[argh(subcommand)]
    pub command: Command,
}

#[derive(FromArgs)]
#[argh(subcommand)]
pub enum Command {
    Serve(ServeArgs),
    Keys(KeysArgs),
    Check(CheckArgs),
    Models(ModelsArgs),
    Store(StoreArgs),
    Doctor(crate::doctor::DoctorArgs),
    AdminToken(AdminTokenArgs),
    Usage(UsageArgs),
}

#[derive(FromArgs)]
/// Usage records, newest first, read from the ledger (or the [store]): no admin token, no running server.
#[argh(subcommand, name = "usage")]
pub struct UsageArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// only this key's records
    #[argh(option)]
    pub key: Option<String>,
    /// only this model's records (the serving entry's name)
    #[argh(option)]
    pub model: Option<String>,
    /// a status (200), a class (4xx), client_closed, shutdown or error
    #[argh(option)]
    pub status: Option<String>,
    /// the record of the request a client sent with this X-Client-Request-ID
    #[argh(option)]
    pub client_request_id: Option<String>,
    /// the record of the request with this id (x-request-id)
    #[argh(option)]
    pub request_id: Option<String>,
    /// records of requests from this time on (RFC 3339 or Unix seconds)
    #[argh(option)]
    pub since: Option<String>,
    /// records of requests before this time (RFC 3339 or Unix seconds)
    #[argh(option)]
    pub until: Option<String>,
    /// at most this many records (default 100)
    #[argh(option)]
    pub limit: Option<usize>,
    /// print one JSON document ({"data": [records]})
    #[argh(switch)]
    pub json: bool,
    /// print CSV (the columns of GET /admin/usage.csv)
    #[argh(switch)]
    pub csv: bool,
}

#[derive(FromArgs)]
/// The admin token kept in the data directory (when the config names no admin_token_env).
#[argh(subcommand, name = "admin-token")]
pub struct AdminTokenArgs {
    #[argh(subcommand)]
    pub command: AdminTokenCommand,
}

#[derive(FromArgs)]
#[argh(subcommand)]
pub enum AdminTokenCommand {
    Rotate(AdminTokenRotateArgs),
}

#[derive(FromArgs)]
/// Make a new admin token (printed once, as the last line); the old one stops working at once, also on a
/// running server.
#[argh(subcommand, name = "rotate")]
pub struct AdminTokenRotateArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
}

#[derive(FromArgs)]
/// Run the gateway (without --config: built-in defaults, mock model, 127.0.0.1:8080).
#[argh(subcommand, name = "serve")]
pub struct ServeArgs {
    /// config file (TOML)
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// log format: text (default) or json (JSON lines)
    #[argh(option)]
    pub log_format: Option<String>,
}

#[derive(FromArgs)]
/// Manage API keys.
#[argh(subcommand, name = "keys")]
pub struct KeysArgs {
    #[argh(subcommand)]
    pub command: KeysCommand,
}

#[derive(FromArgs)]
#[argh(subcommand)]
pub enum KeysCommand {
    Add(KeysAddArgs),
    List(KeysListArgs),
    Revoke(KeysRevokeArgs),
    Enable(KeysEnableArgs),
    Delete(KeysDeleteArgs),
    Rotate(KeysRotateArgs),
    Credit(KeysCreditArgs),
    Budget(KeysBudgetArgs),
    Expire(KeysExpireArgs),
    Move(KeysMoveArgs),
}

#[derive(FromArgs)]
/// Create a key; it is printed once, as the last line of output.
#[argh(subcommand, name = "add")]
pub struct KeysAddArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// a unique name for the key (an application or environment)
    #[argh(option)]
    pub name: String,
    /// the group the key belongs to
    #[argh(option, default = "String::from(\"default\")")]
    pub group: String,
    /// credits the key may spend (default: unlimited)
    #[argh(option)]
    pub credit: Option<crate::money::Money>,
    /// credits the key may spend per --period (default: its group's budget, if any)
    #[argh(option)]
    pub budget: Option<crate::money::Money>,
    /// the budget's period: daily, weekly or monthly (UTC calendar periods)
    #[argh(option)]
    pub period: Option<String>,
    /// when the key stops working, in UTC (e.g. 2026-12-31T00:00:00Z)
    #[argh(option)]
    pub expires: Option<String>,
    /// print one JSON document (name, group, credit, budget, expires, key) instead of text
    #[argh(switch)]
    pub json: bool,
}

#[derive(FromArgs)]
/// Set a key's spend budget per period, or remove it (its group's budget applies again).
#[argh(subcommand, name = "budget")]
pub struct KeysBudgetArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key
    #[argh(option)]
    pub name: String,
    /// credits per --period
    #[argh(option)]
    pub set: Option<crate::money::Money>,
    /// daily, weekly or monthly
    #[argh(option)]
    pub period: Option<String>,
    /// remove the key's own budget
    #[argh(switch)]
    pub none: bool,
}

#[derive(FromArgs)]
/// Set when a key stops working, or let it work with no end.
#[argh(subcommand, name = "expire")]
pub struct KeysExpireArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key
    #[argh(option)]
    pub name: String,
    /// when, in UTC (e.g. 2026-12-31T00:00:00Z)
    #[argh(option)]
    pub at: Option<String>,
    /// no expiry
    #[argh(switch)]
    pub never: bool,
}

#[derive(FromArgs)]
/// Move a key to another group (its models and limits change at once).
#[argh(subcommand, name = "move")]
pub struct KeysMoveArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key
    #[argh(option)]
    pub name: String,
    /// the group to move it to
    #[argh(option)]
    pub group: String,
}

#[derive(FromArgs)]
/// List keys (names, groups, credit, spent, balance, status, budget; never the keys themselves).
#[argh(subcommand, name = "list")]
pub struct KeysListArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// print one JSON document ({"data": [...]}, the fields of GET /admin/keys) instead of a table
    #[argh(switch)]
    pub json: bool,
}

#[derive(FromArgs)]
/// Revoke a key at once (a running server notices within 2 s).
#[argh(subcommand, name = "revoke")]
pub struct KeysRevokeArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key to revoke
    #[argh(option)]
    pub name: String,
}

#[derive(FromArgs)]
/// Let a revoked key work again (the same key; a running server notices within 2 s).
#[argh(subcommand, name = "enable")]
pub struct KeysEnableArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key to enable
    #[argh(option)]
    pub name: String,
}

#[derive(FromArgs)]
/// Delete a revoked key: it leaves every list; its name stays taken so its usage records stay its own.
#[argh(subcommand, name = "delete")]
pub struct KeysDeleteArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key to delete (it must be revoked)
    #[argh(option)]
    pub name: String,
}

#[derive(FromArgs)]
/// Replace a key with a new one (same name, group and credit); the old key stops working at once.
#[argh(subcommand, name = "rotate")]
pub struct KeysRotateArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key to rotate
    #[argh(option)]
    pub name: String,
}

#[derive(FromArgs)]
/// Top up or set a key's credit.
#[argh(subcommand, name = "credit")]
pub struct KeysCreditArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// name of the key
    #[argh(option)]
    pub name: String,
    /// credits to add
    #[argh(option)]
    pub add: Option<crate::money::Money>,
    /// set the credit to this amount
    #[argh(option)]
    pub set: Option<crate::money::Money>,
    /// remove the credit limit
    #[argh(switch)]
    pub unlimited: bool,
}

#[derive(FromArgs)]
/// Validate a config file: every problem at once, each with its line; exits 1 when any is an error.
#[argh(subcommand, name = "check")]
pub struct CheckArgs {
    /// config file (TOML)
    #[argh(option)]
    pub config: PathBuf,
    /// also connect to the [store] and say whether it answers
    #[argh(switch)]
    pub connect: bool,
    /// print one JSON document (ok, errors with their lines, warnings, counts) instead of text
    #[argh(switch)]
    pub json: bool,
}

#[derive(FromArgs)]
/// Show the configured models' prices, or the built-in list prices.
#[argh(subcommand, name = "models")]
pub struct ModelsArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
    /// print the built-in table of list prices (USD per 1M tokens), context windows and output limits
    #[argh(switch)]
    pub list_prices: bool,
    /// print one JSON document ({"data": [...]}: each model's upstreams, prices and their source) instead
    #[argh(switch)]
    pub json: bool,
}

#[derive(FromArgs)]
/// The shared store of several instances (`[store]` in the config).
#[argh(subcommand, name = "store")]
pub struct StoreArgs {
    #[argh(subcommand)]
    pub command: StoreCommand,
}

#[derive(FromArgs)]
#[argh(subcommand)]
pub enum StoreCommand {
    Status(StoreStatusArgs),
    Rebuild(StoreRebuildArgs),
}

#[derive(FromArgs)]
/// Say whether the store answers and what it holds (keys, usage records, this instance's shipping).
#[argh(subcommand, name = "status")]
pub struct StoreStatusArgs {
    /// config file (TOML) with a [store] section
    #[argh(option)]
    pub config: PathBuf,
}

#[derive(FromArgs)]
/// Rebuild a store that lost its data: keys and overrides from this instance's local copies (when the store
/// has none), and every balance from the usage ledgers (this instance's, and those given with --ledger).
#[argh(subcommand, name = "rebuild")]
pub struct StoreRebuildArgs {
    /// config file (TOML) with a [store] section
    #[argh(option)]
    pub config: PathBuf,
    /// another instance's ledger, as INSTANCE=PATH (for example gw-2=/srv/gw-2/usage.jsonl); repeatable. An
    /// instance whose ledger is not given ships its whole ledger again by itself when it runs.
    #[argh(option)]
    pub ledger: Vec<String>,
    /// a keys file to restore the keys from (default: this instance's local copy, store-keys.jsonl)
    #[argh(option)]
    pub keys: Option<PathBuf>,
}
