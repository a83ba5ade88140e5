//! Anthropic Messages, `POST /v1/messages` and `POST /v1/messages/count_tokens`: the codec ([`CODEC`])
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

use super::canon;
use super::codec::{Codec, Credential, HostedCap, KeyIn, LimitFields, RequestCodec, TokenCounting, DATA_IDS};
use super::edit::Edit;
use super::hosted::{self, Rules};
use super::ApiError;

/// The Messages codec's interfaces (each implemented in the file that holds its code).
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

/// Anthropic Messages.
pub static CODEC: Codec = Codec {
    name: "messages",
    title: "Messages",
    vendor: "Anthropic",
    clients: "Anthropic clients (Claude Code, the anthropic SDK)",
    upstream_kind: "anthropic",
    path: "/v1/messages",
    base_url_has_v1: false,
    count_tokens_path: Some("/v1/messages/count_tokens"),
    models_list_path: None,
    embed_path: None,
    complete_path: None,

    key: KeyIn {
        header: "x-api-key",
        query: None,
        how: "`x-api-key: <key>` or `Authorization: Bearer <key>`",
    },
    sdk_header: Some("anthropic-version"),
    // Anthropic's paths all have `/messages`.
    paths_contain: Some("/messages"),
    id_header: Some("request-id"),
    challenge: None,
    // A `ping` event (Anthropic's SDKs skip it).
    keepalive: b"event: ping\ndata: {\"type\":\"ping\"}\n\n",
    usage_asked_at: None,
    numbered: None,
    failed_tail: None,
    response_id_prefix: "msg_",
    required_header: Some(("anthropic-version", VERSION)),
    account_headers: Some(decode::refuse_betas),
    read_as_one: None,

    limit: LimitFields {
        fields: &["max_tokens"],
        parent: None,
        upstream: ("max_tokens", "max_tokens"),
        choices: None,
        required: true,
    },
    carried: decode::CARRIED,
    hosted: &HOSTED,
    hosted_cap: Some(HostedCap::EachTool("tools", "max_uses")),
    reports_tool_uses: true,
    // Anthropic's `service_tier` names capacity, not the rate (fast mode reports `standard`).
    reports_rate_tier: false,
    store_nothing: None,
    reasoning_inline: None,
    stream_usage_on: None,
    // The client's `anthropic-beta` flags, all of them joined.
    passed_on: Some("anthropic-beta"),

    upstream_path: "/v1/messages",
    upstream_count_path: Some("/v1/messages/count_tokens"),
    model_in_body: true,
    usage_field: "usage",
    models_path: "/v1/models",
    ids_in: DATA_IDS,
    credential: Credential {
        header: Some("x-api-key"),
        version: Some(("anthropic-version", VERSION)),
    },
    stream_terminal: "message_stop",

    request: &Messages,
    reply: &Messages,
    list: &Messages,
    upstream: &Messages,
    relay: &Messages,
    probe: &Messages,
    counting: Some(&Messages),
    model_paths: None,
    embedder: None,
    completions: None,
};

impl TokenCounting for Messages {
    /// A count_tokens body decoded as a Messages request; it carries no `max_tokens`.
    fn decode_count_request(&self, body: &Value) -> Result<canon::Request, ApiError> {
        let mut body = body.clone();
        if body.get("max_tokens").is_none() {
            body["max_tokens"] = json!(1);
        }
        Messages.decode_request(&body)
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

    fn count_model_edit<'a>(&self, _model: &'a str) -> Option<(&'static str, Edit<'a>)> {
        None
    }
}
