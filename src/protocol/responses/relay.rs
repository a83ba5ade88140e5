//! A Responses stream relayed as it came: each event read once for its number, the text it adds, the usage
//! and hosted uses of the closing response, an error event, and the end (`response.completed`,
//! `response.incomplete`, `response.failed`); a stream that breaks ends with `error` and `response.failed`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::protocol::relay::{self, Delta, Seen, Tagged};
use crate::protocol::sse::{push_event, SseEvent};
use crate::protocol::codec::{RelayReader, UpstreamCodec};
use crate::protocol::ApiError;

use super::Responses;

/// The fields of an event the reader reads; others are skipped, strings borrowed where they can be.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    sequence_number: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
    /// The `message` of an `error` event.
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    /// `response.output_item.*`: the item's type.
    #[serde(borrow, default)]
    item: Option<Tagged<'a>>,
}

/// An `error` event's `message` (text), or whatever else a field of that name holds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Message<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

impl RelayReader for Responses {
    /// Reads one event; every event is passed on.
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        let data = ev.data.trim();
        let Ok(peek) = serde_json::from_str::<Peek>(data) else {
            seen.error_text = relay::not_json(data);
            return true;
        };
        seen.error_text = relay::is_error(&peek.error);
        if let Some(d) = &peek.delta {
            d.collect(&mut seen.produced);
        }
        if let Some(seq) = peek.sequence_number {
            seen.last_seq = Some(seq);
        }
        let name = ev.event.as_deref().or(peek.kind.as_deref()).unwrap_or("");
        match name {
            "response.created" => seen.opening = peek.response,
            "response.output_item.done" => {
                if let Some(Tagged { kind: Some(k), .. }) = &peek.item {
                    seen.hosted.item(k, None);
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                seen.done = true;
                let r = peek.response.unwrap_or(Value::Null);
                seen.hosted.response(&r);
                seen.usage = r.get("usage").and_then(|u| Responses.usage_from(u));
                if name == "response.failed" {
                    seen.upstream_error = Some(relay::error_message(&r["error"]));
                }
            }
            "error" => {
                seen.done = true;
                let message = match &peek.message {
                    Some(Message::Text(t)) => json!({"message": t}),
                    _ => peek.error.unwrap_or(Value::Null),
                };
                seen.upstream_error = Some(relay::error_message(&message));
            }
            _ => {}
        }
        true
    }


    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        relay::delta_text_fields(data, edit)
    }
}
/// `response.failed` after the error event of a stream that broke (numbered `seq`), when the opening
/// response is known.
pub(super) fn failed_tail(err: &ApiError, request_id: &str, seq: u64, seen: &mut Seen) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut r) = seen.opening.take() {
        let code = err.code().unwrap_or("server_error");
        let message = err.openai_object(request_id)["message"].clone();
        r["status"] = json!("failed");
        r["error"] = json!({"code": code, "message": message});
        let d = json!({"type": "response.failed", "sequence_number": seq + 1, "response": r});
        push_event(&mut out, Some("response.failed"), &d.to_string());
    }
    out
}

