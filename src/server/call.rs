//! The steps every call to a real upstream shares, for passthrough and translation alike: send (timed),
//! turn an upstream HTTP error into the client's error, and read a complete JSON answer (timed, checked).

use serde_json::Value;

use super::generate::Outcome;
use super::respond::Trace;
use super::Gateway;
use crate::config::Upstream;
use crate::protocol::ApiError;
use crate::upstream::http::{self as uphttp, Reply};

/// Sends `body` to `upstream` and returns its 2xx reply; 4xx/5xx answers come back as the client's error
/// (status, `retry-after` and details kept).
pub fn send(
    gw: &Gateway,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    body: &[u8],
    stream: bool,
    beta: Option<&str>,
) -> Result<Reply, ApiError> {
    out.upstream_called = true;
    let sent = std::time::Instant::now();
    let reply = uphttp::send(&gw.agent, upstream, body, stream, beta);
    trace.add_upstream_wait(sent.elapsed());
    let reply = reply?;
    let status = reply.status;
    if status >= 400 {
        let retry_after = reply.retry_after;
        let body = reply.read_all(&upstream.name)?;
        return Err(ApiError::from_upstream(status, &body, retry_after));
    }
    if !(200..300).contains(&status) {
        return Err(ApiError::bad_gateway(format!(
            "upstream `{}` answered HTTP {status}",
            upstream.name
        )));
    }
    Ok(reply)
}

/// Reads a complete answer that must be a JSON object and not an error object; returns the raw bytes (for
/// passing on as they are) and the parsed value.
pub fn read_json(
    trace: &Trace,
    upstream: &Upstream,
    reply: Reply,
) -> Result<(Vec<u8>, Value), ApiError> {
    let (status, content_type) = (reply.status, reply.content_type.clone());
    let reading = std::time::Instant::now();
    let raw = reply.read_all(&upstream.name);
    trace.add_upstream_wait(reading.elapsed());
    let raw = raw?;
    let Some(v) = serde_json::from_slice::<Value>(&raw)
        .ok()
        .filter(Value::is_object)
    else {
        let snippet: String = String::from_utf8_lossy(&raw)
            .trim()
            .chars()
            .take(120)
            .collect();
        return Err(ApiError::bad_gateway(format!(
            "upstream `{}` answered HTTP {status} with a body that is not a JSON object (content-type {content_type:?}): {snippet}",
            upstream.name
        )));
    };
    if v.get("error").is_some_and(|e| !e.is_null())
        || v.get("type").and_then(Value::as_str) == Some("error")
    {
        let mut e = ApiError::from_upstream(502, &raw, None);
        e.status = 502;
        return Err(e);
    }
    Ok((raw, v))
}
