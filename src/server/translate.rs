//! Cross-protocol requests: the client's body decoded into the canonical request, encoded for the
//! upstream's protocol, and the answer (JSON or stream) decoded back and re-encoded in the client's protocol.

use serde_json::Value;

use super::accounting::{beyond_limit, limit_exceeded};
use super::call;
use super::events::EventWriter;
use super::generate::{chat_wants_usage, response_id, shutdown_error, Outcome, Prepared};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::Upstream;
use crate::http::Exchange;
use crate::protocol::canon::{Part, Response, StreamEvent, Usage};
use crate::protocol::egress::events_from_response;
use crate::protocol::{ApiError, EgressOptions, Protocol};
use crate::upstream::http as uphttp;
use crate::util::{estimate_tokens, unix_now};

pub fn translate(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    p: &Prepared,
) -> Result<(), ApiError> {
    let client = trace.protocol;
    let (model, stream) = (p.model, p.stream);
    let Some(target) = upstream.kind.protocol() else {
        return Err(ApiError::internal("translation to the mock model"));
    };
    let mut req = client.decode_request(&p.body)?;
    // The model's limits: no more output than it is configured for (and, for a key with a finite balance,
    // always a limit: the reserved one is never smaller), and reasoning effort only where it reasons
    // (translated requests carry what the client asked of another vendor's model).
    req.max_tokens = req.max_tokens.map(|m| m.min(model.max_output_tokens));
    if req.max_tokens.is_none() && p.must_limit() {
        req.max_tokens = Some(model.max_output_tokens);
    }
    if !model.reasoning {
        req.reasoning_effort = None;
    }
    let opts = EgressOptions {
        model: model.upstream_model.clone(),
        stream,
        default_max_tokens: model.max_output_tokens,
        max_completion_tokens_field: upstream.max_completion_tokens,
        structured_via_tool: model.structured_via_tool,
    };
    // Anthropic requires a limit: its default is the model's.
    out.output_limit = req
        .max_tokens
        .or((target == Protocol::Messages).then_some(model.max_output_tokens));
    let upstream_body = target.encode_request(&req, &opts)?;
    let bytes =
        serde_json::to_vec(&upstream_body).map_err(|e| ApiError::internal(e.to_string()))?;
    let dropped = req.dropped_tools.join(", ");
    if !dropped.is_empty() {
        log::info!(
            "{}: left out hosted tools the `{}` upstream cannot run: {dropped}",
            trace.request_id,
            upstream.kind.name()
        );
    }
    let extra: Vec<(&str, &str)> = if dropped.is_empty() {
        Vec::new()
    } else {
        vec![("x-tollgate-dropped-tools", dropped.as_str())]
    };

    let reply = call::send(gw, trace, out, upstream, &bytes, stream, None)?;
    let input_estimate = estimate_tokens(&req.all_text());

    if stream && reply.is_event_stream() {
        let encoder = client.stream_encoder(&req, chat_wants_usage(&p.body), &trace.request_id);
        let start = StreamEvent::Start {
            id: response_id(client),
            model: model.name.clone(),
            created: unix_now(),
            input_tokens: input_estimate,
        };
        let Ok(mut writer) =
            EventWriter::start(ex.response(), trace, encoder, start, &extra, &gw.watchdog)
        else {
            out.client_closed = true;
            return Ok(());
        };
        out.status = 200;
        let mut events = reply.into_sse();
        let mut decoder = target.stream_decoder(&opts);
        let mut decoded = Vec::new();
        let mut done = false;
        'read: loop {
            let waiting = std::time::Instant::now();
            let next = events.next_event();
            trace.add_upstream_wait(waiting.elapsed());
            match next {
                Ok(Some(ev)) => {
                    decoded.clear();
                    done = decoder.feed(&ev, &mut decoded);
                    for e in &decoded {
                        if writer.emit(e).is_err() {
                            out.client_closed = true;
                            out.set_usage(writer.usage());
                            return Ok(());
                        }
                        let (reported, produced) = writer.output_so_far();
                        if beyond_limit(out.output_limit, reported, produced) {
                            let err = limit_exceeded(&upstream.name, out.output_limit.unwrap_or(0));
                            let _ = writer.emit(&StreamEvent::Error(err));
                            done = true;
                            break 'read;
                        }
                    }
                    if done {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let err = if trace.cut_by_shutdown() {
                        shutdown_error()
                    } else {
                        uphttp::stream_read_error(&upstream.name, &e)
                    };
                    let _ = writer.emit(&StreamEvent::Error(err));
                    done = true;
                    break;
                }
            }
        }
        if !done {
            let err = ApiError::bad_gateway(format!(
                "upstream `{}` ended the stream before it was complete",
                upstream.name
            ));
            let _ = writer.emit(&StreamEvent::Error(err));
        }
        if let Some(e) = &writer.error {
            out.error = Some(e.message().to_string());
        }
        match writer.finish() {
            Ok(u) => out.set_usage(u),
            Err(_) => out.client_closed = true,
        }
        return Ok(());
    }

    // A complete JSON answer (also when a stream was asked for and the upstream answered in one piece).
    let (_, v) = call::read_json(trace, upstream, reply)?;
    if stream {
        return answer_as_stream(gw, ex, trace, out, upstream, p, &v, target);
    }
    let resp = complete_answer(trace, out, model, &v, target, &opts, input_estimate)?;
    let encoded = client.encode_response(&resp, &req);
    let bytes = serde_json::to_vec(&encoded).map_err(|e| ApiError::internal(e.to_string()))?;
    respond::json(ex.response(), trace, 200, &bytes, &extra);
    out.status = 200;
    Ok(())
}

/// Decodes an upstream's complete answer in `target`'s protocol into the canonical answer with the
/// gateway's own id and the model's public name; usage the upstream did not report is estimated.
fn complete_answer(
    trace: &Trace,
    out: &mut Outcome,
    model: &crate::config::Model,
    v: &Value,
    target: Protocol,
    opts: &EgressOptions,
    input_estimate: u64,
) -> Result<Response, ApiError> {
    let mut resp = target.decode_response(v, opts)?;
    let estimated = fill_usage(&mut resp, input_estimate);
    out.set_usage((resp.usage, estimated));
    resp.id = response_id(trace.protocol);
    resp.model = model.name.clone();
    if resp.created == 0 {
        resp.created = unix_now();
    }
    Ok(resp)
}

/// One documented behaviour on every path: an upstream that answers a streaming request with one complete
/// JSON answer (in `target`'s protocol) is relayed to the client as a stream of its own protocol.
#[allow(clippy::too_many_arguments)]
pub fn answer_as_stream(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    p: &Prepared,
    v: &Value,
    target: Protocol,
) -> Result<(), ApiError> {
    let client = trace.protocol;
    let req = client.decode_request(&p.body)?;
    let opts = EgressOptions {
        model: p.model.upstream_model.clone(),
        stream: true,
        default_max_tokens: p.model.max_output_tokens,
        max_completion_tokens_field: upstream.max_completion_tokens,
        structured_via_tool: p.model.structured_via_tool,
    };
    let input_estimate = estimate_tokens(&req.all_text());
    let resp = complete_answer(trace, out, p.model, v, target, &opts, input_estimate)?;
    log::debug!(
        "{}: upstream `{}` answered a streaming request with one JSON answer; sent as a stream",
        trace.request_id,
        upstream.name
    );
    let encoder = client.stream_encoder(&req, chat_wants_usage(&p.body), &trace.request_id);
    let start = StreamEvent::Start {
        id: resp.id.clone(),
        model: resp.model.clone(),
        created: resp.created,
        input_tokens: resp.usage.input_tokens,
    };
    let Ok(mut writer) =
        EventWriter::start(ex.response(), trace, encoder, start, &[], &gw.watchdog)
    else {
        out.client_closed = true;
        return Ok(());
    };
    out.status = 200;
    for e in events_from_response(&resp) {
        if writer.emit(&e).is_err() {
            out.client_closed = true;
            return Ok(());
        }
    }
    if writer.finish().is_err() {
        out.client_closed = true;
    }
    Ok(())
}

/// Fills in usage the upstream did not report, from the text; returns whether it had to.
fn fill_usage(resp: &mut Response, input_estimate: u64) -> bool {
    if resp.usage.input_tokens > 0 || resp.usage.output_tokens > 0 {
        return false;
    }
    let mut produced = String::new();
    for p in &resp.content {
        match p {
            Part::Text(t) | Part::Reasoning { text: t, .. } => produced.push_str(t),
            Part::ToolCall {
                name, arguments, ..
            } => {
                produced.push_str(name);
                produced.push_str(arguments);
            }
            _ => {}
        }
    }
    resp.usage = Usage {
        input_tokens: input_estimate,
        output_tokens: estimate_tokens(&produced),
        ..Usage::default()
    };
    true
}
