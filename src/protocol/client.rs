//! Reading answers the way a client of a gateway does (the doctor): what one stream event means to the
//! official SDK ([`ClientEvent`], decided by each codec's `client_event`), and the helpers those readers share.

use serde_json::Value;

/// What one event of a stream means to the official SDK.
#[derive(Debug, PartialEq)]
pub enum ClientEvent {
    /// Answer text (perhaps none).
    Text(String),
    /// Nothing the SDK shows.
    Skip,
    /// The stream's terminal event.
    Done,
    /// The stream's terminal event, with answer text of its own (Gemini's last chunk).
    Last(String),
    /// An error event (its message).
    Error(String),
    /// An event the SDK cannot read (what is wrong with it).
    Bad(String),
}

/// Why a complete answer has no text where its protocol's SDK reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoText {
    /// The answer lacks what the text is read from (`choices[0].message`, the `output` array, ...).
    Missing(&'static str),
    /// The model refused: its refusal.
    Refused(String),
    /// The prompt was blocked before any answer (Gemini's `promptFeedback.blockReason`), and why.
    Blocked(String),
    /// The answer's status says it ended without one (`failed`, `incomplete`), and why.
    Ended { status: &'static str, why: String },
}

impl std::fmt::Display for NoText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoText::Missing(what) => write!(f, "the answer has no {what}"),
            NoText::Refused(r) => write!(f, "the model refused: {r}"),
            NoText::Blocked(r) => write!(f, "the prompt was blocked ({r})"),
            NoText::Ended { status, why } => {
                write!(f, "the response has status `{status}` ({why})")
            }
        }
    }
}

impl std::error::Error for NoText {}

/// `s` cut to at most `max` bytes (at a character boundary), marked when cut.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

/// An event's data as JSON, or what is wrong with it.
pub(crate) fn parse_data(data: &str) -> Result<Value, ClientEvent> {
    serde_json::from_str(data)
        .map_err(|_| ClientEvent::Bad(format!("event data is not JSON: {}", clip(data, 300))))
}

/// `error.message` and `error.code` (or `error.type`) of an OpenAI or Anthropic error body; of a Google one
/// (whose `code` is the HTTP status), the reason of its `ErrorInfo` detail in lower case, else its `status`.
pub(crate) fn error_fields(v: &Value) -> (Option<String>, Option<String>) {
    let e = &v["error"];
    let message = e["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .map(str::to_string);
    let reason = e["details"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|d| d["reason"].as_str())
        .map(str::to_ascii_lowercase);
    let code = e["code"]
        .as_str()
        .or_else(|| e["type"].as_str())
        .or_else(|| v["code"].as_str())
        .map(str::to_string)
        .or(reason)
        .or_else(|| e["status"].as_str().map(str::to_string));
    (message, code)
}

/// The message of an error payload, with its type or code.
pub(crate) fn error_text(v: &Value) -> String {
    let (message, code) = error_fields(v);
    match (message, code) {
        (Some(m), Some(c)) => format!("{m} ({c})"),
        (Some(m), None) => m,
        _ => clip(&v.to_string(), 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_fields_of_both_shapes() {
        let openai = json!({"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}});
        assert_eq!(
            error_fields(&openai),
            (Some("bad key".into()), Some("invalid_api_key".into()))
        );
        let anthropic =
            json!({"type": "error", "error": {"type": "not_found_error", "message": "no"}});
        assert_eq!(
            error_fields(&anthropic),
            (Some("no".into()), Some("not_found_error".into()))
        );
        let google = json!({"error": {"code": 404, "message": "gone", "status": "NOT_FOUND",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNKNOWN_PATH"}]}});
        assert_eq!(
            error_fields(&google),
            (Some("gone".into()), Some("unknown_path".into()))
        );
        let bare =
            json!({"error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}});
        assert_eq!(error_fields(&bare).1.as_deref(), Some("RESOURCE_EXHAUSTED"));
    }

    #[test]
    fn clip_cuts_at_a_character() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("héllo", 2), "h… (6 bytes in all)");
    }
}
