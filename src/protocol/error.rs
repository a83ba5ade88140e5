//! The one error type of the request path, and how each protocol renders it.
//!
//! OpenAI surfaces: `{"error":{"message","type","param","code"}}`. Anthropic: `{"type":"error","error":
//! {"type","message"},"request_id"}`. The status decides the SDK's exception class; `type`/`code` refine it.

use serde_json::{json, Value};

use super::Protocol;

/// What went wrong, independent of any protocol's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    Permission,
    NotFound,
    MethodNotAllowed,
    RequestTooLarge,
    RateLimit,
    InsufficientQuota,
    Server,
    BadGateway,
    Unavailable,
    Timeout,
    Overloaded,
}

/// An error answered to a client: status, kind, a message meant for humans, and OpenAI's `param`/`code`.
/// Boxed, so `Result<_, ApiError>` stays one pointer wide on the hot path.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(Box<ErrorInfo>);

/// The fields of an [`ApiError`] (reached through `Deref`).
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorInfo {
    pub status: u16,
    pub kind: ErrorKind,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<String>,
    /// Seconds, sent as `retry-after`.
    pub retry_after: Option<u64>,
    /// The upstream's own `type`, kept when the client speaks the same family of protocol.
    pub openai_type: Option<String>,
    pub anthropic_type: Option<String>,
    /// The upstream did not answer at all (no response head): unreachable, refused, or silent past its
    /// first-byte timeout. Only such failures may open an upstream's breaker.
    pub unanswered: bool,
}

impl ApiError {
    pub fn new(status: u16, kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError(Box::new(ErrorInfo {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
            openai_type: None,
            anthropic_type: None,
            unanswered: false,
        }))
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, ErrorKind::InvalidRequest, message)
    }

    /// A 400 naming the offending field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(message).with_param(param)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, ErrorKind::Authentication, message).with_code("invalid_api_key")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, ErrorKind::Permission, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, ErrorKind::NotFound, message)
    }

    pub fn model_not_found(model: &str) -> Self {
        Self::not_found(format!(
            "The model `{model}` does not exist on this gateway. GET /v1/models lists the models your key may use."
        ))
        .with_param("model")
        .with_code("model_not_found")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, ErrorKind::Server, message)
    }

    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(502, ErrorKind::BadGateway, message).with_code("upstream_error")
    }

    pub fn gateway_timeout(message: impl Into<String>) -> Self {
        Self::new(504, ErrorKind::Timeout, message).with_code("upstream_timeout")
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, ErrorKind::Unavailable, message).with_retry_after(1)
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn with_code(mut self, code: &str) -> Self {
        self.code = Some(code.to_string());
        self
    }

    /// Marks the error as the upstream not answering at all.
    pub fn unanswered(mut self) -> Self {
        self.unanswered = true;
        self
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// The kind that belongs to an HTTP status, for errors that arrive as a bare status.
    pub fn kind_for_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Authentication,
            402 => ErrorKind::InsufficientQuota,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            405 => ErrorKind::MethodNotAllowed,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimit,
            502 => ErrorKind::BadGateway,
            503 => ErrorKind::Unavailable,
            504 => ErrorKind::Timeout,
            529 => ErrorKind::Overloaded,
            s if s >= 500 => ErrorKind::Server,
            _ => ErrorKind::InvalidRequest,
        }
    }

    /// OpenAI's `error.type`.
    pub fn openai_type(&self) -> &str {
        if let Some(t) = &self.openai_type {
            return t;
        }
        match self.kind {
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
        if let Some(t) = &self.anthropic_type {
            return t;
        }
        match self.kind {
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

    fn message_with_id(&self, request_id: &str) -> String {
        if request_id.is_empty() || self.message.contains(request_id) {
            self.message.clone()
        } else {
            format!("{} (request id: {request_id})", self.message)
        }
    }

    /// The OpenAI error object (the value under `"error"`).
    pub fn openai_object(&self, request_id: &str) -> Value {
        json!({
            "message": self.message_with_id(request_id),
            "type": self.openai_type(),
            "param": self.param,
            "code": self.code,
        })
    }

    /// The Anthropic error object (the value under `"error"`).
    pub fn anthropic_object(&self, request_id: &str) -> Value {
        json!({"type": self.anthropic_type(), "message": self.message_with_id(request_id)})
    }

    /// The whole error body for a client of `protocol`.
    pub fn body(&self, protocol: Protocol, request_id: &str) -> Vec<u8> {
        let v = match protocol {
            Protocol::Messages => json!({
                "type": "error",
                "error": self.anthropic_object(request_id),
                "request_id": request_id,
            }),
            Protocol::Chat | Protocol::Responses => {
                json!({"error": self.openai_object(request_id)})
            }
        };
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// Builds an error from an upstream's error reply, keeping its status and, where it is in a known shape,
    /// its message, type, param and code.
    pub fn from_upstream(status: u16, body: &[u8], retry_after: Option<u64>) -> Self {
        let kind = Self::kind_for_status(status);
        let parsed: Option<Value> = serde_json::from_slice(body)
            .ok()
            .or_else(|| error_in_event_stream(body));
        let mut err = ApiError::new(status, kind, String::new());
        err.retry_after = retry_after;
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
                err.message = format!("upstream error: {msg}");
                let ty = o
                    .get("type")
                    .and_then(Value::as_str)
                    .filter(|t| *t != "error" || is_anthropic)
                    .map(str::to_string);
                if is_anthropic {
                    err.anthropic_type = ty;
                } else {
                    err.openai_type = ty;
                    err.param = o.get("param").and_then(Value::as_str).map(str::to_string);
                    err.code = o.get("code").and_then(|c| match c {
                        Value::String(s) => Some(s.clone()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    });
                }
            }
            Some(Value::String(s)) => err.message = format!("upstream error: {s}"),
            _ => {
                let text = String::from_utf8_lossy(body);
                let snippet: String = text.trim().chars().take(200).collect();
                err.message = if snippet.is_empty() {
                    format!("upstream answered HTTP {status} with an empty body")
                } else {
                    format!("upstream answered HTTP {status}: {snippet}")
                };
            }
        }
        if err.message == "upstream error: " {
            err.message = format!("upstream answered HTTP {status}");
        }
        err.scrub_secrets()
    }

    /// The error with every upstream credential (and masked echo of one) removed from its texts: upstreams
    /// echo the key they were sent in their error messages.
    pub fn scrub_secrets(mut self) -> Self {
        use crate::secrets::scrub;
        if let std::borrow::Cow::Owned(m) = scrub(&self.message) {
            self.message = m;
        }
        let info = &mut *self.0;
        for field in [&mut info.param, &mut info.code] {
            if let Some(v) = field.as_deref() {
                if let std::borrow::Cow::Owned(s) = scrub(v) {
                    *field = Some(s);
                }
            }
        }
        self
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

impl std::ops::Deref for ApiError {
    type Target = ErrorInfo;
    fn deref(&self) -> &ErrorInfo {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ErrorInfo {
        &mut self.0
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_each_shape() {
        let e = ApiError::model_not_found("x");
        let v: Value = serde_json::from_slice(&e.body(Protocol::Chat, "req_1")).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert!(v["error"]["message"].as_str().unwrap().contains("req_1"));
        let v: Value = serde_json::from_slice(&e.body(Protocol::Messages, "req_1")).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["request_id"], "req_1");
    }

    #[test]
    fn upstream_errors_keep_their_details() {
        let body = br#"{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let e = ApiError::from_upstream(400, body, None);
        assert_eq!(e.code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(e.param.as_deref(), Some("messages"));
        let body =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = ApiError::from_upstream(529, body, Some(3));
        assert_eq!(e.anthropic_type(), "overloaded_error");
        assert_eq!(e.openai_type(), "service_unavailable_error");
        assert_eq!(e.retry_after, Some(3));
        let e = ApiError::from_upstream(502, b"<html>bad gateway</html>", None);
        assert!(e.message.contains("<html>bad gateway"));
    }

    #[test]
    fn an_event_stream_error_body_is_read_for_its_message_and_code() {
        let body = b"event: error\ndata: {\"error\":{\"message\":\"model crashed\",\"type\":\"server_error\",\"code\":\"engine_dead\"}}\n\n";
        let e = ApiError::from_upstream(500, body, None);
        assert_eq!(e.message, "upstream error: model crashed");
        assert_eq!(e.code.as_deref(), Some("engine_dead"));
        let body = b"event: error\ndata: {\"type\":\"error\",\"code\":\"overloaded\",\"message\":\"busy\",\"sequence_number\":0}\n\n";
        let e = ApiError::from_upstream(503, body, None);
        assert_eq!(e.message, "upstream error: busy");
        assert_eq!(e.code.as_deref(), Some("overloaded"));
        assert!(!e.message.contains("data:"));
    }
}
