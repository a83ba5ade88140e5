//! The steps every call to a real upstream shares, for passthrough, translation and token counting alike:
//! send (timed), turn an upstream HTTP error into the client's error, and read a complete JSON answer
//! (timed, checked). Each returns what it learnt (how far the call got, why an answer was unusable) for the
//! answering step's `Answer`.

use serde_json::Value;

use super::attempt::Attempt;
use super::outcome::Reached;
use crate::protocol::answer::{self, Unusable};
use crate::protocol::ApiError;
use crate::upstream::http::{self as uphttp, Reply};

/// A call's 2xx reply (4xx/5xx answers come back as the client's error, status, `retry-after` and details
/// kept), and how far the call got.
pub(super) struct Sent {
    pub reached: Reached,
    pub reply: Result<Reply, ApiError>,
}

/// Why a complete answer could not be used; `refused`: it was an error object, so the upstream refused the
/// request (it did not take it).
pub(super) struct Unread {
    pub error: ApiError,
    pub refused: bool,
}

/// Sends `body` to the attempt's upstream endpoint (generation's, or a text completion's). `passed`: a header of the client's request passed on.
pub(super) fn send(
    a: &Attempt,
    body: &[u8],
    stream: bool,
    passed: Option<&(&'static str, String)>,
) -> Sent {
    let completion =
        a.p.endpoint
            .completes()
            .then(|| uphttp::completions_endpoint(a.upstream))
            .flatten();
    let url =
        completion.unwrap_or_else(|| uphttp::endpoint(a.upstream, &a.p.upstream_model, stream));
    send_to(a, &url, body, stream, passed)
}

/// [`send`] to another endpoint of the upstream (token counting).
pub(super) fn send_to(
    a: &Attempt,
    url: &str,
    body: &[u8],
    stream: bool,
    passed: Option<&(&'static str, String)>,
) -> Sent {
    if let Some(var) = &a.upstream.missing_key {
        // Not sent: the upstream would refuse it. Failover may move on to the model's next upstream.
        let e = ApiError::bad_gateway(format!(
            "upstream `{}` has no credential: the environment variable {var} (its api_key_env) is not set where \
             tollgate runs. The operator must set it and restart tollgate.",
            a.upstream.name
        ))
        .with_cause(crate::protocol::Cause::UpstreamCredentialMissing);
        return Sent {
            reached: Reached::default(),
            reply: Err(e),
        };
    }
    let sent = std::time::Instant::now();
    let reply = uphttp::send_to(&a.gw.agent, a.upstream, url, body, stream, passed);
    // Whether the upstream has the whole request (it may be working on it even if no answer comes back);
    // an error answer below says it refused it.
    let mut reached = Reached {
        called: true,
        taken: reply.is_ok() || crate::upstream::tap::attempt().sent,
    };
    a.trace.add_upstream_wait(sent.elapsed());
    if reply.is_ok() {
        a.gw.routing.first_byte(&a.upstream.name, sent.elapsed());
    }
    let reply = match reply {
        Ok(r) if r.status >= 400 => {
            reached.taken = false;
            Err(error_answer(a, r))
        }
        Ok(r) if !(200..300).contains(&r.status) => Err(ApiError::bad_gateway(format!(
            "upstream `{}` answered HTTP {}",
            a.upstream.name, r.status
        ))),
        Ok(r) => Ok(r),
        // Every failure before a response head means the upstream did not answer (unreachable, refused,
        // silent past its first-byte timeout): the only kind that may open its breaker.
        Err(e) => Err(e.unanswered()),
    };
    Sent { reached, reply }
}

/// An upstream's error answer (4xx, 5xx) as the client's error.
fn error_answer(a: &Attempt, reply: Reply) -> ApiError {
    let (status, retry_after) = (reply.status, reply.retry_after);
    match reply.read_all(&a.upstream.name) {
        Ok(body) => ApiError::from_upstream(status, &body, retry_after),
        Err(e) => e,
    }
}

/// Reads a complete answer that must be a JSON object and not an error object; read into `buf` (a buffer
/// to reuse), which comes back emptied.
pub(super) fn read_json(
    a: &Attempt,
    reply: Reply,
    buf: Vec<u8>,
) -> Result<(Value, Vec<u8>), Unread> {
    let (mut raw, status, content_type) = read_raw(a, reply, buf)?;
    let v = answer::parse(&raw).map_err(|u| unusable(a, u, status, &content_type, &raw))?;
    raw.clear();
    Ok((v, raw))
}

/// [`read_json`] for answers passed on as they are: the same checks, and only `usage` parsed. Returns the
/// raw bytes (read into `buf`, a buffer to reuse) and the usage object.
pub(super) fn read_usage(
    a: &Attempt,
    reply: Reply,
    buf: Vec<u8>,
) -> Result<(Vec<u8>, Option<Value>), Unread> {
    let (raw, status, content_type) = read_raw(a, reply, buf)?;
    match answer::usage_only(&raw, a.trace.protocol.usage_field) {
        Ok(usage) => Ok((raw, usage)),
        Err(u) => Err(unusable(a, u, status, &content_type, &raw)),
    }
}

fn read_raw(a: &Attempt, mut reply: Reply, buf: Vec<u8>) -> Result<(Vec<u8>, u16, String), Unread> {
    let (status, content_type) = (reply.status, std::mem::take(&mut reply.content_type));
    let reading = std::time::Instant::now();
    let raw = reply.read_into(&a.upstream.name, buf);
    a.trace.add_upstream_wait(reading.elapsed());
    match raw {
        Ok(raw) => Ok((raw, status, content_type)),
        Err(error) => Err(Unread {
            error,
            refused: false,
        }),
    }
}

fn unusable(a: &Attempt, u: Unusable, status: u16, content_type: &str, raw: &[u8]) -> Unread {
    match u {
        // An error object in a 2xx answer: the upstream refused the request.
        Unusable::Error(error) => Unread {
            error,
            refused: true,
        },
        Unusable::NotJson => {
            let snippet: String = String::from_utf8_lossy(raw)
                .trim()
                .chars()
                .take(120)
                .collect();
            let error = ApiError::bad_gateway(format!(
                "upstream `{}` answered HTTP {status} with a body that is not a JSON object (content-type \
                 {content_type:?}): {snippet}",
                a.upstream.name
            ));
            Unread {
                error,
                refused: false,
            }
        }
    }
}
