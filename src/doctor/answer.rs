//! Reading answers: the text, the stop reason and the error fields of each protocol's response body (the
//! short texts of the output are in `text.rs`).

use serde_json::Value;

use super::kinds::Proto;

/// `error.message` and `error.code` (or `error.type`) of an OpenAI or Anthropic error body.
pub fn error_fields(v: &Value) -> (Option<String>, Option<String>) {
    let e = &v["error"];
    let message = e["message"]
        .as_str()
        .or_else(|| v["message"].as_str())
        .map(str::to_string);
    let code = e["code"]
        .as_str()
        .or_else(|| e["type"].as_str())
        .or_else(|| v["code"].as_str())
        .map(str::to_string);
    (message, code)
}

/// The text of a non-streaming answer, where the specification says it is.
pub fn answer_text(proto: Proto, v: &Value) -> Result<String, String> {
    match proto {
        Proto::Chat => {
            let msg = &v["choices"][0]["message"];
            if msg.is_null() {
                return Err("the answer has no `choices[0].message`".into());
            }
            if let Some(r) = msg["refusal"].as_str() {
                if msg["content"].as_str().unwrap_or("").is_empty() {
                    return Err(format!("the model refused: {r}"));
                }
            }
            Ok(msg["content"].as_str().unwrap_or("").to_string())
        }
        Proto::Responses => {
            match v["status"].as_str() {
                Some("failed") => {
                    return Err(format!(
                        "the response has status `failed` ({})",
                        v["error"]["message"].as_str().unwrap_or("no message")
                    ))
                }
                Some("incomplete") => {
                    return Err(format!(
                        "the response has status `incomplete` ({})",
                        v["incomplete_details"]["reason"]
                            .as_str()
                            .unwrap_or("no reason")
                    ))
                }
                _ => {}
            }
            let Some(items) = v["output"].as_array() else {
                return Err("the answer has no `output` array".into());
            };
            Ok(items
                .iter()
                .filter_map(|i| i["content"].as_array())
                .flatten()
                .filter_map(|p| p["text"].as_str())
                .collect())
        }
        Proto::Messages => {
            let Some(blocks) = v["content"].as_array() else {
                return Err("the answer has no `content` array".into());
            };
            Ok(blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect())
        }
    }
}

/// The stop reason of an answer, for a message about missing text.
pub fn stop_reason(proto: Proto, v: &Value) -> String {
    let r = match proto {
        Proto::Chat => v["choices"][0]["finish_reason"].as_str(),
        Proto::Responses => v["status"].as_str(),
        Proto::Messages => v["stop_reason"].as_str(),
    };
    match r {
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
        assert_eq!(answer_text(Proto::Chat, &chat).unwrap(), "pong");
        let resp = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "content": [{"type": "output_text", "text": "pong"}]}]});
        assert_eq!(answer_text(Proto::Responses, &resp).unwrap(), "pong");
        let failed = json!({"status": "failed", "error": {"message": "x"}, "output": []});
        assert!(answer_text(Proto::Responses, &failed).is_err());
        let msg = json!({"content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "pong"}]});
        assert_eq!(answer_text(Proto::Messages, &msg).unwrap(), "pong");
        assert!(answer_text(Proto::Messages, &json!({"id": "x"})).is_err());
    }

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
    }
}
