//! The command line: `serve`, `keys add|list|revoke|...`, `check`, `store status|rebuild`, `doctor`. Every
//! command returns its exit code. With a `[store]` in the config the `keys` commands act on the store
//! (`store.rs`).

mod store;

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use argh::FromArgs;

use crate::access::key_ops;
use crate::access::keys::{self, KEYS_FILE};
use crate::config::Config;

#[derive(FromArgs)]
/// tollgate: one small binary that serves OpenAI Chat Completions, OpenAI Responses and Anthropic Messages
/// clients in front of any upstream.
pub struct Args {
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
    Store(store::StoreArgs),
    Doctor(crate::doctor::DoctorArgs),
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
/// List keys (names, groups, status; never the keys themselves).
#[argh(subcommand, name = "list")]
pub struct KeysListArgs {
    /// config file (TOML); without it, the built-in defaults
    #[argh(option)]
    pub config: Option<PathBuf>,
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
/// Validate a config file; exits 1 naming the bad field.
#[argh(subcommand, name = "check")]
pub struct CheckArgs {
    /// config file (TOML)
    #[argh(option)]
    pub config: PathBuf,
    /// also connect to the [store] and say whether it answers
    #[argh(switch)]
    pub connect: bool,
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
}

/// Runs a command; returns the process exit code.
pub fn run(args: Args) -> i32 {
    match args.command {
        Command::Serve(a) => serve(a),
        Command::Check(a) => check(&a.config, a.connect),
        Command::Models(a) => models(&a),
        Command::Store(a) => store::run(a),
        Command::Doctor(a) => crate::doctor::run(a),
        Command::Keys(k) => keys_command(k.command),
    }
}

/// Runs a `keys` command; a change that succeeded goes into the audit trail (actor `cli`). The audit file
/// is opened first: a change it could not record is not made.
fn keys_command(c: KeysCommand) -> i32 {
    let audit = |config: Option<&Path>, name: &str, action: &str, run: &mut dyn FnMut() -> i32| {
        let opened = load(config)
            .ok()
            .and_then(|c| store::Place::open(&c).ok().map(|p| (c, p)));
        let trail = match &opened {
            Some((c, _)) => match crate::audit::Trail::open(&c.data_dir) {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("{e}\nThe change was not made: its audit entry cannot be written.");
                    return 1;
                }
            },
            None => None,
        };
        let before = opened.as_ref().map_or(serde_json::Value::Null, |(_, p)| {
            crate::audit::key_in(p.at(), name)
        });
        let code = run();
        if let (0, Some((_, p)), Some(trail)) = (code, opened, trail) {
            let after = crate::audit::key_in(p.at(), name);
            let entry = crate::audit::Entry::new(
                crate::audit::ACTOR_CLI,
                action,
                format!("key {name}"),
                before,
                after,
            );
            p.audit(trail, &entry);
        }
        code
    };
    match c {
        KeysCommand::List(a) => keys_list(a),
        KeysCommand::Add(a) => {
            let (config, name) = (a.config.clone(), a.name.clone());
            let mut a = Some(a);
            audit(config.as_deref(), &name, "key.created", &mut || {
                a.take().map_or(1, keys_add)
            })
        }
        KeysCommand::Revoke(a) => {
            let (config, name) = (a.config.clone(), a.name.clone());
            let mut a = Some(a);
            audit(config.as_deref(), &name, "key.revoked", &mut || {
                a.take().map_or(1, keys_revoke)
            })
        }
        KeysCommand::Enable(a) => audit(a.config.as_deref(), &a.name, "key.enabled", &mut || {
            with_place(a.config.as_deref(), |_, place| {
                key_ops::enable_key(place.at(), &a.name).map_err(flag_error)?;
                println!("Enabled key {:?}: it works again.", a.name);
                Ok(())
            })
        }),
        KeysCommand::Delete(a) => audit(a.config.as_deref(), &a.name, "key.deleted", &mut || {
            with_place(a.config.as_deref(), |_, place| {
                key_ops::delete_key(place.at(), &a.name).map_err(flag_error)?;
                println!(
                    "Deleted key {:?}. Its usage records stay in the ledger; the name is not reused.",
                    a.name
                );
                Ok(())
            })
        }),
        KeysCommand::Rotate(a) => {
            let (config, name) = (a.config.clone(), a.name.clone());
            let mut a = Some(a);
            audit(config.as_deref(), &name, "key.rotated", &mut || {
                a.take().map_or(1, keys_rotate)
            })
        }
        KeysCommand::Budget(a) => {
            audit(a.config.as_deref(), &a.name, "key.budget_set", &mut || {
                with_place(a.config.as_deref(), |_, place| {
                    let budget = match (a.set, a.period.as_deref(), a.none) {
                        (Some(x), Some(p), false) => Some(budget_arg(x, p)?),
                        (None, None, true) => None,
                        _ => {
                            return Err(
                                "give --set AMOUNT --period daily|weekly|monthly, or --none".into(),
                            )
                        }
                    };
                    key_ops::set_budget(place.at(), &a.name, budget).map_err(flag_error)?;
                    match budget {
                        Some(b) => println!("Key {:?}: budget {b}.", a.name),
                        None => println!(
                            "Key {:?}: no budget of its own (its group's applies).",
                            a.name
                        ),
                    }
                    Ok(())
                })
            })
        }
        KeysCommand::Expire(a) => {
            audit(a.config.as_deref(), &a.name, "key.expiry_set", &mut || {
                with_place(a.config.as_deref(), |_, place| {
                    let at = match (a.at.as_deref(), a.never) {
                        (Some(t), false) => Some(expiry_arg(t)?),
                        (None, true) => None,
                        _ => return Err("give --at 2026-12-31T00:00:00Z, or --never".into()),
                    };
                    key_ops::set_expiry(place.at(), &a.name, at).map_err(flag_error)?;
                    match at {
                        Some(t) => println!(
                            "Key {:?} stops working at {}.",
                            a.name,
                            crate::util::rfc3339(t)
                        ),
                        None => println!("Key {:?} does not expire.", a.name),
                    }
                    Ok(())
                })
            })
        }
        KeysCommand::Move(a) => audit(a.config.as_deref(), &a.name, "key.moved", &mut || {
            with_place(a.config.as_deref(), |config, place| {
                known_group(config, &a.group)?;
                key_ops::move_key(place.at(), &a.name, &a.group).map_err(flag_error)?;
                println!("Moved key {:?} to group {:?}.", a.name, a.group);
                Ok(())
            })
        }),
        KeysCommand::Credit(a) => {
            let (config, name) = (a.config.clone(), a.name.clone());
            let mut a = Some(a);
            audit(config.as_deref(), &name, "key.credited", &mut || {
                a.take().map_or(1, keys_credit)
            })
        }
    }
}

fn load(config: Option<&Path>) -> Result<Config, String> {
    match config {
        None => Ok(Config::embedded()),
        Some(p) => Config::load(p).map_err(|e| format!("{}: {e}", p.display())),
    }
}

fn check(path: &Path, connect: bool) -> i32 {
    match Config::load(path) {
        Ok(c) => {
            println!(
                "{}: OK ({}, {}, {}; listens on {})",
                path.display(),
                crate::util::plural(c.upstreams.len(), "upstream"),
                crate::util::plural(c.models.len(), "model"),
                crate::util::plural(c.groups.len(), "group"),
                c.listen
            );
            for w in &c.warnings {
                println!("warning: {w}");
            }
            for l in crate::config::list_price_lines(&c.models) {
                println!("list price: {l}");
            }
            for u in &c.upstreams {
                if let Some(var) = &u.missing_key {
                    println!(
                        "warning: upstreams {:?}: the environment variable {var} (api_key_env) is not set here; \
                         `serve` starts, but this upstream's requests get 502 until it is set",
                        u.name
                    );
                }
            }
            if let Some(w) = crate::util::data_dir_exposure(&c.data_dir) {
                println!("warning: {w}");
            }
            if let Some(s) = &c.store {
                for (field, var) in s.missing_variables() {
                    println!(
                        "warning: {field}: the environment variable {var} is not set here; the store will refuse \
                         this instance"
                    );
                }
            }
            if !connect {
                return 0;
            }
            match store::connect_check(&c) {
                Ok(lines) => {
                    for l in lines {
                        println!("{l}");
                    }
                    0
                }
                Err(e) => {
                    eprintln!("{}: {e}", path.display());
                    1
                }
            }
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            1
        }
    }
}

/// `tollgate models`: each configured model's prices and where they come from; with `--list-prices`, the
/// built-in table.
fn models(a: &ModelsArgs) -> i32 {
    if a.list_prices {
        print!("{}", crate::pricing::list::render());
        return 0;
    }
    let c = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    for m in &c.models {
        let source = match m.prices.source {
            crate::pricing::Source::List(row) => {
                format!("list price of {row}, {}", crate::pricing::list::AS_OF)
            }
            s => s.name().to_string(),
        };
        println!(
            "{} (upstream model {}; {source}; output limit {}): {}",
            m.name,
            m.upstream_model,
            m.max_output_tokens,
            m.prices.describe()
        );
    }
    0
}

/// A key operation's error with the flag that was wrong.
fn flag_error(e: key_ops::KeyOpError) -> String {
    if e.field.is_empty() {
        e.message
    } else {
        format!("--{}: {}", e.field, e.message)
    }
}

/// Adds a key after checking its group against the config; returns the plaintext.
fn add_key(
    config: &Config,
    at: key_ops::KeysAt,
    name: &str,
    group: &str,
    credit: Option<crate::money::Money>,
) -> Result<String, String> {
    known_group(config, group)?;
    key_ops::add_key(at, name, group, credit).map_err(flag_error)
}

/// `--group`: a group the config (with the console's changes) has; the error lists those that exist.
fn known_group(config: &Config, group: &str) -> Result<(), String> {
    if config.group(group).is_some() {
        return Ok(());
    }
    let known: Vec<&str> = config.groups.iter().map(|g| g.name.as_str()).collect();
    Err(format!(
        "--group: unknown group {group:?}; expected one of [{}]",
        known.join(", ")
    ))
}

/// `--budget AMOUNT --period P`, checked.
fn budget_arg(
    amount: crate::money::Money,
    period: &str,
) -> Result<crate::access::budget::Budget, String> {
    crate::access::budget::Budget::new(amount, period)
        .map_err(|e| format!("--budget/--period: {e}"))
}

/// `--expires` / `--at`: a UTC time.
fn expiry_arg(t: &str) -> Result<u64, String> {
    crate::util::parse_rfc3339(t)
        .ok_or_else(|| format!("expected a UTC time such as 2026-12-31T00:00:00Z, got {t:?}"))
}

fn keys_add(a: KeysAddArgs) -> i32 {
    let config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    // Budget and expiry are checked before the key is made, and set right after.
    let budget = match (a.budget, a.period.as_deref()) {
        (None, None) => Ok(None),
        (Some(x), Some(p)) => budget_arg(x, p).map(Some),
        _ => Err("give --budget AMOUNT together with --period daily|weekly|monthly".to_string()),
    };
    let expires = a.expires.as_deref().map(expiry_arg).transpose();
    let (budget, expires) = match (budget, expires) {
        (Ok(b), Ok(e)) => (b, e),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let made = store::Place::open(&config).and_then(|place| {
        let key = add_key(&config, place.at(), &a.name, &a.group, a.credit)?;
        if budget.is_some() {
            key_ops::set_budget(place.at(), &a.name, budget).map_err(flag_error)?;
        }
        if expires.is_some() {
            key_ops::set_expiry(place.at(), &a.name, expires).map_err(flag_error)?;
        }
        Ok(key)
    });
    match made {
        Ok(key) => {
            let mut terms = vec![format!(
                "credit: {}",
                a.credit.map_or("unlimited".to_string(), |c| c.to_string())
            )];
            if let Some(b) = budget {
                terms.push(format!("budget: {b}"));
            }
            if let Some(t) = expires {
                terms.push(format!("expires: {}", crate::util::rfc3339(t)));
            }
            println!(
                "Created key {:?} in group {:?} ({}). It is shown only this once; store it now:",
                a.name,
                a.group,
                terms.join(", ")
            );
            println!("{key}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn keys_list(a: KeysListArgs) -> i32 {
    let opened = load(a.config.as_deref()).and_then(|c| store::Place::open(&c).map(|p| (c, p)));
    let (config, place) = match opened {
        Ok(pair) => pair,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let records = match key_ops::read_all(place.at()) {
        Ok(r) => r.into_iter().filter(|r| !r.deleted).collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("{}", flag_error(e));
            return 1;
        }
    };
    // Where they were read (on stderr, so the table stays the whole of stdout): an empty table from the wrong
    // directory must not look like lost keys.
    eprintln!(
        "keys in {} ({}{})",
        place.describe(),
        crate::util::plural(records.len(), "key"),
        match (&a.config, records.is_empty()) {
            (None, true) => "; without --config this is ./tollgate-data of the current directory",
            _ => "",
        }
    );
    let now = crate::util::unix_now();
    let local = match &place {
        store::Place::Dir(d) => crate::ledger::period_spend(d, now),
        store::Place::Store(_) => Default::default(),
    };
    let spent_in = |name: &str, period: crate::access::budget::Period| match &place {
        store::Place::Store(s) => s.period_spent(name, period, now).unwrap_or_default(),
        store::Place::Dir(_) => local
            .get(name)
            .map_or(crate::money::Money::ZERO, |p| p.spent(period, now)),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<24} {:<16} {:>12} {:<8} {:<20} {:<20} BUDGET",
        "NAME", "GROUP", "CREDIT", "STATUS", "CREATED", "EXPIRES"
    );
    for r in &records {
        let credit = r.credit.map_or("unlimited".to_string(), |c| format!("{c}"));
        let status = if r.disabled { "revoked" } else { "active" };
        let expires = r.expires.as_deref().unwrap_or("never");
        let budget = budget_text(&config, r, |p| spent_in(&r.name, p), now);
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:>12} {:<8} {:<20} {:<20} {budget}",
            r.name, r.group, credit, status, r.created, expires
        );
    }
    0
}

/// `10 daily (key): 2.5 spent, resets 2026-11-25T00:00:00Z`, or `none`.
fn budget_text(
    config: &Config,
    r: &keys::KeyRecord,
    spent_in: impl Fn(crate::access::budget::Period) -> crate::money::Money,
    now: u64,
) -> String {
    let group = config.group(&r.group).and_then(|g| g.budget);
    let (b, from) = match (r.budget, group) {
        (Some(b), _) => (b, "key"),
        (None, Some(b)) => (b, "group"),
        (None, None) => return "none".into(),
    };
    let spent = spent_in(b.period);
    let resets = b.period.end_of(b.period.start_of(now));
    format!(
        "{b} ({from}): {spent} spent, resets {}",
        crate::util::rfc3339(resets)
    )
}

fn keys_revoke(a: KeysRevokeArgs) -> i32 {
    with_place(a.config.as_deref(), |_, place| {
        key_ops::revoke_key(place.at(), &a.name).map_err(flag_error)?;
        println!("Revoked key {:?}.", a.name);
        Ok(())
    })
}

fn keys_rotate(a: KeysRotateArgs) -> i32 {
    with_place(a.config.as_deref(), |_, place| {
        let key = key_ops::rotate_key(place.at(), &a.name).map_err(flag_error)?;
        println!(
            "Rotated key {:?}: the old key no longer works. The new one is shown only this once:",
            a.name
        );
        println!("{key}");
        Ok(())
    })
}

fn keys_credit(a: KeysCreditArgs) -> i32 {
    with_place(a.config.as_deref(), |_, place| {
        let change = match (a.add, a.set, a.unlimited) {
            (Some(x), None, false) => key_ops::CreditChange::Add(x),
            (None, Some(x), false) => key_ops::CreditChange::Set(x),
            (None, None, true) => key_ops::CreditChange::Unlimited,
            _ => {
                return Err("give exactly one of --add AMOUNT, --set AMOUNT or --unlimited".into())
            }
        };
        let credit = key_ops::change_credit(place.at(), &a.name, change).map_err(flag_error)?;
        match credit {
            Some(c) => println!("Key {:?} now has a credit of {c}.", a.name),
            None => println!("Key {:?} now has no credit limit.", a.name),
        }
        Ok(())
    })
}

/// Loads the config, opens where its keys live (its store, or its data directory) and runs `f`, turning its
/// error into a message on stderr and exit code 1.
fn with_place(
    config: Option<&Path>,
    f: impl FnOnce(&Config, &store::Place) -> Result<(), String>,
) -> i32 {
    let result = load(config).and_then(|c| {
        let place = store::Place::open(&c)?;
        f(&c, &place)
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// What validation found that does not stop the gateway: an upstream without its credential (ERROR: its
/// requests get 502), base URLs and groups that will not work as meant, an exposed data directory.
fn log_config_problems(config: &Config) {
    for u in &config.upstreams {
        if let Some(var) = &u.missing_key {
            log::error!(
                "upstream `{}`: the environment variable {var} (its api_key_env) is not set; requests to it get \
                 502 until it is set and tollgate restarted",
                u.name
            );
        }
    }
    for w in &config.warnings {
        log::warn!("config: {w}");
    }
    for l in crate::config::list_price_lines(&config.models) {
        log::info!("{l}");
    }
    if let Some(w) = crate::util::data_dir_exposure(&config.data_dir) {
        log::warn!("{w}");
    }
}

/// Whether every file tollgate keeps in `data_dir` that is there is a regular file this user owns (not a
/// link, not another user's); each one that is not stops the start with an ERROR naming it. Every later
/// open checks again, on its descriptor.
fn data_files_in_order(dir: &Path) -> bool {
    let mut names = vec![
        crate::ledger::LEDGER_FILE,
        crate::ledger::CHECKPOINT_FILE,
        crate::audit::AUDIT_FILE,
        KEYS_FILE,
        key_ops::KEYS_LOCK,
        crate::config::OVERRIDES_FILE,
    ];
    names.extend(crate::server::cluster::FILES);
    let problems = crate::util::check_data_files(dir, &names);
    for p in &problems {
        log::error!("data_dir: {p}");
    }
    problems.is_empty()
}

/// Binds the listen address; when it is taken, says how to choose another one.
fn bind(listen: &str, has_config: bool) -> Option<TcpListener> {
    match TcpListener::bind(listen) {
        Ok(l) => Some(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let setting = if has_config {
                "`listen` in the config file"
            } else {
                "the embedded default"
            };
            log::error!(
                "cannot listen on {listen} ({setting}): another program already listens there (llama.cpp's \
                 server also defaults to port 8080). Choose another address with TOLLGATE_LISTEN, for example \
                 `TOLLGATE_LISTEN=127.0.0.1:8090 tollgate serve` (with no config, tollgate then finds a llama.cpp \
                 server on 8080 and serves its models), or set `listen` in the config file."
            );
            None
        }
        Err(e) => {
            log::error!("cannot listen on {listen}: {e}");
            None
        }
    }
}

fn serve(a: ServeArgs) -> i32 {
    let Some(config) = serve_config(&a) else {
        return 1;
    };
    if let Err(e) = crate::util::create_private_dir_all(&config.data_dir) {
        log::error!("cannot create data_dir {}: {e}", config.data_dir.display());
        return 1;
    }
    if !data_files_in_order(&config.data_dir) {
        return 1;
    }
    log_config_problems(&config);
    // The port first: a start that cannot listen must not mint (and print, once) a key nobody gets to use.
    let Some(listener) = bind(&config.listen, a.config.is_some()) else {
        return 1;
    };
    if a.config.is_none() && mint_first_key(&config).is_err() {
        return 1;
    }
    let shared = match store::join_at_serve(&config) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return 1;
        }
    };
    let Some(keys) = open_keys(&config, a.config.as_deref(), shared.as_ref()) else {
        return 1;
    };
    let Some((ledger, replay)) = open_ledger(&config) else {
        return 1;
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.clone());
    log::info!(
        "tollgate {} listening on http://{addr} ({}, {}, {} workers, data in {})",
        env!("CARGO_PKG_VERSION"),
        crate::util::plural(config.models.len(), "model"),
        crate::util::plural(keys.len(), "key"),
        config.workers,
        config.data_dir.display()
    );
    crate::server::run(config, keys, ledger, replay, listener, shared)
}

/// The configuration `serve` runs with: the file's (or the embedded defaults), `TOLLGATE_LISTEN` and
/// `--log-format` applied, logging started and the secrets to scrub registered. None: the reason was printed.
fn serve_config(a: &ServeArgs) -> Option<Config> {
    let mut config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return None;
        }
    };
    // TOLLGATE_LISTEN overrides `listen` (containers, and running the defaults on another port).
    if let Ok(listen) = std::env::var("TOLLGATE_LISTEN") {
        if listen.parse::<std::net::SocketAddr>().is_err() {
            eprintln!("TOLLGATE_LISTEN: expected host:port such as 0.0.0.0:8080, got {listen:?}");
            return None;
        }
        config.listen = listen;
    }
    if let Some(format) = &a.log_format {
        if format != "text" && format != "json" {
            eprintln!("--log-format: expected text or json, got {format:?}");
            return None;
        }
        config.log_format = format.clone();
    }
    crate::logging::init(&config.log_level, config.log_format == "json");
    // Upstream credentials (and the admin token, the store's password) are scrubbed from every error text
    // and log line, and the real secrets among them from answers (placeholder keys are no secrets).
    let admin_token = config.admin_token();
    crate::secrets::register(config.upstreams.iter().filter_map(|u| u.api_key.as_deref()));
    crate::secrets::register_own(
        admin_token
            .as_deref()
            .into_iter()
            .chain(config.store.as_ref().and_then(|s| s.password.as_deref())),
    );
    Some(config)
}

/// The group a first key (and the advice to add one) names.
fn first_group(config: &Config) -> String {
    config
        .groups
        .first()
        .map(|g| g.name.clone())
        .unwrap_or_else(|| "default".into())
}

/// Only the embedded defaults (a newcomer's first command) get a key minted for them, on the first start
/// (no keys file yet), once the port is bound. With a config file the operator creates keys; an unlimited
/// key nobody asked for is not made behind their back.
fn mint_first_key(config: &Config) -> Result<(), ()> {
    if fs::symlink_metadata(config.data_dir.join(KEYS_FILE)).is_ok() {
        return Ok(());
    }
    let group = first_group(config);
    match add_key(
        config,
        key_ops::KeysAt::Dir(&config.data_dir),
        "default",
        &group,
        None,
    ) {
        Ok(key) => {
            println!(
                "First start: created the API key \"default\" (group {group:?}). It is shown only this once:"
            );
            println!("{key}");
            let _ = std::io::stdout().flush();
            Ok(())
        }
        Err(e) => {
            log::error!("could not create the first key: {e}");
            Err(())
        }
    }
}

/// The keys in force at start: the store's (or its local copy), or the keys file's. Warns when there are
/// none. None: the keys file cannot be read (logged).
fn open_keys(
    config: &Config,
    config_path: Option<&Path>,
    shared: Option<&crate::server::Shared>,
) -> Option<crate::access::KeyStore> {
    let keys_path = config.data_dir.join(KEYS_FILE);
    let keys = match shared {
        Some(s) => crate::access::KeyStore::from_records(&config.data_dir, &s.joined.keys),
        None => match crate::access::KeyStore::open(&config.data_dir) {
            Ok(k) => k,
            Err(e) => {
                log::error!("cannot read {}: {e}", keys_path.display());
                return None;
            }
        },
    };
    if keys.records().is_empty() {
        let keys_place = match shared {
            Some(s) => s.store.describe(),
            None => keys_path.display().to_string(),
        };
        let config_flag = config_path
            .map(|p| format!(" --config {}", p.display()))
            .unwrap_or_default();
        log::warn!(
            "no API keys in {keys_place}: every request is refused (401) until you add one with \
             `tollgate keys add{config_flag} --name NAME --group {}` (it prints the key; a running server \
             accepts it at once)",
            first_group(config)
        );
    }
    Some(keys)
}

/// The usage ledger, replayed. None: it cannot be opened (logged).
fn open_ledger(config: &Config) -> Option<(crate::ledger::Ledger, crate::ledger::Replay)> {
    let (ledger, replay) = match crate::ledger::Ledger::open_with(
        &config.data_dir,
        config.ledger_sync,
        config.ledger_strict,
        &config.ledger_files,
    ) {
        Ok(pair) => pair,
        Err(e) => {
            log::error!(
                "cannot open the usage ledger in {}: {e}",
                config.data_dir.display()
            );
            return None;
        }
    };
    let from = match &replay.checkpoint {
        Some((written, n)) => format!(
            " after the checkpoint of {written} ({} in all",
            crate::util::plural(*n as usize + replay.records as usize, "record")
        ),
        None => format!(" ({}", crate::util::plural(replay.files as usize, "file")),
    };
    log::info!(
        "usage ledger: {} replayed{from}, {} with spend{}{})",
        crate::util::plural(replay.records as usize, "record"),
        crate::util::plural(replay.spent.len(), "key"),
        if replay.bad_lines > 0 {
            format!(", {} unreadable lines skipped", replay.bad_lines)
        } else {
            String::new()
        },
        if replay.torn_bytes > 0 {
            format!(", a torn last line of {} bytes cut off", replay.torn_bytes)
        } else {
            String::new()
        },
    );
    Some((ledger, replay))
}
