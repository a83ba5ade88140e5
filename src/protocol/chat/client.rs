//! A client of some gateway speaking Chat Completions (the doctor): the minimal request, and the answer and
//! the stream read the way the official SDK reads them.

use serde_json::{json, Value};

use crate::protocol::auth;
use crate::protocol::client::{error_text, parse_data, ClientEvent, NoText};
use crate::protocol::codec::{DoctorProbe, AuthHeaders};

use super::Chat;

impl DoctorProbe for Chat {
    /// The minimal request: model plus one short text.
    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        let mut v = json!({"model": model, "messages": [{"role": "user", "content": prompt}]});
        if stream {
            v["stream"] = Value::Bool(true);
        }
        v
    }

    /// The text of a complete answer: `choices[0].message.content` (its refusal, if it has only that).
    fn answer_text(&self, v: &Value) -> Result<String, NoText> {
        let msg = &v["choices"][0]["message"];
        if msg.is_null() {
            return Err(NoText::Missing("`choices[0].message`"));
        }
        if let Some(r) = msg["refusal"].as_str() {
            if msg["content"].as_str().unwrap_or("").is_empty() {
                return Err(NoText::Refused(r.to_string()));
            }
        }
        Ok(msg["content"].as_str().unwrap_or("").to_string())
    }

    /// `data:` chunks until `[DONE]`; a payload with a truthy `error` is an error (as in the SDK).
    fn client_event(&self, _event: Option<&str>, data: &str, _first: bool) -> ClientEvent {
        if data.starts_with("[DONE]") {
            return ClientEvent::Done;
        }
        let v = match parse_data(data) {
            Ok(v) => v,
            Err(s) => return s,
        };
        if !v["error"].is_null() && v["error"] != Value::Bool(false) {
            return ClientEvent::Error(error_text(&v));
        }
        let text = v["choices"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["delta"]["content"].as_str())
                    .collect::<String>()
            })
            .unwrap_or_default();
        ClientEvent::Text(text)
    }

    fn client_headers<'k>(&self, key: &'k str) -> AuthHeaders<'k> {
        [Some(auth::bearer(key)), None, None]
    }

    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["choices"][0]["finish_reason"].as_str()
    }
}
