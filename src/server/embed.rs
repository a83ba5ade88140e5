//! Embeddings (`POST /v1/embeddings`; Gemini's `:embedContent` and `:batchEmbedContents`): the answering
//! step of the common pipeline (`generate`), so keys, groups, limits, balances, breakers, failover and the
//! usage record are generation's. An upstream of the client's own family (an OpenAI client, an
//! OpenAI-compatible upstream) gets the client's body as it came, the model renamed, and its answer goes
//! back byte for byte; any other pair goes through the canonical form (`protocol/embed.rs`): the vectors
//! cross as numbers, dimensions, task and titles with them. The built-in mock answers with vectors made from
//! the text. An upstream whose vendor has no embeddings (Anthropic) is a 400 that says so. For a model whose
//! answers are cached, the vectors are kept (`cached.rs` stores them once the answer is whole).

use super::attempt::Attempt;
use super::call;
use super::outcome::{Answer, Reached};
use crate::gateway::respond;
use crate::protocol::canon::Usage;
use crate::protocol::codec::Embedder;
use crate::protocol::embed::{EmbedRequest, Embeddings};
use crate::protocol::ApiError;
use crate::upstream::http as uphttp;
use crate::upstream::mock;

pub(super) fn serve(a: &mut Attempt) -> Answer {
    let mut answer = Answer::for_upstream(&a.upstream.name);
    match embed(a, &mut answer) {
        Ok(()) => answer,
        Err(e) => answer.failed(e),
    }
}

/// Answers the client; `Err`: it has had no answer yet.
fn embed(a: &mut Attempt, answer: &mut Answer) -> Result<(), ApiError> {
    let client = a.p.endpoint.protocol();
    let (Some(theirs), Some(req)) = (client.embedder, a.p.embed.as_ref()) else {
        return Err(ApiError::internal(
            "an embeddings request without its reading",
        ));
    };
    let Some(kind) = a.upstream.kind.protocol() else {
        // The built-in mock: it counts its input as it counts a generation's.
        answer.reached(Reached {
            called: true,
            taken: true,
        });
        let got = mock::embeddings(req);
        return reply(a, answer, theirs, req, &got, false);
    };
    let Some(ours) = kind.embedder else {
        return Err(ApiError::invalid_param(
            "model",
            format!(
                "The model `{}` is served by the upstream `{}`, a {} upstream, which has no embeddings endpoint. \
                 Ask a model of an OpenAI-compatible or Gemini API upstream.",
                a.p.requested, a.upstream.name, kind.vendor
            ),
        ));
    };
    let same = std::ptr::addr_eq(theirs as *const dyn Embedder, ours as *const dyn Embedder);
    if same && client.model_in_body {
        return pass_through(a, answer, ours);
    }
    let body = ours.embed_request(req, &a.p.upstream_model)?;
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal(e.to_string()))?;
    let sent = call::send_to(a, &endpoint(a), &bytes, false, None);
    answer.reached(sent.reached);
    let buf = a.ex.response().take_buffer();
    let (v, _) = call::read_json(a, sent.reply?, buf).map_err(|u| {
        answer.refused_by_upstream(u.refused);
        u.error
    })?;
    let mut got = ours.decode_embeddings(&v)?;
    if got.vectors.len() != req.inputs.len() {
        return Err(ApiError::bad_gateway(format!(
            "upstream `{}` gave {} embeddings for {} inputs",
            a.upstream.name,
            got.vectors.len(),
            req.inputs.len()
        )));
    }
    // Usage the upstream does not report is counted here, as its vendor says to; the record says so.
    let counted = got.input_tokens.is_none();
    if counted {
        got.input_tokens = Some(ours.count_unreported(req));
    }
    reply(a, answer, theirs, req, &got, counted)
}

/// The client's body to an upstream of its own family, the model renamed; its answer back as it came.
fn pass_through(a: &mut Attempt, answer: &mut Answer, ours: &dyn Embedder) -> Result<(), ApiError> {
    let protocol = a.p.endpoint.protocol();
    let edits = protocol.upstream_edits(&a.p.forward(a.upstream, false));
    let bytes = edits
        .apply_sized(&a.p.body, a.ex.request.body.len())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let sent = call::send_to(a, &endpoint(a), &bytes, false, None);
    answer.reached(sent.reached);
    let buf = a.ex.response().take_buffer();
    let (raw, usage) = call::read_usage(a, sent.reply?, buf).map_err(|u| {
        answer.refused_by_upstream(u.refused);
        u.error
    })?;
    answer.reported(usage.and_then(|u| protocol.upstream.usage_from(&u)));
    if a.keep {
        let got = serde_json::from_slice(&raw)
            .ok()
            .and_then(|v| ours.decode_embeddings(&v).ok());
        answer.keep_vectors(got.map(Box::new));
    }
    respond::json_owned(a.ex.response(), a.trace, 200, raw, &[]);
    answer.answered(200);
    Ok(())
}

/// The upstream's embeddings endpoint for this attempt's model (its kind has one: `embed` checked).
fn endpoint(a: &Attempt) -> String {
    uphttp::embeddings_endpoint(a.upstream, &a.p.upstream_model).unwrap_or_default()
}

/// Writes `got` in the client's shape with the input tokens it holds (`counted`: by the gateway, not
/// reported by the upstream: billed as an estimate).
fn reply(
    a: &mut Attempt,
    answer: &mut Answer,
    theirs: &dyn Embedder,
    req: &EmbedRequest,
    got: &Embeddings,
    counted: bool,
) -> Result<(), ApiError> {
    let input_tokens = got.input_tokens.unwrap_or_default();
    let usage = Usage {
        input_tokens,
        ..Usage::default()
    };
    answer.set_usage((usage, counted));
    if a.keep {
        answer.keep_vectors(Some(Box::new(got.clone())));
    }
    let body = theirs.encode_embeddings(got, req, &a.p.requested, input_tokens);
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::internal(e.to_string()))?;
    respond::json(a.ex.response(), a.trace, 200, &bytes, &[]);
    answer.answered(200);
    Ok(())
}
