//! What tollgate's integration tests (`tests/`) and benchmarks (`bench/`) share, in one place:
//!
//! - [`gateway`]: a gateway under test, started in this process (`tollgate::server::run` on a listener bound
//!   here, its log captured per gateway: the default) or as the `tollgate serve` binary (the tests of
//!   signals, the CLI and start-up), with its key, data directory and log;
//! - [`upstream`]: the one fake upstream: a handler per request (tests: recorded requests, fixtures, gates,
//!   hangs, drops) or the benchmarks' canned answers steered by `bench:` markers (`fake-upstream`);
//! - [`http`] and [`client`]: raw HTTP for tests (requests written by hand, responses read piece by piece)
//!   and the keep-alive load client of the benchmarks, on one response-head parser; [`load`]: the load
//!   engine;
//! - [`procs`]: the process manager: the binaries, `tollgate serve` started and waited for, `keys add`,
//!   signals, `/proc` figures;
//! - [`redis`]: real `redis-server` processes (a server, or a primary, a replica and sentinels);
//! - [`tmpfs`]: a real small file system that fills (tmpfs, mounted for one test).

pub mod client;
pub mod gateway;
pub mod http;
pub mod load;
pub mod procs;
pub mod redis;
pub mod tmpfs;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use gateway::*;
pub use http::*;
pub use procs::{signal, wait_exit};
pub use tmpfs::Tmpfs;

/// The key every test upstream expects; the gateway reads it from this environment variable.
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-0123456789";
pub const UPSTREAM_KEY_ENV: &str = "TG_TEST_UPSTREAM_KEY";
/// The admin token of test gateways whose config says `admin_token_env = "TG_TEST_ADMIN_TOKEN"`.
pub const ADMIN_TOKEN: &str = "test-admin-token-7f3a9c";
pub const ADMIN_TOKEN_ENV: &str = "TG_TEST_ADMIN_TOKEN";

/// The `tollgate` binary the tests run (the one `cargo test` built with them).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| procs::tollgate_bin().to_string_lossy().into_owned())
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let mut n = [0u8; 8];
        getrandom::fill(&mut n).unwrap();
        let name: String = n.iter().map(|b| format!("{b:02x}")).collect();
        let p = std::env::temp_dir().join(format!("tollgate-test-{tag}-{name}"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `f` until it holds (30 s at most).
pub fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}
