//! What the gateway reads and changes in a client request before (or instead of) decoding it, per protocol:
//! which endpoint a path is, the headers a protocol requires, the envelope every request needs (`model`,
//! `stream`), fresh response ids, keepalive payloads, and the edits a same-protocol passthrough makes (the
//! model renamed, stream usage switched on, the headers passed on). `server/` asks these; it names no wire
//! field itself.

use serde_json::{json, Value};

use super::{chat, fields, messages, responses, ApiError, Protocol};
use crate::http::Request;
use crate::util::new_id;

/// The endpoints a client may call, beyond their protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// Generation: `/v1/chat/completions`, `/v1/responses`, `/v1/messages`.
    Generate(Protocol),
    /// `/v1/messages/count_tokens` (Anthropic's token counting).
    CountTokens,
}

impl Endpoint {
    /// The endpoint at `path`, if it is one.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            COUNT_TOKENS_PATH => Some(Endpoint::CountTokens),
            p => Protocol::from_path(p).map(Endpoint::Generate),
        }
    }

    /// The protocol whose shapes (errors, headers) its answers take.
    pub fn protocol(self) -> Protocol {
        match self {
            Endpoint::Generate(p) => p,
            Endpoint::CountTokens => Protocol::Messages,
        }
    }
}

/// Anthropic's token counting endpoint (on the gateway and on Anthropic upstreams).
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

impl Protocol {
    /// The protocol whose error shape suits an answer at `path` when nothing else is known (errors the HTTP
    /// layer gives before routing): Anthropic's for paths with `/messages`, OpenAI's elsewhere.
    pub fn for_errors_at(path: Option<&str>) -> Protocol {
        match path {
            Some(p) if p.contains("/messages") => Protocol::Messages,
            _ => Protocol::Chat,
        }
    }

    /// The protocol whose error shape suits an answer to `req` outside the model endpoints: Anthropic's
    /// when it sends `anthropic-version` (an Anthropic SDK) or its path has `/messages`.
    pub fn for_request(req: &Request) -> Protocol {
        if req.header("anthropic-version").is_some() {
            Protocol::Messages
        } else {
            Protocol::for_errors_at(Some(&req.path))
        }
    }

    /// The `anthropic-beta` flags a request carries (each header value as it came).
    pub fn beta_flags(req: &Request) -> Vec<&str> {
        req.header_all("anthropic-beta").collect()
    }

    /// A request without a header the protocol requires, as the client's error (`anthropic-version` for
    /// Messages).
    pub fn check_headers(self, req: &Request) -> Result<(), ApiError> {
        if self == Protocol::Messages && req.header("anthropic-version").is_none() {
            return Err(ApiError::invalid_param(
                "anthropic-version",
                "anthropic-version: header is required (for example `anthropic-version: 2023-06-01`).",
            ));
        }
        Ok(())
    }

    /// Checks the fields every request of the protocol needs, without decoding the whole body; returns
    /// `stream`.
    pub fn validate_envelope(self, body: &Value) -> Result<bool, ApiError> {
        let o = fields::object(body, "body")?;
        fields::req_str(o, "model", "")?;
        let stream = fields::stream_flag(o)?;
        match self {
            Protocol::Chat => chat::validate(body)?,
            Protocol::Responses => responses::validate(body)?,
            Protocol::Messages => messages::validate(body)?,
        }
        Ok(stream)
    }

    /// The model a request names (empty when it names none; validation refuses that first).
    pub fn requested_model(body: &Value) -> &str {
        body.get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// A fresh id for an answer in this protocol.
    pub fn new_response_id(self) -> String {
        match self {
            Protocol::Chat => new_id("chatcmpl-"),
            Protocol::Responses => new_id("resp_"),
            Protocol::Messages => new_id("msg_"),
        }
    }

    /// Whether a client's stream should carry a usage report: Chat clients ask with
    /// `stream_options.include_usage`; the other protocols always carry one.
    pub fn wants_stream_usage(self, body: &Value) -> bool {
        self != Protocol::Chat
            || body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true)
    }

    /// What keeps an idle stream of this protocol open without disturbing its clients: an SSE comment for
    /// the OpenAI protocols (their SDKs skip comments), a `ping` event for Messages.
    pub fn keepalive(self) -> &'static [u8] {
        match self {
            Protocol::Messages => b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
            Protocol::Chat | Protocol::Responses => b": keepalive\n\n",
        }
    }

    /// Edits a client's body for an upstream of the same protocol, in place: the model renamed, and for a
    /// Chat stream, usage switched on (the gateway bills from it; see [`Protocol::wants_stream_usage`] for
    /// whether the client sees it). Idempotent, so a failover can edit it again.
    pub fn edit_for_passthrough(self, body: &mut Value, upstream_model: &str, stream: bool) {
        body["model"] = json!(upstream_model);
        if self == Protocol::Chat && stream {
            match body.get_mut("stream_options") {
                Some(Value::Object(so)) => {
                    so.insert("include_usage".into(), json!(true));
                }
                _ => body["stream_options"] = json!({"include_usage": true}),
            }
        }
    }

    /// The header values a same-protocol upstream is sent from the client's request (Anthropic's
    /// `anthropic-beta` flags, all of them joined).
    pub fn passed_on_beta(self, req: &Request) -> Option<String> {
        if self != Protocol::Messages {
            return None;
        }
        let all = Protocol::beta_flags(req);
        (!all.is_empty()).then(|| all.join(","))
    }
}

/// A count_tokens body decoded (and so validated) as a Messages request; it carries no `max_tokens`.
pub fn decode_count_request(body: &Value) -> Result<super::canon::Request, ApiError> {
    let mut body = body.clone();
    if body.get("max_tokens").is_none() {
        body["max_tokens"] = json!(1);
    }
    messages::decode_request(&body)
}

/// The count_tokens answer for `input_tokens`.
pub fn count_answer(input_tokens: u64) -> Vec<u8> {
    json!({ "input_tokens": input_tokens })
        .to_string()
        .into_bytes()
}

/// The tokens an upstream's count_tokens answer reports.
pub fn counted_tokens(raw: &[u8]) -> Option<u64> {
    serde_json::from_slice::<Value>(raw)
        .ok()?
        .get("input_tokens")?
        .as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_error_shapes_by_path() {
        assert_eq!(
            Endpoint::from_path("/v1/messages/count_tokens"),
            Some(Endpoint::CountTokens)
        );
        assert_eq!(
            Endpoint::from_path("/v1/responses"),
            Some(Endpoint::Generate(Protocol::Responses))
        );
        assert_eq!(Endpoint::from_path("/v1/other"), None);
        assert_eq!(
            Protocol::for_errors_at(Some("/v1/messages/count_tokens")),
            Protocol::Messages
        );
        assert_eq!(Protocol::for_errors_at(None), Protocol::Chat);
    }

    #[test]
    fn passthrough_edits_are_idempotent() {
        let mut body = json!({"model": "public", "stream": true, "messages": []});
        assert!(!Protocol::Chat.wants_stream_usage(&body));
        Protocol::Chat.edit_for_passthrough(&mut body, "private", true);
        let once = body.clone();
        Protocol::Chat.edit_for_passthrough(&mut body, "private", true);
        assert_eq!(body, once);
        assert_eq!(body["model"], "private");
        assert_eq!(body["stream_options"]["include_usage"], true);
        let asked = json!({"model": "m", "stream_options": {"include_usage": true}});
        assert!(Protocol::Chat.wants_stream_usage(&asked));
        let mut m = json!({"model": "m"});
        assert!(Protocol::Messages.wants_stream_usage(&m));
        Protocol::Messages.edit_for_passthrough(&mut m, "x", true);
        assert!(m.get("stream_options").is_none());
    }
}
