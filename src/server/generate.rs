//! The generation endpoints' pipeline: authenticate, parse, validate, authorize, pick the upstream, answer
//! (mock, passthrough or, later, translation), and report the outcome.

use std::time::Instant;

use serde_json::Value;

use super::events::EventWriter;
use super::relay;
use super::respond::{self, Trace};
use super::Gateway;
use crate::access;
use crate::config::{Model, Upstream, UpstreamKind};
use crate::http::Exchange;
use crate::protocol::canon::{StreamEvent, Usage};
use crate::protocol::{fields, messages, ApiError, Protocol};
use crate::upstream::mock;
use crate::util::{new_id, unix_now};

/// What happened to one request, for the log line (and the usage ledger).
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub key: Option<String>,
    pub group: Option<String>,
    pub model: Option<String>,
    pub upstream: Option<String>,
    pub stream: bool,
    pub status: u16,
    pub usage: Option<Usage>,
    pub error: Option<String>,
    pub client_closed: bool,
    /// Usage was estimated from the text because the upstream reported none.
    pub estimated: bool,
}

impl Outcome {
    pub fn set_usage(&mut self, (usage, estimated): (Usage, bool)) {
        self.usage = Some(usage);
        self.estimated = estimated;
    }
}

/// Handles one POST to a generation endpoint.
pub fn handle(gw: &Gateway, ex: &mut Exchange, protocol: Protocol) {
    let trace = Trace::new(ex, protocol);
    let mut out = Outcome::default();
    if let Err(e) = run(gw, ex, &trace, &mut out) {
        if !ex.response().is_started() {
            respond::error(ex.response(), &trace, &e);
        }
        out.status = e.status;
        out.error = Some(e.message.clone());
    }
    log_outcome(ex, &trace, &out);
}

fn log_outcome(ex: &Exchange, trace: &Trace, out: &Outcome) {
    let ms = ex.received.elapsed().as_millis();
    let usage = out.usage.unwrap_or_default();
    let status = if out.client_closed {
        "client_closed".to_string()
    } else {
        out.status.to_string()
    };
    let line = format!(
        "{} client_request_id={} key={} group={} model={} protocol={} upstream={} stream={} status={} in={} out={}{} ms={}",
        trace.request_id,
        trace.client_request_id.as_deref().unwrap_or("-"),
        out.key.as_deref().unwrap_or("-"),
        out.group.as_deref().unwrap_or("-"),
        out.model.as_deref().unwrap_or("-"),
        trace.protocol.name(),
        out.upstream.as_deref().unwrap_or("-"),
        out.stream,
        status,
        usage.input_tokens,
        usage.output_tokens,
        if out.estimated { " estimated=true" } else { "" },
        ms,
    );
    match &out.error {
        Some(e) if out.status >= 500 => log::warn!("{line} error={e:?}"),
        Some(e) => log::info!("{line} error={e:?}"),
        None => log::info!("{line}"),
    }
}

fn run(gw: &Gateway, ex: &mut Exchange, trace: &Trace, out: &mut Outcome) -> Result<(), ApiError> {
    let protocol = trace.protocol;
    let identity = access::authenticate(&ex.request, protocol, &gw.keys)?;
    out.key = Some(identity.name.clone());
    out.group = Some(identity.group.clone());
    if protocol == Protocol::Messages && ex.request.header("anthropic-version").is_none() {
        return Err(ApiError::invalid_param(
            "anthropic-version",
            "anthropic-version: header is required (for example `anthropic-version: 2023-06-01`).",
        ));
    }
    let body = parse_body(&ex.request.body)?;
    let stream = validate_envelope(protocol, &body)?;
    out.stream = stream;
    let model_name = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    out.model = Some(model_name.clone());
    let model = gw
        .config
        .model(&model_name)
        .ok_or_else(|| ApiError::model_not_found(&model_name))?;
    if !access::group_allows(&gw.config, &identity.group, &model.name) {
        return Err(access::forbidden_model(&model.name, &identity.group));
    }

    let count = model.upstreams.len();
    for (i, name) in model.upstreams.iter().enumerate() {
        let Some(upstream) = gw.config.upstream(name) else {
            return Err(ApiError::internal(format!(
                "model `{}` names an unknown upstream",
                model.name
            )));
        };
        out.upstream = Some(upstream.name.clone());
        let started = Instant::now();
        let attempt = match upstream.kind {
            UpstreamKind::Mock => serve_mock(gw, ex, trace, out, upstream, model, &body, stream),
            kind if kind.protocol() == Some(protocol) => {
                relay::passthrough(gw, ex, trace, out, upstream, model, body.clone(), stream)
            }
            _ => super::translate::translate(gw, ex, trace, out, upstream, model, &body, stream),
        };
        match attempt {
            Ok(()) => return Ok(()),
            Err(e) if i + 1 < count && !ex.response().is_started() && retryable(&e) => {
                log::warn!(
                    "{}: upstream `{}` failed after {} ms ({}); trying the next one",
                    trace.request_id,
                    upstream.name,
                    started.elapsed().as_millis(),
                    e
                );
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::internal(format!(
        "model `{}` has no upstream",
        model.name
    )))
}

/// Failures worth trying the next upstream for: unreachable, timed out, overloaded, 5xx, 429.
fn retryable(e: &ApiError) -> bool {
    e.status == 429 || e.status >= 500
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}.")))
}

/// Checks the fields every request of the protocol needs, without decoding the whole body. Returns `stream`.
fn validate_envelope(protocol: Protocol, body: &Value) -> Result<bool, ApiError> {
    let o = fields::object(body, "body")?;
    fields::req_str(o, "model", "")?;
    let stream = fields::stream_flag(o)?;
    match protocol {
        Protocol::Chat => crate::protocol::chat::validate(body)?,
        Protocol::Responses => crate::protocol::responses::validate(body)?,
        Protocol::Messages => messages::validate(body)?,
    }
    Ok(stream)
}

/// A fresh id for an answer in the client's protocol.
pub fn response_id(protocol: Protocol) -> String {
    match protocol {
        Protocol::Chat => new_id("chatcmpl-"),
        Protocol::Responses => new_id("resp_"),
        Protocol::Messages => new_id("msg_"),
    }
}

/// Whether a Chat client asked for the usage chunk.
pub fn chat_wants_usage(body: &Value) -> bool {
    body.pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true)
}

#[allow(clippy::too_many_arguments)]
fn serve_mock(
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
        EventWriter::start(ex.response(), trace, encoder, start, &[], &gw.keepalive)
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
        }
        if writer.emit(ev).is_err() {
            out.client_closed = true;
            return Ok(());
        }
    }
    if writer.finish().is_err() {
        out.client_closed = true;
    }
    Ok(())
}
