//! The generation endpoints' pipeline: authenticate, parse, validate, authorize, pick the upstream, answer
//! (mock, passthrough or, later, translation), and report the outcome.

use std::time::Instant;

use serde_json::Value;

use super::accounting;
use super::relay;
use super::respond::{self, Trace};
use super::Gateway;
use crate::access;
use crate::config::{Config, Model, UpstreamKind};
use crate::http::Exchange;
use crate::protocol::canon::Usage;
use crate::protocol::{fields, messages, ApiError, Protocol};
use crate::util::new_id;

/// What happened to one request, for the log line and the usage ledger.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// The request got as far as calling an upstream (so it gets a usage record).
    pub upstream_called: bool,
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
    let config = gw.config();
    // The end of the answer waits until the usage record is queued (synced, in strict mode): a client that
    // has its answer finds its record in the admin API.
    ex.response().hold_end();
    let mut trace = Trace::new(ex, protocol);
    let mut out = Outcome::default();
    let mut reservation = None;
    let result = prepare(gw, &config, ex, &trace, &mut out).and_then(|prepared| {
        let admitted = accounting::admit(gw, &config, &prepared);
        let (res, info) = match admitted {
            Ok(pair) => pair,
            Err((e, info)) => {
                let counter = if e.code.as_deref() == Some("insufficient_quota") {
                    &gw.metrics.quota_exhausted
                } else {
                    &gw.metrics.rate_limited
                };
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                trace.extra = info.headers;
                return Err(e);
            }
        };
        trace.extra = info.headers;
        reservation = Some(res);
        let watch = gw.watchdog.watch(ex.response().socket());
        let mut prepared = prepared;
        let result = dispatch(gw, &config, ex, &trace, &mut out, &mut prepared);
        if watch.cancelled() {
            // The client went away; whatever the upstream call ended with, nobody is listening.
            out.client_closed = true;
            return Ok(());
        }
        result
    });
    if let Err(e) = result {
        if !ex.response().is_started() {
            respond::error(ex.response(), &trace, &e);
        }
        out.status = e.status;
        out.error = Some(e.message.clone());
    }
    let cost = accounting::record(gw, &config, ex, &trace, &out, reservation);
    let _ = ex.response().release_held();
    observe(gw, &trace, &out, cost);
    log_outcome(ex, &trace, &out);
}

/// Feeds the metrics with a finished request.
fn observe(gw: &Gateway, trace: &Trace, out: &Outcome, cost: f64) {
    if trace.streaming.get() {
        super::metrics::ACTIVE_STREAMS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    let status = if out.client_closed {
        "client_closed".to_string()
    } else {
        out.status.to_string()
    };
    let usage = out.usage.unwrap_or_default();
    let upstream_failed = out.upstream_called
        && !out.client_closed
        && (out.status >= 500 || (out.status == 200 && out.error.is_some()));
    gw.metrics.observe(&super::metrics::Observation {
        protocol: trace.protocol.name(),
        model: out.model.as_deref().unwrap_or("-"),
        status: &status,
        upstream: out.upstream.as_deref(),
        upstream_failed,
        total: trace.received.elapsed(),
        overhead: trace.overhead(),
        first_token: trace.first_token.get(),
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        cost,
    });
}

fn log_outcome(ex: &Exchange, trace: &Trace, out: &Outcome) {
    let ms = ex.received.elapsed().as_millis() as u64;
    let usage = out.usage.unwrap_or_default();
    let status = if out.client_closed {
        "client_closed".to_string()
    } else {
        out.status.to_string()
    };
    let level = if out.error.is_some() && out.status >= 500 {
        log::Level::Warn
    } else {
        log::Level::Info
    };
    if crate::logging::json() {
        let v = serde_json::json!({
            "ts": crate::util::rfc3339_millis(crate::util::unix_millis()),
            "level": level.as_str(),
            "target": crate::logging::REQUEST_TARGET,
            "request_id": trace.request_id,
            "client_request_id": trace.client_request_id,
            "key": out.key,
            "group": out.group,
            "model": out.model,
            "protocol": trace.protocol.name(),
            "upstream": out.upstream,
            "stream": out.stream,
            "status": status,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "estimated": out.estimated,
            "latency_ms": ms,
            "overhead_ms": trace.overhead().as_secs_f64() * 1000.0,
            "error": out.error,
        });
        log::log!(target: crate::logging::REQUEST_TARGET, level, "{v}");
        return;
    }
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
        Some(e) => log::log!(target: crate::logging::REQUEST_TARGET, level, "{line} error={e:?}"),
        None => log::log!(target: crate::logging::REQUEST_TARGET, level, "{line}"),
    }
}

/// A request that passed authentication and validation, and the model it names.
pub struct Prepared<'a> {
    pub identity: std::sync::Arc<access::Identity>,
    pub body: Value,
    /// Size of the raw body, for the admission estimate of input tokens.
    pub body_len: usize,
    pub stream: bool,
    pub model: &'a Model,
}

fn prepare<'a>(
    gw: &Gateway,
    config: &'a Config,
    ex: &Exchange,
    trace: &Trace,
    out: &mut Outcome,
) -> Result<Prepared<'a>, ApiError> {
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
    let model = config
        .model(&model_name)
        .ok_or_else(|| match config.model_any(&model_name) {
            Some(_) => ApiError::not_found(format!(
                "The model `{model_name}` is disabled by the operator for now."
            ))
            .with_param("model")
            .with_code("model_not_found"),
            None => ApiError::model_not_found(&model_name),
        })?;
    if !access::group_allows(config, &identity.group, &model.name) {
        return Err(access::forbidden_model(&model.name, &identity.group));
    }
    Ok(Prepared {
        identity,
        body,
        body_len: ex.request.body.len(),
        stream,
        model,
    })
}

/// Sends the request to the model's upstreams in order, moving on only before the first byte reached the
/// client and only for failures another upstream may not have.
fn dispatch(
    gw: &Gateway,
    config: &Config,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    p: &mut Prepared,
) -> Result<(), ApiError> {
    let protocol = trace.protocol;
    let (model, stream) = (p.model, p.stream);
    let client_wants_usage = chat_wants_usage(&p.body);
    // Upstreams whose breaker is open are skipped; when all are, the client hears when to come back.
    let mut candidates = Vec::new();
    let mut soonest: Option<std::time::Duration> = None;
    for name in &model.upstreams {
        let Some(upstream) = config.upstream(name) else {
            return Err(ApiError::internal(format!(
                "model `{}` names an unknown upstream",
                model.name
            )));
        };
        match gw.breakers.admit(&upstream.name) {
            crate::upstream::breaker::Admit::Yes => candidates.push(upstream),
            crate::upstream::breaker::Admit::No(wait) => {
                log::debug!(
                    "{}: skipping upstream `{}` (breaker open)",
                    trace.request_id,
                    upstream.name
                );
                soonest = Some(soonest.map_or(wait, |s| s.min(wait)));
            }
        }
    }
    if candidates.is_empty() {
        let secs = soonest.map_or(1, |w| w.as_secs().max(1));
        return Err(ApiError::unavailable(format!(
            "every upstream of model `{}` failed repeatedly and is cooling down; retry in {secs} s",
            model.name
        ))
        .with_retry_after(secs)
        .with_code("upstream_unavailable"));
    }
    let count = candidates.len();
    for (i, upstream) in candidates.into_iter().enumerate() {
        out.upstream = Some(upstream.name.clone());
        out.error = None;
        let started = Instant::now();
        let attempt = match upstream.kind {
            UpstreamKind::Mock => {
                super::mock::serve(gw, ex, trace, out, upstream, model, &p.body, stream)
            }
            kind if kind.protocol() == Some(protocol) => relay::passthrough(
                gw,
                ex,
                trace,
                out,
                upstream,
                model,
                &mut p.body,
                stream,
                client_wants_usage,
            ),
            _ => super::translate::translate(gw, ex, trace, out, upstream, model, &p.body, stream),
        };
        // The breaker hears about the upstream's health: unreachable, timeouts, 5xx and broken streams.
        let failed = match &attempt {
            Err(e) => out.upstream_called && e.status >= 500,
            Ok(()) => out.error.is_some() && !out.client_closed,
        };
        if failed {
            gw.breakers.failure(
                &upstream.name,
                upstream.breaker_failures,
                upstream.breaker_cooldown,
            );
        } else if attempt.is_ok() && !out.client_closed {
            gw.breakers.success(&upstream.name);
        } else {
            gw.breakers.inconclusive(&upstream.name);
        }
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
