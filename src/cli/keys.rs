//! `tollgate keys ...`: each changing command turns its arguments into one `KeyChange`, and
//! `audit::change_key` makes it and records it (actor `cli`, with the action names the console writes). The
//! audit file is opened first: a change it could not record is not made.

use std::io::Write;
use std::path::Path;

use super::args::{KeysAddArgs, KeysCommand, KeysListArgs};
use super::store::Place;
use crate::access::key_ops::{self, Changed, CreditChange, KeyChange};
use crate::access::keys;
use crate::budget::Budget;
use crate::config::Config;
use crate::money::Money;

/// Runs a `keys` command; returns the exit code.
pub fn run(c: KeysCommand) -> i32 {
    match c {
        KeysCommand::List(a) => list(a),
        KeysCommand::Add(a) => add_command(a),
        KeysCommand::Revoke(a) => change(
            a.config.as_deref(),
            &a.name,
            |_| Ok(KeyChange::Revoke),
            |name, _| {
                println!("Revoked key {name:?}.");
            },
        ),
        KeysCommand::Enable(a) => change(
            a.config.as_deref(),
            &a.name,
            |_| Ok(KeyChange::Enable),
            |name, _| {
                println!("Enabled key {name:?}: it works again.");
            },
        ),
        KeysCommand::Delete(a) => change(
            a.config.as_deref(),
            &a.name,
            |_| Ok(KeyChange::Delete),
            |name, _| {
                println!("Deleted key {name:?}. Its usage records stay in the ledger; the name is not reused.");
            },
        ),
        KeysCommand::Rotate(a) => change(
            a.config.as_deref(),
            &a.name,
            |_| Ok(KeyChange::Rotate),
            |name, changed| {
                println!("Rotated key {name:?}: the old key no longer works. The new one is shown only this once:");
                if let Changed::Key(key) = changed {
                    println!("{key}");
                }
            },
        ),
        KeysCommand::Credit(a) => credit(a),
        KeysCommand::Budget(a) => budget(a),
        KeysCommand::Expire(a) => expire(a),
        KeysCommand::Move(a) => {
            let group = a.group.clone();
            change(
                a.config.as_deref(),
                &a.name,
                |config| known_group(config, &group).map(|()| KeyChange::Move(group.clone())),
                |name, _| println!("Moved key {name:?} to group {:?}.", a.group),
            )
        }
    }
}

/// `keys credit NAME --add|--set AMOUNT|--unlimited`.
fn credit(a: super::args::KeysCreditArgs) -> i32 {
    let arg = match (a.add, a.set, a.unlimited) {
        (Some(x), None, false) => Ok(CreditChange::Add(x)),
        (None, Some(x), false) => Ok(CreditChange::Set(x)),
        (None, None, true) => Ok(CreditChange::Unlimited),
        _ => Err("give exactly one of --add AMOUNT, --set AMOUNT or --unlimited".to_string()),
    };
    change(
        a.config.as_deref(),
        &a.name,
        |_| arg.map(KeyChange::Credit),
        |name, changed| match changed {
            Changed::Credit(Some(c)) => println!("Key {name:?} now has a credit of {c}."),
            _ => println!("Key {name:?} now has no credit limit."),
        },
    )
}

/// `keys budget NAME --set AMOUNT --period P|--none`.
fn budget(a: super::args::KeysBudgetArgs) -> i32 {
    let arg = match (a.set, a.period.as_deref(), a.none) {
        (Some(x), Some(p), false) => budget_arg(x, p).map(Some),
        (None, None, true) => Ok(None),
        _ => Err("give --set AMOUNT --period daily|weekly|monthly, or --none".to_string()),
    };
    change(
        a.config.as_deref(),
        &a.name,
        |_| arg.clone().map(KeyChange::Budget),
        |name, _| match arg {
            Ok(Some(b)) => println!("Key {name:?}: budget {b}."),
            _ => println!("Key {name:?}: no budget of its own (its group's applies)."),
        },
    )
}

/// `keys expire NAME --at TIME|--never`.
fn expire(a: super::args::KeysExpireArgs) -> i32 {
    let arg = match (a.at.as_deref(), a.never) {
        (Some(t), false) => expiry_arg(t).map(Some),
        (None, true) => Ok(None),
        _ => Err("give --at 2026-12-31T00:00:00Z, or --never".to_string()),
    };
    change(
        a.config.as_deref(),
        &a.name,
        |_| arg.clone().map(KeyChange::Expiry),
        |name, _| match arg {
            Ok(Some(t)) => println!("Key {name:?} stops working at {}.", crate::util::rfc3339(t)),
            _ => println!("Key {name:?} does not expire."),
        },
    )
}

/// Loads the config, opens where its keys live and the audit file, builds the change from the arguments
/// (`make`), makes and records it, and `report`s it. An error is printed on stderr: exit code 1.
fn change(
    config: Option<&Path>,
    name: &str,
    make: impl FnOnce(&Config) -> Result<KeyChange, String>,
    report: impl FnOnce(&str, Changed),
) -> i32 {
    match made(config, name, make) {
        Ok(changed) => {
            report(name, changed);
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn made(
    config: Option<&Path>,
    name: &str,
    make: impl FnOnce(&Config) -> Result<KeyChange, String>,
) -> Result<Changed, String> {
    let config = super::load(config)?;
    let place = Place::open(&config)?;
    let trail = crate::audit::Trail::open(&config.data_dir)
        .map_err(|e| format!("{e}\nThe change was not made: its audit entry cannot be written."))?;
    let change = make(&config)?;
    crate::audit::change_key(place.at(), trail, crate::audit::ACTOR_CLI, name, &change)
        .map_err(flag_error)
}

/// `tollgate keys add`: the key is printed once, as the last line of output.
fn add_command(a: KeysAddArgs) -> i32 {
    let mut terms = vec![format!(
        "credit: {}",
        a.credit.map_or("unlimited".to_string(), |c| c.to_string())
    )];
    let made = made(a.config.as_deref(), &a.name, |config| {
        let change = add_change(config, &a)?;
        if let KeyChange::Add {
            budget, expires, ..
        } = &change
        {
            if let Some(b) = budget {
                terms.push(format!("budget: {b}"));
            }
            if let Some(t) = expires {
                terms.push(format!("expires: {}", crate::util::rfc3339(*t)));
            }
        }
        Ok(change)
    });
    match made {
        Ok(Changed::Key(key)) if a.json => {
            let v = serde_json::json!({
                "name": a.name,
                "group": a.group,
                "credit": a.credit,
                "budget": a.budget.map(|b| serde_json::json!({"amount": b, "period": a.period})),
                "expires": a.expires,
                "key": key,
            });
            println!("{v}");
            0
        }
        Ok(Changed::Key(key)) => {
            println!(
                "Created key {:?} in group {:?} ({}). It is shown only this once; store it now:",
                a.name,
                a.group,
                terms.join(", ")
            );
            println!("{key}");
            0
        }
        Ok(_) => 1,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// The change `keys add` makes: its group known to the config, budget and expiry checked.
fn add_change(config: &Config, a: &KeysAddArgs) -> Result<KeyChange, String> {
    let budget = match (a.budget, a.period.as_deref()) {
        (None, None) => None,
        (Some(x), Some(p)) => Some(budget_arg(x, p)?),
        _ => return Err("give --budget AMOUNT together with --period daily|weekly|monthly".into()),
    };
    let expires = a.expires.as_deref().map(expiry_arg).transpose()?;
    known_group(config, &a.group)?;
    Ok(KeyChange::Add {
        group: a.group.clone(),
        credit: a.credit,
        budget,
        expires,
    })
}

/// Creates the key `name` in `group` where `config` keeps its keys, audited as `tollgate keys add` does
/// (for callers that hold a config, such as a test harness); returns the key.
pub fn add(config: &Config, name: &str, group: &str) -> Result<String, String> {
    known_group(config, group)?;
    let place = Place::open(config)?;
    let trail = crate::audit::Trail::open(&config.data_dir).map_err(|e| e.to_string())?;
    let change = KeyChange::Add {
        group: group.to_string(),
        credit: None,
        budget: None,
        expires: None,
    };
    match crate::audit::change_key(place.at(), trail, crate::audit::ACTOR_CLI, name, &change) {
        Ok(Changed::Key(key)) => Ok(key),
        Ok(_) => Err("no key was made".into()),
        Err(e) => Err(flag_error(e)),
    }
}

/// Creates a key with no audit entry (the first start's key); returns the plaintext.
pub fn add_unaudited(config: &Config, name: &str, group: &str) -> Result<String, String> {
    known_group(config, group)?;
    key_ops::add_key(key_ops::KeysAt::Dir(&config.data_dir), name, group, None).map_err(flag_error)
}

/// A key operation's error with the flag that was wrong.
fn flag_error(e: key_ops::KeyOpError) -> String {
    if e.field.is_empty() {
        e.message
    } else {
        format!("--{}: {}", e.field, e.message)
    }
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
fn budget_arg(amount: Money, period: &str) -> Result<Budget, String> {
    Budget::new(amount, period).map_err(|e| format!("--budget/--period: {e}"))
}

/// `--expires` / `--at`: a UTC time.
fn expiry_arg(t: &str) -> Result<u64, String> {
    crate::util::parse_rfc3339(t)
        .ok_or_else(|| format!("expected a UTC time such as 2026-12-31T00:00:00Z, got {t:?}"))
}

fn list(a: KeysListArgs) -> i32 {
    let opened = super::load(a.config.as_deref()).and_then(|c| Place::open(&c).map(|p| (c, p)));
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
        Place::Dir(d) => crate::ledger::balances(d, now),
        Place::Store(_) => Default::default(),
    };
    let names: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    let shared = match &place {
        Place::Store(s) => s.balances(&names).unwrap_or_default(),
        Place::Dir(_) => Default::default(),
    };
    let spent = |name: &str| match &place {
        Place::Store(_) => shared
            .get(name)
            .map_or(crate::money::Money::ZERO, |b| b.spent),
        Place::Dir(_) => local.spent.get(name).copied().unwrap_or_default(),
    };
    let spent_in = |name: &str, period: crate::budget::Period| match &place {
        Place::Store(s) => s.period_spent(name, period, now).unwrap_or_default(),
        Place::Dir(_) => local
            .periods
            .get(name)
            .map_or(crate::money::Money::ZERO, |p| p.spent(period, now)),
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        let data: Vec<serde_json::Value> = records
            .iter()
            .map(|r| {
                let spent = spent(&r.name);
                serde_json::json!({
                    "name": r.name,
                    "group": r.group,
                    "credit": r.credit,
                    "spent": spent,
                    "balance": r.credit.map(|c| c - spent),
                    "disabled": r.disabled,
                    "created": r.created,
                    "expires": r.expires,
                    "budget": budget_json(&config, r, |p| spent_in(&r.name, p), now),
                })
            })
            .collect();
        let _ = writeln!(out, "{}", serde_json::json!({ "data": data }));
        return 0;
    }
    let _ = writeln!(
        out,
        "{:<24} {:<16} {:>12} {:>12} {:>12} {:<8} {:<20} {:<20} BUDGET",
        "NAME", "GROUP", "CREDIT", "SPENT", "BALANCE", "STATUS", "CREATED", "EXPIRES"
    );
    for r in &records {
        let credit = r.credit.map_or("unlimited".to_string(), |c| format!("{c}"));
        let spent = spent(&r.name);
        let balance = r
            .credit
            .map_or("unlimited".to_string(), |c| format!("{}", c - spent));
        let status = if r.disabled { "revoked" } else { "active" };
        let expires = r.expires.as_deref().unwrap_or("never");
        let budget = budget_text(&config, r, |p| spent_in(&r.name, p), now);
        let _ = writeln!(
            out,
            "{:<24} {:<16} {credit:>12} {spent:>12} {balance:>12} {status:<8} {:<20} {expires:<20} {budget}",
            r.name, r.group, r.created
        );
    }
    0
}

/// The budget in force for a key as JSON (`amount`, `period`, `from`, `spent`, `resets`), or null.
fn budget_json(
    config: &Config,
    r: &keys::KeyRecord,
    spent_in: impl Fn(crate::budget::Period) -> crate::money::Money,
    now: u64,
) -> serde_json::Value {
    let group = config.group(&r.group).and_then(|g| g.budget);
    let (b, from) = match (r.budget, group) {
        (Some(b), _) => (b, "key"),
        (None, Some(b)) => (b, "group"),
        (None, None) => return serde_json::Value::Null,
    };
    let start = b.period.start_of(now);
    serde_json::json!({
        "amount": b.amount,
        "period": b.period.name(),
        "from": from,
        "spent": spent_in(b.period),
        "resets": crate::util::rfc3339(b.period.end_of(start)),
    })
}

/// `10 daily (key): 2.5 spent, resets 2026-11-25T00:00:00Z`, or `none`.
fn budget_text(
    config: &Config,
    r: &keys::KeyRecord,
    spent_in: impl Fn(crate::budget::Period) -> crate::money::Money,
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
