//! The output limit of a request: which fields carry it in each protocol, how it is read, and the one rule
//! for a stream that goes past it.
//!
//! Each protocol has its own field(s) (its codec's `limit_fields`: Chat `max_completion_tokens` and the
//! older `max_tokens`; Responses `max_output_tokens`; Messages `max_tokens`). A request may carry another
//! protocol's field as well, and an upstream may honour it: so the gateway reads only the client protocol's
//! own fields (a Chat request with both of its fields is held to the lower value), and every body that goes
//! upstream leaves the others out and carries exactly the limit the gateway reserved, in the one field that
//! upstream reads (the edits of `request.rs`). Chat's `n` multiplies the output (each choice up to the
//! limit): admission reserves and billing allows the limit times `n` ([`choices`]).

use serde_json::{Map, Value};

use super::{ApiError, Protocol, ALL};

/// Every protocol's limit fields at the top level of a body (some more than once).
pub(crate) fn all_fields() -> impl Iterator<Item = &'static str> {
    ALL.iter()
        .filter(|p| p.limit.parent.is_none())
        .flat_map(|p| p.limit.fields.iter().copied())
}

/// Every protocol's field that asks for several answers.
pub(crate) fn all_choice_fields() -> impl Iterator<Item = &'static str> {
    ALL.iter().filter_map(|p| p.limit.choices)
}

fn read_field(
    o: &Map<String, Value>,
    parent: Option<&str>,
    field: &str,
) -> Result<Option<u64>, ApiError> {
    let path = || parent.map_or_else(|| field.to_string(), |p| format!("{p}.{field}"));
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        // An upstream may read 0 as "no limit": the answer would be whole and the limit billed, 0.
        Some(v) if v.as_u64() == Some(0) => {
            let path = path();
            Err(ApiError::invalid_param(
                &path,
                format!("{path}: must be at least 1, got 0 (leave it out for the model's default)"),
            ))
        }
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            let path = path();
            ApiError::invalid_param(
                &path,
                format!("{path}: expected a positive integer, got {v}"),
            )
        }),
    }
}

/// The output limit a request of `protocol` asks for: the lowest of its own limit fields (other protocols'
/// fields are not read).
pub(crate) fn read(protocol: Protocol, body: &Value) -> Result<Option<u64>, ApiError> {
    let parent = protocol.limit.parent;
    let o = match parent {
        Some(p) => body.get(p).and_then(Value::as_object),
        None => body.as_object(),
    };
    let Some(o) = o else {
        return Ok(None);
    };
    let mut limit: Option<u64> = None;
    for f in protocol.limit.fields {
        if let Some(n) = read_field(o, parent, f)? {
            limit = Some(limit.map_or(n, |l| l.min(n)));
        }
    }
    Ok(limit)
}

/// How many answers (choices) a request of `protocol` asks for, each up to the output limit: its choices
/// field (Chat's `n`; 1 when absent); 1 for the protocols that have none (their bodies go upstream without
/// such a field, so no upstream may multiply the output admission reserved for). It must be a whole number
/// of at least 1.
pub(crate) fn choices(protocol: Protocol, body: &Value) -> Result<u64, ApiError> {
    let (Some(o), Some(field)) = (body.as_object(), protocol.limit.choices) else {
        return Ok(1);
    };
    match o.get(field) {
        None | Some(Value::Null) => Ok(1),
        Some(v) => v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            ApiError::invalid_param(
                field,
                format!("{field}: expected a whole number of at least 1, got {v}"),
            )
        }),
    }
}

/// Whether a stream has gone past its output limit: the upstream reported more output than the limit, or
/// it produced text estimated at more than twice the limit (an upstream that ignores limits and reports
/// nothing until the end). Such a stream is cut there; output beyond the limit is never billed.
pub(crate) fn beyond(
    limit: Option<u64>,
    reported_output: Option<u64>,
    produced_estimate: u64,
) -> bool {
    let Some(limit) = limit else {
        return false;
    };
    reported_output.is_some_and(|r| r > limit) || produced_estimate > limit.saturating_mul(2) + 64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_protocols_own_fields_are_read() {
        let b = json!({"max_tokens": 8192, "max_completion_tokens": 0, "max_output_tokens": 1});
        assert_eq!(read(Protocol::Messages, &b).unwrap(), Some(8192));
        let b = json!({"max_tokens": 0, "max_output_tokens": 8192});
        assert_eq!(read(Protocol::Responses, &b).unwrap(), Some(8192));
    }

    /// Third review, 5: a limit of 0 in the protocol's own field is refused, naming it (an upstream that reads
    /// 0 as "no limit" would answer whole, billed 0); Gemini's 0 is its JSON for unset.
    #[test]
    fn a_limit_of_zero_is_refused_in_the_protocols_own_field() {
        for (p, body, field) in [
            (Protocol::Chat, json!({"max_tokens": 0}), "max_tokens"),
            (
                Protocol::Chat,
                json!({"max_completion_tokens": 0, "max_tokens": 9}),
                "max_completion_tokens",
            ),
            (
                Protocol::Responses,
                json!({"max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (Protocol::Messages, json!({"max_tokens": 0}), "max_tokens"),
            (
                Protocol::Gemini,
                json!({"generationConfig": {"maxOutputTokens": 0}}),
                "generationConfig.maxOutputTokens",
            ),
        ] {
            let e = read(p, &body).unwrap_err();
            assert_eq!(e.param(), Some(field), "{p:?}");
            assert!(e.message().contains("at least 1"), "{}", e.message());
        }
        let mut gemini =
            json!({"contents": [], "generationConfig": {"max_output_tokens": 0, "temperature": 1}});
        Protocol::Gemini.read_as_one(&mut gemini, false).unwrap();
        assert_eq!(gemini["generationConfig"], json!({"temperature": 1}));
        assert_eq!(read(Protocol::Gemini, &gemini).unwrap(), None);
    }

    #[test]
    fn chat_takes_the_lower_of_its_two_fields() {
        let b = json!({"max_tokens": 10, "max_completion_tokens": 500, "max_output_tokens": 1});
        assert_eq!(read(Protocol::Chat, &b).unwrap(), Some(10));
        assert_eq!(
            read(Protocol::Chat, &json!({"messages": []})).unwrap(),
            None
        );
        assert_eq!(
            read(Protocol::Chat, &json!({"max_tokens": -1}))
                .unwrap_err()
                .param(),
            Some("max_tokens")
        );
    }

    #[test]
    fn choices_are_chat_n_and_nothing_else() {
        assert_eq!(choices(Protocol::Chat, &json!({"n": 8})).unwrap(), 8);
        assert_eq!(
            choices(Protocol::Chat, &json!({"messages": []})).unwrap(),
            1
        );
        for bad in [json!({"n": 0}), json!({"n": -1}), json!({"n": 1.5})] {
            assert_eq!(
                choices(Protocol::Chat, &bad).unwrap_err().param(),
                Some("n")
            );
        }
        assert_eq!(
            choices(Protocol::Messages, &json!({"n": 8, "max_tokens": 1})).unwrap(),
            1
        );
    }
}
