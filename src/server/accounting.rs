//! Admission (rate limits and balance, before any upstream call) and settlement (cost from real usage, one
//! ledger record per request that reached an upstream).

use super::generate::{Outcome, Prepared};
use super::respond::{self, Trace};
use super::Gateway;
use crate::access::accounts::{Ask, RateInfo, Reservation};
use crate::config::{Config, Model};
use crate::http::{Exchange, Withheld};
use crate::ledger::{Record, Status};
use crate::money::Money;
use crate::protocol::canon::Usage;
use crate::protocol::ApiError;
use crate::util::{rfc3339_millis, unix_millis};

/// Credits for `usage` at the model's prices (per 1M tokens; cached input at its own price when set).
pub fn cost(model: &Model, u: &Usage) -> Money {
    let cached = u.cached_input_tokens.min(u.input_tokens);
    let cached_price = model.cached_input_price.unwrap_or(model.input_price);
    model.input_price.per_million(u.input_tokens - cached)
        + cached_price.per_million(cached)
        + model.output_price.per_million(u.output_tokens)
}

/// Checks the key's limits and balance and reserves the request's worst case: its estimated input and the
/// output limit its upstream requests will carry.
pub fn admit(
    gw: &Gateway,
    config: &Config,
    p: &Prepared,
) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
    // About four bytes of JSON per token: a generous estimate of the input before any decoding.
    let input = (p.body_len as u64 / 4).max(1);
    let worst = Usage {
        input_tokens: input,
        output_tokens: p.reserved_output(),
        ..Usage::default()
    };
    let ask = Ask {
        key: &p.identity.name,
        credit: p.identity.credit,
        group: config.group(&p.identity.group),
        tokens: input + p.requested_output.unwrap_or(0),
        cost: cost(p.model, &worst),
    };
    gw.accounts.check_and_reserve(&ask)
}

/// Whether a stream has gone past its output limit: the upstream reported more output than the limit, or
/// it produced text estimated at more than twice the limit (an upstream that ignores limits and reports
/// nothing until the end). Such a stream is cut there; output beyond the limit is never billed.
pub fn beyond_limit(
    limit: Option<u64>,
    reported_output: Option<u64>,
    produced_estimate: u64,
) -> bool {
    let Some(limit) = limit else {
        return false;
    };
    reported_output.is_some_and(|r| r > limit) || produced_estimate > limit.saturating_mul(2) + 64
}

/// The in-stream error for a stream cut at its output limit.
pub fn limit_exceeded(upstream: &str, limit: u64) -> ApiError {
    ApiError::bad_gateway(format!(
        "upstream `{upstream}` went past the output limit of {limit} tokens it was sent; the stream was cut \
         there and is billed up to the limit"
    ))
    .with_code("output_limit_exceeded")
}

/// 503 while the usage ledger cannot take more records (its disk is failing): nothing is answered that
/// could not be recorded.
pub fn ledger_unavailable(gw: &Gateway) -> ApiError {
    ApiError::unavailable(format!(
        "The gateway cannot write its usage ledger right now ({} records waiting for the disk); requests are \
         refused until it can, so that no answer goes unrecorded. The operator has been told (see /readyz).",
        gw.ledger.backlog()
    ))
    .with_retry_after(5)
    .with_code("ledger_unavailable")
}

/// Settles the reservation and writes the usage record (only for requests that reached an upstream).
/// Output beyond the limit sent upstream is not billed. In strict mode a record that cannot be synced turns
/// the answer into an error before its end reaches the client (503, or the stream's in-stream error).
/// Returns the cost charged.
pub fn record(
    gw: &Gateway,
    config: &Config,
    ex: &mut Exchange,
    trace: &Trace,
    out: &mut Outcome,
    reservation: Option<Reservation>,
) -> Money {
    if !out.upstream_called {
        if let Some(r) = reservation {
            r.release();
        }
        return Money::ZERO;
    }
    let mut usage = out.usage.unwrap_or_default();
    if let Some(limit) = out.output_limit {
        if usage.output_tokens > limit {
            log::warn!(
                "{}: upstream `{}` reported {} output tokens over a limit of {limit}; billed {limit}",
                trace.request_id,
                out.upstream.as_deref().unwrap_or("-"),
                usage.output_tokens
            );
            usage.output_tokens = limit;
            usage.reasoning_tokens = usage.reasoning_tokens.min(limit);
            out.usage = Some(usage);
        }
    }
    let model = out.model.as_deref().and_then(|m| config.model_any(m));
    let mut charged = match model {
        Some(m) if !out.unbilled => cost(m, &usage),
        _ => Money::ZERO,
    };
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
    } else if out.shutdown {
        Status::Shutdown
    } else {
        Status::Http(out.status)
    };
    let rec = Record {
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
        error: out.error.as_deref().map(crate::secrets::scrubbed),
    };
    if let Err(mut rec) = gw.ledger.try_append(rec) {
        // Strict mode, and the record could not be synced: the answer must not end as a success.
        let err = ApiError::unavailable(
            "The gateway could not write this request's usage record to its ledger (its disk is failing), \
             so the answer is withheld. The operator has been told; retry later.",
        )
        .with_code("ledger_unavailable");
        log::error!(
            "{}: usage record not synced (strict ledger): answering {} instead",
            trace.request_id,
            if out.stream {
                "with an in-stream error"
            } else {
                "503"
            }
        );
        let w = ex.response();
        match w.withhold() {
            Withheld::Whole => {
                // Nothing reached the client: it gets the 503 and pays nothing.
                respond::error(w, trace, &err);
                charged = Money::ZERO;
                rec.status = Status::Http(503);
                rec.cost = Money::ZERO;
                out.status = 503;
            }
            Withheld::Tail(held) => {
                // The stream's closing events give way to the protocol's in-stream error.
                let ev = trace
                    .protocol
                    .error_event(&err, &trace.request_id, next_sequence(&held));
                let _ = w.write_chunk(&ev);
                let _ = w.finish();
            }
            Withheld::Nothing => {}
        }
        out.error = Some(err.message().to_string());
        rec.error = out.error.clone();
        gw.ledger.requeue(*rec);
    }
    if let Some(r) = reservation {
        r.settle(charged, usage.total());
    }
    charged
}

/// The sequence number the event replacing a Responses stream's held closing events takes (the first one
/// held), if any.
fn next_sequence(held: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(held);
    let at = text.find("\"sequence_number\":")? + "\"sequence_number\":".len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}
