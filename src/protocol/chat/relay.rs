//! A Chat stream (or a text completion's, which differs only in `choices[].text`) relayed as it came: each
//! chunk read once for the text it adds, its usage (hidden from a
//! client that did not ask for it), an error it carries, the tier it names, and `[DONE]`.

use crate::protocol::fields::At;
use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::relay::{self, Seen};
use crate::protocol::codec::{RelayReader, UpstreamCodec};
use crate::protocol::sse::SseEvent;

use super::Chat;

/// The fields of a chunk the reader reads; others are skipped, strings borrowed where they can be.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    /// The tier the answer is served at.
    #[serde(borrow, default)]
    service_tier: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChatDelta<'a>>,
    /// A text completion's chunk (`POST /v1/completions`, relayed by the same reader).
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
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

/// The text fields of a chunk's delta, in the order they are read.
const TEXT: [&str; 4] = ["content", "refusal", "reasoning_content", "reasoning"];

impl RelayReader for Chat {
    /// Reads one chunk; returns whether to pass it on (not the usage chunk a client did not ask for).
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        let data = ev.data.trim();
        if data.starts_with("[DONE]") {
            seen.done = true;
            return true;
        }
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            seen.error_text = relay::not_json(data);
            return true;
        };
        seen.error_text = relay::is_error(&peek.error);
        collect(&peek, &mut seen.produced);
        if let Some(t) = &peek.service_tier {
            seen.hosted.tier(t);
        }
        if let Some(e) = peek.error.as_ref().filter(|e| !e.is_null()) {
            seen.done = true;
            seen.upstream_error = Some(relay::error_message(e));
            return true;
        }
        if let Some(u) = peek.usage.as_ref().and_then(|u| Chat.usage_from(u)) {
            seen.usage = Some(u);
            let no_choices = peek.choices.as_ref().is_none_or(Vec::is_empty);
            if seen.hide_usage && no_choices {
                return false;
            }
        }
        true
    }

    /// Calls `edit` on each text field [`collect`] reads, in its order.
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        let choices = data.get_mut("choices").and_then(Value::as_array_mut);
        for c in choices.into_iter().flatten() {
            edit(c.get_mut("text"));
            let Some(d) = c.get_mut("delta").filter(|d| d.is_object()) else {
                continue;
            };
            for name in TEXT {
                edit(d.get_mut(name));
            }
            let calls = d.get_mut("tool_calls").and_then(Value::as_array_mut);
            for call in calls.into_iter().flatten() {
                edit(call.pointer_mut("/function/arguments"));
            }
        }
    }
}

/// Appends the text and tool arguments of each choice's delta (a text completion's: its text).
fn collect(peek: &Peek, produced: &mut String) {
    for c in peek.choices.iter().flatten() {
        if let Some(t) = &c.text {
            produced.push_str(t);
        }
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
            produced.push_str(t);
        }
        for call in d.tool_calls.iter().filter_map(Value::as_array).flatten() {
            if let Some(a) = call.at("function/arguments").and_then(Value::as_str) {
                produced.push_str(a);
            }
        }
    }
}
