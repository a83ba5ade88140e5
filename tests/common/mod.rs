//! Test harness: starts the real `tollgate` binary on a free port, talks raw HTTP to it, and runs a fake
//! upstream that replays fixtures from `fixtures/`.
#![allow(dead_code)]

pub mod redis;
pub mod upstream;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The key every test upstream expects; the gateway reads it from this environment variable.
pub const UPSTREAM_KEY: &str = "sk-upstream-secret-0123456789";
pub const UPSTREAM_KEY_ENV: &str = "TG_TEST_UPSTREAM_KEY";
/// The admin token of test gateways whose config says `admin_token_env = "TG_TEST_ADMIN_TOKEN"`.
pub const ADMIN_TOKEN: &str = "test-admin-token-7f3a9c";
pub const ADMIN_TOKEN_ENV: &str = "TG_TEST_ADMIN_TOKEN";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tollgate")
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

/// A running gateway process.
pub struct Gateway {
    pub child: Child,
    pub addr: SocketAddr,
    /// A key of the first `[[groups]]`: with `--config`, made with `tollgate keys add` before the start (a
    /// server with a config file mints none); with the embedded defaults, the one printed at first start.
    pub key: String,
    pub dir: TempDir,
    pub logs: Arc<Mutex<Vec<String>>>,
}

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

impl Gateway {
    /// Writes `config` (which must listen on 127.0.0.1:0) and starts `tollgate serve` with it.
    pub fn start_with(dir: TempDir, config: &str) -> Gateway {
        let cfg = dir.path().join("tollgate.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--config"]).arg(&cfg);
        Gateway::start_command(dir, &mut cmd)
    }

    /// Starts a prepared command (which must run `tollgate serve`, directly or in an `sh -c` script) and
    /// waits for its address and key. With `--config FILE` the key is first made with `tollgate keys add`
    /// (same environment and directory); without, it is read from the first-start output.
    pub fn start_command(dir: TempDir, cmd: &mut Command) -> Gateway {
        Gateway::start_command_keyed(dir, cmd, None)
    }

    /// Starts again on existing data: the first key was printed by an earlier start.
    pub fn restart(dir: TempDir, config: &str, key: &str) -> Gateway {
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
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tollgate");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        {
            let logs = logs.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(i) = line.find("listening on http://") {
                        let rest = &line[i + "listening on http://".len()..];
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = tx.send(format!("addr {addr}"));
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("tg_") {
                    let _ = tx.send(format!("key {line}"));
                }
            }
        });
        let mut addr = None;
        let mut key = known_key;
        let deadline = Instant::now() + Duration::from_secs(30);
        while addr.is_none() || key.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(m) if m.starts_with("addr ") => addr = Some(m[5..].parse().unwrap()),
                Ok(m) if m.starts_with("key ") => key = Some(m[4..].to_string()),
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!("tollgate did not start: {:?}", logs.lock().unwrap());
                }
            }
        }
        Gateway {
            child,
            addr: addr.unwrap(),
            key: key.unwrap(),
            dir,
            logs,
        }
    }

    /// Mock model only.
    pub fn start_mock(extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), None, extra_top);
        Gateway::start_with(dir, &config)
    }

    /// Mock model plus one model per upstream kind at `fake`.
    pub fn start_with_fake(fake: SocketAddr, extra_top: &str) -> Gateway {
        let dir = TempDir::new("gw");
        let config = standard_config(dir.path(), Some(fake), extra_top);
        Gateway::start_with(dir, &config)
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

    pub fn pid(&self) -> u32 {
        self.child.id()
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
    add.args(["keys", "add", "--config"]).arg(config).args([
        "--name",
        "default",
        "--group",
        &first_group(config),
    ]);
    if let Some(d) = cmd.get_current_dir() {
        add.current_dir(d);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => add.env(k, v),
            None => add.env_remove(k),
        };
    }
    let out = add.output().expect("run tollgate keys add");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tollgate keys add before the start failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let key = stdout.lines().last().unwrap_or("").trim().to_string();
    assert!(key.starts_with("tg_"), "no key from keys add: {stdout}");
    key
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// Writes a request with Content-Length.
pub fn send_request(
    s: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    close: bool,
) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if close {
        req.push_str("Connection: close\r\n");
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes).unwrap();
}

/// A response as read off the wire.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// SSE events of the body: (event name, data).
    pub fn events(&self) -> Vec<(Option<String>, String)> {
        parse_sse(&self.text())
    }
}

/// Reads one response head (status line and headers).
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "connection closed before a response"
        );
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        if status != 100 {
            return (status, headers);
        }
    }
}

/// Reads one whole response (Content-Length or chunked).
pub fn read_response(r: &mut impl BufRead) -> Response {
    let (status, headers) = read_head(r);
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while let Some(chunk) = read_chunk(r) {
            body.extend_from_slice(&chunk);
        }
    } else if let Some(n) = find("content-length") {
        body.resize(n.parse().unwrap(), 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

/// Reads one chunk of a chunked body; `None` at the last chunk.
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut data = vec![0u8; size + 2];
    r.read_exact(&mut data).ok()?;
    data.truncate(size);
    if size == 0 {
        return None;
    }
    Some(data)
}

/// Splits SSE text into (event, data) pairs, skipping comments.
pub fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut event = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                event = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if event.is_some() || !data.is_empty() {
            out.push((event, data.join("\n")));
        }
    }
    out
}

/// The fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Sends a signal with the system's `kill`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Waits for a child to exit (bounded), returning its exit code.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Gateway {
    /// Starts a prepared `tollgate serve` command (its own environment kept) on existing data: the first key
    /// was made by an earlier start, on this gateway's store or data.
    pub fn restart_command(dir: TempDir, cmd: &mut Command, key: &str) -> Gateway {
        Gateway::start_command_keyed(dir, cmd, Some(key.to_string()))
    }
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
