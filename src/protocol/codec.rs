//! The one interface every wire protocol implements ([`Codec`]): everything the gateway, the doctor and the
//! console must know about a protocol is asked here, and each protocol's directory (`chat/`, `responses/`,
//! `messages/`, `gemini/`) answers it. What every protocol shares (walking JSON, SSE framing, the estimate rules, the
//! passthrough edits' serializer) stays in the shared modules the codecs call.
//!
//! The methods come in five groups: who the protocol is (names, paths); its clients (recognising them,
//! their key, their headers, decoding their requests, answering them: bodies, streams, errors, the models
//! list); the request's fields the gateway governs (the output limit, account state, paid hosted features,
//! token counting); its upstreams (encoding requests, decoding answers, streams, errors and usage in the
//! vendor's semantics, the credential, the model list, passthrough edits, reading a relayed stream); and a
//! client of some other gateway (the doctor's minimal request and how an SDK reads the answer). Beside it are
//! what its methods hand out: the stream encoder and decoder traits, and how a canonical request goes to an
//! upstream of another protocol (`EgressOptions`).

use std::borrow::Cow;

use serde_json::Value;

use super::canon::{self, Usage};
use super::client::{ClientEvent, NoText};
use super::edit::Edit;
use super::error::ApiError;
use super::hosted::Asks;
use super::relay::Seen;
use super::sse::SseEvent;
use crate::http::Request;

/// How a canonical request is sent to an upstream of another protocol.
#[derive(Debug, Clone)]
pub struct EgressOptions {
    /// The model name the upstream knows.
    pub model: String,
    pub stream: bool,
    /// The output limit for upstreams that require one when the client gave none.
    pub default_max_tokens: u64,
    /// Chat upstreams: send the limit as `max_completion_tokens` (OpenAI) instead of `max_tokens`.
    pub max_completion_tokens_field: bool,
    /// Messages upstreams: ask for structured output with a forced tool instead of `output_config.format`.
    pub structured_via_tool: bool,
}

/// The name of the forced tool that carries structured output when `structured_via_tool` is on.
pub const STRUCTURED_TOOL: &str = "structured_output";

/// Turns an upstream's SSE events into canonical stream events. Decoders never emit `Start` (the gateway
/// does, before the first upstream byte is read) and report the upstream's ids nowhere.
pub trait StreamDecoder: Send {
    /// Decodes one event into `out`. Returns true once the upstream's stream is complete (its end marker
    /// was seen); an in-stream upstream error is emitted as `StreamEvent::Error` and also completes it.
    fn feed(&mut self, event: &SseEvent, out: &mut Vec<canon::StreamEvent>) -> bool;
}

/// Turns canonical stream events into one protocol's SSE bytes.
pub trait StreamEncoder: Send {
    /// Appends the SSE bytes for one event (possibly none, possibly several SSE events) to `out`.
    fn encode(&mut self, event: &canon::StreamEvent, out: &mut Vec<u8>);
    /// Appends whatever closes the stream (final chunks, terminal events, `[DONE]`).
    /// After an `Error` event nothing more is written.
    fn finish(&mut self, out: &mut Vec<u8>);
}

/// The headers a request carries for a protocol (at most three; nothing allocated but a value that needs
/// it).
pub type Headers<'a> = [Option<(&'static str, Cow<'a, str>)>; 3];

/// One entry of a models list, as the gateway lists it.
pub struct Listed<'a> {
    pub id: &'a str,
    /// Who serves it (an upstream's name, never an address).
    pub owned_by: &'a str,
    /// The most output tokens the model gives (where a protocol's list says so).
    pub max_output: u64,
}

/// Which of a protocol's endpoints a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    Generate,
    CountTokens,
}

/// How a stream to a client is framed: as the SSE events the encoders write, or (Gemini without `alt=sse`)
/// as a JSON array of their data, written as they come (`sse::JsonArray`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    #[default]
    Sse,
    JsonArray,
}

/// A wire protocol. Implemented once per protocol directory; reached through `Protocol` (which dereferences
/// to its codec) from the registry in `protocol/mod.rs`.
pub trait Codec: Sync + Send {
    // --- Who it is.

    /// Short name in logs, usage records, metrics, config and the doctor's `--protocol`: `chat`.
    fn name(&self) -> &'static str;
    /// The API's name as its vendor writes it: `Chat Completions`.
    fn title(&self) -> &'static str;
    /// The vendor whose SDKs speak it: `OpenAI`.
    fn vendor(&self) -> &'static str;
    /// Its clients, as hints name them: `OpenAI clients`.
    fn clients(&self) -> &'static str;
    /// The `kind` of an upstream that speaks it (config): `openai-chat`.
    fn upstream_kind(&self) -> &'static str;
    /// The gateway's endpoint: `/v1/chat/completions`.
    fn path(&self) -> &'static str;
    /// Whether the vendor's SDKs take a base URL that ends in `/v1` (and append the path without it); an
    /// upstream's base URL follows the same convention.
    fn base_url_has_v1(&self) -> bool;
    /// What the vendor's SDKs append to their base URL.
    fn sdk_path(&self) -> &'static str {
        let p = self.path();
        if self.base_url_has_v1() {
            p.strip_prefix("/v1").unwrap_or(p)
        } else {
            p
        }
    }
    /// The gateway's token counting endpoint, if the protocol has one.
    fn count_tokens_path(&self) -> Option<&'static str> {
        None
    }
    /// Which endpoint of the protocol `path` is, if any: its `path` or its `count_tokens_path` (a protocol
    /// whose paths name the model matches their pattern, and `path` is their template).
    fn serves(&self, path: &str) -> Option<Serves> {
        if path == self.path() {
            Some(Serves::Generate)
        } else if self.count_tokens_path() == Some(path) {
            Some(Serves::CountTokens)
        } else {
            None
        }
    }
    /// The model a request names in its path (protocols whose paths name it; None: its body's `model`).
    fn path_model<'p>(&self, _path: &'p str) -> Option<Cow<'p, str>> {
        None
    }
    /// Whether a request asks for a stream by its path (None: its body's `stream` says).
    fn path_stream(&self, _path: &str) -> Option<bool> {
        None
    }
    /// What the SDKs append to their base URL for a request to `model` (protocols whose paths name it).
    fn sdk_request_path(&self, _model: &str, _stream: bool) -> Cow<'static, str> {
        Cow::Borrowed(self.sdk_path())
    }
    /// The path of the protocol's own models list besides `GET /v1/models`, if it has one.
    fn models_list_path(&self) -> Option<&'static str> {
        None
    }
    /// A hint for a path no endpoint serves that looks like a mistake this protocol's clients make (a doubled
    /// version, an endpoint path in the base URL), if it is one.
    fn path_hint(&self, _path: &str) -> Option<String> {
        None
    }

    // --- Its clients.

    /// Whether an answer at `path` that nothing else decides takes this protocol's shape (errors the HTTP
    /// layer gives before routing).
    fn shapes_errors_at(&self, _path: &str) -> bool {
        false
    }
    /// Whether a request outside the model endpoints comes from this protocol's SDK (it sends a header only
    /// they send).
    fn recognizes(&self, _req: &Request) -> bool {
        false
    }
    /// The key a request presents, in the headers this protocol's clients send it in.
    fn presented_key<'r>(&self, req: &'r Request) -> Result<&'r str, ApiError>;
    /// How a stream to this request's client is framed.
    fn framing(&self, _req: &Request) -> Framing {
        Framing::Sse
    }
    /// The header that repeats the request id for this protocol's SDKs (besides `x-request-id`).
    fn id_header(&self) -> Option<&'static str> {
        None
    }
    /// The `www-authenticate` challenge of a 401 answer, where the protocol's clients expect one.
    fn challenge(&self) -> Option<&'static str> {
        None
    }
    /// A request whose head the protocol refuses (a header it requires missing, a path naming what the
    /// gateway does not serve), as the client's error.
    fn check_headers(&self, _req: &Request) -> Result<(), ApiError> {
        Ok(())
    }
    /// Puts a client's body in the one form every rule and the decoder read, before anything reads it (a
    /// wire that takes two spellings of a field gets one; what the path already says leaves the body).
    /// `counts`: a token-counting request. What is sent upstream is this body, with the attempt's edits.
    fn read_as_one(&self, _body: &mut Value, _counts: bool) -> Result<(), ApiError> {
        Ok(())
    }
    /// Checks the fields this protocol's requests must have before anything else (the envelope's `model`
    /// and `stream` are checked by `request.rs` for every protocol).
    fn validate(&self, body: &Value) -> Result<(), ApiError>;
    /// Decodes (and so validates) a client's request body into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<canon::Request, ApiError>;
    /// Whether a client's stream is to carry a usage report.
    fn wants_stream_usage(&self, _body: &Value) -> bool {
        true
    }
    /// A fresh id for an answer.
    fn new_response_id(&self) -> String;
    /// A complete canonical answer as this protocol's response body.
    fn encode_response(&self, resp: &canon::Response, req: &canon::Request) -> Value;
    /// An encoder of canonical stream events into this protocol's SSE lifecycle; its error events carry
    /// `request_id`.
    fn stream_encoder(
        &self,
        req: &canon::Request,
        include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder>;
    /// What keeps an idle stream open without disturbing its clients.
    fn keepalive(&self) -> &'static [u8] {
        b": keepalive\n\n"
    }
    /// The whole error body of an answer.
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8>;
    /// The in-stream error event of a stream that fails after it started; it carries the request id.
    /// `next_seq`: the number the event takes where events are numbered.
    fn error_event(&self, err: &ApiError, request_id: &str, next_seq: Option<u64>) -> Vec<u8>;
    /// The number the first of these held stream bytes carries, where events are numbered (the event that
    /// replaces them takes it).
    fn next_sequence(&self, _held: &[u8]) -> Option<u64> {
        None
    }
    /// The models list.
    fn models_list(&self, models: &[Listed], created: u64) -> Value;
    /// One model of the list (`GET /v1/models/{id}`).
    fn model_entry(&self, model: &Listed, created: u64) -> Value;

    // --- The request's fields the gateway governs.

    /// The fields that carry a request's output limit, preferred first (in the object `limit_parent` names,
    /// else at the top level).
    fn limit_fields(&self) -> &'static [&'static str];
    /// The object the limit fields sit in (Gemini's `generationConfig`), where they are not at the top level.
    fn limit_parent(&self) -> Option<&'static str> {
        None
    }
    /// The one field an upstream of this protocol is sent the limit in (`max_completion_tokens`: the
    /// upstream takes OpenAI's current name).
    fn upstream_limit_field(&self, _max_completion_tokens: bool) -> &'static str {
        self.limit_fields()[0]
    }
    /// The field that asks for several answers, each up to the limit (None: one answer).
    fn choices_field(&self) -> Option<&'static str> {
        None
    }
    /// The top-level request fields the canonical request carries whole, each with the shape of the values
    /// it carries (`protocol/carried.rs`), and those that only frame the answer (the stream flag, the end
    /// user's id, metadata). The answer cache keys on the canonical request and on every other field, or
    /// value of another shape, as sent (`protocol/fingerprint.rs`): a field left off only makes entries more
    /// particular, never shared wrongly.
    fn carried(&self) -> &'static [(&'static str, super::carried::Shape)] {
        &[]
    }
    /// Whether an upstream of this protocol needs an output limit on every request.
    fn requires_output_limit(&self) -> bool {
        false
    }
    /// Refuses headers that would open state kept in the operator's upstream account.
    fn refuse_account_headers(&self, _req: &Request) -> Result<(), ApiError> {
        Ok(())
    }
    /// The edit that keeps an answer from being stored in the operator's account.
    fn store_nothing(&self) -> Option<(&'static str, Edit<'static>)> {
        None
    }
    /// Where nothing is stored: the edit that makes a reasoning model's answers carry their reasoning
    /// whole, so that a client can send it back on its next turn (an id alone would name nothing).
    fn reasoning_inline(&self) -> Option<(&'static str, Edit<'static>)> {
        None
    }
    /// The paid hosted tools and service tiers a request asks for.
    fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError>;
    /// The request asks for parts of an answer the canonical form does not hold (log probabilities,
    /// audio): its answers are never kept in the answer cache, whose replay would lack them.
    fn asks_beyond_canon(&self, _body: &Value) -> bool {
        false
    }
    /// The edit that writes the use limit `cap` where the client gave none (`tools`: the positions of the
    /// tools it limits).
    fn hosted_cap<'a>(&self, _cap: u64, _tools: &'a [usize]) -> Option<(&'static str, Edit<'a>)> {
        None
    }
    /// Whether its answers count the hosted tool uses they made.
    fn reports_tool_uses(&self) -> bool {
        true
    }
    /// Whether the tier its answers name is the rate they are billed at.
    fn reports_rate_tier(&self) -> bool {
        true
    }
    /// A token counting request decoded (and so validated) into the canonical request.
    fn decode_count_request(&self, _body: &Value) -> Result<canon::Request, ApiError> {
        Err(ApiError::not_found(
            "This protocol has no token counting endpoint.",
        ))
    }
    /// The token counting answer for `input_tokens`.
    fn count_answer(&self, _input_tokens: u64) -> Vec<u8> {
        Vec::new()
    }
    /// The tokens an upstream's token counting answer reports.
    fn counted_tokens(&self, _raw: &[u8]) -> Option<u64> {
        None
    }
    /// The edit that names `model`, the upstream's, where a token counting body names its model besides the
    /// path (Gemini's `generateContentRequest.model`).
    fn count_model_edit<'a>(&self, _model: &'a str) -> Option<(&'static str, Edit<'a>)> {
        None
    }

    // --- Its upstreams.

    /// The generation endpoint under an upstream's base URL.
    fn upstream_path(&self) -> &'static str;
    /// The token counting endpoint under an upstream's base URL, if it has one.
    fn upstream_count_path(&self) -> Option<&'static str> {
        None
    }
    /// The generation endpoint (and query) under an upstream's base URL for a request to `model`, streamed
    /// or not (protocols whose paths name the model and the stream).
    fn upstream_endpoint(&self, _model: &str, _stream: bool) -> Cow<'static, str> {
        Cow::Borrowed(self.upstream_path())
    }
    /// The token counting endpoint under an upstream's base URL for `model`, if it has one.
    fn upstream_count_endpoint(&self, _model: &str) -> Option<Cow<'static, str>> {
        self.upstream_count_path().map(Cow::Borrowed)
    }
    /// Whether a body sent upstream names its model (`model`); protocols whose paths name it leave it out.
    fn model_in_body(&self) -> bool {
        true
    }
    /// The field of a complete answer that holds its usage.
    fn usage_field(&self) -> &'static str {
        "usage"
    }
    /// The model list under an upstream's base URL (what health probes and discovery ask for).
    fn models_path(&self) -> &'static str {
        "/models"
    }
    /// The model ids of an upstream's model list.
    fn model_ids(&self, list: &Value) -> Option<Vec<String>> {
        let items = list.get("data")?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str))
                .map(str::to_string)
                .collect(),
        )
    }
    /// The headers that carry an upstream's credential (and the version it speaks).
    fn credentials<'k>(&self, key: Option<&'k str>) -> Headers<'k>;
    /// A header of the client's request passed on to an upstream of the same protocol.
    fn passed_on(&self, _req: &Request) -> Option<(&'static str, String)> {
        None
    }
    /// The edit that makes a passthrough stream report its usage (the gateway bills from it).
    fn stream_usage_on(&self) -> Option<(&'static str, Edit<'static>)> {
        None
    }
    /// Encodes a canonical request for an upstream.
    fn encode_request(&self, req: &canon::Request, opts: &EgressOptions)
        -> Result<Value, ApiError>;
    /// Decodes an upstream's complete answer.
    fn decode_response(
        &self,
        body: &Value,
        opts: &EgressOptions,
    ) -> Result<canon::Response, ApiError>;
    /// A decoder of an upstream's stream.
    fn stream_decoder(&self, opts: &EgressOptions) -> Box<dyn StreamDecoder>;
    /// Reads a `usage` object into the canonical usage, in the vendor's semantics.
    fn usage_from(&self, usage: &Value) -> Option<Usage>;
    /// Reads one event of a stream relayed as it came (passthrough) into `seen`; returns whether to pass it
    /// on. Comments never reach it.
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool;
    /// What follows the in-stream error of a relayed stream that broke (numbered `seq`), if anything.
    fn failed_tail(
        &self,
        _err: &ApiError,
        _request_id: &str,
        _seq: u64,
        _seen: &mut Seen,
    ) -> Vec<u8> {
        Vec::new()
    }
    /// Calls `edit` on each text field of a relayed event's data that `observe` reads text from, in the
    /// order it reads them.
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>));

    // --- A client of some gateway (the doctor).

    /// The minimal request: model plus one short text; no reasoning, tools or schema.
    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value;
    /// The headers its official SDK sends the key in (and the version it speaks).
    fn client_headers<'k>(&self, key: &'k str) -> Headers<'k>;
    /// The text of a complete answer, where the specification says it is.
    fn answer_text(&self, answer: &Value) -> Result<String, NoText>;
    /// The stop reason of a complete answer.
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str>;
    /// The event that ends a complete stream.
    fn stream_terminal(&self) -> &'static str;
    /// What one event of a stream means to the official SDK (`first`: the stream's first event).
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent;
}
