//! A client of some gateway speaking Messages (the doctor): the minimal request, and the stream read the
//! way the official SDK reads it.

use serde_json::{json, Value};

use std::borrow::Cow;

use crate::protocol::auth;
use crate::protocol::client::{clip, error_text, parse_data, ClientEvent, NoText};
use crate::protocol::codec::{DoctorProbe, AuthHeaders};

use super::Messages;

/// `max_tokens` of the minimal request (the protocol requires one): room for a model that thinks before it
/// answers, while the prompt asks for one word.
pub(super) const PROBE_MAX_TOKENS: u64 = 256;

impl DoctorProbe for Messages {
    /// The minimal request: model, `max_tokens` and one short text.
    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        let mut v = json!({
            "model": model,
            "max_tokens": PROBE_MAX_TOKENS,
            "messages": [{"role": "user", "content": prompt}],
        });
        if stream {
            v["stream"] = Value::Bool(true);
        }
        v
    }

    /// Named events until `message_stop`; `error` is an error; the SDK dispatches on the `event:` name and
    /// drops events without one.
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent {
        let Some(name) = event else {
            return ClientEvent::Bad(format!(
                "an event has no `event:` line (data: {}); the Anthropic SDK dispatches on the event name and \
                 drops such events",
                clip(data, 200)
            ));
        };
        if name == "ping" {
            return ClientEvent::Skip;
        }
        let v = match parse_data(data) {
            Ok(v) => v,
            Err(s) => return s,
        };
        if name == "error" || v["type"] == "error" {
            return ClientEvent::Error(error_text(&v));
        }
        if first && name != "message_start" {
            return ClientEvent::Bad(format!(
                "the first event is `{name}`; the Anthropic SDK requires `message_start` first"
            ));
        }
        match name {
            "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                ClientEvent::Text(v["delta"]["text"].as_str().unwrap_or("").to_string())
            }
            "message_stop" => ClientEvent::Done,
            _ => ClientEvent::Skip,
        }
    }

    fn client_headers<'k>(&self, key: &'k str) -> AuthHeaders<'k> {
        [
            Some(auth::bearer(key)),
            Some(("x-api-key", Cow::Borrowed(key))),
            Some(("anthropic-version", Cow::Borrowed(super::VERSION))),
        ]
    }

    fn answer_text(&self, answer: &Value) -> Result<String, NoText> {
        let Some(blocks) = answer["content"].as_array() else {
            return Err(NoText::Missing("`content` array"));
        };
        Ok(blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect())
    }

    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["stop_reason"].as_str()
    }
}
