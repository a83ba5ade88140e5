//! Answers from the built-in mock model, in the client's protocol, streamed or not.

use serde_json::Value;

use super::events::EventWriter;
use super::generate::{chat_wants_usage, response_id, Outcome};
use super::respond::{self, Trace};
use super::Gateway;
use crate::config::{Model, Upstream};
use crate::http::Exchange;
use crate::protocol::canon::StreamEvent;
use crate::protocol::ApiError;
use crate::upstream::mock;
use crate::util::unix_now;

#[allow(clippy::too_many_arguments)]
pub fn serve(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    upstream: &Upstream,
    model: &Model,
    body: &Value,
    stream: bool,
) -> Result<(), ApiError> {
    let protocol = trace.protocol;
    let req = protocol.decode_request(body)?;
    out.upstream_called = true;
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
    let encoder = protocol.stream_encoder(&req, chat_wants_usage(body));
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
