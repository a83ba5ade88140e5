//! The command line: `serve`, `keys add|list|revoke|...`, `check`, `models`, `store status|rebuild`,
//! `doctor`. Every command returns its exit code. `args.rs` defines the arguments, `serve.rs` runs the
//! gateway, `keys.rs` the key commands (with a `[store]` in the config they act on the store, `store.rs`).

pub mod args;
pub mod keys;
mod serve;
mod store;

use std::path::Path;

use crate::config::Config;
pub use args::Args;
use args::Command;

/// Runs a command; returns the process exit code.
pub fn run(args: Args) -> i32 {
    match args.command {
        Command::Serve(a) => serve::serve(a),
        Command::Check(a) => check(&a.config, a.connect),
        Command::Models(a) => models(&a),
        Command::Store(a) => store::run(a),
        Command::Doctor(a) => crate::doctor::run(a),
        Command::Keys(k) => keys::run(k.command),
        Command::AdminToken(a) => match a.command {
            args::AdminTokenCommand::Rotate(r) => rotate_admin_token(r.config.as_deref()),
        },
    }
}

/// `tollgate admin-token rotate`: a new admin token in the data directory, printed once as the last line.
fn rotate_admin_token(config: Option<&Path>) -> i32 {
    use crate::access::admin_token::{self, Source};
    let c = match load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let path = match admin_token::source(&c) {
        Source::File(path) => path,
        Source::Env(var) | Source::Closed(var) => {
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
