//! Reading an upstream's complete (not streamed) answer in any protocol: it must be a JSON object and not an
//! error object (`error` set, or Anthropic's `"type": "error"`, which some servers send with a 2xx status).

use serde_json::Value;

use super::ApiError;

/// Why a complete answer cannot be passed on.
#[derive(Debug)]
pub(crate) enum Unusable {
    /// Not a JSON object.
    NotJson,
    /// An error object: the upstream's failure, as a 502 with its details.
    Error(ApiError),
}

/// The answer parsed, when it is a usable JSON object.
pub(crate) fn parse(raw: &[u8]) -> Result<Value, Unusable> {
    let Some(v) = serde_json::from_slice::<Value>(raw)
        .ok()
        .filter(Value::is_object)
    else {
        return Err(Unusable::NotJson);
    };
    let kind = v.get("type").and_then(Value::as_str);
    check_not_error(raw, v.get("error").is_some_and(|e| !e.is_null()), kind)?;
    Ok(v)
}

/// What a relayed answer is read for: whether it is an error object, and its usage (under `usage`, or
/// Gemini's `usageMetadata`). Deserialised without building the whole document (other fields are skipped,
/// strings borrowed).
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default, rename = "usageMetadata")]
    usage_metadata: Option<Value>,
}

/// [`parse`] for answers passed on as they are: the same checks, and only the usage (the object at `field`,
/// the protocol's `usage_field`) read.
pub(crate) fn usage_only(raw: &[u8], field: &str) -> Result<Option<Value>, Unusable> {
    let peek = raw
        .trim_ascii_start()
        .starts_with(b"{")
        .then(|| serde_json::from_slice::<Peek>(raw).ok())
        .flatten();
    let Some(peek) = peek else {
        // Duplicate keys, for one, fail the narrow read; the full one decides.
        let mut v = parse(raw)?;
        return Ok(v.get_mut(field).map(Value::take));
    };
    check_not_error(raw, peek.error.is_some(), peek.kind.as_deref())?;
    Ok(if field == "usage" {
        peek.usage
    } else {
        peek.usage_metadata
    })
}

fn check_not_error(raw: &[u8], has_error: bool, kind: Option<&str>) -> Result<(), Unusable> {
    if has_error || kind == Some("error") {
        return Err(Unusable::Error(ApiError::from_upstream(502, raw, None)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_objects_with_a_2xx_are_failures() {
        let anthropic = br#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#;
        assert!(
            matches!(usage_only(anthropic, "usage"), Err(Unusable::Error(e)) if e.status() == 502 && e.is_upstream())
        );
        let openai = br#"{"error":{"message":"boom"},"usage":{"prompt_tokens":1}}"#;
        assert!(matches!(parse(openai), Err(Unusable::Error(_))));
        assert!(matches!(parse(b"[1]"), Err(Unusable::NotJson)));
        let ok = br#"{"id":"x","usage":{"prompt_tokens":3},"error":null}"#;
        assert_eq!(
            usage_only(ok, "usage").unwrap().unwrap()["prompt_tokens"],
            3
        );
        let gemini = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":4}}"#;
        let u = usage_only(gemini, "usageMetadata").unwrap().unwrap();
        assert_eq!(u["promptTokenCount"], 4);
    }
}
