//! Wire protocols: the canonical types, one codec per protocol, SSE framing and the error type.
//!
//! Each codec (`chat`, `responses`, `messages`) converts between its wire JSON/SSE and the canonical types in
//! `canon`. Nothing here does I/O: codecs take and return values and bytes.

pub mod account;
pub mod answer;
pub mod canon;
pub mod chat;
pub mod egress;
mod error;
pub mod estimate;
pub mod fields;
pub mod hosted;
pub mod limits;
pub mod messages;
pub mod observe;
pub mod openai;
pub mod request;
pub mod responses;
pub mod sse;

pub use error::{ApiError, ErrorKind, Origin};

/// The three client-facing protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    Chat,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
    /// Anthropic Messages, `POST /v1/messages`.
    Messages,
}

impl Protocol {
    /// Short name used in logs, usage records and config.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Chat => "chat",
            Protocol::Responses => "responses",
            Protocol::Messages => "messages",
        }
    }

    /// The endpoint path.
    pub fn path(self) -> &'static str {
        match self {
            Protocol::Chat => "/v1/chat/completions",
            Protocol::Responses => "/v1/responses",
            Protocol::Messages => "/v1/messages",
        }
    }

    pub fn from_path(path: &str) -> Option<Protocol> {
        match path {
            "/v1/chat/completions" => Some(Protocol::Chat),
            "/v1/responses" => Some(Protocol::Responses),
            "/v1/messages" => Some(Protocol::Messages),
            _ => None,
        }
    }

    /// Decodes a request body of this protocol into the canonical request (validating it on the way).
    pub fn decode_request(self, body: &serde_json::Value) -> Result<canon::Request, ApiError> {
        match self {
            Protocol::Chat => chat::decode_request(body),
            Protocol::Responses => responses::decode_request(body),
            Protocol::Messages => messages::decode_request(body),
        }
    }

    /// Encodes a complete canonical answer as this protocol's response body.
    pub fn encode_response(
        self,
        resp: &canon::Response,
        req: &canon::Request,
    ) -> serde_json::Value {
        match self {
            Protocol::Chat => chat::encode_response(resp),
            Protocol::Responses => responses::encode_response(resp, req),
            Protocol::Messages => messages::encode_response(resp),
        }
    }

    /// A stream encoder that turns canonical events into this protocol's SSE lifecycle; its error events
    /// carry `request_id`.
    pub fn stream_encoder(
        self,
        req: &canon::Request,
        include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        let id = request_id.to_string();
        match self {
            Protocol::Chat => {
                Box::new(chat::ChatStreamEncoder::new(include_usage).with_request_id(id))
            }
            Protocol::Responses => {
                Box::new(responses::ResponsesStreamEncoder::new(req).with_request_id(id))
            }
            Protocol::Messages => {
                Box::new(messages::MessagesStreamEncoder::new().with_request_id(id))
            }
        }
    }

    /// The in-stream error event of this protocol, for a stream that fails after it started; it carries the
    /// request id. `next_seq`: Responses events are numbered, and the error takes the next number.
    pub fn error_event(self, err: &ApiError, request_id: &str, next_seq: Option<u64>) -> Vec<u8> {
        use serde_json::json;
        let mut out = Vec::new();
        match self {
            Protocol::Chat => {
                let d = json!({"error": err.openai_object(request_id)});
                sse::push_event(&mut out, None, &d.to_string());
            }
            Protocol::Messages => {
                let d = json!({"type": "error", "error": err.anthropic_object(request_id),
                               "request_id": request_id});
                sse::push_event(&mut out, Some("error"), &d.to_string());
            }
            Protocol::Responses => {
                let code = err.code().unwrap_or("server_error");
                let d = json!({"type": "error", "code": code,
                               "message": err.openai_object(request_id)["message"],
                               "param": err.param(), "sequence_number": next_seq.unwrap_or(0)});
                sse::push_event(&mut out, Some("error"), &d.to_string());
            }
        }
        out
    }

    /// Reads a `usage` object of this protocol.
    pub fn usage_from(self, usage: &serde_json::Value) -> Option<canon::Usage> {
        match self {
            Protocol::Chat => chat::usage_from(usage),
            Protocol::Responses => responses::usage_from(usage),
            Protocol::Messages => messages::usage_from(usage),
        }
    }
}

/// How a canonical request is sent to an upstream of another protocol.
#[derive(Debug, Clone)]
pub struct EgressOptions {
    /// The model name the upstream knows.
    pub model: String,
    pub stream: bool,
    /// `max_tokens` for upstreams that require one (Messages) when the client gave none.
    pub default_max_tokens: u64,
    /// Chat upstreams: send the limit as `max_completion_tokens` (OpenAI) instead of `max_tokens`.
    pub max_completion_tokens_field: bool,
    /// Messages upstreams: ask for structured output with a forced tool instead of `output_config.format`.
    pub structured_via_tool: bool,
}

/// The name of the forced tool that carries structured output when `structured_via_tool` is on.
pub const STRUCTURED_TOOL: &str = "structured_output";

impl Protocol {
    /// Encodes a canonical request for an upstream speaking this protocol.
    pub fn encode_request(
        self,
        req: &canon::Request,
        opts: &EgressOptions,
    ) -> Result<serde_json::Value, ApiError> {
        match self {
            Protocol::Chat => chat::upstream::encode_request(req, opts),
            Protocol::Responses => responses::upstream::encode_request(req, opts),
            Protocol::Messages => messages::upstream::encode_request(req, opts),
        }
    }

    /// Decodes an upstream's complete answer in this protocol.
    pub fn decode_response(
        self,
        body: &serde_json::Value,
        opts: &EgressOptions,
    ) -> Result<canon::Response, ApiError> {
        match self {
            Protocol::Chat => chat::upstream::decode_response(body),
            Protocol::Responses => responses::upstream::decode_response(body),
            Protocol::Messages => messages::upstream::decode_response(body, opts),
        }
    }

    /// A decoder for an upstream's stream in this protocol.
    pub fn stream_decoder(self, opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        match self {
            Protocol::Chat => Box::new(chat::upstream::ChatStreamDecoder::default()),
            Protocol::Responses => Box::new(responses::upstream::ResponsesStreamDecoder::default()),
            Protocol::Messages => Box::new(messages::upstream::MessagesStreamDecoder::new(
                opts.structured_via_tool,
            )),
        }
    }
}

/// Turns an upstream's SSE events into canonical stream events. Decoders never emit `Start` (the gateway
/// does, before the first upstream byte is read) and report the upstream's ids nowhere.
pub trait StreamDecoder: Send {
    /// Decodes one event into `out`. Returns true once the upstream's stream is complete (its end marker
    /// was seen); an in-stream upstream error is emitted as `StreamEvent::Error` and also completes it.
    fn feed(&mut self, event: &sse::SseEvent, out: &mut Vec<canon::StreamEvent>) -> bool;
}

/// Turns canonical stream events into one protocol's SSE bytes.
pub trait StreamEncoder: Send {
    /// Appends the SSE bytes for one event (possibly none, possibly several SSE events) to `out`.
    fn encode(&mut self, event: &canon::StreamEvent, out: &mut Vec<u8>);
    /// Appends whatever closes the stream (final chunks, terminal events, `[DONE]`).
    /// After an `Error` event nothing more is written.
    fn finish(&mut self, out: &mut Vec<u8>);
}
