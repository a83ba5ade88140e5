//! An upstream's complete (not streamed) answer in canonical form: decoded in its protocol, usage estimated
//! where it reported none, with the gateway's id and the model's public name; and, for a client that asked
//! for a stream, sent as a stream of the client's protocol (one documented behaviour on every path:
//! translation and passthrough alike).

use serde_json::Value;

use super::attempt::Attempt;
use super::events::EventWriter;
use super::outcome::Delivered;
use crate::protocol::canon::{Request, Response, StreamEvent, Usage};
use crate::protocol::egress::events_from_response;
use crate::protocol::{estimate, ApiError, EgressOptions, Protocol};
use crate::util::unix_now;

/// The options a canonical request is sent to (and its answer read from) an upstream of another protocol
/// with.
pub(super) fn egress_options(a: &Attempt, stream: bool) -> EgressOptions {
    EgressOptions {
        model: a.p.upstream_model.clone(),
        stream,
        default_max_tokens: a.p.model.max_output_tokens,
        max_completion_tokens_field: a.upstream.max_completion_tokens,
        structured_via_tool: a.p.model.structured_via_tool,
    }
}

/// Decodes an upstream's complete answer `v` in `target`'s protocol into the canonical answer with the
/// gateway's own id and the model's public name; usage the upstream did not report is estimated (the
/// `bool`).
pub(super) fn decode(
    a: &Attempt,
    v: &Value,
    target: Protocol,
    opts: &EgressOptions,
    req: &Request,
) -> Result<(Response, bool), ApiError> {
    let mut resp = target.upstream.decode_response(v, opts)?;
    let estimated = estimate::complete_usage(
        &mut resp,
        estimate::input_from_request(req, a.p.model.image_tokens),
    );
    resp.id = a.trace.protocol.new_response_id();
    resp.model = a.p.requested.clone();
    if resp.created == 0 {
        resp.created = unix_now();
    }
    Ok((resp, estimated))
}

/// An upstream that answers a streaming request with one complete JSON answer (in `target`'s protocol) is
/// relayed to the client as a stream of its own protocol. Returns the answer's usage (and whether it is
/// estimated), and what was delivered.
pub(super) fn as_stream(
    a: &mut Attempt,
    v: &Value,
    target: Protocol,
) -> Result<((crate::protocol::canon::Usage, bool), Delivered), ApiError> {
    let client = a.trace.protocol;
    let req = a.p.canonical()?;
    let opts = egress_options(a, true);
    let (resp, estimated) = decode(a, v, target, &opts, &req)?;
    let usage = (resp.usage, estimated);
    log::debug!(
        "{}: upstream `{}` answered a streaming request with one JSON answer; sent as a stream",
        a.trace.request_id,
        a.upstream.name
    );
    let encoder = client
        .reply
        .stream_encoder(&req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: resp.id.clone(),
        model: resp.model.clone(),
        created: resp.created,
        input_tokens: resp.usage.input_tokens,
    };
    let (w, trace) = (a.ex.response(), a.trace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &[], a.watch) else {
        return Ok((usage, closed(0)));
    };
    for e in events_from_response(&resp) {
        if writer.emit(&e).is_err() {
            return Ok((usage, closed(200)));
        }
    }
    let gone = writer.finish().is_err();
    let delivered = Delivered {
        status: 200,
        client_closed: gone,
        kept: a.keep.then(|| Box::new(resp)),
        ..Delivered::default()
    };
    Ok((usage, delivered))
}

/// The client went away (`status`: after the stream began).
fn closed(status: u16) -> Delivered {
    Delivered {
        status,
        client_closed: true,
        ..Delivered::default()
    }
}

/// The usage a stream whose client left is billed: what the upstream reported for the whole stream, read
/// after the client left (`reported`); else the reserved output (`limit`, the most output this attempt may
/// be billed, or the reservation's), not the text the client saw: the upstream may have reasoned at length
/// before it, or gone on after. `seen`: the usage by the stream rule and whether it is an estimate.
pub(super) fn after_client_left(
    p: &super::prepared::Prepared,
    limit: Option<u64>,
    seen: (Usage, bool),
    reported: Option<Usage>,
) -> (Usage, bool) {
    if let Some(u) = reported {
        return (u, false);
    }
    let (mut usage, _) = seen;
    let worst = limit.unwrap_or_else(|| p.reserved_output());
    usage.output_tokens = usage.output_tokens.max(worst);
    if usage.input_tokens == 0 {
        usage.input_tokens = p.input_estimate();
    }
    (usage, true)
}
