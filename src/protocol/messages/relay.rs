//! A Messages stream relayed as it came: each event read once for the text it adds, the usage of
//! `message_start` and `message_delta` (merged by the one rule of `usage_update`), server tool uses, an error
//! event, and `message_stop`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::upstream::usage_update;
use crate::protocol::relay::{self, Delta, Seen, Tagged};
use crate::protocol::codec::RelayReader;
use crate::protocol::sse::SseEvent;

use super::Messages;

/// The fields of an event the reader reads; others are skipped, strings borrowed where they can be.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    /// `message_start`'s message.
    #[serde(default)]
    message: Option<Message>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    /// `content_block_start`: the block's type and (server tools) name.
    #[serde(borrow, default)]
    content_block: Option<Tagged<'a>>,
}

/// `message_start`'s message object (its usage), or whatever else a field of that name holds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Message {
    Object {
        #[serde(default)]
        usage: Option<Value>,
    },
    Other(serde::de::IgnoredAny),
}

impl RelayReader for Messages {
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
        let name = ev.event.as_deref().or(peek.kind.as_deref()).unwrap_or("");
        match name {
            "message_start" | "message_delta" => {
                let u = if name == "message_start" {
                    match &peek.message {
                        Some(Message::Object { usage }) => usage.as_ref(),
                        _ => None,
                    }
                } else {
                    peek.usage.as_ref().or(match &peek.delta {
                        Some(Delta::Block(b)) => b.usage.as_ref(),
                        _ => None,
                    })
                };
                if let Some(u) = u {
                    seen.hosted.usage(u);
                }
                let prev = seen.usage.unwrap_or_default();
                if let Some(new) = u.and_then(|u| usage_update(prev, u)) {
                    seen.usage = Some(new);
                }
            }
            "content_block_start" => {
                if let Some(Tagged {
                    kind: Some(k),
                    name,
                }) = &peek.content_block
                {
                    seen.hosted.item(k, name.as_deref());
                }
            }
            "message_stop" => seen.done = true,
            "error" => {
                seen.done = true;
                let e = peek.error.unwrap_or(Value::Null);
                seen.upstream_error = Some(relay::error_message(&e));
            }
            _ => {}
        }
        true
    }


    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        relay::delta_text_fields(data, edit)
    }
}
