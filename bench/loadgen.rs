//! The suite's load generator as a command, for ad-hoc runs and profiling sessions.
//!
//! ```text
//! loadgen --addr 127.0.0.1:8080 [--key tg_…] [--api chat|messages|embeddings] [--model bench] [--path /v1/…]
//!         [--marker in=10,out=5]
//!         [--conns 16] [--duration 5] [--warmup 0.5] [--rate 2000] [--pid PID]…
//!         [--stream --events 200 --gap-us 1000 --streams 25]
//! ```
//!
//! Without `--stream`: non-streaming requests, closed loop (or open loop with `--rate`, requests/s in
//! total). With `--stream`: each connection runs `--streams` streams of `--events` events one after the
//! other. `--pid` (repeatable) adds a process whose CPU time per request is reported. `--model
//! bench-model` and no key target the fake upstream directly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tollgate_harness::client;
use tollgate_harness::load::{self, quantile, LoadSpec, StreamSpec, Watch};

#[derive(argh::FromArgs)]
/// The suite's load generator as a command, for ad-hoc runs and profiling sessions.
struct Args {
    /// where to send the load (host:port)
    #[argh(option)]
    addr: SocketAddr,
    /// the API key (default: none, for the fake upstream directly)
    #[argh(option, default = "String::from(\"none\")")]
    key: String,
    /// chat, messages or embeddings (default chat)
    #[argh(option, default = "String::from(\"chat\")")]
    api: String,
    /// the model asked for (default bench)
    #[argh(option, default = "String::from(\"bench\")")]
    model: String,
    /// the request path (default: the --api's own, /v1/chat/completions or /v1/messages); for another
    /// gateway's routes, e.g. a peer's provider prefix
    #[argh(option)]
    path: Option<String>,
    /// the fake upstream's marker (in=10,out=5,…)
    #[argh(option, default = "String::new()")]
    marker: String,
    /// connections (default 1)
    #[argh(option, default = "1")]
    conns: usize,
    /// seconds of measured load (default 5)
    #[argh(option, default = "5.0")]
    duration: f64,
    /// seconds of warm-up first (default 0.5)
    #[argh(option, default = "0.5")]
    warmup: f64,
    /// open loop: requests per second in total (default: closed loop)
    #[argh(option)]
    rate: Option<f64>,
    /// a process whose CPU time per request is reported (repeatable)
    #[argh(option)]
    pid: Vec<u32>,
    /// streamed requests: each connection runs --streams streams of --events events
    #[argh(switch)]
    stream: bool,
    /// events per stream (default 200)
    #[argh(option, default = "200")]
    events: usize,
    /// microseconds between events (default 1000)
    #[argh(option, default = "1000")]
    gap_us: u64,
    /// streams per connection (default 25)
    #[argh(option, default = "25")]
    streams: usize,
}

fn main() {
    let args: Args = tollgate_bench::args();
    let Args {
        addr,
        key,
        api,
        model,
        path,
        mut marker,
        conns,
        duration,
        warmup,
        rate,
        pid: pids,
        stream,
        events,
        gap_us,
        streams,
    } = args;
    if stream {
        marker = format!("events={events},gap_us={gap_us},{marker}");
    }
    let stream_field = if stream { "\"stream\":true," } else { "" };
    let body = format!(
        r#"{{"model":"{model}",{stream_field}"max_tokens":64,"messages":[{{"role":"user","content":"Hello! Please answer briefly. bench:{marker}"}}]}}"#
    );
    let auth = format!("Bearer {key}");
    let request = Arc::new(match api.as_str() {
        "chat" => client::post(
            addr,
            path.as_deref().unwrap_or("/v1/chat/completions"),
            &[("authorization", &auth)],
            &body,
        ),
        "messages" => client::post(
            addr,
            path.as_deref().unwrap_or("/v1/messages"),
            &[
                ("authorization", &auth),
                ("anthropic-version", "2023-06-01"),
            ],
            &body,
        ),
        // The same text as chat's message, as an embeddings input.
        "embeddings" => client::post(
            addr,
            path.as_deref().unwrap_or("/v1/embeddings"),
            &[("authorization", &auth)],
            &format!(
                r#"{{"model":"{model}","input":"Hello! Please answer briefly. bench:{marker}","encoding_format":"float"}}"#
            ),
        ),
        other => panic!("--api chat|messages|embeddings, not {other}"),
    });
    let watch = Watch {
        pids: pids.clone(),
        redis_port: None,
    };
    if stream {
        let r = load::run_streams(
            &StreamSpec {
                addr,
                request,
                conns,
                per_conn: streams,
                events,
                stagger: Duration::from_millis(1),
                read_timeout: Duration::from_secs(60),
                rss_every: Duration::ZERO,
            },
            &watch,
        );
        println!(
            "streams {} ok {} errors {:?} wall {:.2} s",
            r.streams,
            r.ok,
            r.errors,
            r.wall.as_secs_f64()
        );
        for (name, v) in [
            ("first byte", &r.first_byte_ns),
            ("first event", &r.first_event_ns),
        ] {
            println!(
                "{name:<12} p50 {:8.1} µs  p90 {:8.1} µs  p99 {:8.1} µs",
                quantile(v, 0.5) as f64 / 1e3,
                quantile(v, 0.9) as f64 / 1e3,
                quantile(v, 0.99) as f64 / 1e3
            );
        }
        println!(
            "upstream wrote the first event after: p50 {:8.1} µs  p90 {:8.1} µs  p99 {:8.1} µs",
            quantile(&r.inbound_ns, 0.5) as f64 / 1e3,
            quantile(&r.inbound_ns, 0.9) as f64 / 1e3,
            quantile(&r.inbound_ns, 0.99) as f64 / 1e3
        );
        let e = &r.event_delay_ns;
        println!(
            "event delay  p50 {:8.1} µs  p90 {:8.1} µs  p99 {:8.1} µs  p99.9 {:8.1} µs ({} events)",
            quantile(e, 0.5) as f64 / 1e3,
            quantile(e, 0.9) as f64 / 1e3,
            quantile(e, 0.99) as f64 / 1e3,
            quantile(e, 0.999) as f64 / 1e3,
            e.len()
        );
        for (i, pid) in pids.iter().enumerate() {
            println!(
                "pid {pid}: CPU {:.3} s, {:.1} µs per event",
                r.cpu[i],
                r.cpu[i] * 1e6 / e.len().max(1) as f64
            );
        }
    } else {
        let r = load::run_load(
            &LoadSpec {
                addr,
                request,
                conns,
                warmup: Duration::from_secs_f64(warmup),
                duration: Duration::from_secs_f64(duration),
                rate,
                bucket: Duration::ZERO,
            },
            &watch,
        );
        println!(
            "requests {} ({:.0}/s) ok {} errors {:?}",
            r.requests,
            r.rps(),
            r.ok,
            r.errors
        );
        println!(
            "latency p50 {:.1} µs  p90 {:.1} µs  p99 {:.1} µs  p99.9 {:.1} µs  mean {:.1} µs",
            r.p(0.5),
            r.p(0.9),
            r.p(0.99),
            r.p(0.999),
            r.mean_us()
        );
        for (i, pid) in pids.iter().enumerate() {
            println!(
                "pid {pid}: CPU {:.3} s, {:.1} µs per request",
                r.cpu[i],
                r.cpu_us_per_req(i)
            );
        }
        println!(
            "loadgen: {:.1} µs per request",
            r.cpu_us_per_req(pids.len())
        );
    }
}
