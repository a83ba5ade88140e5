//! Cross-protocol requests: the client's body decoded into the canonical request, encoded for the
//! upstream's protocol, and the answer (JSON or stream) decoded back and re-encoded in the client's protocol.

use serde_json::Value;

use super::call;
use super::events::EventWriter;
use super::generate::{chat_wants_usage, response_id, Outcome};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::{Model, Upstream};
use crate::http::Exchange;
use crate::protocol::canon::{Part, Response, StreamEvent, Usage};
use crate::protocol::egress::events_from_response;
use crate::protocol::{ApiError, EgressOptions};
use crate::upstream::http as uphttp;
use crate::util::{estimate_tokens, unix_now};

#[allow(clippy::too_many_arguments)]
pub fn translate(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    model: &Model,
    body: &Value,
    stream: bool,
) -> Result<(), ApiError> {
    let client = trace.protocol;
    let Some(target) = upstream.kind.protocol() else {
        return Err(ApiError::internal("translation to the mock model"));
    };
    let mut req = client.decode_request(body)?;
    // The model's limits: no more output than it is configured for, and reasoning effort only where it
    // reasons (translated requests carry what the client asked of another vendor's model).
    req.max_tokens = req.max_tokens.map(|m| m.min(model.max_output_tokens));
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
        let encoder = client.stream_encoder(&req, chat_wants_usage(body));
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
        loop {
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
                    }
                    if done {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let err = uphttp::stream_read_error(&upstream.name, &e);
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
            out.error = Some(e.message.clone());
        }
        match writer.finish() {
            Ok(u) => out.set_usage(u),
            Err(_) => out.client_closed = true,
        }
        return Ok(());
    }

    // A complete JSON answer (also when a stream was asked for and the upstream answered in one piece).
    let (_, v) = call::read_json(trace, upstream, reply)?;
    let mut resp = target.decode_response(&v, &opts)?;
    let estimated = fill_usage(&mut resp, input_estimate);
    out.set_usage((resp.usage, estimated));
    resp.id = response_id(client);
    resp.model = model.name.clone();
    if resp.created == 0 {
        resp.created = unix_now();
    }
    if stream {
        let encoder = client.stream_encoder(&req, chat_wants_usage(body));
        let start = StreamEvent::Start {
            id: resp.id.clone(),
            model: resp.model.clone(),
            created: resp.created,
            input_tokens: resp.usage.input_tokens,
        };
        let Ok(mut writer) =
            EventWriter::start(ex.response(), trace, encoder, start, &extra, &gw.watchdog)
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
        return Ok(());
    }
    let encoded = client.encode_response(&resp, &req);
    let bytes = serde_json::to_vec(&encoded).map_err(|e| ApiError::internal(e.to_string()))?;
    respond::json(ex.response(), trace, 200, &bytes, &extra);
    out.status = 200;
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
