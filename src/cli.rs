//! The command line: `serve`, `keys add|list|revoke`, `check`. Every command returns its exit code.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use argh::FromArgs;

use crate::access::keys::{self, KeyRecord, KEYS_FILE};
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
}

#[derive(FromArgs)]
/// Run the gateway (without --config: built-in defaults, mock model, 127.0.0.1:8080).
#[argh(subcommand, name = "serve")]
pub struct ServeArgs {
    /// config file (TOML)
    #[argh(option)]
    pub config: Option<PathBuf>,
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
    pub credit: Option<f64>,
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
/// Validate a config file; exits 1 naming the bad field.
#[argh(subcommand, name = "check")]
pub struct CheckArgs {
    /// config file (TOML)
    #[argh(option)]
    pub config: PathBuf,
}

/// Runs a command; returns the process exit code.
pub fn run(args: Args) -> i32 {
    match args.command {
        Command::Serve(a) => serve(a),
        Command::Check(a) => check(&a.config),
        Command::Keys(k) => match k.command {
            KeysCommand::Add(a) => keys_add(a),
            KeysCommand::List(a) => keys_list(a),
            KeysCommand::Revoke(a) => keys_revoke(a),
        },
    }
}

fn load(config: Option<&Path>) -> Result<Config, String> {
    match config {
        None => Ok(Config::embedded()),
        Some(p) => Config::load(p).map_err(|e| format!("{}: {e}", p.display())),
    }
}

fn check(path: &Path) -> i32 {
    match Config::load(path) {
        Ok(c) => {
            println!(
                "{}: OK ({} upstreams, {} models, {} groups; listens on {})",
                path.display(),
                c.upstreams.len(),
                c.models.len(),
                c.groups.len(),
                c.listen
            );
            0
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            1
        }
    }
}

/// Holds an exclusive lock on the keys file's companion lock file while it is read-modified-written.
fn lock_keys(data_dir: &Path) -> Result<fs::File, String> {
    fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let path = data_dir.join("keys.lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    f.lock()
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(f)
}

fn read_keys_or_msg(path: &Path) -> Result<Vec<KeyRecord>, String> {
    keys::read_keys(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Adds a key; returns the plaintext.
fn add_key(
    config: &Config,
    name: &str,
    group: &str,
    credit: Option<f64>,
) -> Result<String, String> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--name: expected a non-empty name without spaces, got {name:?}"
        ));
    }
    if config.group(group).is_none() {
        let known: Vec<&str> = config.groups.iter().map(|g| g.name.as_str()).collect();
        return Err(format!(
            "--group: unknown group {group:?}; expected one of [{}]",
            known.join(", ")
        ));
    }
    if let Some(c) = credit {
        if !(c.is_finite() && c >= 0.0) {
            return Err(format!(
                "--credit: expected an amount of 0 or more, got {c}"
            ));
        }
    }
    let _lock = lock_keys(&config.data_dir)?;
    let path = config.data_dir.join(KEYS_FILE);
    let mut records = read_keys_or_msg(&path)?;
    if let Some(existing) = records.iter().find(|r| r.name == name) {
        let state = if existing.disabled { " (revoked)" } else { "" };
        return Err(format!(
            "--name: a key named {name:?} already exists{state}; choose another name"
        ));
    }
    let key = keys::generate_key();
    records.push(KeyRecord {
        name: name.to_string(),
        group: group.to_string(),
        hash: keys::hash_key(&key),
        credit,
        disabled: false,
        created: crate::util::rfc3339(crate::util::unix_now()),
    });
    keys::write_keys(&path, &records)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(key)
}

fn keys_add(a: KeysAddArgs) -> i32 {
    let config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    match add_key(&config, &a.name, &a.group, a.credit) {
        Ok(key) => {
            let credit = a.credit.map_or("unlimited".to_string(), |c| c.to_string());
            println!(
                "Created key {:?} in group {:?} (credit: {credit}). It is shown only this once; store it now:",
                a.name, a.group
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
    let config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let records = match read_keys_or_msg(&config.data_dir.join(KEYS_FILE)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<24} {:<16} {:>12} {:<8} CREATED",
        "NAME", "GROUP", "CREDIT", "STATUS"
    );
    for r in &records {
        let credit = r.credit.map_or("unlimited".to_string(), |c| format!("{c}"));
        let status = if r.disabled { "revoked" } else { "active" };
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:>12} {:<8} {}",
            r.name, r.group, credit, status, r.created
        );
    }
    0
}

fn keys_revoke(a: KeysRevokeArgs) -> i32 {
    let config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let result = (|| -> Result<(), String> {
        let _lock = lock_keys(&config.data_dir)?;
        let path = config.data_dir.join(KEYS_FILE);
        let mut records = read_keys_or_msg(&path)?;
        let Some(r) = records.iter_mut().find(|r| r.name == a.name) else {
            return Err(format!("--name: no key named {:?}", a.name));
        };
        r.disabled = true;
        keys::write_keys(&path, &records)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    })();
    match result {
        Ok(()) => {
            println!("Revoked key {:?}.", a.name);
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn init_logging(level: &str) {
    let level = level.parse().unwrap_or(log::LevelFilter::Info);
    let _ = simple_logger::SimpleLogger::new()
        .with_level(level)
        .with_utc_timestamps()
        .init();
}

fn serve(a: ServeArgs) -> i32 {
    let mut config = match load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    // TOLLGATE_LISTEN overrides `listen` (containers, and running the defaults on another port).
    if let Ok(listen) = std::env::var("TOLLGATE_LISTEN") {
        if listen.parse::<std::net::SocketAddr>().is_err() {
            eprintln!("TOLLGATE_LISTEN: expected host:port such as 0.0.0.0:8080, got {listen:?}");
            return 1;
        }
        config.listen = listen;
    }
    init_logging(&config.log_level);
    if let Err(e) = fs::create_dir_all(&config.data_dir) {
        log::error!("cannot create data_dir {}: {e}", config.data_dir.display());
        return 1;
    }
    let keys_path = config.data_dir.join(KEYS_FILE);
    if !keys_path.exists() {
        let group = config
            .groups
            .first()
            .map(|g| g.name.clone())
            .unwrap_or_else(|| "default".into());
        match add_key(&config, "default", &group, None) {
            Ok(key) => {
                println!("First start: created the API key \"default\" (group {group:?}). It is shown only this once:");
                println!("{key}");
                let _ = std::io::stdout().flush();
            }
            Err(e) => {
                log::error!("could not create the first key: {e}");
                return 1;
            }
        }
    }
    let keys = match crate::access::KeyStore::open(&config.data_dir) {
        Ok(k) => k,
        Err(e) => {
            log::error!("cannot read {}: {e}", keys_path.display());
            return 1;
        }
    };
    let listener = match TcpListener::bind(&config.listen) {
        Ok(l) => l,
        Err(e) => {
            log::error!("cannot listen on {}: {e}", config.listen);
            return 1;
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.clone());
    log::info!(
        "tollgate {} listening on http://{addr} ({} models, {} keys, {} workers, data in {})",
        env!("CARGO_PKG_VERSION"),
        config.models.len(),
        keys.len(),
        config.workers,
        config.data_dir.display()
    );
    crate::server::run(config, keys, listener)
}
