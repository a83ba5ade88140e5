//! Legacy text completions (`POST /v1/completions`, fill-in-the-middle with `suffix`): the answering step of
//! the common pipeline (`generate`), so keys, groups, limits, balances, breakers, failover and the usage
//! record are generation's. They go to an OpenAI-compatible upstream as they came (`passthrough.rs`: the
//! model renamed, the limit in `max_tokens` where the key's spending limit needs one, a stream's usage
//! switched on) and come back byte for byte; an upstream of another kind, or the built-in mock, gets no
//! rewrite into chat: the client is told which endpoint the model serves.

use super::attempt::Attempt;
use super::outcome::Answer;
use super::passthrough;
use crate::protocol::ApiError;
use crate::upstream::http as uphttp;

pub(super) fn serve(a: &mut Attempt) -> Answer {
    if uphttp::completions_endpoint(a.upstream).is_some() {
        return passthrough::serve(a);
    }
    let serves = match a.upstream.kind.protocol() {
        Some(p) => format!(
            "the upstream `{}` is a {} {} upstream: the model serves `{}`",
            a.upstream.name,
            p.vendor,
            p.title,
            p.sdk_request_path(&a.p.requested, false)
        ),
        None => "it is the built-in mock model, which serves the chat endpoints".to_string(),
    };
    let e = ApiError::invalid_param(
        "model",
        format!(
            "The model `{}` has no text completions endpoint ({serves}). `/v1/completions` reaches only models \
             of OpenAI-compatible upstreams.",
            a.p.requested
        ),
    );
    Answer::for_upstream(&a.upstream.name).failed(e)
}
