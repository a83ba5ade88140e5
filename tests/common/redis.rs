//! A real `redis-server` (Debian package `redis-server`) for the tests of several instances: started on a
//! free port with its data in a temporary directory, killed (SIGKILL, as a crash) and started again on the
//! same data. No mock: the gateway talks to the real thing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
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
