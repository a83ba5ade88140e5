//! Same-protocol passthrough: the client's body goes upstream as it came (model renamed, stream usage
//! switched on for Chat), and the answer comes back byte for byte, streams event by event, while usage is
//! read on the way. A stream that breaks after it started ends with the protocol's in-stream error event.

use serde_json::{json, Value};

use super::call;
use super::generate::{chat_wants_usage, Outcome, Prepared};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::Upstream;
use crate::http::Exchange;
use crate::protocol::observe::StreamObserver;
use crate::protocol::{estimate, limits, ApiError, Protocol};
use crate::upstream::http as uphttp;

pub fn passthrough(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    p: &mut Prepared,
) -> Result<(), ApiError> {
    // The body is changed in place (no copy): the model renamed, stream usage switched on, the output limit
    // set where the key's balance needs one. All are idempotent, so a failover to the next upstream can
    // change it again.
    let protocol = trace.protocol;
    let stream = p.stream;
    let client_wants_usage = chat_wants_usage(&p.body);
    let limit = p.limit_for_upstream();
    if p.must_limit() {
        let chat_field = if upstream.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        let reserved = p.reserved_output();
        limits::apply(protocol, &mut p.body, reserved, chat_field);
    }
    out.output_limit = limit;
    let body = &mut p.body;
    body["model"] = json!(p.model.upstream_model);
    let mut hide_usage = false;
    if protocol == Protocol::Chat && stream {
        hide_usage = !client_wants_usage;
        match body.get_mut("stream_options") {
            Some(Value::Object(so)) => {
                so.insert("include_usage".into(), json!(true));
            }
            _ => body["stream_options"] = json!({"include_usage": true}),
        }
    }
    let bytes = serde_json::to_vec(&*body).map_err(|e| ApiError::internal(e.to_string()))?;
    let beta: Option<String> = if protocol == Protocol::Messages {
        let all: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        (!all.is_empty()).then(|| all.join(","))
    } else {
        None
    };
    let reply = call::send(gw, trace, out, upstream, &bytes, stream, beta.as_deref())?;
    if stream && reply.is_event_stream() {
        let watch =
            StreamObserver::new(protocol, hide_usage, estimate::input_from_body(bytes.len()));
        relay_stream(gw, ex, trace, out, upstream, reply, watch, limit);
        return Ok(());
    }
    let (bytes, usage) = call::read_usage(trace, upstream, reply)?;
    if stream {
        // A plain JSON answer to a streaming request: sent as a stream in the client's protocol, the same
        // way a translated answer is.
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_gateway(format!("upstream `{}`: {e}", upstream.name)))?;
        return super::translate::answer_as_stream(gw, ex, trace, out, upstream, p, &v, protocol);
    }
    out.usage = usage.and_then(|u| protocol.usage_from(&u));
    respond::json(ex.response(), trace, 200, &bytes, &[]);
    out.status = 200;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn relay_stream(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    reply: uphttp::Reply,
    mut watch: StreamObserver,
    limit: Option<u64>,
) {
    let mut events = reply.into_sse();
    let w = ex.response();
    if respond::start_sse(w, trace, &[]).is_err() {
        out.client_closed = true;
        return;
    }
    if let Ok(shared) = w.share() {
        gw.watchdog.stream_started(shared, trace.protocol);
    }
    out.status = 200;
    let mut failure: Option<ApiError> = None;
    loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        trace.add_upstream_wait(waiting.elapsed());
        match next {
            Ok(Some(mut ev)) => {
                let relay = watch.observe(&ev);
                // Events are relayed as they came, but never with an upstream credential in them (upstreams
                // echo the key in error events).
                if crate::secrets::suspicious(&ev.raw) {
                    if let std::borrow::Cow::Owned(clean) =
                        crate::secrets::scrub(&String::from_utf8_lossy(&ev.raw))
                    {
                        ev.raw = clean.into_bytes();
                    }
                }
                if watch.produced_anything() {
                    trace.mark_first_token();
                }
                let (reported, produced) = watch.output_so_far();
                if super::accounting::beyond_limit(limit, reported, produced) {
                    failure = Some(super::accounting::limit_exceeded(
                        &upstream.name,
                        limit.unwrap_or(0),
                    ));
                    watch.cut();
                    break;
                }
                if watch.done() && trace.hold_tail {
                    // Strict ledger: the closing events wait for the record to be synced.
                    w.hold_rest();
                }
                if relay {
                    let written = if ev.terminated {
                        w.write_chunk(&ev.raw)
                    } else {
                        let mut raw = ev.raw.clone();
                        raw.extend_from_slice(if raw.ends_with(b"\n") { b"\n" } else { b"\n\n" });
                        w.write_chunk(&raw)
                    };
                    if written.is_err() {
                        out.client_closed = true;
                        out.set_usage(watch.usage());
                        return;
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                if !watch.done() {
                    failure = Some(if trace.cut_by_shutdown() {
                        super::generate::shutdown_error()
                    } else {
                        uphttp::stream_read_error(&upstream.name, &e)
                    });
                }
                break;
            }
        }
    }
    out.set_usage(watch.usage());
    if let Some(e) = watch.take_upstream_error() {
        out.error = Some(e);
    }
    if !watch.done() {
        let err = failure.unwrap_or_else(|| {
            ApiError::bad_gateway(format!(
                "upstream `{}` ended the stream before it was complete",
                upstream.name
            ))
        });
        log::warn!("{}: {}", trace.request_id, err.message());
        let mut buf = Vec::new();
        watch.error_event(&err, &trace.request_id, &mut buf);
        out.error = Some(err.message().to_string());
        if w.write_chunk(&buf).is_err() {
            out.client_closed = true;
            return;
        }
    }
    if w.finish().is_err() {
        out.client_closed = true;
    }
}
