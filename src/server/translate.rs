//! Cross-protocol requests: the client's body decoded into the canonical request, encoded for the
//! upstream's protocol, and the answer (JSON or stream) decoded back and re-encoded in the client's protocol.

use serde_json::Value;

use super::attempt::Attempt;
use super::call;
use super::events::EventWriter;
use super::respond;
use crate::protocol::canon::{Request, Response, StreamEvent};
use crate::protocol::egress::events_from_response;
use crate::protocol::{estimate, limits, ApiError, EgressOptions, Protocol};
use crate::upstream::http::{self as uphttp, Reply};
use crate::util::unix_now;

/// The request as the upstream's protocol has it.
struct Translated {
    req: Request,
    opts: EgressOptions,
    target: Protocol,
    /// Hosted tools the upstream cannot run, left out (said in a header).
    dropped: String,
}

pub fn serve(a: &mut Attempt) -> Result<(), ApiError> {
    let t = translate_request(a)?;
    let bytes = serde_json::to_vec(&t.target.encode_request(&t.req, &t.opts)?)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let reply = call::send(a, &bytes, a.p.stream, None)?;
    if a.p.stream && reply.is_event_stream() {
        return relay_stream(a, &t, reply);
    }
    // A complete JSON answer (also when a stream was asked for and the upstream answered in one piece).
    let v = call::read_json(a, reply)?;
    if a.p.stream {
        return answer_as_stream(a, &v, t.target);
    }
    let resp = complete_answer(a, &v, t.target, &t.opts, &t.req)?;
    let encoded = a.trace.protocol.encode_response(&resp, &t.req);
    let bytes = serde_json::to_vec(&encoded).map_err(|e| ApiError::internal(e.to_string()))?;
    let extra = dropped_header(&t.dropped);
    respond::json(a.ex.response(), a.trace, 200, &bytes, &extra);
    a.answer.status = 200;
    Ok(())
}

/// Decodes the client's body and fits it to the model: no more output than it is configured for (and, for
/// a key with a spending limit, always a limit: the reserved one is never smaller), and reasoning effort
/// only where it reasons (translated requests carry what the client asked of another vendor's model).
fn translate_request(a: &mut Attempt) -> Result<Translated, ApiError> {
    let Some(target) = a.upstream.kind.protocol() else {
        return Err(ApiError::internal("translation to the mock model"));
    };
    let model = a.p.model;
    let mut req = a.p.canonical()?;
    req.max_tokens = req.max_tokens.map(|m| m.min(model.max_output_tokens));
    if req.max_tokens.is_none() && a.p.must_limit() {
        req.max_tokens = Some(model.max_output_tokens);
    }
    if !model.reasoning {
        req.reasoning_effort = None;
    }
    // Upstreams that require a limit (Anthropic's) get the model's by default.
    a.answer.output_limit = req.max_tokens.or(target
        .requires_output_limit()
        .then_some(model.max_output_tokens));
    let dropped = req.dropped_tools.join(", ");
    if !dropped.is_empty() {
        log::info!(
            "{}: left out hosted tools the `{}` upstream cannot run: {dropped}",
            a.trace.request_id,
            a.upstream.kind.name()
        );
    }
    let opts = egress_options(a, a.p.stream);
    Ok(Translated {
        req,
        opts,
        target,
        dropped,
    })
}

fn egress_options(a: &Attempt, stream: bool) -> EgressOptions {
    EgressOptions {
        model: a.p.upstream_model.clone(),
        stream,
        default_max_tokens: a.p.model.max_output_tokens,
        max_completion_tokens_field: a.upstream.max_completion_tokens,
        structured_via_tool: a.p.model.structured_via_tool,
    }
}

fn dropped_header(dropped: &str) -> Vec<(&str, &str)> {
    if dropped.is_empty() {
        Vec::new()
    } else {
        vec![("x-tollgate-dropped-tools", dropped)]
    }
}

/// Decodes the upstream's stream and writes it in the client's protocol, cutting it at the output limit
/// and ending a broken one with the in-stream error.
fn relay_stream(a: &mut Attempt, t: &Translated, reply: Reply) -> Result<(), ApiError> {
    let client = a.trace.protocol;
    let encoder = client.stream_encoder(&t.req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: client.new_response_id(),
        model: a.p.requested.clone(),
        created: unix_now(),
        input_tokens: estimate::input_from_request(&t.req, a.p.model.image_tokens),
    };
    let extra = dropped_header(&t.dropped);
    let (w, trace) = (a.ex.response(), a.trace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &extra, a.watch) else {
        a.answer.client_closed = true;
        return Ok(());
    };
    a.answer.status = 200;
    let (name, limit) = (&a.upstream.name, a.answer.output_limit);
    let mut events = reply.into_sse();
    let mut decoder = t.target.stream_decoder(&t.opts);
    let mut decoded = Vec::new();
    let failure = 'read: loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        trace.add_upstream_wait(waiting.elapsed());
        let ev = match next {
            Ok(Some(ev)) => ev,
            Ok(None) => break Some(ended_early(name)),
            Err(_) if trace.cut_by_shutdown() => break Some(ApiError::shutting_down()),
            Err(e) => break Some(uphttp::stream_read_error(name, &e)),
        };
        decoded.clear();
        let done = decoder.feed(&ev, &mut decoded);
        for e in &decoded {
            if writer.emit(e).is_err() {
                a.answer.client_closed = true;
                a.answer.set_usage(writer.usage());
                return Ok(());
            }
            let (reported, produced) = writer.output_so_far();
            if limits::beyond(limit, reported, produced) {
                break 'read Some(ApiError::output_limit_exceeded(name, limit.unwrap_or(0)));
            }
        }
        if done {
            break None;
        }
    };
    if let Some(err) = failure {
        let _ = writer.emit(&StreamEvent::Error(err));
    }
    a.answer.error = writer.error.clone();
    match writer.finish() {
        Ok(u) => a.answer.set_usage(u),
        Err(_) => a.answer.client_closed = true,
    }
    Ok(())
}

fn ended_early(upstream: &str) -> ApiError {
    ApiError::bad_gateway(format!(
        "upstream `{upstream}` ended the stream before it was complete"
    ))
}

/// Decodes an upstream's complete answer in `target`'s protocol into the canonical answer with the
/// gateway's own id and the model's public name; usage the upstream did not report is estimated.
fn complete_answer(
    a: &mut Attempt,
    v: &Value,
    target: Protocol,
    opts: &EgressOptions,
    req: &Request,
) -> Result<Response, ApiError> {
    let mut resp = target.decode_response(v, opts)?;
    let estimated = estimate::complete_usage(
        &mut resp,
        estimate::input_from_request(req, a.p.model.image_tokens),
    );
    a.answer.set_usage((resp.usage, estimated));
    resp.id = a.trace.protocol.new_response_id();
    resp.model = a.p.requested.clone();
    if resp.created == 0 {
        resp.created = unix_now();
    }
    Ok(resp)
}

/// One documented behaviour on every path: an upstream that answers a streaming request with one complete
/// JSON answer (in `target`'s protocol) is relayed to the client as a stream of its own protocol.
pub fn answer_as_stream(a: &mut Attempt, v: &Value, target: Protocol) -> Result<(), ApiError> {
    let client = a.trace.protocol;
    let req = a.p.canonical()?;
    let opts = egress_options(a, true);
    let resp = complete_answer(a, v, target, &opts, &req)?;
    log::debug!(
        "{}: upstream `{}` answered a streaming request with one JSON answer; sent as a stream",
        a.trace.request_id,
        a.upstream.name
    );
    let encoder = client.stream_encoder(&req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: resp.id.clone(),
        model: resp.model.clone(),
        created: resp.created,
        input_tokens: resp.usage.input_tokens,
    };
    let (w, trace) = (a.ex.response(), a.trace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &[], a.watch) else {
        a.answer.client_closed = true;
        return Ok(());
    };
    a.answer.status = 200;
    for e in events_from_response(&resp) {
        if writer.emit(&e).is_err() {
            a.answer.client_closed = true;
            return Ok(());
        }
    }
    if writer.finish().is_err() {
        a.answer.client_closed = true;
    }
    Ok(())
}
