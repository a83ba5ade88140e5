//! What the accept loop, the worker pool and the connections share: the layer's settings and counters, the
//! exchange a handler answers, and the callbacks the server passes in.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::request::{HttpRequest, ParseLimits};
use super::response::ResponseWriter;

/// Settings of the HTTP layer.
#[derive(Clone)]
pub struct HttpConfig {
    /// Caps on a request head's size and header count (beyond: 431) and on its body's size (beyond: 413).
    pub limits: ParseLimits,
    /// Deadline for a whole request (head and body) once it starts, and for an idle keep-alive connection.
    pub read_timeout: Duration,
    /// Limit for one blocked write to a client.
    pub write_timeout: Duration,
    /// Open connections above this get 503 and are closed.
    pub max_connections: usize,
    /// Each client's share of the connections once they run short.
    pub per_client: PerClient,
    /// Request-body bytes buffered at once across all connections, counted as they arrive; a body that would
    /// go beyond gets 503.
    pub max_buffered_body_bytes: u64,
    /// Requests served at once: one worker carries one request from its complete head to its last byte.
    pub workers: usize,
    /// Complete requests waiting for a worker when all are busy; one more gets 503 at once.
    pub queue_size: usize,
    /// Looks at each request head before its body is read and may answer it at once: the one place that
    /// decides who may send a body (a missing or wrong credential: nothing of the body is read or reserved).
    pub screen: Option<Arc<Screen>>,
    /// Answers a request refused because every worker is busy and the queue is full; false leaves it to the
    /// layer's own 503.
    pub overloaded: Option<Arc<Overloaded>>,
}

/// A client's fair share of the connection slots: once more than half of `max_connections` are open, a
/// client address (an IPv6 one by its /64, `peer::counted`) that holds `max` of them already gets 503 for
/// another, so that one peer can never hold them all; the addresses in `exempt` (a reverse proxy that
/// carries every client, a load test on loopback) are not held to it.
#[derive(Clone, Debug)]
pub struct PerClient {
    /// Connections one client address may hold once more than half are open (`usize::MAX`: no share).
    pub max: usize,
    /// Addresses and ranges not held to `max`.
    pub exempt: Vec<crate::peer::Range>,
}

impl Default for PerClient {
    /// No share: every client may take every slot.
    fn default() -> Self {
        PerClient {
            max: usize::MAX,
            exempt: Vec::new(),
        }
    }
}

/// An answer given to a request from its head alone.
pub struct Early {
    /// The response's status code (such as 401).
    pub status: u16,
    /// Its header fields, `(name, value)`; the writer adds `content-length` itself.
    pub headers: Vec<(String, String)>,
    /// Its whole body.
    pub body: Vec<u8>,
}

/// What the screen is shown of a request: its head, before any of its body is read.
pub struct Incoming<'a> {
    /// The request with an empty body.
    pub request: &'a HttpRequest,
    /// The client's address.
    pub peer: SocketAddr,
    /// A body follows (a `Content-Length` above zero, or chunked). It is read only if the screen lets the
    /// request through.
    pub has_body: bool,
}

/// See [`HttpConfig::screen`]: `None` lets the request through (its body is then read), `Some` answers it
/// from its head and closes the connection.
pub type Screen = dyn Fn(&Incoming) -> Option<Early> + Send + Sync;

/// See [`HttpConfig::overloaded`].
pub type Overloaded = dyn Fn(&mut Exchange) -> bool + Send + Sync;

/// Serves one exchange on the worker that read it.
pub type Handler = dyn Fn(&mut Exchange) + Send + Sync;

impl std::fmt::Debug for Early {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Early({})", self.status)
    }
}

/// Counters shared by the accept loop, the workers and whoever drives shutdown.
#[derive(Debug, Default)]
pub struct ServerState {
    /// Set when shutdown begins: the accept loop stops taking connections, queued requests get 503,
    /// connections close after their answer, and `/readyz` reports draining.
    pub shutting_down: AtomicBool,
    /// Client connections open now (the `tollgate_open_connections` gauge).
    pub open_connections: AtomicUsize,
    /// Open connections by client address (`peer::counted`).
    pub(super) per_client: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    /// Requests complete and not yet answered (served or waiting for a worker).
    pub in_flight: AtomicUsize,
    /// Requests waiting for a worker.
    pub queued: AtomicUsize,
    /// Connections and requests refused for overload (too many connections, a full queue, too many body bytes
    /// held): `tollgate_rejected_requests_total` with `reason="overload"`.
    pub rejected: AtomicUsize,
    /// Request-body bytes buffered now (reserved as they arrive).
    pub buffered_body: std::sync::atomic::AtomicU64,
    /// Answers being streamed now: counted by the handler, from the stream's start until the request is
    /// reported (the layer only holds the count, so each server has its own).
    pub streams: std::sync::atomic::AtomicI64,
}

impl ServerState {
    /// Counts a new connection from `peer`, unless the connections run short (`open` of `max` are open,
    /// this one included) and `peer` holds its share already: then false, nothing counted.
    pub(super) fn take_share(
        &self,
        peer: std::net::IpAddr,
        open: usize,
        max: usize,
        share: &PerClient,
    ) -> bool {
        let client = crate::peer::counted(peer);
        let mut held = crate::util::lock(&self.per_client);
        let n = held.entry(client).or_insert(0);
        let short = open > max / 2;
        if short && *n >= share.max && !share.exempt.iter().any(|r| r.contains(peer)) {
            if *n == 0 {
                held.remove(&client);
            }
            return false;
        }
        *n += 1;
        true
    }

    /// A connection from `peer` closed.
    pub(super) fn give_share(&self, peer: std::net::IpAddr) {
        let client = crate::peer::counted(peer);
        let mut held = crate::util::lock(&self.per_client);
        if let Some(n) = held.get_mut(&client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&client);
            }
        }
    }

    /// Reserves `n` more body bytes within `max`; false (nothing reserved) when they would not fit.
    pub(super) fn reserve_body(&self, n: u64, max: u64) -> bool {
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

    pub(super) fn release_body(&self, n: u64) {
        if n > 0 {
            self.buffered_body.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// Renders an error the HTTP layer answers by itself (bad framing, overload). Receives the request path
/// when it is known, so the body can take the shape of the protocol at that path.
pub type ErrorRenderer =
    dyn Fn(Option<&str>, u16, &str) -> (Vec<(String, String)>, Vec<u8>) + Send + Sync;

/// One request and the means to answer it, served on the worker that read it.
pub struct Exchange {
    /// The request, its body read whole.
    pub request: HttpRequest,
    /// The address of the client that sent it.
    pub peer: SocketAddr,
    /// When the request was complete.
    pub received: Instant,
    writer: ResponseWriter,
    state: Arc<ServerState>,
}

impl Exchange {
    pub(super) fn new(
        request: HttpRequest,
        peer: SocketAddr,
        writer: ResponseWriter,
        state: Arc<ServerState>,
    ) -> Exchange {
        Exchange {
            request,
            peer,
            received: Instant::now(),
            writer,
            state,
        }
    }

    /// The state of the server this request came to.
    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    /// The writer the answer goes out through.
    pub fn response(&mut self) -> &mut ResponseWriter {
        &mut self.writer
    }

    /// The writer and the request back, for the connection's next request (its body's buffer is
    /// reused).
    pub(super) fn into_parts(self) -> (ResponseWriter, HttpRequest) {
        (self.writer, self.request)
    }
}

pub(super) fn send_rendered(
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

/// What of the HTTP layer could not be started (the operating system refused a descriptor or a thread).
#[derive(Debug)]
pub enum HttpStartError {
    /// The poller (epoll, kqueue).
    Poller(std::io::Error),
    /// The pipe that wakes the poller to stop.
    Waker(std::io::Error),
    /// Pool thread number `.0`.
    Worker(usize, std::io::Error),
    /// The connection timer's thread.
    Timer(std::io::Error),
    /// The accept loop's thread.
    Accept(std::io::Error),
}

impl std::fmt::Display for HttpStartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpStartError::Poller(e) => write!(f, "could not create the poller: {e}"),
            HttpStartError::Waker(e) => write!(f, "could not create the poller's waker: {e}"),
            HttpStartError::Worker(i, e) => write!(f, "could not start worker {i}: {e}"),
            HttpStartError::Timer(e) => write!(f, "could not start the connection timer: {e}"),
            HttpStartError::Accept(e) => write!(f, "could not start the accept thread: {e}"),
        }
    }
}

impl std::error::Error for HttpStartError {}
