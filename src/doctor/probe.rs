//! One diagnostic request: the minimal body of a protocol, sent once without and once with streaming, and
//! what came back (status, ids, timings, text, or what went wrong). Answers and streams are read the way the
//! official SDKs read them (their `_streaming.py` modules).

use super::answer::{answer_text, error_fields, stop_reason};
use super::kinds::{
    classify, Connect, Failure, Kind, ProbeOutcome, PLAIN_TIMEOUT, PROMPT, STREAM_TIMEOUT,
};
use super::stream::{read_stream, StreamRead};
use super::text::{clip, fmt_duration};
use crate::protocol::embed::{EmbedInput, EmbedRequest};
use crate::protocol::Protocol;
use std::cell::Cell;
use std::io::{self, BufReader, Read};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The agent: statuses come back as answers, redirects are not followed (a POST would not be), proxies come
/// from the usual environment variables as for the SDKs.
pub(super) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(super::CLIENT)
        .build()
        .into()
}

/// Sends the minimal request of `proto` to the URL its official SDK builds from `base` (`base` + the SDK's
/// path) and reads the answer or the stream.
pub(super) fn run(
    agent: &ureq::Agent,
    proto: Protocol,
    base: &str,
    key: &str,
    model: &str,
    stream: bool,
    client_request_id: &str,
) -> ProbeOutcome {
    let url = format!("{base}{}", proto.sdk_request_path(model, stream));
    let mut out = ProbeOutcome::new(proto, stream, url.clone(), client_request_id);
    let body = proto.probe.probe_body(model, PROMPT, stream).to_string();
    let req = request(agent, &url, proto, key, stream, client_request_id);
    let start = Instant::now();
    let resp = match req.send(body.as_bytes()) {
        Ok(r) => r,
        Err(e) => {
            out.total = start.elapsed();
            out.failure = Some(unanswered(e, stream));
            return out;
        }
    };
    out.headers_at = Some(start.elapsed());
    let head = read_head(&mut out, &resp, client_request_id);

    let first = Rc::new(Cell::new(None));
    let reader = Timed {
        inner: resp.into_body().into_reader(),
        start,
        first: first.clone(),
    };
    if (200..300).contains(&head.status) && stream && head.is_sse {
        let r = read_stream(proto, BufReader::with_capacity(16 * 1024, reader), start);
        out.total = start.elapsed();
        out.first_byte = first.get();
        take_stream(&mut out, r);
        return out;
    }
    // A whole body: the non-streaming answer, an error, or a stream request answered without a stream.
    let mut bytes = Vec::new();
    let read = reader.take(MAX_BODY).read_to_end(&mut bytes);
    out.total = start.elapsed();
    out.first_byte = first.get();
    match read {
        Ok(_) => take_body(&mut out, &head, &bytes),
        Err(e) => out.failure = Some(body_broke(e, head.status)),
    }
    out
}

/// The endpoints besides generation the doctor probes when asked, each with its own model (an embedding
/// model is rarely the chat model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Extra {
    /// Embeddings of the short prompt.
    Embeddings,
    /// A text completion of the short prompt.
    Completions,
}

impl Extra {
    /// Its name in the steps and the report.
    pub(super) fn name(self) -> &'static str {
        match self {
            Extra::Embeddings => "embeddings",
            Extra::Completions => "completions",
        }
    }
}

/// Sends the minimal request of `extra`, as `proto`'s vendor's SDK would (under the base URL its SDK takes),
/// and reads the answer: a vector, or a completion's text.
pub(super) fn run_extra(
    agent: &ureq::Agent,
    proto: Protocol,
    base: &str,
    key: &str,
    model: &str,
    extra: Extra,
    client_request_id: &str,
) -> ProbeOutcome {
    let request_of = || -> Option<(String, Value)> {
        match extra {
            Extra::Embeddings => {
                let e = proto.embedder?;
                let req = EmbedRequest {
                    inputs: vec![EmbedInput::Text(PROMPT.to_string())],
                    ..EmbedRequest::default()
                };
                Some((
                    e.upstream_embed_path(model).into_owned(),
                    e.embed_request(&req, model).ok()?,
                ))
            }
            Extra::Completions => {
                let c = proto.completions?;
                Some((c.upstream_path.to_string(), (c.probe_body)(model, PROMPT)))
            }
        }
    };
    let Some((path, body)) = request_of() else {
        let mut out = super::not_sent(proto, false, client_request_id);
        out.endpoint = Some(extra.name());
        return out;
    };
    let url = format!("{base}{path}");
    let mut out = ProbeOutcome::new(proto, false, url.clone(), client_request_id);
    out.endpoint = Some(extra.name());
    let req = request(agent, &url, proto, key, false, client_request_id);
    let start = Instant::now();
    let resp = match req.send(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => {
            out.total = start.elapsed();
            out.failure = Some(unanswered(e, false));
            return out;
        }
    };
    out.headers_at = Some(start.elapsed());
    let head = read_head(&mut out, &resp, client_request_id);
    let mut bytes = Vec::new();
    let read = resp
        .into_body()
        .into_reader()
        .take(MAX_BODY)
        .read_to_end(&mut bytes);
    out.total = start.elapsed();
    if let Err(e) = read {
        out.failure = Some(body_broke(e, head.status));
        return out;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json: Option<Value> = serde_json::from_slice(&bytes).ok();
    if !(200..300).contains(&head.status) {
        out.failure = Some(status_failure(&head, &text, json.as_ref()));
        return out;
    }
    let got = json.as_ref().and_then(|v| match extra {
        Extra::Embeddings => {
            let e = proto.embedder?.decode_embeddings(v).ok()?;
            let dims = e.vectors.first().map(Vec::len).filter(|&n| n > 0)?;
            Some(format!("a vector of {dims} dimensions"))
        }
        Extra::Completions => (proto.completions?.answer_text)(v).filter(|t| !t.trim().is_empty()),
    });
    match got {
        Some(t) => out.text = t,
        None => {
            out.failure = Some(Failure::new(
                Kind::Answer,
                format!(
                    "HTTP {} but the answer holds no {}: {}",
                    head.status,
                    if extra == Extra::Embeddings {
                        "vector"
                    } else {
                        "text"
                    },
                    clip(text.trim(), 300)
                ),
            ))
        }
    }
    out
}

/// The request as the official SDK of `proto` sends it: JSON, the key in its SDK's headers (a bearer token;
/// for Messages also `x-api-key` with `anthropic-version`), our request id, and the specification's overall
/// timeout.
fn request(
    agent: &ureq::Agent,
    url: &str,
    proto: Protocol,
    key: &str,
    stream: bool,
    client_request_id: &str,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    let mut req = agent
        .post(url)
        .header("content-type", "application/json")
        .header(
            "accept",
            if stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        )
        .header("x-client-request-id", client_request_id);
    for (name, value) in proto.probe.client_headers(key).into_iter().flatten() {
        req = req.header(name, value.as_ref());
    }
    req.config().timeout_global(Some(timeout(stream))).build()
}

/// The specification's overall timeout of a request.
fn timeout(stream: bool) -> Duration {
    if stream {
        STREAM_TIMEOUT
    } else {
        PLAIN_TIMEOUT
    }
}

/// No HTTP answer came: why, with the overall timeout named when it ran out.
fn unanswered(e: ureq::Error, stream: bool) -> Failure {
    let mut f = transport_failure(e);
    if f.kind == Kind::Timeout {
        f.detail = format!(
            "no answer within the overall timeout of {} s ({})",
            timeout(stream).as_secs(),
            f.detail
        );
    }
    f
}

/// What the response head says beyond what goes straight into the outcome.
struct Head {
    status: u16,
    retry_after: Option<String>,
    location: Option<String>,
    is_sse: bool,
}

/// Notes the status, content type and ids of the response head in `out`.
fn read_head(
    out: &mut ProbeOutcome,
    resp: &ureq::http::Response<ureq::Body>,
    client_request_id: &str,
) -> Head {
    let status = resp.status().as_u16();
    out.status = Some(status);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    out.content_type = header("content-type");
    out.request_id = header("x-request-id").or_else(|| header("request-id"));
    out.echoed = header("x-client-request-id").as_deref() == Some(client_request_id);
    Head {
        status,
        retry_after: header("retry-after"),
        location: header("location"),
        is_sse: out
            .content_type
            .as_deref()
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream")),
    }
}

/// A stream read to its end: its text and events, a failure when it carried no text, and a note when
/// every event came at once after a long silence.
fn take_stream(out: &mut ProbeOutcome, r: StreamRead) {
    out.first_text = r.first_text;
    out.events = r.events;
    out.text = r.text;
    out.failure = r.failure;
    if out.failure.is_some() {
        return;
    }
    if out.text.trim().is_empty() {
        out.failure = Some(Failure::new(
            Kind::Answer,
            format!(
                "the stream completed ({} events) but carried no text",
                out.events
            ),
        ));
    } else if let (Some(a), Some(b)) = (r.first_event, r.last_event) {
        // Everything at once after a long wait: something on the way held the events back.
        if out.events >= 3 && a >= Duration::from_secs(2) && b - a < Duration::from_millis(100) {
            out.notes.push(format!(
                "all {} events arrived within {} after {} of silence: something between here and \
                 the model may buffer the stream (a proxy without SSE support); clients then see \
                 no text until the end",
                out.events,
                fmt_duration(b - a),
                fmt_duration(a)
            ));
        }
    }
}

/// The body broke off after the head.
fn body_broke(e: io::Error, status: u16) -> Failure {
    let (kind, detail) = classify(ureq::Error::from(e));
    let kind = if kind == Kind::Timeout {
        Kind::Timeout
    } else {
        Kind::Connect(Connect::Closed)
    };
    Failure::new(
        kind,
        format!("HTTP {status}, then reading the body failed: {detail}"),
    )
}

/// A whole body: an error answer, a stream request answered without a stream, or the answer's text.
fn take_body(out: &mut ProbeOutcome, head: &Head, bytes: &[u8]) {
    let status = head.status;
    let text = String::from_utf8_lossy(bytes).into_owned();
    let json: Option<Value> = serde_json::from_slice(bytes).ok();
    if out.request_id.is_none() {
        out.request_id = json
            .as_ref()
            .and_then(|v| v["request_id"].as_str())
            .map(str::to_string);
    }
    if !(200..300).contains(&status) {
        out.failure = Some(status_failure(head, &text, json.as_ref()));
        return;
    }
    let content_type = out.content_type.as_deref().unwrap_or("(none)");
    if out.stream {
        out.failure = Some(Failure::new(
            Kind::NotSse,
            format!(
                "HTTP {status} with content-type {content_type:?} instead of text/event-stream; the body \
                 starts: {}",
                clip(text.trim(), 300)
            ),
        ));
        return;
    }
    let Some(v) = json else {
        out.failure = Some(Failure::new(
            Kind::Answer,
            format!(
                "HTTP {status} but the body is not JSON (content-type {content_type:?}); it starts: {}",
                clip(text.trim(), 300)
            ),
        ));
        return;
    };
    match answer_text(out.proto, &v) {
        Ok(t) if !t.trim().is_empty() => out.text = t,
        Ok(_) => {
            out.failure = Some(Failure::new(
                Kind::Answer,
                format!(
                    "HTTP {status} but the answer has no text ({}): {}",
                    stop_reason(out.proto, &v),
                    text.trim()
                ),
            ))
        }
        Err(e) => {
            out.failure = Some(Failure::new(
                Kind::Answer,
                format!("HTTP {status} but {e}: {}", text.trim()),
            ))
        }
    }
}

/// A status other than 2xx, with the error body's message and code and the headers a cause may name.
fn status_failure(head: &Head, text: &str, json: Option<&Value>) -> Failure {
    let status = head.status;
    let (message, code) = json.map(error_fields).unwrap_or((None, None));
    let mut f = Failure::new(
        Kind::Status(status),
        if text.trim().is_empty() {
            format!("HTTP {status} with an empty body")
        } else {
            format!("HTTP {status}: {}", text.trim())
        },
    );
    f.message = message;
    f.code = code;
    f.retry_after = head.retry_after.clone();
    f.location = head.location.clone();
    f
}

/// A reader that notes when its first byte arrived.
struct Timed<R> {
    inner: R,
    start: Instant,
    first: Rc<Cell<Option<Duration>>>,
}

impl<R: Read> Read for Timed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 && self.first.get().is_none() {
            self.first.set(Some(self.start.elapsed()));
        }
        Ok(n)
    }
}

/// Largest answer body read.
const MAX_BODY: u64 = 8 * 1024 * 1024;

fn transport_failure(e: ureq::Error) -> Failure {
    let (kind, detail) = classify(e);
    Failure::new(kind, detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ALL;

    #[test]
    fn minimal_bodies() {
        let b = Protocol::Chat.probe.probe_body("m", PROMPT, false);
        assert_eq!(b["messages"][0]["content"], PROMPT);
        assert!(b.get("stream").is_none());
        let b = Protocol::Responses.probe.probe_body("m", PROMPT, true);
        assert_eq!(b["input"], PROMPT);
        assert_eq!(b["stream"], true);
        let b = Protocol::Messages.probe.probe_body("m", PROMPT, false);
        assert_eq!(b["max_tokens"], 256);
        for p in ALL {
            let b = p.probe.probe_body("m", PROMPT, true);
            for field in [
                "tools",
                "reasoning",
                "reasoning_effort",
                "response_format",
                "text",
            ] {
                assert!(b.get(field).is_none(), "{field}");
            }
        }
    }
}
