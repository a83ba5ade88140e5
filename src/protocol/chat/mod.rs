//! OpenAI Chat Completions, `POST /v1/chat/completions`: the codec ([`CODEC`]) and what it is made of:
//! `decode.rs` (client requests into canonical form), `reply.rs` (answers and streams to clients),
//! `upstream.rs` (requests to Chat upstreams, their answers and streams decoded), `relay.rs` (a relayed
//! stream read for usage, errors and its end), `client.rs` (the doctor's minimal request and how the SDK
//! reads the answer).

mod client;
mod complete;
mod decode;
mod embed;
mod relay;
mod reply;
mod upstream;

use super::codec::{Codec, Credential, LimitFields, COMMENT_KEEPALIVE, DATA_IDS};
use super::edit::{Edit, Put};
use super::hosted::{self, Rules};
use super::openai;

/// The Chat Completions codec's interfaces (each implemented in the file that holds its code).
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

/// OpenAI's embeddings (`/v1/embeddings`), which every OpenAI-compatible upstream serves beside its
/// generation endpoints.
pub(crate) static EMBEDDER: embed::OpenAiEmbedder = embed::OpenAiEmbedder;

pub(crate) use complete::COMPLETIONS;

/// OpenAI Chat Completions.
pub static CODEC: Codec = Codec {
    name: "chat",
    title: "Chat Completions",
    vendor: "OpenAI",
    clients: "OpenAI clients",
    upstream_kind: "openai-chat",
    path: "/v1/chat/completions",
    base_url_has_v1: true,
    count_tokens_path: None,
    models_list_path: None,
    embed_path: Some("/v1/embeddings"),
    complete_path: Some("/v1/completions"),

    key: openai::KEY_IN,
    sdk_header: None,
    paths_contain: None,
    id_header: None,
    challenge: Some("Bearer"),
    keepalive: COMMENT_KEEPALIVE,
    required_header: None,
    account_headers: None,
    read_as_one: None,
    usage_asked_at: Some("stream_options/include_usage"),
    numbered: None,
    failed_tail: None,
    response_id_prefix: "chatcmpl-",

    limit: LimitFields {
        fields: &["max_completion_tokens", "max_tokens"],
        parent: None,
        upstream: ("max_completion_tokens", "max_tokens"),
        choices: Some("n"),
        required: false,
    },
    carried: decode::CARRIED,
    hosted: &HOSTED,
    hosted_cap: None,
    // Chat answers say nothing of the searches a search model made.
    reports_tool_uses: false,
    reports_rate_tier: true,
    // A completion is stored only when asked (`store: true`): any `store` the client sent goes as `false`.
    store_nothing: Some(("store", Edit::Replace(Put::Bool(false)))),
    reasoning_inline: None,
    stream_usage_on: Some((
        "stream_options",
        Edit::SetIn("include_usage", Put::Bool(true)),
    )),
    passed_on: None,

    upstream_path: "/chat/completions",
    upstream_count_path: None,
    model_in_body: true,
    usage_field: "usage",
    models_path: "/models",
    ids_in: DATA_IDS,
    credential: Credential {
        header: None,
        version: None,
    },
    stream_terminal: "data: [DONE]",

    request: &Chat,
    reply: &Chat,
    list: &openai::OpenAiList,
    upstream: &Chat,
    relay: &Chat,
    probe: &Chat,
    counting: None,
    model_paths: None,
    embedder: Some(&EMBEDDER),
    completions: Some(&COMPLETIONS),
};
