//! Reporting a finished request: the metrics it feeds and its request log line (text or JSON).

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use super::outcome::Outcome;
use crate::config::Config;
use crate::gateway::metrics::Observation;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::Exchange;
use crate::logging::REQUEST_TARGET;
use crate::pricing::Bill;
use crate::protocol::Protocol;

/// Feeds the metrics with a finished request.
pub(super) fn observe(gw: &Gateway, config: &Config, trace: &Trace, out: &Outcome, bill: &Bill) {
    if trace.streaming.replace(false) {
        trace.server.streams.fetch_sub(1, Ordering::Relaxed);
    }
    let status = out.status_text();
    // A hit generated no tokens: they are in its record, not in the token counters.
    let usage = match out.cache_hit() {
        false => out.answer.usage().unwrap_or_default(),
        true => Default::default(),
    };
    // Label values come only from configured models, so invented names cannot grow the series.
    let model = match out.asked.model.as_deref() {
        Some(m) if config.model_any(m).is_some() => m,
        Some(_) => "unknown",
        None => "-",
    };
    if let Some(used) = out.cache {
        gw.cache.count(model, used);
    }
    let split = if out.cache_hit() {
        Default::default()
    } else {
        bill.split
    };
    gw.metrics.observe(&Observation {
        protocol: trace.protocol.name,
        model,
        status: &status,
        total: trace.received.elapsed(),
        overhead: trace.overhead(),
        first_token: trace.first_token.get(),
        input_tokens: usage.input_tokens,
        cached_input_tokens: split.cache_reads,
        cache_write_5m_tokens: split.cache_writes_5m,
        cache_write_1h_tokens: split.cache_writes_1h,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        cost: bill.cost,
        tier: bill.tier,
    });
}

/// Writes the request's log line.
pub(super) fn log_line(ex: &Exchange, trace: &Trace, out: &Outcome) {
    let line = LogLine {
        request_id: &trace.request_id,
        client_request_id: trace.client_request_id.as_deref(),
        protocol: trace.protocol,
        latency_ms: ex.received.elapsed().as_millis() as u64,
        overhead_ms: trace.overhead().as_secs_f64() * 1000.0,
    };
    write_line(&line, out);
}

/// What a request log line says besides its outcome.
pub(super) struct LogLine<'a> {
    pub request_id: &'a str,
    pub client_request_id: Option<&'a str>,
    pub protocol: Protocol,
    pub latency_ms: u64,
    pub overhead_ms: f64,
}

/// A value of the text request line: `-` when absent, quoted when it needs to be (`logging::field`).
fn field(v: Option<&str>) -> Cow<'_, str> {
    v.map_or(Cow::Borrowed("-"), crate::logging::field)
}

/// Writes a request log line (also for requests answered from their head, which have no trace).
pub(super) fn write_line(l: &LogLine, out: &Outcome) {
    let answer = &out.answer;
    let level = if answer.error().is_some() && answer.status() >= 500 {
        log::Level::Warn
    } else {
        log::Level::Info
    };
    // Nothing is formatted for a line the log level leaves out.
    if !log::log_enabled!(target: REQUEST_TARGET, level) {
        return;
    }
    let usage = answer.usage().unwrap_or_default();
    let status = out.status_text();
    let error = answer.error().as_ref().map(|e| e.operator_text());
    if crate::logging::json() {
        let v = serde_json::json!({
            "ts": crate::util::rfc3339_millis(crate::util::unix_millis()),
            "level": level.as_str(),
            "target": REQUEST_TARGET,
            "request_id": l.request_id,
            "client_request_id": l.client_request_id,
            "key": out.asked.key,
            "group": out.asked.group,
            "model": out.asked.model,
            "protocol": l.protocol.name,
            "upstream": answer.upstream(),
            "stream": out.asked.stream,
            "status": status,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "estimated": answer.estimated(),
            "latency_ms": l.latency_ms,
            "overhead_ms": l.overhead_ms,
            "error": error,
            "cache": out.cache.map(|c| c.name()),
        });
        log::log!(target: REQUEST_TARGET, level, "{v}");
        return;
    }
    // Every value a client (or the operator) chose is a quoted field when it needs to be, so none can pass for
    // another field or start a line.
    let line = format!(
        "{} client_request_id={} key={} group={} model={} protocol={} upstream={} stream={} status={} in={} out={}{}{} ms={}",
        field(Some(l.request_id)),
        field(l.client_request_id),
        field(out.asked.key.as_deref()),
        field(out.asked.group.as_deref()),
        field(out.asked.model.as_deref()),
        l.protocol.name,
        field(answer.upstream()),
        out.asked.stream,
        field(Some(&status)),
        usage.input_tokens,
        usage.output_tokens,
        if answer.estimated() { " estimated=true" } else { "" },
        out.cache.map_or("", |c| match c {
            crate::ledger::CacheUse::Hit => " cache=hit",
            crate::ledger::CacheUse::Miss => " cache=miss",
            crate::ledger::CacheUse::Bypass => " cache=bypass",
        }),
        l.latency_ms,
    );
    match error {
        Some(e) => log::log!(target: REQUEST_TARGET, level, "{line} error={}", field(Some(&e))),
        None => log::log!(target: REQUEST_TARGET, level, "{line}"),
    }
}
