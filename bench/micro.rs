//! In-process microbenchmark of the per-request pieces of access control and accounting:
//! `KeyStore::check`, `Accounts::check_and_reserve` + `Reservation::settle` (without and with limits and
//! credit, and at several sizes of the key's sliding one-minute window), `Ledger::append`, and picking a
//! model's upstream by route.
//!
//! `cargo run --release -p tollgate-bench --bin bench-micro`

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::access::accounts::{Accounts, Ask};
use tollgate::access::{KeyCheck, KeyStore};
use tollgate::config::Group;
use tollgate::ledger::{Ledger, Record, Status};
use tollgate::money::Money;

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

#[derive(argh::FromArgs)]
/// Microbenchmarks of the request path's pieces (keys, pricing, the ledger, the codecs).
struct Args {}

fn main() {
    let _: Args = tollgate_bench::args();
    let dir = std::env::temp_dir().join(format!("tollgate-micro-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // KeyStore::check: 100 keys in the file, a valid key, an unknown one.
    let mut keys = Vec::new();
    for i in 0..100 {
        keys.push(
            tollgate::access::key_ops::add_key(
                tollgate::access::key_ops::KeysAt::Dir(&dir),
                &format!("key-{i}"),
                "default",
                None,
            )
            .unwrap(),
        );
    }
    let store = KeyStore::open(&dir).unwrap();
    let n = 200_000u64;
    let t = Instant::now();
    for i in 0..n {
        let k = &keys[(i % 100) as usize];
        match black_box(store.check(black_box(k))) {
            KeyCheck::Valid(_) => {}
            _ => panic!("key not valid"),
        }
    }
    let valid = t.elapsed();
    let unknown_key = format!("tg_{}", "x".repeat(40));
    let t = Instant::now();
    for _ in 0..n {
        black_box(store.check(black_box(&unknown_key)));
    }
    let unknown = t.elapsed();
    let t = Instant::now();
    for i in 0..n {
        black_box(tollgate::access::keys::hash_key(black_box(
            &keys[(i % 100) as usize],
        )));
    }
    let hash = t.elapsed();
    let t = Instant::now();
    for i in 0..n {
        use sha2::Digest;
        black_box(sha2::Sha256::digest(black_box(
            keys[(i % 100) as usize].as_bytes(),
        )));
    }
    let digest = t.elapsed();
    println!(
        "KeyStore::check (100 keys): valid {:.0} ns/op, unknown {:.0} ns/op; of which hash_key {:.0} ns (SHA-256 itself {:.0} ns, hex formatting the rest)",
        ns_per(valid, n),
        ns_per(unknown, n),
        ns_per(hash, n),
        ns_per(digest, n)
    );

    // Accounts: check_and_reserve + settle, per window size (admissions of this key in the last minute).
    let free = Group {
        name: "free".into(),
        models: vec!["*".into()],
        rpm: None,
        tpm: None,
        max_concurrent: None,
        budget: None,
    };
    let limited = Group {
        name: "limited".into(),
        models: vec!["*".into()],
        rpm: Some(1_000_000_000),
        tpm: Some(1_000_000_000_000),
        max_concurrent: Some(1_000_000_000),
        budget: None,
    };
    println!(
        "Accounts::check_and_reserve + Reservation::settle, by admissions already in the key's 1-minute window \
         (check + settle = total, ns/op):"
    );
    println!(
        "  {:>8}  {:>34}  {:>34}",
        "window", "no limits, no credit (check+settle)", "rpm+tpm+max_concurrent+credit"
    );
    for window in [0usize, 1_000, 10_000, 100_000, 300_000] {
        let mut cells = Vec::new();
        for (group, credit) in [
            (&free, None),
            (&limited, Some(Money::credits(1_000_000_000_000))),
        ] {
            let acc = Arc::new(Accounts::new(
                HashMap::new(),
                HashMap::new(),
                HashMap::new(),
            ));
            // Fill the window cheaply: admissions held forever (no settle, so no scan).
            for _ in 0..window {
                let ask = Ask {
                    key: "bench",
                    id: "req_bench",
                    credit: None,
                    group: None,
                    tokens: 100,
                    cost: Money::ZERO,
                    budget: None,
                    now: 0,
                };
                let (r, _) = acc.check_and_reserve(&ask).ok().unwrap();
                std::mem::forget(r);
            }
            // Few operations relative to the window, since each one adds an entry to it.
            let ops: u64 = if window < 10_000 { 200 } else { 1_000 };
            let mut t_check = Duration::ZERO;
            let mut t_settle = Duration::ZERO;
            for _ in 0..ops {
                let ask = Ask {
                    key: "bench",
                    id: "req_bench",
                    credit,
                    group: Some(group),
                    tokens: 1_074,
                    cost: Money::from_units(50_000_000),
                    budget: None,
                    now: 0,
                };
                let t0 = Instant::now();
                let (r, info) = acc.check_and_reserve(black_box(&ask)).ok().unwrap();
                let t1 = Instant::now();
                black_box(info);
                r.settle(Money::from_units(20_000_000), 17);
                t_settle += t1.elapsed();
                t_check += t1 - t0;
            }
            cells.push(format!(
                "{:9.0} + {:9.0} = {:9.0} ns",
                ns_per(t_check, ops),
                ns_per(t_settle, ops),
                ns_per(t_check + t_settle, ops)
            ));
        }
        println!("  {:>8}  {:>34}  {:>34}", window, cells[0], cells[1]);
    }

    // Ledger::append: the caller's side (building the record as accounting::settle does, and queueing it)
    // and the writer thread's (serialising and writing), measured as the time until flush() returns.
    let ldir = dir.join("ledger");
    std::fs::create_dir_all(&ldir).unwrap();
    let (ledger, _) = Ledger::open(&ldir, Duration::from_millis(200), false).unwrap();
    let n = 200_000u64;
    let t = Instant::now();
    for i in 0..n {
        ledger.append(Record {
            ts: tollgate::util::rfc3339_millis(tollgate::util::unix_millis()),
            request_id: format!("req_{:024}", i),
            client_request_id: None,
            key: "bench".to_string(),
            group: "default".to_string(),
            model: "bench".to_string(),
            protocol: "chat".to_string(),
            upstream: "fake".to_string(),
            endpoint: None,
            stream: false,
            status: Status::Http(200),
            input_tokens: 10,
            cached_input_tokens: 0,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: 5,
            reasoning_tokens: 0,
            tier_above_input_tokens: None,
            estimated: false,
            cost: Money::from_units(20_000_000),
            latency_ms: 1,
            error: None,
            reason: None,
            requested_model: None,
            instance: None,
            hosted_uses: Default::default(),
            service_tier: None,
            surcharge: None,
            cache: None,
        });
    }
    let queued = t.elapsed();
    ledger.flush();
    let total = t.elapsed();
    let size = std::fs::metadata(ldir.join(tollgate::ledger::LEDGER_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "Ledger::append ({n} records, {:.1} MB)  caller {:5.0} ns/record (build + queue); until written and synced {:5.0} ns/record ({:.0} records/s)",
        size as f64 / 1e6,
        ns_per(queued, n),
        ns_per(total, n),
        n as f64 / total.as_secs_f64()
    );
    drop(ledger);
    let _ = std::fs::remove_dir_all(&dir);
    routing();
    upstream_call();
}

/// Picking a model's upstream per request, for each route, with what the pipeline does around it (the
/// in-flight count and the first-byte average): the cost `weighted` and `least-busy` add over `ordered`.
fn routing() {
    use tollgate::config::{Config, Route};
    use tollgate::upstream::routing::Routing;
    let names: Vec<String> = vec!["a".into(), "b".into()];
    let n = 1_000_000u64;
    let mut cells = Vec::new();
    for route in [Route::Ordered, Route::Weighted, Route::LeastBusy] {
        let mut m = Config::embedded().models[0].clone();
        m.route = route;
        m.upstreams = names.clone();
        m.weights = if route == Route::Weighted {
            vec![3, 1]
        } else {
            Vec::new()
        };
        let r = Routing::default();
        let t = Instant::now();
        for _ in 0..n {
            let order = r.order(&m, names.iter().collect());
            let first = order[0];
            let busy = r.busy(first);
            r.first_byte(first, Duration::from_micros(900));
            drop(black_box(busy));
        }
        cells.push(format!(
            "{} {:5.0} ns",
            route.name(),
            ns_per(t.elapsed(), n)
        ));
    }
    println!(
        "Routing, 2 upstreams, per request (order + in flight + first byte): {}",
        cells.join("; ")
    );
}

/// CPU time of the calling thread (the upstream call's own cost, without the server's).
fn thread_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A tiny keep-alive HTTP server answering every request with the same small Chat answer.
fn tiny_upstream() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_nodelay(true);
                let body = br#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;
                let mut answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                answer.extend_from_slice(body);
                let mut buf = vec![0u8; 64 * 1024];
                let mut have = Vec::new();
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    have.extend_from_slice(&buf[..n]);
                    // One request = a head with Content-Length and its body.
                    while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&have[..end]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap_or(0));
                        if have.len() < end + 4 + len {
                            break;
                        }
                        have.drain(..end + 4 + len);
                        if s.write_all(&answer).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// What one upstream call costs the calling thread: through `upstream::http::send_to` as the gateway makes
/// it (ureq, per-request timeouts, credentials), a bare ureq call on the same agent, and a hand-written
/// request on one kept connection (the floor: a write and a read).
fn upstream_call() {
    use std::io::{Read, Write};
    use tollgate::config::{Upstream, UpstreamKind};
    let addr = tiny_upstream();
    let upstream = Upstream {
        name: "tiny".into(),
        kind: UpstreamKind::Speaks(tollgate::protocol::Protocol::Chat),
        base_url: format!("http://{addr}/v1"),
        api_key: Some("sk-bench".into()),
        missing_key: None,
        connect_timeout: Duration::from_secs(5),
        first_byte_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        mock_delay: Duration::ZERO,
        total_timeout: Duration::from_secs(60),
        breaker_failures: 5,
        breaker_cooldown: Duration::from_secs(30),
        max_completion_tokens: false,
    };
    let url = format!("http://{addr}/v1/chat/completions");
    let body =
        br#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hello there"}]}"#;
    let agent = tollgate::upstream::http::agent(16);
    let n = 20_000u32;
    let measure = |label: &str, f: &mut dyn FnMut()| {
        for _ in 0..1000 {
            f();
        }
        let (cpu, wall) = (thread_cpu(), Instant::now());
        for _ in 0..n {
            f();
        }
        let (cpu, wall) = (thread_cpu() - cpu, wall.elapsed());
        println!(
            "upstream call, {label}: {:.2} µs CPU of the calling thread per call ({:.1} µs wall)",
            cpu.as_secs_f64() * 1e6 / n as f64,
            wall.as_secs_f64() * 1e6 / n as f64
        );
    };
    measure(
        "upstream::http::send_to (as the gateway calls)",
        &mut || {
            let reply =
                tollgate::upstream::http::send_to(&agent, &upstream, &url, body, false, None)
                    .unwrap();
            black_box(reply.read_all("tiny").unwrap());
        },
    );
    measure("bare ureq post on the same agent", &mut || {
        let mut r = agent
            .post(&url)
            .header("content-type", "application/json")
            .send(&body[..])
            .unwrap();
        black_box(r.body_mut().read_to_vec().unwrap());
    });
    let mut raw = std::net::TcpStream::connect(addr).unwrap();
    raw.set_nodelay(true).unwrap();
    let mut head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nauthorization: Bearer sk-bench\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    head.extend_from_slice(body);
    let mut buf = vec![0u8; 16 * 1024];
    measure("hand-written request on one kept connection", &mut || {
        raw.write_all(&head).unwrap();
        let n = raw.read(&mut buf).unwrap();
        black_box(n);
    });
}
