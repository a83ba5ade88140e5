//! Watching a stream relayed as it came (passthrough): each event is parsed once, for its type, its
//! sequence number, the usage it reports (paid hosted uses included), an error it carries and the text it
//! adds; the observer says whether
//! the stream completed, hides the usage chunk a Chat client did not ask for, and writes the protocol's
//! in-stream error when the stream breaks. It also says what text the last event added (for the credential
//! redactor of `secrets.rs`) and rewrites an event whose text held a credential ([`redact_event`]).

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
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    /// vLLM's and OpenRouter's name for `reasoning_content` (read only when it is text).
    #[serde(borrow, default)]
    reasoning: Option<MaybeText<'a>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

/// A field read when it is a string and skipped otherwise.
#[derive(Deserialize)]
#[serde(untagged)]
enum MaybeText<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
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
    /// Where the text the last event added begins in `produced`.
    added_from: usize,
    /// The last event was no answer but an error (or not JSON at all): an error text.
    last_was_error: bool,
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
            added_from: 0,
            last_was_error: false,
            hosted: Tally::default(),
        }
    }

    /// The text (answer text, reasoning, tool arguments) the last event observed added, in the order
    /// [`redact_event`] walks its fields.
    pub fn added_text(&self) -> &str {
        &self.produced[self.added_from..]
    }

    /// Whether the last event observed was an error text rather than part of an answer: the upstream's
    /// error event, any event carrying an `error` object, or one that is not JSON at all.
    pub fn last_was_error(&self) -> bool {
        self.last_was_error
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
        self.added_from = self.produced.len();
        self.last_was_error = false;
        let errors_before = self.upstream_error.is_some();
        let relay = self.observe_event(ev);
        self.last_was_error |= !errors_before && self.upstream_error.is_some();
        relay
    }

    fn observe_event(&mut self, ev: &SseEvent) -> bool {
        if ev.is_comment() {
            return true;
        }
        let data = ev.data.trim();
        if self.protocol == Protocol::Chat && data.starts_with("[DONE]") {
            self.done = true;
            return true;
        }
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            self.last_was_error = serde_json::from_str::<serde::de::IgnoredAny>(data).is_err();
            return true;
        };
        self.last_was_error = peek.error.as_ref().is_some_and(|e| !e.is_null());
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
            let reasoning = match &d.reasoning {
                Some(MaybeText::Text(t)) => Some(t),
                _ => None,
            };
            let texts = [
                d.content.as_ref(),
                d.refusal.as_ref(),
                d.reasoning_content.as_ref(),
            ];
            for t in texts.into_iter().chain([reasoning]).flatten() {
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
                let prev = self.usage.unwrap_or_default();
                if let Some(new) = u.and_then(|u| messages::usage_update(prev, u)) {
                    self.usage = Some(new);
                }
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

/// `ev` with the edits the credential redactor found applied to the text it adds (the same fields, in the
/// same order, as the observer reads them), framed again; `None` when it cannot be read or nothing changed.
/// The rewritten event is encoded anew (its other fields keep their values, not their spelling).
pub fn redact_event(ev: &SseEvent, edits: &[crate::secrets::Edit]) -> Option<Vec<u8>> {
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
    match v.get_mut("delta") {
        Some(d) if d.is_string() => edit(Some(d)),
        Some(d) if d.is_object() => {
            for name in ["text", "thinking", "partial_json"] {
                edit(d.get_mut(name));
            }
        }
        _ => {}
    }
    let choices = v.get_mut("choices").and_then(Value::as_array_mut);
    for c in choices.into_iter().flatten() {
        let Some(d) = c.get_mut("delta").filter(|d| d.is_object()) else {
            continue;
        };
        for name in ["content", "refusal", "reasoning_content", "reasoning"] {
            edit(d.get_mut(name));
        }
        let calls = d.get_mut("tool_calls").and_then(Value::as_array_mut);
        for call in calls.into_iter().flatten() {
            edit(call.pointer_mut("/function/arguments"));
        }
    }
    if !changed {
        return None;
    }
    let mut out = Vec::new();
    push_event(&mut out, ev.event.as_deref(), &v.to_string());
    Some(out)
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

    #[test]
    fn an_event_is_rewritten_where_the_redactor_found_a_credential() {
        use crate::secrets::Edit;
        let cut = |start, end, mark| Edit { start, end, mark };
        // Chat: content then tool arguments, in the order the observer reads them.
        let mut w = StreamObserver::new(Protocol::Chat, false, 0);
        let data = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"key: SECRET","tool_calls":[{"index":0,"function":{"arguments":"MORE}"}}]}}]}"#;
        let e = ev(None, data);
        w.observe(&e);
        assert_eq!(w.added_text(), "key: SECRETMORE}");
        let out = redact_event(&e, &[cut(5, 15, true)]).unwrap();
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
        let out = String::from_utf8(redact_event(&e, &[cut(0, 3, false)]).unwrap()).unwrap();
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
        assert!(redact_event(&e, &[cut(5, 9, true)]).is_none());
        let out = String::from_utf8(redact_event(&e, &[cut(1, 2, true)]).unwrap()).unwrap();
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
