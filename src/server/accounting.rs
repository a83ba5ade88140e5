//! Admission (rate limits and balance, before any upstream call) and settlement (cost from real usage, one
//! ledger record per request that reached an upstream).

use serde_json::Value;

use super::generate::{Outcome, Prepared};
use super::respond::Trace;
use super::Gateway;
use crate::access::accounts::{Ask, RateInfo, Reservation};
use crate::config::{Config, Model};
use crate::http::Exchange;
use crate::ledger::{Record, Status};
use crate::protocol::canon::Usage;
use crate::protocol::ApiError;
use crate::util::{rfc3339_millis, unix_millis};

/// The output limit the request asks for, in whichever field its protocol uses.
fn requested_output(body: &Value) -> Option<u64> {
    ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
}

/// Credits for `usage` at the model's prices (per 1M tokens; cached input at its own price when set).
pub fn cost(model: &Model, u: &Usage) -> f64 {
    let cached = u.cached_input_tokens.min(u.input_tokens);
    let cached_price = model.cached_input_price.unwrap_or(model.input_price);
    ((u.input_tokens - cached) as f64 * model.input_price
        + cached as f64 * cached_price
        + u.output_tokens as f64 * model.output_price)
        / 1_000_000.0
}

/// Checks the key's limits and balance and reserves the request's worst case.
pub fn admit(
    gw: &Gateway,
    config: &Config,
    p: &Prepared,
) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
    // About four bytes of JSON per token: a generous estimate of the input before any decoding.
    let input = (p.body_len as u64 / 4).max(1);
    let requested = requested_output(&p.body);
    let worst = Usage {
        input_tokens: input,
        output_tokens: requested.unwrap_or(p.model.max_output_tokens),
        ..Usage::default()
    };
    let ask = Ask {
        key: &p.identity.name,
        credit: p.identity.credit,
        group: config.group(&p.identity.group),
        tokens: input + requested.unwrap_or(0),
        cost: cost(p.model, &worst),
    };
    gw.accounts.check_and_reserve(&ask)
}

/// Settles the reservation and writes the usage record (only for requests that reached an upstream).
/// Returns the cost charged.
pub fn record(
    gw: &Gateway,
    config: &Config,
    ex: &Exchange,
    trace: &Trace,
    out: &Outcome,
    reservation: Option<Reservation>,
) -> f64 {
    if !out.upstream_called {
        if let Some(r) = reservation {
            r.release();
        }
        return 0.0;
    }
    let usage = out.usage.unwrap_or_default();
    let model = out.model.as_deref().and_then(|m| config.model_any(m));
    let charged = model.map_or(0.0, |m| cost(m, &usage));
    if let Some(r) = reservation {
        r.settle(charged, usage.total());
    }
    let latency = ex.received.elapsed();
    if let Some(m) = &out.model {
        let failed = out.status >= 500
            || out.status == 429
                && out
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("upstream"))
            || (out.error.is_some() && out.status == 200);
        gw.stats
            .observe(m, latency.as_millis() as u64, failed, out.error.as_deref());
    }
    let started_ms = unix_millis().saturating_sub(latency.as_millis() as u64);
    let status = if out.client_closed {
        Status::ClientClosed
    } else {
        Status::Http(out.status)
    };
    gw.ledger.append(Record {
        ts: rfc3339_millis(started_ms),
        request_id: trace.request_id.clone(),
        client_request_id: trace.client_request_id.clone(),
        key: out.key.clone().unwrap_or_default(),
        group: out.group.clone().unwrap_or_default(),
        model: out.model.clone().unwrap_or_default(),
        protocol: trace.protocol.name().to_string(),
        upstream: out.upstream.clone().unwrap_or_default(),
        stream: out.stream,
        status,
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        estimated: out.estimated,
        cost: charged,
        latency_ms: latency.as_millis() as u64,
        error: out.error.clone(),
    });
    charged
}
