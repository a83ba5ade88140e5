//! The `store` phase (R) of the suite: what a `[store]` costs. One instance on flat files and one on a
//! local `redis-server` (started here, `appendonly yes`, `appendfsync everysec`), each with three kinds of
//! key: without limits or credit (no Redis call on the request path), with a credit only, and with rpm, tpm,
//! max_concurrent and a credit (the admission script does the most); passthrough, interleaved, at 1 and 16
//! connections.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::load::{self, LoadResult, LoadSpec, Watch};
use super::procs::{self, Gateway, Instance};
use super::{config, request, Ctx, Path};

/// Keys made before the start, one per measured run: without limits, with a credit only, with every limit.
struct Keys {
    free: Vec<String>,
    credit: Vec<String>,
    limited: Vec<String>,
}

impl Keys {
    fn create(ctx: &Ctx, inst: &Instance, n: usize) -> Keys {
        let make = |kind: &str, group: &str, credit: Option<f64>| -> Vec<String> {
            (0..n)
                .map(|i| inst.add_key(&ctx.bins, &format!("{kind}-{i}"), group, credit))
                .collect()
        };
        Keys {
            free: make("free", "free", None),
            credit: make("credit", "free", Some(1e9)),
            limited: make("limited", "limited", Some(1e9)),
        }
    }

    fn take(&mut self, kind: usize) -> String {
        let list = match kind {
            0 => &mut self.free,
            1 => &mut self.credit,
            _ => &mut self.limited,
        };
        list.pop().expect("enough keys")
    }
}

/// The runs of a round, in order: (name, store?, kind of key).
const RUNS: [(&str, bool, usize); 6] = [
    ("file, free key", false, 0),
    ("store, free key", true, 0),
    ("file, credit key", false, 1),
    ("store, credit key", true, 1),
    ("file, limited key", false, 2),
    ("store, limited key", true, 2),
];

/// A `redis-server` for the phase.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(dir: &std::path::Path) -> Option<Redis> {
        std::fs::create_dir_all(dir).ok()?;
        let port = procs::free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis { child, port })
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (30 s at most) until the store instance's Redis has run no script for a moment: the records of
/// the run before are shipped, so that a run does not pay for the last one's backlog. Prints the wait when
/// it was long (the backlog is work the run before left).
fn settled(port: u16) {
    let start = Instant::now();
    let mut last = procs::redis_command_counts(port).0;
    while start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(300));
        let now = procs::redis_command_counts(port).0;
        if now == last {
            break;
        }
        last = now;
    }
    if start.elapsed() > Duration::from_secs(1) {
        println!(
            "  (waited {:.1} s for the run before's records to be shipped)",
            start.elapsed().as_secs_f64()
        );
    }
}

/// The counts of the store runs (`Watch::counts`: per watched pid switches, reads, writes; then Redis's
/// script calls and commands), per request, at 1 and at 16 connections.
fn counts_table(one: &[LoadResult], many: &[LoadResult]) {
    use super::load::COUNTS_PER_PID;
    // The watched pids: tollgate, the fake upstream, redis-server.
    let (tg, redis) = (0, 2 * COUNTS_PER_PID);
    let scripts = 3 * COUNTS_PER_PID;
    println!(
        "  {:<26} {:>13} {:>15} {:>14} {:>15} {:>16}",
        "run", "script calls", "redis commands", "redis reads", "redis writes", "tg ctx switches"
    );
    for (conns, runs) in [(1, one), (16, many)] {
        for (i, kind) in [(1, "free"), (3, "credit"), (5, "limited")] {
            let r = &runs[i];
            println!(
                "  {:<26} {:>13.3} {:>15.2} {:>14.3} {:>15.3} {:>16.2}",
                format!(
                    "{kind} key, {conns} conn{}",
                    if conns > 1 { "s" } else { "" }
                ),
                r.count_per_req(scripts),
                r.count_per_req(scripts + 1),
                r.count_per_req(redis + 1),
                r.count_per_req(redis + 2),
                r.count_per_req(tg),
            );
        }
    }
}

fn header() {
    println!(
        "  {:<34} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9} {:>11}  errors",
        "run", "req/s", "p50 µs", "p90 µs", "p99 µs", "tg µs/req", "up µs/req", "redis µs/req"
    );
}

fn line(name: &str, r: &LoadResult) {
    println!(
        "  {:<34} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} {:>11.1}  {}",
        name,
        r.rps(),
        r.p(0.5),
        r.p(0.9),
        r.p(0.99),
        r.cpu_us_per_req(0),
        r.cpu_us_per_req(1),
        r.cpu_us_per_req(2),
        super::errors_str(&r.errors)
    );
}

/// The six runs (file/store × three kinds of key) at `conns` connections, interleaved over the plan's
/// rounds; merged per run, in the order of `RUNS`.
fn runs(
    ctx: &Ctx,
    gws: [(&Gateway, &mut Keys, &Watch); 2],
    conns: usize,
    duration: Duration,
) -> Vec<LoadResult> {
    let mut merged: Vec<Option<LoadResult>> = RUNS.iter().map(|_| None).collect();
    let [(file, file_keys, file_watch), (store, store_keys, store_watch)] = gws;
    header();
    for round in 0..ctx.plan.rounds {
        for (i, (name, on_store, kind)) in RUNS.iter().enumerate() {
            let (gw, keys, watch) = if *on_store {
                (store, &mut *store_keys, store_watch)
            } else {
                (file, &mut *file_keys, file_watch)
            };
            let key = keys.take(*kind);
            if let Some(port) = watch.redis_port {
                settled(port);
            }
            let spec = LoadSpec {
                addr: gw.addr,
                request: request(Path::Pass, gw.addr, &key, "in=10,out=5", false),
                conns,
                warmup: ctx.plan.warmup,
                duration,
                rate: None,
                bucket: Duration::ZERO,
            };
            let r = load::run_load(&spec, watch);
            line(&format!("{name} (round {})", round + 1), &r);
            match &mut merged[i] {
                Some(m) => m.merge(r),
                slot => *slot = Some(r),
            }
        }
    }
    let merged: Vec<LoadResult> = merged.into_iter().map(Option::unwrap).collect();
    if ctx.plan.rounds > 1 {
        for ((name, _, _), r) in RUNS.iter().zip(&merged) {
            line(&format!("{name} (all rounds)"), r);
        }
    }
    merged
}

/// R: the cost of a `[store]`.
pub(crate) fn store(ctx: &mut Ctx) {
    println!(
        "## store (R): the cost of a [store]: flat files vs a local redis-server, passthrough"
    );
    println!();
    let Some(redis) = Redis::start(&ctx.root.join("redis")) else {
        println!("  redis-server not found or did not start (apt-get install redis-server); phase skipped");
        println!();
        return;
    };
    // An earlier build measured side by side (`bench/run.sh --compare`) may have no `[store]`.
    let probe = Instance::new(
        &ctx.root,
        "store-probe",
        &config(
            ctx.upstream.addr,
            "warn",
            "[store]\nurl = \"redis://127.0.0.1:1/0\"\n",
        ),
    );
    let supported = Command::new(&ctx.bins.tollgate)
        .args(["check", "--config"])
        .arg(&probe.config)
        .output()
        .is_ok_and(|o| o.status.success());
    if !supported {
        println!("  this build has no [store]; phase skipped");
        println!();
        return;
    }
    let version = procs::command_output("redis-server", &["--version"]);
    println!("  {version}; appendonly yes, appendfsync everysec; same machine");
    let file_inst = Instance::new(&ctx.root, "file", &config(ctx.upstream.addr, "warn", ""));
    let store_top = format!(
        "instance = \"bench\"\n[store]\nurl = \"redis://127.0.0.1:{}/0\"\n",
        redis.port
    );
    let store_inst = Instance::new(
        &ctx.root,
        "store",
        &config(ctx.upstream.addr, "warn", &store_top),
    );
    let n = 2 * ctx.plan.rounds;
    let mut file_keys = Keys::create(ctx, &file_inst, n);
    let mut store_keys = Keys::create(ctx, &store_inst, n);
    let file = Gateway::start(&ctx.bins, &file_inst, &[]);
    let store = Gateway::start(&ctx.bins, &store_inst, &[]);
    let redis_pid = redis.child.id();
    let file_watch = Watch {
        pids: vec![file.pid(), ctx.upstream.pid(), redis_pid],
        redis_port: None,
    };
    let store_watch = Watch {
        pids: vec![store.pid(), ctx.upstream.pid(), redis_pid],
        redis_port: Some(redis.port),
    };
    println!("  tg = the tollgate instance of the run, up = the fake upstream, redis = redis-server (CPU per request)");
    println!();

    println!(
        "### 1 connection (closed loop), {} × {} s per run",
        ctx.plan.rounds,
        ctx.plan.one_conn.as_secs_f64()
    );
    println!();
    let one = runs(
        ctx,
        [
            (&file, &mut file_keys, &file_watch),
            (&store, &mut store_keys, &store_watch),
        ],
        1,
        ctx.plan.one_conn,
    );
    let added = |f: &LoadResult, s: &LoadResult| s.p(0.5) - f.p(0.5);
    println!();
    println!(
        "  added by the store at p50: free key {:+.1} µs, credit key {:+.1} µs, limited key {:+.1} µs (p99 {:+.1} / {:+.1} / {:+.1} µs)",
        added(&one[0], &one[1]),
        added(&one[2], &one[3]),
        added(&one[4], &one[5]),
        one[1].p(0.99) - one[0].p(0.99),
        one[3].p(0.99) - one[2].p(0.99),
        one[5].p(0.99) - one[4].p(0.99),
    );
    println!();

    println!(
        "### 16 connections (closed loop), {} × {} s per run",
        ctx.plan.rounds,
        ctx.plan.many_conn.as_secs_f64()
    );
    println!();
    let many = runs(
        ctx,
        [
            (&file, &mut file_keys, &file_watch),
            (&store, &mut store_keys, &store_watch),
        ],
        16,
        ctx.plan.many_conn,
    );
    let share = |f: &LoadResult, s: &LoadResult| s.rps() / f.rps() * 100.0;
    println!();
    println!("  the work behind it, per request (counted, so it does not depend on how busy the machine is):");
    counts_table(&one, &many);
    println!();
    println!(
        "  store throughput as a share of file mode: free key {:.0} %, credit key {:.0} %, limited key {:.0} %",
        share(&many[0], &many[1]),
        share(&many[2], &many[3]),
        share(&many[4], &many[5])
    );
    println!();
    for (i, kind) in [(0, "free"), (2, "credit"), (4, "limited")] {
        let a = added(&one[i], &one[i + 1]);
        ctx.summary.add(
            &format!("store, 1 conn, {kind} key: added p50 over file mode"),
            format!("{a:.1} µs"),
            "≤ 150 µs",
            Some(a <= 150.0),
        );
    }
    for (i, kind) in [(0, "free"), (2, "credit"), (4, "limited")] {
        let s = share(&many[i], &many[i + 1]);
        ctx.summary.add(
            &format!("store, 16 conns, {kind} key: throughput vs file mode"),
            format!(
                "{s:.0} % ({:.0} vs {:.0} req/s)",
                many[i + 1].rps(),
                many[i].rps()
            ),
            "≥ 60 %",
            Some(s >= 60.0),
        );
    }
    let errors: u64 = one
        .iter()
        .chain(many.iter())
        .map(LoadResult::errors_total)
        .sum();
    ctx.summary
        .add("store: errors", format!("{errors}"), "0", Some(errors == 0));
    file.stop();
    store.stop();
}
