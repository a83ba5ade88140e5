//! A fake upstream: a tiny HTTP/1.1 server whose replies are decided per request by a handler, recording
//! every request it receives. Replies can be JSON, SSE streams (optionally gated, or cut off), or nothing.

use std::io::{BufRead, BufReader, Read, Write};
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
    /// Raw bytes, written as they are.
    Raw(Vec<u8>),
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
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// TCP connections accepted so far.
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeUpstream {
    pub fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> FakeUpstream {
        FakeUpstream::start_on(TcpListener::bind("127.0.0.1:0").unwrap(), handler)
    }

    /// [`start`](Self::start) on a listener bound by the caller (an upstream coming back on its port).
    pub fn start_on(
        listener: TcpListener,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        FakeUpstream::start_inner(listener, None, handler)
    }

    /// An upstream that closes keep-alive connections idle for longer than `idle`, the way uvicorn (vLLM)
    /// and Node do, caught at its worst moment: the close crosses a request already on its way, so a request
    /// arriving on a connection idle longer than `idle` is dropped unread and unanswered (the connection is
    /// closed). Such requests are not recorded: the upstream never took them.
    pub fn start_idle_close(
        idle: Duration,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        FakeUpstream::start_inner(
            TcpListener::bind("127.0.0.1:0").unwrap(),
            Some(idle),
            handler,
        )
    }

    fn start_inner(
        listener: TcpListener,
        idle_close: Option<Duration>,
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
                for stream in listener.incoming().map_while(Result::ok) {
                    connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let requests = requests.clone();
                    let handler = handler.clone();
                    std::thread::spawn(move || serve(stream, &*handler, &requests, idle_close));
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

fn serve(
    stream: TcpStream,
    handler: &Handler,
    requests: &Mutex<Vec<Recorded>>,
    idle_close: Option<Duration>,
) {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut answered_at: Option<std::time::Instant> = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let (Some(idle), Some(at)) = (idle_close, answered_at) {
            if at.elapsed() > idle {
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let rec = Recorded {
            method,
            path,
            headers,
            body,
        };
        requests.lock().unwrap().push(rec.clone());
        match handler(&rec) {
            Reply::Json {
                status,
                headers,
                body,
            } => {
                let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut bytes = out.into_bytes();
                bytes.extend_from_slice(&body);
                if writer.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::Sse {
                events,
                gate,
                abort,
            } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                if writer.write_all(head.as_bytes()).is_err() {
                    return;
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
                    if writer.write_all(&chunk).is_err() {
                        return;
                    }
                }
                if abort {
                    let _ = writer.shutdown(std::net::Shutdown::Both);
                    return;
                }
                if writer.write_all(b"0\r\n\r\n").is_err() {
                    return;
                }
            }
            Reply::Hang => {
                std::thread::sleep(Duration::from_secs(3600));
                return;
            }
            Reply::Close => return,
            Reply::HoldUntilClosed { prelude, closed } => {
                let _ = writer.write_all(&prelude);
                let mut buf = [0u8; 1024];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                let _ = closed.send(());
                return;
            }
            Reply::Raw(bytes) => {
                let _ = writer.write_all(&bytes);
                return;
            }
        }
        answered_at = Some(std::time::Instant::now());
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
