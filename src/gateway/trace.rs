//! The identity and timing of one request: its id (and the client's), its protocol, headers every answer
//! to it carries, the watchdog's cut flag, and the time spent waiting on the upstream.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::watchdog;
use crate::http::{Exchange, HttpRequest};
use crate::protocol::codec::Framing;
use crate::protocol::Protocol;

/// Identifies one request in headers, logs and records, and times it.
#[derive(Clone, Debug)]
pub(crate) struct Trace {
    /// When the request's head was complete.
    pub received: Instant,
    /// Time spent waiting on the upstream so far (sending, waiting for the answer, reading it).
    pub upstream_wait: Cell<Duration>,
    /// When the first generated token went to the client (streams).
    pub first_token: Cell<Option<Duration>>,
    /// Whether an SSE stream was started (counted in the active-streams gauge until the request ends).
    pub streaming: Cell<bool>,
    /// The counters of the server the request came to (the active-streams gauge, `ServerState::streams`).
    pub server: std::sync::Arc<crate::http::ServerState>,
    pub request_id: String,
    pub client_request_id: Option<String>,
    /// The protocol whose shape errors take.
    pub protocol: Protocol,
    /// How a stream to the client is framed (its protocol says, from the request).
    pub framing: Framing,
    /// More headers for every answer to this request (rate-limit state).
    pub extra: Vec<(String, String)>,
    /// Set by the watchdog when the request is cut (client gone, or the shutdown deadline).
    pub cut: watchdog::Cut,
    /// Strict ledger: streams hold their closing events back until the usage record is synced, so a record
    /// that cannot be written can still turn the stream's end into an error.
    pub hold_tail: bool,
}

/// The client's own request id (`x-client-request-id`), when it sent a usable one (echoed and recorded).
pub(crate) fn client_request_id(req: &HttpRequest) -> Option<&str> {
    req.header("x-client-request-id")
        .filter(|v| !v.is_empty() && v.len() <= 512)
}

impl Trace {
    pub(crate) fn new(ex: &Exchange, protocol: Protocol) -> Trace {
        let client_request_id = client_request_id(&ex.request).map(str::to_string);
        Trace {
            received: ex.received,
            upstream_wait: Cell::new(Duration::ZERO),
            first_token: Cell::new(None),
            streaming: Cell::new(false),
            server: ex.state().clone(),
            request_id: crate::util::new_id("req_"),
            client_request_id,
            framing: protocol.framing(&ex.request),
            protocol,
            extra: Vec::new(),
            cut: Default::default(),
            hold_tail: false,
        }
    }

    /// The client went away (the watchdog saw its socket close).
    pub(crate) fn client_gone(&self) -> bool {
        self.cut.load(Ordering::SeqCst) == watchdog::CUT_CLIENT_GONE
    }

    /// The request was cut by the shutdown deadline.
    pub(crate) fn cut_by_shutdown(&self) -> bool {
        self.cut.load(Ordering::SeqCst) == watchdog::CUT_SHUTDOWN
    }

    /// Adds time spent waiting on the upstream.
    pub(crate) fn add_upstream_wait(&self, d: Duration) {
        self.upstream_wait.set(self.upstream_wait.get() + d);
    }

    /// Notes the first generated token sent (only the first call counts).
    pub(crate) fn mark_first_token(&self) {
        if self.first_token.get().is_none() {
            self.first_token.set(Some(self.received.elapsed()));
        }
    }

    /// The gateway's own time so far: everything but waiting on the upstream.
    pub(crate) fn overhead(&self) -> Duration {
        self.received
            .elapsed()
            .saturating_sub(self.upstream_wait.get())
    }

    pub(crate) fn overhead_header(&self) -> String {
        format!("{:.3}", self.overhead().as_secs_f64() * 1000.0)
    }

    /// The tracing headers, plus `extra`.
    pub(crate) fn headers<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut h = Vec::with_capacity(4 + extra.len());
        h.push(("x-request-id", self.request_id.as_str()));
        if let Some(name) = self.protocol.id_header {
            h.push((name, self.request_id.as_str()));
        }
        if let Some(c) = &self.client_request_id {
            h.push(("x-client-request-id", c.as_str()));
        }
        h.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        h.extend_from_slice(extra);
        h
    }
}
