//! `tollgate serve`, as named steps: the configuration (the file or the embedded defaults, `TOLLGATE_LISTEN`,
//! `--log-format`), logging, the listener, the first key (the embedded defaults only), the signal handlers,
//! the server (`server::run`: the data directory, the store, the keys, the ledger, the threads), then the
//! signals: the first SIGTERM or SIGINT (one that came during the start too) asks the server to stop and
//! drain, a second one exits at once.

use std::io::Write;
use std::net::TcpListener;

use super::args::ServeArgs;
use crate::config::Config;
use crate::server::{Shutdown, StartError};

/// Runs the gateway until a signal has stopped it; returns the exit code.
pub(super) fn serve(a: ServeArgs) -> i32 {
    let Some(config) = configuration(&a) else {
        return 1;
    };
    crate::logging::init(&config.log_level, config.log_format == "json");
    // The port first: a start that cannot listen must not mint (and print, once) a key nobody gets to use.
    let Some(listener) = bind(&config.listen, config.path.is_some()) else {
        return 1;
    };
    if config.path.is_none() && first_key(&config).is_err() {
        return 1;
    }
    if first_admin_token(&config, &listener).is_err() {
        return 1;
    }
    // The handlers before the start: a SIGTERM that comes as soon as the gateway answers (a supervisor's,
    // a test's) waits for them instead of killing the process with its default action, grace and all.
    use signal_hook::consts::{SIGINT, SIGTERM};
    let signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            log::error!("could not install signal handlers: {e}");
            return 1;
        }
    };
    let shutdown = Shutdown::new();
    let running = match crate::server::run(listener, config, shutdown.clone()) {
        Ok(r) => r,
        Err(e) => {
            log_start_error(&e);
            return 1;
        }
    };
    stop_on_signals(signals, &shutdown);
    running.join()
}

/// Each line of why the start failed, as an ERROR.
fn log_start_error(e: &StartError) {
    for line in e.to_string().lines() {
        log::error!("{line}");
    }
}

/// Waits for SIGTERM or SIGINT (one that came during the start included) and asks the server to stop; a
/// second signal exits at once.
fn stop_on_signals(mut signals: signal_hook::iterator::Signals, shutdown: &Shutdown) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let first = signals.forever().next();
    shutdown.request(match first {
        Some(SIGTERM) => "SIGTERM",
        Some(SIGINT) => "SIGINT",
        _ => "a signal",
    });
    let second = std::thread::Builder::new().name("tollgate-signals".into());
    let _ = crate::logging::thread(second, move || {
        if signals.forever().next().is_some() {
            log::warn!("second signal: exiting without waiting");
            log::logger().flush();
            std::process::exit(1);
        }
    });
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

/// The configuration `serve` runs with: the file's (or the embedded defaults), `TOLLGATE_LISTEN` and
/// `--log-format` applied. None: the reason was printed.
fn configuration(a: &ServeArgs) -> Option<Config> {
    let mut config = match super::load(a.config.as_deref()) {
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
    Some(config)
}

/// Where the console is, as the listener gives it (an address on every interface as this machine's own).
fn console_url(listener: &TcpListener) -> String {
    match listener.local_addr() {
        Ok(mut a) => {
            if a.ip().is_unspecified() {
                a.set_ip(match a {
                    std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            format!("http://{a}/console")
        }
        Err(_) => "/console".into(),
    }
}

/// When the admin token is the one kept in the data directory (the config names no `admin_token_env` and
/// `TOLLGATE_ADMIN_TOKEN` is unset) and there is none yet, makes it and prints it once with the console's
/// address: the console works on the first run, with no restart.
fn first_admin_token(config: &Config, listener: &TcpListener) -> Result<(), ()> {
    use crate::access::admin_token::{self, TokenSource};
    let TokenSource::File(path) = admin_token::source(config) else {
        return Ok(());
    };
    if std::fs::symlink_metadata(&path).is_ok() {
        return Ok(());
    }
    if let Err(e) = crate::server::data_dir_ready(config) {
        log_start_error(&e);
        return Err(());
    }
    match admin_token::make(&path) {
        Ok(token) => {
            crate::secrets::register_own([token.as_str()]);
            println!(
                "First start: created the admin token for the console at {} (and the admin API). It is shown \
                 only this once; `tollgate admin-token rotate` makes a new one:",
                console_url(listener)
            );
            println!("{token}");
            let _ = std::io::stdout().flush();
            Ok(())
        }
        Err(e) => {
            log::error!(
                "could not create the admin token in {}: {e}",
                path.display()
            );
            Err(())
        }
    }
}

/// Only the embedded defaults (a newcomer's first command) get a key minted for them, on the first start
/// (no keys file yet), once the port is bound. With a config file the operator creates keys; an unlimited
/// key nobody asked for is not made behind their back.
fn first_key(config: &Config) -> Result<(), ()> {
    if let Err(e) = crate::server::data_dir_ready(config) {
        log_start_error(&e);
        return Err(());
    }
    let keys_file = config.data_dir.join(crate::access::keys::KEYS_FILE);
    if std::fs::symlink_metadata(keys_file).is_ok() {
        return Ok(());
    }
    let group = crate::server::first_group(config);
    match super::keys::add_unaudited(config, "default", &group) {
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
