//! Start-up with a long history: generates a ledger of N records (default 100,000,000) as rotated,
//! compressed files (about 256 MB of records each, as `ledger_max_file_mb` rotates them), then times the
//! release binary from spawn to accepting connections:
//!
//! 1. with no ledger at all;
//! 2. with the history and no checkpoint (every record replayed: how every start was before checkpoints);
//! 3. with the history and the checkpoint that start wrote (a clean stop: nothing to replay);
//! 4. with the history, the checkpoint, and `--tail` records (default 10,000, `ledger_checkpoint_records`)
//!    written after it (a `kill -9` just before the next checkpoint).
//!
//! Cases 1, 3 and 4 run in turns, five times, and each is the best of its five. The generated files stay in `--dir` for a second run
//! (`--reuse`).
//!
//! `cargo build --release --bin tollgate -p tollgate-bench --bin ledger-history && target/release/ledger-history
//! [--records 100000000] [--tail 10000] [--dir /var/tmp/tollgate-history] [--reuse]`

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tollgate_harness::procs::{self, Bins, Instance};

/// Records per rotated file: about 256 MB at ~350 bytes a record.
const PER_FILE: u64 = 750_000;
const KEYS: u64 = 2_000;

#[derive(argh::FromArgs)]
/// Start-up with a long history: generates a ledger of rotated, compressed files and times the release
/// binary from spawn to accepting connections.
struct Args {
    /// records in the history (default 100000000)
    #[argh(option, default = "100_000_000")]
    records: u64,
    /// records after the checkpoint (default 10000)
    #[argh(option, default = "10_000")]
    tail: u64,
    /// where the generated files go (default: tollgate-history-bench in the temporary directory)
    #[argh(
        option,
        default = "std::env::temp_dir().join(\"tollgate-history-bench\")"
    )]
    dir: PathBuf,
    /// keep the files a previous run generated
    #[argh(switch)]
    reuse: bool,
}

/// One realistic record line.
fn line(out: &mut Vec<u8>, n: u64, ts_ms: u64) {
    let key = n * 7919 % KEYS;
    let _ = writeln!(
        out,
        "{{\"ts\":\"{}\",\"request_id\":\"req_{n:024}\",\"key\":\"key-{key}\",\"group\":\"default\",\
         \"model\":\"gpt-4o\",\"protocol\":\"chat\",\"upstream\":\"openai\",\"stream\":{},\"status\":200,\
         \"input_tokens\":{},\"cached_input_tokens\":{},\"output_tokens\":{},\"reasoning_tokens\":0,\
         \"estimated\":false,\"cost\":0.00{:05},\"latency_ms\":{}}}",
        tollgate::util::rfc3339_millis(ts_ms),
        n.is_multiple_of(2),
        1200 + n % 700,
        n % 5 * 100,
        300 + n % 400,
        4200 + n % 1000,
        800 + n % 3000
    );
}

/// Writes rotated file `seq` (records `first..first + count`, stamped `step` ms apart from `start`),
/// compressed.
fn write_segment(data: &Path, seq: u64, first: u64, count: u64, start: u64, step: u64) {
    let from = (start + first * step) / 1000;
    let to = (start + (first + count - 1) * step) / 1000;
    let name = format!("{}.gz", tollgate::ledger::segment_name(seq, from, to));
    let tmp = data.join(format!(".{name}.part"));
    let mut enc = flate2::write::GzEncoder::new(
        std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp).unwrap()),
        flate2::Compression::fast(),
    );
    let mut buf = Vec::with_capacity(1 << 20);
    for n in first..first + count {
        line(&mut buf, n, start + n * step);
        if buf.len() >= 1 << 20 {
            enc.write_all(&buf).unwrap();
            buf.clear();
        }
    }
    enc.write_all(&buf).unwrap();
    enc.finish().unwrap().flush().unwrap();
    std::fs::rename(&tmp, data.join(name)).unwrap();
}

/// The history: `records` records over the year ending two days ago, in rotated compressed files (two
/// writers at once).
fn generate(data: &Path, records: u64) -> (u64, u64) {
    let now = tollgate::util::unix_millis();
    let end = now - 2 * 86_400_000;
    let step = (365 * 86_400_000 / records).max(1);
    let start = end - step * records;
    let files = records.div_ceil(PER_FILE);
    let next = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let f = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if f >= files {
                    return;
                }
                let first = f * PER_FILE;
                let count = PER_FILE.min(records - first);
                write_segment(data, f + 1, first, count, start, step);
            });
        }
    });
    (files, end)
}

fn config(data: &Path) -> String {
    format!(
        "data_dir = \"{}\"\nlog_level = \"info\"\n\n[[upstreams]]\nname = \"mock\"\nkind = \"mock\"\n\n\
         [[models]]\nname = \"mock\"\nupstream = \"mock\"\n\n[[groups]]\nname = \"default\"\nmodels = [\"*\"]\n",
        data.display()
    )
}

fn instance(root: &Path, name: &str, data: &Path) -> Instance {
    Instance::new(root, name, &config(data))
}

/// A started gateway: the process, and the time from spawn to its first answer.
struct Started {
    child: std::process::Child,
    after: Duration,
}

/// Spawn to the first answer to `GET /healthz` (an answer, not only a connection: a connect loop on a free
/// port can connect to itself); the replay line of the log.
fn start(bins: &Bins, inst: &Instance) -> (Started, String) {
    use std::io::Read;
    let port = procs::free_port();
    let log = std::fs::File::create(inst.log_path()).unwrap();
    let began = Instant::now();
    let mut child = std::process::Command::new(&bins.tollgate)
        .args(["serve", "--config"])
        .arg(&inst.config)
        .env("TOLLGATE_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start tollgate");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let after = loop {
        if let Ok(mut c) = std::net::TcpStream::connect(addr) {
            let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
            let mut head = [0u8; 12];
            if c.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200") {
                break began.elapsed();
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(inst.log_path()).unwrap_or_default();
            panic!("tollgate exited ({status}) before answering:\n{text}");
        }
        assert!(began.elapsed() < Duration::from_secs(1800), "no answer");
        std::thread::sleep(Duration::from_micros(500));
    };
    // The log line is written by its own thread: wait for it.
    let mut replay = String::new();
    for _ in 0..200 {
        let log = std::fs::read_to_string(inst.log_path()).unwrap_or_default();
        if let Some(l) = log.lines().find(|l| l.contains("replayed")) {
            replay = l[l.find("usage ledger").unwrap_or(0)..].to_string();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    (Started { child, after }, replay)
}

/// SIGTERM and wait: a clean stop (the checkpoint written).
fn stop(s: Started) -> bool {
    let mut s = s;
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status();
    s.child.wait().map(|st| st.success()).unwrap_or(false)
}

fn kill9(s: Started) {
    let mut s = s;
    let _ = s.child.kill();
    let _ = s.child.wait();
}

fn dir_bytes(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("usage") {
            bytes += e.metadata().map_or(0, |m| m.len());
            files += 1;
        }
    }
    (bytes, files)
}

fn main() {
    let args: Args = tollgate_bench::args();
    let (records, tail, root, reuse) = (args.records, args.tail, args.dir, args.reuse);
    let bins = Bins::locate();
    let data = root.join("ledger-data");
    let checkpoint = data.join(tollgate::ledger::CHECKPOINT_FILE);
    let saved = root.join("checkpoint.json");
    if !reuse || !saved.exists() {
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&data).unwrap();
        let t = Instant::now();
        let (files, _) = generate(&data, records);
        println!(
            "generated {records} records in {files} compressed files in {:.0} s",
            t.elapsed().as_secs_f64()
        );
    }
    let (bytes, files) = dir_bytes(&data);
    println!(
        "history: {records} records, {files} files, {:.2} GB on disk (compressed)",
        bytes as f64 / 1e9
    );

    // 2. The history without a checkpoint: every record replayed (once; it writes the checkpoint).
    let inst = instance(&root, "history", &data);
    if !reuse || !saved.exists() {
        let _ = std::fs::remove_file(&checkpoint);
        let _ = std::fs::remove_file(data.join(tollgate::ledger::LEDGER_FILE));
        let (gw, line) = start(&bins, &inst);
        let full = gw.after;
        println!(
            "start, {records} records, no checkpoint:       {:>8.1} ms   ({line})",
            full.as_secs_f64() * 1000.0
        );
        // A clean stop writes the checkpoint.
        assert!(stop(gw), "clean stop");
        assert!(checkpoint.exists(), "the checkpoint after a clean stop");
        std::fs::copy(&checkpoint, &saved).unwrap();
    }
    let cp_bytes = std::fs::metadata(&saved).map_or(0, |m| m.len());

    // 1, 3 and 4 in turns (so a busy moment of the machine does not favour one), best of five each.
    let mut tail_text = Vec::new();
    let now = tollgate::util::unix_millis();
    for n in 0..tail {
        line(&mut tail_text, records + n, now - (tail - n) * 10);
    }
    let empty = root.join("empty");
    let mut best = [
        (Duration::MAX, String::new()),
        (Duration::MAX, String::new()),
        (Duration::MAX, String::new()),
    ];
    for _ in 0..5 {
        for (case, b) in best.iter_mut().enumerate() {
            let inst = match case {
                // No ledger: a fresh directory each time.
                0 => instance(&root, "empty", &empty.join("data")),
                _ => instance(&root, "history", &data),
            };
            match case {
                1 => {
                    let _ = std::fs::remove_file(data.join(tollgate::ledger::LEDGER_FILE));
                }
                2 => std::fs::write(data.join(tollgate::ledger::LEDGER_FILE), &tail_text).unwrap(),
                _ => {}
            }
            if case > 0 {
                std::fs::copy(&saved, &checkpoint).unwrap();
            }
            let (gw, line) = start(&bins, &inst);
            if gw.after < b.0 {
                *b = (gw.after, line);
            }
            kill9(gw);
        }
    }
    let [none, (clean, clean_line), (crash, crash_line)] = best;
    let none = none.0;
    println!(
        "start, no ledger:                                  {:>8.1} ms",
        none.as_secs_f64() * 1000.0
    );
    println!(
        "start, {records} records, checkpoint ({} KB): {:>8.1} ms   ({clean_line})",
        cp_bytes / 1024,
        clean.as_secs_f64() * 1000.0
    );
    println!(
        "start, {records} records + {tail} after the checkpoint: {:>8.1} ms   ({crash_line})",
        crash.as_secs_f64() * 1000.0
    );
    let _ = std::fs::remove_file(data.join(tollgate::ledger::LEDGER_FILE));
    std::fs::copy(&saved, &checkpoint).unwrap();
    println!(
        "ratio to no ledger: clean stop {:.2}x, {tail} to replay {:.2}x",
        clean.as_secs_f64() / none.as_secs_f64(),
        crash.as_secs_f64() / none.as_secs_f64()
    );
}
