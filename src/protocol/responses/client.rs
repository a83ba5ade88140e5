//! A client of some gateway speaking Responses (the doctor): the answer and the stream read the way the
//! official SDK reads them.

use serde_json::{json, Value};

use crate::protocol::auth;
use crate::protocol::client::{error_text, parse_data, ClientEvent, NoText};
use crate::protocol::codec::{DoctorProbe, AuthHeaders};

use super::Responses;

impl DoctorProbe for Responses {
    /// The minimal request: model plus one short text.
    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        let mut v = json!({"model": model, "input": prompt});
        if stream {
            v["stream"] = Value::Bool(true);
        }
        v
    }

    fn client_headers<'k>(&self, key: &'k str) -> AuthHeaders<'k> {
        [Some(auth::bearer(key)), None, None]
    }

    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["status"].as_str()
    }

    /// The text of a complete answer: the text parts of its output items, unless it failed or is incomplete.
    fn answer_text(&self, v: &Value) -> Result<String, NoText> {
        match v["status"].as_str() {
            Some("failed") => {
                return Err(NoText::Ended {
                    status: "failed",
                    why: v["error"]["message"]
                        .as_str()
                        .unwrap_or("no message")
                        .to_string(),
                })
            }
            Some("incomplete") => {
                return Err(NoText::Ended {
                    status: "incomplete",
                    why: v["incomplete_details"]["reason"]
                        .as_str()
                        .unwrap_or("no reason")
                        .to_string(),
                })
            }
            _ => {}
        }
        let Some(items) = v["output"].as_array() else {
            return Err(NoText::Missing("`output` array"));
        };
        Ok(items
            .iter()
            .filter_map(|i| i["content"].as_array())
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect())
    }

    /// Typed events until `response.completed`; `error`, `response.failed` and `response.incomplete` end it as
    /// failures.
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent {
        if data.starts_with("[DONE]") {
            return ClientEvent::Skip;
        }
        let v = match parse_data(data) {
            Ok(v) => v,
            Err(s) => return s,
        };
        let kind = v["type"].as_str().or(event).unwrap_or("");
        match kind {
            "error" => return ClientEvent::Error(error_text(&v)),
            "response.failed" => {
                return ClientEvent::Error(format!(
                    "response.failed: {}",
                    error_text(&v["response"])
                ))
            }
            "response.incomplete" => {
                return ClientEvent::Error(format!(
                    "response.incomplete ({})",
                    v["response"]["incomplete_details"]["reason"]
                        .as_str()
                        .unwrap_or("no reason")
                ))
            }
            _ => {}
        }
        if v["error"].is_object() {
            return ClientEvent::Error(error_text(&v));
        }
        if first && kind != "response.created" {
            return ClientEvent::Bad(format!(
                "the first event is `{kind}`; the OpenAI SDK's Responses stream requires `response.created` first"
            ));
        }
        match kind {
            "response.output_text.delta" => {
                ClientEvent::Text(v["delta"].as_str().unwrap_or("").to_string())
            }
            "response.completed" => ClientEvent::Done,
            _ => ClientEvent::Skip,
        }
    }
}
