//! Soak test: mixed traffic with injected faults against a fake upstream, for a chosen time; then checks
//! that the usage ledger matches what the clients saw. Not part of the test command.
//!
//! `bench/soak.sh [SECONDS]` (builds, then runs this), or
//! `target/release/soak [--duration 300] [--clients 32] [--seed 1] [--keep] [--mix Kind=weight,…]`
//!
//! Every request carries its own `X-Client-Request-ID`, so each usage record can be matched to the request
//! that caused it. The mix (weights out of 100):
//!
//! | kind | what happens | the client expects | the ledger must hold |
//! |---|---|---|---|
//! | chat / messages, non-streamed (18 / 10) | normal answer | 200, usage as the upstream sent it | 1 record, 200, the same tokens |
//! | chat / messages, streamed (14 / 10) | 3–30 events, 0–20 ms apart | 200, every event, the end marker | 1 record, 200, the same tokens |
//! | upstream error (10) | the upstream answers 400, 429, 500 or 503 | that status | 1 record with that status and an error |
//! | slow upstream (5) | 200–800 ms before the answer | 200 | 1 record, 200 |
//! | upstream too slow (2) | 3 s before the head; first_byte_timeout_secs = 2 | 504 | 1 record, 504 |
//! | broken stream (8) | the upstream drops the connection after 1–5 of 20 events | 200, then an in-stream error | 1 record, 200, error set |
//! | stalled stream (2) | the upstream goes silent 3 s; idle_timeout_secs = 2 | 200, then an in-stream error | 1 record, 200, error set |
//! | client leaves mid-stream (8) | the client closes after 3 of 50 events (20 ms apart) | – | 1 record, `client_closed` |
//! | client leaves early (4) | the client closes 200 ms into a 1.5 s wait | – | 1 record, `client_closed` |
//! | bad key (3) | refused before any upstream call | 401 | no record (anyone could fill the ledger) |
//! | bad JSON (2), a known key | refused before any upstream call | 400 | 1 refusal record: 400, no upstream, cost 0, a `reason` |
//!
//! **Disk-full phase**: the data directory is a tmpfs (mounted by the soak; it needs root, and says so and
//! skips the phase otherwise). From 40 % to 60 % of the run the file system is filled to the last byte, so
//! the ledger cannot write; requests keep being answered, their records wait in memory (`/readyz` says the
//! ledger is failing, `tollgate_ledger_backlog_records` grows) and are written when the filler is removed.
//! The request-by-request check at the end then proves that not one record was lost. (`--no-disk-full`
//! turns the phase off.)
//!
//! **Rotation**: the ledger's clock (`TOLLGATE_TEST_CLOCK_FILE`) passes a UTC midnight every 3 s, so the
//! ledger rotates under load every 3 s, and files two of those "days" old are compressed while queries read
//! them. The check at the end reads every file, and also counts the records of a client that are out of the
//! order it sent them in (none may be).
//!
//! Chat and Messages (translated to the Chat upstream) are mixed in every kind that streams or fails. The
//! breaker is set out of reach (`breaker_failures`), so injected failures never make tollgate skip the
//! upstream (the breaker has its own tests). Every 25th answered request is also looked up at once through
//! `GET /admin/usage?client_request_id=…` (its record must already be there). At the end tollgate is
//! stopped with SIGTERM (which flushes the ledger) and `usage.jsonl` is compared, request by request.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use procs::{Bins, Gateway, Instance, Upstream};
use serde_json::Value;
use tollgate_harness::client::{self, Conn};
use tollgate_harness::procs;

const ADMIN_TOKEN: &str = "soak-admin-token-0123456789abcdef";

/// How often the ledger's clock passes a UTC midnight (so it rotates) during the run.
const CLOCK_STEP: Duration = Duration::from_secs(3);

/// Moves the ledger's test clock `shift` seconds ahead (written whole: tollgate may be reading it).
fn set_clock(clock: &std::path::Path, shift: u64) {
    let tmp = clock.with_extension("tmp");
    std::fs::write(&tmp, shift.to_string()).unwrap();
    std::fs::rename(&tmp, clock).unwrap();
}

/// Every line of the ledger in `data`, in the order written: the rotated files by their seq (compressed
/// ones decompressed), then `usage.jsonl`. Also how many files, and how many of them compressed.
fn ledger_text(data: &std::path::Path) -> (String, usize, usize) {
    use std::io::Read;
    let mut rotated: Vec<(u64, std::path::PathBuf, bool)> = Vec::new();
    for e in std::fs::read_dir(data).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let gz = name.ends_with(".jsonl.gz");
        let seq = name
            .strip_prefix("usage-")
            .and_then(|r| r.split('-').next())
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            rotated.push((seq, e.path(), gz));
        }
    }
    rotated.sort();
    let mut text = String::new();
    for (_, path, gz) in &rotated {
        let bytes = std::fs::read(path).unwrap_or_default();
        if *gz {
            let _ = flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_string(&mut text);
        } else {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text.push_str(&std::fs::read_to_string(data.join("usage.jsonl")).unwrap_or_default());
    let compressed = rotated.iter().filter(|r| r.2).count();
    (text, rotated.len() + 1, compressed)
}

/// Records of one client (`soak-SEED-CLIENT-N`) out of the order it sent them in. A request the client left
/// is not counted: the client moves on while tollgate finishes it, so its record may follow the next one's.
fn reordered(order: &[String], records: &HashMap<String, Vec<Value>>) -> u64 {
    let mut last: HashMap<&str, u64> = HashMap::new();
    let mut out = 0;
    for id in order {
        let left = records
            .get(id)
            .is_some_and(|r| r.iter().any(|v| v["status"] == "client_closed"));
        let mut parts = id.rsplitn(2, '-');
        let (Some(n), Some(client)) = (
            parts.next().and_then(|n| n.parse::<u64>().ok()),
            parts.next(),
        ) else {
            continue;
        };
        if left {
            continue;
        }
        if last.get(client).is_some_and(|prev| *prev > n) {
            out += 1;
        }
        last.insert(client, n);
    }
    out
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ChatOk,
    MessagesOk,
    ChatStream,
    MessagesStream,
    UpstreamError,
    SlowOk,
    SlowTimeout,
    BrokenStream,
    StalledStream,
    ClientLeavesMidStream,
    ClientLeavesEarly,
    BadKey,
    BadJson,
}

const MIX: [(Kind, u64); 13] = [
    (Kind::ChatOk, 18),
    (Kind::MessagesOk, 10),
    (Kind::ChatStream, 14),
    (Kind::MessagesStream, 10),
    (Kind::UpstreamError, 10),
    (Kind::SlowOk, 5),
    (Kind::SlowTimeout, 2),
    (Kind::BrokenStream, 8),
    (Kind::StalledStream, 2),
    (Kind::ClientLeavesMidStream, 8),
    (Kind::ClientLeavesEarly, 4),
    (Kind::BadKey, 3),
    (Kind::BadJson, 2),
];

fn pick(rng: &mut Rng, mix: &[(Kind, u64)]) -> Kind {
    let total: u64 = mix.iter().map(|m| m.1).sum();
    let mut r = rng.next() % total;
    for &(k, w) in mix {
        if r < w {
            return k;
        }
        r -= w;
    }
    Kind::ChatOk
}

/// What the ledger must say about one request.
#[derive(Clone, Debug)]
struct LedgerExpect {
    /// `200`, `504`, … or `client_closed`.
    status: String,
    error: bool,
    /// (input, output) tokens, when they are known exactly.
    tokens: Option<(u64, u64)>,
    stream: bool,
    protocol: &'static str,
    /// A request of a known key that tollgate refused itself: its record has no upstream, cost 0 and a
    /// `reason` (the operator's view of refusals).
    refusal: bool,
}

/// One request as sent, and what should come of it.
struct Plan {
    messages: bool,
    stream: bool,
    marker: String,
    /// The status the client must see (None: the client leaves before the answer ends).
    status: Option<u16>,
    /// Streams: content events to expect (when the stream must complete).
    events: usize,
    /// The stream must end with an in-stream error event.
    in_stream_error: bool,
    /// Non-streamed successes: the usage the answer must report.
    usage: Option<(u64, u64)>,
    /// The client leaves: after this many content events (streams) or this long (non-streamed).
    leave_after_events: Option<usize>,
    leave_after: Option<Duration>,
    bad_key: bool,
    bad_json: bool,
    ledger: Option<LedgerExpect>,
}

fn plan(kind: Kind, rng: &mut Rng) -> Plan {
    let input = rng.range(5, 400);
    let output = rng.range(1, 200);
    let mut p = Plan {
        messages: rng.chance(50),
        stream: false,
        marker: format!("in={input},out={output}"),
        status: Some(200),
        events: 0,
        in_stream_error: false,
        usage: Some((input, output)),
        leave_after_events: None,
        leave_after: None,
        bad_key: false,
        bad_json: false,
        ledger: None,
    };
    let ok_ledger = |stream: bool, tokens: Option<(u64, u64)>, messages: bool| LedgerExpect {
        status: "200".into(),
        error: false,
        tokens,
        stream,
        protocol: if messages { "messages" } else { "chat" },
        refusal: false,
    };
    match kind {
        Kind::ChatOk | Kind::MessagesOk => {
            p.messages = kind == Kind::MessagesOk;
            p.ledger = Some(ok_ledger(false, Some((input, output)), p.messages));
        }
        Kind::ChatStream | Kind::MessagesStream => {
            p.messages = kind == Kind::MessagesStream;
            p.stream = true;
            let events = rng.range(3, 30);
            let gap = rng.range(0, 20_000);
            p.marker = format!("in={input},events={events},gap_us={gap}");
            p.events = events as usize;
            p.usage = None;
            p.ledger = Some(ok_ledger(true, Some((input, events)), p.messages));
        }
        Kind::UpstreamError => {
            let status = [400u16, 429, 500, 503][rng.range(0, 3) as usize];
            p.stream = rng.chance(50);
            p.marker = format!("in={input},status={status}");
            p.status = Some(status);
            p.usage = None;
            p.ledger = Some(LedgerExpect {
                status: status.to_string(),
                error: true,
                tokens: None,
                stream: p.stream,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: false,
            });
        }
        Kind::SlowOk => {
            let delay = rng.range(200, 800);
            p.marker = format!("in={input},out={output},delay_ms={delay}");
            p.ledger = Some(ok_ledger(false, Some((input, output)), p.messages));
        }
        Kind::SlowTimeout => {
            p.marker = format!("in={input},out={output},delay_ms=3000");
            p.status = Some(504);
            p.usage = None;
            p.ledger = Some(LedgerExpect {
                status: "504".into(),
                error: true,
                tokens: None,
                stream: false,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: false,
            });
        }
        Kind::BrokenStream | Kind::StalledStream => {
            p.stream = true;
            p.marker = if kind == Kind::BrokenStream {
                format!("in={input},events=20,gap_us=2000,break={}", rng.range(1, 5))
            } else {
                format!("in={input},events=5,gap_us=1000,stall_ms=3000")
            };
            p.in_stream_error = true;
            p.usage = None;
            p.ledger = Some(LedgerExpect {
                status: "200".into(),
                error: true,
                tokens: None,
                stream: true,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: false,
            });
        }
        Kind::ClientLeavesMidStream => {
            p.stream = true;
            p.marker = format!("in={input},events=50,gap_us=20000");
            p.status = None;
            p.usage = None;
            p.leave_after_events = Some(3);
            p.ledger = Some(LedgerExpect {
                status: "client_closed".into(),
                error: false,
                tokens: None,
                stream: true,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: false,
            });
        }
        Kind::ClientLeavesEarly => {
            p.marker = format!("in={input},out={output},delay_ms=1500");
            p.status = None;
            p.usage = None;
            p.leave_after = Some(Duration::from_millis(200));
            p.ledger = Some(LedgerExpect {
                status: "client_closed".into(),
                error: false,
                tokens: None,
                stream: false,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: false,
            });
        }
        Kind::BadKey => {
            p.bad_key = true;
            p.status = Some(401);
            p.usage = None;
        }
        Kind::BadJson => {
            // A known key: refused before any upstream call, with a refusal record.
            p.bad_json = true;
            p.status = Some(400);
            p.usage = None;
            p.ledger = Some(LedgerExpect {
                status: "400".into(),
                error: true,
                tokens: None,
                stream: false,
                protocol: if p.messages { "messages" } else { "chat" },
                refusal: true,
            });
        }
    }
    p
}

fn build(p: &Plan, addr: SocketAddr, key: &str, id: &str) -> Vec<u8> {
    let key = if p.bad_key {
        "tg_0000000000000000000000000000000000000000"
    } else {
        key
    };
    let stream = if p.stream { "\"stream\":true," } else { "" };
    let mut body = format!(
        r#"{{"model":"soak",{stream}"max_tokens":256,"messages":[{{"role":"user","content":"Soak request {id}. bench:{}"}}]}}"#,
        p.marker
    );
    if p.bad_json {
        body.truncate(body.len() / 2);
    }
    let auth = format!("Bearer {key}");
    if p.messages {
        client::post(
            addr,
            "/v1/messages",
            &[
                ("authorization", &auth),
                ("anthropic-version", "2023-06-01"),
                ("x-client-request-id", id),
            ],
            &body,
        )
    } else {
        client::post(
            addr,
            "/v1/chat/completions",
            &[("authorization", &auth), ("x-client-request-id", id)],
            &body,
        )
    }
}

/// What the client saw, as a class for the report, and whether it matched the plan.
fn run_one(
    p: &Plan,
    conn: &mut Option<Conn>,
    addr: SocketAddr,
    req: &[u8],
) -> (String, Option<String>) {
    if conn.is_none() {
        match Conn::connect(addr, Duration::from_secs(30)) {
            Ok(c) => *conn = Some(c),
            Err(e) => {
                return (
                    format!("connect failed: {:?}", e.kind()),
                    Some("connect failed".into()),
                )
            }
        }
    }
    let c = conn.as_mut().unwrap();
    if let Some(after) = p.leave_after {
        // Send, wait a little, leave.
        if let Err(e) = c.send(req) {
            *conn = None;
            return (
                format!("transport: {:?}", e.kind()),
                Some("send failed".into()),
            );
        }
        std::thread::sleep(after);
        *conn = None;
        return ("client left early (by design)".into(), None);
    }
    let sent = c.send(req);
    if let Err(e) = sent {
        *conn = None;
        return (
            format!("transport: {:?}", e.kind()),
            Some("send failed".into()),
        );
    }
    let head = match c.read_head() {
        Ok(h) => h,
        Err(e) => {
            *conn = None;
            return (
                format!("transport: {:?}", e.kind()),
                Some(format!("no response head: {e}")),
            );
        }
    };
    let status = head.status;
    let class_http = |s: u16| {
        if s == 200 {
            "HTTP 200".to_string()
        } else {
            format!("HTTP {s}")
        }
    };
    if status != 200 || !head.event_stream {
        let body = match c.read_body(head.framing) {
            Ok(b) => b,
            Err(e) => {
                *conn = None;
                return (
                    format!("transport: {:?}", e.kind()),
                    Some(format!("body unreadable: {e}")),
                );
            }
        };
        if head.close {
            *conn = None;
        }
        let mut class = class_http(status);
        if status != 200 {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let kind = v
                .pointer("/error/type")
                .and_then(Value::as_str)
                .unwrap_or("?");
            class = format!("HTTP {status} ({kind})");
        }
        let wrong = match p.status {
            None => Some(format!("expected the client to leave, got HTTP {status}")),
            Some(s) if s != status => Some(format!(
                "expected HTTP {s}, got HTTP {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            )),
            Some(_) if p.stream && status == 200 => {
                Some("expected a stream, got a plain body".into())
            }
            Some(_) => match p.usage {
                Some((i, o)) => {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let got = if p.messages {
                        (
                            v.pointer("/usage/input_tokens"),
                            v.pointer("/usage/output_tokens"),
                        )
                    } else {
                        (
                            v.pointer("/usage/prompt_tokens"),
                            v.pointer("/usage/completion_tokens"),
                        )
                    };
                    let got = (got.0.and_then(Value::as_u64), got.1.and_then(Value::as_u64));
                    (got != (Some(i), Some(o)))
                        .then(|| format!("usage {got:?}, expected ({i}, {o})"))
                }
                None => None,
            },
        };
        return (class, wrong);
    }
    // A stream.
    let mut content = 0usize;
    let mut end = false;
    let mut error = false;
    let leave = p.leave_after_events;
    let read = c.read_events(head.framing, |e| {
        if e.sent_unix_ns().is_some() {
            content += 1;
        }
        if e.is_error() {
            error = true;
        }
        if e.is_end() {
            end = true;
        }
        leave.is_none_or(|n| content < n)
    });
    if leave.is_some() {
        *conn = None;
        return match read {
            Ok(false) => ("client left mid-stream (by design)".into(), None),
            Ok(true) => (
                "stream ended before the client left".into(),
                Some("stream ended before the client could leave".into()),
            ),
            Err(e) => (
                format!("transport: {:?}", e.kind()),
                Some(format!("stream read failed: {e}")),
            ),
        };
    }
    if head.close {
        *conn = None;
    }
    match read {
        Err(e) => {
            *conn = None;
            (
                format!("transport: {:?}", e.kind()),
                Some(format!("stream read failed: {e}")),
            )
        }
        Ok(_) => {
            let class = if error {
                "HTTP 200, in-stream error".to_string()
            } else if !end {
                "HTTP 200, stream without end marker".to_string()
            } else {
                "HTTP 200 stream".to_string()
            };
            let wrong = if p.status != Some(200) {
                Some(format!("expected {:?}, got a stream", p.status))
            } else if p.in_stream_error {
                (!error).then(|| "expected an in-stream error".to_string())
            } else if error || !end {
                Some(format!("stream incomplete: end={end} error={error}"))
            } else if content != p.events {
                Some(format!("{content} content events, expected {}", p.events))
            } else {
                None
            };
            (class, wrong)
        }
    }
}

#[derive(Default)]
struct Tally {
    sent: u64,
    by_kind: BTreeMap<String, u64>,
    seen: BTreeMap<String, u64>,
    wrong: BTreeMap<String, u64>,
    wrong_examples: Vec<String>,
    /// client request id → what the ledger must hold (None: no record).
    expected: HashMap<String, Option<LedgerExpect>>,
    kinds: HashMap<String, Kind>,
    admin_checks: u64,
    admin_failures: Vec<String>,
}

#[derive(argh::FromArgs)]
/// The soak: mixed traffic against tollgate for a while, then every usage record checked against what the
/// clients saw (bench/soak.sh runs it).
struct Args {
    /// how long the traffic runs, in seconds (default 60)
    #[argh(option, default = "60")]
    duration: u64,
    /// concurrent clients (default 32)
    #[argh(option, default = "32")]
    clients: usize,
    /// the seed of the traffic's randomness (default 1)
    #[argh(option, default = "1")]
    seed: u64,
    /// keep the run's directory (target/release/soak-run) afterwards
    #[argh(switch)]
    keep: bool,
    /// leave out the phase with a full disk
    #[argh(switch)]
    no_disk_full: bool,
    /// replaces the standard mix: Kind=weight,… (to amplify one kind of traffic)
    #[argh(option)]
    mix: Option<String>,
}

fn main() {
    let args: Args = tollgate_bench::args();
    let duration = Duration::from_secs(args.duration);
    let clients = args.clients;
    let seed = args.seed;
    let keep = args.keep;
    let disk_full = !args.no_disk_full;
    // `--mix Kind=weight,…` replaces the standard mix (to amplify one kind of traffic).
    let mix: Vec<(Kind, u64)> = match args.mix {
        None => MIX.to_vec(),
        Some(spec) => spec
            .split(',')
            .map(|kv| {
                let (k, w) = kv.split_once('=').expect("--mix Kind=weight,…");
                let kind = MIX
                    .iter()
                    .map(|m| m.0)
                    .find(|m| format!("{m:?}") == k)
                    .unwrap_or_else(|| {
                        panic!(
                            "unknown kind {k}; kinds: {:?}",
                            MIX.iter().map(|m| m.0).collect::<Vec<_>>()
                        )
                    });
                (kind, w.parse().expect("weight"))
            })
            .collect(),
    };

    let bins = Bins::locate();
    let root = bins.dir.join("soak-run");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let upstream = Upstream::start(&bins);
    let config = format!(
        r#"listen = "127.0.0.1:0"
data_dir = "data"
log_level = "warn"
admin_token_env = "TOLLGATE_SOAK_ADMIN_TOKEN"
# The disk-full phase keeps every record in memory; no refusals for a full backlog here.
ledger_backlog_records = 10000000
# The ledger's clock moves a day every few seconds (TOLLGATE_TEST_CLOCK_FILE): it rotates at each of
# those midnights, and files two "days" old are compressed, all under load.
ledger_compress_after_days = 2
ledger_checkpoint_records = 2000

[[upstreams]]
name = "fake"
kind = "openai-chat"
base_url = "http://{}/v1"
first_byte_timeout_secs = 2
idle_timeout_secs = 2
breaker_failures = 4000000000

[[models]]
name = "soak"
upstream = "fake"
upstream_model = "soak-model"
input_price = 1.0
output_price = 2.0

[[groups]]
name = "default"
models = ["*"]
"#,
        upstream.addr
    );
    let inst = Instance::new(&root, "tollgate", &config);
    let disk = if disk_full {
        Tmpfs::mount(&inst.dir.join("data"))
    } else {
        None
    };
    let key = inst.add_key(&bins, "soak", "default", None);
    let clock = root.join("clock");
    set_clock(&clock, 0);
    let clock_env = clock.display().to_string();
    let gw = Gateway::start(
        &bins,
        &inst,
        &[
            ("TOLLGATE_SOAK_ADMIN_TOKEN", ADMIN_TOKEN),
            ("TOLLGATE_TEST_CLOCK_FILE", &clock_env),
        ],
    );
    let pid = gw.pid();
    let addr = gw.addr;

    println!("# tollgate soak");
    println!();
    println!(
        "date: {}; machine: {} CPUs; commit {}",
        procs::command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        procs::command_output("git", &["rev-parse", "--short", "HEAD"])
    );
    println!(
        "duration {} s, {clients} clients (closed loop), seed {seed}; tollgate pid {pid} on {addr}, fake upstream on {}",
        duration.as_secs(),
        upstream.addr
    );
    std::thread::sleep(Duration::from_millis(500));
    let rss_start = procs::rss_mib(pid);
    let threads_start = procs::threads(pid);
    let fds_start = procs::open_fds(pid);
    println!("start: RSS {rss_start:.1} MiB, {threads_start} threads, {fds_start} open fds");
    println!();

    let tally = Mutex::new(Tally::default());
    let phase = Mutex::new(Phase::default());
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let started = Instant::now();
    let mut peak_rss = rss_start;
    std::thread::scope(|s| {
        // A UTC midnight every CLOCK_STEP, by the ledger's clock: a rotation under load each time.
        let (stop_clock, clock) = (&stop, &clock);
        s.spawn(move || {
            let mut days = 0;
            let mut since = Instant::now();
            while !stop_clock.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if since.elapsed() >= CLOCK_STEP {
                    days += 1;
                    set_clock(clock, days * 86_400);
                    since = Instant::now();
                }
            }
        });
        for t in 0..clients {
            let (tally, stop, count, key, mix) = (&tally, &stop, &count, &key, &mix[..]);
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, move || {
                    let mut rng =
                        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                            ^ ((t as u64 + 1) * 0x1234_5677));
                    for _ in 0..8 {
                        rng.next();
                    }
                    let mut conn: Option<Conn> = None;
                    let mut admin: Option<Conn> = None;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let kind = pick(&mut rng, mix);
                        let p = plan(kind, &mut rng);
                        let id = format!("soak-{seed}-{t}-{n}");
                        let req = build(&p, addr, key, &id);
                        let (class, wrong) = run_one(&p, &mut conn, addr, &req);
                        let total = count.fetch_add(1, Ordering::Relaxed) + 1;
                        // Every 25th answered request that reached the upstream: its record must be there.
                        let mut admin_failure = None;
                        let checked = total % 25 == 0
                            && p.ledger.is_some()
                            && p.status.is_some()
                            && wrong.is_none();
                        if checked {
                            admin_failure = admin_lookup(&mut admin, addr, &id).err();
                        }
                        let mut tl = tally.lock().unwrap();
                        tl.sent += 1;
                        *tl.by_kind.entry(format!("{kind:?}")).or_default() += 1;
                        *tl.seen.entry(class).or_default() += 1;
                        if let Some(w) = wrong {
                            *tl.wrong.entry(format!("{kind:?}")).or_default() += 1;
                            if tl.wrong_examples.len() < 20 {
                                tl.wrong_examples.push(format!("{id} {kind:?}: {w}"));
                            }
                        }
                        if checked {
                            tl.admin_checks += 1;
                            if let Some(f) = admin_failure {
                                tl.admin_failures.push(format!("{id}: {f}"));
                            }
                        }
                        tl.kinds.insert(id.clone(), kind);
                        tl.expected.insert(id, p.ledger);
                    }
                })
                .expect("spawn client");
        }
        // Progress every 10 s, and the peak RSS; the disk-full phase from 40 % to 60 % of the run.
        let mut next_report = started + Duration::from_secs(10);
        let (fill_at, free_at) = (duration * 2 / 5, duration * 3 / 5);
        let mut filler: Option<std::path::PathBuf> = None;
        while started.elapsed() < duration {
            std::thread::sleep(Duration::from_millis(500));
            peak_rss = peak_rss.max(procs::rss_mib(pid));
            if let Some(d) = &disk {
                let t = started.elapsed();
                if t >= fill_at && filler.is_none() && !phase.lock().unwrap().done {
                    filler = Some(d.fill());
                    phase.lock().unwrap().filled_at = Some(t);
                    println!(
                        "  {:>4.0} s: data directory filled to the last byte",
                        t.as_secs_f64()
                    );
                }
                if t >= free_at || (filler.is_some() && t + Duration::from_secs(1) >= duration) {
                    if let Some(f) = filler.take() {
                        let (backlog, errors, ready) = ledger_state(&mut None, addr);
                        let _ = std::fs::remove_file(&f);
                        let mut ph = phase.lock().unwrap();
                        ph.done = true;
                        ph.peak_backlog = backlog;
                        ph.write_errors = errors;
                        ph.readyz_while_full = ready;
                        println!(
                            "  {:>4.0} s: filler removed (backlog {backlog} records, {errors} failed writes, readyz {ready})",
                            t.as_secs_f64()
                        );
                    }
                }
            }
            if Instant::now() >= next_report {
                next_report += Duration::from_secs(10);
                println!(
                    "  {:>4.0} s: {:>7} requests, RSS {:.1} MiB, {} threads, {} fds",
                    started.elapsed().as_secs_f64(),
                    count.load(Ordering::Relaxed),
                    procs::rss_mib(pid),
                    procs::threads(pid),
                    procs::open_fds(pid)
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = started.elapsed();
    // Let the requests whose clients left settle (the watchdog notices within a tick).
    std::thread::sleep(Duration::from_secs(3));
    let rss_end = procs::rss_mib(pid);
    let threads_end = procs::threads(pid);
    let fds_end = procs::open_fds(pid);
    let hwm = procs::hwm_mib(pid);
    let upstream_requests = upstream_stats(upstream.addr);
    if disk.is_some() {
        // The backlog must drain by itself once the disk has room again.
        let drained_by = Instant::now() + Duration::from_secs(30);
        while ledger_state(&mut None, addr).0 > 0 && Instant::now() < drained_by {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let backlog_at_end = ledger_state(&mut None, addr).0;
    let exit = gw.stop();

    let tally = tally.into_inner().unwrap();
    println!();
    println!(
        "requests: {} in {:.0} s ({:.0}/s); tollgate exit code after SIGTERM: {:?}",
        tally.sent,
        elapsed.as_secs_f64(),
        tally.sent as f64 / elapsed.as_secs_f64(),
        exit
    );
    println!();
    println!("by kind (what was sent):");
    for (k, v) in &tally.by_kind {
        println!("  {k:<24} {v:>7}");
    }
    println!();
    println!("by outcome (what the clients saw; errors by kind):");
    for (k, v) in &tally.seen {
        println!("  {k:<44} {v:>7}");
    }
    println!();
    let wrong_total: u64 = tally.wrong.values().sum();
    println!("outcomes that differ from the plan: {wrong_total}");
    for (k, v) in &tally.wrong {
        println!("  {k:<24} {v:>7}");
    }
    for e in &tally.wrong_examples {
        println!("    e.g. {e}");
    }
    println!();
    println!(
        "tollgate: RSS {rss_start:.1} MiB at start, {rss_end:.1} MiB at the end (peak {:.1} MiB, VmHWM {hwm:.1} MiB); threads {threads_start} → {threads_end}; open fds {fds_start} → {fds_end}",
        peak_rss
    );
    println!();

    // The ledger, request by request, across every file it rotated into (compressed ones too).
    let (text, files, compressed) = ledger_text(&inst.dir.join("data"));
    // Each client's records, in the order they are in the files.
    let mut order: Vec<String> = Vec::new();
    let mut records: HashMap<String, Vec<Value>> = HashMap::new();
    let mut unreadable = 0u64;
    let mut without_id = 0u64;
    let mut lines = 0u64;
    // Records of requests that reached the upstream (refusal records have no upstream).
    let mut upstream_lines = 0u64;
    for line in text.lines() {
        lines += 1;
        match serde_json::from_str::<Value>(line) {
            Ok(v) => match v.get("client_request_id").and_then(Value::as_str) {
                Some(id)
                    if !v
                        .get("upstream")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty() =>
                {
                    upstream_lines += 1;
                    order.push(id.to_string());
                    records.entry(id.to_string()).or_default().push(v)
                }
                Some(id) => {
                    order.push(id.to_string());
                    records.entry(id.to_string()).or_default().push(v)
                }
                None => without_id += 1,
            },
            Err(_) => unreadable += 1,
        }
    }
    let (mut matched, mut missing, mut duplicated, mut unexpected, mut mismatched) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut mismatch_kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut examples: Vec<String> = Vec::new();
    for (id, exp) in &tally.expected {
        let got = records.get(id).map(Vec::as_slice).unwrap_or(&[]);
        let kind = tally
            .kinds
            .get(id)
            .map(|k| format!("{k:?}"))
            .unwrap_or_default();
        match (exp, got.len()) {
            (None, 0) => matched += 1,
            (None, _) => {
                unexpected += 1;
                if examples.len() < 20 {
                    examples.push(format!(
                        "{id} ({kind}): a record for a request that never reached the upstream"
                    ));
                }
            }
            (Some(_), 0) => {
                missing += 1;
                if examples.len() < 20 {
                    examples.push(format!("{id} ({kind}): no record"));
                }
            }
            (Some(e), n) => {
                if n > 1 {
                    duplicated += 1;
                }
                let r = &got[0];
                let status = match r.get("status") {
                    Some(Value::Number(n)) => n.to_string(),
                    Some(Value::String(s)) => s.clone(),
                    _ => "?".into(),
                };
                let has_error = r.get("error").is_some_and(|e| !e.is_null());
                // (what differs, for the tally; the details, for the examples)
                let mut diffs: Vec<(String, String)> = Vec::new();
                if status != e.status {
                    diffs.push((
                        format!("status {status} instead of {}", e.status),
                        format!("status {status} (expected {})", e.status),
                    ));
                }
                if e.status != "client_closed" && has_error != e.error {
                    let what = if has_error { "error set" } else { "no error" };
                    let text = r.get("error").and_then(Value::as_str).unwrap_or("");
                    diffs.push((what.into(), format!("{what}: {text:?}")));
                }
                if r.get("stream").and_then(Value::as_bool) != Some(e.stream) {
                    diffs.push(("stream flag".into(), "stream flag".into()));
                }
                if r.get("protocol").and_then(Value::as_str) != Some(e.protocol) {
                    diffs.push(("protocol".into(), "protocol".into()));
                }
                let upstream = r.get("upstream").and_then(Value::as_str).unwrap_or("");
                let cost = r.get("cost").and_then(Value::as_f64).unwrap_or(-1.0);
                let reason = r.get("reason").and_then(Value::as_str);
                if e.refusal && (!upstream.is_empty() || cost != 0.0 || reason.is_none()) {
                    diffs.push((
                        "refusal record".into(),
                        format!("refusal record with upstream {upstream:?}, cost {cost}, reason {reason:?}"),
                    ));
                }
                if !e.refusal && upstream.is_empty() {
                    diffs.push(("no upstream".into(), "no upstream in the record".into()));
                }
                if let Some((i, o)) = e.tokens {
                    let gi = r.get("input_tokens").and_then(Value::as_u64);
                    let go = r.get("output_tokens").and_then(Value::as_u64);
                    if (gi, go) != (Some(i), Some(o)) {
                        diffs.push((
                            "tokens".into(),
                            format!("tokens ({gi:?}, {go:?}), expected ({i}, {o})"),
                        ));
                    }
                    let cost = r.get("cost").and_then(Value::as_f64).unwrap_or(-1.0);
                    let want = (i as f64 * 1.0 + o as f64 * 2.0) / 1e6;
                    if (cost - want).abs() > 1e-12 {
                        diffs.push(("cost".into(), format!("cost {cost}, expected {want}")));
                    }
                }
                if diffs.is_empty() {
                    matched += 1;
                } else {
                    mismatched += 1;
                    let label: Vec<&str> = diffs.iter().map(|d| d.0.as_str()).collect();
                    *mismatch_kinds
                        .entry(format!("{kind}: {}", label.join(", ")))
                        .or_default() += 1;
                    if examples.len() < 20 {
                        let detail: Vec<&str> = diffs.iter().map(|d| d.1.as_str()).collect();
                        examples.push(format!("{id} ({kind}): {}", detail.join("; ")));
                    }
                }
            }
        }
    }
    let known: std::collections::HashSet<&String> = tally.expected.keys().collect();
    let strangers = records.keys().filter(|k| !known.contains(k)).count() as u64 + without_id;
    let expected_records = tally.expected.values().filter(|e| e.is_some()).count() as u64;
    let phase = phase.into_inner().unwrap();
    match (&disk, phase.filled_at) {
        (None, _) => println!("disk-full phase: skipped (--no-disk-full, or no tmpfs could be mounted)"),
        (Some(_), None) => println!("disk-full phase: the run was too short to reach it"),
        (Some(_), Some(at)) => println!(
            "disk-full phase: from {:.0} s, the disk full for {:.0} s; backlog at its end {} records, {} failed \
             ledger writes, readyz while full: {}; backlog left when the clients stopped: {backlog_at_end}",
            at.as_secs_f64(),
            (duration * 3 / 5).saturating_sub(at).as_secs_f64(),
            phase.peak_backlog,
            phase.write_errors,
            phase.readyz_while_full
        ),
    }
    let phase_failed = disk.is_some()
        && phase.filled_at.is_some()
        && (phase.write_errors == 0 || backlog_at_end > 0 || phase.readyz_while_full == 200);
    if phase_failed {
        println!(
            "  FAIL: the full disk was not noticed, or its backlog was not written afterwards"
        );
    }
    let reordered = reordered(&order, &records);
    println!(
        "ledger ({}): {files} files ({compressed} compressed; the clock moved a day every {} s); records of \
         one client out of its order: {reordered}",
        inst.dir.join("data").display(),
        CLOCK_STEP.as_secs()
    );
    println!(
        "  {lines} lines ({unreadable} unreadable), {upstream_lines} of requests that reached an upstream; {expected_records} records expected by the plan; the fake upstream counted {}",
        upstream_requests.map_or("?".into(), |n| n.to_string())
    );
    println!(
        "  requests whose record (or absence of one) matches: {matched} of {}; missing records {missing}; records for requests that never reached an upstream {unexpected}; duplicated {duplicated}; field mismatches {mismatched}; records with no known request {strangers}",
        tally.expected.len()
    );
    for (k, v) in &mismatch_kinds {
        println!("    {k}: {v}");
    }
    for e in &examples {
        println!("    e.g. {e}");
    }
    println!(
        "  admin API look-ups right after the answer: {} of {} found their record",
        tally.admin_checks - tally.admin_failures.len() as u64,
        tally.admin_checks
    );
    for f in tally.admin_failures.iter().take(5) {
        println!("    e.g. {f}");
    }
    let ledger_ok = missing == 0
        && reordered == 0
        && unexpected == 0
        && duplicated == 0
        && mismatched == 0
        && strangers == 0
        && unreadable == 0
        && upstream_requests.is_none_or(|n| n == upstream_lines)
        && tally.admin_failures.is_empty();
    let pass = ledger_ok && wrong_total == 0 && exit == Some(0) && !phase_failed;
    println!();
    println!(
        "ledger matches the responses: {}",
        if ledger_ok { "yes" } else { "NO" }
    );
    println!("verdict: {}", if pass { "PASS" } else { "FAIL" });
    drop(upstream);
    if keep {
        // Left mounted, so the kept ledger can be read.
        std::mem::forget(disk);
    } else {
        drop(disk);
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&root);
    } else {
        println!("(work files kept in {})", root.display());
    }
    std::process::exit(if pass { 0 } else { 1 });
}

fn admin_lookup(admin: &mut Option<Conn>, addr: SocketAddr, id: &str) -> Result<(), String> {
    if admin.is_none() {
        *admin = Some(Conn::connect(addr, Duration::from_secs(10)).map_err(|e| e.to_string())?);
    }
    let c = admin.as_mut().unwrap();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let req = client::get(
        addr,
        &format!("/admin/usage?client_request_id={id}"),
        &[("authorization", &auth)],
    );
    let r = c.roundtrip(&req).map_err(|e| {
        *admin = None;
        e.to_string()
    })?;
    if r.head.close {
        *admin = None;
    }
    if r.head.status != 200 {
        return Err(format!("HTTP {}", r.head.status));
    }
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    let n = v.get("data").and_then(Value::as_array).map_or(0, Vec::len);
    if n == 1 {
        Ok(())
    } else {
        Err(format!("{n} records"))
    }
}

/// What the disk-full phase saw.
#[derive(Default)]
struct Phase {
    filled_at: Option<Duration>,
    done: bool,
    peak_backlog: u64,
    write_errors: u64,
    readyz_while_full: u16,
}

/// (records waiting in the ledger's backlog, failed ledger writes, the `/readyz` status), from the gateway.
fn ledger_state(conn: &mut Option<Conn>, addr: SocketAddr) -> (u64, u64, u16) {
    let mut get = |path: &str| -> Option<(u16, Vec<u8>)> {
        if conn.is_none() {
            *conn = Conn::connect(addr, Duration::from_secs(5)).ok();
        }
        let r = conn.as_mut()?.roundtrip(&client::get(addr, path, &[])).ok();
        if r.as_ref().is_none_or(|r| r.head.close) {
            *conn = None;
        }
        r.map(|r| (r.head.status, r.body))
    };
    let ready = get("/readyz").map_or(0, |r| r.0);
    let metrics = get("/metrics").map(|r| String::from_utf8_lossy(&r.1).into_owned());
    let value = |name: &str| -> u64 {
        metrics
            .as_deref()
            .and_then(|m| m.lines().find_map(|l| l.strip_prefix(name)))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    (
        value("tollgate_ledger_backlog_records "),
        value("tollgate_ledger_write_errors_total "),
        ready,
    )
}

/// The soak's data directory on a tmpfs, so that it can be filled; unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1g,mode=0700", "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            println!(
                "disk-full phase: cannot mount a tmpfs at {} (needs root); skipped",
                at.display()
            );
            return None;
        }
        Some(Tmpfs(at.to_path_buf()))
    }

    /// Writes a filler file until the file system refuses more bytes.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        if let Ok(mut f) = std::fs::File::create(&path) {
            for size in [1 << 20, 4096, 64, 1] {
                let block = vec![0u8; size];
                while f.write_all(&block).is_ok() {}
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn upstream_stats(addr: SocketAddr) -> Option<u64> {
    let mut c = Conn::connect(addr, Duration::from_secs(5)).ok()?;
    let r = c.roundtrip(&client::get(addr, "/stats", &[])).ok()?;
    let v: Value = serde_json::from_slice(&r.body).ok()?;
    v.get("requests").and_then(Value::as_u64)
}
