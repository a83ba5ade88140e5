//! Writing answers with the headers every response carries: `x-request-id` (and `request-id` for Messages
//! clients), the echoed `x-client-request-id`, `retry-after` on errors that have one.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::http::{Exchange, ResponseWriter};
use crate::protocol::{sse, ApiError, Protocol};

/// Identifies one request in headers, logs and records, and times it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// When the request's head was complete.
    pub received: Instant,
    /// Time spent waiting on the upstream so far (sending, waiting for the answer, reading it).
    pub upstream_wait: Cell<Duration>,
    /// When the first generated token went to the client (streams).
    pub first_token: Cell<Option<Duration>>,
    /// Whether an SSE stream was started (counted in the active-streams gauge until the request ends).
    pub streaming: Cell<bool>,
    pub request_id: String,
    pub client_request_id: Option<String>,
    /// The protocol whose shape errors take.
    pub protocol: Protocol,
    /// More headers for every answer to this request (rate-limit state).
    pub extra: Vec<(String, String)>,
    /// Set by the watchdog when the request is cut (client gone, or the shutdown deadline).
    pub cut: super::watchdog::Cut,
    /// Strict ledger: streams hold their closing events back until the usage record is synced, so a record
    /// that cannot be written can still turn the stream's end into an error.
    pub hold_tail: bool,
}

impl Trace {
    pub fn new(ex: &Exchange, protocol: Protocol) -> Trace {
        let client_request_id = ex
            .request
            .header("x-client-request-id")
            .filter(|v| !v.is_empty() && v.len() <= 512)
            .map(str::to_string);
        Trace {
            received: ex.received,
            upstream_wait: Cell::new(Duration::ZERO),
            first_token: Cell::new(None),
            streaming: Cell::new(false),
            request_id: crate::util::new_id("req_"),
            client_request_id,
            protocol,
            extra: Vec::new(),
            cut: Default::default(),
            hold_tail: false,
        }
    }

    /// The client went away (the watchdog saw its socket close).
    pub fn client_gone(&self) -> bool {
        self.cut.load(Ordering::SeqCst) == super::watchdog::CUT_CLIENT_GONE
    }

    /// The request was cut by the shutdown deadline.
    pub fn cut_by_shutdown(&self) -> bool {
        self.cut.load(Ordering::SeqCst) == super::watchdog::CUT_SHUTDOWN
    }

    /// Adds time spent waiting on the upstream.
    pub fn add_upstream_wait(&self, d: Duration) {
        self.upstream_wait.set(self.upstream_wait.get() + d);
    }

    /// Notes the first generated token sent (only the first call counts).
    pub fn mark_first_token(&self) {
        if self.first_token.get().is_none() {
            self.first_token.set(Some(self.received.elapsed()));
        }
    }

    /// The gateway's own time so far: everything but waiting on the upstream.
    pub fn overhead(&self) -> Duration {
        self.received
            .elapsed()
            .saturating_sub(self.upstream_wait.get())
    }

    fn overhead_header(&self) -> String {
        format!("{:.3}", self.overhead().as_secs_f64() * 1000.0)
    }

    /// The tracing headers, plus `extra`.
    pub fn headers<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut h = Vec::with_capacity(4 + extra.len());
        h.push(("x-request-id", self.request_id.as_str()));
        if self.protocol == Protocol::Messages {
            h.push(("request-id", self.request_id.as_str()));
        }
        if let Some(c) = &self.client_request_id {
            h.push(("x-client-request-id", c.as_str()));
        }
        h.extend(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        h.extend_from_slice(extra);
        h
    }
}

/// Sends a JSON body with status.
pub fn json(
    w: &mut ResponseWriter,
    trace: &Trace,
    status: u16,
    body: &[u8],
    extra: &[(&str, &str)],
) {
    let overhead = trace.overhead_header();
    let mut headers = trace.headers(&[
        ("content-type", "application/json"),
        ("x-tollgate-overhead-ms", &overhead),
    ]);
    headers.extend_from_slice(extra);
    if let Err(e) = w.send(status, &headers, body) {
        log::debug!("{}: could not send the response: {e}", trace.request_id);
    }
}

/// Sends an error in the trace's protocol shape (with `retry-after` when the error has one).
pub fn error(w: &mut ResponseWriter, trace: &Trace, err: &ApiError) {
    error_with(w, trace, err, &[]);
}

pub fn error_with(w: &mut ResponseWriter, trace: &Trace, err: &ApiError, extra: &[(&str, &str)]) {
    let body = err.body(trace.protocol, &trace.request_id);
    let retry = err.retry_after().map(|s| s.to_string());
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(r) = &retry {
        headers.push(("retry-after", r));
    }
    if err.status() == 401 && trace.protocol != Protocol::Messages {
        headers.push(("www-authenticate", "Bearer"));
    }
    if let Some(v) = should_retry(err.status()) {
        headers.push(("x-should-retry", v));
    }
    headers.extend_from_slice(extra);
    json(w, trace, err.status(), &body, &headers);
}

/// The `x-should-retry` value for an error status, when SDKs should be told: they retry 408, 409, 429 and
/// 5xx, so a status where a retry cannot help says `false`.
pub fn should_retry(status: u16) -> Option<&'static str> {
    (status == 501 || (400..500).contains(&status) && !matches!(status, 408 | 409 | 429))
        .then_some("false")
}

/// Starts an SSE response.
pub fn start_sse(
    w: &mut ResponseWriter,
    trace: &Trace,
    extra: &[(&str, &str)],
) -> std::io::Result<()> {
    let overhead = trace.overhead_header();
    let mut headers = trace.headers(&sse::SSE_HEADERS);
    headers.push(("x-tollgate-overhead-ms", &overhead));
    headers.extend_from_slice(extra);
    let started = w.start_chunked(200, &headers);
    if started.is_ok() && !trace.streaming.replace(true) {
        super::metrics::ACTIVE_STREAMS.fetch_add(1, Ordering::Relaxed);
    }
    started
}
