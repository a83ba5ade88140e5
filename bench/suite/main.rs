//! tollgate's benchmark suite. Run it with `bench/run.sh` (which builds the release binaries first); see
//! docs/PERFORMANCE.md for what each phase measures and the targets.
//!
//! `target/release/bench-suite [--quick] [--only PHASE,...] [--streams N]`, where a phase is one of
//! footprint, request, wrk, accounting, streaming, sustained, logging, many-streams, store, offline (or the letter
//! earlier reports used for it: d, a, w, e, b, s, l, c, r; `e` also selects offline).
//!
//! Each section of the output is headed by its phase's name and the id of the measurement in it (`request
//! (A1)`), which docs/PERFORMANCE.md uses.
//!
//! Every figure through tollgate is set against the direct path (the same client talking to the same fake
//! upstream) measured in the same run. CPU time comes from `/proc/<pid>/stat` (utime + stime, all threads)
//! read at the edges of each measured window, divided by the requests completed in that window.

mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use load::{quantile, LoadResult, LoadSpec, StreamResult, StreamSpec, Watch};
use procs::{Bins, Gateway, Instance, Upstream};
use tollgate_harness::client::{self, Conn};
use tollgate_harness::load;
use tollgate_harness::procs;

/// Durations of the phases (`--quick` shortens them for trying the suite out; figures from a quick run
/// are not the documented ones).
struct Plan {
    rounds: usize,
    warmup: Duration,
    one_conn: Duration,
    many_conn: Duration,
    streams_per_run: usize,
    sustained: Duration,
    slow_streams: usize,
    slow_events: usize,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn us_i(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

fn errors_str(e: &BTreeMap<String, u64>) -> String {
    if e.is_empty() {
        return "0".into();
    }
    let total: u64 = e.values().sum();
    let parts: Vec<String> = e.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("{total} ({})", parts.join(", "))
}

/// The targets, each with the measured value, for the summary.
struct Summary {
    rows: Vec<(String, String, String, String)>,
}

impl Summary {
    fn add(&mut self, what: &str, value: String, target: &str, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "met".to_string(),
            Some(false) => "MISSED".to_string(),
            None => "-".to_string(),
        };
        self.rows
            .push((what.to_string(), value, target.to_string(), verdict));
    }
}

struct Ctx {
    bins: Bins,
    root: std::path::PathBuf,
    upstream: Upstream,
    plan: Plan,
    summary: Summary,
    has_wrk: bool,
}

fn config(upstream: SocketAddr, log_level: &str, extra_top: &str) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
data_dir = "data"
log_level = "{log_level}"
admin_token_env = "TOLLGATE_BENCH_ADMIN_TOKEN"
{extra_top}

[[upstreams]]
name = "fake"
kind = "openai-chat"
base_url = "http://{upstream}/v1"

[[models]]
name = "bench"
upstream = "fake"
upstream_model = "bench-model"
input_price = 1.0
output_price = 2.0

[[groups]]
name = "free"
models = ["*"]

[[groups]]
name = "limited"
models = ["*"]
rpm = 1000000000
tpm = 1000000000000
max_concurrent = 100000
"#
    )
}

/// What a request goes to, and how.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// Chat Completions straight to the fake upstream.
    Direct,
    /// Chat Completions client → tollgate → Chat upstream (passthrough).
    Pass,
    /// Messages client → tollgate → Chat upstream (translation).
    Trans,
    /// An embeddings client → tollgate → an OpenAI-compatible upstream (passthrough), the chat load's text
    /// as the input.
    Embed,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Pass => "tollgate chat→chat (passthrough)",
            Path::Trans => "tollgate messages→chat (translation)",
            Path::Embed => "tollgate embeddings (passthrough)",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Pass => "passthrough",
            Path::Trans => "translation",
            Path::Embed => "embeddings",
        }
    }
}

/// The request bytes for a path. `marker` goes into the user message (parameters for the fake upstream).
/// The output limit is above what any phase's stream produces (200 events), so no stream is cut at it.
fn request(path: Path, addr: SocketAddr, key: &str, marker: &str, stream: bool) -> Arc<Vec<u8>> {
    let stream_field = if stream { "\"stream\":true," } else { "" };
    let text = format!("Hello! Please answer briefly. bench:{marker}");
    let bytes = match path {
        Path::Direct | Path::Pass => {
            let model = if path == Path::Direct {
                "bench-model"
            } else {
                "bench"
            };
            let body = format!(
                r#"{{"model":"{model}",{stream_field}"max_tokens":1024,"messages":[{{"role":"user","content":"{text}"}}]}}"#
            );
            let auth = format!("Bearer {key}");
            client::post(
                addr,
                "/v1/chat/completions",
                &[("authorization", &auth)],
                &body,
            )
        }
        Path::Embed => {
            let body = format!(r#"{{"model":"bench","input":"{text}","encoding_format":"float"}}"#);
            let auth = format!("Bearer {key}");
            client::post(addr, "/v1/embeddings", &[("authorization", &auth)], &body)
        }
        Path::Trans => {
            let body = format!(
                r#"{{"model":"bench",{stream_field}"max_tokens":1024,"messages":[{{"role":"user","content":"{text}"}}]}}"#
            );
            let auth = format!("Bearer {key}");
            client::post(
                addr,
                "/v1/messages",
                &[
                    ("authorization", &auth),
                    ("anthropic-version", "2023-06-01"),
                ],
                &body,
            )
        }
    };
    Arc::new(bytes)
}

/// Hands out keys created before the gateway started, one per measured run, so that every run starts
/// with an empty one-minute accounting window for its key.
struct Keys {
    free: Vec<String>,
    limited: Vec<String>,
}

impl Keys {
    fn create(ctx: &Ctx, inst: &Instance, free: usize, limited: usize) -> Keys {
        let free = (0..free)
            .map(|i| inst.add_key(&ctx.bins, &format!("free-{i}"), "free", None))
            .collect();
        let limited = (0..limited)
            .map(|i| inst.add_key(&ctx.bins, &format!("limited-{i}"), "limited", Some(1e9)))
            .collect();
        Keys { free, limited }
    }
    fn free(&mut self) -> String {
        self.free.pop().expect("enough free keys")
    }
    fn limited(&mut self) -> String {
        self.limited.pop().expect("enough limited keys")
    }
}

/// The suite's phases, as `--only` names them (the letters of earlier reports still select them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// D: binary size, cold start, idle memory.
    Footprint,
    /// A1, A2: non-streaming requests on 1 and 16 connections.
    Request,
    /// A3: the 16-connection run with `wrk`.
    Wrk,
    /// E2: the cost of auth, limits and the ledger.
    Accounting,
    /// B: streaming.
    Streaming,
    /// S: sustained load on one key.
    Sustained,
    /// A4: logging at `info`.
    Logging,
    /// C: 1,000 concurrent slow streams.
    ManyStreams,
    /// R: the cost of a shared store (a local redis-server).
    Store,
    /// M: an embeddings request against a chat passthrough.
    Embeddings,
    /// E1, E3: ledger replay and the microbenchmark.
    Offline,
}

impl Phase {
    const ALL: [Phase; 11] = [
        Phase::Footprint,
        Phase::Request,
        Phase::Wrk,
        Phase::Accounting,
        Phase::Streaming,
        Phase::Sustained,
        Phase::Logging,
        Phase::ManyStreams,
        Phase::Store,
        Phase::Embeddings,
        Phase::Offline,
    ];

    fn name(self) -> &'static str {
        match self {
            Phase::Footprint => "footprint",
            Phase::Request => "request",
            Phase::Wrk => "wrk",
            Phase::Accounting => "accounting",
            Phase::Streaming => "streaming",
            Phase::Sustained => "sustained",
            Phase::Logging => "logging",
            Phase::ManyStreams => "many-streams",
            Phase::Store => "store",
            Phase::Embeddings => "embeddings",
            Phase::Offline => "offline",
        }
    }

    /// The letter earlier reports used.
    fn letter(self) -> &'static str {
        match self {
            Phase::Footprint => "d",
            Phase::Request => "a",
            Phase::Wrk => "w",
            Phase::Accounting | Phase::Offline => "e",
            Phase::Streaming => "b",
            Phase::Sustained => "s",
            Phase::Logging => "l",
            Phase::ManyStreams => "c",
            Phase::Store => "r",
            Phase::Embeddings => "m",
        }
    }

    /// The phases `--only` selects (all without it); an unknown name stops the suite.
    fn selected(only: Option<&str>) -> Vec<Phase> {
        let Some(list) = only else {
            return Phase::ALL.to_vec();
        };
        let mut out = Vec::new();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let found: Vec<Phase> = Phase::ALL
                .into_iter()
                .filter(|p| p.name() == word || p.letter() == word)
                .collect();
            if found.is_empty() {
                let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
                eprintln!("unknown phase {word:?}; phases: {}", names.join(", "));
                std::process::exit(2);
            }
            out.extend(found);
        }
        out
    }
}

#[derive(argh::FromArgs)]
/// tollgate's benchmark suite (bench/run.sh builds and runs it; docs/PERFORMANCE.md says what each phase
/// measures).
struct Args {
    /// short runs, to try it out (not for the record)
    #[argh(switch)]
    quick: bool,
    /// the phases to run, comma-separated: footprint, request, wrk, accounting, streaming, sustained,
    /// logging, many-streams, store, offline (or their letters d a w e b s l c r); all without it
    #[argh(option)]
    only: Option<String>,
    /// concurrent slow streams of the many-streams phase (default 1000; 200 with --quick)
    #[argh(option)]
    streams: Option<usize>,
}

fn main() {
    let args: Args = tollgate_bench::args();
    let quick = args.quick;
    let phases = Phase::selected(args.only.as_deref());
    let run = |phase: Phase| phases.contains(&phase);
    let plan = if quick {
        Plan {
            rounds: 1,
            warmup: Duration::from_millis(300),
            one_conn: Duration::from_secs(1),
            many_conn: Duration::from_secs(2),
            streams_per_run: 5,
            sustained: Duration::from_secs(10),
            slow_streams: 200,
            slow_events: 5,
        }
    } else {
        Plan {
            rounds: 2,
            warmup: Duration::from_millis(500),
            one_conn: Duration::from_secs(3),
            many_conn: Duration::from_secs(5),
            streams_per_run: 25,
            sustained: Duration::from_secs(65),
            slow_streams: 1000,
            slow_events: 30,
        }
    };
    let mut plan = plan;
    if let Some(n) = args.streams {
        plan.slow_streams = n;
    }
    let suite_start = Instant::now();
    let bins = Bins::locate();
    let root = bins.dir.join("bench-run");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();

    println!(
        "# tollgate benchmark suite{}",
        if quick {
            " (--quick: short runs, not for the record)"
        } else {
            ""
        }
    );
    println!();
    machine(&bins);
    let upstream = Upstream::start(&bins);
    println!("fake upstream: {} (pid {})", upstream.addr, upstream.pid());
    let has_wrk = std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok();
    let mut ctx = Ctx {
        bins,
        root,
        upstream,
        plan,
        summary: Summary { rows: Vec::new() },
        has_wrk,
    };

    if run(Phase::Footprint) {
        footprint(&mut ctx);
    }
    let on_main = [
        Phase::Request,
        Phase::Wrk,
        Phase::Accounting,
        Phase::Streaming,
        Phase::Sustained,
        Phase::Embeddings,
    ];
    if on_main.into_iter().any(run) {
        main_instance(&mut ctx, &run);
    }
    if run(Phase::Logging) {
        logging(&mut ctx);
    }
    if run(Phase::ManyStreams) {
        many_streams(&mut ctx);
    }
    if run(Phase::Store) {
        store::store(&mut ctx);
    }
    if run(Phase::Offline) {
        offline(&mut ctx);
    }

    println!();
    println!("## Summary against the targets");
    println!();
    let rows = &ctx.summary.rows;
    let width = |cell: fn(&(String, String, String, String)) -> &String| {
        rows.iter()
            .map(|r| cell(r).chars().count())
            .max()
            .unwrap_or(10)
    };
    let (w0, w1, w2) = (width(|r| &r.0), width(|r| &r.1), width(|r| &r.2));
    for (what, value, target, verdict) in &ctx.summary.rows {
        println!("{what:<w0$}  {value:>w1$}  {target:<w2$}  {verdict}");
    }
    println!();
    println!(
        "suite finished in {:.0} s (work files in {})",
        suite_start.elapsed().as_secs_f64(),
        ctx.root.display()
    );
}

fn machine(bins: &Bins) {
    let lscpu = procs::command_output("lscpu", &[]);
    let model = lscpu
        .lines()
        .find(|l| l.starts_with("Model name:"))
        .map(|l| l["Model name:".len()..].trim().to_string())
        .unwrap_or_else(|| "?".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<f64>().ok())
                })
        })
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let size = std::fs::metadata(&bins.tollgate).map_or(0, |m| m.len());
    println!(
        "date:     {}",
        procs::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    println!("machine:  {model}, {cpus} CPUs, {mem} RAM, Linux {kernel}");
    println!("rustc:    {}", procs::command_output("rustc", &["-V"]));
    println!(
        "commit:   {}{}",
        procs::command_output("git", &["rev-parse", "--short", "HEAD"]),
        if procs::command_output("git", &["status", "--porcelain", "--", "src"]).is_empty() {
            ""
        } else {
            " (with uncommitted changes in src/)"
        }
    );
    println!(
        "binary:   {} ({} bytes, {:.2} MB)",
        bins.tollgate.display(),
        size,
        size as f64 / 1e6
    );
    println!("load:     in-process Rust load generator (harness/src/load.rs), keep-alive, one thread per connection; the three processes share all CPUs (no pinning)");
    println!();
}

// ---------------------------------------------------------------------------------------------------------
/// D: binary size, cold start (spawn to first answered request), idle memory (measured on the main
/// instance).
fn footprint(ctx: &mut Ctx) {
    println!("## footprint (D): binary size and cold start");
    println!();
    let size = std::fs::metadata(&ctx.bins.tollgate).map_or(0, |m| m.len());
    println!(
        "release binary target/release/tollgate: {size} bytes ({:.2} MB)",
        size as f64 / 1e6
    );
    ctx.summary.add(
        "release binary size",
        format!("{:.2} MB", size as f64 / 1e6),
        "≤ 10 MB",
        Some(size <= 10_000_000),
    );
    let inst = Instance::new(&ctx.root, "cold", &config(ctx.upstream.addr, "warn", ""));
    let key = inst.add_key(&ctx.bins, "cold", "free", None);
    let mut times = Vec::new();
    for i in 0..5 {
        // Spawn, then poll the port every 250 µs until it accepts, then one Chat request through to the
        // fake upstream (a new upstream connection included) until its answer is complete.
        let gw = Gateway::start(&ctx.bins, &inst, &[]);
        let listening = gw.listening_after;
        let req = request(Path::Pass, gw.addr, &key, "in=10", false);
        let mut c = Conn::connect(gw.addr, Duration::from_secs(5)).expect("connect");
        let r = c.roundtrip(&req).expect("first request");
        let total = gw.started.elapsed();
        assert_eq!(
            r.head.status,
            200,
            "cold start request: {}",
            String::from_utf8_lossy(&r.body)
        );
        let rss = procs::rss_mib(gw.pid());
        println!(
            "  cold start {}: accepting after {:6.1} ms, first answered request after {:6.1} ms (RSS then {:.1} MiB)",
            i + 1,
            listening.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3,
            rss
        );
        times.push(total);
        drop(c);
        gw.stop();
    }
    times.sort();
    let med = times[times.len() / 2];
    let max = *times.last().unwrap();
    println!(
        "cold start to first answered request: median {:.1} ms, max {:.1} ms (5 starts, keys file with 1 key, small ledger)",
        med.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3
    );
    println!();
    ctx.summary.add(
        "cold start → first answered request (median / max of 5)",
        format!(
            "{:.1} / {:.1} ms",
            med.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3
        ),
        "≤ 100 ms",
        Some(max <= Duration::from_millis(100)),
    );
}

// ---------------------------------------------------------------------------------------------------------
// The main instance (log_level = "warn", default workers): A, wrk cross-check, E (on/off), B, sustained.

fn print_load_header() {
    println!(
        "  {:<38} {:>9} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9}  errors",
        "path",
        "req/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "overhd p50",
        "tg µs/req",
        "up µs/req",
        "lg µs/req"
    );
}

fn print_load(name: &str, r: &LoadResult) {
    let overhead = if r.overhead_ms.is_empty() {
        "-".to_string()
    } else {
        format!("{:.0} µs", quantile(&r.overhead_ms, 0.5) * 1000.0)
    };
    println!(
        "  {:<38} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10} {:>9.1} {:>9.1} {:>9.1}  {}",
        name,
        r.rps(),
        r.p(0.5),
        r.p(0.9),
        r.p(0.99),
        r.p(0.999),
        overhead,
        r.cpu_us_per_req(0),
        r.cpu_us_per_req(1),
        r.cpu_us_per_req(2),
        errors_str(&r.errors)
    );
}

/// Runs direct / passthrough / translation interleaved for `rounds` rounds; returns the merged results.
fn interleaved_paths(
    ctx: &Ctx,
    gw: &Gateway,
    keys: &mut Keys,
    conns: usize,
    duration: Duration,
    rate: Option<f64>,
    watch: &Watch,
) -> Vec<(Path, LoadResult)> {
    let paths = [Path::Direct, Path::Pass, Path::Trans];
    let mut merged: Vec<Option<LoadResult>> = vec![None, None, None];
    print_load_header();
    for round in 0..ctx.plan.rounds {
        for (i, &p) in paths.iter().enumerate() {
            let addr = if p == Path::Direct {
                ctx.upstream.addr
            } else {
                gw.addr
            };
            let key = if p == Path::Direct {
                "direct".to_string()
            } else {
                keys.free()
            };
            let spec = LoadSpec {
                addr,
                request: request(p, addr, &key, "in=10,out=5", false),
                conns,
                warmup: ctx.plan.warmup,
                duration,
                rate,
                bucket: Duration::ZERO,
            };
            let r = load::run_load(&spec, watch);
            print_load(&format!("{} (round {})", p.short(), round + 1), &r);
            match &mut merged[i] {
                Some(m) => m.merge(r),
                slot => *slot = Some(r),
            }
        }
    }
    let out: Vec<(Path, LoadResult)> = paths
        .iter()
        .copied()
        .zip(merged.into_iter().map(Option::unwrap))
        .collect();
    if ctx.plan.rounds > 1 {
        for (p, r) in &out {
            print_load(&format!("{} (all rounds)", p.short()), r);
        }
    }
    out
}

/// The phases on one main instance: request/response (A1, A2), wrk (A3), accounting (E2), streaming (B),
/// sustained load (S).
fn main_instance(ctx: &mut Ctx, run: &dyn Fn(Phase) -> bool) {
    let inst = Instance::new(&ctx.root, "main", &config(ctx.upstream.addr, "warn", ""));
    let mut keys = Keys::create(ctx, &inst, 24, 4);
    let gw = Gateway::start(&ctx.bins, &inst, &[]);
    let pid = gw.pid();
    let watch = Watch {
        pids: vec![pid, ctx.upstream.pid()],
        redis_port: None,
    };
    println!("## Main instance: log_level = \"warn\", default workers (256), pid {pid}");
    println!();
    println!("columns: latency percentiles per request; overhd = tollgate's own x-tollgate-overhead-ms (p50);");
    println!("CPU time per request of tollgate (tg), the fake upstream (up) and the load generator (lg), from /proc/<pid>/stat");
    println!();

    // D (idle RSS): right after start, then after one answered request and a second of idleness.
    std::thread::sleep(Duration::from_millis(500));
    let rss_start = procs::rss_mib(pid);
    let threads_start = procs::threads(pid);
    {
        let key = keys.free();
        let req = request(Path::Pass, gw.addr, &key, "in=10", false);
        let mut c = Conn::connect(gw.addr, Duration::from_secs(5)).unwrap();
        let r = c.roundtrip(&req).unwrap();
        assert_eq!(r.head.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    std::thread::sleep(Duration::from_secs(1));
    let rss_idle = procs::rss_mib(pid);
    println!(
        "idle RSS: {rss_start:.1} MiB after start ({threads_start} threads); {rss_idle:.1} MiB after one answered request and 1 s idle"
    );
    println!();
    ctx.summary.add(
        "idle RSS (after start + one request, 1 s idle)",
        format!("{:.1} MiB", rss_idle),
        "≤ 10 MiB",
        Some(rss_idle <= 10.0),
    );

    if run(Phase::Request) {
        println!("## request (A1): non-streaming small requests, 1 connection (closed loop), {} × {} s per path, interleaved", ctx.plan.rounds, ctx.plan.one_conn.as_secs_f64());
        println!();
        let r = interleaved_paths(ctx, &gw, &mut keys, 1, ctx.plan.one_conn, None, &watch);
        let (d, p, t) = (&r[0].1, &r[1].1, &r[2].1);
        let add = |x: &LoadResult, q: f64| x.p(q) - d.p(q);
        println!();
        println!(
            "  added latency vs direct: passthrough p50 {:+.1} µs, p99 {:+.1} µs; translation p50 {:+.1} µs, p99 {:+.1} µs",
            add(p, 0.5),
            add(p, 0.99),
            add(t, 0.5),
            add(t, 0.99)
        );
        println!(
            "  requests/s vs direct: passthrough {:.0} % , translation {:.0} %",
            p.rps() / d.rps() * 100.0,
            t.rps() / d.rps() * 100.0
        );
        println!();
        ctx.summary.add(
            "passthrough, 1 conn: added latency p50",
            format!("{:.1} µs", add(p, 0.5)),
            "≤ 50 µs",
            Some(add(p, 0.5) <= 50.0),
        );
        ctx.summary.add(
            "passthrough, 1 conn: added latency p99",
            format!("{:.1} µs", add(p, 0.99)),
            "≤ 500 µs",
            Some(add(p, 0.99) <= 500.0),
        );
        ctx.summary.add(
            "translation, 1 conn: added latency p50 / p99",
            format!("{:.1} / {:.1} µs", add(t, 0.5), add(t, 0.99)),
            "(no target)",
            None,
        );

        println!(
            "## request (A1b): the same at a low rate: 1 connection, open loop at 100 req/s, {} × {} s per path, interleaved",
            ctx.plan.rounds,
            ctx.plan.many_conn.as_secs_f64()
        );
        println!();
        println!("  (requests arrive 10 ms apart, so every thread on the path has gone to sleep in between)");
        println!();
        let r = interleaved_paths(
            ctx,
            &gw,
            &mut keys,
            1,
            ctx.plan.many_conn,
            Some(100.0),
            &watch,
        );
        let (d, p, t) = (&r[0].1, &r[1].1, &r[2].1);
        let add = |x: &LoadResult, q: f64| x.p(q) - d.p(q);
        println!();
        println!(
            "  added latency vs direct at 100 req/s: passthrough p50 {:+.1} µs, p99 {:+.1} µs; translation p50 {:+.1} µs, p99 {:+.1} µs",
            add(p, 0.5),
            add(p, 0.99),
            add(t, 0.5),
            add(t, 0.99)
        );
        println!();
        ctx.summary.add(
            "passthrough, 1 conn at 100 req/s: added latency p50 / p99",
            format!("{:.1} / {:.1} µs", add(p, 0.5), add(p, 0.99)),
            "(≤ 100 / ≤ 500 µs)",
            Some(add(p, 0.5) <= 100.0 && add(p, 0.99) <= 500.0),
        );

        println!("## request (A2): non-streaming small requests, 16 connections (closed loop), {} × {} s per path, interleaved", ctx.plan.rounds, ctx.plan.many_conn.as_secs_f64());
        println!();
        let r = interleaved_paths(ctx, &gw, &mut keys, 16, ctx.plan.many_conn, None, &watch);
        let (d, p, t) = (&r[0].1, &r[1].1, &r[2].1);
        println!();
        println!(
            "  throughput vs direct: passthrough {:.0} %, translation {:.0} %",
            p.rps() / d.rps() * 100.0,
            t.rps() / d.rps() * 100.0
        );
        println!(
            "  tollgate CPU per request: passthrough {:.1} µs, translation {:.1} µs ({:+.0} % vs passthrough)",
            p.cpu_us_per_req(0),
            t.cpu_us_per_req(0),
            (t.cpu_us_per_req(0) / p.cpu_us_per_req(0) - 1.0) * 100.0
        );
        println!(
            "  CPU busy (cores, of {}): direct: upstream {:.2} + loadgen {:.2}; passthrough: tollgate {:.2} + upstream {:.2} + loadgen {:.2}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            d.cpu[1] / d.window.as_secs_f64(),
            d.cpu[2] / d.window.as_secs_f64(),
            p.cpu[0] / p.window.as_secs_f64(),
            p.cpu[1] / p.window.as_secs_f64(),
            p.cpu[2] / p.window.as_secs_f64(),
        );
        println!();
        let ratio = p.rps() / d.rps();
        ctx.summary.add(
            "passthrough, 16 conns: throughput vs direct",
            format!(
                "{:.0} % ({:.0} vs {:.0} req/s)",
                ratio * 100.0,
                p.rps(),
                d.rps()
            ),
            "≥ 50 %",
            Some(ratio >= 0.5),
        );
        ctx.summary.add(
            "passthrough, 16 conns: tollgate CPU per request",
            format!("{:.1} µs", p.cpu_us_per_req(0)),
            "≤ 40 µs",
            Some(p.cpu_us_per_req(0) <= 40.0),
        );
        ctx.summary.add(
            "passthrough, 16 conns: errors",
            format!("{}", p.errors_total()),
            "0",
            Some(p.errors_total() == 0),
        );
        let extra = t.cpu_us_per_req(0) / p.cpu_us_per_req(0) - 1.0;
        ctx.summary.add(
            "translation, 16 conns: CPU per request vs passthrough",
            format!(
                "{:+.0} % ({:.1} vs {:.1} µs)",
                extra * 100.0,
                t.cpu_us_per_req(0),
                p.cpu_us_per_req(0)
            ),
            "≤ +25 %",
            Some(extra <= 0.25),
        );
        ctx.summary.add(
            "translation, 16 conns: throughput vs direct / errors",
            format!("{:.0} % / {}", t.rps() / d.rps() * 100.0, t.errors_total()),
            "(no target)",
            None,
        );
    }

    if run(Phase::Wrk) && ctx.has_wrk {
        wrk_cross_check(ctx, &gw, &mut keys, &watch);
    }

    if run(Phase::Accounting) {
        println!("## accounting (E2): cost of auth + limits + ledger: a key without limits or credit vs one with rpm/tpm/max_concurrent and a credit");
        println!();
        println!("  open loop at 2,000 req/s over 16 connections, passthrough, {} × {} s per key, interleaved; fresh key per run", ctx.plan.rounds, ctx.plan.many_conn.as_secs_f64());
        println!();
        print_load_header();
        let mut merged: Vec<Option<LoadResult>> = vec![None, None];
        for round in 0..ctx.plan.rounds {
            for (i, limited) in [false, true].into_iter().enumerate() {
                let key = if limited { keys.limited() } else { keys.free() };
                let spec = LoadSpec {
                    addr: gw.addr,
                    request: request(Path::Pass, gw.addr, &key, "in=10,out=5", false),
                    conns: 16,
                    warmup: ctx.plan.warmup,
                    duration: ctx.plan.many_conn,
                    rate: Some(2000.0),
                    bucket: Duration::ZERO,
                };
                let r = load::run_load(&spec, &watch);
                let name = if limited {
                    "limits + credit"
                } else {
                    "no limits, no credit"
                };
                print_load(&format!("{name} (round {})", round + 1), &r);
                match &mut merged[i] {
                    Some(m) => m.merge(r),
                    slot => *slot = Some(r),
                }
            }
        }
        let free = merged[0].take().unwrap();
        let lim = merged[1].take().unwrap();
        println!();
        println!(
            "  tollgate CPU per request: no limits {:.1} µs, limits + credit {:.1} µs ({:+.1} µs); latency p50 {:.1} vs {:.1} µs",
            free.cpu_us_per_req(0),
            lim.cpu_us_per_req(0),
            lim.cpu_us_per_req(0) - free.cpu_us_per_req(0),
            free.p(0.5),
            lim.p(0.5)
        );
        println!("  (the ledger cannot be switched off; its in-process cost is in the microbenchmark, offline (E3))");
        println!();
        ctx.summary.add(
            "limits + credit vs none: extra tollgate CPU per request (2k req/s)",
            format!(
                "{:+.1} µs ({:.1} vs {:.1})",
                lim.cpu_us_per_req(0) - free.cpu_us_per_req(0),
                lim.cpu_us_per_req(0),
                free.cpu_us_per_req(0)
            ),
            "(no target)",
            None,
        );
    }

    if run(Phase::Streaming) {
        streaming(ctx, &gw, &mut keys, &watch);
    }

    if run(Phase::Sustained) {
        sustained(ctx, &gw, &mut keys, &watch);
    }

    if run(Phase::Embeddings) {
        embeddings(ctx, &gw, &mut keys, &watch);
    }

    let rss_end = procs::rss_mib(pid);
    println!("main instance after all its phases: RSS {rss_end:.1} MiB, peak (VmHWM) {:.1} MiB, {} threads", procs::hwm_mib(pid), procs::threads(pid));
    println!();
    gw.stop();
}

// ---------------------------------------------------------------------------------------------------------
/// A3: the 16-connection run again with `wrk` (an independent, event-loop load generator: less client CPU
/// per request), as a cross-check.
fn wrk_cross_check(ctx: &mut Ctx, gw: &Gateway, keys: &mut Keys, watch: &Watch) {
    println!(
        "## wrk (A3): cross-check with wrk (2 threads, 16 connections, {} s)",
        ctx.plan.many_conn.as_secs()
    );
    println!();
    let mut results = Vec::new();
    for p in [Path::Direct, Path::Pass, Path::Trans] {
        let (addr, key) = if p == Path::Direct {
            (ctx.upstream.addr, "direct".to_string())
        } else {
            (gw.addr, keys.free())
        };
        let (path, body, extra) = match p {
            Path::Direct | Path::Pass => (
                "/v1/chat/completions",
                format!(
                    r#"{{"model":"{}","max_tokens":1024,"messages":[{{"role":"user","content":"Hello! Please answer briefly. bench:in=10,out=5"}}]}}"#,
                    if p == Path::Direct { "bench-model" } else { "bench" }
                ),
                String::new(),
            ),
            Path::Trans => (
                "/v1/messages",
                r#"{"model":"bench","max_tokens":1024,"messages":[{"role":"user","content":"Hello! Please answer briefly. bench:in=10,out=5"}]}"#.to_string(),
                "wrk.headers[\"anthropic-version\"] = \"2023-06-01\"\n".to_string(),
            ),
            Path::Embed => (
                "/v1/embeddings",
                r#"{"model":"bench","input":"Hello! Please answer briefly. bench:in=10","encoding_format":"float"}"#.to_string(),
                String::new(),
            ),
        };
        let script = ctx.root.join(format!("wrk-{}.lua", p.short()));
        std::fs::write(
            &script,
            format!(
                "wrk.method = \"POST\"\nwrk.body = '{body}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.headers[\"Authorization\"] = \"Bearer {key}\"\n{extra}"
            ),
        )
        .unwrap();
        let url = format!("http://{addr}{path}");
        let secs = ctx.plan.many_conn.as_secs().max(1).to_string();
        // Warm-up, then the measured run.
        let _ = std::process::Command::new("wrk")
            .args(["-t2", "-c16", "-d1s", "-s"])
            .arg(&script)
            .arg(&url)
            .output();
        let cpu0: Vec<f64> = watch.pids.iter().map(|&p| procs::cpu_secs(p)).collect();
        let out = std::process::Command::new("wrk")
            .args(["-t2", "-c16", &format!("-d{secs}s"), "--latency", "-s"])
            .arg(&script)
            .arg(&url)
            .output()
            .expect("wrk");
        let cpu1: Vec<f64> = watch.pids.iter().map(|&p| procs::cpu_secs(p)).collect();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let total: f64 = text
            .lines()
            .find(|l| l.contains("requests in"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let rps: f64 = text
            .lines()
            .find(|l| l.starts_with("Requests/sec:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let tg = (cpu1[0] - cpu0[0]) * 1e6 / total.max(1.0);
        let up = (cpu1[1] - cpu0[1]) * 1e6 / total.max(1.0);
        println!("  {} — wrk -t2 -c16 -d{secs}s --latency {url}", p.name());
        for l in text.lines() {
            println!("    | {l}");
        }
        println!(
            "    => {rps:.0} req/s; CPU per request: tollgate {tg:.1} µs, upstream {up:.1} µs"
        );
        results.push((p, rps, tg));
    }
    let d = results[0].1;
    println!();
    println!(
        "  wrk: passthrough {:.0} % of direct, translation {:.0} % of direct; tollgate CPU/request {:.1} µs (passthrough), {:.1} µs (translation)",
        results[1].1 / d * 100.0,
        results[2].1 / d * 100.0,
        results[1].2,
        results[2].2
    );
    println!();
    ctx.summary.add(
        "wrk cross-check, 16 conns: passthrough vs direct / tollgate CPU per req",
        format!("{:.0} % / {:.1} µs", results[1].1 / d * 100.0, results[1].2),
        "≥ 50 % / ≤ 60 µs",
        Some(results[1].1 / d >= 0.5 && results[1].2 <= 60.0),
    );
}

// ---------------------------------------------------------------------------------------------------------
// B: streaming, 200 events.

fn print_stream(name: &str, r: &StreamResult) {
    println!(
        "  {:<38} {:>4}/{:<4} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {}",
        name,
        r.ok,
        r.streams,
        us(quantile(&r.first_byte_ns, 0.5)),
        us(quantile(&r.first_event_ns, 0.5)),
        us(quantile(&r.first_event_ns, 0.99)),
        us_i(quantile(&r.event_delay_ns, 0.5)),
        us_i(quantile(&r.event_delay_ns, 0.99)),
        us_i(quantile(&r.event_delay_ns, 0.999)),
        r.cpu.first().copied().unwrap_or(0.0) * 1e6 / (r.event_delay_ns.len().max(1)) as f64,
        errors_str(&r.errors)
    );
}

/// B: streaming, through tollgate and direct.
fn streaming(ctx: &mut Ctx, gw: &Gateway, keys: &mut Keys, watch: &Watch) {
    let events = 200;
    let gap_us = 1000;
    println!(
        "## streaming (B): {events}-event streams, {gap_us} µs between events, 1 connection, {} streams per path",
        ctx.plan.streams_per_run
    );
    println!();
    println!(
        "  first byte = request sent → first response byte; first event = → first content event;"
    );
    println!("  event delay = arrival at the client − the time the fake upstream wrote the event (same clock)");
    println!();
    println!(
        "  {:<38} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  errors",
        "path", "ok", "1st byte", "1st ev", "1st ev", "ev delay", "ev delay", "ev delay", "tg CPU"
    );
    println!(
        "  {:<38} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "", "p50 µs", "p50 µs", "p99 µs", "p50 µs", "p99 µs", "p99.9 µs", "µs/event"
    );
    let mut res = Vec::new();
    for p in [Path::Direct, Path::Pass, Path::Trans] {
        let (addr, key) = if p == Path::Direct {
            (ctx.upstream.addr, "direct".to_string())
        } else {
            (gw.addr, keys.free())
        };
        let req = request(
            p,
            addr,
            &key,
            &format!("events={events},gap_us={gap_us},in=10"),
            true,
        );
        // One warm-up stream.
        let warm = StreamSpec {
            addr,
            request: req.clone(),
            conns: 1,
            per_conn: 1,
            events,
            stagger: Duration::ZERO,
            read_timeout: Duration::from_secs(30),
            rss_every: Duration::ZERO,
        };
        load::run_streams(&warm, watch);
        let spec = StreamSpec {
            per_conn: ctx.plan.streams_per_run,
            ..warm
        };
        let r = load::run_streams(&spec, watch);
        print_stream(p.name(), &r);
        res.push(r);
    }
    let (d, p, t) = (&res[0], &res[1], &res[2]);
    let fb = |x: &StreamResult| {
        us(quantile(&x.first_byte_ns, 0.5)) - us(quantile(&d.first_byte_ns, 0.5))
    };
    let fe = |x: &StreamResult| {
        us(quantile(&x.first_event_ns, 0.5)) - us(quantile(&d.first_event_ns, 0.5))
    };
    let ev = |x: &StreamResult, q: f64| {
        us_i(quantile(&x.event_delay_ns, q)) - us_i(quantile(&d.event_delay_ns, q))
    };
    println!();
    println!(
        "  added vs direct: passthrough first byte {:+.1} µs, first event {:+.1} µs, event delay p50 {:+.1} µs, p99 {:+.1} µs",
        fb(p), fe(p), ev(p, 0.5), ev(p, 0.99)
    );
    println!(
        "                   translation first byte {:+.1} µs, first event {:+.1} µs, event delay p50 {:+.1} µs, p99 {:+.1} µs",
        fb(t), fe(t), ev(t, 0.5), ev(t, 0.99)
    );
    let inb = |x: &StreamResult| us_i(quantile(&x.inbound_ns, 0.5));
    println!(
        "  where the time to the first event goes (p50): request sent → upstream wrote it: direct {:.1} µs, passthrough {:.1} µs, translation {:.1} µs; the rest is that event's relay",
        inb(d), inb(p), inb(t)
    );
    println!();
    ctx.summary.add(
        "streaming passthrough: added time to first byte (p50)",
        format!("{:.1} µs (first event {:+.1} µs)", fb(p), fe(p)),
        "≤ 200 µs",
        Some(fb(p) <= 200.0),
    );
    ctx.summary.add(
        "streaming passthrough: per-event relay delay p50 / p99",
        format!("{:.1} / {:.1} µs", ev(p, 0.5), ev(p, 0.99)),
        "p99 ≤ 200 µs",
        Some(ev(p, 0.99) <= 200.0),
    );
    ctx.summary.add(
        "streaming translation: added first byte / first event / event delay p99",
        format!("{:.1} / {:.1} / {:.1} µs", fb(t), fe(t), ev(t, 0.99)),
        "(same targets)",
        Some(fb(t) <= 200.0 && ev(t, 0.99) <= 200.0),
    );
}

// ---------------------------------------------------------------------------------------------------------
/// S: sustained load on one key (the accounting window must not slow it down).
fn sustained(ctx: &mut Ctx, gw: &Gateway, keys: &mut Keys, watch: &Watch) {
    let secs = ctx.plan.sustained.as_secs();
    println!(
        "## sustained (S): load on one key: passthrough, 16 connections, {secs} s, reported per 5 s"
    );
    println!();
    println!("  (every admission stays in the key's one-minute rate window; this shows what that costs as it fills)");
    println!();
    let key = keys.free();
    let spec = LoadSpec {
        addr: gw.addr,
        request: request(Path::Pass, gw.addr, &key, "in=10,out=5", false),
        conns: 16,
        warmup: Duration::ZERO,
        duration: ctx.plan.sustained,
        rate: None,
        bucket: Duration::from_secs(5),
    };
    let r = load::run_load(&spec, watch);
    println!(
        "  {:>9} {:>9} {:>12} {:>12}",
        "seconds", "req/s", "tg µs/req", "tg cores"
    );
    let mut first = None;
    let mut last = None;
    for (i, (n, cpu)) in r.buckets.iter().enumerate() {
        let rps = *n as f64 / 5.0;
        let per = cpu[0] * 1e6 / (*n).max(1) as f64;
        println!(
            "  {:>4}-{:<4} {:>9.0} {:>12.1} {:>12.2}",
            i * 5,
            (i + 1) * 5,
            rps,
            per,
            cpu[0] / 5.0
        );
        if first.is_none() {
            first = Some((rps, per));
        }
        last = Some((rps, per));
    }
    println!(
        "  overall: {:.0} req/s, errors {}, p50 {:.1} µs, p99 {:.1} µs",
        r.rps(),
        errors_str(&r.errors),
        r.p(0.5),
        r.p(0.99)
    );
    println!();
    if let (Some(f), Some(l)) = (first, last) {
        ctx.summary.add(
            &format!("sustained {secs} s on one key: req/s and tollgate CPU/req, first → last 5 s"),
            format!("{:.0} → {:.0} req/s, {:.1} → {:.1} µs", f.0, l.0, f.1, l.1),
            "(no target; ≤ 60 µs applies)",
            Some(l.1 <= 60.0),
        );
    }
}

/// M: chat passthrough against embeddings, 16 connections, interleaved rounds: embeddings with an answer the
/// size of the chat one (16 dimensions), and with text-embedding-3-small's 1,536 (a 19 KB answer).
fn embeddings(ctx: &mut Ctx, gw: &Gateway, keys: &mut Keys, watch: &Watch) {
    let secs = ctx.plan.many_conn.as_secs_f64();
    println!("## embeddings (M): chat passthrough against embeddings, 16 connections (closed loop), {} × {secs} s per load, interleaved", ctx.plan.rounds);
    println!();
    let loads = [
        ("chat passthrough", Path::Pass, "in=10,out=5"),
        ("embeddings, 16 dimensions", Path::Embed, "in=10,dims=16"),
        ("embeddings, 1,536 dimensions", Path::Embed, "in=10"),
    ];
    let mut merged: Vec<Option<LoadResult>> = vec![None, None, None];
    print_load_header();
    for round in 0..ctx.plan.rounds {
        for (i, (name, path, marker)) in loads.iter().enumerate() {
            let key = keys.free();
            let spec = LoadSpec {
                addr: gw.addr,
                request: request(*path, gw.addr, &key, marker, false),
                conns: 16,
                warmup: ctx.plan.warmup,
                duration: ctx.plan.many_conn,
                rate: None,
                bucket: Duration::ZERO,
            };
            let r = load::run_load(&spec, watch);
            print_load(&format!("{name} (round {})", round + 1), &r);
            match &mut merged[i] {
                Some(m) => m.merge(r),
                slot => *slot = Some(r),
            }
        }
    }
    let r: Vec<LoadResult> = merged.into_iter().map(Option::unwrap).collect();
    let (chat, small, large) = (
        r[0].cpu_us_per_req(0),
        r[1].cpu_us_per_req(0),
        r[2].cpu_us_per_req(0),
    );
    println!();
    println!(
        "  tollgate CPU per request: chat {chat:.1} µs, embeddings (16 dims) {small:.1} µs ({:+.0} %), embeddings (1,536 dims) {large:.1} µs",
        (small / chat - 1.0) * 100.0
    );
    println!();
    ctx.summary.add(
        "embeddings, same answer size: tollgate CPU/req vs chat passthrough",
        format!("{small:.1} vs {chat:.1} µs"),
        "≤ chat (+5 % spread)",
        Some(small <= chat * 1.05),
    );
}

// ---------------------------------------------------------------------------------------------------------
/// A4: the same passthrough load with one log line per request (`log_level = "info"`).
fn logging(ctx: &mut Ctx) {
    println!("## logging (A4): log_level = \"info\" (one log line per request, stderr to a file): passthrough, 16 connections");
    println!();
    let inst = Instance::new(&ctx.root, "info", &config(ctx.upstream.addr, "info", ""));
    let mut keys = Keys::create(ctx, &inst, 2, 0);
    let gw = Gateway::start(&ctx.bins, &inst, &[]);
    let watch = Watch {
        pids: vec![gw.pid(), ctx.upstream.pid()],
        redis_port: None,
    };
    let key = keys.free();
    let spec = LoadSpec {
        addr: gw.addr,
        request: request(Path::Pass, gw.addr, &key, "in=10,out=5", false),
        conns: 16,
        warmup: ctx.plan.warmup,
        duration: ctx.plan.many_conn,
        rate: None,
        bucket: Duration::ZERO,
    };
    print_load_header();
    let r = load::run_load(&spec, &watch);
    print_load("passthrough, log_level info", &r);
    println!();
    ctx.summary.add(
        "passthrough, 16 conns, log_level info: tollgate CPU per request",
        format!("{:.1} µs ({:.0} req/s)", r.cpu_us_per_req(0), r.rps()),
        "(no target)",
        None,
    );
    gw.stop();
}

// ---------------------------------------------------------------------------------------------------------
/// C: many concurrent slow streams (memory and threads).
fn many_streams(ctx: &mut Ctx) {
    let n = ctx.plan.slow_streams;
    let events = ctx.plan.slow_events;
    let workers = n + n / 10 + 16;
    println!(
        "## many-streams (C): {n} concurrent slow streams: {events} events 1 s apart each, passthrough, started 1 ms apart (workers = {workers})"
    );
    println!();
    let inst = Instance::new(
        &ctx.root,
        "streams",
        &config(ctx.upstream.addr, "warn", &format!("workers = {workers}")),
    );
    let mut keys = Keys::create(ctx, &inst, 2, 0);
    let gw = Gateway::start(&ctx.bins, &inst, &[]);
    let pid = gw.pid();
    std::thread::sleep(Duration::from_millis(300));
    idle_connections(ctx, gw.addr, &keys.free(), pid, n);
    let rss0 = procs::rss_mib(pid);
    let threads0 = procs::threads(pid);
    let watch = Watch {
        pids: vec![pid, ctx.upstream.pid()],
        redis_port: None,
    };
    let key = keys.free();
    let spec = StreamSpec {
        addr: gw.addr,
        request: request(
            Path::Pass,
            gw.addr,
            &key,
            &format!("events={events},gap_us=1000000,in=10"),
            true,
        ),
        conns: n,
        per_conn: 1,
        events,
        stagger: Duration::from_millis(1),
        read_timeout: Duration::from_secs(60),
        rss_every: Duration::from_millis(250),
    };
    // Where tollgate's memory is once every stream is open.
    let snapshot_at = spec.stagger * n as u32 + Duration::from_secs(2);
    let (r, smaps) = std::thread::scope(|s| {
        let snap = s.spawn(move || {
            std::thread::sleep(snapshot_at);
            (
                procs::rss_mib(pid),
                procs::threads(pid),
                procs::smaps_breakdown(pid),
            )
        });
        let r = load::run_streams(&spec, &watch);
        (r, snap.join().unwrap())
    });
    let hwm = procs::hwm_mib(pid);
    let rss_after = procs::rss_mib(pid);
    let errors = r.streams - r.ok;
    println!(
        "  streams: {} ok of {} (peak {} open at once), errors {}",
        r.ok,
        r.streams,
        r.peak_open,
        errors_str(&r.errors)
    );
    println!(
        "  wall {:.1} s; tollgate CPU {:.2} s ({:.1} % of one core; {:.1} µs per event relayed), fake upstream CPU {:.2} s",
        r.wall.as_secs_f64(),
        r.cpu[0],
        r.cpu[0] / r.wall.as_secs_f64() * 100.0,
        r.cpu[0] * 1e6 / r.event_delay_ns.len().max(1) as f64,
        r.cpu[1]
    );
    println!(
        "  tollgate RSS: {rss0:.1} MiB before ({threads0} threads), peak sampled every 250 ms {:.1} MiB, VmHWM {hwm:.1} MiB, {rss_after:.1} MiB after",
        r.peak_rss_mib[0]
    );
    println!(
        "  memory with all streams open ({:.1} MiB RSS, {} threads), largest parts (from /proc/{pid}/smaps):",
        smaps.0, smaps.1
    );
    for (label, count, kb) in smaps.2.iter().take(8) {
        println!(
            "    {:>8.1} MiB  {:>5} × {label}  ({:.0} KiB each)",
            *kb as f64 / 1024.0,
            count,
            *kb as f64 / (*count).max(1) as f64
        );
    }
    println!(
        "  first event p50 {:.1} µs, p99 {:.1} µs; event delay p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs ({} events)",
        us(quantile(&r.first_event_ns, 0.5)),
        us(quantile(&r.first_event_ns, 0.99)),
        us_i(quantile(&r.event_delay_ns, 0.5)),
        us_i(quantile(&r.event_delay_ns, 0.99)),
        us_i(quantile(&r.event_delay_ns, 0.999)),
        us_i(r.event_delay_ns.last().copied().unwrap_or(0)),
        r.event_delay_ns.len()
    );
    println!();
    ctx.summary.add(
        &format!("{n} concurrent streams: errors"),
        format!("{errors}"),
        "0",
        Some(errors == 0),
    );
    let peak = r.peak_rss_mib[0].max(hwm);
    ctx.summary.add(
        &format!("{n} concurrent streams: tollgate peak RSS"),
        format!("{:.1} MiB ({:.1} MB)", peak, peak * 1.048576),
        "≤ 100 MiB",
        Some(peak <= 100.0),
    );
    ctx.summary.add(
        &format!("{n} concurrent streams: tollgate CPU"),
        format!("{:.1} % of a core", r.cpu[0] / r.wall.as_secs_f64() * 100.0),
        "(no target)",
        None,
    );
    gw.stop();
}

/// What `n` idle keep-alive connections cost: each carries one request, then stays open doing nothing.
fn idle_connections(ctx: &mut Ctx, addr: SocketAddr, key: &str, pid: u32, n: usize) {
    let (rss0, threads0) = (procs::rss_mib(pid), procs::threads(pid));
    let req = request(Path::Pass, addr, key, "in=10", false);
    let mut held = Vec::with_capacity(n);
    let mut failed = 0;
    for _ in 0..n {
        let opened = Conn::connect(addr, Duration::from_secs(10)).and_then(|mut c| {
            c.roundtrip(&req)?;
            Ok(c)
        });
        match opened {
            Ok(c) => held.push(c),
            Err(_) => failed += 1,
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss1, threads1) = (procs::rss_mib(pid), procs::threads(pid));
    println!("  {n} idle keep-alive connections (one request each, then held open): tollgate RSS {rss0:.1} → {rss1:.1} MiB ({:+.1} MiB), threads {threads0} → {threads1}, {failed} failed", rss1 - rss0);
    ctx.summary.add(
        &format!("{n} idle keep-alive connections: RSS / threads added"),
        format!(
            "{:+.1} MiB / {:+}",
            rss1 - rss0,
            threads1 as i64 - threads0 as i64
        ),
        "buffers, not threads",
        Some(threads1 <= threads0 + 2 && failed == 0),
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
}

// ---------------------------------------------------------------------------------------------------------
/// E1, E3: ledger replay (1M records) and the in-process microbenchmark of the pieces.
fn offline(ctx: &mut Ctx) {
    println!("## offline (E1): ledger replay, 1M records (bench/ledger_replay.rs)");
    println!();
    let out = std::process::Command::new(ctx.bins.program("ledger-replay"))
        .output()
        .expect("ledger-replay");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for l in text.lines() {
        println!("  {l}");
    }
    println!();
    let secs: Option<f64> = text
        .split("best of 3:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    ctx.summary.add(
        "ledger replay, 1M records",
        secs.map_or("?".into(), |s| format!("{s:.3} s")),
        "≤ 3 s",
        secs.map(|s| s <= 3.0),
    );

    println!("## offline (E3): microbenchmark of auth, accounting and ledger (bench/micro.rs, in process, one thread)");
    println!();
    let out = std::process::Command::new(ctx.bins.program("bench-micro"))
        .output()
        .expect("bench-micro");
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        println!("  {l}");
    }
    println!();
}
