//! Token counting (`POST /v1/messages/count_tokens`, Gemini's `:countTokens`: agents ask it to size their
//! context): the answering
//! step of the common pipeline (`generate`), so the model, group, limits, breaker and failover rules are
//! those of generation. An upstream of the endpoint's own protocol that counts tokens is asked; for the
//! others the count is estimated from the text. It spends the operator's upstream quota, so a forwarded
//! request leaves a usage record (with its input tokens, at no cost).

use super::attempt::Attempt;
use super::call;
use super::outcome::Answer;
use crate::gateway::respond;
use crate::protocol::canon::Usage;
use crate::protocol::{estimate, ApiError};

pub(super) fn serve(a: &mut Attempt) -> Answer {
    let mut answer = Answer::for_upstream(&a.upstream.name);
    let protocol = a.p.endpoint.protocol();
    let Some(counting) = protocol.counting else {
        return answer.failed(ApiError::not_found(
            "This protocol has no token counting endpoint.",
        ));
    };
    let counts = a.upstream.kind.protocol() == Some(protocol);
    let path = counts
        .then(|| protocol.upstream_count_endpoint(&a.p.upstream_model))
        .flatten();
    let body = match path {
        Some(path) => forward(a, &mut answer, &path),
        None => {
            // Decoding validates the body.
            counting.decode_count_request(&a.p.body).map(|req| {
                let n = estimate::input_from_request(&req, a.p.model.image_tokens);
                counting.count_answer(n.max(1))
            })
        }
    };
    match body {
        Ok(body) => {
            respond::json(a.ex.response(), a.trace, 200, &body, &[]);
            answer.answered(200);
            answer
        }
        Err(e) => answer.failed(e),
    }
}

/// Asks the upstream at its counting `path`; returns its answer as it came.
fn forward(a: &mut Attempt, answer: &mut Answer, path: &str) -> Result<Vec<u8>, ApiError> {
    let protocol = a.p.endpoint.protocol();
    let edits = protocol.upstream_edits(&a.p.forward(a.upstream, false));
    let bytes = edits
        .apply(&a.p.body)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let passed = protocol.passed_on(&a.ex.request);
    let url = format!("{}{path}", a.upstream.base_url);
    let sent = call::send_to(a, &url, &bytes, false, passed.as_ref());
    answer.reached(sent.reached);
    let raw = sent.reply?.read_all(&a.upstream.name)?;
    answer.reported(Some(Usage {
        input_tokens: protocol
            .counting
            .and_then(|c| c.counted_tokens(&raw))
            .unwrap_or(0),
        ..Usage::default()
    }));
    Ok(raw)
}
