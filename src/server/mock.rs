//! Answers from the built-in mock model, in the client's protocol, streamed or not.

use super::events::EventWriter;
use super::generate::{chat_wants_usage, response_id, Outcome, Prepared};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::Upstream;
use crate::http::Exchange;
use crate::protocol::canon::StreamEvent;
use crate::protocol::ApiError;
use crate::upstream::mock;
use crate::util::unix_now;

pub fn serve(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    p: &Prepared,
) -> Result<(), ApiError> {
    let protocol = trace.protocol;
    let (model, stream) = (p.model, p.stream);
    let mut req = protocol.decode_request(&p.body)?;
    if req.max_tokens.is_none() && p.must_limit() {
        req.max_tokens = Some(p.reserved_output());
    }
    out.output_limit = req.max_tokens;
    out.upstream_called = true;
    out.upstream_calls += 1;
    let mut reply = mock::reply(&req, &model.name);
    reply.response.id = response_id(protocol);
    out.usage = Some(reply.response.usage);
    if !stream {
        let v = protocol.encode_response(&reply.response, &req);
        let bytes = serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?;
        respond::json(ex.response(), trace, 200, &bytes, &[]);
        out.status = 200;
        return Ok(());
    }
    let encoder = protocol.stream_encoder(&req, chat_wants_usage(&p.body), &trace.request_id);
    let start = StreamEvent::Start {
        id: reply.response.id.clone(),
        model: model.name.clone(),
        created: unix_now(),
        input_tokens: reply.response.usage.input_tokens,
    };
    let Ok(mut writer) =
        EventWriter::start(ex.response(), trace, encoder, start, &[], &gw.watchdog)
    else {
        out.client_closed = true;
        return Ok(());
    };
    out.status = 200;
    for ev in &reply.events {
        if trace.cut_by_shutdown() {
            let _ = writer.emit(&StreamEvent::Error(super::generate::shutdown_error()));
            out.error = Some(super::generate::shutdown_error().message().to_string());
            out.set_usage(writer.usage());
            let _ = writer.finish();
            return Ok(());
        }
        if !upstream.mock_delay.is_zero()
            && !matches!(ev, StreamEvent::Finish(_) | StreamEvent::Usage(_))
        {
            std::thread::sleep(upstream.mock_delay);
            trace.add_upstream_wait(upstream.mock_delay);
        }
        if writer.emit(ev).is_err() {
            out.client_closed = true;
            out.set_usage(writer.usage());
            return Ok(());
        }
    }
    if writer.finish().is_err() {
        out.client_closed = true;
    }
    Ok(())
}
