//! The one error type of the request path, with its OpenAI, Anthropic and Google error objects (each codec
//! renders the whole body: `ReplyCodec::error_body`). An error says what class of failure it is for clients
//! ([`ErrorKind`], with its status), who failed ([`Origin`]) and, for the gateway's own errors, exactly what
//! went wrong ([`Cause`]); the code decides by those, never by the message or the wire `code` (which a
//! `Cause` names, and an upstream's error keeps as it came).
//!
//! OpenAI surfaces: `{"error":{"message","type","param","code"}}`. Anthropic: `{"type":"error","error":
//! {"type","message"},"request_id"}`. Google (the Gemini API): `{"error":{"code","message","status",
//! "details"}}`. The status decides the SDK's exception class; `type`/`code`/`status` refine it.

mod wire;

/// What went wrong, independent of any protocol's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or not accepted (400, and any other 4xx without a kind of its own).
    InvalidRequest,
    /// Missing or refused credentials (401): a client's key or admin token, or an upstream's refusal of its
    /// own.
    Authentication,
    /// The caller may not do this, such as use a model outside its key's group (403).
    Permission,
    /// No such path or model (404).
    NotFound,
    /// The path does not take this method (405).
    MethodNotAllowed,
    /// The body is over the size limit (413).
    RequestTooLarge,
    /// A rate or concurrency limit was hit (429).
    RateLimit,
    /// A key's credit or budget cannot cover the request (429 from the gateway, 402 from an upstream):
    /// OpenAI's `insufficient_quota`, Anthropic's `billing_error`.
    InsufficientQuota,
    /// The gateway failed (500, and any other 5xx without a kind of its own).
    Server,
    /// The upstream failed or sent something unusable (502).
    BadGateway,
    /// The request cannot be served right now and may be retried (503).
    Unavailable,
    /// The upstream took too long (504).
    Timeout,
    /// The upstream is overloaded (Anthropic's 529 `overloaded_error`).
    Overloaded,
}

/// Where an error came from: the gateway itself, one of its limits, or the upstream. Decides what the
/// breaker, the availability stats and the metrics count as an upstream failure, without reading texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The gateway answered by itself: bad input, authentication, permissions, its own state.
    Gateway,
    /// A key's rate or concurrency limit.
    RateLimit,
    /// A key's balance.
    Quota,
    /// The upstream answered with an error, broke its stream, or sent something unusable.
    Upstream,
    /// The upstream did not answer at all (no response head): unreachable, refused, or silent past its
    /// first-byte timeout. Only such failures may open an upstream's breaker.
    UpstreamSilent,
}

/// What exactly went wrong, for the gateway's own errors: what the code matches on, each with the wire
/// `code` clients read. Errors without one (bad input in general, an upstream's own error) are `Unnamed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Nothing more than the kind, status and origin say (an upstream's own code, if any, is kept as it came).
    Unnamed,
    // Who is calling, and what they may use.
    /// `invalid_api_key`: the key is missing, malformed, unknown or revoked (every `ApiError::unauthorized`
    /// unless a more exact cause replaces it).
    InvalidApiKey,
    /// `key_expired`: the key's expiry time has passed.
    KeyExpired,
    /// `conflicting_credentials`: the request carries two different keys.
    ConflictingCredentials,
    /// `model_not_found`: the gateway serves no model of that name.
    ModelNotFound,
    /// `model_not_allowed`: the model is outside the key's group.
    ModelNotAllowed,
    // What the request asks for.
    /// `unknown_path`: no endpoint is served at the path.
    UnknownPath,
    /// `unexpected_body`: a `GET` or `HEAD` request outside the model endpoints carries a body.
    UnexpectedBody,
    /// `account_feature_refused`: the request would reach state kept in the operator's upstream account
    /// (stored responses, cached content, a tuned model).
    AccountFeatureRefused,
    /// `hosted_tool_refused`: `tool_choice` forces a paid hosted tool the model does not allow.
    HostedToolRefused,
    /// `hosted_uses_over_limit`: the request asks for more uses of hosted tools than the model's
    /// `max_hosted_uses`.
    HostedUsesOverLimit,
    /// `service_tier_refused`: a service tier or surcharged option, billed above the standard rate, that the
    /// model does not allow.
    ServiceTierRefused,
    // A key's limits (origin `RateLimit`, `Quota`).
    /// `rate_limit_exceeded`: a key's requests-per-minute, tokens-per-minute or concurrency limit.
    RateLimitExceeded,
    /// `insufficient_quota`: the key's credit or budget cannot cover the request.
    InsufficientQuota,
    // The gateway's own state.
    /// `overloaded`: all of the gateway's workers are busy.
    Overloaded,
    /// `shutting_down`: the gateway is shutting down and its grace period for requests in flight has ended.
    ShuttingDown,
    /// `ledger_unavailable`: the usage ledger cannot be written, so nothing is answered that could not be
    /// recorded.
    LedgerUnavailable,
    /// `store_unavailable`: the shared store is not answering, or has lost its data.
    StoreUnavailable,
    /// `audit_unavailable`: an admin change was not made because its audit entry cannot be written.
    AuditUnavailable,
    // The admin API.
    /// `admin_disabled`: the admin API is off (no admin token is configured).
    AdminDisabled,
    /// `admin_auth_throttled`: too many wrong admin tokens came from the address; it is held off for a
    /// while.
    AdminAuthThrottled,
    /// `invalid_admin_token`: the admin token is missing or wrong.
    InvalidAdminToken,
    // The upstreams (origin `Upstream`, `UpstreamSilent`).
    /// `upstream_error`: the upstream failed or sent something unusable (every `ApiError::bad_gateway`).
    UpstreamError,
    /// `upstream_timeout`: the upstream took too long (every `ApiError::gateway_timeout`).
    UpstreamTimeout,
    /// `upstream_unavailable`: every upstream of the model is held off by its breaker (it stopped
    /// answering).
    UpstreamUnavailable,
    /// `upstream_credential_missing`: the upstream's key (its `api_key_env`) is not set, so nothing was sent
    /// to it.
    UpstreamCredentialMissing,
    /// `output_limit_exceeded`: a stream went past the output limit its upstream was sent, and was cut
    /// there.
    OutputLimitExceeded,
}

impl Cause {
    /// The wire `code` this cause is answered with (None: `Unnamed`).
    pub fn code(self) -> Option<&'static str> {
        Some(match self {
            Cause::Unnamed => return None,
            Cause::InvalidApiKey => "invalid_api_key",
            Cause::KeyExpired => "key_expired",
            Cause::ConflictingCredentials => "conflicting_credentials",
            Cause::ModelNotFound => "model_not_found",
            Cause::ModelNotAllowed => "model_not_allowed",
            Cause::UnknownPath => "unknown_path",
            Cause::UnexpectedBody => "unexpected_body",
            Cause::AccountFeatureRefused => "account_feature_refused",
            Cause::HostedToolRefused => "hosted_tool_refused",
            Cause::HostedUsesOverLimit => "hosted_uses_over_limit",
            Cause::ServiceTierRefused => "service_tier_refused",
            Cause::RateLimitExceeded => "rate_limit_exceeded",
            Cause::InsufficientQuota => "insufficient_quota",
            Cause::Overloaded => "overloaded",
            Cause::ShuttingDown => "shutting_down",
            Cause::LedgerUnavailable => "ledger_unavailable",
            Cause::StoreUnavailable => "store_unavailable",
            Cause::AuditUnavailable => "audit_unavailable",
            Cause::AdminDisabled => "admin_disabled",
            Cause::AdminAuthThrottled => "admin_auth_throttled",
            Cause::InvalidAdminToken => "invalid_admin_token",
            Cause::UpstreamError => "upstream_error",
            Cause::UpstreamTimeout => "upstream_timeout",
            Cause::UpstreamUnavailable => "upstream_unavailable",
            Cause::UpstreamCredentialMissing => "upstream_credential_missing",
            Cause::OutputLimitExceeded => "output_limit_exceeded",
        })
    }
}

/// An error answered to a client: status, kind, origin, cause, a message meant for humans, and OpenAI's
/// `param`/`code`. Boxed, so `Result<_, ApiError>` stays one pointer wide on the hot path. Fields are read
/// through methods and set through the `with_*` builders.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError(Box<ErrorInfo>);

#[derive(Debug, Clone, PartialEq)]
struct ErrorInfo {
    status: u16,
    kind: ErrorKind,
    origin: Origin,
    cause: Cause,
    message: String,
    param: Option<String>,
    code: Option<String>,
    /// Seconds, sent as `retry-after`.
    retry_after: Option<u64>,
    /// The upstream's own `type`, kept when the client speaks the same family of protocol.
    openai_type: Option<String>,
    anthropic_type: Option<String>,
    /// For the operator only (log lines, usage records, the console): what the client is not told, such as
    /// the upstream host a connection failed to.
    detail: Option<String>,
}

impl ApiError {
    /// An error with `status`, `kind` and a message for humans: origin `Gateway`, no cause, `param` or
    /// `code`.
    pub fn new(status: u16, kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError(Box::new(ErrorInfo {
            status,
            kind,
            origin: Origin::Gateway,
            cause: Cause::Unnamed,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
            openai_type: None,
            anthropic_type: None,
            detail: None,
        }))
    }

    /// Adds what only the operator sees (see [`ApiError::operator_text`]); never rendered to a client.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.0.detail = Some(detail.into());
        self
    }

    /// The message with the operator's detail, for log lines, usage records and the console.
    pub fn operator_text(&self) -> std::borrow::Cow<'_, str> {
        match &self.0.detail {
            Some(d) => format!("{} ({d})", self.0.message).into(),
            None => self.0.message.as_str().into(),
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(&self) -> u16 {
        self.0.status
    }

    /// The class of failure (what the wire `type` or `status` name is made from).
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// Who failed: the gateway, a key's limit, or the upstream.
    pub fn origin(&self) -> Origin {
        self.0.origin
    }

    /// What exactly went wrong (`Unnamed` for an upstream's error and for errors with no cause of their own).
    pub fn cause(&self) -> Cause {
        self.0.cause
    }

    /// The upstream failed (answered with an error, or not at all), as opposed to the gateway or a limit
    /// refusing the request.
    pub fn is_upstream(&self) -> bool {
        matches!(self.0.origin, Origin::Upstream | Origin::UpstreamSilent)
    }

    /// The message meant for humans, without the operator's detail.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// OpenAI's `param`: the request field the error is about, if it names one.
    pub fn param(&self) -> Option<&str> {
        self.0.param.as_deref()
    }

    /// The wire `code`: the cause's, or an upstream's as it came; None when there is none.
    pub fn code(&self) -> Option<&str> {
        self.0.code.as_deref()
    }

    /// Seconds, sent as `retry-after`.
    pub fn retry_after(&self) -> Option<u64> {
        self.0.retry_after
    }

    /// A 400 for a request that is malformed or not accepted.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, ErrorKind::InvalidRequest, message)
    }

    /// A 400 naming the offending field.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self::invalid(message).with_param(param)
    }

    /// A 401 for a bad key (cause `InvalidApiKey`).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, ErrorKind::Authentication, message).with_cause(Cause::InvalidApiKey)
    }

    /// A 403: the caller may not do this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, ErrorKind::Permission, message)
    }

    /// A 404: what the request names does not exist here.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, ErrorKind::NotFound, message)
    }

    /// The 404 for a model the gateway does not serve (`param` `model`, cause `ModelNotFound`).
    pub fn model_not_found(model: &str) -> Self {
        Self::not_found(format!(
            "The model `{model}` does not exist on this gateway. GET /v1/models lists the models your key may use."
        ))
        .with_param("model")
        .with_cause(Cause::ModelNotFound)
    }

    /// A 500: the gateway itself failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, ErrorKind::Server, message)
    }

    /// A 502: the upstream failed or sent something unusable (cause `UpstreamError`, origin `Upstream`).
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(502, ErrorKind::BadGateway, message)
            .with_cause(Cause::UpstreamError)
            .with_origin(Origin::Upstream)
    }

    /// A 504: the upstream took too long (cause `UpstreamTimeout`, origin `Upstream`).
    pub fn gateway_timeout(message: impl Into<String>) -> Self {
        Self::new(504, ErrorKind::Timeout, message)
            .with_cause(Cause::UpstreamTimeout)
            .with_origin(Origin::Upstream)
    }

    /// A 503 whose `retry-after` is 1 second.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, ErrorKind::Unavailable, message).with_retry_after(1)
    }

    /// A request cut by the shutdown deadline.
    pub fn shutting_down() -> Self {
        Self::unavailable(
            "The gateway is shutting down and its grace period for requests in flight has ended; this answer was \
             cut short. Retry the request.",
        )
        .with_cause(Cause::ShuttingDown)
    }

    /// A stream cut at the output limit its upstream was sent and went past.
    pub fn output_limit_exceeded(upstream: &str, limit: u64) -> Self {
        Self::bad_gateway(format!(
            "upstream `{upstream}` went past the output limit of {limit} tokens it was sent; the stream was cut \
             there and is billed up to the limit"
        ))
        .with_cause(Cause::OutputLimitExceeded)
    }

    /// 503 while the usage ledger cannot take more records (its disk is failing; `backlog` records wait):
    /// nothing is answered that could not be recorded.
    pub fn ledger_unavailable(backlog: usize) -> Self {
        Self::unavailable(format!(
            "The gateway cannot write its usage ledger right now ({backlog} records waiting for the disk); requests \
             are refused until it can, so that no answer goes unrecorded. The operator has been told (see /readyz)."
        ))
        .with_retry_after(5)
        .with_cause(Cause::LedgerUnavailable)
    }

    /// Strict ledger: this request's usage record could not be synced, so its answer is withheld.
    pub fn record_not_synced() -> Self {
        Self::unavailable(
            "The gateway could not write this request's usage record to its ledger (its disk is failing), so the \
             answer is withheld. The operator has been told; retry later.",
        )
        .with_cause(Cause::LedgerUnavailable)
    }

    /// Names the request field the error is about (OpenAI's `param`).
    pub fn with_param(mut self, param: &str) -> Self {
        self.0.param = Some(param.to_string());
        self
    }

    /// Sets the wire `code` alone: a code the gateway decides nothing by. The gateway's own errors name
    /// their cause instead ([`ApiError::with_cause`]), which sets its code.
    pub fn with_code(mut self, code: &str) -> Self {
        self.0.code = Some(code.to_string());
        self
    }

    /// Names what went wrong, and answers it with that cause's wire `code`.
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.0.cause = cause;
        self.0.code = cause.code().map(str::to_string);
        self
    }

    /// Marks the error as the upstream not answering at all.
    pub fn unanswered(self) -> Self {
        self.with_origin(Origin::UpstreamSilent)
    }

    /// Sets who failed (see [`Origin`]).
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.0.origin = origin;
        self
    }

    /// The same error answered with another status (the kind follows it).
    pub fn with_status(mut self, status: u16) -> Self {
        self.0.status = status;
        self.0.kind = Self::kind_for_status(status);
        self
    }

    /// Sets the class of failure; the status stays as it is (see [`ApiError::with_status`]).
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.0.kind = kind;
        self
    }

    /// Sets `code` (or clears it).
    pub fn with_code_opt(mut self, code: Option<String>) -> Self {
        self.0.code = code;
        self
    }

    /// Keeps the upstream's Anthropic error `type`.
    pub fn with_anthropic_type(mut self, ty: Option<String>) -> Self {
        self.0.anthropic_type = ty;
        self
    }

    /// Sets the seconds sent as `retry-after` (and in Google's `RetryInfo`).
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.0.retry_after = Some(secs);
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

    /// The error with every upstream credential (and masked echo of one) removed from its texts: upstreams
    /// echo the key they were sent in their error messages.
    pub fn scrub_secrets(mut self) -> Self {
        use crate::secrets::scrub;
        if let std::borrow::Cow::Owned(m) = scrub(&self.0.message) {
            self.0.message = m;
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

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.0.status, self.0.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use serde_json::Value;

    #[test]
    fn renders_each_shape() {
        let e = ApiError::model_not_found("x");
        let v: Value =
            serde_json::from_slice(&Protocol::Chat.reply.error_body(&e, "req_1")).unwrap();
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "model");
        assert!(v["error"]["message"].as_str().unwrap().contains("req_1"));
        let v: Value =
            serde_json::from_slice(&Protocol::Messages.reply.error_body(&e, "req_1")).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
        assert_eq!(v["request_id"], "req_1");
    }

    #[test]
    fn a_cause_sets_its_code_and_is_what_the_code_reads() {
        let e = ApiError::ledger_unavailable(3);
        assert_eq!(e.cause(), Cause::LedgerUnavailable);
        assert_eq!(e.code(), Some("ledger_unavailable"));
        assert_eq!(
            ApiError::record_not_synced().cause(),
            Cause::LedgerUnavailable
        );
        let e = ApiError::unauthorized("no").with_cause(Cause::InvalidAdminToken);
        assert_eq!((e.status(), e.code()), (401, Some("invalid_admin_token")));
        // A wire code alone names no cause; an upstream's error has none of the gateway's.
        assert_eq!(
            ApiError::invalid("x").with_code("odd").cause(),
            Cause::Unnamed
        );
        let body = br#"{"error":{"message":"m","type":"t","code":"ledger_unavailable"}}"#;
        assert_eq!(
            ApiError::from_upstream(503, body, None).cause(),
            Cause::Unnamed
        );
        assert_eq!(Cause::Unnamed.code(), None);
    }

    #[test]
    fn upstream_errors_keep_their_details() {
        let body = br#"{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let e = ApiError::from_upstream(400, body, None);
        assert_eq!(e.code(), Some("context_length_exceeded"));
        assert_eq!(e.param(), Some("messages"));
        let body =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let e = ApiError::from_upstream(529, body, Some(3));
        assert_eq!(e.anthropic_type(), "overloaded_error");
        assert_eq!(e.openai_type(), "service_unavailable_error");
        assert_eq!(e.retry_after(), Some(3));
        let e = ApiError::from_upstream(502, b"<html>bad gateway</html>", None);
        assert!(e.message().contains("<html>bad gateway"));
    }

    #[test]
    fn google_errors_keep_their_status_and_retry_delay() {
        let body = br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"37s"}]}}"#;
        let e = ApiError::from_upstream(429, body, None);
        assert_eq!(e.code(), Some("RESOURCE_EXHAUSTED"));
        assert_eq!(e.retry_after(), Some(37));
        assert_eq!(e.google_status(), "RESOURCE_EXHAUSTED");
        let v = e.google_object("req_1");
        assert_eq!(v["code"], 429);
        assert_eq!(v["details"][0]["retryDelay"], "37s");
        let arr = br#"[{"error":{"code":400,"message":"User location is not supported","status":"FAILED_PRECONDITION"}}]"#;
        let e = ApiError::from_upstream(400, arr, Some(2));
        assert_eq!(e.google_status(), "FAILED_PRECONDITION");
        assert_eq!(e.retry_after(), Some(2));
        assert!(e.message().contains("User location"));
        let mine = ApiError::model_not_found("x").google_object("req_2");
        assert_eq!(mine["status"], "NOT_FOUND");
        assert_eq!(mine["details"][0]["reason"], "MODEL_NOT_FOUND");
        assert_eq!(mine["details"][0]["metadata"]["field"], "model");
    }

    #[test]
    fn an_event_stream_error_body_is_read_for_its_message_and_code() {
        let body = b"event: error\ndata: {\"error\":{\"message\":\"model crashed\",\"type\":\"server_error\",\"code\":\"engine_dead\"}}\n\n";
        let e = ApiError::from_upstream(500, body, None);
        assert_eq!(e.message(), "upstream error: model crashed");
        assert_eq!(e.code(), Some("engine_dead"));
        let body = b"event: error\ndata: {\"type\":\"error\",\"code\":\"overloaded\",\"message\":\"busy\",\"sequence_number\":0}\n\n";
        let e = ApiError::from_upstream(503, body, None);
        assert_eq!(e.message(), "upstream error: busy");
        assert_eq!(e.code(), Some("overloaded"));
        assert!(!e.message().contains("data:"));
    }
}
