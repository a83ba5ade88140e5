//! Watching a stream relayed as it came (passthrough): each event is parsed once, for its type, its
//! sequence number, the usage it reports (paid hosted uses included), an error it carries and the text it
//! adds; the observer says whether
//! the stream completed, hides the usage chunk a Chat client did not ask for, and writes the protocol's
//! in-stream error when the stream breaks.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use super::canon::Usage;
use super::hosted::{Tally, Uses};
use super::sse::{push_event, SseEvent};
use super::{chat, estimate, messages, responses, ApiError, Protocol};

/// The fields of an event that the observer reads, whatever the protocol; others are skipped, strings are
/// borrowed where they can be.
#[derive(Deserialize, Default)]
struct Peek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    message: Option<MessageField<'a>>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(borrow, default)]
    delta: Option<DeltaField<'a>>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    /// Responses `response.output_item.*`: the item's type.
    #[serde(borrow, default)]
    item: Option<Tagged<'a>>,
    /// Messages `content_block_start`: the block's type and (server tools) name.
    #[serde(borrow, default)]
    content_block: Option<Tagged<'a>>,
    /// Chat chunks: the tier the answer is served at.
    #[serde(borrow, default)]
    service_tier: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Tagged<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// Messages' `message` object (`message_start`), or the `message` text of a Responses `error` event.
#[derive(Deserialize)]
#[serde(untagged)]
enum MessageField<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Object {
        #[serde(default)]
        usage: Option<Value>,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DeltaField<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Block(#[serde(borrow)] Block<'a>),
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChatDelta<'a>>,
}

#[derive(Deserialize)]
struct ChatDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

/// Watches one relayed stream.
pub struct StreamObserver {
    protocol: Protocol,
    /// Chat: the client did not ask for the usage chunk (tollgate did), so it is not passed on.
    hide_usage: bool,
    usage: Option<Usage>,
    done: bool,
    /// The message of an error event the upstream itself sent inside the stream.
    upstream_error: Option<String>,
    last_seq: Option<u64>,
    /// Responses: the opening response object, for `response.failed`.
    response: Option<Value>,
    /// Text and tool arguments seen so far, for an estimate when the stream ends without usage.
    produced: String,
    /// A running estimate of the tokens in `produced` (summed per event, so cheap per event).
    produced_tokens: u64,
    input_estimate: u64,
    /// Paid hosted uses and the tier, as the stream reports them.
    hosted: Tally,
}

impl StreamObserver {
    pub fn new(protocol: Protocol, hide_usage: bool, input_estimate: u64) -> Self {
        StreamObserver {
            protocol,
            hide_usage,
            usage: None,
            done: false,
            upstream_error: None,
            last_seq: None,
            response: None,
            produced: String::new(),
            produced_tokens: 0,
            input_estimate,
            hosted: Tally::default(),
        }
    }

    /// Whether the stream reached its end marker (or an error event that ends it).
    pub fn done(&self) -> bool {
        self.done
    }

    /// The stream is treated as incomplete from here (it was cut).
    pub fn cut(&mut self) {
        self.done = false;
    }

    /// Whether any text or tool arguments came yet.
    pub fn produced_anything(&self) -> bool {
        !self.produced.is_empty()
    }

    /// The error event the upstream sent, if any, as the upstream's failure.
    pub fn upstream_error(&self) -> Option<ApiError> {
        self.upstream_error.as_deref().map(ApiError::bad_gateway)
    }

    /// The output the upstream reported so far (if any) and an estimate of what was produced.
    pub fn output_so_far(&self) -> (Option<u64>, u64) {
        (self.usage.map(|u| u.output_tokens), self.produced_tokens)
    }

    /// The usage to bill, by the one rule for streams (`estimate::stream_usage`), and whether it is an
    /// estimate.
    pub fn usage(&self) -> (Usage, bool) {
        let completed = self.done && self.upstream_error.is_none();
        estimate::stream_usage(self.usage, completed, &self.produced, self.input_estimate)
    }

    /// The paid hosted uses the stream reported, once it completed (None: it did not, so what ran is not
    /// known).
    pub fn hosted_uses(&self) -> Option<Uses> {
        (self.done && self.upstream_error.is_none()).then(|| self.hosted.uses(self.protocol))
    }

    /// Looks at one event; returns whether to pass it on.
    pub fn observe(&mut self, ev: &SseEvent) -> bool {
        if ev.is_comment() {
            return true;
        }
        let data = ev.data.trim();
        if self.protocol == Protocol::Chat && data.starts_with("[DONE]") {
            self.done = true;
            return true;
        }
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            return true;
        };
        let before = self.produced.len();
        self.collect(&peek);
        self.produced_tokens += estimate::tokens(&self.produced[before..]);
        if let Some(seq) = peek.sequence_number {
            self.last_seq = Some(seq);
        }
        let name = ev
            .event
            .as_deref()
            .or(peek.kind.as_deref())
            .unwrap_or("")
            .to_string();
        match self.protocol {
            Protocol::Chat => return self.observe_chat(peek),
            Protocol::Messages => self.observe_messages(&name, peek),
            Protocol::Responses => self.observe_responses(&name, peek),
        }
        true
    }

    fn collect(&mut self, peek: &Peek) {
        match &peek.delta {
            Some(DeltaField::Text(t)) => self.produced.push_str(t),
            Some(DeltaField::Block(b)) => {
                for t in [&b.text, &b.thinking, &b.partial_json]
                    .into_iter()
                    .flatten()
                {
                    self.produced.push_str(t);
                }
            }
            None => {}
        }
        for c in peek.choices.iter().flatten() {
            let Some(d) = &c.delta else { continue };
            for t in [&d.content, &d.reasoning_content].into_iter().flatten() {
                self.produced.push_str(t);
            }
            for call in d.tool_calls.iter().filter_map(Value::as_array).flatten() {
                if let Some(a) = call.pointer("/function/arguments").and_then(Value::as_str) {
                    self.produced.push_str(a);
                }
            }
        }
    }

    fn observe_chat(&mut self, peek: Peek) -> bool {
        if let Some(t) = &peek.service_tier {
            self.hosted.tier(t);
        }
        if let Some(e) = peek.error.as_ref().filter(|e| !e.is_null()) {
            self.done = true;
            self.upstream_error = Some(error_message(e));
            return true;
        }
        if let Some(u) = peek.usage.as_ref().and_then(chat::usage_from) {
            self.usage = Some(u);
            let no_choices = peek.choices.as_ref().is_none_or(Vec::is_empty);
            if self.hide_usage && no_choices {
                return false;
            }
        }
        true
    }

    fn observe_messages(&mut self, name: &str, peek: Peek) {
        match name {
            "message_start" | "message_delta" => {
                let u = if name == "message_start" {
                    match &peek.message {
                        Some(MessageField::Object { usage }) => usage.as_ref(),
                        _ => None,
                    }
                } else {
                    peek.usage.as_ref().or(match &peek.delta {
                        Some(DeltaField::Block(b)) => b.usage.as_ref(),
                        _ => None,
                    })
                };
                if let Some(u) = u {
                    self.hosted.usage(u);
                }
                let Some(new) = u.and_then(messages::usage_from) else {
                    return;
                };
                let mut merged = self.usage.unwrap_or_default();
                merged.output_tokens = new.output_tokens.max(merged.output_tokens);
                if new.input_tokens > 0 {
                    merged.input_tokens = new.input_tokens;
                    merged.cached_input_tokens = new.cached_input_tokens;
                    merged.cache_creation_input_tokens = new.cache_creation_input_tokens;
                }
                merged.reasoning_tokens = merged.reasoning_tokens.max(new.reasoning_tokens);
                self.usage = Some(merged);
            }
            "content_block_start" => {
                if let Some(Tagged {
                    kind: Some(k),
                    name,
                }) = &peek.content_block
                {
                    self.hosted.item(k, name.as_deref());
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                self.done = true;
                let e = peek.error.unwrap_or(Value::Null);
                self.upstream_error = Some(error_message(&e));
            }
            _ => {}
        }
    }

    fn observe_responses(&mut self, name: &str, peek: Peek) {
        match name {
            "response.created" => self.response = peek.response,
            "response.output_item.done" => {
                if let Some(Tagged { kind: Some(k), .. }) = &peek.item {
                    self.hosted.item(k, None);
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.done = true;
                let r = peek.response.unwrap_or(Value::Null);
                self.hosted.response(&r);
                self.usage = r.get("usage").and_then(responses::usage_from);
                if name == "response.failed" {
                    self.upstream_error = Some(error_message(&r["error"]));
                }
            }
            "error" => {
                self.done = true;
                let message = match &peek.message {
                    Some(MessageField::Text(t)) => json!({"message": t}),
                    _ => peek.error.unwrap_or(Value::Null),
                };
                self.upstream_error = Some(error_message(&message));
            }
            _ => {}
        }
    }

    /// The protocol's in-stream error for a stream that broke (for Responses, continuing the upstream's
    /// numbering and followed by `response.failed` when the opening response is known).
    pub fn error_event(&mut self, err: &ApiError, request_id: &str, out: &mut Vec<u8>) {
        let seq = self.last_seq.map_or(0, |s| s + 1);
        out.extend_from_slice(&self.protocol.error_event(err, request_id, Some(seq)));
        if self.protocol == Protocol::Responses {
            if let Some(mut r) = self.response.take() {
                let code = err.code().unwrap_or("server_error");
                let message = err.openai_object(request_id)["message"].clone();
                r["status"] = json!("failed");
                r["error"] = json!({"code": code, "message": message});
                let d =
                    json!({"type": "response.failed", "sequence_number": seq + 1, "response": r});
                push_event(out, Some("response.failed"), &d.to_string());
            }
        }
    }
}

/// The `message` of an error object, or the whole value as text (never with an upstream credential).
fn error_message(e: &Value) -> String {
    let m = e.get("message").and_then(Value::as_str).map(str::to_string);
    crate::secrets::scrubbed(&format!(
        "upstream error in stream: {}",
        m.unwrap_or_else(|| e.to_string())
    ))
}

/// The sequence number the event replacing a Responses stream's held closing events takes (the first one
/// held), if any.
pub fn next_sequence(held: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(held);
    let at = text.find("\"sequence_number\":")? + "\"sequence_number\":".len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
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
}
