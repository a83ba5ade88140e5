//! Cross-protocol requests: the client's body decoded into the canonical request, encoded for the
//! upstream's protocol, and the answer (JSON or stream) decoded back and re-encoded in the client's protocol.

use super::attempt::Attempt;
use super::call;
use super::complete::{self, egress_options};
use super::events::EventWriter;
use super::outcome::{Answer, Delivered};
use crate::gateway::respond;
use crate::protocol::canon::{Request, StreamEvent};
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

pub(super) fn serve(a: &mut Attempt) -> Answer {
    let mut answer = Answer::for_upstream(&a.upstream.name);
    match relay(a, &mut answer) {
        Ok(()) => answer,
        Err(e) => answer.failed(e),
    }
}

/// Sends the translated request and relays the answer; `Err`: the client has had no answer yet.
fn relay(a: &mut Attempt, answer: &mut Answer) -> Result<(), ApiError> {
    let t = translate_request(a)?;
    answer.limit_sent(
        t.req.max_tokens.or(t
            .target
            .limit
            .required
            .then_some(a.p.model.max_output_tokens)),
    );
    let bytes = serde_json::to_vec(&t.target.upstream.encode_request(&t.req, &t.opts)?)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let sent = call::send(a, &bytes, a.p.stream, None);
    answer.reached(sent.reached);
    let reply = sent.reply?;
    if a.p.stream && reply.is_event_stream() {
        let delivered = relay_stream(a, &t, reply, answer.output_limit());
        answer.delivered(delivered);
        return Ok(());
    }
    // A complete JSON answer (also when a stream was asked for and the upstream answered in one piece).
    let buf = a.ex.response().take_buffer();
    let (v, mut buf) = call::read_json(a, reply, buf).map_err(|u| {
        answer.refused_by_upstream(u.refused);
        u.error
    })?;
    if a.p.stream {
        let (usage, delivered) = complete::as_stream(a, &v, t.target)?;
        answer.set_usage(usage);
        answer.delivered(delivered);
        return Ok(());
    }
    let (resp, estimated) = complete::decode(a, &v, t.target, &t.opts, &t.req)?;
    answer.set_usage((resp.usage, estimated));
    if a.keep {
        answer.keep(Some(Box::new(resp.clone())));
    }
    let encoded = a.trace.protocol.reply.encode_response(&resp, &t.req);
    // Written into the buffer the upstream's answer was read into, and sent from it.
    serde_json::to_writer(&mut buf, &encoded).map_err(|e| ApiError::internal(e.to_string()))?;
    let extra = dropped_header(&t.dropped);
    respond::json_owned(a.ex.response(), a.trace, 200, buf, &extra);
    answer.answered(200);
    Ok(())
}

/// Decodes the client's body and fits it to the model: no more output than it is configured for (and, for
/// a key with a spending limit, always a limit: the reserved one is never smaller), and reasoning effort
/// only where it reasons (translated requests carry what the client asked of another vendor's model).
fn translate_request(a: &Attempt) -> Result<Translated, ApiError> {
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
        req.drop_reasoning();
    }
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

fn dropped_header(dropped: &str) -> Vec<(&str, &str)> {
    if dropped.is_empty() {
        Vec::new()
    } else {
        vec![(super::hosted::DROPPED_HEADER, dropped)]
    }
}

/// Decodes the upstream's stream and writes it in the client's protocol, cutting it at the output limit
/// (`limit`) and ending a broken one with the in-stream error.
fn relay_stream(a: &mut Attempt, t: &Translated, reply: Reply, limit: Option<u64>) -> Delivered {
    let client = a.trace.protocol;
    let encoder = client
        .reply
        .stream_encoder(&t.req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: client.new_response_id(),
        model: a.p.requested.clone(),
        created: unix_now(),
        input_tokens: estimate::input_from_request(&t.req, a.p.model.image_tokens),
    };
    let extra = dropped_header(&t.dropped);
    let (w, trace) = (a.ex.response(), a.trace);
    let name = &a.upstream.name;
    let mut events = reply.into_sse();
    let mut decoder = t.target.upstream.stream_decoder(&t.opts);
    // What the upstream does is billed however the client leaves: from here its stream is read on to the
    // usage report for a while after the client left.
    crate::upstream::tap::drain_after_client_leaves(a.p.config.client_left_grace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &extra, a.watch) else {
        return gone_at_once(a.p, limit, &mut events, &mut *decoder);
    };
    if a.keep {
        writer.keep();
    }
    let mut decoded = Vec::new();
    let failure = 'read: loop {
        let waiting = std::time::Instant::now();
        let next = events.next_event();
        trace.add_upstream_wait(waiting.elapsed());
        let ev = match next {
            Ok(Some(ev)) => ev,
            Ok(None) => break Some(ended_early(name)),
            Err(_) if trace.cut_by_shutdown() => break Some(ApiError::shutting_down()),
            Err(_) if trace.client_gone() => {
                let drained = Drained::after(&writer, &[]);
                let gone = writer.gone();
                return after_client_left(
                    a.p,
                    limit,
                    gone,
                    &mut events,
                    &mut *decoder,
                    false,
                    drained,
                );
            }
            Err(e) => break Some(uphttp::stream_read_error(name, &e)),
        };
        decoded.clear();
        let done = decoder.feed(&ev, &mut decoded);
        for (i, e) in decoded.iter().enumerate() {
            if writer.emit(e).is_err() {
                // What this event batch still says (a usage after the finish) counts too.
                let drained = Drained::after(&writer, &decoded[i + 1..]);
                let gone = writer.gone();
                return after_client_left(
                    a.p,
                    limit,
                    gone,
                    &mut events,
                    &mut *decoder,
                    done,
                    drained,
                );
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
    writer.end()
}

/// The client left before its stream's head was written: the upstream's stream is read on all the same.
fn gone_at_once(
    p: &super::prepared::Prepared,
    limit: Option<u64>,
    events: &mut crate::protocol::sse::SseReader<impl std::io::BufRead>,
    decoder: &mut dyn crate::protocol::StreamDecoder,
) -> Delivered {
    let drained = Drained {
        usage: None,
        failed: false,
    };
    let gone = Delivered {
        client_closed: true,
        status: 200,
        ..Delivered::default()
    };
    after_client_left(p, limit, gone, events, decoder, false, drained)
}

/// What an upstream stream said by the time its client left and after.
struct Drained {
    usage: Option<crate::protocol::canon::Usage>,
    failed: bool,
}

impl Drained {
    /// What `writer` had been told, and the events of the same batch it was not.
    fn after(writer: &EventWriter, rest: &[StreamEvent]) -> Drained {
        let mut d = Drained {
            usage: writer.reported(),
            failed: false,
        };
        d.take(rest);
        d
    }

    fn take(&mut self, events: &[StreamEvent]) {
        for e in events {
            match e {
                StreamEvent::Usage(u) => self.usage = Some(*u),
                StreamEvent::Error(_) => self.failed = true,
                _ => {}
            }
        }
    }
}

/// The client left mid-stream: the upstream's stream is read on, decoded and nothing written, until it ends
/// (or the drain time the watchdog allows passes, `client_left_grace_secs`), so what the upstream
/// did (its hidden reasoning too) is billed as it reports it; a stream that reports no usage for the whole
/// of it is billed the reserved output, not the text the client saw. `done`: the stream had already ended.
fn after_client_left(
    p: &super::prepared::Prepared,
    limit: Option<u64>,
    mut gone: Delivered,
    events: &mut crate::protocol::sse::SseReader<impl std::io::BufRead>,
    decoder: &mut dyn crate::protocol::StreamDecoder,
    mut done: bool,
    mut drained: Drained,
) -> Delivered {
    let mut decoded = Vec::new();
    while !done {
        match events.next_event() {
            Ok(Some(ev)) => {
                decoded.clear();
                done = decoder.feed(&ev, &mut decoded);
                drained.take(&decoded);
                let over = drained
                    .usage
                    .is_some_and(|u| limit.is_some_and(|l| u.output_tokens > l));
                if over {
                    drained.failed = true;
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let reported = drained.usage.filter(|_| done && !drained.failed);
    let seen = gone.usage.unwrap_or_default();
    gone.usage = Some(super::complete::after_client_left(p, limit, seen, reported));
    gone
}

fn ended_early(upstream: &str) -> ApiError {
    ApiError::bad_gateway(format!(
        "upstream `{upstream}` ended the stream before it was complete"
    ))
}
