//! Reading answers: the text, the stop reason and the error fields of a response body, each where its
//! protocol's specification puts it (asked of the protocol's codec; the short texts of the output are in
//! `text.rs`).

use serde_json::Value;

use crate::protocol::client::NoText;
use crate::protocol::Protocol;

pub(super) use crate::protocol::client::error_fields;

/// The text of a non-streaming answer, where the specification says it is.
pub(super) fn answer_text(proto: Protocol, v: &Value) -> Result<String, NoText> {
    proto.probe.answer_text(v)
}

/// The stop reason of an answer, for a message about missing text.
pub(super) fn stop_reason(proto: Protocol, v: &Value) -> String {
    match proto.probe.stop_reason(v) {
        Some(r) => format!("stop reason `{r}`"),
        None => "no stop reason".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answer_texts() {
        let chat = json!({"choices": [{"message": {"role": "assistant", "content": "pong"}}]});
        assert_eq!(answer_text(Protocol::Chat, &chat).unwrap(), "pong");
        let resp = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "pong"}]}]});
        assert_eq!(answer_text(Protocol::Responses, &resp).unwrap(), "pong");
        let failed = json!({"status": "failed", "error": {"message": "x"}, "output": []});
        assert!(answer_text(Protocol::Responses, &failed).is_err());
        let msg = json!({"content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "pong"}]});
        assert_eq!(answer_text(Protocol::Messages, &msg).unwrap(), "pong");
        assert!(answer_text(Protocol::Messages, &json!({"id": "x"})).is_err());
        assert_eq!(
            stop_reason(
                Protocol::Chat,
                &json!({"choices": [{"finish_reason": "length"}]})
            ),
            "stop reason `length`"
        );
    }
}
