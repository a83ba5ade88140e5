//! A gateway under test on a free port: in this process (`tollgate::server::run` on a listener bound here,
//! its log captured per gateway; the default), or as the `tollgate serve` binary (`spawn_*`,
//! `start_command`: the tests of signals, the CLI, start-up and the process itself). In-process gateways in
//! one test binary are independent: each has its own configuration, environment ([`test_env`]), threads,
//! log, metrics and data; what the process shares is only ever added to (the credentials scrubbed from
//! texts and logs, the upstream addresses hidden from clients), never in the way of another gateway.

use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http::{read_response, send_request, Response};
use crate::procs::{self, signal, wait_exit};
use crate::{bin, wait_for, TempDir, ADMIN_TOKEN, ADMIN_TOKEN_ENV, UPSTREAM_KEY, UPSTREAM_KEY_ENV};

/// A running gateway: in this process, or a `tollgate serve` process.
pub struct Gateway {
    server: Server,
    pub addr: SocketAddr,
    /// A key of the first `[[groups]]`: with `--config`, made with `tollgate keys add` before the start (a
    /// server with a config file mints none); with the embedded defaults, the one printed at first start.
    pub key: String,
    pub dir: TempDir,
    pub logs: Arc<Mutex<Vec<String>>>,
    /// What a `tollgate serve` process printed on stdout (nothing for one in this process).
    pub printed: Arc<Mutex<Vec<String>>>,
}

/// The built-in mock model at a price (so that its requests cost something), and the group `default` with
/// every model: the start of the store tests' configs.
pub const PRICED_MOCK: &str = r#"
[[upstreams]]
name = "mock"
kind = "mock"

[[models]]
name = "mock"
upstream = "mock"
input_price = 1000.0
output_price = 10000.0

[[groups]]
name = "default"
models = ["*"]
"#;

/// The header of a config for tests: listen on a free port, data in the temp dir.
pub fn base_config(dir: &Path, extra_top: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n{extra_top}\n",
        dir.join("data").display()
    )
}

/// A config with the mock model plus one model per upstream kind pointing at `fake` (when given).
pub fn standard_config(dir: &Path, fake: Option<SocketAddr>, extra_top: &str) -> String {
    let mut c = base_config(dir, extra_top);
    c.push_str(
        "[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n[[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n",
    );
    if let Some(f) = fake {
        c.push_str(&format!(
            r#"
[[upstreams]]
name = "chat-up"
kind = "openai-chat"
base_url = "http://{f}/v1"
api_key_env = "{UPSTREAM_KEY_ENV}"

[[upstreams]]
name = "responses-up"
kind = "openai-responses"
base_url = "http://{f}/v1"
api_key_env = "{UPSTREAM_KEY_ENV}"

[[upstreams]]
name = "anthropic-up"
kind = "anthropic"
base_url = "http://{f}"
api_key_env = "{UPSTREAM_KEY_ENV}"

[[models]]
name = "m-chat"
upstream = "chat-up"
upstream_model = "real-chat-model"

[[models]]
name = "m-responses"
upstream = "responses-up"
upstream_model = "real-responses-model"

[[models]]
name = "m-messages"
upstream = "anthropic-up"
upstream_model = "real-messages-model"
"#
        ));
    }
    c.push_str("\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n");
    c
}

/// Config tables for a Gemini API upstream at `fake` and its model `m-gemini` (upstream model
/// `real-gemini-model`), to put at the top of a config (`extra_top` of [`standard_config`]).
pub fn gemini_upstream(fake: SocketAddr) -> String {
    format!(
        r#"
[[upstreams]]
name = "gemini-up"
kind = "gemini"
base_url = "http://{fake}"
api_key_env = "{UPSTREAM_KEY_ENV}"

[[models]]
name = "m-gemini"
upstream = "gemini-up"
upstream_model = "real-gemini-model"
"#
    )
}

/// How a gateway runs.
enum Server {
    /// `tollgate::server::run` in this process: stopped (drained, its requests cut at once) on drop.
    InProcess {
        shutdown: tollgate::server::Shutdown,
        joined: Option<std::thread::JoinHandle<i32>>,
    },
    /// A `tollgate serve` process: killed on drop.
    Spawned(Child),
}

/// The environment of every test gateway: the upstreams' key and the admin token set, no
/// `TOLLGATE_ADMIN_TOKEN` from the caller's environment.
pub fn test_env() -> tollgate::config::Env {
    tollgate::config::Env::process()
        .set(UPSTREAM_KEY_ENV, UPSTREAM_KEY)
        .set(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
        .unset("TOLLGATE_ADMIN_TOKEN")
}

impl Gateway {
    /// Writes `config` (which must listen on 127.0.0.1:0) and starts a gateway with it in this process, with
    /// a key made as `tollgate keys add` makes it.
    pub fn start_with(dir: TempDir, config: &str) -> Gateway {
        Gateway::in_process(dir, config, &[], None)
    }

    /// As [`start_with`](Self::start_with), with more environment variables for the gateway (its
    /// [`test_env`] plus `env`: upstream keys, store passwords); `key`: the key an earlier start made (None:
    /// one is made now).
    pub fn start_with_env(
        dir: TempDir,
        config: &str,
        env: &[(&str, &str)],
        key: Option<&str>,
    ) -> Gateway {
        Gateway::in_process(dir, config, env, key.map(str::to_string))
    }

    /// Writes `config` (which must listen on 127.0.0.1:0) and starts `tollgate serve` with it.
    pub fn spawn_with(dir: TempDir, config: &str) -> Gateway {
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--config"]).arg(&cfg);
        Gateway::start_command(dir, &mut cmd)
    }

    /// Starts `config` in this process: `tollgate::server::run` on a listener bound here, its log captured
    /// into [`Gateway::logs`]; `key`: the key an earlier start made (None: one is made now).
    fn in_process(
        dir: TempDir,
        config: &str,
        env: &[(&str, &str)],
        key: Option<String>,
    ) -> Gateway {
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, config).unwrap();
        let env = env.iter().fold(test_env(), |e, (k, v)| e.set(k, v));
        let config = tollgate::config::Config::load_in(&cfg, &env)
            .unwrap_or_else(|e| panic!("{}: {e}", cfg.display()));
        let key = key.unwrap_or_else(|| {
            let group = tollgate::server::first_group(&config);
            tollgate::cli::keys::add(&config, "default", &group)
                .unwrap_or_else(|e| panic!("the first key could not be made: {e}"))
        });
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let capture = tollgate::logging::Capture::new(
            &config.log_level,
            config.log_format == "json",
            move |line| sink.lock().unwrap().push(line.to_string()),
        );
        let _logging_here = tollgate::logging::capture_into(Some(capture));
        let listener =
            std::net::TcpListener::bind(&config.listen).expect("bind the listen address");
        let shutdown = tollgate::server::Shutdown::new();
        let running =
            tollgate::server::run(listener, config, shutdown.clone()).unwrap_or_else(|e| {
                panic!(
                    "tollgate did not start: {e}\n{}",
                    logs.lock().unwrap().join("\n")
                )
            });
        let addr = running.addr().expect("the gateway's address");
        let joined = tollgate::logging::thread(
            std::thread::Builder::new().name("test-gateway".into()),
            move || running.join(),
        )
        .expect("start the gateway's join thread");
        Gateway {
            server: Server::InProcess {
                shutdown,
                joined: Some(joined),
            },
            addr,
            key,
            dir,
            logs,
            printed: Arc::default(),
        }
    }

    /// Starts a prepared command (which must run `tollgate serve`, directly or in an `sh -c` script) and
    /// waits for its address and key. With `--config FILE` the key is first made with `tollgate keys add`
    /// (same environment and directory); without, it is read from the first-start output.
    pub fn start_command(dir: TempDir, cmd: &mut Command) -> Gateway {
        Gateway::start_command_keyed(dir, cmd, None)
    }

    /// Starts again on existing data, in this process: the first key was made by an earlier start.
    pub fn restart(dir: TempDir, config: &str, key: &str) -> Gateway {
        Gateway::in_process(dir, config, &[], Some(key.to_string()))
    }

    /// Starts `tollgate serve` again on existing data: the first key was made by an earlier start.
    pub fn respawn(dir: TempDir, config: &str, key: &str) -> Gateway {
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--config"]).arg(&cfg);
        Gateway::start_command_keyed(dir, &mut cmd, Some(key.to_string()))
    }

    fn start_command_keyed(dir: TempDir, cmd: &mut Command, known_key: Option<String>) -> Gateway {
        cmd.env(UPSTREAM_KEY_ENV, UPSTREAM_KEY)
            .env(ADMIN_TOKEN_ENV, ADMIN_TOKEN)
            .env_remove("TOLLGATE_ADMIN_TOKEN");
        let known_key = known_key.or_else(|| {
            let config = config_arg(cmd)?;
            Some(first_key_for(cmd, &config))
        });
        let s = procs::serve(cmd, procs::Output::Piped, known_key.is_none());
        Gateway {
            server: Server::Spawned(s.child),
            addr: s.addr,
            key: known_key.or(s.key).expect("a key"),
            dir,
            logs: s.logs,
            printed: s.printed,
        }
    }

    /// Mock model only.
    pub fn start_mock(extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), None, extra_top);
        Gateway::start_with(dir, &config)
    }

    /// Mock model only, as a `tollgate serve` process.
    pub fn spawn_mock(extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), None, extra_top);
        Gateway::spawn_with(dir, &config)
    }

    /// Mock model plus one model per upstream kind at `fake`.
    pub fn start_with_fake(fake: SocketAddr, extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), Some(fake), extra_top);
        Gateway::start_with(dir, &config)
    }

    /// Mock model plus one model per upstream kind at `fake`, Gemini's included, and the admin token; `chat`:
    /// lines added to the `m-chat` entry (its prices), `more`: tables added at the end (groups).
    pub fn start_every_kind(fake: SocketAddr, chat: &str, more: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let top = format!(
            "admin_token_env = \"{ADMIN_TOKEN_ENV}\"\n{}",
            gemini_upstream(fake)
        );
        let config = standard_config(dir.path(), Some(fake), &top).replace(
            "upstream_model = \"real-chat-model\"",
            &format!("upstream_model = \"real-chat-model\"\n{chat}"),
        ) + more;
        Gateway::start_with(dir, &config)
    }

    /// Mock model plus one model per upstream kind at `fake`, as a `tollgate serve` process.
    pub fn spawn_with_fake(fake: SocketAddr, extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), Some(fake), extra_top);
        Gateway::spawn_with(dir, &config)
    }

    /// Leaves the data directory in place when this gateway is dropped (for a restart on the same data).
    pub fn keep_dir(&mut self) {
        let dir = std::mem::replace(
            &mut self.dir,
            TempDir(PathBuf::from("/nonexistent/tollgate-test")),
        );
        std::mem::forget(dir);
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("tollgate.toml")
    }

    /// The summary log line of a request (the one with its status and tokens), waiting for it.
    pub fn log_line(&self, request_id: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self
                .logs
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(request_id) && l.contains(" status="))
            {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "no log line for {request_id}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn all_logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// A streamed Chat request for `model` sent as HTTP/1.0 (no chunked coding for its answer) with this
    /// gateway's key, on a new connection: the connection, to read the answer from.
    pub fn post_http10_stream(&self, model: &str) -> TcpStream {
        use std::io::Write;
        let body = serde_json::json!({"model": model, "stream": true,
            "messages": [{"role": "user", "content": "old client"}]})
        .to_string();
        let mut s = self.connect();
        write!(
            s,
            "POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.key,
            body.len()
        )
        .unwrap();
        s
    }

    /// One request on a new connection.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut s = self.connect();
        send_request(&mut s, method, path, headers, body, true);
        read_response(&mut BufReader::new(s))
    }

    /// POST JSON with `Authorization: Bearer <key>` (plus `anthropic-version` for /v1/messages).
    pub fn post(&self, path: &str, body: &Value) -> Response {
        let auth = format!("Bearer {}", self.key);
        let mut h = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        if path == "/v1/messages" {
            h.push(("anthropic-version", "2023-06-01"));
        }
        self.request("POST", path, &h, body.to_string().as_bytes())
    }

    /// A `tollgate serve` process started by the caller, listening at `addr`, its stderr lines in `logs`.
    pub fn adopt(
        child: Child,
        addr: SocketAddr,
        key: String,
        dir: TempDir,
        logs: Arc<Mutex<Vec<String>>>,
    ) -> Gateway {
        Gateway {
            server: Server::Spawned(child),
            addr,
            key,
            dir,
            logs,
            printed: Arc::default(),
        }
    }

    /// The process id of a spawned gateway.
    pub fn pid(&self) -> u32 {
        match &self.server {
            Server::Spawned(child) => child.id(),
            Server::InProcess { .. } => panic!(
                "this gateway runs in the test's process: start it with Gateway::spawn_* to signal or measure it"
            ),
        }
    }

    /// The process of a spawned gateway.
    pub fn child(&mut self) -> &mut Child {
        match &mut self.server {
            Server::Spawned(child) => child,
            Server::InProcess { .. } => panic!(
                "this gateway runs in the test's process: start it with Gateway::spawn_* to wait for its exit"
            ),
        }
    }

    /// Stops an in-process gateway as a signal would (requests in flight get the grace period, then the
    /// drain) and returns its exit code.
    pub fn stop(&mut self) -> i32 {
        match &mut self.server {
            Server::InProcess { shutdown, joined } => {
                shutdown.request("a stop asked by the test");
                joined
                    .take()
                    .map_or(0, |j| j.join().expect("the gateway's join thread"))
            }
            Server::Spawned(child) => {
                signal(child.id(), "TERM");
                wait_exit(child, Duration::from_secs(60)).expect("tollgate exits after SIGTERM")
            }
        }
    }

    /// Runs `tollgate <args> --config <this gateway's config>`: (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(bin())
            .args(args)
            .arg("--config")
            .arg(self.config_path())
            .env(UPSTREAM_KEY_ENV, UPSTREAM_KEY)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Creates a key with the CLI and waits until the running gateway accepts it.
    pub fn add_key(&self, name: &str, group: &str, credit: Option<f64>) -> String {
        let credit = credit.map(|c| c.to_string());
        let mut args = vec!["keys", "add", "--name", name, "--group", group];
        if let Some(c) = &credit {
            args.extend(["--credit", c.as_str()]);
        }
        let (code, out, err) = self.cli(&args);
        assert_eq!(code, 0, "keys add: {err}");
        let key = out.lines().last().unwrap().to_string();
        let auth = format!("Bearer {key}");
        wait_for(
            || {
                self.request("GET", "/v1/models", &[("authorization", &auth)], b"")
                    .status
                    == 200
            },
            "the new key",
        );
        key
    }

    /// GET an admin endpoint with the admin token.
    pub fn admin(&self, path_and_query: &str) -> Response {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        self.request("GET", path_and_query, &[("authorization", &auth)], b"")
    }

    /// The usage record of the request `r` answered (by its `x-request-id`), as the admin API gives it;
    /// `null` when there is none. Needs the admin token (`admin_token_env`).
    pub fn record_of(&self, r: &Response) -> Value {
        let id = r.header("x-request-id").unwrap_or_default();
        self.admin(&format!("/admin/usage?request_id={id}")).json()["data"][0].clone()
    }

    /// The key named `name` as `GET /admin/keys` lists it (credit, spent, balance, ...).
    pub fn key_row(&self, name: &str) -> Value {
        self.admin("/admin/keys").json()["data"]
            .as_array()
            .unwrap_or_else(|| panic!("no key list"))
            .iter()
            .find(|k| k["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no key {name}"))
    }

    /// POST JSON to an admin endpoint with the admin token.
    pub fn admin_post(&self, path: &str, body: &Value) -> Response {
        let auth = format!("Bearer {ADMIN_TOKEN}");
        self.request(
            "POST",
            path,
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    }

    /// POST JSON to `path` with this key.
    pub fn post_as(&self, key: &str, path: &str, body: &Value) -> Response {
        let auth = format!("Bearer {key}");
        let mut h = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        if path == "/v1/messages" {
            h.push(("anthropic-version", "2023-06-01"));
        }
        self.request("POST", path, &h, body.to_string().as_bytes())
    }
}

/// The `--config FILE` of a `tollgate serve` command, or of the `sh -c` script that runs it.
fn config_arg(cmd: &Command) -> Option<PathBuf> {
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for (i, a) in args.iter().enumerate() {
        if a == "--config" {
            return args.get(i + 1).map(PathBuf::from);
        }
        if let Some((_, rest)) = a.split_once("--config ") {
            return rest.split_whitespace().next().map(PathBuf::from);
        }
    }
    None
}

/// The name of the first `[[groups]]` of a config file ("default" when it has none).
pub fn first_group(config: &Path) -> String {
    let text = std::fs::read_to_string(config)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", config.display()));
    let value: toml::Value =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{} is not TOML: {e}", config.display()));
    value
        .get("groups")
        .and_then(|g| g.get(0))
        .and_then(|g| g.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("default")
        .to_string()
}

/// `tollgate keys add --config CONFIG --name default --group <first group>` with the environment and working
/// directory `cmd` will start with; returns the key (the last line of its output).
fn first_key_for(cmd: &Command, config: &Path) -> String {
    let mut add = Command::new(bin());
    if let Some(d) = cmd.get_current_dir() {
        add.current_dir(d);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => add.env(k, v),
            None => add.env_remove(k),
        };
    }
    procs::keys_add(&mut add, config, "default", &first_group(config), None)
}

impl Drop for Gateway {
    fn drop(&mut self) {
        match &mut self.server {
            Server::Spawned(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Server::InProcess { shutdown, joined } => {
                shutdown.request_now("the end of the test");
                if let Some(j) = joined.take() {
                    let _ = j.join();
                }
            }
        }
    }
}

impl Gateway {
    /// Starts a prepared `tollgate serve` command (its own environment kept) on existing data: the first key
    /// was made by an earlier start, on this gateway's store or data.
    pub fn restart_command(dir: TempDir, cmd: &mut Command, key: &str) -> Gateway {
        Gateway::start_command_keyed(dir, cmd, Some(key.to_string()))
    }
}
