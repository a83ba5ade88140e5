//! Legacy text completions (`POST /v1/completions`: a `prompt`, and for fill-in-the-middle a `suffix`), which
//! editors' autocompletion still calls. Only OpenAI's wire has them; the gateway passes them through to an
//! OpenAI-compatible upstream as they came and never rewrites them into chat (a fill-in-the-middle prompt
//! means nothing to a chat model). What a protocol that has them says of them is one [`Completions`] value.

use serde_json::Value;

use super::ApiError;

/// What a completions request asks for that admission must know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionAsk {
    /// A stream.
    pub stream: bool,
    /// The output limit per completion the client asked for (None: the endpoint's default).
    pub limit: Option<u64>,
    /// The completions generated, each up to the limit (the larger of `n` and `best_of`).
    pub choices: u64,
}

/// A protocol's text completions, for its clients and its upstreams.
pub struct Completions {
    /// The endpoint under an upstream's base URL.
    pub upstream_path: &'static str,
    /// The field that carries the output limit.
    pub limit_field: &'static str,
    /// The output limit of a request that names none (OpenAI's: 16 tokens).
    pub default_limit: u64,
    /// Reads (and so checks) a client's request body.
    pub read: fn(&Value) -> Result<CompletionAsk, ApiError>,
    /// The doctor's minimal request: the model, a short prompt, a small limit.
    pub probe_body: fn(&str, &str) -> Value,
    /// The text of a complete answer's first completion, where the specification puts it.
    pub answer_text: fn(&Value) -> Option<String>,
}
