//! What a wire protocol is and does: one [`Codec`] value per protocol directory (`chat/`, `responses/`,
//! `messages/`, `gemini/`), everything the gateway, the doctor and the console ask of a protocol.
//!
//! A codec is data and a few small interfaces. The data says who the protocol is (names, paths, where its
//! clients put their key, the fields that carry the output limit, the edits that keep state out of the
//! operator's account). The interfaces do its work, each in the file of its directory that holds its code
//! (as in `chat/`): [`RequestCodec`] (`chat/decode.rs`: a client's request read and decoded),
//! [`ReplyCodec`] (`chat/reply.rs`: answers, streams and errors to clients), [`UpstreamCodec`]
//! (`chat/upstream.rs`: requests to its upstreams, their answers and streams decoded), [`RelayReader`]
//! (`chat/relay.rs`: a stream relayed as it came, read for usage and its end), [`DoctorProbe`]
//! (`chat/client.rs`: the doctor's minimal request and how the SDK reads the answer), [`ModelList`]; and
//! where a protocol has them, [`TokenCounting`] and [`ModelPaths`] (paths that name the
//! model). What every protocol shares (walking JSON, SSE framing, the estimate rules, the passthrough
//! edits' serializer) stays in the shared modules the codecs call.

use std::borrow::Cow;

use serde_json::Value;

use super::canon::{self, Usage};
use super::carried::Shape;
use super::client::{ClientEvent, NoText};
use super::completion::Completions;
use super::edit::Edit;
use super::egress::EgressOptions;
use super::embed::{EmbedRequest, Embeddings};
use super::error::ApiError;
use super::hosted::Rules;
use super::relay::Seen;
use super::sse::SseEvent;

mod asked;
use crate::http::HttpRequest;

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
pub(crate) type AuthHeaders<'a> = [Option<(&'static str, Cow<'a, str>)>; 3];

/// One entry of a models list, as the gateway lists it.
pub struct Listed<'a> {
    pub id: &'a str,
    /// Who serves it (an upstream's name, never an address).
    pub owned_by: &'a str,
    /// The most output tokens the model gives (where a protocol's list says so).
    pub max_output: u64,
    /// One of its upstreams has embeddings (where a protocol's list names the methods a model serves).
    pub embeds: bool,
}

/// Which of a protocol's endpoints a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serves {
    /// Generation.
    Generate,
    /// Token counting.
    CountTokens,
    /// Embeddings.
    Embed,
    /// Legacy text completions.
    Complete,
}

/// How a stream to a client is framed: as the SSE events the encoders write, or (Gemini without `alt=sse`)
/// as a JSON array of their data, written as they come (`sse::JsonArray`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    #[default]
    Sse,
    JsonArray,
}

/// Where a protocol's clients put their key: its own header, a query parameter where it takes one, and
/// always `Authorization: Bearer`; `how` tells them (in the error texts).
pub struct KeyIn {
    pub header: &'static str,
    pub query: Option<&'static str>,
    pub how: &'static str,
}

/// A check of a request's head (its headers) that refuses it with the client's error.
pub(crate) type HeadCheck = fn(&HttpRequest) -> Result<(), ApiError>;
/// A client's body put in one form (`counts`: a token-counting request).
pub(crate) type BodyReading = fn(&mut Value, bool) -> Result<(), ApiError>;
/// The number the first of some held stream bytes carries.
pub(crate) type Numbering = fn(&[u8]) -> Option<u64>;
/// What follows the in-stream error (`err`, for `request_id`, numbered `seq`) of a relayed stream.
pub(crate) type FailedTail = fn(&ApiError, &str, u64, &mut Seen) -> Vec<u8>;

/// What keeps an idle SSE stream open: a comment, which every SSE reader skips.
pub(crate) const COMMENT_KEEPALIVE: &[u8] = b": keepalive\n\n";

/// The ids of a models list of OpenAI's shape (`data[].id`), which Anthropic's shares.
pub(crate) const DATA_IDS: IdsIn = IdsIn {
    array: "data",
    field: "id",
    prefix: "",
};

/// How an upstream is sent its credential: in `header` (None: `Authorization: Bearer`), with the API
/// version it speaks where it asks for one.
pub struct Credential {
    pub header: Option<&'static str>,
    pub version: Option<(&'static str, &'static str)>,
}

/// Where an upstream's models list holds the ids: each object of the array `array`, its field `field`,
/// without `prefix`.
pub struct IdsIn {
    pub array: &'static str,
    pub field: &'static str,
    pub prefix: &'static str,
}

/// The fields that carry a request's output limit.
pub struct LimitFields {
    /// The fields a client may send it in, preferred first (in `parent`, else at the top level).
    pub fields: &'static [&'static str],
    /// The object they sit in (Gemini's `generationConfig`), where they are not at the top level.
    pub parent: Option<&'static str>,
    /// The one field an upstream is sent it in: with OpenAI's current name (`max_completion_tokens`), and
    /// without.
    pub upstream: (&'static str, &'static str),
    /// The field that asks for several answers, each up to the limit (None: one answer).
    pub choices: Option<&'static str>,
    /// Whether an upstream of this protocol needs a limit on every request.
    pub required: bool,
}

/// Where the use limit of hosted tools is written when the client gave none.
pub enum HostedCap {
    /// One top-level field limits every hosted tool together (Responses' `max_tool_calls`).
    Shared(&'static str),
    /// Each limited tool of the list `.0` carries its own field `.1` (Messages' `tools[].max_uses`).
    EachTool(&'static str, &'static str),
}

/// A protocol: who it is (data), and the interfaces that do its work. One per protocol directory
/// (`chat::CODEC`, …), reached through `Protocol` (which dereferences to it) from the registry in
/// `protocol/mod.rs`.
pub struct Codec {
    // --- Who it is.
    /// Short name in logs, usage records, metrics, config and the doctor's `--protocol`: `chat`.
    pub name: &'static str,
    /// The API's name as its vendor writes it: `Chat Completions`.
    pub title: &'static str,
    /// The vendor whose SDKs speak it: `OpenAI`.
    pub vendor: &'static str,
    /// Its clients, as hints name them: `OpenAI clients`.
    pub clients: &'static str,
    /// The `kind` of an upstream that speaks it (config): `openai-chat`.
    pub upstream_kind: &'static str,
    /// The gateway's endpoint: `/v1/chat/completions` (a template where [`ModelPaths`] name the model).
    pub path: &'static str,
    /// Whether the vendor's SDKs take a base URL that ends in `/v1` (and append the path without it); an
    /// upstream's base URL follows the same convention.
    pub base_url_has_v1: bool,
    /// The gateway's token counting endpoint, if the protocol has one.
    pub count_tokens_path: Option<&'static str>,
    /// The path of the protocol's own models list besides `GET /v1/models`, if it has one.
    pub models_list_path: Option<&'static str>,
    /// The gateway's embeddings endpoint, where the paths do not name the model (OpenAI's
    /// `/v1/embeddings`; Gemini's are [`ModelPaths`]').
    pub embed_path: Option<&'static str>,
    /// The gateway's legacy text completions endpoint (OpenAI's `/v1/completions`), if it has one.
    pub complete_path: Option<&'static str>,

    // --- Its clients.
    /// Where its clients put their key.
    pub key: KeyIn,
    /// A header only its SDKs send (how a request outside the model endpoints is recognised as theirs).
    pub sdk_header: Option<&'static str>,
    /// A part of every path of its API (answers there that nothing else decides take its shape).
    pub paths_contain: Option<&'static str>,
    /// The header that repeats the request id for its SDKs (besides `x-request-id`).
    pub id_header: Option<&'static str>,
    /// The `www-authenticate` challenge of a 401 answer, where its clients expect one.
    pub challenge: Option<&'static str>,
    /// What keeps an idle stream open without disturbing its clients.
    pub keepalive: &'static [u8],
    /// What its answer ids start with.
    pub response_id_prefix: &'static str,
    /// A header every request must carry, and an example of its value (for the error text).
    pub required_header: Option<(&'static str, &'static str)>,
    /// Refuses headers that would open state kept in the operator's upstream account.
    pub account_headers: Option<HeadCheck>,
    /// Puts a client's body in the one form every rule and the decoder read, before anything reads it (a
    /// wire that takes two spellings of a field gets one; what the path already says leaves the body).
    /// `counts`: a token-counting request. What is sent upstream is this body, with the attempt's edits.
    pub read_as_one: Option<BodyReading>,
    /// Where a client asks for its stream's usage report (None: every stream carries one).
    pub usage_asked_at: Option<&'static str>,
    /// Where stream events are numbered: the number the first of some held stream bytes carries (the
    /// event that replaces them takes it).
    pub numbered: Option<Numbering>,
    /// What follows the in-stream error of a relayed stream that broke (numbered `seq`), where something
    /// must (a last event that says the answer failed).
    pub failed_tail: Option<FailedTail>,

    // --- The request's fields the gateway governs.
    /// The fields that carry the output limit, in a client's request and in an upstream's.
    pub limit: LimitFields,
    /// The top-level request fields the canonical request carries whole, each with the shape of the values
    /// it carries (`protocol/carried.rs`), and those that only frame the answer. The answer cache keys on
    /// the canonical request and on every other field, or value of another shape, as sent
    /// (`protocol/fingerprint.rs`): a field left off only makes entries more particular, never shared
    /// wrongly.
    pub carried: &'static [(&'static str, Shape)],
    /// Its paid hosted tools, tiers and surcharges.
    pub hosted: &'static Rules,
    /// Where the use limit of hosted tools goes, where it has one.
    pub hosted_cap: Option<HostedCap>,
    /// Whether its answers count the hosted tool uses they made.
    pub reports_tool_uses: bool,
    /// Whether the tier its answers name is the rate they are billed at.
    pub reports_rate_tier: bool,
    /// The edit that keeps an answer from being stored in the operator's account.
    pub store_nothing: Option<(&'static str, Edit<'static>)>,
    /// Where nothing is stored: the edit that makes a reasoning model's answers carry their reasoning whole,
    /// so that a client can send it back on its next turn (an id alone would name nothing).
    pub reasoning_inline: Option<(&'static str, Edit<'static>)>,
    /// The edit that makes a passthrough stream report its usage (the gateway bills from it).
    pub stream_usage_on: Option<(&'static str, Edit<'static>)>,
    /// A header of the client's request passed on to an upstream of the same protocol (every value joined).
    pub passed_on: Option<&'static str>,

    // --- Its upstreams.
    /// The generation endpoint under an upstream's base URL.
    pub upstream_path: &'static str,
    /// The token counting endpoint under an upstream's base URL, if it has one.
    pub upstream_count_path: Option<&'static str>,
    /// Whether a body sent upstream names its model (`model`); protocols whose paths name it leave it out.
    pub model_in_body: bool,
    /// The field of a complete answer that holds its usage.
    pub usage_field: &'static str,
    /// The model list under an upstream's base URL (what health probes and discovery ask for).
    pub models_path: &'static str,
    /// Where that list holds the ids.
    pub ids_in: IdsIn,
    /// How an upstream is sent its credential.
    pub credential: Credential,
    /// The event that ends a complete stream (as the doctor reports it).
    pub stream_terminal: &'static str,

    // --- What it does.
    /// Reads a client's request: checks it and decodes it into the canonical request.
    pub request: &'static dyn RequestCodec,
    /// Answers a client: response bodies, streams and errors in this protocol's shapes.
    pub reply: &'static dyn ReplyCodec,
    /// The models list its clients read (the two OpenAI protocols share one).
    pub list: &'static dyn ModelList,
    /// Talks to an upstream of this protocol: the canonical request encoded, its answers and streams
    /// decoded.
    pub upstream: &'static dyn UpstreamCodec,
    /// Reads a stream relayed to its client as it came (passthrough) on the way.
    pub relay: &'static dyn RelayReader,
    /// The doctor's client of this protocol: the minimal request, and the answer read as the official SDK
    /// reads it.
    pub probe: &'static dyn DoctorProbe,
    /// Its token counting endpoint (Messages, Gemini); None where the protocol has none.
    pub counting: Option<&'static dyn TokenCounting>,
    /// Where the paths name the model (and the stream): how they are read and made.
    pub model_paths: Option<&'static dyn ModelPaths>,
    /// Its embeddings, for its clients and its upstreams (the two OpenAI protocols share OpenAI's); None
    /// where the vendor has none (Anthropic).
    pub embedder: Option<&'static dyn Embedder>,
    /// Its vendor's legacy text completions, for its clients and its upstreams (the two OpenAI protocols
    /// share OpenAI's); None where the vendor has none.
    pub completions: Option<&'static Completions>,
}

/// A client's request read: checked, put in one form, decoded.
pub trait RequestCodec: Sync {
    /// Checks the fields this protocol's requests must have before anything else (the envelope's `model`
    /// and `stream` are checked by `request.rs` for every protocol).
    fn validate(&self, body: &Value) -> Result<(), ApiError>;
    /// Decodes (and so validates) a client's request body into the canonical request.
    fn decode_request(&self, body: &Value) -> Result<canon::Request, ApiError>;
    /// The request asks for parts of an answer the canonical form does not hold (log probabilities,
    /// audio): its answers are never kept in the answer cache, whose replay would lack them.
    fn asks_beyond_canon(&self, body: &Value) -> bool;
}

/// Answers to a client: bodies, streams, errors.
pub trait ReplyCodec: Sync {
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
    /// The whole error body of an answer.
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8>;
    /// The in-stream error event of a stream that fails after it started; it carries the request id.
    /// `next_seq`: the number the event takes where events are numbered.
    fn error_event(&self, err: &ApiError, request_id: &str, next_seq: Option<u64>) -> Vec<u8>;
}

/// The models list a protocol's clients read (the two OpenAI protocols share one).
pub trait ModelList: Sync {
    /// The models list.
    fn models_list(&self, models: &[Listed], created: u64) -> Value;
    /// One model of the list (`GET /v1/models/{id}`).
    fn model_entry(&self, model: &Listed, created: u64) -> Value;
}

/// Its upstreams: requests encoded, answers and streams decoded in the vendor's semantics.
pub trait UpstreamCodec: Sync {
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
}

/// A stream relayed to its client as it came (passthrough), read on the way.
pub trait RelayReader: Sync {
    /// Reads one event into `seen`; returns whether to pass it on. Comments never reach it.
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool;
    /// Calls `edit` on each text field of an event's data that `observe` reads text from, in the order it
    /// reads them.
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>));
}

/// A client of some gateway (the doctor): the minimal request and how the official SDK reads the answer.
pub trait DoctorProbe: Sync {
    /// The minimal request: model plus one short text; no reasoning, tools or schema.
    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value;
    /// The headers its official SDK sends the key in (and the version it speaks).
    fn client_headers<'k>(&self, key: &'k str) -> AuthHeaders<'k>;
    /// The text of a complete answer, where the specification says it is.
    fn answer_text(&self, answer: &Value) -> Result<String, NoText>;
    /// The stop reason of a complete answer.
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str>;
    /// What one event of a stream means to the official SDK (`first`: the stream's first event).
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent;
}

/// A protocol's token counting endpoint.
pub trait TokenCounting: Sync {
    /// A token counting request decoded (and so validated) into the canonical request.
    fn decode_count_request(&self, body: &Value) -> Result<canon::Request, ApiError>;
    /// The token counting answer for `input_tokens`.
    fn count_answer(&self, input_tokens: u64) -> Vec<u8>;
    /// The tokens an upstream's token counting answer reports.
    fn counted_tokens(&self, raw: &[u8]) -> Option<u64>;
    /// The edit that names `model`, the upstream's, where a token counting body names its model besides the
    /// path (Gemini's `generateContentRequest.model`).
    fn count_model_edit<'a>(&self, model: &'a str) -> Option<(&'static str, Edit<'a>)>;
}

/// A protocol's embeddings: its clients' requests and answers, and its upstreams'.
pub trait Embedder: Sync {
    /// Reads (and so checks) a client's embeddings request at `path` into canonical form.
    fn decode_embed(&self, path: &str, body: &Value) -> Result<EmbedRequest, ApiError>;
    /// The client's answer: the vectors in this protocol's shape, `model` as the client named it, with the
    /// input tokens billed.
    fn encode_embeddings(
        &self,
        answer: &Embeddings,
        req: &EmbedRequest,
        model: &str,
        input_tokens: u64,
    ) -> Value;
    /// The embeddings endpoint for `model` under an upstream's base URL.
    fn upstream_embed_path(&self, model: &str) -> Cow<'static, str>;
    /// A canonical request encoded for an upstream of this protocol (`model`: the upstream's name for it).
    fn embed_request(&self, req: &EmbedRequest, model: &str) -> Result<Value, ApiError>;
    /// An upstream's answer decoded: the vectors in the inputs' order, and the usage it reports.
    fn decode_embeddings(&self, body: &Value) -> Result<Embeddings, ApiError>;
    /// The input tokens of `req` as the vendor says to count them where its answers report none.
    fn count_unreported(&self, req: &EmbedRequest) -> u64;
}

/// Paths that name the model and the method (Gemini's `/v1beta/models/{model}:generateContent`): how the
/// gateway reads them, and makes them for an SDK and an upstream.
pub trait ModelPaths: Sync {
    /// Which endpoint of the protocol `path` is, if any.
    fn serves(&self, path: &str) -> Option<Serves>;
    /// The model `path` names.
    fn path_model<'p>(&self, path: &'p str) -> Option<Cow<'p, str>>;
    /// Whether `path` asks for a stream.
    fn path_stream(&self, path: &str) -> Option<bool>;
    /// The path (and query) of a request to `model`, streamed or not, under a base URL.
    fn request_path(&self, model: &str, stream: bool) -> Cow<'static, str>;
    /// The token counting path for `model` under a base URL.
    fn count_path(&self, model: &str) -> Cow<'static, str>;
    /// A hint for a path no endpoint serves that looks like a mistake its clients make (a doubled version,
    /// an endpoint path in the base URL), if it is one.
    fn path_hint(&self, path: &str) -> Option<String>;
    /// Whether an answer at `path` that nothing else decides takes this protocol's shape.
    fn shapes_errors_at(&self, path: &str) -> bool;
    /// Whether a request outside the model endpoints comes from its SDKs.
    fn recognizes(&self, req: &HttpRequest) -> bool;
    /// How a stream to this request's client is framed.
    fn framing(&self, req: &HttpRequest) -> Framing;
    /// Refuses a path that names what the gateway does not serve (a model kept in the operator's account).
    fn refuse_path(&self, path: &str) -> Result<(), ApiError>;
}
