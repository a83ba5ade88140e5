//! Anthropic Messages, `POST /v1/messages` and `POST /v1/messages/count_tokens`: the codec ([`Messages`])
//! and what it is made of: `decode.rs` (client requests into canonical form), `reply.rs` (answers and
//! streams to clients), `upstream.rs` (requests to Anthropic upstreams, their answers and streams decoded),
//! `relay.rs` (a relayed stream read for usage, errors and its end), `client.rs` (the doctor's minimal
//! request and how the SDK reads the answer).

mod client;
mod decode;
mod relay;
mod reply;
mod upstream;

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use super::canon::{self, Usage};
use super::client::{ClientEvent, NoText};
use super::codec::{Codec, Headers, Listed};
use super::edit::{Edit, Put};
use super::hosted::{self, Asks, Rules};
use super::relay::Seen;
use super::sse::{push_event, SseEvent};
use super::{account, auth, ApiError, EgressOptions, StreamDecoder, StreamEncoder};
use crate::http::Request;

/// The Messages codec.
pub struct Messages;

/// The API version tollgate speaks to Anthropic upstreams (and the doctor to gateways).
const VERSION: &str = "2023-06-01";

/// Paid features in Messages requests: server tools (each with its own `max_uses`; web search and web fetch
/// get one written in), a `service_tier`, and fast mode (`speed`, a premium rate on every token).
const HOSTED: Rules = Rules {
    families: |t| tool_family(t).map(|f| (f, None)).into_iter().collect(),
    forced,
    with_tools: &["tool_choice"],
    shared_limit: None,
    search_option: None,
    tiers: &["service_tier", "speed"],
    surcharges: &[("inference_geo", &["global"])],
    capped: &["web_search", "web_fetch"],
};

/// Whether `tool_choice` forces the server tool `tool` (`{"type": "tool", "name": ...}` naming it).
fn forced(body: &Map<String, Value>, tool: &Map<String, Value>, _family: &str) -> bool {
    let choice = body.get("tool_choice");
    choice.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("tool")
        && choice.and_then(|c| c.get("name")).is_some_and(|n| Some(n) == tool.get("name"))
}

/// The hosted family of a Messages tool (its type without the date; `mcp_toolset` → `mcp`), or None for a
/// tool the client runs (custom tools, `bash`, `text_editor`, `computer`, `memory`, tool search).
fn tool_family(t: &Map<String, Value>) -> Option<Cow<'_, str>> {
    let ty = t.get("type").and_then(Value::as_str);
    let ty = ty.filter(|t| *t != "custom")?;
    let client = [
        "bash",
        "text_editor_",
        "computer_",
        "memory_",
        "tool_search_tool_",
    ];
    if client.iter().any(|p| ty.starts_with(p)) {
        return None;
    }
    Some(Cow::Borrowed(match hosted::undated(ty) {
        "mcp_toolset" => "mcp",
        other => other,
    }))
}

impl Codec for Messages {
    fn name(&self) -> &'static str {
        "messages"
    }
    fn title(&self) -> &'static str {
        "Messages"
    }
    fn vendor(&self) -> &'static str {
        "Anthropic"
    }
    fn clients(&self) -> &'static str {
        "Anthropic clients (Claude Code, the anthropic SDK)"
    }
    fn upstream_kind(&self) -> &'static str {
        "anthropic"
    }
    fn path(&self) -> &'static str {
        "/v1/messages"
    }
    fn base_url_has_v1(&self) -> bool {
        false
    }
    fn count_tokens_path(&self) -> Option<&'static str> {
        Some("/v1/messages/count_tokens")
    }

    /// Anthropic's paths all have `/messages`.
    fn shapes_errors_at(&self, path: &str) -> bool {
        path.contains("/messages")
    }
    /// Anthropic SDKs send `anthropic-version`.
    fn recognizes(&self, req: &Request) -> bool {
        req.header("anthropic-version").is_some()
    }
    fn presented_key<'r>(&self, req: &'r Request) -> Result<&'r str, ApiError> {
        auth::presented_key(req, "`x-api-key: <key>` or `Authorization: Bearer <key>`")
    }
    fn id_header(&self) -> Option<&'static str> {
        Some("request-id")
    }
    fn check_headers(&self, req: &Request) -> Result<(), ApiError> {
        if req.header("anthropic-version").is_none() {
            return Err(ApiError::invalid_param(
                "anthropic-version",
                "anthropic-version: header is required (for example `anthropic-version: 2023-06-01`).",
            ));
        }
        Ok(())
    }
    fn validate(&self, body: &Value) -> Result<(), ApiError> {
        decode::validate(body)
    }
    fn decode_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        decode::decode_request(body)
    }
    fn new_response_id(&self) -> String {
        crate::util::new_id("msg_")
    }
    fn encode_response(&self, resp: &canon::Response, _req: &canon::Request) -> Value {
        reply::encode_response(resp)
    }
    fn stream_encoder(
        &self,
        _req: &canon::Request,
        _include_usage: bool,
        request_id: &str,
    ) -> Box<dyn StreamEncoder> {
        Box::new(reply::MessagesStreamEncoder::new().with_request_id(request_id.into()))
    }
    /// A `ping` event (Anthropic's SDKs skip it).
    fn keepalive(&self) -> &'static [u8] {
        b"event: ping\ndata: {\"type\":\"ping\"}\n\n"
    }
    fn error_body(&self, err: &ApiError, request_id: &str) -> Vec<u8> {
        let v = json!({"type": "error", "error": err.anthropic_object(request_id),
                       "request_id": request_id});
        serde_json::to_vec(&v).unwrap_or_default()
    }
    fn error_event(&self, err: &ApiError, request_id: &str, _next_seq: Option<u64>) -> Vec<u8> {
        let d = json!({"type": "error", "error": err.anthropic_object(request_id),
                       "request_id": request_id});
        let mut out = Vec::new();
        push_event(&mut out, Some("error"), &d.to_string());
        out
    }
    fn models_list(&self, models: &[Listed], created: u64) -> Value {
        let data: Vec<Value> = models.iter().map(|m| self.model_entry(m, created)).collect();
        json!({
            "data": data,
            "has_more": false,
            "first_id": models.first().map(|m| m.id),
            "last_id": models.last().map(|m| m.id),
        })
    }
    fn model_entry(&self, model: &Listed, created: u64) -> Value {
        json!({"type": "model", "id": model.id, "display_name": model.id,
               "created_at": crate::util::rfc3339(created)})
    }

    fn carried(&self) -> &'static [(&'static str, super::carried::Shape)] {
        decode::CARRIED
    }
    fn limit_fields(&self) -> &'static [&'static str] {
        &["max_tokens"]
    }
    fn requires_output_limit(&self) -> bool {
        true
    }
    /// `anthropic-beta` values that open account-scoped features.
    fn refuse_account_headers(&self, req: &Request) -> Result<(), ApiError> {
        account::refuse_betas(req.header_all("anthropic-beta"))
    }
    fn hosted_asks(&self, body: &Value) -> Result<Asks, ApiError> {
        hosted::asks(body, &HOSTED)
    }
    fn hosted_cap<'a>(&self, cap: u64, tools: &'a [usize]) -> Option<(&'static str, Edit<'a>)> {
        Some(("tools", Edit::FillIn(tools, "max_uses", Put::Num(cap))))
    }
    /// Anthropic's `service_tier` names capacity, not the rate (fast mode reports `standard`).
    fn reports_rate_tier(&self) -> bool {
        false
    }
    /// A count_tokens body decoded as a Messages request; it carries no `max_tokens`.
    fn decode_count_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        let mut body = body.clone();
        if body.get("max_tokens").is_none() {
            body["max_tokens"] = json!(1);
        }
        decode::decode_request(&body)
    }
    fn count_answer(&self, input_tokens: u64) -> Vec<u8> {
        json!({ "input_tokens": input_tokens })
            .to_string()
            .into_bytes()
    }
    fn counted_tokens(&self, raw: &[u8]) -> Option<u64> {
        serde_json::from_slice::<Value>(raw)
            .ok()?
            .get("input_tokens")?
            .as_u64()
    }

    fn upstream_path(&self) -> &'static str {
        "/v1/messages"
    }
    fn upstream_count_path(&self) -> Option<&'static str> {
        Some("/v1/messages/count_tokens")
    }
    fn models_path(&self) -> &'static str {
        "/v1/models"
    }
    fn credentials<'k>(&self, key: Option<&'k str>) -> Headers<'k> {
        let version = ("anthropic-version", Cow::Borrowed(VERSION));
        [Some(version), key.map(|k| ("x-api-key", Cow::Borrowed(k))), None]
    }
    /// The client's `anthropic-beta` flags, all of them joined.
    fn passed_on(&self, req: &Request) -> Option<(&'static str, String)> {
        let mut all = req.header_all("anthropic-beta").peekable();
        all.peek()?;
        Some(("anthropic-beta", all.collect::<Vec<_>>().join(",")))
    }
    fn encode_request(&self, req: &canon::Request, opts: &EgressOptions) -> Result<Value, ApiError> {
        upstream::encode_request(req, opts)
    }
    fn decode_response(&self, body: &Value, opts: &EgressOptions) -> Result<canon::Response, ApiError> {
        upstream::decode_response(body, opts)
    }
    fn stream_decoder(&self, opts: &EgressOptions) -> Box<dyn StreamDecoder> {
        Box::new(upstream::MessagesStreamDecoder::new(opts.structured_via_tool))
    }
    fn usage_from(&self, usage: &Value) -> Option<Usage> {
        reply::usage_from(usage)
    }
    fn observe(&self, ev: &SseEvent, seen: &mut Seen) -> bool {
        relay::observe(ev, seen)
    }
    fn text_fields(&self, data: &mut Value, edit: &mut dyn FnMut(Option<&mut Value>)) {
        super::relay::delta_text_fields(data, edit)
    }

    fn probe_body(&self, model: &str, prompt: &str, stream: bool) -> Value {
        client::probe_body(model, prompt, stream)
    }
    fn client_headers<'k>(&self, key: &'k str) -> Headers<'k> {
        [
            Some(auth::bearer(key)),
            Some(("x-api-key", Cow::Borrowed(key))),
            Some(("anthropic-version", Cow::Borrowed(VERSION))),
        ]
    }
    fn answer_text(&self, answer: &Value) -> Result<String, NoText> {
        let Some(blocks) = answer["content"].as_array() else {
            return Err(NoText::Missing("`content` array"));
        };
        Ok(blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect())
    }
    fn stop_reason<'v>(&self, answer: &'v Value) -> Option<&'v str> {
        answer["stop_reason"].as_str()
    }
    fn stream_terminal(&self) -> &'static str {
        "message_stop"
    }
    fn client_event(&self, event: Option<&str>, data: &str, first: bool) -> ClientEvent {
        client::event(event, data, first)
    }
}
