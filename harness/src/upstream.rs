//! The fake upstream of the tests and the benchmarks: a tiny HTTP/1.1 server (a thread per connection,
//! keep-alive, `TCP_NODELAY`) whose replies are decided per request by a handler. Tests record every
//! request and answer with JSON, SSE streams (optionally gated, or cut off), or nothing at all; the
//! benchmarks' `fake-upstream` answers by [`bench::reply`], steered by `bench:` markers in the request.

pub mod bench;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// A request the fake upstream received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A function that writes an answer itself; true: the connection stays open.
pub type WriteAnswer = dyn FnOnce(&mut TcpStream) -> std::io::Result<bool> + Send;

/// How the fake upstream answers.
pub enum Reply {
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// An SSE stream, each element one event block (sent as its own chunk). With a gate, the stream pauses
    /// after `gate.0` events until the receiver gets a message. `abort` closes the socket without the final
    /// chunk.
    Sse {
        events: Vec<Vec<u8>>,
        gate: Option<(usize, Receiver<()>)>,
        abort: bool,
    },
    /// Reads the request and never answers (until the process ends).
    Hang,
    /// Closes the connection without answering.
    Close,
    /// Raw bytes, written as they are; then the connection is closed.
    Raw(Vec<u8>),
    /// The answer written by the function itself (timed streams of the benchmarks); it returns whether the
    /// connection stays open (false: it is dropped, mid-answer if need be).
    Write(Box<WriteAnswer>),
    /// Writes `prelude` (raw bytes, e.g. an SSE head and a first event), then waits for the other side to
    /// close the connection and reports it on `closed`.
    HoldUntilClosed {
        prelude: Vec<u8>,
        closed: std::sync::mpsc::Sender<()>,
    },
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::Json {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    pub fn sse(events: Vec<Vec<u8>>) -> Reply {
        Reply::Sse {
            events,
            gate: None,
            abort: false,
        }
    }
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

pub struct FakeUpstream {
    pub addr: SocketAddr,
    /// Every request received (none for [`FakeUpstream::start_bench`]).
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// TCP connections accepted so far.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
}

/// How a fake upstream serves its connections.
#[derive(Clone, Copy)]
struct Setup {
    /// Close keep-alive connections idle longer than this (see [`FakeUpstream::start_idle_close`]).
    idle_close: Option<Duration>,
    /// Keep every request in `requests`, with its headers (the benchmarks' handler reads neither: their
    /// upstream allocates as little per request as it can).
    record: bool,
    /// Each connection's thread stack (None: the default).
    stack: Option<usize>,
}

const TESTS: Setup = Setup {
    idle_close: None,
    record: true,
    stack: None,
};

impl FakeUpstream {
    pub fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> FakeUpstream {
        FakeUpstream::start_on(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
    }

    /// [`start`](Self::start) on a listener bound by the caller (an upstream coming back on its port).
    pub fn start_on(
        listener: TcpListener,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        FakeUpstream::start_inner(listener, TESTS, handler)
    }

    /// An upstream that closes keep-alive connections idle for longer than `idle`, the way uvicorn (vLLM)
    /// and Node do, caught at its worst moment: the close crosses a request already on its way, so a request
    /// arriving on a connection idle longer than `idle` is dropped unread and unanswered (the connection is
    /// closed). Such requests are not recorded: the upstream never took them.
    pub fn start_idle_close(
        idle: Duration,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        let setup = Setup {
            idle_close: Some(idle),
            ..TESTS
        };
        FakeUpstream::start_inner(TcpListener::bind("127.0.0.1:0").unwrap(), setup, handler)
    }

    /// The benchmarks' upstream on `listener`: every request answered by [`bench::reply`], nothing recorded,
    /// a small thread per connection.
    pub fn start_bench(listener: TcpListener) -> FakeUpstream {
        let setup = Setup {
            idle_close: None,
            record: false,
            stack: Some(128 * 1024),
        };
        FakeUpstream::start_inner(listener, setup, bench::reply)
    }

    fn start_inner(
        listener: TcpListener,
        setup: Setup,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        {
            let requests = requests.clone();
            let connections = connections.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let requests = requests.clone();
                    let handler = handler.clone();
                    let mut thread = std::thread::Builder::new().name("fake-upstream".into());
                    if let Some(stack) = setup.stack {
                        thread = thread.stack_size(stack);
                    }
                    let _ = thread.spawn(move || {
                        let record = setup.record.then_some(&*requests);
                        serve(stream, &*handler, record, setup.idle_close)
                    });
                }
            });
        }
        FakeUpstream {
            addr,
            requests,
            connections,
        }
    }

    /// Requests received so far.
    pub fn received(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn last(&self) -> Recorded {
        self.received()
            .last()
            .cloned()
            .expect("the fake upstream received no request")
    }
}

/// A request head read off a connection: its length, the request without its body, the body's length,
/// and whether the client asked to close after the answer.
struct Head {
    len: usize,
    request: Recorded,
    content_length: usize,
    close: bool,
}

fn parse_head(buf: &[u8], keep_headers: bool) -> Result<Option<Head>, ()> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let mut content_length = 0;
            let mut close = req.version == Some(0);
            let mut list = Vec::new();
            for h in req.headers.iter() {
                let value = std::str::from_utf8(h.value).unwrap_or("").trim();
                if h.name.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse().unwrap_or(0);
                } else if h.name.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close");
                }
                if keep_headers {
                    let value = String::from_utf8_lossy(h.value).trim().to_string();
                    list.push((h.name.to_ascii_lowercase(), value));
                }
            }
            let request = Recorded {
                method: req.method.unwrap_or("").to_string(),
                path: req.path.unwrap_or("").to_string(),
                headers: list,
                body: Vec::new(),
            };
            Ok(Some(Head {
                len,
                request,
                content_length,
                close,
            }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(()),
    }
}

/// Serves one connection: reads each request (one read for head and body when they arrive together),
/// asks the handler, writes the reply; keep-alive until the client closes or asks to.
fn serve(
    mut stream: TcpStream,
    handler: &Handler,
    requests: Option<&Mutex<Vec<Recorded>>>,
    idle_close: Option<Duration>,
) {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut scratch = vec![0u8; 64 * 1024];
    let mut answered_at: Option<std::time::Instant> = None;
    loop {
        let head = loop {
            match parse_head(&buf, requests.is_some()) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(()) => {
                    let _ = stream.write_all(
                        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    return;
                }
            }
            let n = match stream.read(&mut scratch) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let (Some(idle), Some(at), true) = (idle_close, answered_at, buf.is_empty()) {
                if at.elapsed() > idle {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
            buf.extend_from_slice(&scratch[..n]);
        };
        let end = head.len + head.content_length;
        while buf.len() < end {
            match stream.read(&mut scratch) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&scratch[..n]),
            }
        }
        let mut rec = head.request;
        rec.body = buf[head.len..end].to_vec();
        buf.drain(..end);
        if let Some(requests) = requests {
            requests.lock().unwrap().push(rec.clone());
        }
        if !answer(&mut stream, handler(&rec)) || head.close {
            return;
        }
        answered_at = Some(std::time::Instant::now());
    }
}

/// Writes `reply`; false: the connection is done (closed, dropped, or held until the other side closed).
fn answer(stream: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Json {
            status,
            headers,
            body,
        } => {
            let mut out = Vec::with_capacity(256 + body.len());
            let _ = write!(
                out,
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (k, v) in headers {
                let _ = write!(out, "{k}: {v}\r\n");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&body);
            stream.write_all(&out).is_ok()
        }
        Reply::Sse {
            events,
            gate,
            abort,
        } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() {
                return false;
            }
            for (i, ev) in events.iter().enumerate() {
                if let Some((at, rx)) = &gate {
                    if *at == i {
                        let _ = rx.recv_timeout(Duration::from_secs(60));
                    }
                }
                let mut chunk = format!("{:x}\r\n", ev.len()).into_bytes();
                chunk.extend_from_slice(ev);
                chunk.extend_from_slice(b"\r\n");
                if stream.write_all(&chunk).is_err() {
                    return false;
                }
            }
            if abort {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return false;
            }
            stream.write_all(b"0\r\n\r\n").is_ok()
        }
        Reply::Hang => {
            std::thread::sleep(Duration::from_secs(3600));
            false
        }
        Reply::Close => false,
        Reply::HoldUntilClosed { prelude, closed } => {
            let _ = stream.write_all(&prelude);
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let _ = closed.send(());
            false
        }
        Reply::Raw(bytes) => {
            let _ = stream.write_all(&bytes);
            false
        }
        Reply::Write(write) => match write(stream) {
            Ok(true) => true,
            Ok(false) => {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                false
            }
            Err(_) => false,
        },
    }
}

/// A fake upstream that answers each request with the next reply queued ([`Queued::push`]), and closes the
/// connection when none is.
pub struct Queued {
    /// The fake upstream (its address, what it received).
    pub fake: FakeUpstream,
    queue: Arc<Mutex<std::collections::VecDeque<Reply>>>,
}

impl Queued {
    /// Starts one on a free port.
    pub fn start() -> Queued {
        let queue: Arc<Mutex<std::collections::VecDeque<Reply>>> = Arc::default();
        let q = queue.clone();
        let fake =
            FakeUpstream::start(move |_| q.lock().unwrap().pop_front().unwrap_or(Reply::Close));
        Queued { fake, queue }
    }

    /// Queues the answer to the next request.
    pub fn push(&self, reply: Reply) {
        self.queue.lock().unwrap().push_back(reply);
    }
}

/// A fixture: a client request, what the upstream answers, and what the client must see.
pub struct Fixture {
    pub name: String,
    pub request: Value,
    pub upstream_status: u16,
    pub upstream_headers: Vec<(String, String)>,
    /// JSON body (non-streaming) or None for SSE.
    pub upstream_body: Option<Value>,
    /// A non-streaming body sent byte for byte (`raw_body`), for bodies a JSON value cannot hold.
    pub upstream_raw: Option<String>,
    /// SSE event blocks, for streaming fixtures.
    pub upstream_events: Vec<Vec<u8>>,
    /// The stream is cut off without its end (the fixture's SSE file ends mid-stream).
    pub upstream_abort: bool,
    pub expect: Value,
}

impl Fixture {
    pub fn load(dir: &Path, name: &str) -> Fixture {
        let text = std::fs::read_to_string(dir.join(format!("{name}.json")))
            .unwrap_or_else(|e| panic!("fixture {name}: {e}"));
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
        let up = &v["upstream"];
        let mut upstream_events = Vec::new();
        if let Some(file) = up["sse_file"].as_str() {
            let sse = std::fs::read_to_string(dir.join(file)).unwrap();
            upstream_events = split_sse_blocks(&sse);
        }
        let upstream_headers = up["headers"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        Fixture {
            name: name.to_string(),
            request: v["request"].clone(),
            upstream_status: up["status"].as_u64().unwrap_or(200) as u16,
            upstream_headers,
            upstream_body: up.get("body").cloned(),
            upstream_raw: up["raw_body"].as_str().map(str::to_string),
            upstream_events,
            upstream_abort: up["abort"].as_bool().unwrap_or(false),
            expect: v["expect"].clone(),
        }
    }

    /// The reply the fake upstream sends for this fixture.
    pub fn reply(&self) -> Reply {
        let raw = self.upstream_raw.as_ref().map(|r| r.clone().into_bytes());
        match raw.or_else(|| {
            self.upstream_body
                .as_ref()
                .map(|b| b.to_string().into_bytes())
        }) {
            Some(body) => {
                let mut headers = self.upstream_headers.clone();
                if !headers.iter().any(|(k, _)| k == "content-type") {
                    headers.push(("content-type".into(), "application/json".into()));
                }
                Reply::Json {
                    status: self.upstream_status,
                    headers,
                    body,
                }
            }
            None => Reply::Sse {
                events: self.upstream_events.clone(),
                gate: None,
                abort: self.upstream_abort,
            },
        }
    }
}

/// Splits an SSE transcript into event blocks, each with its terminating blank line (an unterminated last
/// block is kept as it is).
pub fn split_sse_blocks(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.split_inclusive('\n') {
        cur.push_str(line);
        if line == "\n" {
            if cur.trim().is_empty() {
                cur.clear();
                continue;
            }
            out.push(std::mem::take(&mut cur).into_bytes());
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim_end_matches('\n').to_string().into_bytes());
    }
    out
}
