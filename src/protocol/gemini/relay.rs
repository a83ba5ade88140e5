//! A Gemini stream relayed as it came (`alt=sse` chunks): each chunk read once for the text it adds (thoughts
//! included, and the strings of a function call's `args`, which Gemini sends whole as a JSON value), its usage (`usageMetadata`, cumulative: the last wins), an error object it carries, and the
//! finish reason, after which the upstream sends nothing more.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::relay::{self, Seen};
use crate::protocol::codec::{RelayReader, UpstreamCodec};
use crate::protocol::sse::SseEvent;

use super::Gemini;

/// The fields of a chunk the reader reads; others are skipped, strings borrowed where they can be.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(default, rename = "usageMetadata")]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default, rename = "promptFeedback")]
    feedback: Option<Value>,
}

#[derive(Deserialize)]
struct Candidate<'a> {
    #[serde(borrow, default)]
    content: Option<Content<'a>>,
    #[serde(borrow, default, rename = "finishReason")]
    finish: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow, default)]
    parts: Option<Vec<PartPeek<'a>>>,
}

#[derive(Deserialize)]
struct PartPeek<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(default, rename = "functionCall")]
    call: Option<Value>,
}

impl RelayReader for Gemini {
    /// Reads one chunk; every chunk is passed on.
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        let data = ev.data.trim();
        if data.is_empty() {
            return true;
        }
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            seen.error_text = relay::not_json(data);
            return true;
        };
        seen.error_text = relay::is_error(&peek.error);
        if let Some(e) = peek.error.as_ref().filter(|e| !e.is_null()) {
            seen.done = true;
            seen.upstream_error = Some(relay::error_message(e));
            return true;
        }
        let candidate = peek.candidates.as_ref().and_then(|c| c.first());
        let parts = candidate
            .and_then(|c| c.content.as_ref())
            .and_then(|c| c.parts.as_ref());
        for p in parts.into_iter().flatten() {
            if let Some(t) = &p.text {
                seen.produced.push_str(t);
            }
            if let Some(args) = p.call.as_ref().and_then(|c| c.get("args")) {
                relay::strings_in(args, &mut |t| seen.produced.push_str(t));
            }
        }
        if let Some(u) = peek.usage.as_ref().and_then(|u| Gemini.usage_from(u)) {
            seen.usage = Some(u);
        }
        let blocked = peek.feedback.as_ref().is_some_and(|f| f.get("blockReason").is_some());
        if candidate.is_some_and(|c| c.finish.is_some()) || blocked {
            seen.done = true;
        }
        true
    }

    /// Calls `edit` on the text of each part of the first candidate and the strings of its function call's
    /// `args`, in the order [`observe`] reads them.
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        let parts = data
            .pointer_mut("/candidates/0/content/parts")
            .and_then(Value::as_array_mut);
        for p in parts.into_iter().flatten() {
            edit(p.get_mut("text"));
            if let Some(args) = p.pointer_mut("/functionCall/args") {
                relay::string_fields(args, edit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            data: data.into(),
            has_data: true,
            terminated: true,
            ..SseEvent::default()
        }
    }

    #[test]
    fn text_usage_and_the_end_are_read() {
        let mut seen = Seen::default();
        Gemini.observe(&ev(r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":7}}"#), &mut seen);
        assert!(!seen.done);
        Gemini.observe(&ev(r#"{"candidates":[{"content":{"parts":[{"text":"lo","thought":false}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":2,"thoughtsTokenCount":4}}"#), &mut seen);
        assert!(seen.done);
        assert_eq!(seen.produced, "Hello");
        let u = seen.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (7, 6));
        let mut seen = Seen::default();
        Gemini.observe(&ev(r#"{"error":{"code":500,"message":"boom","status":"INTERNAL"}}"#), &mut seen);
        assert!(seen.done && seen.error_text);
        assert_eq!(seen.upstream_error.as_deref(), Some("upstream error in stream: boom"));
    }

    #[test]
    fn text_fields_are_the_parts_texts() {
        let data = r#"{"candidates":[{"content":{"parts":[{"text":"a"},{"functionCall":{"name":"f","args":{"q":"c","n":[1,"d",{"e":"f"}]}}},{"text":"b"}]}}]}"#;
        let mut v: Value = serde_json::from_str(data).unwrap();
        let mut fields = String::new();
        Gemini.text_fields(&mut v, &mut |f| {
            if let Some(t) = f.and_then(|v| v.as_str()) {
                fields.push_str(t);
            }
        });
        // The fields the redactor edits are the text the reader read, in the same order.
        let mut seen = Seen::default();
        Gemini.observe(&ev(data), &mut seen);
        assert_eq!(fields, seen.produced);
        assert_eq!(seen.produced.len(), 5);
        assert!(seen.produced.starts_with('a') && seen.produced.ends_with('b'));
    }
}
