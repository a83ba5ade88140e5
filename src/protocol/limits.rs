//! The output limit of a request: which fields carry it in each protocol, how it is read, and how a body going
//! upstream is made to carry exactly the limit the gateway reserved for.
//!
//! Each protocol has its own field (Chat: `max_completion_tokens` and the older `max_tokens`; Responses:
//! `max_output_tokens`; Messages: `max_tokens`). A request may carry another protocol's field as well, and an
//! upstream may honour it: so the gateway reads only the client protocol's own fields and removes the others
//! before anything is reserved or forwarded, and a Chat request with both of its fields gets the lower value in
//! both. Going upstream, the limit is written in the one field that upstream reads, and only there. Chat's `n`
//! multiplies the output (each choice up to the limit): admission reserves and billing allows the limit times
//! `n` ([`choices`]).

use serde_json::{json, Map, Value};

use super::{ApiError, Protocol};

const ALL: [&str; 3] = ["max_completion_tokens", "max_tokens", "max_output_tokens"];

/// The fields that carry the output limit in requests of `protocol`, preferred first.
pub fn own_fields(protocol: Protocol) -> &'static [&'static str] {
    match protocol {
        Protocol::Chat => &["max_completion_tokens", "max_tokens"],
        Protocol::Responses => &["max_output_tokens"],
        Protocol::Messages => &["max_tokens"],
    }
}

fn read(o: &Map<String, Value>, field: &str) -> Result<Option<u64>, ApiError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ApiError::invalid_param(
                field,
                format!("{field}: expected a non-negative integer, got {v}"),
            )
        }),
    }
}

/// Reads the output limit a request of `protocol` asks for, and leaves its body carrying only that: other
/// protocols' limit fields are removed, and a Chat request's two fields both get the lower of the two.
pub fn normalize(protocol: Protocol, body: &mut Value) -> Result<Option<u64>, ApiError> {
    let Some(o) = body.as_object_mut() else {
        return Ok(None);
    };
    let own = own_fields(protocol);
    let mut limit: Option<u64> = None;
    for f in own {
        if let Some(n) = read(o, f)? {
            limit = Some(limit.map_or(n, |l| l.min(n)));
        }
    }
    for f in ALL {
        if !own.contains(&f) {
            o.remove(f);
        }
    }
    if let Some(n) = limit {
        for f in own {
            if o.get(*f).is_some_and(|v| !v.is_null()) {
                o.insert((*f).to_string(), json!(n));
            }
        }
    }
    Ok(limit)
}

/// Makes a body for an upstream of `protocol` carry `limit` as its one output limit, in the field that
/// upstream reads: every limit field is removed and that one written (for Chat: `max_completion_tokens`
/// when the upstream takes it, else `max_tokens`), so an upstream never honours a field the gateway did not
/// mean for it.
pub fn apply(protocol: Protocol, body: &mut Value, limit: u64, max_completion_tokens: bool) {
    let Some(o) = body.as_object_mut() else {
        return;
    };
    for f in ALL {
        o.remove(f);
    }
    let field = match protocol {
        Protocol::Chat if max_completion_tokens => "max_completion_tokens",
        Protocol::Chat => "max_tokens",
        _ => own_fields(protocol)[0],
    };
    o.insert(field.to_string(), json!(limit));
}

/// How many answers (choices) a request of `protocol` asks for, each up to the output limit: Chat's `n`
/// (1 when absent); 1 for the other protocols, whose bodies lose an `n` (no upstream of theirs may multiply
/// the output admission reserved for). `n` must be a whole number of at least 1.
pub fn choices(protocol: Protocol, body: &mut Value) -> Result<u64, ApiError> {
    let Some(o) = body.as_object_mut() else {
        return Ok(1);
    };
    if protocol != Protocol::Chat {
        o.remove("n");
        return Ok(1);
    }
    match o.get("n") {
        None | Some(Value::Null) => Ok(1),
        Some(v) => v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            ApiError::invalid_param(
                "n",
                format!("n: expected a whole number of at least 1, got {v}"),
            )
        }),
    }
}

/// Whether a stream has gone past its output limit: the upstream reported more output than the limit, or
/// it produced text estimated at more than twice the limit (an upstream that ignores limits and reports
/// nothing until the end). Such a stream is cut there; output beyond the limit is never billed.
pub fn beyond(limit: Option<u64>, reported_output: Option<u64>, produced_estimate: u64) -> bool {
    let Some(limit) = limit else {
        return false;
    };
    reported_output.is_some_and(|r| r > limit) || produced_estimate > limit.saturating_mul(2) + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoy_fields_of_other_protocols_are_removed() {
        let mut b = json!({"max_tokens": 8192, "max_completion_tokens": 0, "max_output_tokens": 1});
        assert_eq!(normalize(Protocol::Messages, &mut b).unwrap(), Some(8192));
        assert_eq!(b, json!({"max_tokens": 8192}));
        let mut b = json!({"max_tokens": 0, "max_output_tokens": 8192});
        assert_eq!(normalize(Protocol::Responses, &mut b).unwrap(), Some(8192));
        assert_eq!(b, json!({"max_output_tokens": 8192}));
    }

    #[test]
    fn chat_takes_the_lower_of_its_two_fields_in_both() {
        let mut b = json!({"max_tokens": 10, "max_completion_tokens": 500, "max_output_tokens": 1});
        assert_eq!(normalize(Protocol::Chat, &mut b).unwrap(), Some(10));
        assert_eq!(b, json!({"max_tokens": 10, "max_completion_tokens": 10}));
        let mut b = json!({"messages": []});
        assert_eq!(normalize(Protocol::Chat, &mut b).unwrap(), None);
        let mut b = json!({"max_tokens": -1});
        assert_eq!(
            normalize(Protocol::Chat, &mut b).unwrap_err().param(),
            Some("max_tokens")
        );
    }

    #[test]
    fn apply_writes_the_one_field_the_upstream_reads() {
        let mut b = json!({"max_tokens": 100});
        apply(Protocol::Chat, &mut b, 50, true);
        assert_eq!(b, json!({"max_completion_tokens": 50}));
        let mut b = json!({"max_completion_tokens": 10, "max_tokens": 10});
        apply(Protocol::Chat, &mut b, 10, false);
        assert_eq!(b, json!({"max_tokens": 10}));
        let mut b = json!({});
        apply(Protocol::Chat, &mut b, 50, true);
        assert_eq!(b, json!({"max_completion_tokens": 50}));
        let mut b = json!({});
        apply(Protocol::Responses, &mut b, 7, false);
        assert_eq!(b, json!({"max_output_tokens": 7}));
    }

    #[test]
    fn choices_are_chat_n_and_nothing_else() {
        let mut b = json!({"n": 8});
        assert_eq!(choices(Protocol::Chat, &mut b).unwrap(), 8);
        let mut b = json!({"messages": []});
        assert_eq!(choices(Protocol::Chat, &mut b).unwrap(), 1);
        for bad in [json!({"n": 0}), json!({"n": -1}), json!({"n": 1.5})] {
            let mut b = bad;
            assert_eq!(
                choices(Protocol::Chat, &mut b).unwrap_err().param(),
                Some("n")
            );
        }
        let mut b = json!({"n": 8, "max_tokens": 1});
        assert_eq!(choices(Protocol::Messages, &mut b).unwrap(), 1);
        assert_eq!(b, json!({"max_tokens": 1}));
    }
}
