//! The load generator: closed-loop (each connection sends its next request when the last one is answered)
//! or open-loop at a fixed rate, keep-alive connections, exact latency percentiles (every sample is kept),
//! and streaming runs that time the first byte, the first event and every event's delay from the moment
//! the fake upstream wrote it.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::{Conn, Framing};
use super::procs;

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub fn quantile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn error_kind(e: &std::io::Error) -> String {
    format!("io {:?}", e.kind())
}

/// Processes whose CPU time is measured over a run.
#[derive(Clone, Default)]
pub struct Watch {
    pub pids: Vec<u32>,
    /// A `redis-server` on this port (on loopback) whose commands are counted over a closed-loop run
    /// (`INFO commandstats`): counts do not depend on how busy the machine is, as CPU time does.
    pub redis_port: Option<u16>,
}

/// What `Watch::counts` counts, in order, in `LoadResult::counts`: per watched pid its context switches,
/// read and write system calls (`/proc/PID/io`: `syscr`, `syscw`), then with `redis_port` the server's
/// script calls (`EVAL`, `EVALSHA`) and every other command it ran (those scripts call included).
pub const COUNTS_PER_PID: usize = 3;

impl Watch {
    fn cpu(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.pids.iter().map(|&p| procs::cpu_secs(p)).collect();
        v.push(procs::cpu_secs(std::process::id()));
        v
    }

    fn counts(&self) -> Vec<f64> {
        let mut v = Vec::new();
        for &pid in &self.pids {
            let [switches, reads, writes] = procs::switches_and_syscalls(pid);
            v.extend([switches as f64, reads as f64, writes as f64]);
        }
        if let Some(port) = self.redis_port {
            let (scripts, others) = procs::redis_command_counts(port);
            v.extend([scripts as f64, others as f64]);
        }
        v
    }
}

fn delta(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| y - x).collect()
}

pub struct LoadSpec {
    pub addr: SocketAddr,
    pub request: Arc<Vec<u8>>,
    pub conns: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Open loop: total requests per second over all connections. None: closed loop.
    pub rate: Option<f64>,
    /// Length of the intervals reported in `buckets` (zero: none).
    pub bucket: Duration,
}

#[derive(Default)]
pub struct LoadResult {
    /// Requests completed inside the measured window (any status).
    pub requests: u64,
    pub ok: u64,
    /// Failures by kind (`HTTP 503`, `io ConnectionReset`, …).
    pub errors: BTreeMap<String, u64>,
    /// Latencies of the requests in the window, sorted (ns), from the moment the request is written. (In
    /// open-loop runs the schedule only paces the requests: the runs here stay well below capacity, so no
    /// backlog builds up, and the load generator's own timer lateness is kept out of the figures.)
    pub lat_ns: Vec<u64>,
    /// `x-tollgate-overhead-ms` values seen, sorted.
    pub overhead_ms: Vec<f64>,
    pub window: Duration,
    /// CPU seconds per watched pid over the window, then this process's.
    pub cpu: Vec<f64>,
    /// Per bucket: (requests completed, CPU seconds per watched pid).
    pub buckets: Vec<(u64, Vec<f64>)>,
    /// What `Watch::counts` counted over the window (see `COUNTS_PER_PID`).
    pub counts: Vec<f64>,
}

impl LoadResult {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }
    pub fn errors_total(&self) -> u64 {
        self.errors.values().sum()
    }
    pub fn p(&self, q: f64) -> f64 {
        quantile(&self.lat_ns, q) as f64 / 1000.0
    }
    pub fn mean_us(&self) -> f64 {
        if self.lat_ns.is_empty() {
            return 0.0;
        }
        self.lat_ns.iter().sum::<u64>() as f64 / self.lat_ns.len() as f64 / 1000.0
    }
    /// CPU µs per request of the i-th watched process.
    pub fn cpu_us_per_req(&self, i: usize) -> f64 {
        self.cpu.get(i).copied().unwrap_or(0.0) * 1e6 / self.requests.max(1) as f64
    }
    /// Count `i` of `counts` per request of the window.
    pub fn count_per_req(&self, i: usize) -> f64 {
        self.counts.get(i).copied().unwrap_or(0.0) / self.requests.max(1) as f64
    }
    /// Merges another run of the same kind (samples, counts, CPU and window add up).
    pub fn merge(&mut self, o: LoadResult) {
        self.requests += o.requests;
        self.ok += o.ok;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.lat_ns.extend(o.lat_ns);
        self.lat_ns.sort_unstable();
        self.overhead_ms.extend(o.overhead_ms);
        self.overhead_ms.sort_by(|a, b| a.total_cmp(b));
        self.window += o.window;
        if self.cpu.is_empty() {
            self.cpu = o.cpu;
        } else {
            for (a, b) in self.cpu.iter_mut().zip(o.cpu) {
                *a += b;
            }
        }
        if self.counts.is_empty() {
            self.counts = o.counts;
        } else {
            for (a, b) in self.counts.iter_mut().zip(o.counts) {
                *a += b;
            }
        }
    }
}

/// Runs a non-streaming load. `watch` names the processes whose CPU time is read at the window's edges.
pub fn run_load(spec: &LoadSpec, watch: &Watch) -> LoadResult {
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + spec.warmup;
    let end = measure_from + spec.duration;
    let nbuckets = if spec.bucket.is_zero() {
        0
    } else {
        (spec.duration.as_nanos() / spec.bucket.as_nanos()) as usize + 1
    };
    let bucket_counts: Arc<Vec<AtomicU64>> =
        Arc::new((0..nbuckets).map(|_| AtomicU64::new(0)).collect());
    // Per connection: (requests, ok, errors, latencies, overheads).
    type PerConn = (u64, u64, BTreeMap<String, u64>, Vec<u64>, Vec<f64>);
    let results: Mutex<Vec<PerConn>> = Mutex::new(Vec::new());
    let mut cpu_marks: Vec<Vec<f64>> = Vec::new();
    let mut cpu0 = Vec::new();
    let mut cpu1 = Vec::new();
    let mut counts0 = Vec::new();
    let mut counts1 = Vec::new();
    std::thread::scope(|s| {
        for i in 0..spec.conns {
            let results = &results;
            let bucket_counts = bucket_counts.clone();
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, move || {
                    let mut lat = Vec::with_capacity(1 << 16);
                    let mut overhead = Vec::new();
                    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
                    let (mut requests, mut ok) = (0u64, 0u64);
                    let interval = spec
                        .rate
                        .map(|r| Duration::from_secs_f64(spec.conns as f64 / r));
                    let mut next_at = start
                        + interval.map_or(Duration::ZERO, |iv| {
                            iv.mul_f64(i as f64 / spec.conns as f64)
                        });
                    let now = Instant::now();
                    if start > now {
                        std::thread::sleep(start - now);
                    }
                    let mut conn: Option<Conn> = None;
                    loop {
                        let now = Instant::now();
                        if now >= end {
                            break;
                        }
                        if let Some(iv) = interval {
                            if next_at >= end {
                                break;
                            }
                            if next_at > now {
                                std::thread::sleep(next_at - now);
                            }
                            next_at += iv;
                        }
                        if conn.is_none() {
                            match Conn::connect(spec.addr, Duration::from_secs(10)) {
                                Ok(c) => conn = Some(c),
                                Err(e) => {
                                    if Instant::now() >= measure_from {
                                        *errors
                                            .entry(format!("connect {:?}", e.kind()))
                                            .or_default() += 1;
                                        requests += 1;
                                    }
                                    std::thread::sleep(Duration::from_millis(1));
                                    continue;
                                }
                            }
                        }
                        let c = conn.as_mut().unwrap();
                        let t0 = Instant::now();
                        let r = c.roundtrip(&spec.request);
                        let t1 = Instant::now();
                        let counted = t1 >= measure_from && t1 < end;
                        match r {
                            Ok(resp) => {
                                if resp.head.close {
                                    conn = None;
                                }
                                if counted {
                                    requests += 1;
                                    if resp.head.status == 200 {
                                        ok += 1;
                                    } else {
                                        *errors
                                            .entry(format!("HTTP {}", resp.head.status))
                                            .or_default() += 1;
                                    }
                                    lat.push((t1 - t0).as_nanos() as u64);
                                    if let Some(o) = resp.head.overhead_ms {
                                        overhead.push(o);
                                    }
                                    if nbuckets > 0 {
                                        let b = ((t1 - measure_from).as_nanos()
                                            / spec.bucket.as_nanos())
                                            as usize;
                                        if let Some(c) = bucket_counts.get(b) {
                                            c.fetch_add(1, Ordering::Relaxed);
                                        }
                                    }
                                }
                            }
                            Err(e) => {
                                conn = None;
                                if counted {
                                    requests += 1;
                                    *errors.entry(error_kind(&e)).or_default() += 1;
                                }
                            }
                        }
                    }
                    results
                        .lock()
                        .unwrap()
                        .push((requests, ok, errors, lat, overhead));
                })
                .expect("spawn load thread");
        }
        // The measuring window's edges.
        sleep_until(measure_from);
        cpu0 = watch.cpu();
        counts0 = watch.counts();
        if nbuckets > 0 {
            let mut t = measure_from;
            while t + spec.bucket <= end {
                t += spec.bucket;
                sleep_until(t);
                cpu_marks.push(watch.cpu());
            }
        }
        sleep_until(end);
        cpu1 = watch.cpu();
        counts1 = watch.counts();
    });
    let mut out = LoadResult {
        window: spec.duration,
        cpu: delta(&cpu0, &cpu1),
        counts: delta(&counts0, &counts1),
        ..LoadResult::default()
    };
    for (requests, ok, errors, lat, overhead) in results.into_inner().unwrap() {
        out.requests += requests;
        out.ok += ok;
        for (k, v) in errors {
            *out.errors.entry(k).or_default() += v;
        }
        out.lat_ns.extend(lat);
        out.overhead_ms.extend(overhead);
    }
    out.lat_ns.sort_unstable();
    out.overhead_ms.sort_by(|a, b| a.total_cmp(b));
    let mut prev = cpu0;
    for (i, mark) in cpu_marks.into_iter().enumerate() {
        let n = bucket_counts[i].load(Ordering::Relaxed);
        out.buckets.push((n, delta(&prev, &mark)));
        prev = mark;
    }
    out
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

pub struct StreamSpec {
    pub addr: SocketAddr,
    pub request: Arc<Vec<u8>>,
    pub conns: usize,
    /// Streams each connection runs, one after the other.
    pub per_conn: usize,
    /// Content events each stream must deliver.
    pub events: usize,
    /// Pause between starting two connections.
    pub stagger: Duration,
    pub read_timeout: Duration,
    /// Sample the watched processes' RSS this often (zero: never).
    pub rss_every: Duration,
}

#[derive(Default)]
pub struct StreamResult {
    pub streams: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    /// Request sent → first byte of the response (ns), sorted.
    pub first_byte_ns: Vec<u64>,
    /// Request sent → first content event (ns), sorted.
    pub first_event_ns: Vec<u64>,
    /// Event arrival − the time the fake upstream wrote it (ns), sorted.
    pub event_delay_ns: Vec<i64>,
    /// Request sent → the fake upstream wrote the first event (ns), sorted: the inbound half of the time
    /// to the first event (the rest is that event's relay delay).
    pub inbound_ns: Vec<i64>,
    pub wall: Duration,
    /// CPU seconds per watched pid over the run, then this process's.
    pub cpu: Vec<f64>,
    /// Highest RSS seen per watched pid (MiB).
    pub peak_rss_mib: Vec<f64>,
    /// Most streams open at the same time (by this client's count).
    pub peak_open: usize,
}

/// Runs streams and times them.
pub fn run_streams(spec: &StreamSpec, watch: &Watch) -> StreamResult {
    struct Acc {
        streams: u64,
        ok: u64,
        errors: BTreeMap<String, u64>,
        fb: Vec<u64>,
        fe: Vec<u64>,
        ev: Vec<i64>,
        inb: Vec<i64>,
    }
    let acc = Mutex::new(Vec::<Acc>::new());
    let open = AtomicUsize::new(0);
    let peak_open = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let cpu0 = watch.cpu();
    let t_start = Instant::now();
    let mut peak_rss = vec![0.0f64; watch.pids.len()];
    std::thread::scope(|s| {
        for i in 0..spec.conns {
            let (acc, open, peak_open, done) = (&acc, &open, &peak_open, &done);
            let start_at = t_start + spec.stagger * i as u32;
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn_scoped(s, move || {
                    sleep_until(start_at);
                    let mut a = Acc {
                        streams: 0,
                        ok: 0,
                        errors: BTreeMap::new(),
                        fb: Vec::new(),
                        fe: Vec::new(),
                        ev: Vec::with_capacity(spec.events * spec.per_conn),
                        inb: Vec::new(),
                    };
                    let mut conn: Option<Conn> = None;
                    for _ in 0..spec.per_conn {
                        a.streams += 1;
                        if conn.is_none() {
                            match Conn::connect(spec.addr, spec.read_timeout) {
                                Ok(c) => conn = Some(c),
                                Err(e) => {
                                    *a.errors
                                        .entry(format!("connect {:?}", e.kind()))
                                        .or_default() += 1;
                                    continue;
                                }
                            }
                        }
                        let c = conn.as_mut().unwrap();
                        let now_open = open.fetch_add(1, Ordering::SeqCst) + 1;
                        peak_open.fetch_max(now_open, Ordering::SeqCst);
                        let r = one_stream(
                            c,
                            &spec.request,
                            spec.events,
                            &mut a.fb,
                            &mut a.fe,
                            &mut a.ev,
                            &mut a.inb,
                        );
                        open.fetch_sub(1, Ordering::SeqCst);
                        match r {
                            Ok(true) => a.ok += 1,
                            Ok(false) => {
                                *a.errors.entry("incomplete stream".into()).or_default() += 1;
                                conn = None;
                            }
                            Err(kind) => {
                                *a.errors.entry(kind).or_default() += 1;
                                conn = None;
                            }
                        }
                    }
                    acc.lock().unwrap().push(a);
                    done.fetch_add(1, Ordering::SeqCst);
                })
                .expect("spawn stream thread");
        }
        if !spec.rss_every.is_zero() {
            while done.load(Ordering::SeqCst) < spec.conns {
                for (i, &pid) in watch.pids.iter().enumerate() {
                    peak_rss[i] = peak_rss[i].max(procs::rss_mib(pid));
                }
                std::thread::sleep(spec.rss_every);
            }
        }
    });
    let wall = t_start.elapsed();
    let cpu1 = watch.cpu();
    let mut out = StreamResult {
        wall,
        cpu: delta(&cpu0, &cpu1),
        peak_rss_mib: peak_rss,
        peak_open: peak_open.load(Ordering::SeqCst),
        ..StreamResult::default()
    };
    for a in acc.into_inner().unwrap() {
        out.streams += a.streams;
        out.ok += a.ok;
        for (k, v) in a.errors {
            *out.errors.entry(k).or_default() += v;
        }
        out.first_byte_ns.extend(a.fb);
        out.first_event_ns.extend(a.fe);
        out.event_delay_ns.extend(a.ev);
        out.inbound_ns.extend(a.inb);
    }
    out.inbound_ns.sort_unstable();
    out.first_byte_ns.sort_unstable();
    out.first_event_ns.sort_unstable();
    out.event_delay_ns.sort_unstable();
    out
}

/// One stream on `c`: Ok(true) complete and clean; Ok(false) ended without its end marker or with too few
/// events; Err(kind) a failure.
fn one_stream(
    c: &mut Conn,
    request: &[u8],
    events: usize,
    fb: &mut Vec<u64>,
    fe: &mut Vec<u64>,
    ev: &mut Vec<i64>,
    inb: &mut Vec<i64>,
) -> Result<bool, String> {
    let t0_unix = super::client::unix_nanos();
    let t0 = Instant::now();
    c.send(request).map_err(|e| error_kind(&e))?;
    let head = c.read_head().map_err(|e| error_kind(&e))?;
    if let Some(t) = c.first_byte {
        fb.push((t - t0).as_nanos() as u64);
    }
    if head.status != 200 {
        let _ = c.read_body(head.framing);
        return Err(format!("HTTP {}", head.status));
    }
    if head.framing != Framing::Chunked || !head.event_stream {
        return Err("not an event stream".into());
    }
    let mut seen = 0usize;
    let mut end = false;
    let mut error = false;
    let read = c.read_events(head.framing, |e| {
        if let Some(sent) = e.sent_unix_ns() {
            if seen == 0 {
                fe.push((e.arrived - t0).as_nanos() as u64);
                inb.push(sent as i64 - t0_unix as i64);
            }
            seen += 1;
            ev.push(e.arrived_unix_ns as i64 - sent as i64);
        }
        if e.is_error() {
            error = true;
        }
        if e.is_end() {
            end = true;
        }
        true
    });
    match read {
        Err(e) => Err(error_kind(&e)),
        Ok(_) if error => Err("in-stream error".into()),
        Ok(_) => Ok(end && seen == events),
    }
}
