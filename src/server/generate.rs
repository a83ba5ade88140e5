//! The generation endpoints' pipeline: authenticate, parse, validate, authorize, pick the upstream, answer
//! (mock, passthrough or, later, translation), and report the outcome.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::accounting;
use super::relay;
use super::respond::{self, Trace};
use super::Gateway;
use crate::access;
use crate::config::{Config, Model, Upstream, UpstreamKind};
use crate::http::Exchange;
use crate::protocol::canon::Usage;
use crate::protocol::{account, fields, limits, messages, ApiError, Protocol};
use crate::upstream::breaker::{Admit, Policy, Standing, Verdict};
use crate::util::new_id;

/// What happened to one request, for the log line and the usage ledger.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// The request got as far as calling an upstream (so it gets a usage record).
    pub upstream_called: bool,
    /// Upstream calls made (one per attempt that reached its upstream).
    pub upstream_calls: u32,
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
    /// The output limit sent upstream by the attempt that answered (None: the request carried none). Output
    /// beyond it is never billed.
    pub output_limit: Option<u64>,
    /// The request was cut by the shutdown deadline.
    pub shutdown: bool,
    /// Recorded at no cost (`count_tokens`: metered, not billed).
    pub unbilled: bool,
}

impl Outcome {
    pub fn set_usage(&mut self, (usage, estimated): (Usage, bool)) {
        self.usage = Some(usage);
        self.estimated = estimated;
    }

    /// Forgets what an earlier attempt on another upstream left behind.
    fn start_attempt(&mut self, upstream: &str) {
        self.upstream = Some(upstream.to_string());
        self.status = 0;
        self.usage = None;
        self.error = None;
        self.estimated = false;
        self.output_limit = None;
    }
}

/// Handles one POST to a generation endpoint.
pub fn handle(gw: &Gateway, ex: &mut Exchange, protocol: Protocol) {
    let config = gw.config();
    // The end of the answer waits until the usage record is queued (synced, in strict mode): a client that
    // has its answer finds its record in the admin API.
    ex.response().hold_end();
    let mut trace = Trace::new(ex, protocol);
    trace.hold_tail = config.ledger_strict;
    let mut out = Outcome::default();
    let mut reservation = None;
    let result = prepare(gw, &config, ex, &trace, &mut out).and_then(|prepared| {
        if gw.watchdog.is_shut_down() {
            return Err(shutdown_error());
        }
        if !gw.ledger.accepting() {
            gw.metrics
                .ledger_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(accounting::ledger_unavailable(gw));
        }
        let admitted = accounting::admit(gw, &config, &prepared);
        let (res, info) = match admitted {
            Ok(pair) => pair,
            Err((e, info)) => {
                let counter = if e.origin() == crate::protocol::Origin::Quota {
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
        let _watch = gw.watchdog.watch(ex.response().socket(), trace.cut.clone());
        let mut prepared = prepared;
        let result = dispatch(gw, &config, ex, &trace, &mut out, &mut prepared);
        if trace.client_gone() {
            // The client went away; whatever the upstream call ended with, nobody is listening.
            out.client_closed = true;
            return Ok(());
        }
        result
    });
    if let Err(e) = result {
        let e = if trace.cut_by_shutdown() {
            shutdown_error()
        } else {
            e
        };
        if !ex.response().is_started() {
            respond::error(ex.response(), &trace, &e);
        }
        out.status = e.status();
        out.error = Some(e.message().to_string());
    }
    out.shutdown = trace.cut_by_shutdown();
    let cost = accounting::record(gw, &config, ex, &trace, &mut out, reservation);
    // Metrics and the log line before the answer's last byte: a client that reads `/metrics` right after its
    // answer sees its request counted.
    observe(gw, &config, &trace, &out, cost);
    log_outcome(ex, &trace, &out);
    let _ = ex.response().release_held();
}

/// The error a request cut by the shutdown deadline ends with.
pub fn shutdown_error() -> ApiError {
    ApiError::unavailable(
        "The gateway is shutting down and its grace period for requests in flight has ended; this answer was \
         cut short. Retry the request.",
    )
    .with_code("shutting_down")
}

/// Feeds the metrics with a finished request.
fn observe(gw: &Gateway, config: &Config, trace: &Trace, out: &Outcome, cost: crate::money::Money) {
    if trace.streaming.replace(false) {
        super::metrics::ACTIVE_STREAMS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    let status = status_text(out);
    let usage = out.usage.unwrap_or_default();
    let upstream_failed = out.upstream_called
        && !out.client_closed
        && (out.status >= 500 || (out.status == 200 && out.error.is_some()));
    // Label values come only from configured models, so invented names cannot grow the series.
    let model = match out.model.as_deref() {
        Some(m) if config.model_any(m).is_some() => m,
        Some(_) => "unknown",
        None => "-",
    };
    gw.metrics.observe(&super::metrics::Observation {
        protocol: trace.protocol.name(),
        model,
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

/// The status as logs and metrics show it: the HTTP status, or `client_closed` / `shutdown`.
fn status_text(out: &Outcome) -> String {
    if out.client_closed {
        "client_closed".to_string()
    } else if out.shutdown {
        "shutdown".to_string()
    } else {
        out.status.to_string()
    }
}

fn log_outcome(ex: &Exchange, trace: &Trace, out: &Outcome) {
    let ms = ex.received.elapsed().as_millis() as u64;
    let usage = out.usage.unwrap_or_default();
    let status = status_text(out);
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
    /// The output limit the client asked for, read from its own protocol's field(s) only.
    pub requested_output: Option<u64>,
}

impl Prepared<'_> {
    /// The output limit admission reserves for: the client's, or the model's `max_output_tokens`. No
    /// upstream request of this request asks for more (see [`Prepared::limit_for_upstream`]).
    pub fn reserved_output(&self) -> u64 {
        self.requested_output
            .unwrap_or(self.model.max_output_tokens)
    }

    /// Whether every upstream request must carry an output limit: the key has a finite balance, so the
    /// worst case reserved must be the worst case possible.
    pub fn must_limit(&self) -> bool {
        self.identity.credit.is_some()
    }

    /// The output limit a passthrough request carries upstream: the client's own, or (keys with a finite
    /// balance) the reserved one, added when the client sent none.
    pub fn limit_for_upstream(&self) -> Option<u64> {
        if self.must_limit() {
            Some(self.reserved_output())
        } else {
            self.requested_output
        }
    }
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
    let mut body = parse_body(&ex.request.body)?;
    let stream = validate_envelope(protocol, &body)?;
    out.stream = stream;
    // One output limit: the client protocol's own field; other protocols' limit fields are dropped so that
    // no upstream can honour a limit admission did not reserve for.
    let requested_output = limits::normalize(protocol, &mut body)?;
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
    // The operator's upstream account is shared by every key: nothing may reach state kept in it.
    if !model.account_features {
        let betas: Vec<&str> = ex.request.header_all("anthropic-beta").collect();
        account::refuse_account_features(protocol, &body, &betas)?;
        account::store_nothing(protocol, &mut body);
    }
    Ok(Prepared {
        identity,
        body,
        body_len: ex.request.body.len(),
        stream,
        model,
        requested_output,
    })
}

/// Sends the request to the model's upstreams, moving on only before the first byte reached the client and
/// only for failures another upstream may not have. Upstreams whose breaker is open (they stopped answering)
/// are skipped; upstreams ejected for answering with errors are tried after the healthy ones, never refused.
fn dispatch(
    gw: &Gateway,
    config: &Config,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    p: &mut Prepared,
) -> Result<(), ApiError> {
    let model = p.model;
    let mut ready = Vec::new();
    let mut ejected = Vec::new();
    let mut skipped = Vec::new();
    for name in &model.upstreams {
        let Some(upstream) = config.upstream(name) else {
            return Err(ApiError::internal(format!(
                "model `{}` names an unknown upstream",
                model.name
            )));
        };
        match gw.breakers.standing(&upstream.name) {
            Standing::Ready => ready.push(upstream),
            Standing::Ejected => ejected.push(upstream),
            Standing::Skipped(wait) => skipped.push((upstream, wait)),
        }
    }
    let plan: Vec<&Upstream> = ready.into_iter().chain(ejected).collect();
    let mut last: Option<ApiError> = None;
    for (i, upstream) in plan.iter().copied().enumerate() {
        // Admitted just before it is tried: a probe granted here is reported below, or given back.
        let ticket = match gw.breakers.admit(&upstream.name) {
            Admit::Yes(t) => t,
            Admit::No(wait) => {
                skipped.push((upstream, wait));
                continue;
            }
        };
        out.start_attempt(&upstream.name);
        let calls = out.upstream_calls;
        let started = Instant::now();
        let attempt = match upstream.kind {
            UpstreamKind::Mock => super::mock::serve(gw, ex, trace, out, upstream, p),
            kind if kind.protocol() == Some(trace.protocol) => {
                relay::passthrough(gw, ex, trace, out, upstream, p)
            }
            _ => super::translate::translate(gw, ex, trace, out, upstream, p),
        };
        let verdict = verdict(&attempt, out, trace, out.upstream_calls > calls);
        gw.breakers.report(
            ticket,
            verdict,
            Policy {
                failures: upstream.breaker_failures,
                cooldown: upstream.breaker_cooldown,
            },
        );
        match attempt {
            Ok(()) => return Ok(()),
            Err(e)
                if i + 1 < plan.len()
                    && !ex.response().is_started()
                    && retryable(&e)
                    && !trace.client_gone()
                    && !trace.cut_by_shutdown() =>
            {
                log::warn!(
                    "{}: upstream `{}` failed after {} ms ({}); trying the next one",
                    trace.request_id,
                    upstream.name,
                    started.elapsed().as_millis(),
                    e
                );
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| unavailable(gw, model, &skipped)))
}

/// What an attempt says about its upstream's health (see `upstream::breaker`).
fn verdict(attempt: &Result<(), ApiError>, out: &Outcome, trace: &Trace, called: bool) -> Verdict {
    if !called || trace.client_gone() || trace.cut_by_shutdown() {
        return Verdict::Inconclusive;
    }
    match attempt {
        Err(e) if e.origin() == crate::protocol::Origin::UpstreamSilent => {
            Verdict::Silent(e.message().to_string())
        }
        Err(e) if e.status() >= 500 => Verdict::Erroring(e.message().to_string()),
        Err(_) => Verdict::Alive,
        Ok(()) if out.client_closed => Verdict::Inconclusive,
        Ok(()) => match &out.error {
            Some(e) => Verdict::Erroring(e.clone()),
            None => Verdict::Success,
        },
    }
}

/// 503 when no upstream of the model may be tried now: each was skipped because it stopped answering.
fn unavailable(gw: &Gateway, model: &Model, skipped: &[(&Upstream, Duration)]) -> ApiError {
    let secs = skipped
        .iter()
        .map(|(_, w)| w.as_secs_f64().ceil() as u64)
        .min()
        .unwrap_or(1)
        .max(1);
    let why: Vec<String> = skipped
        .iter()
        .map(|(u, _)| {
            let v = gw.breakers.view(&u.name);
            let reason = v.reason.unwrap_or_else(|| "no answer".into());
            if v.state == "probing" {
                format!(
                    "`{}` stopped answering ({reason}) and another request is checking whether it is back",
                    u.name
                )
            } else {
                format!(
                    "`{}` did not answer {} times in a row (last: {reason})",
                    u.name, v.failures
                )
            }
        })
        .collect();
    ApiError::unavailable(format!(
        "The model `{}` cannot be served right now: upstream {}. tollgate tries a silent upstream again with one \
         request at a time; retry in {secs} s.",
        model.name,
        why.join("; upstream ")
    ))
    .with_retry_after(secs)
    .with_code("upstream_unavailable")
}

/// Failures worth trying the next upstream for: unreachable, timed out, overloaded, 5xx, 429.
fn retryable(e: &ApiError) -> bool {
    e.status() == 429 || e.status() >= 500
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
