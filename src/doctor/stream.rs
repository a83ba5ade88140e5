//! Reading an answer's event stream the way the official SDKs do (`_streaming.py` of both SDKs, the
//! Responses and Messages stream accumulators): per protocol, the events that carry text, the terminal event,
//! error events, and the rules whose breach makes an SDK fail.

use std::io::BufRead;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::answer::error_fields;
use super::kinds::{classify, Failure, Kind, Proto, STREAM_TIMEOUT};
use super::text::{clip, fmt_duration};
use crate::protocol::sse::SseReader;

/// What reading a stream gave.
#[derive(Debug, Default)]
pub struct StreamRead {
    pub text: String,
    pub events: usize,
    pub first_text: Option<Duration>,
    pub first_event: Option<Duration>,
    pub last_event: Option<Duration>,
    pub failure: Option<Failure>,
}

enum Step {
    Text(String),
    Skip,
    Done,
    Error(String),
    Bad(String),
}

/// Reads a stream of `proto` until its terminal event, an error event, or its end. Times are measured from
/// `start`.
pub fn read_stream<R: BufRead>(proto: Proto, reader: R, start: Instant) -> StreamRead {
    let mut r = StreamRead::default();
    let mut sse = SseReader::new(reader);
    loop {
        let ev = match sse.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                r.failure = Some(ended(proto, r.events));
                return r;
            }
            Err(e) => {
                r.failure = Some(broke(proto, r.events, start.elapsed(), e));
                return r;
            }
        };
        if ev.is_comment() {
            continue;
        }
        if !ev.terminated {
            // The SDKs dispatch an event only at its closing blank line.
            r.failure = Some(Failure::new(
                Kind::StreamCut,
                format!(
                    "the stream ended in the middle of an event after {} events, without `{}`",
                    r.events,
                    proto.terminal()
                ),
            ));
            return r;
        }
        let now = start.elapsed();
        r.events += 1;
        r.first_event.get_or_insert(now);
        r.last_event = Some(now);
        match event_step(proto, ev.event.as_deref(), &ev.data, r.events == 1) {
            Step::Text(t) => {
                if !t.is_empty() {
                    r.first_text.get_or_insert(now);
                }
                r.text.push_str(&t);
            }
            Step::Skip => {}
            Step::Done => return r,
            Step::Error(e) => {
                r.failure = Some(Failure::new(
                    Kind::StreamError,
                    format!(
                        "error event in the stream after {} and {} events: {e}",
                        fmt_duration(now),
                        r.events
                    ),
                ));
                return r;
            }
            Step::Bad(e) => {
                r.failure = Some(Failure::new(Kind::StreamBad, e));
                return r;
            }
        }
    }
}

/// The stream ended cleanly after `events` events, but before its terminal event.
fn ended(proto: Proto, events: usize) -> Failure {
    Failure::new(
        Kind::StreamCut,
        format!(
            "the stream ended after {events} events without `{}`",
            proto.terminal()
        ),
    )
}

/// Reading the stream failed `at` after the start, after `events` events: the overall timeout, or a
/// broken connection.
fn broke(proto: Proto, events: usize, at: Duration, e: std::io::Error) -> Failure {
    let (kind, detail) = classify(ureq::Error::from(e));
    if kind == Kind::Timeout {
        Failure::new(
            Kind::Timeout,
            format!(
                "the overall timeout of {} s ran out after {events} events, before `{}` ({detail})",
                STREAM_TIMEOUT.as_secs(),
                proto.terminal()
            ),
        )
    } else {
        Failure::new(
            Kind::StreamCut,
            format!(
                "the stream broke after {} and {events} events, without `{}`: {detail}",
                fmt_duration(at),
                proto.terminal()
            ),
        )
    }
}

/// What one event of `proto`'s stream means (`first`: it is the stream's first event).
fn event_step(proto: Proto, event: Option<&str>, data: &str, first: bool) -> Step {
    match proto {
        Proto::Chat => chat_event(data),
        Proto::Responses => responses_event(event, data, first),
        Proto::Messages => messages_event(event, data, first),
    }
}

fn parse_data(data: &str) -> Result<Value, Step> {
    serde_json::from_str(data)
        .map_err(|_| Step::Bad(format!("event data is not JSON: {}", clip(data, 300))))
}

/// The message of an error payload, with its type or code.
fn error_event_text(v: &Value) -> String {
    let (message, code) = error_fields(v);
    match (message, code) {
        (Some(m), Some(c)) => format!("{m} ({c})"),
        (Some(m), None) => m,
        _ => clip(&v.to_string(), 1000),
    }
}

/// Chat: `data:` chunks until `[DONE]`; a payload with a truthy `error` is an error (as in the SDK).
fn chat_event(data: &str) -> Step {
    if data.starts_with("[DONE]") {
        return Step::Done;
    }
    let v = match parse_data(data) {
        Ok(v) => v,
        Err(s) => return s,
    };
    if !v["error"].is_null() && v["error"] != Value::Bool(false) {
        return Step::Error(error_event_text(&v));
    }
    let text = v["choices"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["delta"]["content"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default();
    Step::Text(text)
}

/// Responses: typed events until `response.completed`; `error`, `response.failed` and
/// `response.incomplete` end it as failures.
fn responses_event(event: Option<&str>, data: &str, first: bool) -> Step {
    if data.starts_with("[DONE]") {
        return Step::Skip;
    }
    let v = match parse_data(data) {
        Ok(v) => v,
        Err(s) => return s,
    };
    let kind = v["type"].as_str().or(event).unwrap_or("");
    match kind {
        "error" => return Step::Error(error_event_text(&v)),
        "response.failed" => {
            return Step::Error(format!(
                "response.failed: {}",
                error_event_text(&v["response"])
            ))
        }
        "response.incomplete" => {
            return Step::Error(format!(
                "response.incomplete ({})",
                v["response"]["incomplete_details"]["reason"]
                    .as_str()
                    .unwrap_or("no reason")
            ))
        }
        _ => {}
    }
    if v["error"].is_object() {
        return Step::Error(error_event_text(&v));
    }
    if first && kind != "response.created" {
        return Step::Bad(format!(
            "the first event is `{kind}`; the OpenAI SDK's Responses stream requires `response.created` first"
        ));
    }
    match kind {
        "response.output_text.delta" => Step::Text(v["delta"].as_str().unwrap_or("").to_string()),
        "response.completed" => Step::Done,
        _ => Step::Skip,
    }
}

/// Messages: named events until `message_stop`; `error` is an error; the SDK dispatches on the `event:` name
/// and drops events without one.
fn messages_event(event: Option<&str>, data: &str, first: bool) -> Step {
    let Some(name) = event else {
        return Step::Bad(format!(
            "an event has no `event:` line (data: {}); the Anthropic SDK dispatches on the event name and \
             drops such events",
            clip(data, 200)
        ));
    };
    if name == "ping" {
        return Step::Skip;
    }
    let v = match parse_data(data) {
        Ok(v) => v,
        Err(s) => return s,
    };
    if name == "error" || v["type"] == "error" {
        return Step::Error(error_event_text(&v));
    }
    if first && name != "message_start" {
        return Step::Bad(format!(
            "the first event is `{name}`; the Anthropic SDK requires `message_start` first"
        ));
    }
    match name {
        "content_block_delta" if v["delta"]["type"] == "text_delta" => {
            Step::Text(v["delta"]["text"].as_str().unwrap_or("").to_string())
        }
        "message_stop" => Step::Done,
        _ => Step::Skip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(proto: Proto, text: &str) -> StreamRead {
        read_stream(
            proto,
            std::io::Cursor::new(text.as_bytes().to_vec()),
            Instant::now(),
        )
    }

    #[test]
    fn chat_stream_until_done() {
        let r = read(
            Proto::Chat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"po\"}}]}\n\n\
             : keepalive\n\n\
             data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ng\"}}]}\n\n\
             data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
             data: [DONE]\n\n",
        );
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.text, "pong");
        assert_eq!(r.events, 4);
    }

    #[test]
    fn chat_stream_without_done_is_cut() {
        let r = read(
            Proto::Chat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"po\"}}]}\n\n",
        );
        let f = r.failure.unwrap();
        assert_eq!(f.kind, Kind::StreamCut);
        assert!(f.detail.contains("without `data: [DONE]`"), "{}", f.detail);
        // An unterminated last block is not an event (the SDKs do not dispatch it).
        let r = read(Proto::Chat, "data: {\"choices\":[]}\n\ndata: [DONE]");
        assert_eq!(r.failure.unwrap().kind, Kind::StreamCut);
    }

    #[test]
    fn chat_in_stream_error() {
        let r = read(
            Proto::Chat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"po\"}}]}\n\n\
             data: {\"error\":{\"message\":\"upstream broke\",\"type\":\"server_error\"}}\n\n",
        );
        let f = r.failure.unwrap();
        assert_eq!(f.kind, Kind::StreamError);
        assert!(
            f.detail.contains("upstream broke (server_error)"),
            "{}",
            f.detail
        );
        let r = read(Proto::Chat, "data: not json\n\n");
        assert_eq!(r.failure.unwrap().kind, Kind::StreamBad);
    }

    #[test]
    fn responses_stream() {
        let ok = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"error\":null}}\n\n\
                  event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"pong\"}\n\n\
                  event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n";
        let r = read(Proto::Responses, ok);
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.text, "pong");

        let failed = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
                      event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\"}\n\n";
        let f = read(Proto::Responses, failed).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamError);
        assert!(f.detail.contains("boom (server_error)"));

        let failed = "data: {\"type\":\"response.created\",\"response\":{}}\n\n\
                      data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n";
        assert_eq!(
            read(Proto::Responses, failed).failure.unwrap().kind,
            Kind::StreamError
        );

        let cut = "data: {\"type\":\"response.created\",\"response\":{}}\n\n";
        let f = read(Proto::Responses, cut).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamCut);
        assert!(f.detail.contains("response.completed"));

        let order = "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n";
        let f = read(Proto::Responses, order).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamBad);
        assert!(f.detail.contains("response.created"));
    }

    #[test]
    fn messages_stream() {
        let ok = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                  event: ping\ndata: {\"type\":\"ping\"}\n\n\
                  event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"pong\"}}\n\n\
                  event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let r = read(Proto::Messages, ok);
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.text, "pong");

        let err = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                   event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let f = read(Proto::Messages, err).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamError);
        assert!(f.detail.contains("Overloaded (overloaded_error)"));

        let unnamed = "data: {\"type\":\"message_start\",\"message\":{}}\n\n";
        assert_eq!(
            read(Proto::Messages, unnamed).failure.unwrap().kind,
            Kind::StreamBad
        );
        let cut = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
        assert_eq!(
            read(Proto::Messages, cut).failure.unwrap().kind,
            Kind::StreamCut
        );
    }
}
