//! Answers from the built-in mock model (`upstream::mock`), in the client's protocol, streamed or not.

use super::attempt::Attempt;
use super::events::EventWriter;
use super::outcome::{Answer, Delivered, Reached};
use crate::gateway::respond;
use crate::protocol::canon::StreamEvent;
use crate::protocol::ApiError;
use crate::upstream::mock;
use crate::util::unix_now;

pub(super) fn serve(a: &mut Attempt) -> Answer {
    let answer = Answer::for_upstream(&a.upstream.name);
    let protocol = a.trace.protocol;
    let mut req = match a.p.canonical() {
        Ok(r) => r,
        Err(e) => return answer.failed(e),
    };
    if req.max_tokens.is_none() && a.p.must_limit() {
        req.max_tokens = Some(a.p.limit_per_choice());
    }
    let mut answer = answer;
    answer.limit_sent(req.max_tokens);
    answer.reached(Reached {
        called: true,
        taken: true,
    });
    let mut reply = mock::reply(&req, &a.p.requested);
    reply.response.id = protocol.new_response_id();
    answer.reported(Some(reply.response.usage));
    if a.keep {
        answer.keep(Some(Box::new(reply.response.clone())));
    }
    if !a.p.stream {
        let v = protocol.reply.encode_response(&reply.response, &req);
        return match serde_json::to_vec(&v) {
            Ok(bytes) => {
                respond::json(a.ex.response(), a.trace, 200, &bytes, &[]);
                answer.answered(200);
                answer
            }
            Err(e) => answer.failed(ApiError::internal(e.to_string())),
        };
    }
    answer.delivered(stream(a, &req, &reply));
    answer
}

/// Streams the mock's events (at its delay between deltas), cut by the shutdown deadline.
fn stream(
    a: &mut Attempt,
    req: &crate::protocol::canon::Request,
    reply: &mock::MockReply,
) -> Delivered {
    let encoder =
        a.trace
            .protocol
            .reply
            .stream_encoder(req, a.p.wants_stream_usage, &a.trace.request_id);
    let start = StreamEvent::Start {
        id: reply.response.id.clone(),
        model: a.p.requested.clone(),
        created: unix_now(),
        input_tokens: reply.response.usage.input_tokens,
    };
    let (w, trace) = (a.ex.response(), a.trace);
    let Ok(mut writer) = EventWriter::start(w, trace, encoder, start, &[], a.watch) else {
        return Delivered {
            client_closed: true,
            ..Delivered::default()
        };
    };
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
            return writer.gone();
        }
    }
    writer.end()
}
