//! The last stage of every request to a model: settlement. The reservation admission made (`admit.rs`) is
//! settled at the cost of the real usage, and every request that reached an upstream (or that the gateway
//! refused for a known key) gets its one ledger record. A request answered from the answer cache is
//! recorded as a hit: its answer's token counts, cost 0, and no tokens against the key's limits.

use super::outcome::{Answer, Asked, Outcome};
use crate::access::accounts::Reservation;
use crate::config::{Config, Model};
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::{Exchange, Withheld};
use crate::ledger::{Record, Status};
use crate::money::Money;
use crate::pricing::Bill;
use crate::protocol::canon::Usage;
use crate::protocol::request::Endpoint;
use crate::protocol::ApiError;
use crate::upstream::policy;
use crate::util::{rfc3339_millis, unix_millis};

/// What `usage` costs at the model's prices in force now: every kind of token at its price, the whole
/// request at the tier its input falls in (`pricing::PriceSheet::bill`, the one rule).
pub(super) fn cost(model: &Model, u: &Usage) -> Bill {
    model.prices.bill(u, crate::util::unix_now())
}

/// A settled request: its outcome as the client and the record have it, and what it was charged.
pub(super) struct Settled {
    pub outcome: Outcome,
    /// The cost (hosted uses included) and the tier applied.
    pub bill: Bill,
}

/// Settles the reservation and writes the usage record (only for requests that reached an upstream, and
/// refusals of known keys). Output beyond the limit sent upstream is not billed. In strict mode a record that
/// cannot be synced turns the answer into an error before its end reaches the client (503, or the stream's
/// in-stream error).
pub(super) fn settle(
    gw: &Gateway,
    config: &Config,
    ex: &mut Exchange,
    trace: &Trace,
    mut out: Outcome,
    reservation: Option<Reservation>,
) -> Settled {
    let latency = ex.received.elapsed();
    // A hit called no upstream, and is recorded like an answer (at no cost).
    let hit = out.cache_hit();
    if !out.upstream_called() && !hit {
        if let Some(r) = reservation {
            r.release();
        }
        record_refusal(gw, trace, &out, latency);
        let bill = Bill::default();
        return Settled { outcome: out, bill };
    }
    if let Some(m) = out.asked.model.as_ref().filter(|_| !hit) {
        let failure = policy::rule(out.answer.ended(false)).failure;
        let why = out.answer.error().map(ApiError::message);
        gw.stats
            .observe(m, latency.as_millis() as u64, failure, why);
    }
    let (usage, estimated) = billable_usage(trace, &out);
    out.answer.set_usage((usage, estimated));
    let model = out.asked.model.as_deref().and_then(|m| config.model_any(m));
    let hosted = out.asked.hosted.charge(out.answer.hosted());
    let bill = match model {
        Some(m) if !out.asked.unbilled && !hit => {
            let mut b = cost(m, &usage);
            b.cost = out.asked.hosted.surcharged(b.cost);
            Some(b)
        }
        _ => None,
    };
    let mut charged = bill.map_or(Money::ZERO, |b| b.cost + hosted.cost);
    let mut rec = usage_record(gw, trace, &out, &usage, charged, latency);
    let rec_tier = bill.and_then(|b| b.tier);
    rec.tier_above_input_tokens = rec_tier;
    (rec.hosted_uses, rec.service_tier) = (hosted.uses, hosted.tier);
    rec.surcharge = bill.and(out.asked.hosted.surcharge()).map(str::to_string);
    if let Err(rec) = gw.ledger.try_append(rec) {
        let mut rec = *rec;
        let (whole, withheld) = withhold_answer(ex, trace, out.asked.stream);
        if whole {
            charged = Money::ZERO;
            rec.status = Status::Http(503);
            rec.cost = Money::ZERO;
            out.answer.answered(503);
        }
        out.answer.ended_with(withheld);
        rec.error = out
            .answer
            .error()
            .as_ref()
            .map(|e| crate::secrets::scrubbed(&e.operator_text()));
        gw.ledger.requeue(rec);
    }
    if let Some(r) = reservation {
        // A hit's tokens were not used again: they count against no token limit.
        r.settle(charged, if hit { 0 } else { usage.total() });
    }
    let bill = Bill {
        cost: charged,
        split: usage.split(),
        tier: rec_tier,
    };
    Settled { outcome: out, bill }
}

/// A request of a known key that arrives while every worker is busy: answered 503 `overloaded` here, on
/// the connection's thread, and recorded like any refusal (the HTTP layer's own 503 knows no key). Returns
/// false for a request to another path or without a valid key: the HTTP layer answers those.
pub(super) fn refuse_overloaded(gw: &Gateway, ex: &mut Exchange) -> bool {
    let Some(endpoint) = Endpoint::from_path(&ex.request.path) else {
        return false;
    };
    let protocol = endpoint.protocol();
    let Ok(identity) = crate::access::authenticate(&ex.request, protocol, &gw.keys) else {
        return false;
    };
    gw.state
        .rejected
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let trace = Trace::new(ex, protocol);
    let err = ApiError::unavailable("All workers are busy; retry shortly.")
        .with_cause(crate::protocol::Cause::Overloaded);
    let w = ex.response();
    w.close_after();
    respond::error(w, &trace, &err);
    // The model, when the body is small enough to read here at no real cost.
    let model = (ex.request.body.len() <= 64 * 1024)
        .then(|| serde_json::from_slice::<serde_json::Value>(&ex.request.body).ok())
        .flatten()
        .map(|v| protocol.requested_model(&ex.request.path, &v).into_owned());
    let asked = Asked {
        key: Some(identity.name.clone()),
        group: Some(identity.group.clone()),
        model,
        ..Asked::default()
    };
    let out = Outcome {
        asked,
        answer: Answer::refused(err),
        ..Outcome::default()
    };
    record_refusal(gw, &trace, &out, ex.received.elapsed());
    true
}

/// A request of a known key that the gateway refused itself (no upstream was called) gets a record too:
/// its status and reason, no upstream, no tokens, cost 0. Requests without a valid key get none (anyone
/// could fill the ledger with them; they are counted in the metrics instead), nor do refusals because the
/// ledger itself cannot take records.
fn record_refusal(gw: &Gateway, trace: &Trace, out: &Outcome, latency: std::time::Duration) {
    let Some(err) = &out.answer.error() else {
        return;
    };
    let ledger = err.cause() == crate::protocol::Cause::LedgerUnavailable;
    if out.asked.key.is_none() || err.status() == 401 || ledger {
        return;
    }
    if let Some(key) = &out.asked.key {
        gw.accounts.touch(key);
    }
    let mut rec = usage_record(gw, trace, out, &Usage::default(), Money::ZERO, latency);
    rec.upstream = String::new();
    rec.reason = Some(refusal_reason(err).to_string());
    if let Err(rec) = gw.ledger.try_append(rec) {
        gw.ledger.requeue(*rec);
    }
}

/// The reason a refusal's record gives: its wire code, by its cause.
fn refusal_reason(err: &ApiError) -> &str {
    use crate::protocol::Cause;
    match (err.status(), err.cause(), err.code()) {
        (403, _, _) => "model_not_allowed",
        (_, Cause::RateLimitExceeded, _) => "rate_limited",
        (_, _, Some(code)) => code,
        (400 | 413 | 422, _, None) => "invalid_request",
        (404, _, None) => "not_found",
        (503, _, None) => "unavailable",
        _ => "refused",
    }
}

/// The usage billed, by one rule on every path: as reported or estimated, with output beyond the limit
/// sent upstream cut off, and never less than the request's input once its upstream worked on it (see
/// [`worked_on`]): an upstream that never reported usage (the client left first, or shutdown cut the
/// call) is billed the admission's estimate of the input, marked estimated. Returns it and whether it is an
/// estimate.
fn billable_usage(trace: &Trace, out: &Outcome) -> (Usage, bool) {
    let mut usage = out.answer.usage().unwrap_or_default();
    let mut estimated = out.answer.estimated();
    if usage.input_tokens == 0 && worked_on(out) {
        usage.input_tokens = out.asked.input_estimate;
        estimated = true;
    }
    if let Some(limit) = out.answer.output_limit() {
        if usage.output_tokens > limit {
            log::warn!(
                "{}: upstream `{}` reported {} output tokens over a limit of {limit}; billed {limit}",
                trace.request_id,
                out.answer.upstream().unwrap_or("-"),
                usage.output_tokens
            );
            usage.output_tokens = limit;
            usage.reasoning_tokens = usage.reasoning_tokens.min(limit);
        }
    }
    (usage, estimated)
}

/// Whether the upstream worked on the request, so that it owes at least its input: the upstream took the
/// whole request without refusing it (see `Answer::taken`), and its answer began (a stream, however it
/// ended) or the gateway stopped waiting for it because the client left or shutdown cut the call. Not
/// billed so: a request never sent whole (connection refused or failed, name not resolved), an upstream's
/// own error answer (4xx, 5xx, an error object: providers bill none), an upstream silent past its timeouts.
fn worked_on(out: &Outcome) -> bool {
    let a = &out.answer;
    a.taken() && (a.status() == 200 || a.client_closed() || out.shutdown)
}

fn usage_record(
    gw: &Gateway,
    trace: &Trace,
    out: &Outcome,
    usage: &Usage,
    cost: Money,
    latency: std::time::Duration,
) -> Record {
    let started_ms = unix_millis().saturating_sub(latency.as_millis() as u64);
    let split = usage.split();
    let instance = gw.record_instance.clone();
    let status = if out.answer.client_closed() {
        Status::ClientClosed
    } else if out.shutdown {
        Status::Shutdown
    } else {
        Status::Http(out.answer.status())
    };
    Record {
        ts: rfc3339_millis(started_ms),
        request_id: trace.request_id.clone(),
        client_request_id: trace.client_request_id.clone(),
        key: out.asked.key.clone().unwrap_or_default(),
        group: out.asked.group.clone().unwrap_or_default(),
        model: out.asked.model.clone().unwrap_or_default(),
        protocol: trace.protocol.name.to_string(),
        upstream: out.answer.upstream().unwrap_or_default().to_string(),
        endpoint: out.asked.endpoint.map(str::to_string),
        stream: out.asked.stream,
        status,
        input_tokens: usage.input_tokens,
        cached_input_tokens: split.cache_reads,
        cache_write_5m_tokens: split.cache_writes_5m,
        cache_write_1h_tokens: split.cache_writes_1h,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.reasoning_tokens,
        tier_above_input_tokens: None,
        estimated: out.answer.estimated(),
        cost,
        latency_ms: latency.as_millis() as u64,
        error: out
            .answer
            .error()
            .as_ref()
            .map(|e| crate::secrets::scrubbed(&e.operator_text())),
        reason: None,
        requested_model: out.asked.requested_model.clone(),
        instance,
        hosted_uses: Default::default(),
        service_tier: None,
        surcharge: None,
        cache: out.cache,
    }
}

/// Strict mode, and the record could not be synced: the answer must not end as a success. Returns whether
/// nothing of it reached the client (it gets a 503 and pays nothing), and the error it ends with.
fn withhold_answer(ex: &mut Exchange, trace: &Trace, stream: bool) -> (bool, ApiError) {
    let err = ApiError::record_not_synced();
    log::error!(
        "{}: usage record not synced (strict ledger): answering {} instead",
        trace.request_id,
        if stream {
            "with an in-stream error"
        } else {
            "503"
        }
    );
    let w = ex.response();
    let whole = match w.withhold() {
        Withheld::Whole => {
            respond::error(w, trace, &err);
            true
        }
        Withheld::Tail(held) => {
            // The stream's closing events give way to the protocol's in-stream error.
            let ev = trace.protocol.reply.error_event(
                &err,
                &trace.request_id,
                trace.protocol.next_sequence(&held),
            );
            let _ = w.write_chunk(&ev);
            let _ = w.finish();
            false
        }
        Withheld::Nothing => false,
    };
    (whole, err)
}
