//! `POST /v1/messages/count_tokens` (Claude Code asks it to size its context): the answering step of the
//! common pipeline (`generate`), so the model, group, limits, breaker and failover rules are those of
//! generation. An Anthropic upstream is asked; for the others the count is estimated from the text. It
//! spends the operator's upstream quota, so a forwarded request leaves a usage record (with its input
//! tokens, at no cost).

use super::attempt::Attempt;
use super::call;
use super::respond;
use crate::config::UpstreamKind;
use crate::protocol::canon::Usage;
use crate::protocol::request::{
    count_answer, counted_tokens, decode_count_request, COUNT_TOKENS_PATH,
};
use crate::protocol::{estimate, ApiError};

pub fn serve(a: &mut Attempt) -> Result<(), ApiError> {
    let body = if a.upstream.kind == UpstreamKind::Anthropic {
        forward(a)?
    } else {
        // Decoding validates the body.
        let req = decode_count_request(&a.p.body)?;
        count_answer(estimate::input_from_request(&req, a.p.model.image_tokens).max(1))
    };
    respond::json(a.ex.response(), a.trace, 200, &body, &[]);
    a.answer.status = 200;
    Ok(())
}

/// Asks the Anthropic upstream; returns its answer as it came.
fn forward(a: &mut Attempt) -> Result<Vec<u8>, ApiError> {
    let protocol = a.trace.protocol;
    protocol.edit_for_passthrough(&mut a.p.body, &a.p.upstream_model, false);
    let bytes = serde_json::to_vec(&a.p.body).map_err(|e| ApiError::internal(e.to_string()))?;
    let beta = protocol.passed_on_beta(&a.ex.request);
    let url = format!("{}{COUNT_TOKENS_PATH}", a.upstream.base_url);
    let reply = call::send_to(a, &url, &bytes, false, beta.as_deref())?;
    let raw = reply.read_all(&a.upstream.name)?;
    a.answer.usage = Some(Usage {
        input_tokens: counted_tokens(&raw).unwrap_or(0),
        ..Usage::default()
    });
    Ok(raw)
}
