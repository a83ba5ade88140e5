//! Starting and watching the processes under test (tollgate and the fake upstream), and reading their CPU
//! time, memory, threads and descriptors from `/proc`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the release binaries are: next to this example's executable (`target/release/examples/`).
pub struct Bins {
    pub tollgate: PathBuf,
    pub examples: PathBuf,
}

impl Bins {
    pub fn locate() -> Bins {
        let exe = std::env::current_exe().expect("current_exe");
        let examples = exe.parent().expect("examples dir").to_path_buf();
        // BENCH_TOLLGATE measures another build (an earlier version, side by side: `bench/run.sh --compare`).
        let tollgate = std::env::var_os("BENCH_TOLLGATE").map_or_else(
            || examples.parent().expect("release dir").join("tollgate"),
            PathBuf::from,
        );
        if !tollgate.exists() {
            panic!(
                "{} not found: build it first (cargo build --release --bin tollgate)",
                tollgate.display()
            );
        }
        Bins { tollgate, examples }
    }

    pub fn example(&self, name: &str) -> PathBuf {
        self.examples.join(name)
    }
}

/// Clock ticks per second for `/proc/<pid>/stat` times.
pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process (all its threads, dead ones included), in seconds.
pub fn cpu_secs(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(close) = text.rfind(')') else {
        return 0.0;
    };
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // After the command name: field 3 (state) is f[0]; utime is field 14, stime field 15.
    let utime: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (utime + stime) / tck()
}

fn tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(clk_tck)
}

/// A line of `/proc/<pid>/status` as a number (the kB fields: VmRSS, VmHWM; or Threads).
pub fn status_field(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field) {
            if let Some(rest) = rest.strip_prefix(':') {
                return rest
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
            }
        }
    }
    0
}

/// Resident memory in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_field(pid, "VmRSS") as f64 / 1024.0
}

/// Peak resident memory in MiB.
pub fn hwm_mib(pid: u32) -> f64 {
    status_field(pid, "VmHWM") as f64 / 1024.0
}

pub fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads")
}

pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The fake upstream, running.
pub struct Upstream {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Upstream {
    pub fn start(bins: &Bins) -> Upstream {
        let mut child = Command::new(bins.example("fake-upstream"))
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fake-upstream");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .rsplit("http://")
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("fake-upstream said {line:?}"));
        Upstream { child, addr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A work directory for one tollgate instance: config file, data dir, logs.
pub struct Instance {
    pub dir: PathBuf,
    pub config: PathBuf,
}

impl Instance {
    /// Writes `config` (TOML; `data_dir` is set to `data` inside the directory) into a fresh directory.
    pub fn new(root: &Path, name: &str, config: &str) -> Instance {
        let dir = root.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tollgate.toml");
        std::fs::write(&path, config).unwrap();
        Instance { dir, config: path }
    }

    /// `tollgate keys add`; returns the key.
    pub fn add_key(&self, bins: &Bins, name: &str, group: &str, credit: Option<f64>) -> String {
        let mut cmd = Command::new(&bins.tollgate);
        cmd.args(["keys", "add", "--config"])
            .arg(&self.config)
            .args(["--name", name, "--group", group]);
        if let Some(c) = credit {
            cmd.args(["--credit", &c.to_string()]);
        }
        let out = cmd.output().expect("tollgate keys add");
        assert!(
            out.status.success(),
            "tollgate keys add failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .rev()
            .find(|l| l.trim().starts_with("tg_"))
            .map(|l| l.trim().to_string())
            .expect("key on the last stdout line")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("tollgate.log")
    }

    pub fn ledger_path(&self) -> PathBuf {
        self.dir.join("data").join("usage.jsonl")
    }
}

/// A running tollgate.
pub struct Gateway {
    pub child: Child,
    pub addr: SocketAddr,
    pub started: Instant,
    /// From spawn to the `listening on` log line.
    pub listening_after: Duration,
}

impl Gateway {
    /// Starts `tollgate serve` on a free port (given by `TOLLGATE_LISTEN`, so it works at any log level)
    /// with stderr going to the instance's log file, and waits until the port accepts connections.
    pub fn start(bins: &Bins, inst: &Instance, env: &[(&str, &str)]) -> Gateway {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = std::fs::File::create(inst.log_path()).unwrap();
        let out = std::fs::File::create(inst.dir.join("tollgate.stdout")).unwrap();
        let started = Instant::now();
        let mut cmd = Command::new(&bins.tollgate);
        cmd.args(["serve", "--config"])
            .arg(&inst.config)
            .env("TOLLGATE_LISTEN", addr.to_string())
            .stdout(out)
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start tollgate");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Gateway {
                    child,
                    addr,
                    started,
                    listening_after: started.elapsed(),
                };
            }
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(inst.log_path()).unwrap_or_default();
                panic!("tollgate exited ({status}) before listening:\n{text}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tollgate did not accept connections on {addr} within 30 s");
            }
            std::thread::sleep(Duration::from_micros(250));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM and wait for the exit (the ledger is flushed on a clean stop).
    pub fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A free local port (bound and released; a tiny race is acceptable for a benchmark).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A command's stdout, trimmed ("?" if it fails).
pub fn command_output(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// Where a process's resident memory is, from `/proc/<pid>/smaps`: file-backed and named mappings by
/// name, anonymous mappings grouped by their size (thread stacks, malloc arenas and large allocations
/// show up as many mappings of one size). Returns (label, mappings, RSS KiB), largest RSS first.
pub fn smaps_breakdown(pid: u32) -> Vec<(String, usize, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut groups: std::collections::HashMap<String, (usize, u64)> = Default::default();
    let mut label = String::new();
    let mut size_kb = 0u64;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let path = parts.get(5).copied().unwrap_or("");
            label = if path.is_empty() {
                String::new()
            } else if path.starts_with('[') {
                path.to_string()
            } else {
                std::path::Path::new(path)
                    .file_name()
                    .map(|f| f.to_string_lossy().to_string())
                    .unwrap_or_default()
            };
            if !label.is_empty() {
                if let Some(e) = groups.get_mut(&label) {
                    e.0 += 1;
                } else {
                    groups.insert(label.clone(), (1, 0));
                }
            }
        } else if let Some(v) = line.strip_prefix("Size:") {
            size_kb = v
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if label.is_empty() {
                let l = format!("anonymous {size_kb} KiB mappings");
                groups.entry(l).or_default().0 += 1;
            }
        } else if let Some(v) = line.strip_prefix("Rss:") {
            let rss: u64 = v
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let l = if label.is_empty() {
                format!("anonymous {size_kb} KiB mappings")
            } else {
                label.clone()
            };
            groups.entry(l).or_default().1 += rss;
        }
    }
    let mut v: Vec<(String, usize, u64)> =
        groups.into_iter().map(|(k, (n, r))| (k, n, r)).collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.2));
    v
}
