//! The process manager of the tests and the benchmarks: where the binaries are, starting `tollgate serve`
//! and waiting until it listens (its stderr read for the address, or its port polled), `tollgate keys add`,
//! signals and exits, and reading a process's CPU time, memory, threads and descriptors from `/proc`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `tollgate` binary of the build that runs this program: next to it (`target/release/` for the
/// benchmarks) or one directory up (`target/debug/deps/` for the tests).
pub fn tollgate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let name = format!("tollgate{}", std::env::consts::EXE_SUFFIX);
    let dir = exe.parent().expect("the program's directory");
    let candidates = [Some(dir.join(&name)), dir.parent().map(|p| p.join(&name))];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no tollgate binary next to {} or above it: build it first (cargo build --bin tollgate)",
                exe.display()
            )
        })
}

/// Where the benchmark programs and the `tollgate` they measure are: the release build's directory.
pub struct Bins {
    pub tollgate: PathBuf,
    /// The directory of this program and the other benchmark programs.
    pub dir: PathBuf,
}

impl Bins {
    pub fn locate() -> Bins {
        let exe = std::env::current_exe().expect("current_exe");
        let dir = exe.parent().expect("the program's directory").to_path_buf();
        // BENCH_TOLLGATE measures another build (an earlier version, side by side: `bench/run.sh --compare`).
        let tollgate = std::env::var_os("BENCH_TOLLGATE").map_or_else(tollgate_bin, PathBuf::from);
        if !tollgate.exists() {
            panic!(
                "{} not found: build it first (cargo build --release --bin tollgate)",
                tollgate.display()
            );
        }
        Bins { tollgate, dir }
    }

    /// Another benchmark program (`fake-upstream`, `loadgen`).
    pub fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
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

/// A process's context switches (voluntary and not, over all its threads) and its read and write system
/// calls so far (`/proc/PID/io`; 0 where not readable).
pub fn switches_and_syscalls(pid: u32) -> [u64; 3] {
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            switches += status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    [switches, field("syscr:"), field("syscw:")]
}

/// A local `redis-server`'s command counts so far (`INFO commandstats`): (script calls, every other
/// command, those its scripts called included); (0, 0) when it does not answer.
pub fn redis_command_counts(port: u16) -> (u64, u64) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, 0);
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    if s.write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        .is_err()
    {
        return (0, 0);
    }
    // A bulk string: "$<len>\r\n<text>\r\n".
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut want = None;
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if want.is_none() {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                want = std::str::from_utf8(&buf[1..end])
                    .ok()
                    .and_then(|l| l.parse::<usize>().ok())
                    .map(|l| end + 2 + l);
            }
        }
        if want.is_some_and(|w| buf.len() >= w) {
            break;
        }
    }
    let (mut scripts, mut others) = (0, 0);
    for line in String::from_utf8_lossy(&buf).lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls=")?.parse::<u64>().ok())
            .unwrap_or(0);
        match name {
            "eval" | "evalsha" => scripts += calls,
            // The counting itself.
            "info" => {}
            _ => others += calls,
        }
    }
    (scripts, others)
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
        let mut child = Command::new(bins.program("fake-upstream"))
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
        let credit = credit.map(|c| c.to_string());
        keys_add(&mut cmd, &self.config, name, group, credit.as_deref())
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
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = Command::new(&bins.tollgate);
        cmd.args(["serve", "--config"])
            .arg(&inst.config)
            .env("TOLLGATE_LISTEN", addr.to_string());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let output = Output::Files {
            log: inst.log_path(),
            stdout: inst.dir.join("tollgate.stdout"),
            addr,
        };
        let s = serve(&mut cmd, output, false);
        Gateway {
            child: s.child,
            addr: s.addr,
            started: s.started,
            listening_after: s.listening_after,
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
        let code = wait_exit(&mut self.child, Duration::from_secs(60));
        if code.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        code
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

/// Where a started `tollgate serve` writes, and how it is known to listen.
pub enum Output {
    /// Both piped: stderr lines kept (and scanned for `listening on http://ADDR`), stdout scanned for a
    /// first-start key (`tg_…`).
    Piped,
    /// stderr and stdout into files; it listens when `addr` accepts a connection (at any log level).
    Files {
        log: PathBuf,
        stdout: PathBuf,
        addr: SocketAddr,
    },
}

/// A `tollgate serve` process that listens.
pub struct Serving {
    pub child: Child,
    pub addr: SocketAddr,
    /// Its stderr lines, as they come (`Output::Piped`).
    pub logs: Arc<Mutex<Vec<String>>>,
    /// The key a first start printed (`Output::Piped`, asked for with `want_key`).
    pub key: Option<String>,
    /// Its stdout lines, as they come (`Output::Piped`).
    pub printed: Arc<Mutex<Vec<String>>>,
    pub started: Instant,
    /// From spawn to listening.
    pub listening_after: Duration,
}

/// Spawns `cmd` (which runs `tollgate serve`, directly or in an `sh -c` script) and waits up to 30 s until
/// it listens (and, with `want_key`, printed its first key). A process that exits or does not listen in
/// time is a panic naming its log.
pub fn serve(cmd: &mut Command, output: Output, want_key: bool) -> Serving {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    let logs = Arc::new(Mutex::new(Vec::new()));
    match output {
        Output::Files { log, stdout, addr } => {
            cmd.stdout(std::fs::File::create(&stdout).expect("create the stdout file"))
                .stderr(std::fs::File::create(&log).expect("create the log file"));
            let mut child = cmd.spawn().expect("start tollgate");
            loop {
                if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                    let listening_after = started.elapsed();
                    return Serving {
                        child,
                        addr,
                        logs,
                        key: None,
                        printed: Arc::default(),
                        started,
                        listening_after,
                    };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    panic!("tollgate exited ({status}) before listening:\n{text}");
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("tollgate did not accept connections on {addr} within 30 s");
                }
                std::thread::sleep(Duration::from_micros(250));
            }
        }
        Output::Piped => {
            let mut child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start tollgate");
            let (tx, rx) = std::sync::mpsc::channel::<String>();
            let stderr = child.stderr.take().expect("stderr piped");
            let (kept, to_addr) = (logs.clone(), tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(i) = line.find("listening on http://") {
                        let rest = &line[i + "listening on http://".len()..];
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = to_addr.send(format!("addr {addr}"));
                    }
                    kept.lock().unwrap().push(line);
                }
            });
            let stdout = child.stdout.take().expect("stdout piped");
            let printed: Arc<Mutex<Vec<String>>> = Arc::default();
            let printing = printed.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.starts_with("tg_") {
                        let _ = tx.send(format!("key {line}"));
                    }
                    printing.lock().unwrap().push(line);
                }
            });
            let (mut addr, mut key) = (None, None);
            while addr.is_none() || (want_key && key.is_none()) {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(m) if m.starts_with("addr ") => addr = m[5..].parse().ok(),
                    Ok(m) if m.starts_with("key ") => key = Some(m[4..].to_string()),
                    Ok(_) => {}
                    Err(_) => {
                        let _ = child.kill();
                        panic!("tollgate did not start: {:?}", logs.lock().unwrap());
                    }
                }
            }
            Serving {
                child,
                addr: addr.expect("an address"),
                logs,
                key,
                printed,
                started,
                listening_after: started.elapsed(),
            }
        }
    }
}

/// Runs `cmd` (a `tollgate` command with its environment) as `keys add --config CONFIG --name NAME --group
/// GROUP [--credit C]`; returns the key (the last line of its output).
pub fn keys_add(
    cmd: &mut Command,
    config: &Path,
    name: &str,
    group: &str,
    credit: Option<&str>,
) -> String {
    cmd.args(["keys", "add", "--config"])
        .arg(config)
        .args(["--name", name, "--group", group]);
    if let Some(c) = credit {
        cmd.args(["--credit", c]);
    }
    let out = cmd.output().expect("run tollgate keys add");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tollgate keys add failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with("tg_"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no key from keys add: {stdout}"))
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
