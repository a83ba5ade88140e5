//! A client of some gateway speaking the Gemini API (the doctor): the minimal request, and the answer and the
//! stream read the way the official SDKs (`google-genai`, `@google/genai`) read them.

use serde_json::{json, Value};

use std::borrow::Cow;

use crate::protocol::client::{clip, parse_data, ClientEvent, NoText};
use crate::protocol::codec::{DoctorProbe, AuthHeaders};

use super::Gemini;

impl DoctorProbe for Gemini {
    /// The minimal request: one short text (the model and the stream are in the path).
    fn probe_body(&self, _model: &str, prompt: &str, _stream: bool) -> Value {
        json!({"contents": [{"role": "user", "parts": [{"text": prompt}]}]})
    }

    /// The text of a complete answer: the text parts of the first candidate that are not thoughts.
    fn answer_text(&self, v: &Value) -> Result<String, NoText> {
        let Some(candidate) = v["candidates"].as_array().and_then(|c| c.first()) else {
            if let Some(reason) = v["promptFeedback"]["blockReason"].as_str() {
                return Err(NoText::Blocked(reason.to_string()));
            }
            return Err(NoText::Missing("`candidates`"));
        };
        Ok(text_of(candidate))
    }

    /// `data:` chunks, each a whole `GenerateContentResponse`; the one with a `finishReason` is the last; a chunk
    /// that is an error object raises it (as `google-genai` does).
    fn client_event(&self, _event: Option<&str>, data: &str, _first: bool) -> ClientEvent {
        let v = match parse_data(data) {
            Ok(v) => v,
            Err(s) => return s,
        };
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            let message = e["message"].as_str().unwrap_or("");
            let status = e["status"].as_str().unwrap_or("");
            return ClientEvent::Error(format!("{message} ({status})"));
        }
        let Some(candidate) = v["candidates"].as_array().and_then(|c| c.first()) else {
            if v.get("usageMetadata").is_some() {
                return ClientEvent::Skip;
            }
            return ClientEvent::Bad(format!(
                "a chunk has no `candidates`: {}",
                clip(data, 200)
            ));
        };
        if candidate["finishReason"].is_string() {
            return ClientEvent::Last(text_of(candidate));
        }
        ClientEvent::Text(text_of(candidate))
    }

    fn client_headers<'k>(&self, key: &'k str) -> AuthHeaders<'k> {
        [Some(("x-goog-api-key", Cow::Borrowed(key))), None, None]
    }

    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["candidates"][0]["finishReason"].as_str()
    }
}

fn text_of(candidate: &Value) -> String {
    candidate["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["thought"] != true)
        .filter_map(|p| p["text"].as_str())
        .collect()
}
