//! The head screen: the one place that decides, from a request's head alone, whether its body may be read
//! (identity before memory). The HTTP layer asks it before anything of a body is read or reserved, and
//! answers what it refuses with the status the path would give (401 without valid credentials, 404 for an
//! unknown path, 405 for a method the path does not take; `router.rs` `refuse_body`), then closes the
//! connection.
//!
//! A request to a model (generation, token counting) without a valid key is refused whether or not it has a
//! body. Any other request that carries a body is refused unless it is an admin call with the right admin
//! token: no other path takes one.

use std::sync::Arc;
use std::time::Instant;

use super::{report, router};
use crate::gateway::Gateway;
use crate::gateway::{respond, trace};
use crate::http::{self, HttpRequest, Incoming};
use crate::protocol::request::Endpoint;
use crate::protocol::{ApiError, Protocol};

/// The screen the HTTP layer calls with every request head.
pub(super) fn screen(gw: Arc<Gateway>) -> Arc<http::Screen> {
    Arc::new(move |head: &Incoming| {
        let req = head.request;
        let protocol = match Endpoint::from_path(&req.path) {
            Some(endpoint) => endpoint.protocol(),
            None => Protocol::for_request(req),
        };
        let refused = if head.has_body {
            router::refuse_body(&gw, req, head.peer.ip())
        } else {
            // A head alone is refused here only on a model's path (the handler answers every other).
            let endpoint = Endpoint::from_path(&req.path).filter(|_| req.method == "POST")?;
            crate::access::authenticate(req, endpoint.protocol(), &gw.keys)
                .err()
                .map(|e| (e, None))
        };
        let (error, allow) = refused?;
        Some(early(&gw, req, protocol, &error, allow))
    })
}

/// The answer to a refused head, with the headers every answer carries, and its request log line.
fn early(
    gw: &Gateway,
    req: &HttpRequest,
    protocol: Protocol,
    err: &ApiError,
    allow: Option<&str>,
) -> http::Early {
    let began = Instant::now();
    let status = err.status();
    // The count of requests without a valid key (a wrong admin token is not one).
    if status == 401 && err.cause() != crate::protocol::Cause::InvalidAdminToken {
        gw.metrics.unauthorized(crate::util::unix_now());
    }
    let request_id = crate::util::new_id("req_");
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("x-request-id".to_string(), request_id.clone()),
    ];
    if let Some(name) = protocol.id_header {
        headers.push((name.to_string(), request_id.clone()));
    }
    if let Some(challenge) = protocol.challenge.filter(|_| status == 401) {
        headers.push(("www-authenticate".to_string(), challenge.to_string()));
    }
    if let Some(s) = err.retry_after() {
        headers.push(("retry-after".to_string(), s.to_string()));
    }
    if let Some(v) = respond::should_retry(status) {
        headers.push(("x-should-retry".to_string(), v.to_string()));
    }
    if let Some(a) = allow {
        headers.push(("allow".to_string(), a.to_string()));
    }
    if let Some(c) = trace::client_request_id(req) {
        headers.push(("x-client-request-id".to_string(), c.to_string()));
    }
    let body = protocol.reply.error_body(err, &request_id);
    log_line(req, protocol, &request_id, err);
    headers.push((
        "x-tollgate-overhead-ms".to_string(),
        format!("{:.3}", began.elapsed().as_secs_f64() * 1000.0),
    ));
    http::Early {
        status,
        headers,
        body,
    }
}

/// The request log line of a request answered from its head (the same fields as every request line).
fn log_line(req: &HttpRequest, protocol: Protocol, request_id: &str, err: &ApiError) {
    let mut out = super::outcome::Outcome::default();
    out.answer.fail(err.clone());
    let line = report::LogLine {
        request_id,
        client_request_id: trace::client_request_id(req),
        protocol,
        latency_ms: 0,
        overhead_ms: 0.0,
    };
    report::write_line(&line, &out);
}
