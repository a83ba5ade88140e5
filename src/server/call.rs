//! The steps every call to a real upstream shares, for passthrough, translation and token counting alike:
//! send (timed), turn an upstream HTTP error into the client's error, and read a complete JSON answer
//! (timed, checked).

use serde_json::Value;

use super::attempt::Attempt;
use crate::protocol::answer::{self, Unusable};
use crate::protocol::ApiError;
use crate::upstream::http::{self as uphttp, Reply};

/// Sends `body` to the attempt's upstream endpoint and returns its 2xx reply; 4xx/5xx answers come back as
/// the client's error (status, `retry-after` and details kept).
pub fn send(
    a: &mut Attempt,
    body: &[u8],
    stream: bool,
    passed: Option<&(&'static str, String)>,
) -> Result<Reply, ApiError> {
    let url = uphttp::endpoint(a.upstream);
    send_to(a, &url, body, stream, passed)
}

/// [`send`] to another endpoint of the upstream (`count_tokens`).
pub fn send_to(
    a: &mut Attempt,
    url: &str,
    body: &[u8],
    stream: bool,
    passed: Option<&(&'static str, String)>,
) -> Result<Reply, ApiError> {
    if let Some(var) = &a.upstream.missing_key {
        // Not sent: the upstream would refuse it. Failover may move on to the model's next upstream.
        return Err(ApiError::bad_gateway(format!(
            "upstream `{}` has no credential: the environment variable {var} (its api_key_env) is not set where \
             tollgate runs. The operator must set it and restart tollgate.",
            a.upstream.name
        ))
        .with_code("upstream_credential_missing"));
    }
    a.answer.called = true;
    let sent = std::time::Instant::now();
    let reply = uphttp::send_to(&a.gw.agent, a.upstream, url, body, stream, passed);
    // Whether the upstream has the whole request (it may be working on it even if no answer comes back);
    // an error answer below says it refused it.
    a.answer.taken = reply.is_ok() || crate::upstream::tap::attempt().sent;
    a.trace.add_upstream_wait(sent.elapsed());
    if reply.is_ok() {
        a.gw.routing.first_byte(&a.upstream.name, sent.elapsed());
    }
    // Every failure before a response head means the upstream did not answer (unreachable, refused, silent
    // past its first-byte timeout): the only kind that may open its breaker.
    let reply = reply.map_err(ApiError::unanswered)?;
    let status = reply.status;
    if status >= 400 {
        a.answer.taken = false;
        let retry_after = reply.retry_after;
        let body = reply.read_all(&a.upstream.name)?;
        return Err(ApiError::from_upstream(status, &body, retry_after));
    }
    if !(200..300).contains(&status) {
        return Err(ApiError::bad_gateway(format!(
            "upstream `{}` answered HTTP {status}",
            a.upstream.name
        )));
    }
    Ok(reply)
}

/// Reads a complete answer that must be a JSON object and not an error object.
pub fn read_json(a: &mut Attempt, reply: Reply) -> Result<Value, ApiError> {
    let (raw, status, content_type) = read_raw(a, reply)?;
    answer::parse(&raw).map_err(|u| unusable(a, u, status, &content_type, &raw))
}

/// [`read_json`] for answers passed on as they are: the same checks, and only `usage` parsed. Returns the
/// raw bytes and the usage object.
pub fn read_usage(a: &mut Attempt, reply: Reply) -> Result<(Vec<u8>, Option<Value>), ApiError> {
    let (raw, status, content_type) = read_raw(a, reply)?;
    match answer::usage_only(&raw) {
        Ok(usage) => Ok((raw, usage)),
        Err(u) => Err(unusable(a, u, status, &content_type, &raw)),
    }
}

fn read_raw(a: &Attempt, mut reply: Reply) -> Result<(Vec<u8>, u16, String), ApiError> {
    let (status, content_type) = (reply.status, std::mem::take(&mut reply.content_type));
    let reading = std::time::Instant::now();
    let raw = reply.read_all(&a.upstream.name);
    a.trace.add_upstream_wait(reading.elapsed());
    Ok((raw?, status, content_type))
}

fn unusable(a: &mut Attempt, u: Unusable, status: u16, content_type: &str, raw: &[u8]) -> ApiError {
    match u {
        Unusable::Error(e) => {
            // An error object in a 2xx answer: the upstream refused the request.
            a.answer.taken = false;
            e
        }
        Unusable::NotJson => {
            let snippet: String = String::from_utf8_lossy(raw)
                .trim()
                .chars()
                .take(120)
                .collect();
            ApiError::bad_gateway(format!(
                "upstream `{}` answered HTTP {status} with a body that is not a JSON object (content-type \
                 {content_type:?}): {snippet}",
                a.upstream.name
            ))
        }
    }
}
