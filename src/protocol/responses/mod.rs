//! OpenAI Responses, `POST /v1/responses`: the codec ([`Responses`]) and what it is made of: `decode.rs`
//! (client requests into canonical form), `reply.rs` (answers and streams to clients), `upstream.rs`
//! (requests to Responses upstreams, their answers and streams decoded), `relay.rs` (a relayed stream read
//! for usage, errors and its end), `client.rs` (the doctor's minimal request and how the SDK reads the
//! answer).

mod client;
mod decode;
mod relay;
mod reply;
mod upstream;

use serde_json::{json, Value};

use super::canon::{self, Usage};
use super::client::{ClientEvent, NoText};
use super::codec::{Codec, Headers, Listed};
use super::edit::{Edit, Put};
use super::hosted::{self, Asks, Rules};
use super::relay::Seen;
use super::sse::{push_event, SseEvent};
use super::{auth, openai, ApiError, EgressOptions, StreamDecoder, StreamEncoder};
use crate::http::Request;

/// The Responses codec.
pub struct Responses;

/// Paid features in Responses requests: OpenAI's hosted tools under one `max_tool_calls`, a `service_tier`.
const HOSTED: Rules = Rules {
    families: openai::families,
    forced: openai::forced,
    with_tools: &["tool_choice", "parallel_tool_calls", "max_tool_calls"],
    shared_limit: Some("max_tool_calls"),
    search_option: None,
    tiers: &["service_tier"],
    surcharges: &[],
    capped: &[],
};

impl Codec for Responses {
    fn name(&self) -> &'static str {
        "responses"
    }
    fn title(&self) -> &'static str {
        "Responses"
    }
    fn vendor(&self) -> &'static str {
        "OpenAI"
    }
    fn clients(&self) -> &'static str {
        "OpenAI clients"
    }
    fn upstream_kind(&self) -> &'static str {
        "openai-responses"
    }
    fn path(&self) -> &'static str {
        "/v1/responses"
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
    fn new_response_id(&self) -> String {
        crate::util::new_id("resp_")
    }
    fn encode_response(&self, resp: &canon::Response, req: &canon::Request) -> Value {
        reply::encode_response(resp, req)
    }
    fn stream_encoder(
        &self,
        req: &canon::Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(reply::ResponsesStreamEncoder::new(req).with_request_id(request_id.into()))
    }
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        openai::error_body(err, request_id)
    }
    /// An `error` event, numbered after the events before it.
    fn error_event(&self, err: &ApiError, request_id: &str, next_seq: Option<u64>) -> Vec<u8> {
        let code = err.code().unwrap_or("server_error");
        let d = json!({"type": "error", "code": code,
                       "message": err.openai_object(request_id)["message"],
                       "param": err.param(), "sequence_number": next_seq.unwrap_or(0)});
        let mut out = Vec::new();
        push_event(&mut out, Some("error"), &d.to_string());
        out
    }
    fn next_sequence(&self, held: &[u8]) -> Option<u64> {
        relay::first_sequence(held)
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
        &["max_output_tokens"]
    }
    /// Responses are stored unless `store: false`: every request goes with it.
    fn store_nothing(&self) -> Option<(&'static str, Edit<'static>)> {
        Some(("store", Edit::Set(Put::Bool(false))))
    }
    /// A reasoning item comes back with its `encrypted_content` only when `include` asks for it.
    fn reasoning_inline(&self) -> Option<(&'static str, Edit<'static>)> {
        Some(("include", Edit::Join("reasoning.encrypted_content")))
    }
    /// Log probabilities.
    fn asks_beyond_canon(&self, body: &Value) -> bool {
        let included = body
            .get("include")
            .and_then(Value::as_array)
            .is_some_and(|i| i.iter().any(|v| v == "message.output_text.logprobs"));
        included || body.get("top_logprobs").is_some_and(|v| !v.is_null())
    }
    fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError> {
        hosted::asks(body, &HOSTED)
    }
    fn hosted_cap<'a>(&self, cap: u64, _tools: &'a [usize]) -> Option<(&'static str, Edit<'a>)> {
        Some(("max_tool_calls", Edit::Fill(Put::Num(cap))))
    }

    fn upstream_path(&self) -> &'static str {
        "/responses"
    }
    fn credentials<'k>(&self, key: Option<&'k str>) -> Headers<'k> {
        [key.map(auth::bearer), None, None]
    }
    fn encode_request(&self, req: &canon::Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        upstream::encode_request(req, opts)
    }
    fn decode_response(&self, body: &Value, _opts: &EgressOptions) -> Result<canon::Response, ApiError> {
        upstream::decode_response(body)
    }
    fn stream_decoder(&self, _opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(upstream::ResponsesStreamDecoder::default())
    }
    fn usage_from(&self, usage: &Value) -> Option<Usage> {
        reply::usage_from(usage)
    }
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        relay::observe(ev, seen)
    }
    fn failed_tail(&self, err: &ApiError, request_id: &str, seq: u64, seen: &mut Seen) -> Vec<u8> {
        relay::failed_tail(err, request_id, seq, seen)
    }
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        super::relay::delta_text_fields(data, edit)
    }

    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        let mut v = json!({"model": model, "input": prompt});
        if stream {
            v["stream"] = Value::Bool(true);
        }
        v
    }
    fn client_headers<'k>(&self, key: &'k str) -> Headers<'k> {
        [Some(auth::bearer(key)), None, None]
    }
    fn answer_text(&self, answer: &Value) -> Result<String, NoText> {
        client::answer_text(answer)
    }
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["status"].as_str()
    }
    fn stream_terminal(&self) -> &'static str {
        "response.completed"
    }
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent {
        client::event(event, data, first)
    }
}
