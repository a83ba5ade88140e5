//! Typed access to JSON request fields, with errors that name the field and say what was expected.

use serde_json::{Map, Value};

use super::ApiError;

fn wrong(path: &str, expected: &str, got: &Value) -> ApiError {
    let kind = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    ApiError::invalid_param(
        path,
        format!("Invalid type for `{path}`: expected {expected}, got {kind}."),
    )
}

/// The body as an object, or a 400.
pub(crate) fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ApiError> {
    v.as_object().ok_or_else(|| wrong(path, "an object", v))
}

/// An optional string (null counts as absent).
pub(crate) fn opt_str<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a str>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong(&join(path, key), "a string", other)),
    }
}

/// A required string.
pub(crate) fn req_str<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a str, ApiError> {
    opt_str(o, key, path)?.ok_or_else(|| missing(&join(path, key)))
}

pub(crate) fn opt_bool(
    o: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong(&join(path, key), "a boolean", other)),
    }
}

/// An optional non-negative integer.
pub(crate) fn opt_u64(
    o: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong(&join(path, key), "a non-negative integer", v)),
        Some(other) => Err(wrong(&join(path, key), "a non-negative integer", other)),
    }
}

pub(crate) fn opt_f64(
    o: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => n
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| wrong(&join(path, key), "a number", v)),
        Some(other) => Err(wrong(&join(path, key), "a number", other)),
    }
}

pub(crate) fn opt_array<'a>(
    o: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<&'a Vec<Value>>, ApiError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => Err(wrong(&join(path, key), "an array", other)),
    }
}

pub(crate) fn missing(path: &str) -> ApiError {
    ApiError::invalid_param(path, format!("Missing required parameter: `{path}`."))
}

/// `a.b`, or `b` at the top level.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The `stream` flag, validated.
pub(crate) fn stream_flag(o: &Map<String, Value>) -> Result<bool, ApiError> {
    Ok(opt_bool(o, "stream", "")?.unwrap_or(false))
}

/// Error for a value of the right type but not an accepted one.
pub(crate) fn bad_value(path: &str, expected: &str) -> ApiError {
    ApiError::invalid_param(
        path,
        format!("Invalid value for `{path}`: expected {expected}."),
    )
}

/// The wrong-type error, for callers that match on shapes themselves.
pub(crate) fn wrong_type(path: &str, expected: &str, got: &Value) -> ApiError {
    wrong(path, expected, got)
}

/// The string at `key` of an upstream's JSON, or "" (a missing field in an answer is not the client's fault).
pub(crate) fn str_at(v: &Value, key: &str) -> String {
    str_or(v, key, "")
}

/// The string at `key`, or `default`.
pub(crate) fn str_or(v: &Value, key: &str, default: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_string()
}

/// A value found by a path of keys (and array indexes) separated by `/`, as `Value::pointer` finds it
/// without the leading `/` and without allocating: `pointer` copies every token of its path into a new
/// `String`, which the request path reads several times per request and per stream event. The paths are
/// the gateway's own literals (no `~` escapes).
pub(crate) trait At {
    fn at(&self, path: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, path: &str) -> Option<&Value> {
        path.split('/').try_fold(self, |v, key| match v {
            Value::Object(o) => o.get(key),
            Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod at_tests {
    use super::At;
    use serde_json::json;

    #[test]
    fn at_finds_what_pointer_finds() {
        let v = json!({"a": {"b": [10, {"c": true}], "": 1}, "n": null, "s": "x"});
        for path in [
            "a",
            "a/b",
            "a/b/0",
            "a/b/1/c",
            "a/b/2",
            "a/b/x",
            "a/",
            "n",
            "n/x",
            "s/0",
            "z",
            "a/b/1/c/d",
        ] {
            assert_eq!(v.at(path), v.pointer(&format!("/{path}")), "{path}");
        }
    }
}
