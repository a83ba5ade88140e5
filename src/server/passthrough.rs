//! Same-protocol passthrough: the client's body goes upstream as it came (model renamed, stream usage
//! switched on for Chat, the one output limit in the field the upstream reads, added where the key's
//! spending limit needs one), and the answer comes back byte for byte, streams event by event, while usage
//! (paid hosted uses included: `server/hosted.rs`) is read on the way. A stream that breaks after it
//! started ends with the protocol's in-stream error event.

use serde_json::Value;

use super::attempt::Attempt;
use super::call::{self, Sent};
use super::complete::{self, egress_options};
use super::hosted::Ran;
use super::outcome::Answer;
use crate::gateway::respond;
use crate::protocol::canon::Response;
use crate::protocol::collect::FromRelay;
use crate::protocol::observe::{self, StreamObserver};
use crate::protocol::sse::SseEvent;
use crate::protocol::{hosted, limits, ApiError};
use crate::secrets::{self, Redactor, TextEdit};
use crate::upstream::http::{self as uphttp, Reply};
use std::borrow::Cow;

pub(super) fn serve(a: &mut Attempt) -> Answer {
    let mut answer = Answer::for_upstream(&a.upstream.name);
    match forward(a, &mut answer) {
        Ok(()) => answer,
        Err(e) => answer.failed(e),
    }
}

/// Sends the client's body with this attempt's edits and relays the answer; `Err`: the client has had no
/// answer yet.
fn forward(a: &mut Attempt, answer: &mut Answer) -> Result<(), ApiError> {
    let protocol = a.trace.protocol;
    let stream = a.p.stream;
    // The client's body is serialized with this attempt's edits (no copy, nothing changed in it). The one
    // output limit goes in the field this upstream reads, and only there.
    let edits = protocol.upstream_edits(&a.p.forward(a.upstream, stream));
    let bytes = edits
        .apply_sized(&a.p.body, a.ex.request.body.len())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // Each choice may reach the limit: the answer is billed (and a stream cut) at the limit times them.
    answer.limit_sent(a.p.output_cap());
    let passed = protocol.passed_on(&a.ex.request);
    let sent = call::send(a, &bytes, stream, passed.as_ref());
    answer.reached(sent.reached);
    answer.ran(sent_hosted(a, &sent));
    let reply = sent.reply?;
    if stream && reply.is_event_stream() {
        let hide_usage = !a.p.wants_stream_usage;
        let watch = StreamObserver::new(protocol, hide_usage, a.p.input_estimate());
        let kept = a
            .keep
            .then(|| FromRelay::new(protocol.upstream.stream_decoder(&egress_options(a, true))));
        relay_stream(a, answer, reply, watch, kept);
        return Ok(());
    }
    // Read into the connection's answer buffer, and sent from it (`respond::json_owned`): the answer's one
    // copy on its way through.
    let buf = a.ex.response().take_buffer();
    let (raw, usage) = call::read_usage(a, reply, buf).map_err(|u| {
        answer.refused_by_upstream(u.refused);
        u.error
    })?;
    if !a.p.asked.hosted.is_empty() {
        let (counted, tier) = (protocol.reports_tool_uses, protocol.reports_rate_tier);
        answer.ran(Ran::Reported(hosted::from_answer(
            &raw,
            usage.as_ref(),
            counted,
            tier,
        )));
    }
    if stream {
        // A plain JSON answer to a streaming request: sent as a stream in the client's protocol, the same
        // way a translated answer is.
        let v: Value = serde_json::from_slice(&raw)
            .map_err(|e| ApiError::bad_gateway(format!("upstream `{}`: {e}", a.upstream.name)))?;
        let (usage, delivered) = complete::as_stream(a, &v, protocol)?;
        answer.set_usage(usage);
        answer.delivered(delivered);
        return Ok(());
    }
    answer.reported(usage.and_then(|u| protocol.upstream.usage_from(&u)));
    if a.keep {
        answer.keep(keep_json(a, &raw));
    }
    respond::json_owned(a.ex.response(), a.trace, 200, raw, &[]);
    answer.answered(200);
    Ok(())
}

/// A complete answer in canonical form, for the answer cache (None: it does not decode, so it is not kept).
fn keep_json(a: &Attempt, raw: &[u8]) -> Option<Box<Response>> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let opts = egress_options(a, false);
    a.trace
        .protocol
        .upstream
        .decode_response(&v, &opts)
        .ok()
        .map(Box::new)
}

/// What paid hosted features the request set running once it was sent: unknown until an answer completes,
/// unless the upstream refused it or never answered (and the client is still there).
fn sent_hosted(a: &Attempt, sent: &Sent) -> Ran {
    if a.p.asked.hosted.is_empty() {
        return Ran::Nothing;
    }
    let refused = match &sent.reply {
        Ok(_) => false,
        Err(e) => !sent.reached.called || (e.is_upstream() && !a.trace.client_gone()),
    };
    if refused {
        Ran::Nothing
    } else {
        Ran::Sent
    }
}

/// Relays an upstream stream event by event, cutting it at the output limit and ending a broken one with
/// the protocol's in-stream error.
fn relay_stream(
    a: &mut Attempt,
    answer: &mut Answer,
    reply: Reply,
    mut watch: StreamObserver,
    mut kept: Option<FromRelay>,
) {
    let mut events = reply.into_sse();
    // What the upstream does is billed however the client leaves: from here its stream is read on to the
    // usage report for a while after the client left.
    crate::upstream::tap::drain_after_client_leaves(a.p.config.client_left_grace);
    if respond::start_sse(a.ex.response(), a.trace, &[]).is_err() {
        answer.client_left();
        after_client_left(a, answer, &mut events, &mut watch);
        return;
    }
    if let Ok(shared) = a.ex.response().share() {
        a.watch.stream_started(shared, a.trace.protocol);
    }
    answer.answered(200);
    let mut redactor = Redactor::new();
    let limit = answer.output_limit();
    let failure = loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        a.trace.add_upstream_wait(waiting.elapsed());
        let step = match next {
            Ok(Some(ev)) => {
                if let Some(k) = kept.as_mut() {
                    k.feed(&ev);
                }
                pass_on(a, limit, &mut watch, &mut redactor, ev)
            }
            Ok(None) => break None,
            Err(e) if watch.done() => {
                log::debug!("{}: upstream stream ended with {e}", a.trace.request_id);
                break None;
            }
            Err(_) if a.trace.cut_by_shutdown() => break Some(ApiError::shutting_down()),
            Err(_) if a.trace.client_gone() => Step::ClientGone,
            Err(e) => break Some(uphttp::stream_read_error(&a.upstream.name, &e)),
        };
        match step {
            Step::Next => {}
            Step::ClientGone => {
                answer.client_left();
                after_client_left(a, answer, &mut events, &mut watch);
                return;
            }
            Step::Stop(failure) => break failure,
        }
    };
    answer.set_usage(watch.usage());
    // The stream ends: events held while a credential might be arriving go out, before anything that
    // closes the stream.
    redactor.release();
    if let Step::ClientGone = release(a, &mut redactor) {
        answer.client_left();
        return;
    }
    if let Some(uses) = watch.hosted_uses().filter(|_| !a.p.asked.hosted.is_empty()) {
        answer.ran(Ran::Reported(uses));
    }
    if let Some(e) = watch.upstream_error() {
        answer.ended_with(e);
    }
    if !watch.done() {
        end_broken(a, answer, &mut watch, failure);
    } else if failure.is_none() {
        answer.keep(kept.and_then(FromRelay::finish).map(Box::new));
    }
    if a.ex.response().finish().is_err() {
        answer.client_left();
    }
}

/// The client left mid-stream: the upstream's stream is read on, nothing written, until it reports its
/// usage and ends (or the drain time the watchdog allows, `client_left_grace_secs`, passes, or it
/// goes past the output limit), so what the upstream did (its hidden reasoning too) is billed. A stream that
/// reported no usage is billed the reserved output, not the text the client saw.
fn after_client_left(
    a: &mut Attempt,
    answer: &mut Answer,
    events: &mut crate::protocol::sse::SseReader<impl std::io::BufRead>,
    watch: &mut StreamObserver,
) {
    let limit = answer.output_limit();
    while !watch.done() {
        match events.next_event() {
            Ok(Some(ev)) => {
                watch.observe(&ev);
                let (reported, produced) = watch.output_so_far();
                if limits::beyond(limit, reported, produced) {
                    watch.cut();
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let reported = watch.reported_whole();
    answer.set_usage(complete::after_client_left(
        a.p,
        limit,
        watch.usage(),
        reported,
    ));
}

enum Step {
    Next,
    ClientGone,
    /// The relay stops (the output limit was passed: the failure to end the stream with).
    Stop(Option<ApiError>),
}

/// An upstream event on its way to the client.
struct Relayed {
    ev: SseEvent,
    /// Passed on at all (a hidden usage chunk is not).
    relay: bool,
    /// The stream had completed with it (strict ledger: what follows waits for the record).
    closing: bool,
    /// The upstream's error event: an error text, scrubbed like one.
    error: bool,
}

/// Looks at one upstream event and passes it on as it came, unless it may carry an upstream credential
/// (`secrets::Redactor`: held while one may be arriving across events, rewritten when one came).
fn pass_on(
    a: &mut Attempt,
    limit: Option<u64>,
    watch: &mut StreamObserver,
    redactor: &mut Redactor<Relayed>,
    ev: SseEvent,
) -> Step {
    let relay = watch.observe(&ev);
    if watch.produced_anything() {
        a.trace.mark_first_token();
    }
    let (reported, produced) = watch.output_so_far();
    if limits::beyond(limit, reported, produced) {
        watch.cut();
        let name = &a.upstream.name;
        return Step::Stop(Some(ApiError::output_limit_exceeded(
            name,
            limit.unwrap_or(0),
        )));
    }
    let item = Relayed {
        ev,
        relay,
        closing: watch.done(),
        error: watch.last_was_error(),
    };
    if redactor.read(watch.added_text()) {
        return send(a, redactor, item, &[]);
    }
    redactor.hold(item);
    release(a, redactor)
}

/// Sends the events the redactor lets go.
fn release(a: &mut Attempt, redactor: &mut Redactor<Relayed>) -> Step {
    while let Some((item, edits)) = redactor.ready() {
        if let Step::ClientGone = send(a, redactor, item, &edits) {
            return Step::ClientGone;
        }
    }
    Step::Next
}

/// Writes one event: byte for byte, unless a credential is in it (its text rewritten by `edits`, or found
/// whole by `Redactor::redact`); an error event is scrubbed like every error text.
fn send(a: &mut Attempt, redactor: &Redactor<Relayed>, item: Relayed, edits: &[TextEdit]) -> Step {
    let w = a.ex.response();
    if item.closing && a.trace.hold_tail {
        // Strict ledger: the closing events wait for the record to be synced.
        w.hold_rest();
    }
    if !item.relay {
        return Step::Next;
    }
    let rewritten = (!edits.is_empty())
        .then(|| observe::redact_event(a.trace.protocol, &item.ev, edits))
        .flatten();
    let framed = match &rewritten {
        Some(bytes) => Cow::Borrowed(bytes.as_slice()),
        None => item.ev.framed(),
    };
    let clean = if item.error {
        match secrets::scrub(&String::from_utf8_lossy(&framed)) {
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
            Cow::Borrowed(_) => framed,
        }
    } else {
        match redactor.redact(&framed) {
            Cow::Owned(b) => Cow::Owned(b),
            Cow::Borrowed(_) => framed,
        }
    };
    if w.write_chunk(&clean).is_err() {
        return Step::ClientGone;
    }
    Step::Next
}

/// Ends a stream that broke (or was cut) with the protocol's in-stream error.
fn end_broken(
    a: &mut Attempt,
    answer: &mut Answer,
    watch: &mut StreamObserver,
    failure: Option<ApiError>,
) {
    let err = failure.unwrap_or_else(|| {
        ApiError::bad_gateway(format!(
            "upstream `{}` ended the stream before it was complete",
            a.upstream.name
        ))
    });
    log::warn!("{}: {}", a.trace.request_id, err.message());
    let mut buf = Vec::new();
    watch.error_event(&err, &a.trace.request_id, &mut buf);
    answer.ended_with(err);
    if a.ex.response().write_chunk(&buf).is_err() {
        answer.client_left();
    }
}
