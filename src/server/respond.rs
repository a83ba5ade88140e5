//! Writing answers with the headers every response carries: `x-request-id` (and `request-id` for Messages
//! clients), the echoed `x-client-request-id`, `retry-after` on errors that have one.

use crate::http::{Exchange, ResponseWriter};
use crate::protocol::{sse, ApiError, Protocol};

/// Identifies one request in headers, logs and records.
#[derive(Clone, Debug)]
pub struct Trace {
    pub request_id: String,
    pub client_request_id: Option<String>,
    /// The protocol whose shape errors take.
    pub protocol: Protocol,
    /// More headers for every answer to this request (rate-limit state).
    pub extra: Vec<(String, String)>,
}

impl Trace {
    pub fn new(ex: &Exchange, protocol: Protocol) -> Trace {
        let client_request_id = ex
            .request
            .header("x-client-request-id")
            .filter(|v| !v.is_empty() && v.len() <= 512)
            .map(str::to_string);
        Trace {
            request_id: crate::util::new_id("req_"),
            client_request_id,
            protocol,
            extra: Vec::new(),
        }
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
    let mut headers = trace.headers(&[("content-type", "application/json")]);
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
    let retry = err.retry_after.map(|s| s.to_string());
    let mut headers: Vec<(&str, &str)> = Vec::new();
    if let Some(r) = &retry {
        headers.push(("retry-after", r));
    }
    if err.status == 401 && trace.protocol != Protocol::Messages {
        headers.push(("www-authenticate", "Bearer"));
    }
    // SDKs retry 408, 409, 429 and 5xx; tell them not to when a retry cannot help.
    if err.status == 501
        || (400..500).contains(&err.status) && !matches!(err.status, 408 | 409 | 429)
    {
        headers.push(("x-should-retry", "false"));
    }
    headers.extend_from_slice(extra);
    json(w, trace, err.status, &body, &headers);
}

/// Starts an SSE response.
pub fn start_sse(
    w: &mut ResponseWriter,
    trace: &Trace,
    extra: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut headers = trace.headers(&sse::SSE_HEADERS);
    headers.extend_from_slice(extra);
    w.start_chunked(200, &headers)
}
