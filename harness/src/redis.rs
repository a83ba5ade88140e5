//! A real `redis-server` (Debian package `redis-server`) for the tests of several instances: started on a
//! free port with its data in a temporary directory, killed (SIGKILL, as a crash) and started again on the
//! same data. No mock: the gateway talks to the real thing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::TempDir;

pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
    /// `appendonly yes`: the data survives a restart.
    persist: bool,
    /// `requirepass`, if any.
    password: Option<String>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Redis {
    /// Starts a server; `persist`: with `appendonly yes` (what the README asks for).
    pub fn start(persist: bool) -> Redis {
        Redis::start_with(persist, None)
    }

    /// Starts a server that requires `password` (`requirepass`).
    pub fn start_with(persist: bool, password: Option<&str>) -> Redis {
        let mut r = Redis {
            child: None,
            port: free_port(),
            dir: TempDir::new("redis"),
            persist,
            password: password.map(str::to_string),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", if self.persist { "yes" } else { "no" }])
            .args(["--appendfsync", "always"])
            // DEBUG SLEEP stands for a Redis that stops answering for a while.
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(
                self.password
                    .as_ref()
                    .map(|p| vec!["--requirepass".to_string(), p.clone()])
                    .unwrap_or_default(),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): the tests of several instances need a real Redis \
                     (Debian: apt-get install redis-server; .ci/run installs it)"
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let ping = |r: &Redis| match &r.password {
            // Answered -NOAUTH: up.
            Some(_) => r
                .command(&["PING"])
                .is_some_and(|l| l.starts_with('-') || l == "+PONG"),
            None => r.command(&["PING"]).as_deref() == Some("+PONG"),
        };
        while !ping(self) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// The `[store]` section for a gateway config, with a short reservation lease.
    pub fn store_section(&self, extra: &str) -> String {
        format!(
            "[store]\nurl = \"{}\"\nprefix = \"t:\"\nlease_secs = 5\n{extra}\n",
            self.url()
        )
    }

    /// Kills the server with SIGKILL (a crash: nothing is flushed beyond what `appendfsync always` wrote).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and data directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// One command over RESP; the reply's first line (`+OK`, `:3`, `$5` followed by the value's line is
    /// returned as the value), None when the server does not answer.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).ok()?;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let line = line.trim_end().to_string();
        if let Some(n) = line.strip_prefix('$') {
            let n: i64 = n.parse().ok()?;
            if n < 0 {
                return Some(String::new());
            }
            let mut buf = vec![0u8; n as usize + 2];
            r.read_exact(&mut buf).ok()?;
            buf.truncate(n as usize);
            return Some(String::from_utf8_lossy(&buf).into_owned());
        }
        Some(line)
    }

    /// Every command the server runs from now on (`MONITOR`), on a thread, until `stop`; the EVALSHA calls
    /// made by clients (not the commands inside scripts) are kept, each as its arguments.
    pub fn monitor_scripts(&self, stop: Arc<AtomicBool>) -> Arc<Mutex<Vec<Vec<String>>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        s.write_all(b"*1\r\n$7\r\nMONITOR\r\n").unwrap();
        let mut r = BufReader::new(s);
        let mut ok = String::new();
        r.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim_end(), "+OK");
        let out = seen.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while !stop.load(Ordering::Relaxed) {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        // Commands a script runs say `[0 lua]`; a client's say its address.
                        if line.contains(" lua] ") {
                            continue;
                        }
                        let args = monitor_args(line.trim_end());
                        if args
                            .first()
                            .is_some_and(|c| c.eq_ignore_ascii_case("EVALSHA"))
                        {
                            out.lock().unwrap().push(args);
                        }
                    }
                    Err(_) => {}
                }
            }
        });
        seen
    }

    /// A hash field's value ("" when absent).
    pub fn hget(&self, key: &str, field: &str) -> String {
        self.command(&["HGET", key, field]).unwrap_or_default()
    }

    /// An integer reply (`XLEN`, `DBSIZE`).
    pub fn int(&self, args: &[&str]) -> i64 {
        self.command(args)
            .and_then(|l| l.strip_prefix(':').and_then(|n| n.parse().ok()))
            .unwrap_or(-1)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One server process of a [`ReplicaSet`] (a data node or a sentinel) on its own free port.
pub struct Node {
    child: Option<Child>,
    pub port: u16,
    /// Stopped with SIGSTOP (`ReplicaSet::stop_sentinel`).
    pub stopped: bool,
}

impl Node {
    /// Kills it with SIGKILL (a crash).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A primary, a replica and three sentinels on free ports of this machine, each a real process of `server`
/// (`redis-server`, or `valkey-server`; the sentinels are the same binary with `--sentinel` and a generated
/// sentinel.conf), with passwords on the data nodes and on the sentinels. The sentinels notice a dead primary
/// after 500 ms and fail over within 3 s, so a test sees a switch in a couple of seconds.
pub struct ReplicaSet {
    server: String,
    /// The data nodes: the first started as the primary, the second as its replica.
    pub nodes: Vec<Node>,
    pub sentinels: Vec<Node>,
    pub master_name: String,
    dir: TempDir,
}

/// The data nodes' password (`requirepass`, and `masterauth` between them).
pub const NODE_PASSWORD: &str = "node-secret-4b1c9e";
/// The sentinels' own password.
pub const SENTINEL_PASSWORD: &str = "sentinel-secret-8d2f7a";
/// The variables a gateway reads them from (`password_env`, `sentinel_password_env`).
pub const NODE_PASSWORD_ENV: &str = "TG_TEST_NODE_PASSWORD";
pub const SENTINEL_PASSWORD_ENV: &str = "TG_TEST_SENTINEL_PASSWORD";

impl ReplicaSet {
    /// Starts the five processes and waits until the sentinels know the replica and each other (so a
    /// failover can happen).
    pub fn start(server: &str) -> ReplicaSet {
        let dir = TempDir::new("replica-set");
        let mut set = ReplicaSet {
            server: server.to_string(),
            nodes: Vec::new(),
            sentinels: Vec::new(),
            master_name: "tg-primary".to_string(),
            dir,
        };
        let primary = set.data_node(None);
        let primary_port = primary.port;
        set.nodes.push(primary);
        let replica = set.data_node(Some(primary_port));
        set.nodes.push(replica);
        let replica_port = set.nodes[1].port;
        wait_until(
            || {
                resp(replica_port, Some(NODE_PASSWORD), &["INFO", "replication"])
                    .is_some_and(|v| v.concat().contains("master_link_status:up"))
            },
            "the replica in sync with the primary",
        );
        for i in 0..3 {
            let s = set.sentinel(i, primary_port);
            set.sentinels.push(s);
        }
        for s in &set.sentinels {
            let port = s.port;
            let name = set.master_name.clone();
            wait_until(
                || {
                    let replicas = resp(
                        port,
                        Some(SENTINEL_PASSWORD),
                        &["SENTINEL", "REPLICAS", &name],
                    );
                    let others = resp(
                        port,
                        Some(SENTINEL_PASSWORD),
                        &["SENTINEL", "SENTINELS", &name],
                    );
                    replicas.is_some_and(|r| r.contains(&replica_port.to_string()))
                        && others.is_some_and(|o| o.iter().filter(|f| *f == "name").count() == 2)
                },
                "each sentinel knowing the replica and the other sentinels",
            );
        }
        set
    }

    fn spawn(&self, args: &[String], what: &str) -> Child {
        Command::new(&self.server)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}) for {what}: the Sentinel tests need real servers (Debian: apt-get \
                     install redis-server, which also runs as a sentinel; .ci/run installs it)",
                    self.server
                )
            })
    }

    /// A data node (a replica of `primary` when given), in a directory of its own.
    fn data_node(&self, primary: Option<u16>) -> Node {
        let port = free_port();
        let dir = self.dir.path().join(format!("node-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--requirepass",
            NODE_PASSWORD,
            "--masterauth",
            NODE_PASSWORD,
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(dir.display().to_string());
        if let Some(p) = primary {
            args.extend([
                "--replicaof".to_string(),
                "127.0.0.1".to_string(),
                p.to_string(),
            ]);
        }
        let child = self.spawn(&args, "a data node");
        wait_until(
            || resp(port, Some(NODE_PASSWORD), &["PING"]).is_some_and(|v| v == ["PONG"]),
            "a data node answering",
        );
        Node {
            child: Some(child),
            port,
            stopped: false,
        }
    }

    /// Sentinel `i`, watching `primary` (quorum 2 of 3).
    fn sentinel(&self, i: usize, primary: u16) -> Node {
        let port = free_port();
        let dir = self.dir.path().join(format!("sentinel-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let name = &self.master_name;
        let conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nrequirepass {SENTINEL_PASSWORD}\n\
             sentinel sentinel-pass {SENTINEL_PASSWORD}\n\
             sentinel monitor {name} 127.0.0.1 {primary} 2\nsentinel auth-pass {name} {NODE_PASSWORD}\n\
             sentinel down-after-milliseconds {name} 500\nsentinel failover-timeout {name} 3000\n\
             sentinel parallel-syncs {name} 1\n",
            dir = dir.display()
        );
        let path = dir.join("sentinel.conf");
        std::fs::write(&path, conf).unwrap();
        let child = self.spawn(
            &[path.display().to_string(), "--sentinel".to_string()],
            "a sentinel",
        );
        wait_until(
            || resp(port, Some(SENTINEL_PASSWORD), &["PING"]).is_some_and(|v| v == ["PONG"]),
            "a sentinel answering",
        );
        Node {
            child: Some(child),
            port,
            stopped: false,
        }
    }

    /// Stops sentinel `i` with SIGSTOP: its port still accepts connections (the kernel does that), but it
    /// answers nothing, as a hung process. It is killed with the set.
    pub fn stop_sentinel(&mut self, i: usize) {
        let s = &mut self.sentinels[i];
        if let Some(c) = &s.child {
            let ok = Command::new("kill")
                .arg("-STOP")
                .arg(c.id().to_string())
                .status()
                .is_ok_and(|st| st.success());
            assert!(ok, "kill -STOP failed");
        }
        s.stopped = true;
    }

    /// The port of the primary the sentinels name now (asking the first that answers; a stopped one is
    /// skipped).
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().filter(|s| !s.stopped).find_map(|s| {
            let v = resp(
                s.port,
                Some(SENTINEL_PASSWORD),
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.master_name],
            )?;
            v.get(1)?.parse().ok()
        })
    }

    /// The data node on `port`.
    pub fn node(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a data node on that port")
    }

    /// Every port of the set (data nodes and sentinels), to check that none reaches a client.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .chain(&self.sentinels)
            .map(|n| n.port)
            .collect()
    }

    /// The `[store]` section for a gateway config: the sentinels, the primary's name, both passwords from
    /// the environment (`NODE_PASSWORD_ENV`, `SENTINEL_PASSWORD_ENV`), a short reservation lease.
    pub fn store_section(&self, extra: &str) -> String {
        let list: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("\"127.0.0.1:{}\"", s.port))
            .collect();
        format!(
            "[store]\nsentinels = [{}]\nmaster_name = \"{}\"\npassword_env = \"{NODE_PASSWORD_ENV}\"\n\
             sentinel_password_env = \"{SENTINEL_PASSWORD_ENV}\"\nprefix = \"t:\"\nlease_secs = 5\n{extra}\n",
            list.join(", "),
            self.master_name
        )
    }

    /// An integer reply of a data node (`WAIT`, `DBSIZE`).
    pub fn int(&self, port: u16, args: &[&str]) -> Option<i64> {
        resp(port, Some(NODE_PASSWORD), args)?.first()?.parse().ok()
    }
}

/// Polls `f` until it holds (30 s at most).
fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One command over RESP on a fresh connection, after `AUTH` when a password is given. The reply
/// flattened: a simple string, integer or bulk string is one item, an array its items in order (nested ones
/// flattened too); None when the server does not answer or answers an error.
pub fn resp(port: u16, password: Option<&str>, args: &[&str]) -> Option<Vec<String>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let encode = |args: &[&str]| {
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        req
    };
    let mut req = String::new();
    if let Some(pw) = password {
        req.push_str(&encode(&["AUTH", pw]));
    }
    req.push_str(&encode(args));
    s.write_all(req.as_bytes()).ok()?;
    let mut r = BufReader::new(s);
    if password.is_some() {
        read_value(&mut r)?;
    }
    read_value(&mut r)
}

fn read_value(r: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end();
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "+" | ":" => Some(vec![rest.to_string()]),
        "$" => {
            let n: i64 = rest.parse().ok()?;
            if n < 0 {
                return Some(Vec::new());
            }
            let mut buf = vec![0u8; n as usize + 2];
            r.read_exact(&mut buf).ok()?;
            buf.truncate(n as usize);
            Some(vec![String::from_utf8_lossy(&buf).into_owned()])
        }
        "*" => {
            let n: i64 = rest.parse().ok()?;
            let mut out = Vec::new();
            for _ in 0..n.max(0) {
                out.extend(read_value(r)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// The arguments of one command as `MONITOR` prints them (`"EVALSHA" "ab12…" "7" "t:acct:k" …`).
fn monitor_args(line: &str) -> Vec<String> {
    let Some(start) = line.find("] ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = line[start + 2..].chars();
    while let Some(c) = chars.next() {
        match (&mut cur, c) {
            (None, '"') => cur = Some(String::new()),
            (Some(s), '\\') => {
                if let Some(n) = chars.next() {
                    s.push(n);
                }
            }
            (Some(_), '"') => out.extend(cur.take()),
            (Some(s), c) => s.push(c),
            (None, _) => {}
        }
    }
    out
}
