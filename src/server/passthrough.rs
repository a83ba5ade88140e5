//! Same-protocol passthrough: the client's body goes upstream as it came (model renamed, stream usage
//! switched on for Chat, an output limit where the key's balance needs one), and the answer comes back
//! byte for byte, streams event by event, while usage (paid hosted uses included: `server/hosted.rs`) is
//! read on the way. A stream that breaks after it started ends with the protocol's in-stream error event.

use serde_json::Value;

use super::attempt::Attempt;
use super::call;
use super::hosted::Ran;
use super::respond;
use super::translate;
use crate::protocol::observe::StreamObserver;
use crate::protocol::sse::SseEvent;
use crate::protocol::{estimate, hosted, limits, ApiError};
use crate::upstream::http::{self as uphttp, Reply};

pub fn serve(a: &mut Attempt) -> Result<(), ApiError> {
    let protocol = a.trace.protocol;
    let stream = a.p.stream;
    let limit = a.p.limit_for_upstream();
    // The body is changed in place (no copy). All edits are idempotent, so a failover to the next upstream
    // can change it again.
    if a.p.must_limit() {
        let reserved = a.p.reserved_output();
        let field = a.upstream.max_completion_tokens;
        limits::apply(protocol, &mut a.p.body, reserved, field);
    }
    a.answer.output_limit = limit;
    protocol.edit_for_passthrough(&mut a.p.body, &a.p.upstream_model, stream);
    let bytes = serde_json::to_vec(&a.p.body).map_err(|e| ApiError::internal(e.to_string()))?;
    let beta = protocol.passed_on_beta(&a.ex.request);
    let sent = call::send(a, &bytes, stream, beta.as_deref());
    sent_hosted(a, &sent);
    let reply = sent?;
    if stream && reply.is_event_stream() {
        let hide_usage = !a.p.wants_stream_usage;
        let watch =
            StreamObserver::new(protocol, hide_usage, estimate::input_from_body(bytes.len()));
        relay_stream(a, reply, watch);
        return Ok(());
    }
    let (raw, usage) = call::read_usage(a, reply)?;
    if !a.p.hosted.is_empty() {
        a.answer.hosted = Ran::Reported(hosted::from_answer(protocol, &raw, usage.as_ref()));
    }
    if stream {
        // A plain JSON answer to a streaming request: sent as a stream in the client's protocol, the same
        // way a translated answer is.
        let v: Value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::bad_gateway(format!("upstream `{}`: {e}", a.upstream.name)))?;
        return translate::answer_as_stream(a, &v, protocol);
    }
    a.answer.usage = usage.and_then(|u| protocol.usage_from(&u));
    respond::json(a.ex.response(), a.trace, 200, &raw, &[]);
    a.answer.status = 200;
    Ok(())
}

/// Notes what paid hosted features the request set running once it was sent: unknown until an answer
/// completes, unless the upstream refused it or never answered (and the client is still there).
fn sent_hosted(a: &mut Attempt, sent: &Result<Reply, ApiError>) {
    if a.p.hosted.is_empty() {
        return;
    }
    let refused = match sent {
        Ok(_) => false,
        Err(e) => !a.answer.called || (e.is_upstream() && !a.trace.client_gone()),
    };
    a.answer.hosted = if refused { Ran::Nothing } else { Ran::Sent };
}

/// Relays an upstream stream event by event, cutting it at the output limit and ending a broken one with
/// the protocol's in-stream error.
fn relay_stream(a: &mut Attempt, reply: Reply, mut watch: StreamObserver) {
    let mut events = reply.into_sse();
    if respond::start_sse(a.ex.response(), a.trace, &[]).is_err() {
        a.answer.client_closed = true;
        return;
    }
    if let Ok(shared) = a.ex.response().share() {
        a.watch.stream_started(shared, a.trace.protocol);
    }
    a.answer.status = 200;
    let failure = loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        a.trace.add_upstream_wait(waiting.elapsed());
        match next {
            Ok(Some(ev)) => match forward(a, &mut watch, ev) {
                Step::Next => {}
                Step::ClientGone => {
                    a.answer.client_closed = true;
                    a.answer.set_usage(watch.usage());
                    return;
                }
                Step::Stop(failure) => break failure,
            },
            Ok(None) => break None,
            Err(e) if watch.done() => {
                log::debug!("{}: upstream stream ended with {e}", a.trace.request_id);
                break None;
            }
            Err(_) if a.trace.cut_by_shutdown() => break Some(ApiError::shutting_down()),
            Err(e) => break Some(uphttp::stream_read_error(&a.upstream.name, &e)),
        }
    };
    a.answer.set_usage(watch.usage());
    if let Some(uses) = watch.hosted_uses().filter(|_| !a.p.hosted.is_empty()) {
        a.answer.hosted = Ran::Reported(uses);
    }
    if let Some(e) = watch.upstream_error() {
        a.answer.error = Some(e);
    }
    if !watch.done() {
        end_broken(a, &mut watch, failure);
    }
    if a.ex.response().finish().is_err() {
        a.answer.client_closed = true;
    }
}

enum Step {
    Next,
    ClientGone,
    /// The relay stops (the output limit was passed: the failure to end the stream with).
    Stop(Option<ApiError>),
}

/// Looks at one upstream event and passes it on (scrubbed of upstream credentials).
fn forward(a: &mut Attempt, watch: &mut StreamObserver, mut ev: SseEvent) -> Step {
    let relay = watch.observe(&ev);
    // Events are relayed as they came, but never with an upstream credential in them (upstreams echo the
    // key in error events).
    if crate::secrets::suspicious(&ev.raw) {
        if let std::borrow::Cow::Owned(clean) =
            crate::secrets::scrub(&String::from_utf8_lossy(&ev.raw))
        {
            ev.raw = clean.into_bytes();
        }
    }
    if watch.produced_anything() {
        a.trace.mark_first_token();
    }
    let (reported, produced) = watch.output_so_far();
    let limit = a.answer.output_limit;
    if limits::beyond(limit, reported, produced) {
        watch.cut();
        let name = &a.upstream.name;
        return Step::Stop(Some(ApiError::output_limit_exceeded(
            name,
            limit.unwrap_or(0),
        )));
    }
    let w = a.ex.response();
    if watch.done() && a.trace.hold_tail {
        // Strict ledger: the closing events wait for the record to be synced.
        w.hold_rest();
    }
    if relay && w.write_chunk(&ev.framed()).is_err() {
        return Step::ClientGone;
    }
    Step::Next
}

/// Ends a stream that broke (or was cut) with the protocol's in-stream error.
fn end_broken(a: &mut Attempt, watch: &mut StreamObserver, failure: Option<ApiError>) {
    let err = failure.unwrap_or_else(|| {
        ApiError::bad_gateway(format!(
            "upstream `{}` ended the stream before it was complete",
            a.upstream.name
        ))
    });
    log::warn!("{}: {}", a.trace.request_id, err.message());
    let mut buf = Vec::new();
    watch.error_event(&err, &a.trace.request_id, &mut buf);
    a.answer.error = Some(err);
    if a.ex.response().write_chunk(&buf).is_err() {
        a.answer.client_closed = true;
    }
}
