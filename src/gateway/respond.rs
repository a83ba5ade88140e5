//! Writing answers with the headers every response carries: `x-request-id` (and the protocol's own id
//! header), the echoed `x-client-request-id`, `retry-after` on errors that have one. Every complete body
//! passes here, and leaves with no real upstream credential in it (`secrets::redact`: the exact credential
//! only; the rest byte for byte).

use std::sync::atomic::Ordering;

use super::trace::Trace;
use crate::http::ResponseWriter;
use crate::protocol::codec::Framing;
use crate::protocol::{sse, ApiError};

/// Sends a JSON body with status (an upstream credential in it replaced).
pub(crate) fn json(
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
    let body = crate::secrets::redact(body);
    if let Err(e) = w.send(status, &headers, &body) {
        log::debug!("{}: could not send the response: {e}", trace.request_id);
    }
}

/// [`json`] of a body the writer may keep (no copy of it is made unless a credential in it is replaced).
pub(crate) fn json_owned(
    w: &mut ResponseWriter,
    trace: &Trace,
    status: u16,
    body: Vec<u8>,
    extra: &[(&str, &str)],
) {
    let overhead = trace.overhead_header();
    let mut headers = trace.headers(&[
        ("content-type", "application/json"),
        ("x-tollgate-overhead-ms", &overhead),
    ]);
    headers.extend_from_slice(extra);
    let body = match crate::secrets::redact(&body) {
        std::borrow::Cow::Owned(redacted) => redacted,
        std::borrow::Cow::Borrowed(_) => body,
    };
    if let Err(e) = w.send_owned(status, &headers, body) {
        log::debug!("{}: could not send the response: {e}", trace.request_id);
    }
}

/// Sends an error in the trace's protocol shape (with `retry-after` when the error has one).
pub(crate) fn error(w: &mut ResponseWriter, trace: &Trace, err: &ApiError) {
    error_with(w, trace, err, &[]);
}

pub(crate) fn error_with(
    w: &mut ResponseWriter,
    trace: &Trace,
    err: &ApiError,
    extra: &[(&str, &str)],
) {
    let body = trace.protocol.reply.error_body(err, &trace.request_id);
    let retry = err.retry_after().map(|s| s.to_string());
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(r) = &retry {
        headers.push(("retry-after", r));
    }
    if let Some(challenge) = trace.protocol.challenge.filter(|_| err.status() == 401) {
        headers.push(("www-authenticate", challenge));
    }
    if let Some(v) = should_retry(err.status()) {
        headers.push(("x-should-retry", v));
    }
    headers.extend_from_slice(extra);
    json(w, trace, err.status(), &body, &headers);
}

/// The `x-should-retry` value for an error status, when SDKs should be told: they retry 408, 409, 429 and
/// 5xx, so a status where a retry cannot help says `false`.
pub(crate) fn should_retry(status: u16) -> Option<&'static str> {
    (status == 501 || (400..500).contains(&status) && !matches!(status, 408 | 409 | 429))
        .then_some("false")
}

/// Starts an SSE response (framed as the client reads streams: `Trace::framing`).
pub(crate) fn start_sse(
    w: &mut ResponseWriter,
    trace: &Trace,
    extra: &[(&str, &str)],
) -> std::io::Result<()> {
    let overhead = trace.overhead_header();
    let array = trace.framing == Framing::JsonArray;
    let framed = if array {
        &sse::JSON_ARRAY_HEADERS
    } else {
        &sse::SSE_HEADERS
    };
    let mut headers = trace.headers(framed);
    headers.push(("x-tollgate-overhead-ms", &overhead));
    headers.extend_from_slice(extra);
    let started = if array {
        w.start_reframed(200, &headers, Box::new(sse::JsonArray::default()))
    } else {
        w.start_chunked(200, &headers)
    };
    if started.is_ok() && !trace.streaming.replace(true) {
        trace.server.streams.fetch_add(1, Ordering::Relaxed);
    }
    started
}
