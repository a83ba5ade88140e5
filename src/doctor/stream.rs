//! Reading an answer's event stream the way the official SDKs do (`_streaming.py` of both SDKs, the
//! Responses and Messages stream accumulators): per protocol, the events that carry text, the terminal event,
//! error events, and the rules whose breach makes an SDK fail.

use std::io::BufRead;
use std::time::{Duration, Instant};

use super::kinds::{classify, Failure, Kind, STREAM_TIMEOUT};
use super::text::fmt_duration;
use crate::protocol::client::ClientEvent;
use crate::protocol::sse::SseReader;
use crate::protocol::Protocol;

/// What reading a stream gave.
#[derive(Debug, Default)]
pub(super) struct StreamRead {
    pub text: String,
    pub events: usize,
    pub first_text: Option<Duration>,
    pub first_event: Option<Duration>,
    pub last_event: Option<Duration>,
    pub failure: Option<Failure>,
}

/// Reads a stream of `proto` until its terminal event, an error event, or its end. Times are measured from
/// `start`.
pub(super) fn read_stream<R: BufRead>(proto: Protocol, reader: R, start: Instant) -> StreamRead {
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
                    r.events, proto.stream_terminal
                ),
            ));
            return r;
        }
        let now = start.elapsed();
        r.events += 1;
        r.first_event.get_or_insert(now);
        r.last_event = Some(now);
        match event_step(proto, ev.event.as_deref(), &ev.data, r.events == 1) {
            ClientEvent::Text(t) => {
                if !t.is_empty() {
                    r.first_text.get_or_insert(now);
                }
                r.text.push_str(&t);
            }
            ClientEvent::Skip => {}
            ClientEvent::Done => return r,
            ClientEvent::Last(t) => {
                if !t.is_empty() {
                    r.first_text.get_or_insert(now);
                }
                r.text.push_str(&t);
                return r;
            }
            ClientEvent::Error(e) => {
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
            ClientEvent::Bad(e) => {
                r.failure = Some(Failure::new(Kind::StreamBad, e));
                return r;
            }
        }
    }
}

/// The stream ended cleanly after `events` events, but before its terminal event.
fn ended(proto: Protocol, events: usize) -> Failure {
    Failure::new(
        Kind::StreamCut,
        format!(
            "the stream ended after {events} events without `{}`",
            proto.stream_terminal
        ),
    )
}

/// Reading the stream failed `at` after the start, after `events` events: the overall timeout, or a
/// broken connection.
fn broke(proto: Protocol, events: usize, at: Duration, e: std::io::Error) -> Failure {
    let (kind, detail) = classify(ureq::Error::from(e));
    if kind == Kind::Timeout {
        Failure::new(
            Kind::Timeout,
            format!(
                "the overall timeout of {} s ran out after {events} events, before `{}` ({detail})",
                STREAM_TIMEOUT.as_secs(),
                proto.stream_terminal
            ),
        )
    } else {
        Failure::new(
            Kind::StreamCut,
            format!(
                "the stream broke after {} and {events} events, without `{}`: {detail}",
                fmt_duration(at),
                proto.stream_terminal
            ),
        )
    }
}

/// What one event of `proto`'s stream means (`first`: it is the stream's first event).
fn event_step(proto: Protocol, event: Option<&str>, data: &str, first: bool) -> ClientEvent {
    proto.probe.client_event(event, data, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(proto: Protocol, text: &str) -> StreamRead {
        read_stream(
            proto,
            std::io::Cursor::new(text.as_bytes().to_vec()),
            Instant::now(),
        )
    }

    #[test]
    fn chat_stream_until_done() {
        let r = read(
            Protocol::Chat,
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
            Protocol::Chat,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"po\"}}]}\n\n",
        );
        let f = r.failure.unwrap();
        assert_eq!(f.kind, Kind::StreamCut);
        assert!(f.detail.contains("without `data: [DONE]`"), "{}", f.detail);
        // An unterminated last block is not an event (the SDKs do not dispatch it).
        let r = read(Protocol::Chat, "data: {\"choices\":[]}\n\ndata: [DONE]");
        assert_eq!(r.failure.unwrap().kind, Kind::StreamCut);
    }

    #[test]
    fn chat_in_stream_error() {
        let r = read(
            Protocol::Chat,
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
        let r = read(Protocol::Chat, "data: not json\n\n");
        assert_eq!(r.failure.unwrap().kind, Kind::StreamBad);
    }

    #[test]
    fn responses_stream() {
        let ok = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"error\":null}}\n\n\
                  event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"pong\"}\n\n\
                  event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n";
        let r = read(Protocol::Responses, ok);
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.text, "pong");

        let failed = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n\
                      event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\"}\n\n";
        let f = read(Protocol::Responses, failed).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamError);
        assert!(f.detail.contains("boom (server_error)"));

        let failed = "data: {\"type\":\"response.created\",\"response\":{}}\n\n\
                      data: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n";
        assert_eq!(
            read(Protocol::Responses, failed).failure.unwrap().kind,
            Kind::StreamError
        );

        let cut = "data: {\"type\":\"response.created\",\"response\":{}}\n\n";
        let f = read(Protocol::Responses, cut).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamCut);
        assert!(f.detail.contains("response.completed"));

        let order = "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n";
        let f = read(Protocol::Responses, order).failure.unwrap();
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
        let r = read(Protocol::Messages, ok);
        assert!(r.failure.is_none(), "{:?}", r.failure);
        assert_eq!(r.text, "pong");

        let err = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                   event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
        let f = read(Protocol::Messages, err).failure.unwrap();
        assert_eq!(f.kind, Kind::StreamError);
        assert!(f.detail.contains("Overloaded (overloaded_error)"));

        let unnamed = "data: {\"type\":\"message_start\",\"message\":{}}\n\n";
        assert_eq!(
            read(Protocol::Messages, unnamed).failure.unwrap().kind,
            Kind::StreamBad
        );
        let cut = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
        assert_eq!(
            read(Protocol::Messages, cut).failure.unwrap().kind,
            Kind::StreamCut
        );
    }
}
