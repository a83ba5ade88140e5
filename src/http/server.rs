//! The accept loop and the per-connection reader threads.
//!
//! The accept loop never ends on an error (EMFILE and friends are logged and waited out). Each accepted
//! socket gets `TCP_NODELAY` and a small thread that only reads and parses requests; a parsed request is
//! handed to the caller's `dispatch` (the worker pool) as an [`Exchange`], and the connection thread waits
//! until the worker gives the socket back before it reads the next request (keep-alive). Reading has a
//! deadline: a client that sends nothing, or sends its head or body too slowly, is dropped after
//! `read_timeout` without ever occupying a worker.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::request::{parse_head, BodyKind, ChunkedDecoder, HttpError, Limits, Request};
use super::response::ResponseWriter;

/// Settings of the HTTP layer.
#[derive(Clone)]
pub struct HttpConfig {
    pub limits: Limits,
    /// Deadline for a whole request (head and body) once it starts, and for an idle keep-alive connection.
    pub read_timeout: Duration,
    /// Limit for one blocked write to a client.
    pub write_timeout: Duration,
    /// Open connections above this get 503 and are closed.
    pub max_connections: usize,
    /// Request-body bytes buffered at once across all connections; a body that would go beyond gets 503.
    pub max_buffered_body_bytes: u64,
    /// Looks at each request head before its body is read and may answer it at once (a missing or wrong
    /// credential: no body is read for a caller who may not send one).
    pub screen: Option<Arc<Screen>>,
}

/// An answer given to a request from its head alone.
pub struct Early {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// See [`HttpConfig::screen`]: the request has its head only (an empty body).
pub type Screen = dyn Fn(&Request) -> Option<Early> + Send + Sync;

impl std::fmt::Debug for Early {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Early({})", self.status)
    }
}

/// Counters shared by the accept loop, the connections and whoever drives shutdown.
#[derive(Default)]
pub struct ServerState {
    pub shutting_down: AtomicBool,
    pub open_connections: AtomicUsize,
    /// Requests handed to a worker and not yet answered.
    pub in_flight: AtomicUsize,
    pub rejected: AtomicUsize,
    /// Request-body bytes buffered now (reserved before they are read).
    pub buffered_body: std::sync::atomic::AtomicU64,
}

impl ServerState {
    /// Reserves `n` more body bytes within `max`; false (nothing reserved) when they would not fit.
    fn reserve_body(&self, n: u64, max: u64) -> bool {
        let mut cur = self.buffered_body.load(Ordering::Relaxed);
        loop {
            if cur.saturating_add(n) > max {
                return false;
            }
            match self.buffered_body.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    fn release_body(&self, n: u64) {
        if n > 0 {
            self.buffered_body.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// Renders an error the HTTP layer answers by itself (bad framing, overload). Receives the request path
/// when it is known, so the body can take the shape of the protocol at that path.
pub type ErrorRenderer =
    dyn Fn(Option<&str>, u16, &str) -> (Vec<(String, String)>, Vec<u8>) + Send + Sync;

/// Hands an exchange to a worker. Returning it back means "no capacity": the caller answers 503.
pub type Dispatch = dyn Fn(Exchange) -> Result<(), Box<Exchange>> + Send + Sync;

/// One request and the means to answer it. Dropping it returns the connection to its reader thread.
pub struct Exchange {
    pub request: Request,
    pub peer: SocketAddr,
    /// When the request's head was complete.
    pub received: Instant,
    /// Always present; moved out only in `Drop`, which is the last use of the exchange.
    writer: std::mem::ManuallyDrop<ResponseWriter>,
    done: Arc<Handback>,
}

/// Where a worker hands the writer back to its connection thread. A mutex and a condition variable, so the
/// connection thread sleeps at once instead of spinning while the worker is busy (on two cores, spinning
/// and yielding waiters cost more than the request).
#[derive(Default)]
struct Handback {
    slot: std::sync::Mutex<Option<ResponseWriter>>,
    ready: std::sync::Condvar,
}

impl Handback {
    fn give(&self, w: ResponseWriter) {
        let mut slot = match self.slot.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *slot = Some(w);
        self.ready.notify_one();
    }

    fn take(&self) -> ResponseWriter {
        let mut slot = match self.slot.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        loop {
            if let Some(w) = slot.take() {
                return w;
            }
            slot = match self.ready.wait(slot) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }
}

impl Exchange {
    pub fn response(&mut self) -> &mut ResponseWriter {
        &mut self.writer
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // SAFETY: `writer` is initialised from construction on and this is its only move out; `self` is not
        // used after `drop`.
        let w = unsafe { std::mem::ManuallyDrop::take(&mut self.writer) };
        self.done.give(w);
    }
}

/// Runs the accept loop on the calling thread until `state.shutting_down` is set and a connection (or the
/// waker) arrives.
pub fn serve(
    listener: TcpListener,
    config: Arc<HttpConfig>,
    state: Arc<ServerState>,
    dispatch: Arc<Dispatch>,
    render_error: Arc<ErrorRenderer>,
) {
    let mut last_accept_warning: Option<std::time::Instant> = None;
    loop {
        let accepted = listener.accept();
        if state.shutting_down.load(Ordering::SeqCst) {
            break;
        }
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: wait for descriptors to free up; never end the loop.
                if last_accept_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    log::warn!("accept failed: {e}; retrying");
                    last_accept_warning = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(config.write_timeout));
        let open = state.open_connections.fetch_add(1, Ordering::SeqCst) + 1;
        if open > config.max_connections {
            state.open_connections.fetch_sub(1, Ordering::SeqCst);
            state.rejected.fetch_add(1, Ordering::Relaxed);
            reject_overloaded(stream, None, &*render_error, "too many open connections");
            continue;
        }
        let conn = Connection {
            config: config.clone(),
            state: state.clone(),
            dispatch: dispatch.clone(),
            render_error: render_error.clone(),
            peer,
        };
        let spawned = std::thread::Builder::new()
            .name("tollgate-conn".into())
            .stack_size(256 * 1024)
            .spawn(move || conn.run(stream));
        if let Err(e) = spawned {
            // The closure (and the socket in it) is gone; the client sees the connection close.
            log::warn!("could not start a connection thread: {e}");
            state.open_connections.fetch_sub(1, Ordering::SeqCst);
            state.rejected.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn reject_overloaded(
    stream: TcpStream,
    path: Option<&str>,
    render_error: &ErrorRenderer,
    why: &str,
) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut writer = ResponseWriter::new(stream);
    writer.reset(false, false);
    send_rendered(
        &mut writer,
        path,
        503,
        why,
        render_error,
        &[("retry-after", "1")],
    );
}

fn send_rendered(
    writer: &mut ResponseWriter,
    path: Option<&str>,
    status: u16,
    message: &str,
    render_error: &ErrorRenderer,
    extra: &[(&str, &str)],
) {
    let (headers, body) = render_error(path, status, message);
    let mut all: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    all.extend_from_slice(extra);
    let _ = writer.send(status, &all, &body);
}

struct Connection {
    config: Arc<HttpConfig>,
    state: Arc<ServerState>,
    dispatch: Arc<Dispatch>,
    render_error: Arc<ErrorRenderer>,
    peer: SocketAddr,
}

enum ReadOutcome {
    /// The peer closed, or stayed idle past the timeout, between requests.
    Closed,
    /// The request could not be read; answer with this status and close.
    Failed(Option<String>, HttpError),
    /// Deadline passed in the middle of a request.
    TimedOut,
    /// Answered from its head (the screen), its body unread: answer and close.
    Screened(Early),
    /// Too many body bytes buffered across connections: 503 and close.
    OverBudget(Option<String>),
}

impl Connection {
    fn run(self, stream: TcpStream) {
        match stream.try_clone() {
            Ok(s) => {
                let mut reader = stream;
                self.serve_requests(&mut reader, ResponseWriter::new(s));
                let _ = reader.shutdown(Shutdown::Both);
            }
            Err(e) => log::warn!("could not set up a connection: {e}"),
        }
        self.state.open_connections.fetch_sub(1, Ordering::SeqCst);
    }

    fn serve_requests(&self, reader: &mut TcpStream, mut writer: ResponseWriter) {
        let handback = Arc::new(Handback::default());
        let mut buf: Vec<u8> = Vec::with_capacity(8192);
        loop {
            let mut reserved = 0u64;
            let read = self.read_request(reader, &mut buf, &mut reserved);
            if read.is_err() {
                self.state.release_body(reserved);
                reserved = 0;
            }
            let request = match read {
                Ok(request) => request,
                Err(ReadOutcome::Closed) => return,
                Err(ReadOutcome::Screened(early)) => {
                    writer.reset(false, false);
                    let headers: Vec<(&str, &str)> = early
                        .headers
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()))
                        .collect();
                    let _ = writer.send(early.status, &headers, &early.body);
                    linger(reader);
                    return;
                }
                Err(ReadOutcome::OverBudget(path)) => {
                    self.state.rejected.fetch_add(1, Ordering::Relaxed);
                    writer.reset(false, false);
                    send_rendered(
                        &mut writer,
                        path.as_deref(),
                        503,
                        "the gateway is holding too many request bodies at once; retry shortly",
                        &*self.render_error,
                        &[("retry-after", "1")],
                    );
                    linger(reader);
                    return;
                }
                Err(ReadOutcome::TimedOut) => {
                    writer.reset(false, false);
                    let msg = "request not received in time";
                    send_rendered(&mut writer, None, 408, msg, &*self.render_error, &[]);
                    return;
                }
                Err(ReadOutcome::Failed(path, e)) => {
                    writer.reset(false, false);
                    let (status, msg) = (e.status(), e.to_string());
                    send_rendered(
                        &mut writer,
                        path.as_deref(),
                        status,
                        &msg,
                        &*self.render_error,
                        &[],
                    );
                    linger(reader);
                    return;
                }
            };
            let head_only = request.method == "HEAD";
            if self.state.shutting_down.load(Ordering::SeqCst) {
                writer.reset(false, head_only);
                send_rendered(
                    &mut writer,
                    Some(&request.path),
                    503,
                    "server is shutting down",
                    &*self.render_error,
                    &[("retry-after", "1")],
                );
                return;
            }
            // Lend the writer to a worker; it comes back through `handback` when the exchange is dropped.
            writer.reset_for(request.keep_alive, head_only, request.version == 0);
            self.state.in_flight.fetch_add(1, Ordering::SeqCst);
            let path = request.path.clone();
            let exchange = Exchange {
                request,
                peer: self.peer,
                received: Instant::now(),
                writer: std::mem::ManuallyDrop::new(writer),
                done: handback.clone(),
            };
            if let Err(mut rejected) = (self.dispatch)(exchange) {
                self.state.rejected.fetch_add(1, Ordering::Relaxed);
                let w = rejected.response();
                w.close_after();
                send_rendered(
                    w,
                    Some(&path),
                    503,
                    "all workers are busy; retry shortly",
                    &*self.render_error,
                    &[("retry-after", "1")],
                );
            }
            let mut w = handback.take();
            // The worker has dropped the request (and its body) by now.
            self.state.release_body(reserved);
            let released = w.release_held().is_ok().then_some(w);
            self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
            let Some(w) = released else { return };
            if !w.reusable() || self.state.shutting_down.load(Ordering::SeqCst) {
                return;
            }
            writer = w;
        }
    }

    /// Reads one request from the socket; leftover bytes (pipelining) stay in `buf`.
    /// Reads one request; `reserved` says how many body bytes it holds of the server-wide budget (the
    /// caller releases them when the request is done, or at once on an error).
    fn read_request(
        &self,
        reader: &mut TcpStream,
        buf: &mut Vec<u8>,
        reserved: &mut u64,
    ) -> Result<Request, ReadOutcome> {
        let limits = &self.config.limits;
        let idle_deadline = Instant::now() + self.config.read_timeout;
        let mut deadline = idle_deadline;
        let mut started = !buf.is_empty();
        let head = loop {
            match parse_head(buf, limits) {
                Ok(Some((head, used))) => {
                    buf.drain(..used);
                    break head;
                }
                Ok(None) => {}
                Err(e) => return Err(ReadOutcome::Failed(request_path(buf), e)),
            }
            match read_some(reader, buf, deadline) {
                Ok(0) => {
                    return Err(if started {
                        ReadOutcome::Failed(
                            None,
                            HttpError::BadRequest("incomplete request".into()),
                        )
                    } else {
                        ReadOutcome::Closed
                    })
                }
                Ok(_) => {
                    if !started {
                        started = true;
                        deadline = Instant::now() + self.config.read_timeout;
                    }
                }
                Err(e) if is_timeout(&e) => {
                    return Err(if started {
                        ReadOutcome::TimedOut
                    } else {
                        ReadOutcome::Closed
                    })
                }
                Err(_) => return Err(ReadOutcome::Closed),
            }
        };
        let mut request = head.request;
        let path = Some(request.path.clone());
        // Identity before memory: a request the screen answers from its head has no body read.
        if let Some(screen) = &self.config.screen {
            if let Some(early) = screen(&request) {
                return Err(ReadOutcome::Screened(early));
            }
        }
        let budget = self.config.max_buffered_body_bytes;
        if let BodyKind::Length(n) = head.body {
            if !self.state.reserve_body(n, budget) {
                return Err(ReadOutcome::OverBudget(path));
            }
            *reserved = n;
        }
        if head.expect_continue && head.body != BodyKind::None && buf.is_empty() {
            let _ = reader.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        match head.body {
            BodyKind::None => {}
            BodyKind::Length(n) => {
                let n = n as usize;
                let mut body = Vec::with_capacity(n.min(64 * 1024));
                let take = n.min(buf.len());
                body.extend(buf.drain(..take));
                while body.len() < n {
                    let want = n - body.len();
                    match read_some_limited(reader, &mut body, want, deadline) {
                        Ok(0) => {
                            return Err(ReadOutcome::Failed(
                                path,
                                HttpError::BadRequest("body shorter than Content-Length".into()),
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if is_timeout(&e) => return Err(ReadOutcome::TimedOut),
                        Err(_) => return Err(ReadOutcome::Closed),
                    }
                }
                request.body = body;
            }
            BodyKind::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                let mut body = Vec::new();
                loop {
                    match decoder.feed(buf, &mut body, limits.max_body_bytes) {
                        Ok((used, done)) => {
                            buf.drain(..used);
                            // A chunked body reserves its bytes as it grows, in 64 KiB steps.
                            while (body.len() as u64) > *reserved {
                                if !self.state.reserve_body(64 * 1024, budget) {
                                    return Err(ReadOutcome::OverBudget(path));
                                }
                                *reserved += 64 * 1024;
                            }
                            if done {
                                break;
                            }
                        }
                        Err(e) => return Err(ReadOutcome::Failed(path, e)),
                    }
                    match read_some(reader, buf, deadline) {
                        Ok(0) => {
                            return Err(ReadOutcome::Failed(
                                path,
                                HttpError::BadRequest("incomplete chunked body".into()),
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if is_timeout(&e) => return Err(ReadOutcome::TimedOut),
                        Err(_) => return Err(ReadOutcome::Closed),
                    }
                }
                request.body = body;
            }
        }
        Ok(request)
    }
}

/// The path of the request line at the start of `buf`, if it is readable (for shaping error answers).
fn request_path(buf: &[u8]) -> Option<String> {
    let line_end = buf.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&buf[..line_end]).ok()?;
    let target = line.split_whitespace().nth(1)?;
    Some(target.split('?').next().unwrap_or(target).to_string())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn read_some(reader: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> io::Result<usize> {
    read_some_limited(reader, buf, 16 * 1024, deadline)
}

fn read_some_limited(
    reader: &mut TcpStream,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> io::Result<usize> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    reader.set_read_timeout(Some(remaining))?;
    // Read straight into the buffer's spare room (kept on the heap: a thousand connection threads with
    // 16 KiB stack buffers would cost more than their small stacks).
    let want = max.min(16 * 1024);
    let start = buf.len();
    buf.resize(start + want, 0);
    loop {
        match reader.read(&mut buf[start..]) {
            Ok(n) => {
                buf.truncate(start + n);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
}

/// After an error answer, read and discard what the client is still sending for a moment before closing,
/// so the close does not turn into a reset that destroys the answer in flight.
fn linger(reader: &mut TcpStream) {
    let _ = reader.shutdown(Shutdown::Write);
    let _ = reader.set_read_timeout(Some(Duration::from_millis(500)));
    let mut tmp = [0u8; 16 * 1024];
    let mut total = 0usize;
    while total < 4 * 1024 * 1024 {
        match reader.read(&mut tmp) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}
