//! A fast fake OpenAI Chat Completions upstream for the benchmarks and the soak.
//!
//! `cargo run --release --example fake-upstream -- [--listen 127.0.0.1:0]`
//! Prints `fake-upstream listening on http://ADDR` on stdout once it accepts connections.
//!
//! One thread per connection, keep-alive, `TCP_NODELAY`; a request costs one read and one write. What to
//! answer is read from the request body, since tollgate does not forward client headers: the text
//! `bench:` followed by `key=value` pairs separated by commas (anywhere in the body, e.g. in the user
//! message) sets
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `events` | content events in a streamed answer | 3 |
//! | `gap_us` | pause before each content event after the first | 0 |
//! | `in` | `prompt_tokens` reported in usage | 10 |
//! | `out` | `completion_tokens` of a non-streamed answer (streams report `events`) | 5 |
//! | `status` | answer this HTTP status with an OpenAI error body instead (429 and 503 get `retry-after: 1`) | |
//! | `delay_ms` | pause before the response head | 0 |
//! | `break` | streams: after this many content events, drop the connection mid-body | |
//! | `stall_ms` | streams: after the first content event, go silent this long before the rest | 0 |
//!
//! A request is streamed when its body contains `"stream":true`. Each streamed content event carries the
//! wall-clock time it was written (`ts=<unix ns>`) in its text, so a client can compute per-event delays.
//! A streamed answer ends with a `finish_reason` chunk, a usage chunk (`choices: []`) and `data: [DONE]`,
//! as OpenAI sends when `stream_options.include_usage` is set (tollgate always sets it).
//!
//! `GET /stats` answers `{"requests": N, "streams": N}`: the generation requests received so far.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static REQUESTS: AtomicU64 = AtomicU64::new(0);
static STREAMS: AtomicU64 = AtomicU64::new(0);

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().expect("--listen ADDR"),
            "-h" | "--help" => {
                println!("usage: fake-upstream [--listen ADDR]");
                return;
            }
            other => {
                eprintln!("fake-upstream: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let listener = TcpListener::bind(&listen).expect("bind");
    println!(
        "fake-upstream listening on http://{}",
        listener.local_addr().unwrap()
    );
    let _ = io::stdout().flush();
    for conn in listener.incoming() {
        let Ok(stream) = conn else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let _ = std::thread::Builder::new()
            .name("conn".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let _ = serve(stream);
            });
    }
}

#[derive(Default, Clone, Copy)]
struct Params {
    events: u64,
    gap_us: u64,
    input: u64,
    output: u64,
    status: Option<u16>,
    delay_ms: u64,
    break_after: Option<u64>,
    stall_ms: u64,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn params(body: &[u8]) -> Params {
    let mut p = Params {
        events: 3,
        input: 10,
        output: 5,
        ..Params::default()
    };
    let Some(at) = find(body, b"bench:") else {
        return p;
    };
    let rest = &body[at + 6..];
    let end = rest
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'=' || b == b','))
        .unwrap_or(rest.len());
    let text = std::str::from_utf8(&rest[..end]).unwrap_or("");
    for pair in text.split(',') {
        let mut kv = pair.splitn(2, '=');
        let (k, v) = (kv.next().unwrap_or(""), kv.next().unwrap_or(""));
        let n: u64 = v.parse().unwrap_or(0);
        match k {
            "events" => p.events = n,
            "gap_us" => p.gap_us = n,
            "in" => p.input = n,
            "out" => p.output = n,
            "status" => p.status = Some(n as u16),
            "delay_ms" => p.delay_ms = n,
            "break" => p.break_after = Some(n),
            "stall_ms" => p.stall_ms = n,
            _ => {}
        }
    }
    p
}

fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut scratch = vec![0u8; 64 * 1024];
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        // Read one request head.
        let (head_len, method_get, path_stats, content_length, close) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 48];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let mut len = 0usize;
                    let mut close = req.version == Some(0);
                    for h in req.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            close = h.value.eq_ignore_ascii_case(b"close");
                        }
                    }
                    let path = req.path.unwrap_or("");
                    break (
                        n,
                        req.method == Some("GET"),
                        path.ends_with("/stats"),
                        len,
                        close,
                    );
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => {
                    let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return Ok(());
                }
            }
            let n = stream.read(&mut scratch)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&scratch[..n]);
        };
        while buf.len() < head_len + content_length {
            let n = stream.read(&mut scratch)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&scratch[..n]);
        }
        let body_end = head_len + content_length;
        if method_get {
            let body = if path_stats {
                format!(
                    "{{\"requests\":{},\"streams\":{}}}",
                    REQUESTS.load(Ordering::Relaxed),
                    STREAMS.load(Ordering::Relaxed)
                )
            } else {
                "{\"object\":\"list\",\"data\":[{\"id\":\"bench-model\",\"object\":\"model\",\"created\":0,\"owned_by\":\"bench\"}]}".to_string()
            };
            out.clear();
            write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                body.len(),
                body
            )?;
            stream.write_all(&out)?;
            buf.drain(..body_end);
            if close {
                return Ok(());
            }
            continue;
        }
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        let body = &buf[head_len..body_end];
        let p = params(body);
        let streamed = find(body, b"\"stream\":true").is_some();
        buf.drain(..body_end);
        if p.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(p.delay_ms));
        }
        if let Some(status) = p.status {
            let body = format!(
                "{{\"error\":{{\"message\":\"injected failure (HTTP {status})\",\"type\":\"{}\",\"param\":null,\"code\":\"bench_injected\"}}}}",
                if status == 429 { "rate_limit_error" } else if status >= 500 { "server_error" } else { "invalid_request_error" }
            );
            let extra = if status == 429 || status == 503 {
                "retry-after: 1\r\n"
            } else {
                ""
            };
            out.clear();
            write!(
                out,
                "HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
                body.len()
            )?;
            stream.write_all(&out)?;
        } else if streamed {
            STREAMS.fetch_add(1, Ordering::Relaxed);
            if !stream_answer(&mut stream, &mut out, &p)? {
                let _ = stream.shutdown(Shutdown::Both);
                return Ok(());
            }
        } else {
            let body = format!(
                "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"Hello from the fake upstream.\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}}}}}",
                p.input,
                p.output,
                p.input + p.output
            );
            out.clear();
            write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )?;
            stream.write_all(&out)?;
        }
        if close {
            return Ok(());
        }
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn push_chunk(out: &mut Vec<u8>, data: &str) {
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Writes a streamed answer; returns false when the connection must be dropped (`break`).
fn stream_answer(stream: &mut TcpStream, out: &mut Vec<u8>, p: &Params) -> io::Result<bool> {
    out.clear();
    out.extend_from_slice(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    for i in 0..p.events {
        if p.break_after == Some(i) {
            if !out.is_empty() {
                stream.write_all(out)?;
            }
            return Ok(false);
        }
        if i > 0 {
            if i == 1 && p.stall_ms > 0 {
                std::thread::sleep(Duration::from_millis(p.stall_ms));
            }
            if p.gap_us > 0 {
                std::thread::sleep(Duration::from_micros(p.gap_us));
            }
        }
        let role = if i == 0 {
            "\"role\":\"assistant\","
        } else {
            ""
        };
        // The timestamp is taken just before the write.
        let data = format!(
            "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"delta\":{{{role}\"content\":\"ts={} \"}},\"finish_reason\":null}}]}}\n\n",
            unix_nanos()
        );
        push_chunk(out, &data);
        stream.write_all(out)?;
        out.clear();
    }
    if p.break_after.is_some_and(|b| b >= p.events) {
        return Ok(false);
    }
    let fin = "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    push_chunk(out, fin);
    let usage = format!(
        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}}}}}\n\n",
        p.input,
        p.events,
        p.input + p.events
    );
    push_chunk(out, &usage);
    push_chunk(out, "data: [DONE]\n\n");
    out.extend_from_slice(b"0\r\n\r\n");
    stream.write_all(out)?;
    out.clear();
    Ok(true)
}
