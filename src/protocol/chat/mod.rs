//! OpenAI Chat Completions, `POST /v1/chat/completions`: the codec ([`Chat`]) and what it is made of:
//! `decode.rs` (client requests into canonical form), `reply.rs` (answers and streams to clients),
//! `upstream.rs` (requests to Chat upstreams, their answers and streams decoded), `relay.rs` (a relayed
//! stream read for usage, errors and its end), `client.rs` (the doctor's minimal request and how the SDK
//! reads the answer).

mod client;
mod decode;
mod relay;
mod reply;
mod upstream;

use crate::protocol::fields::At;
use serde_json::Value;

use super::canon::{self, Usage};
use super::client::{ClientEvent, NoText};
use super::codec::{Codec, Headers, Listed};
use super::edit::{Edit, Put};
use super::hosted::{self, Asks, Rules};
use super::relay::Seen;
use super::sse::{push_event, SseEvent};
use super::{auth, openai, ApiError, EgressOptions, StreamDecoder, StreamEncoder};
use crate::http::Request;

/// The Chat Completions codec.
pub struct Chat;

/// Paid features in Chat requests: OpenAI's hosted tools, a search model's `web_search_options`, a
/// `service_tier`.
const HOSTED: Rules = Rules {
    families: openai::families,
    forced: hosted::never_forced,
    with_tools: &["tool_choice", "parallel_tool_calls"],
    shared_limit: None,
    search_option: Some("web_search_options"),
    tiers: &["service_tier"],
    surcharges: &[],
    capped: &[],
};

impl Codec for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }
    fn title(&self) -> &'static str {
        "Chat Completions"
    }
    fn vendor(&self) -> &'static str {
        "OpenAI"
    }
    fn clients(&self) -> &'static str {
        "OpenAI clients"
    }
    fn upstream_kind(&self) -> &'static str {
        "openai-chat"
    }
    fn path(&self) -> &'static str {
        "/v1/chat/completions"
    }
    fn base_url_has_v1(&self) -> bool {
        true
    }

    fn presented_key<'r>(&self, req: &'r Request) -> Result<&'r str, ApiError> {
        auth::presented_key(req, openai::KEY_HOW)
    }
    fn challenge(&self) -> Option<&'static str> {
        Some("Bearer")
    }
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        decode::validate(body)
    }
    fn decode_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        decode::decode_request(body)
    }
    /// Chat clients ask for the stream's usage report with `stream_options.include_usage`.
    fn wants_stream_usage(&self, body: &Value) -> bool {
        body.at("stream_options/include_usage")
            .and_then(Value::as_bool)
            == Some(true)
    }
    fn new_response_id(&self) -> String {
        crate::util::new_id("chatcmpl-")
    }
    fn encode_response(&self, resp: &canon::Response, _req: &canon::Request) -> Value {
        reply::encode_response(resp)
    }
    fn stream_encoder(
        &self,
        _req: &canon::Request,
        include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(reply::ChatStreamEncoder::new(include_usage).with_request_id(request_id.into()))
    }
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        openai::error_body(err, request_id)
    }
    /// A chunk whose `error` holds the error object (no event name).
    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let d = serde_json::json!({"error": err.openai_object(request_id)});
        let mut out = Vec::new();
        push_event(&mut out, None, &d.to_string());
        out
    }
    fn models_list(&self, models: &[Listed], created: u64) -> Value {
        openai::models_list(models, created)
    }
    fn model_entry(&self, model: &Listed, created: u64) -> Value {
        openai::model_entry(model, created)
    }

    fn carried(&self) -> &'static [(&'static str, super::carried::Shape)] {
        decode::CARRIED
    }
    fn limit_fields(&self) -> &'static [&'static str] {
        &["max_completion_tokens", "max_tokens"]
    }
    fn upstream_limit_field(&self, max_completion_tokens: bool) -> &'static str {
        if max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }
    fn choices_field(&self) -> Option<&'static str> {
        Some("n")
    }
    /// A completion is stored only when asked (`store: true`): any `store` the client sent goes as `false`.
    fn store_nothing(&self) -> Option<(&'static str, Edit<'static>)> {
        Some(("store", Edit::Replace(Put::Bool(false))))
    }
    /// Log probabilities, and audio out.
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let set = |k: &str| body.get(k).is_some_and(|v| !v.is_null() && v != false);
        let audio = body
            .get("modalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v == "audio"));
        set("logprobs") || set("top_logprobs") || set("audio") || audio
    }
    fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError> {
        hosted::asks(body, &HOSTED)
    }
    /// Chat answers say nothing of the searches a search model made.
    fn reports_tool_uses(&self) -> bool {
        false
    }

    fn upstream_path(&self) -> &'static str {
        "/chat/completions"
    }
    fn credentials<'k>(&self, key: Option<&'k str>) -> Headers<'k> {
        [key.map(auth::bearer), None, None]
    }
    fn stream_usage_on(&self) -> Option<(&'static str, Edit<'static>)> {
        Some((
            "stream_options",
            Edit::SetIn("include_usage", Put::Bool(true)),
        ))
    }
    fn encode_request(&self, req: &canon::Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        upstream::encode_request(req, opts)
    }
    fn decode_response(&self, body: &Value, _opts: &EgressOptions) -> Result<canon::Response, ApiError> {
        upstream::decode_response(body)
    }
    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(upstream::ChatStreamDecoder::default())
    }
    fn usage_from(&self, usage: &Value) -> Option<Usage> {
        reply::usage_from(usage)
    }
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        relay::observe(ev, seen)
    }
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        relay::text_fields(data, edit)
    }

    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        client::probe_body(model, prompt, stream)
    }
    fn client_headers<'k>(&self, key: &'k str) -> Headers<'k> {
        [Some(auth::bearer(key)), None, None]
    }
    fn answer_text(&self, answer: &Value) -> Result<String, NoText> {
        client::answer_text(answer)
    }
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["choices"][0]["finish_reason"].as_str()
    }
    fn stream_terminal(&self) -> &'static str {
        "data: [DONE]"
    }
    fn client_event(&self, _event: Option<&str>, data: &str, _first: bool) -> ClientEvent {
        client::event(data)
    }
}
