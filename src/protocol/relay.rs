//! What a stream relayed as it came (passthrough) has said so far, as each protocol's reader (its codec's
//! `observe`) records it, and the helpers those readers share. The observer that holds it and answers the
//! gateway's questions is `observe.rs`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::canon::Usage;
use super::hosted::Tally;

/// What a relayed stream said so far.
#[derive(Default)]
pub struct Seen {
    /// The client did not ask for the usage report (the gateway did), so it is not passed on.
    pub hide_usage: bool,
    /// The usage the upstream reported so far.
    pub usage: Option<Usage>,
    /// The stream reached its end marker (or an error event that ends it).
    pub done: bool,
    /// The message of an error event the upstream itself sent inside the stream.
    pub upstream_error: Option<String>,
    /// The last event's number, where events are numbered.
    pub last_seq: Option<u64>,
    /// The stream's opening object, where the protocol's failure event repeats it.
    pub opening: Option<Value>,
    /// Text and tool arguments seen so far, for an estimate when the stream ends without usage.
    pub produced: String,
    /// The last event was no answer but an error (an error object, or not JSON at all): an error text.
    pub error_text: bool,
    /// Paid hosted uses and the tier, as the stream reports them.
    pub hosted: Tally,
}

/// Whether event data that did not parse as the protocol's event is not JSON at all (an error text).
pub(crate) fn not_json(data: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(data).is_err()
}

/// Whether an event's `error` field holds an error.
pub(crate) fn is_error(e: &Option<Value>) -> bool {
    e.as_ref().is_some_and(|e| !e.is_null())
}

/// The `message` of an error object, or the whole value as text (never with an upstream credential).
pub(crate) fn error_message(e: &Value) -> String {
    let m = e.get("message").and_then(Value::as_str).map(str::to_string);
    crate::secrets::scrubbed(&format!(
        "upstream error in stream: {}",
        m.unwrap_or_else(|| e.to_string())
    ))
}

/// A typed item of an event (a Responses output item, a Messages content block): its type and name.
#[derive(Deserialize)]
pub(crate) struct Tagged<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
}

/// An event's `delta`: text itself (Responses), or a block of fields (Messages).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Delta<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Block(#[serde(borrow)] DeltaBlock<'a>),
}

#[derive(Deserialize)]
pub(crate) struct DeltaBlock<'a> {
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    pub usage: Option<Value>,
}

/// The block fields that carry text, in the order they are read.
pub(crate) const DELTA_TEXT: [&str; 3] = ["text", "thinking", "partial_json"];

impl Delta<'_> {
    /// Appends the text this delta adds.
    pub(crate) fn collect(&self, produced: &mut String) {
        match self {
            Delta::Text(t) => produced.push_str(t),
            Delta::Block(b) => {
                for t in [&b.text, &b.thinking, &b.partial_json]
                    .into_iter()
                    .flatten()
                {
                    produced.push_str(t);
                }
            }
        }
    }
}

/// Calls `read` on every string inside `v` (object members in their map order, arrays in order): the text
/// of a tool call's arguments sent as a JSON value rather than as text.
pub(crate) fn strings_in(v: &Value, read: &mut dyn FnMut(&str)) {
    match v {
        Value::String(s) => read(s),
        Value::Array(a) => a.iter().for_each(|v| strings_in(v, read)),
        Value::Object(o) => o.values().for_each(|v| strings_in(v, read)),
        _ => {}
    }
}

/// Calls `edit` on every string inside `v`, in the order [`strings_in`] reads them.
pub(crate) fn string_fields(v: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
    match v {
        Value::String(_) => edit(Some(v)),
        Value::Array(a) => a.iter_mut().for_each(|v| string_fields(v, edit)),
        Value::Object(o) => o.values_mut().for_each(|v| string_fields(v, edit)),
        _ => {}
    }
}

/// Calls `edit` on the text fields of a `delta` (the text itself, or a block's text fields), in the order
/// [`Delta::collect`] reads them.
pub(crate) fn delta_text_fields(data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
    match data.get_mut("delta") {
        Some(d) if d.is_string() => edit(Some(d)),
        Some(d) if d.is_object() => {
            for name in DELTA_TEXT {
                edit(d.get_mut(name));
            }
        }
        _ => {}
    }
}
