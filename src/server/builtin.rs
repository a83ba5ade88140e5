//! Answers from the built-in mock model (`upstream::mock`), in the client's protocol, streamed or not.

use super::attempt::Attempt;
use super::events::EventWriter;
use super::respond;
use crate::protocol::canon::StreamEvent;
use crate::protocol::ApiError;
use crate::upstream::mock;
use crate::util::unix_now;

pub fn serve(a: &mut Attempt) -> Result<(), ApiError> {
    let protocol = a.trace.protocol;
    let mut req = a.p.canonical()?;
    if req.max_tokens.is_none() && a.p.must_limit() {
        req.max_tokens = Some(a.p.limit_per_choice());
    }
    a.answer.output_limit = req.max_tokens;
    a.answer.called = true;
    a.answer.taken = true;
    let mut reply = mock::reply(&req, &a.p.requested);
    reply.response.id = protocol.new_response_id();
    a.answer.usage = Some(reply.response.usage);
    if !a.p.stream {
        let v = protocol.encode_response(&reply.response, &req);
        let bytes = serde_json::to_vec(&v).map_err(|e| ApiError::internal(e.to_string()))?;
        respond::json(a.ex.response(), a.trace, 200, &bytes, &[]);
        a.answer.status = 200;
        return Ok(());
    }
    let encoder = protocol.stream_encoder(&req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: reply.response.id.clone(),
        model: a.p.requested.clone(),
        created: unix_now(),
        input_tokens: reply.response.usage.input_tokens,
    };
    let (w, trace) = (a.ex.response(), a.trace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &[], a.watch) else {
        a.answer.client_closed = true;
        return Ok(());
    };
    a.answer.status = 200;
    let delay = a.upstream.mock_delay;
    for ev in &reply.events {
        if trace.cut_by_shutdown() {
            let _ = writer.emit(&StreamEvent::Error(ApiError::shutting_down()));
            break;
        }
        if !delay.is_zero() && !matches!(ev, StreamEvent::Finish(_) | StreamEvent::Usage(_)) {
            std::thread::sleep(delay);
            trace.add_upstream_wait(delay);
        }
        if writer.emit(ev).is_err() {
            a.answer.client_closed = true;
            a.answer.set_usage(writer.usage());
            return Ok(());
        }
    }
    a.answer.error = writer.error.clone();
    match writer.finish() {
        Ok(u) => a.answer.set_usage(u),
        Err(_) => a.answer.client_closed = true,
    }
    Ok(())
}
