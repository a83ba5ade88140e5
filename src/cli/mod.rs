//! The command line: `serve`, `keys add|list|revoke|...`, `check`, `models`, `store status|rebuild`,
//! `doctor`. Every command returns its exit code. `args.rs` defines the arguments, `serve.rs` runs the
//! gateway, `keys.rs` the key commands (with a `[store]` in the config they act on the store, `store.rs`).

pub(crate) mod args;
pub mod keys;
mod serve;
mod store;
mod usage;

use std::path::Path;

use crate::config::Config;
pub use args::Args;
use args::Command;

/// Runs a command; returns the process exit code.
pub fn run(args: Args) -> i32 {
    match args.command {
        Command::Serve(a) => serve::serve(a),
        Command::Check(a) => check(&a),
        Command::Models(a) => models(&a),
        Command::Store(a) => store::run(a),
        Command::Doctor(a) => crate::doctor::run(a),
        Command::Keys(k) => keys::run(k.command),
        Command::Usage(a) => usage::run(a),
        Command::AdminToken(a) => match a.command {
            args::AdminTokenCommand::Rotate(r) => rotate_admin_token(r.config.as_deref()),
        },
    }
}

/// `tollgate admin-token rotate`: a new admin token in the data directory, printed once as the last line.
fn rotate_admin_token(config: Option<&Path>) -> i32 {
    use crate::access::admin_token::{self, TokenSource};
    let c = match load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let path = match admin_token::source(&c) {
        TokenSource::File(path) => path,
        TokenSource::Env(var) | TokenSource::Closed(var) => {
            eprintln!(
                "the admin token comes from the environment variable {var} (admin_token_env): change it there and \
                 restart tollgate; remove admin_token_env from the config (and leave TOLLGATE_ADMIN_TOKEN unset) \
                 to keep one in the data directory instead"
            );
            return 1;
        }
    };
    if let Err(e) = crate::util::create_private_dir_all(&c.data_dir) {
        eprintln!("cannot create data_dir {}: {e}", c.data_dir.display());
        return 1;
    }
    match admin_token::make(&path) {
        Ok(token) => {
            println!(
                "New admin token (the old one no longer works; a running server takes it at its next admin \
                 request). It is shown only this once:"
            );
            println!("{token}");
            0
        }
        Err(e) => {
            eprintln!("cannot write {}: {e}", path.display());
            1
        }
    }
}

fn load(config: Option<&Path>) -> Result<Config, String> {
    match config {
        None => Ok(Config::embedded()),
        Some(p) => Config::load(p).map_err(|e| format!("{}: {e}", p.display())),
    }
}

/// What `check` found: the config (when it can be used), its errors (each with its line) and warnings.
struct Checked {
    config: Option<Config>,
    errors: Vec<crate::config::ConfigError>,
    warnings: Vec<String>,
}

fn checked(path: &Path) -> Checked {
    match Config::load(path) {
        Ok(c) => {
            let mut warnings = c.warnings.clone();
            for u in &c.upstreams {
                if let Some(var) = &u.missing_key {
                    warnings.push(format!(
                        "upstreams {:?}: the environment variable {var} (api_key_env) is not set here; `serve` \
                         starts, but this upstream's requests get 502 until it is set",
                        u.name
                    ));
                }
            }
            if let Some(w) = crate::util::data_dir_exposure(&c.data_dir) {
                warnings.push(w);
            }
            if let Some(s) = &c.store {
                for (field, var) in s.missing_variables() {
                    warnings.push(format!(
                        "{field}: the environment variable {var} is not set here; the store will refuse this \
                         instance"
                    ));
                }
            }
            Checked {
                config: Some(c),
                errors: Vec::new(),
                warnings,
            }
        }
        Err(e) => Checked {
            config: None,
            errors: if e.problems.is_empty() {
                vec![e.clone()]
            } else {
                e.problems.clone()
            },
            warnings: e.warnings.clone(),
        },
    }
}

/// `tollgate check`: every problem of the file (errors, each with its line, then warnings); exit 1 when any
/// error. With `--json`, one document on stdout.
fn check(a: &args::CheckArgs) -> i32 {
    let path = a.config.as_path();
    let found = checked(path);
    let mut connected: Option<Result<Vec<String>, String>> = None;
    if let (Some(c), true) = (&found.config, a.connect) {
        connected = Some(store::connect_check(c));
    }
    let failed = !found.errors.is_empty() || matches!(connected, Some(Err(_)));
    if a.json {
        let errors: Vec<serde_json::Value> = found
            .errors
            .iter()
            .map(|e| serde_json::json!({"line": e.line, "field": e.field, "message": e.message}))
            .collect();
        let mut v = serde_json::json!({
            "file": path.display().to_string(),
            "ok": !failed,
            "errors": errors,
            "warnings": found.warnings,
        });
        if let Some(c) = &found.config {
            v["listen"] = serde_json::json!(c.listen);
            v["upstreams"] = serde_json::json!(c.upstreams.len());
            v["models"] = serde_json::json!(c.models.len());
            v["groups"] = serde_json::json!(c.groups.len());
            v["list_prices"] = serde_json::json!(crate::config::list_price_lines(&c.models));
        }
        match &connected {
            Some(Ok(lines)) => v["store"] = serde_json::json!({"ok": true, "said": lines}),
            Some(Err(e)) => v["store"] = serde_json::json!({"ok": false, "error": e}),
            None => {}
        }
        println!("{v}");
        return i32::from(failed);
    }
    let Some(c) = &found.config else {
        eprintln!(
            "{}: {}:",
            path.display(),
            crate::util::plural(found.errors.len(), "error")
        );
        for e in &found.errors {
            eprintln!("  {e}");
        }
        for w in &found.warnings {
            eprintln!("  warning: {w}");
        }
        return 1;
    };
    println!(
        "{}: OK ({}, {}, {}; listens on {})",
        path.display(),
        crate::util::plural(c.upstreams.len(), "upstream"),
        crate::util::plural(c.models.len(), "model"),
        crate::util::plural(c.groups.len(), "group"),
        c.listen
    );
    for w in &found.warnings {
        println!("warning: {w}");
    }
    for l in crate::config::list_price_lines(&c.models) {
        println!("list price: {l}");
    }
    match connected {
        Some(Ok(lines)) => {
            for l in lines {
                println!("{l}");
            }
            0
        }
        Some(Err(e)) => {
            eprintln!("{}: {e}", path.display());
            1
        }
        None => 0,
    }
}

/// `tollgate models`: each configured model's prices and where they come from; with `--list-prices`, the
/// built-in table.
fn models(a: &args::ModelsArgs) -> i32 {
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
    if a.json {
        let data: Vec<serde_json::Value> = c
            .models
            .iter()
            .map(|m| {
                let prices: serde_json::Map<String, serde_json::Value> = m
                    .prices
                    .all_prices()
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::json!(v)))
                    .collect();
                serde_json::json!({
                    "name": m.name,
                    "aliases": m.aliases,
                    "upstreams": m.upstreams,
                    "upstream_model": m.upstream_model,
                    "max_output_tokens": m.max_output_tokens,
                    "prices": prices,
                    "price_source": m.prices.source.name(),
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "data": data }));
        return 0;
    }
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
