//! Watching a stream relayed as it came (passthrough): each event is parsed once by its protocol's reader
//! (the codec's `observe`, which records what it says in a `relay::Seen`: usage, paid hosted uses, an error
//! it carries, the text it adds, its end); the observer answers the gateway's questions from that, hides the
//! usage chunk a client did not ask for, and writes the protocol's in-stream error when the stream breaks.
//! It also says what text the last event added (for the credential redactor of `secrets.rs`), and an event
//! whose text held a credential is rewritten ([`redact_event`]).

use serde_json::Value;

use super::canon::Usage;
use super::hosted::Uses;
use super::relay::Seen;
use super::sse::{push_event, SseEvent};
use super::{estimate, ApiError, Protocol};

/// Watches one relayed stream.
pub(crate) struct StreamObserver {
    protocol: Protocol,
    seen: Seen,
    /// A running estimate of the tokens in what was produced (summed per event, so cheap per event).
    produced_tokens: u64,
    input_estimate: u64,
    /// Where the text the last event added begins in what was produced.
    added_from: usize,
}

impl StreamObserver {
    /// `hide_usage`: the client did not ask for the usage report (the gateway did).
    pub(crate) fn new(protocol: Protocol, hide_usage: bool, input_estimate: u64) -> Self {
        StreamObserver {
            protocol,
            seen: Seen {
                hide_usage,
                ..Seen::default()
            },
            produced_tokens: 0,
            input_estimate,
            added_from: 0,
        }
    }

    /// The text (answer text, reasoning, tool arguments) the last event observed added, in the order
    /// [`redact_event`] walks its fields.
    pub(crate) fn added_text(&self) -> &str {
        &self.seen.produced[self.added_from..]
    }

    /// Whether the last event observed was an error text rather than part of an answer: the upstream's
    /// error event, any event carrying an `error` object, or one that is not JSON at all.
    pub(crate) fn last_was_error(&self) -> bool {
        self.seen.error_text
    }

    /// Whether the stream reached its end marker (or an error event that ends it).
    pub(crate) fn done(&self) -> bool {
        self.seen.done
    }

    /// The stream is treated as incomplete from here (it was cut).
    pub(crate) fn cut(&mut self) {
        self.seen.done = false;
    }

    /// Whether any text or tool arguments came yet.
    pub(crate) fn produced_anything(&self) -> bool {
        !self.seen.produced.is_empty()
    }

    /// The error event the upstream sent, if any, as the upstream's failure.
    pub(crate) fn upstream_error(&self) -> Option<ApiError> {
        self.seen
            .upstream_error
            .as_deref()
            .map(ApiError::bad_gateway)
    }

    /// The output the upstream reported so far (if any) and an estimate of what was produced.
    pub(crate) fn output_so_far(&self) -> (Option<u64>, u64) {
        (
            self.seen.usage.map(|u| u.output_tokens),
            self.produced_tokens,
        )
    }

    /// The usage the upstream reported for the whole stream: it reached its end with no error and said
    /// what it used (None: it did not, so what it did is not known).
    pub(crate) fn reported_whole(&self) -> Option<Usage> {
        let s = &self.seen;
        s.usage.filter(|_| s.done && s.upstream_error.is_none())
    }

    /// The usage to bill, by the one rule for streams (`estimate::stream_usage`), and whether it is an
    /// estimate.
    pub(crate) fn usage(&self) -> (Usage, bool) {
        let s = &self.seen;
        let completed = s.done && s.upstream_error.is_none();
        estimate::stream_usage(s.usage, completed, &s.produced, self.input_estimate)
    }

    /// The paid hosted uses the stream reported, once it completed (None: it did not, so what ran is not
    /// known).
    pub(crate) fn hosted_uses(&self) -> Option<Uses> {
        let s = &self.seen;
        (s.done && s.upstream_error.is_none()).then(|| {
            s.hosted.uses(
                self.protocol.reports_tool_uses,
                self.protocol.reports_rate_tier,
            )
        })
    }

    /// Looks at one event; returns whether to pass it on.
    pub(crate) fn observe(&mut self, ev: &SseEvent) -> bool {
        self.added_from = self.seen.produced.len();
        self.seen.error_text = false;
        let errors_before = self.seen.upstream_error.is_some();
        let relay = ev.is_comment() || self.protocol.relay.observe(ev, &mut self.seen);
        self.produced_tokens += estimate::tokens(&self.seen.produced[self.added_from..]);
        self.seen.error_text |= !errors_before && self.seen.upstream_error.is_some();
        relay
    }

    /// The protocol's in-stream error for a stream that broke (numbered after the upstream's events where
    /// they are numbered, and followed by what the protocol closes a failed stream with).
    pub(crate) fn error_event(&mut self, err: &ApiError, request_id: &str, out: &mut Vec<u8>) {
        let seq = self.seen.last_seq.map_or(0, |s| s + 1);
        out.extend_from_slice(&self.protocol.reply.error_event(err, request_id, Some(seq)));
        let tail = self
            .protocol
            .failed_tail(err, request_id, seq, &mut self.seen);
        out.extend_from_slice(&tail);
    }
}

/// `ev` (an event of a `protocol` stream) with the edits the credential redactor found applied to the text
/// it adds (the same fields, in the same order, as the protocol's reader reads them), framed again; `None`
/// when it cannot be read or nothing changed. The rewritten event is encoded anew (its other fields keep
/// their values, not their spelling).
pub(crate) fn redact_event(
    protocol: Protocol,
    ev: &SseEvent,
    edits: &[crate::secrets::TextEdit],
) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_str(ev.data.trim()).ok()?;
    let mut offset = 0;
    let mut changed = false;
    let mut edit = |field: Option<&mut Value>| {
        let Some(field) = field else { return };
        let Some(text) = field.as_str() else { return };
        let len = text.len();
        if let Some(new) = crate::secrets::apply(text, offset, edits) {
            *field = Value::String(new);
            changed = true;
        }
        offset += len;
    };
    protocol.relay.text_fields(&mut v, &mut edit);
    if !changed {
        return None;
    }
    let mut out = Vec::new();
    push_event(&mut out, ev.event.as_deref(), &v.to_string());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.into(),
            has_data: true,
            raw: Vec::new(),
            terminated: true,
        }
    }

    #[test]
    fn chat_usage_chunk_is_read_and_hidden_on_request() {
        let mut w = StreamObserver::new(Protocol::Chat, true, 0);
        assert!(w.observe(&ev(
            None,
            r#"{"choices":[{"delta":{"content":"a"}}],"usage":null}"#
        )));
        // Pretty-printed usage is read from the parsed event, not by searching the text.
        assert!(!w.observe(&ev(
            None,
            "{\"choices\" : [],\n \"usage\" : {\"prompt_tokens\":3,\"completion_tokens\":2}}"
        )));
        assert!(w.observe(&ev(None, "[DONE]")));
        assert!(w.done());
        assert_eq!(w.usage().0.output_tokens, 2);
    }

    #[test]
    fn messages_usage_merges_start_and_delta() {
        let mut w = StreamObserver::new(Protocol::Messages, false, 0);
        w.observe(&ev(Some("message_start"), r#"{"message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}"#));
        w.observe(&ev(
            Some("message_delta"),
            r#"{"usage":{"output_tokens":42}}"#,
        ));
        w.observe(&ev(Some("message_stop"), r#"{}"#));
        let u = w.usage().0;
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.output_tokens),
            (15, 5, 42)
        );
        assert!(w.done());
    }

    #[test]
    fn responses_error_event_continues_the_sequence() {
        let mut w = StreamObserver::new(Protocol::Responses, false, 0);
        w.observe(&ev(Some("response.created"), r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}"#));
        w.observe(&ev(
            None,
            r#"{"type" : "response.output_text.delta", "sequence_number" : 4, "delta":"x"}"#,
        ));
        let mut out = Vec::new();
        w.error_event(&ApiError::bad_gateway("broke"), "req_1", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"sequence_number\":5"), "{text}");
        assert!(text.contains("event: response.failed"));
        assert!(text.contains("\"sequence_number\":6"));
        assert!(text.contains("\"id\":\"resp_1\""));
    }

    #[test]
    fn a_responses_error_event_is_read() {
        let mut w = StreamObserver::new(Protocol::Responses, false, 0);
        w.observe(&ev(
            Some("error"),
            r#"{"type":"error","code":"server_error","message":"boom","sequence_number":2}"#,
        ));
        assert!(w.done());
        assert_eq!(
            w.upstream_error()
                .map(|e| e.message().to_string())
                .as_deref(),
            Some("upstream error in stream: boom")
        );
    }

    #[test]
    fn an_event_is_rewritten_where_the_redactor_found_a_credential() {
        use crate::secrets::TextEdit;
        let cut = |start, end, mark| TextEdit { start, end, mark };
        // Chat: content then tool arguments, in the order the observer reads them.
        let mut w = StreamObserver::new(Protocol::Chat, false, 0);
        let data = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"key: SECRET","tool_calls":[{"index":0,"function":{"arguments":"MORE}"}}]}}]}"#;
        let e = ev(None, data);
        w.observe(&e);
        assert_eq!(w.added_text(), "key: SECRETMORE}");
        let out = redact_event(Protocol::Chat, &e, &[cut(5, 15, true)]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let v: Value = serde_json::from_str(text.strip_prefix("data: ").unwrap().trim()).unwrap();
        assert_eq!(v["choices"][0]["delta"]["content"], "key: [redacted]");
        assert_eq!(
            v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "}"
        );
        assert_eq!(v["id"], "c1");
        // Messages: the event name is kept.
        let e = ev(
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"abcdef"}}"#,
        );
        let out =
            String::from_utf8(redact_event(Protocol::Messages, &e, &[cut(0, 3, false)]).unwrap())
                .unwrap();
        assert!(
            out.starts_with("event: content_block_delta\ndata: "),
            "{out}"
        );
        assert!(out.contains(r#""text":"def""#), "{out}");
        // Responses: `delta` is the text itself. No edit in it: nothing to rewrite.
        let e = ev(
            Some("response.output_text.delta"),
            r#"{"type":"response.output_text.delta","delta":"xy"}"#,
        );
        assert!(redact_event(Protocol::Responses, &e, &[cut(5, 9, true)]).is_none());
        let out =
            String::from_utf8(redact_event(Protocol::Responses, &e, &[cut(1, 2, true)]).unwrap())
                .unwrap();
        assert!(out.contains(r#""delta":"x[redacted]""#), "{out}");
    }

    #[test]
    fn error_texts_are_told_from_answers() {
        let mut w = StreamObserver::new(Protocol::Messages, false, 0);
        w.observe(&ev(
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"an error"}}"#,
        ));
        assert!(!w.last_was_error());
        assert_eq!(w.added_text(), "an error");
        // An error object, whatever the event is called.
        w.observe(&ev(None, r#"{"error":{"message":"bad key sk-****abcd"}}"#));
        assert!(w.last_was_error());
        assert_eq!(w.added_text(), "");
        w.observe(&ev(None, "Internal Server Error"));
        assert!(w.last_was_error());
        // Chat: `reasoning` is read when it is text, and an object there does not hide the usage.
        let mut c = StreamObserver::new(Protocol::Chat, false, 0);
        c.observe(&ev(
            None,
            r#"{"choices":[{"delta":{"reasoning":"think"}}],"usage":null}"#,
        ));
        assert_eq!(c.added_text(), "think");
        c.observe(&ev(
            None,
            r#"{"choices":[{"delta":{"reasoning":{"x":1}}}],"usage":{"prompt_tokens":1,"completion_tokens":9}}"#,
        ));
        assert_eq!(c.output_so_far().0, Some(9));
    }
}
