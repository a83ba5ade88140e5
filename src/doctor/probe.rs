//! One diagnostic request: the minimal body of a protocol, sent once without and once with streaming, and
//! what came back (status, ids, timings, text, or what went wrong). Answers and streams are read the way the
//! official SDKs read them (their `_streaming.py` modules).

use super::answer::{answer_text, error_fields, stop_reason};
use super::kinds::{
    classify, Connect, Failure, Kind, Outcome, Proto, PLAIN_TIMEOUT, STREAM_TIMEOUT,
};
use super::stream::read_stream;
use super::text::{clip, fmt_duration};
use std::cell::Cell;
use std::io::{self, BufReader, Read};
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The agent: statuses come back as answers, redirects are not followed (a POST would not be), proxies come
/// from the usual environment variables as for the SDKs.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(super::CLIENT)
        .build()
        .into()
}

/// Sends the minimal request of `proto` to the URL its official SDK builds from `base` (`base` + the SDK's
/// path) and reads the answer or the stream.
pub fn run(
    agent: &ureq::Agent,
    proto: Proto,
    base: &str,
    key: &str,
    model: &str,
    stream: bool,
    client_request_id: &str,
) -> Outcome {
    let url = format!("{base}{}", proto.sdk_path());
    let mut out = Outcome {
        proto,
        stream,
        url: url.clone(),
        client_request_id: client_request_id.to_string(),
        status: None,
        content_type: None,
        request_id: None,
        echoed: false,
        headers_at: None,
        first_byte: None,
        first_text: None,
        total: Duration::ZERO,
        text: String::new(),
        events: 0,
        failure: None,
        notes: Vec::new(),
    };
    let body = proto.body(model, stream).to_string();
    let mut req = agent
        .post(&url)
        .header("content-type", "application/json")
        .header(
            "accept",
            if stream {
                "text/event-stream"
            } else {
                "application/json"
            },
        )
        .header("x-client-request-id", client_request_id)
        .header("authorization", format!("Bearer {key}"));
    if proto == Proto::Messages {
        req = req
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01");
    }
    let req = req
        .config()
        .timeout_global(Some(if stream {
            STREAM_TIMEOUT
        } else {
            PLAIN_TIMEOUT
        }))
        .build();
    let start = Instant::now();
    let resp = req.send(body.as_bytes());
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            out.total = start.elapsed();
            let mut f = transport_failure(e);
            if f.kind == Kind::Timeout {
                f.detail = format!(
                    "no answer within the overall timeout of {} s ({})",
                    if stream {
                        STREAM_TIMEOUT
                    } else {
                        PLAIN_TIMEOUT
                    }
                    .as_secs(),
                    f.detail
                );
            }
            out.failure = Some(f);
            return out;
        }
    };
    out.headers_at = Some(start.elapsed());
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
    let retry_after = header("retry-after");
    let location = header("location");
    let is_sse = out
        .content_type
        .as_deref()
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"));

    let first = Rc::new(Cell::new(None));
    let reader = Timed {
        inner: resp.into_body().into_reader(),
        start,
        first: first.clone(),
    };

    if (200..300).contains(&status) && stream && is_sse {
        let r = read_stream(proto, BufReader::with_capacity(16 * 1024, reader), start);
        out.total = start.elapsed();
        out.first_byte = first.get();
        out.first_text = r.first_text;
        out.events = r.events;
        out.text = r.text;
        out.failure = r.failure;
        if out.failure.is_none() {
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
                if out.events >= 3
                    && a >= Duration::from_secs(2)
                    && b - a < Duration::from_millis(100)
                {
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
        return out;
    }

    // A whole body: the non-streaming answer, an error, or a stream request answered without a stream.
    let mut bytes = Vec::new();
    let read = reader.take(MAX_BODY).read_to_end(&mut bytes);
    out.total = start.elapsed();
    out.first_byte = first.get();
    if let Err(e) = read {
        let (kind, detail) = classify(ureq::Error::from(e));
        let kind = if kind == Kind::Timeout {
            Kind::Timeout
        } else {
            Kind::Connect(Connect::Closed)
        };
        out.failure = Some(Failure::new(
            kind,
            format!("HTTP {status}, then reading the body failed: {detail}"),
        ));
        return out;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json: Option<Value> = serde_json::from_slice(&bytes).ok();
    if out.request_id.is_none() {
        out.request_id = json
            .as_ref()
            .and_then(|v| v["request_id"].as_str())
            .map(str::to_string);
    }

    if !(200..300).contains(&status) {
        let (message, code) = json.as_ref().map(error_fields).unwrap_or((None, None));
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
        f.retry_after = retry_after;
        f.location = location;
        out.failure = Some(f);
        return out;
    }
    if stream {
        out.failure = Some(Failure::new(
            Kind::NotSse,
            format!(
                "HTTP {status} with content-type {:?} instead of text/event-stream; the body starts: {}",
                out.content_type.as_deref().unwrap_or("(none)"),
                clip(text.trim(), 300)
            ),
        ));
        return out;
    }
    let Some(v) = json else {
        out.failure = Some(Failure::new(
            Kind::Answer,
            format!(
                "HTTP {status} but the body is not JSON (content-type {:?}); it starts: {}",
                out.content_type.as_deref().unwrap_or("(none)"),
                clip(text.trim(), 300)
            ),
        ));
        return out;
    };
    match answer_text(proto, &v) {
        Ok(t) if !t.trim().is_empty() => out.text = t,
        Ok(_) => {
            out.failure = Some(Failure::new(
                Kind::Answer,
                format!(
                    "HTTP {status} but the answer has no text ({}): {}",
                    stop_reason(proto, &v),
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
    out
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
    use crate::doctor::kinds::{MESSAGES_MAX_TOKENS, PROMPT};

    #[test]
    fn minimal_bodies() {
        let b = Proto::Chat.body("m", false);
        assert_eq!(b["messages"][0]["content"], PROMPT);
        assert!(b.get("stream").is_none());
        let b = Proto::Responses.body("m", true);
        assert_eq!(b["input"], PROMPT);
        assert_eq!(b["stream"], true);
        let b = Proto::Messages.body("m", false);
        assert_eq!(b["max_tokens"], MESSAGES_MAX_TOKENS);
        for p in Proto::ALL {
            let b = p.body("m", true);
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
