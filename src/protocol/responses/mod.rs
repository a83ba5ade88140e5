//! OpenAI Responses, `POST /v1/responses`: the codec ([`CODEC`]) and what it is made of: `decode.rs`
//! (client requests into canonical form), `reply.rs` (answers and streams to clients), `upstream.rs`
//! (requests to Responses upstreams, their answers and streams decoded), `relay.rs` (a relayed stream read
//! for usage, errors and its end), `client.rs` (the doctor's minimal request and how the SDK reads the
//! answer).

mod client;
mod decode;
mod relay;
mod reply;
mod upstream;

use super::codec::{Codec, Credential, HostedCap, LimitFields, COMMENT_KEEPALIVE, DATA_IDS};
use super::edit::{Edit, Put};
use super::hosted::Rules;
use super::openai;

/// The Responses codec's interfaces (each implemented in the file that holds its code).
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

/// OpenAI Responses.
pub static CODEC: Codec = Codec {
    name: "responses",
    title: "Responses",
    vendor: "OpenAI",
    clients: "OpenAI clients",
    upstream_kind: "openai-responses",
    path: "/v1/responses",
    base_url_has_v1: true,
    count_tokens_path: None,
    models_list_path: None,
    embed_path: None,
    complete_path: None,

    key: openai::KEY_IN,
    sdk_header: None,
    paths_contain: None,
    id_header: None,
    challenge: Some("Bearer"),
    keepalive: COMMENT_KEEPALIVE,
    required_header: None,
    account_headers: None,
    read_as_one: None,
    usage_asked_at: None,
    numbered: Some(reply::next_sequence),
    failed_tail: Some(relay::failed_tail),
    response_id_prefix: "resp_",

    limit: LimitFields {
        fields: &["max_output_tokens"],
        parent: None,
        upstream: ("max_output_tokens", "max_output_tokens"),
        choices: None,
        required: false,
    },
    carried: decode::CARRIED,
    hosted: &HOSTED,
    hosted_cap: Some(HostedCap::Shared("max_tool_calls")),
    reports_tool_uses: true,
    reports_rate_tier: true,
    // Responses are stored unless `store: false`: every request goes with it.
    store_nothing: Some(("store", Edit::Set(Put::Bool(false)))),
    // A reasoning item comes back with its `encrypted_content` only when `include` asks for it.
    reasoning_inline: Some(("include", Edit::Join("reasoning.encrypted_content"))),
    stream_usage_on: None,
    passed_on: None,

    upstream_path: "/responses",
    upstream_count_path: None,
    model_in_body: true,
    usage_field: "usage",
    models_path: "/models",
    ids_in: DATA_IDS,
    credential: Credential {
        header: None,
        version: None,
    },
    stream_terminal: "response.completed",

    request: &Responses,
    reply: &Responses,
    list: &openai::OpenAiList,
    upstream: &Responses,
    relay: &Responses,
    probe: &Responses,
    counting: None,
    model_paths: None,
    embedder: Some(&super::chat::EMBEDDER),
    completions: Some(&super::chat::COMPLETIONS),
};
