//! The command line's side of a shared store: where the `keys` commands act, `check --connect`, and
//! `tollgate store status|rebuild`.

use std::path::{Path, PathBuf};

use super::args::{StoreArgs, StoreCommand, StoreRebuildArgs};
use crate::access::key_ops::{self, KeysAt};
use crate::access::keys::{self, KeyRecord};
use crate::config::Config;
use crate::store::Store;

/// Where the `keys` commands act: the config's store, or its data directory.
pub(super) enum Place {
    Dir(PathBuf),
    Store(Box<Store>),
}

impl Place {
    /// The config's store (it must answer; a new one is set up), or its data directory.
    pub(super) fn open(config: &Config) -> Result<Place, String> {
        let Some(settings) = &config.store else {
            return Ok(Place::Dir(config.data_dir.clone()));
        };
        let store = connect(config, settings)?;
        let v = store.versions().map_err(|e| unreachable(&store, &e))?;
        if v.epoch.is_none() {
            crate::server::cluster::set_up(config, &store).map_err(|e| e.to_string())?;
            eprintln!(
                "{} held no tollgate data: set up as a new store (this instance's keys and overrides copied in)",
                store.describe()
            );
        }
        Ok(Place::Store(Box::new(store)))
    }

    pub(super) fn at(&self) -> KeysAt<'_> {
        match self {
            Place::Dir(d) => KeysAt::Dir(d),
            Place::Store(s) => KeysAt::Store(s),
        }
    }

    /// Where, for messages.
    pub(super) fn describe(&self) -> String {
        match self {
            Place::Dir(d) => {
                let path = d.join(keys::KEYS_FILE);
                std::fs::canonicalize(&path)
                    .unwrap_or(path)
                    .display()
                    .to_string()
            }
            Place::Store(s) => s.describe(),
        }
    }
}

fn connect(
    config: &Config,
    settings: &crate::config::store::StoreSettings,
) -> Result<Store, String> {
    if let Some((field, var)) = settings.missing_variables().first() {
        return Err(format!(
            "{field}: the environment variable {var} is not set here"
        ));
    }
    Store::new(settings, &config.instance).map_err(|e| e.to_string())
}

fn unreachable(store: &Store, e: &crate::store::StoreError) -> String {
    format!("cannot reach the store, {}: {e}", store.describe())
}

/// `check --connect`: whether the store answers, and what to know about it. Returns the lines to print,
/// or the error.
pub(super) fn connect_check(config: &Config) -> Result<Vec<String>, String> {
    let Some(settings) = &config.store else {
        return Ok(vec![
            "no [store]: this instance keeps its keys and balances in its data_dir".to_string(),
        ]);
    };
    let store = connect(config, settings)?;
    let mut lines = Vec::new();
    if settings.sentinel.is_some() {
        lines.extend(sentinel_lines(settings)?);
    }
    let v = store.versions().map_err(|e| unreachable(&store, &e))?;
    let version = store.server_version().unwrap_or_else(|_| "?".into());
    lines.push(format!(
        "store: {} answers (server {version}); instance {:?}, prefix {:?}",
        store.describe(),
        config.instance,
        settings.prefix
    ));
    lines.push(match v.epoch {
        Some(_) => "store: holds tollgate data".to_string(),
        None => {
            "store: holds no tollgate data yet (the first `serve` or `keys` command sets it up)"
                .to_string()
        }
    });
    match store.persistence() {
        Ok(Some(true)) => lines.push(
            "store: keeps its data across a restart (appendonly yes)".to_string(),
        ),
        Ok(Some(false)) => lines.push(
            "warning: the store runs without `appendonly yes`: a Redis restart loses every balance and key \
             (tollgate store rebuild can restore them from the ledgers)"
                .to_string(),
        ),
        _ => lines.push(
            "note: cannot ask the store whether it persists its data (CONFIG GET refused); it should run with \
             `appendonly yes`"
                .to_string(),
        ),
    }
    if settings.replica_wait != crate::config::store::ReplicaWait::Off {
        lines.push(match store.replicas() {
            Some(0) => format!(
                "warning: the primary has no replica connected: replica_wait = {:?} has nothing to wait for, and a \
                 failover would have nothing to promote",
                settings.replica_wait.name()
            ),
            Some(n) => format!(
                "store: the primary has {} connected; replica_wait = {:?}",
                crate::util::plural(n as usize, "replica"),
                settings.replica_wait.name()
            ),
            None => format!(
                "note: the primary does not say how many replicas it has (ROLE refused); replica_wait = {:?} waits \
                 for one anyway",
                settings.replica_wait.name()
            ),
        });
    }
    Ok(lines)
}

/// `check --connect` with sentinels: which primary each sentinel names, the quorum, and whether each replica
/// answers. Err when no sentinel names one.
fn sentinel_lines(settings: &crate::config::store::StoreSettings) -> Result<Vec<String>, String> {
    let Some(s) = &settings.sentinel else {
        return Ok(Vec::new());
    };
    let within = settings.timeout.max(std::time::Duration::from_secs(2));
    let survey = crate::store::sentinel::survey(settings, within).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let mut named = Vec::new();
    for (address, said) in &survey.sentinels {
        lines.push(match said {
            Ok(primary) => {
                named.push(primary.clone());
                format!(
                    "sentinel {address}: names {primary} as the primary {:?}",
                    s.master_name
                )
            }
            Err(e) => format!(
                "warning: sentinel {address} does not name the primary {:?}: {e}",
                s.master_name
            ),
        });
    }
    named.sort();
    named.dedup();
    match named.len() {
        0 => {
            return Err(format!(
                "no sentinel names a primary {:?} that answers ({})",
                s.master_name,
                crate::util::plural(survey.sentinels.len(), "sentinel")
            ))
        }
        1 => {}
        _ => lines.push(format!(
            "warning: the sentinels disagree on the primary ({}): a failover is under way, or they are not one set",
            named.join(", ")
        )),
    }
    match &survey.quorum {
        Some(Ok(ok)) => lines.push(format!("sentinels: {ok}")),
        Some(Err(e)) => lines.push(format!("warning: the sentinels cannot fail over: {e}")),
        None => {}
    }
    if survey.replicas.is_empty() {
        lines.push(
            "warning: the sentinels know no replica of the primary: a failover would have nothing to promote"
                .to_string(),
        );
    }
    let answering = survey.replicas.iter().filter(|(_, r)| r.is_ok()).count();
    for (address, r) in &survey.replicas {
        lines.push(match r {
            Ok(()) => format!("replica {address}: answers"),
            Err(e) => format!("warning: replica {address} does not answer: {e}"),
        });
    }
    if !survey.replicas.is_empty() {
        lines.push(format!(
            "replicas: {answering} of {} answer",
            survey.replicas.len()
        ));
    }
    Ok(lines)
}

/// Runs `tollgate store ...`.
pub(super) fn run(args: StoreArgs) -> i32 {
    let result = match args.command {
        StoreCommand::Status(a) => status(&a.config),
        StoreCommand::Rebuild(a) => rebuild(&a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn load_with_store(path: &Path) -> Result<(Config, Store), String> {
    let config = Config::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(settings) = config.store.clone() else {
        return Err(format!("{}: has no [store] section", path.display()));
    };
    let store = connect(&config, &settings)?;
    Ok((config, store))
}

fn status(path: &Path) -> Result<(), String> {
    let (config, store) = load_with_store(path)?;
    for line in connect_check(&config)? {
        println!("{line}");
    }
    let records = key_ops::read_all(KeysAt::Store(&store)).map_err(|e| e.to_string())?;
    let active = records.iter().filter(|r| !r.deleted && !r.disabled).count();
    println!(
        "keys: {} ({active} active)",
        records.iter().filter(|r| !r.deleted).count()
    );
    let n = store.usage_len().map_err(|e| unreachable(&store, &e))?;
    println!(
        "usage stream: {n} records (keeps about {})",
        config.store.as_ref().map_or(0, |s| s.usage_stream_max)
    );
    let c = store
        .cursor(&config.instance)
        .map_err(|e| unreachable(&store, &e))?;
    let history = crate::ledger::History::at(&config.data_dir).map_err(|e| e.to_string())?;
    let mut at = None;
    for seq in history.seqs() {
        let fp = history.fingerprint(seq).map_err(|e| e.to_string())?;
        if !fp.is_empty() && fp == c.fingerprint {
            at = Some(seq);
        }
    }
    let rest = match at {
        Some(seq) if seq == history.active.seq => {
            format!(
                "{} of {} bytes of {} shipped",
                c.offset,
                history.active.len,
                crate::ledger::LEDGER_FILE
            )
        }
        Some(seq) => format!(
            "shipping rotated ledger file {seq} (byte {}); {} newer",
            c.offset,
            crate::util::plural(history.seqs().iter().filter(|s| **s > seq).count(), "file")
        ),
        None if c.fingerprint.starts_with("retired:") => {
            "shipping what retired ledger files held".into()
        }
        None => "nothing shipped yet".into(),
    };
    let done = at == Some(history.active.seq) && c.offset >= history.active.len;
    println!(
        "this instance ({:?}): {rest}{}",
        config.instance,
        if done {
            ""
        } else {
            " (the rest is shipped while `serve` runs)"
        }
    );
    Ok(())
}

/// The keys to restore: from `--keys`, else this instance's local copy, else its keys file.
fn keys_to_restore(
    config: &Config,
    from: Option<&Path>,
) -> Result<(PathBuf, Vec<KeyRecord>), String> {
    let candidates: Vec<PathBuf> = match from {
        Some(p) => vec![p.to_path_buf()],
        None => vec![
            config.data_dir.join(crate::server::cluster::KEYS_COPY),
            config.data_dir.join(keys::KEYS_FILE),
        ],
    };
    for p in candidates {
        let records = keys::read_keys(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        if !records.is_empty() {
            return Ok((p, records));
        }
    }
    Ok((PathBuf::new(), Vec::new()))
}

fn rebuild(a: &StoreRebuildArgs) -> Result<(), String> {
    let (config, store) = load_with_store(&a.config)?;
    let mut ledgers = vec![(
        config.instance.clone(),
        config.data_dir.join(crate::ledger::LEDGER_FILE),
    )];
    for l in &a.ledger {
        let (name, path) = l
            .split_once('=')
            .ok_or_else(|| format!("--ledger: expected INSTANCE=PATH, got {l:?}"))?;
        if name.is_empty() || ledgers.iter().any(|(n, _)| n == name) {
            return Err(format!(
                "--ledger: the instance name {name:?} is empty or given twice"
            ));
        }
        ledgers.push((name.to_string(), PathBuf::from(path)));
    }
    for (_, p) in &ledgers {
        if !p.exists() && p != &ledgers[0].1 {
            return Err(format!("--ledger: {} does not exist", p.display()));
        }
    }
    let fail = |e: crate::store::StoreError| unreachable(&store, &e);
    // Only a store no instance writes to: one that lost its data (its instances refuse and write nothing
    // until it is rebuilt), or one whose instances are all stopped. Beside a running instance, one that
    // admits, settles and ships while the balances are deleted and counted again, a request's cost would
    // count twice and reservations would be left that nothing gives back.
    if store.versions().map_err(fail)?.epoch.is_some() {
        let running = store.running_instances().map_err(fail)?;
        if !running.is_empty() {
            return Err(format!(
                "the store has not lost its data and {} running on it ({}): stop {} first (a rebuild beside a \
                 running instance would count spend twice), then run this again",
                if running.len() == 1 { "an instance is" } else { "instances are" },
                running.join(", "),
                if running.len() == 1 { "it" } else { "them" },
            ));
        }
    }
    // Keys and overrides: the store's own when it still has them.
    let in_store = key_ops::read_all(KeysAt::Store(&store)).map_err(|e| e.to_string())?;
    if in_store.is_empty() {
        let (from, records) = keys_to_restore(&config, a.keys.as_deref())?;
        if records.is_empty() {
            println!("keys: the store holds none and no local copy was found (add keys with `tollgate keys add`)");
        } else {
            key_ops::update_keys(KeysAt::Store(&store), |r| {
                if r.is_empty() {
                    r.extend(records.iter().cloned());
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
            println!("keys: {} restored from {}", records.len(), from.display());
        }
    } else {
        println!("keys: the store still holds {} (kept)", in_store.len());
    }
    crate::server::cluster::restore_overrides(&config, &store).map_err(|e| e.to_string())?;
    // Every balance, reservation, window and cursor goes; the ledgers say what was spent.
    for pattern in [
        "acct:*", "per:*", "res:*", "lease:*", "win:*", "winv:*", "cursor:*",
    ] {
        store.delete_matching(pattern).map_err(fail)?;
    }
    store.delete_matching("usage").map_err(fail)?;
    for (instance, path) in &ledgers {
        let shipped = ship_whole(&store, instance, path)?;
        println!(
            "ledger of {instance:?} ({}): {shipped} records",
            path.display()
        );
    }
    store
        .set_epoch(&format!(
            "{}{}",
            crate::server::cluster::REBUILT,
            crate::util::new_id("")
        ))
        .map_err(fail)?;
    println!(
        "store rebuilt: running instances admit requests again within a second; an instance whose ledger was not \
         given ships its own ledger again by itself"
    );
    Ok(())
}

/// Ships a whole ledger for `instance` from its start (what retired files held, then every file, rotated
/// and compressed ones included); returns how many records. `path` is a data directory, a ledger's
/// `usage.jsonl` (its rotated files beside it count too), or any other file (that file alone).
fn ship_whole(store: &Store, instance: &str, path: &Path) -> Result<u64, String> {
    let history = ledger_history(path).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::store::shipper::ship_all(store, instance, &history).map_err(|e| {
        if e.unavailable {
            unreachable(store, &e)
        } else {
            format!("{}: {e}", path.display())
        }
    })
}

/// The ledger files `path` names (see [`ship_whole`]).
fn ledger_history(path: &Path) -> std::io::Result<crate::ledger::History> {
    if path.is_dir() {
        return crate::ledger::History::at(path);
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if path.file_name() == Some(std::ffi::OsStr::new(crate::ledger::LEDGER_FILE)) {
        return crate::ledger::History::at(dir);
    }
    let file = crate::util::open_owned(path, std::fs::OpenOptions::new().read(true))?;
    let len = crate::ledger::complete_len(&file)?;
    Ok(crate::ledger::History {
        dir: dir.to_path_buf(),
        segments: Vec::new(),
        active: crate::ledger::Active {
            seq: 1,
            file: Some(std::sync::Arc::new(file)),
            len,
        },
        retired_through: 0,
        retired: None,
    })
}
