//! An error on the wire: its OpenAI, Anthropic and Google objects, and an upstream's error body read back
//! into an [`ApiError`] (in the vendor's semantics, its details kept).

use serde_json::{json, Value};

use super::{ApiError, ErrorKind, Origin};

impl ApiError {
    /// OpenAI's `error.type`.
    pub fn openai_type(&self) -> &str {
        if let Some(t) = &self.0.openai_type {
            return t;
        }
        match self.0.kind {
            ErrorKind::InvalidRequest
            | ErrorKind::Authentication
            | ErrorKind::NotFound
            | ErrorKind::MethodNotAllowed
            | ErrorKind::RequestTooLarge => "invalid_request_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::InsufficientQuota => "insufficient_quota",
            ErrorKind::Server | ErrorKind::BadGateway | ErrorKind::Timeout => "server_error",
            ErrorKind::Unavailable | ErrorKind::Overloaded => "service_unavailable_error",
        }
    }

    /// Anthropic's `error.type`.
    pub fn anthropic_type(&self) -> &str {
        if let Some(t) = &self.0.anthropic_type {
            return t;
        }
        match self.0.kind {
            ErrorKind::InvalidRequest | ErrorKind::MethodNotAllowed => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::InsufficientQuota => "billing_error",
            ErrorKind::Server | ErrorKind::BadGateway => "api_error",
            ErrorKind::Timeout => "timeout_error",
            ErrorKind::Unavailable | ErrorKind::Overloaded => "overloaded_error",
        }
    }

    /// Google's canonical `status` name (the Gemini API's `error.status`): the upstream's own where it gave
    /// one, else the one of this error's kind.
    pub fn google_status(&self) -> &str {
        if let Some(c) = self
            .0
            .code
            .as_deref()
            .filter(|c| GOOGLE_STATUSES.contains(c))
        {
            return c;
        }
        match self.0.kind {
            ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "INVALID_ARGUMENT",
            ErrorKind::Authentication => "UNAUTHENTICATED",
            ErrorKind::Permission => "PERMISSION_DENIED",
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::MethodNotAllowed => "UNIMPLEMENTED",
            ErrorKind::RateLimit | ErrorKind::InsufficientQuota => "RESOURCE_EXHAUSTED",
            ErrorKind::Server => "INTERNAL",
            ErrorKind::Timeout => "DEADLINE_EXCEEDED",
            ErrorKind::BadGateway | ErrorKind::Unavailable | ErrorKind::Overloaded => "UNAVAILABLE",
        }
    }

    /// The Google error object (the value under `"error"`): the status as a number, the message, the
    /// canonical status name, and `details` as Google gives them: an `ErrorInfo` with the gateway's code (and
    /// the field it is about), a `RetryInfo` with the delay where a retry is told to wait.
    pub fn google_object(&self, request_id: &str) -> Value {
        let mut details = Vec::new();
        if let Some(code) = self
            .0
            .code
            .as_deref()
            .filter(|c| !GOOGLE_STATUSES.contains(c))
        {
            let mut metadata = serde_json::Map::new();
            metadata.insert("request_id".into(), json!(request_id));
            if let Some(p) = &self.0.param {
                metadata.insert("field".into(), json!(p));
            }
            details.push(json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                "reason": code.to_ascii_uppercase(), "domain": "tollgate",
                                "metadata": metadata}));
        }
        if let Some(secs) = self.0.retry_after {
            details.push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": format!("{secs}s")}));
        }
        let mut v = json!({
            "code": self.0.status,
            "message": self.message_with_id(request_id),
            "status": self.google_status(),
        });
        if !details.is_empty() {
            v["details"] = Value::Array(details);
        }
        v
    }

    /// The message as a client reads it: with the request id, and without any internal address (where an
    /// upstream or the shared store is: `addresses::hide`; the log line keeps them for the operator).
    fn message_with_id(&self, request_id: &str) -> String {
        let message = crate::addresses::hide(&self.0.message);
        if request_id.is_empty() || message.contains(request_id) {
            message.into_owned()
        } else {
            format!("{message} (request id: {request_id})")
        }
    }

    /// The OpenAI error object (the value under `"error"`).
    pub fn openai_object(&self, request_id: &str) -> Value {
        json!({
            "message": self.message_with_id(request_id),
            "type": self.openai_type(),
            "param": self.0.param,
            "code": self.0.code,
        })
    }

    /// The Anthropic error object (the value under `"error"`).
    pub fn anthropic_object(&self, request_id: &str) -> Value {
        json!({"type": self.anthropic_type(), "message": self.message_with_id(request_id)})
    }

    /// Builds an error from an upstream's error reply, keeping its status and, where it is in a known shape,
    /// its message, type, param and code.
    pub fn from_upstream(status: u16, body: &[u8], retry_after: Option<u64>) -> Self {
        let kind = Self::kind_for_status(status);
        // Google answers a streamed request's failure as a JSON array of one error.
        let parsed: Option<Value> = serde_json::from_slice(body)
            .ok()
            .map(|v| match v {
                Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
                other => other,
            })
            .or_else(|| error_in_event_stream(body));
        let mut err = ApiError::new(status, kind, String::new()).with_origin(Origin::Upstream);
        err.0.retry_after = retry_after;
        let nested = parsed.as_ref().and_then(|v| v.get("error"));
        let typed_error = parsed
            .as_ref()
            .and_then(|v| v.get("type"))
            .and_then(Value::as_str)
            == Some("error");
        // Anthropic nests its error under a `"type": "error"` envelope; a Responses `error` event carries
        // its fields at the top level.
        let is_anthropic = typed_error && nested.is_some();
        let obj = match (nested, &parsed) {
            (None, Some(v)) if typed_error => Some(v),
            (o, _) => o,
        };
        match obj {
            Some(Value::Object(o)) => {
                let msg = o.get("message").and_then(Value::as_str).unwrap_or("");
                err.0.message = format!("upstream error: {msg}");
                let ty = o
                    .get("type")
                    .and_then(Value::as_str)
                    .filter(|t| *t != "error" || is_anthropic)
                    .map(str::to_string);
                if is_anthropic {
                    err.0.anthropic_type = ty;
                } else {
                    err.0.openai_type = ty;
                    err.0.param = o.get("param").and_then(Value::as_str).map(str::to_string);
                    err.0.code = o.get("code").and_then(|c| match c {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    });
                    google_details(&mut err, o);
                }
            }
            Some(Value::String(s)) => err.0.message = format!("upstream error: {s}"),
            _ => {
                let text = String::from_utf8_lossy(body);
                let snippet: String = text.trim().chars().take(200).collect();
                err.0.message = if snippet.is_empty() {
                    format!("upstream answered HTTP {status} with an empty body")
                } else {
                    format!("upstream answered HTTP {status}: {snippet}")
                };
            }
        }
        if err.0.message == "upstream error: " {
            err.0.message = format!("upstream answered HTTP {status}");
        }
        err.scrub_secrets()
    }
}

/// Google's canonical status names (`error.status` of the Gemini API).
const GOOGLE_STATUSES: [&str; 16] = [
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "OUT_OF_RANGE",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "NOT_FOUND",
    "ABORTED",
    "ALREADY_EXISTS",
    "RESOURCE_EXHAUSTED",
    "CANCELLED",
    "DATA_LOSS",
    "UNKNOWN",
    "INTERNAL",
    "UNIMPLEMENTED",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
];

/// What a Google error object adds: its `status` name as the code (in place of the number Google puts in
/// `code`), and the delay of a `RetryInfo` detail where no `retry-after` header said one.
fn google_details(err: &mut ApiError, o: &serde_json::Map<String, Value>) {
    let status = o.get("status").and_then(Value::as_str);
    if let Some(s) = status.filter(|s| GOOGLE_STATUSES.contains(s)) {
        err.0.code = Some(s.to_string());
    }
    if err.0.retry_after.is_some() {
        return;
    }
    let delay = o
        .get("details")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|d| d.get("retryDelay").and_then(Value::as_str));
    if let Some(d) = delay {
        // `37s`, `0.5s`: whole seconds, rounded up.
        let secs = d.trim_end_matches('s').parse::<f64>().ok();
        err.0.retry_after = secs
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s.ceil() as u64);
    }
}

/// An error reply whose body is an event stream (some servers answer a failed streaming request with an SSE
/// `error` event and a 5xx): the first event whose data is a JSON error.
fn error_in_event_stream(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| {
            v.get("error").is_some() || v.get("type").and_then(Value::as_str) == Some("error")
        })
}
