//! The benchmarks' answers (the `fake-upstream` program, `bench/fake_upstream.rs`): a fast fake OpenAI Chat
//! Completions upstream. A request costs one read and one write. What to
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

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Recorded, Reply};

static REQUESTS: AtomicU64 = AtomicU64::new(0);
static STREAMS: AtomicU64 = AtomicU64::new(0);

fn json(status: u16, extra: &[(&str, &str)], body: String) -> Reply {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Reply::Json {
        status,
        headers,
        body: body.into_bytes(),
    }
}

/// The answer to one request: `GET /stats` and the model list, an injected error, a streamed answer
/// (written as it goes, `stream_answer`) or a plain one.
pub fn reply(rec: &Recorded) -> Reply {
    if rec.method == "GET" {
        let body = if rec.path.ends_with("/stats") {
            format!(
                "{{\"requests\":{},\"streams\":{}}}",
                REQUESTS.load(Ordering::Relaxed),
                STREAMS.load(Ordering::Relaxed)
            )
        } else {
            "{\"object\":\"list\",\"data\":[{\"id\":\"bench-model\",\"object\":\"model\",\"created\":0,\"owned_by\":\"bench\"}]}".to_string()
        };
        return json(200, &[], body);
    }
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    let p = params(&rec.body);
    let streamed = find(&rec.body, b"\"stream\":true").is_some();
    if p.delay_ms > 0 {
        std::thread::sleep(Duration::from_millis(p.delay_ms));
    }
    if let Some(status) = p.status {
        let body = format!(
            "{{\"error\":{{\"message\":\"injected failure (HTTP {status})\",\"type\":\"{}\",\"param\":null,\"code\":\"bench_injected\"}}}}",
            if status == 429 { "rate_limit_error" } else if status >= 500 { "server_error" } else { "invalid_request_error" }
        );
        let extra: &[(&str, &str)] = if status == 429 || status == 503 {
            &[("retry-after", "1")]
        } else {
            &[]
        };
        return json(status, extra, body);
    }
    if rec.path.ends_with("/embeddings") {
        return json(200, &[], embeddings_answer(p.input, p.dims.unwrap_or(1536)));
    }
    if streamed {
        STREAMS.fetch_add(1, Ordering::Relaxed);
        return Reply::Write(Box::new(move |stream: &mut TcpStream| {
            stream_answer(stream, &mut Vec::with_capacity(16 * 1024), &p)
        }));
    }
    let body = format!(
        "{{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"Hello from the fake upstream.\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}}}}}",
        p.input,
        p.output,
        p.input + p.output
    );
    json(200, &[], body)
}

/// An OpenAI embeddings answer of one vector of `dims` floats (text-embedding-3-small's are 1,536); `input`
/// prompt tokens.
fn embeddings_answer(input: u64, dims: u64) -> String {
    // The usual size's vector is written once: the fake upstream's own CPU stays small beside tollgate's.
    static USUAL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let vector = if dims == 1536 {
        USUAL.get_or_init(|| vector_of(1536)).as_str()
    } else {
        &vector_of(dims)
    };
    format!(
        "{{\"object\":\"list\",\"data\":[{{\"object\":\"embedding\",\"index\":0,\"embedding\":[{vector}]}}],\"model\":\"bench-model\",\"usage\":{{\"prompt_tokens\":{input},\"total_tokens\":{input}}}}}"
    )
}

/// `dims` floats of the shape real vectors have (small, signed, nine digits), comma-separated.
fn vector_of(dims: u64) -> String {
    let dims = u32::try_from(dims).unwrap_or(1536);
    let mut vector = String::with_capacity(dims as usize * 12);
    for i in 0..dims {
        if i > 0 {
            vector.push(',');
        }
        // Values of the shape real vectors have (small, signed, nine digits).
        let x = (f64::from(i) * 0.618_033_988_7).fract() - 0.5;
        vector.push_str(&format!("{:.9}", x / 16.0));
    }
    vector
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
    /// The size of an embeddings answer's vector (1,536 unless given).
    dims: Option<u64>,
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
            "dims" => p.dims = Some(n),
            _ => {}
        }
    }
    p
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
