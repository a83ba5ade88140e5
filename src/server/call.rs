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
    let url = uphttp::endpoint(upstream);
    send_call(gw, trace, out, upstream, &url, body, stream, beta)
}

/// [`send`] to another endpoint of the upstream (non-streaming): `count_tokens`.
pub fn send_to(
    gw: &Gateway,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    url: &str,
    body: &[u8],
    beta: Option<&str>,
) -> Result<Reply, ApiError> {
    send_call(gw, trace, out, upstream, url, body, false, beta)
}

#[allow(clippy::too_many_arguments)]
fn send_call(
    gw: &Gateway,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    url: &str,
    body: &[u8],
    stream: bool,
    beta: Option<&str>,
) -> Result<Reply, ApiError> {
    out.upstream_called = true;
    out.upstream_calls += 1;
    let sent = std::time::Instant::now();
    let reply = uphttp::send_to(&gw.agent, upstream, url, body, stream, beta);
    trace.add_upstream_wait(sent.elapsed());
    // Every failure before a response head means the upstream did not answer (unreachable, refused, silent
    // past its first-byte timeout): the only kind that may open its breaker.
    let reply = reply.map_err(ApiError::unanswered)?;
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
    let (raw, status, content_type) = read_raw(trace, upstream, reply)?;
    read_parsed(raw, upstream, status, &content_type)
}

/// What a relayed JSON answer is read for: whether it is an error object, and its usage. Deserialised
/// without building the whole document (other fields are skipped, strings borrowed).
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Value>,
}

/// [`read_json`] for answers passed on as they are: the same checks, and only `usage` parsed.
pub fn read_usage(
    trace: &Trace,
    upstream: &Upstream,
    reply: Reply,
) -> Result<(Vec<u8>, Option<Value>), ApiError> {
    let (raw, status, content_type) = read_raw(trace, upstream, reply)?;
    let peek = raw
        .trim_ascii_start()
        .starts_with(b"{")
        .then(|| serde_json::from_slice::<Peek>(&raw).ok())
        .flatten();
    let Some(peek) = peek else {
        // Duplicate keys, for one, fail the narrow read; the full one decides.
        let (raw, mut v) = read_parsed(raw, upstream, status, &content_type)?;
        let usage = v.get_mut("usage").map(Value::take);
        return Ok((raw, usage));
    };
    let Peek { error, kind, usage } = peek;
    check_not_error(&raw, error.is_some(), kind.as_deref())?;
    drop(kind);
    Ok((raw, usage))
}

fn read_parsed(
    raw: Vec<u8>,
    upstream: &Upstream,
    status: u16,
    content_type: &str,
) -> Result<(Vec<u8>, Value), ApiError> {
    let Some(v) = serde_json::from_slice::<Value>(&raw)
        .ok()
        .filter(Value::is_object)
    else {
        return Err(not_json(upstream, status, content_type, &raw));
    };
    let kind = v.get("type").and_then(Value::as_str);
    check_not_error(&raw, v.get("error").is_some_and(|e| !e.is_null()), kind)?;
    Ok((raw, v))
}

fn read_raw(
    trace: &Trace,
    upstream: &Upstream,
    mut reply: Reply,
) -> Result<(Vec<u8>, u16, String), ApiError> {
    let (status, content_type) = (reply.status, std::mem::take(&mut reply.content_type));
    let reading = std::time::Instant::now();
    let raw = reply.read_all(&upstream.name);
    trace.add_upstream_wait(reading.elapsed());
    Ok((raw?, status, content_type))
}

fn not_json(upstream: &Upstream, status: u16, content_type: &str, raw: &[u8]) -> ApiError {
    let snippet: String = String::from_utf8_lossy(raw)
        .trim()
        .chars()
        .take(120)
        .collect();
    ApiError::bad_gateway(format!(
        "upstream `{}` answered HTTP {status} with a body that is not a JSON object (content-type {content_type:?}): {snippet}",
        upstream.name
    ))
}

/// A 2xx answer that is an error object (`error` set, or Anthropic's `"type": "error"`) is the upstream's
/// failure, passed on as a 502 with its details.
fn check_not_error(raw: &[u8], has_error: bool, kind: Option<&str>) -> Result<(), ApiError> {
    if has_error || kind == Some("error") {
        return Err(ApiError::from_upstream(502, raw, None));
    }
    Ok(())
}
