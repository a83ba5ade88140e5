//! The pipeline of every request to a model, generation and token counting alike: a line of stages, each
//! taking what the one before returned: prepare (`prepared.rs`: authenticate, validate, find the model) →
//! admit (`admit.rs`: limits, balance, the ledger) → the attempts (an upstream at a time in the order
//! `failover.rs` gives, each answered by the step for its endpoint and upstream, until failover says to stop)
//! → settle (`accounting.rs`: the usage record; then `report.rs`: metrics, the log line). Only the answering
//! step differs by endpoint. For a model whose answers are cached, the cache is looked up before admission
//! and a hit answered from it instead of the attempts (`cached.rs`).

use super::accounting;
use super::admit::admit;
use super::attempt::Attempt;
use super::cached::{self, Lookup};
use super::failover::FailoverRoute;
use super::outcome::{Answer, Outcome};
use super::prepared::{prepare, Prepared, Refused};
use super::{builtin, count_tokens, embed, passthrough, report, text_completion, translate};
use crate::access::accounts::Reservation;
use crate::gateway::respond;
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::http::Exchange;
use crate::ledger::CacheUse;
use crate::protocol::request::Endpoint;
use crate::protocol::ApiError;

/// Handles one POST to a model endpoint.
pub(super) fn handle(gw: &Gateway, ex: &mut Exchange, endpoint: Endpoint) {
    let config = gw.config();
    // The end of the answer waits until the usage record is queued (synced, in strict mode): a client that
    // has its answer finds its record in the admin API.
    ex.response().hold_end();
    let mut trace = Trace::new(ex, endpoint.protocol());
    trace.hold_tail = config.ledger_strict;
    let (outcome, reservation) = match prepare(gw, &config, ex, endpoint) {
        Ok(p) => admitted(gw, ex, &mut trace, p),
        Err(refused) => {
            let Refused { asked, error } = *refused;
            let answer = Answer::refused(error);
            (
                Outcome {
                    asked,
                    answer,
                    ..Outcome::default()
                },
                None,
            )
        }
    };
    let outcome = tell(gw, ex, &trace, outcome);
    let settled = accounting::settle(gw, &config, ex, &trace, outcome, reservation);
    // Metrics and the log line before the answer's last byte: a client that reads `/metrics` right after its
    // answer sees its request counted.
    report::observe(gw, &config, &trace, &settled.outcome, &settled.bill);
    report::log_line(ex, &trace, &settled.outcome);
    let _ = ex.response().release_held();
}

/// The cache's look-up (cached models), admission, then (admitted) the answer: from the cache, or from the
/// attempts.
fn admitted(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &mut Trace,
    p: Prepared,
) -> (Outcome, Option<Reservation>) {
    let lookup = cached::look(gw, ex, &p);
    let admission = admit(gw, &p, &trace.request_id, lookup.is_hit());
    if let Some(headers) = admission.headers {
        trace.extra = headers;
    }
    // A request refused at admission was answered neither from the cache nor by an upstream.
    let cache = match &admission.reservation {
        Ok(_) => lookup.used(),
        Err(_) => lookup.used().map(|_| CacheUse::Bypass),
    };
    if let Some(used) = cache {
        trace
            .extra
            .push((cached::HEADER.to_string(), used.name().to_string()));
    }
    let dropped = p.asked.hosted.dropped();
    if !dropped.is_empty() {
        let dropped = dropped.join(", ");
        log::info!(
            "{}: left out hosted tools the model `{}` does not allow: {}",
            trace.request_id,
            p.model.name,
            crate::logging::field(&dropped)
        );
        trace
            .extra
            .push((super::hosted::DROPPED_HEADER.to_string(), dropped));
    }
    let (answer, upstream_calls, reservation) = match admission.reservation {
        Ok(r) => {
            let (answer, calls) = answered(gw, ex, trace, &p, &lookup);
            (answer, calls, Some(r))
        }
        Err(e) => (Answer::refused(e), 0, None),
    };
    let outcome = Outcome {
        asked: p.asked,
        answer,
        upstream_calls,
        shutdown: false,
        cache,
    };
    (outcome, reservation)
}

/// The answer of an admitted request: the cache's, or the attempts' (stored when the cache keeps it).
fn answered(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    p: &Prepared,
    lookup: &Lookup,
) -> (Answer, u32) {
    if let Lookup::Hit { entry, req } = lookup {
        return (cached::replay(gw, ex, trace, p, entry, req), 0);
    }
    let (answer, calls) = attempts(gw, ex, trace, p, lookup.keeps());
    (cached::store(gw, p, trace, lookup, answer), calls)
}

/// The attempts: one per upstream, in the order failover gives, each answered by the step for the endpoint
/// and the upstream, until failover says not to move on. Returns the last attempt's answer (or, when no
/// upstream could be tried, the gateway's) and the upstream calls made. `keep`: each attempt keeps its
/// answer in canonical form for the answer cache.
fn attempts(
    gw: &Gateway,
    ex: &mut Exchange,
    trace: &Trace,
    p: &Prepared,
    keep: bool,
) -> (Answer, u32) {
    let watch = gw
        .watchdog
        .watch(&trace.request_id, ex.response().socket(), trace.cut.clone());
    let mut route = match FailoverRoute::plan(gw, p) {
        Ok(r) => r,
        Err(e) => return (Answer::refused(e), 0),
    };
    let (mut last, mut calls) = (None, 0);
    while let Some(turn) = route.next(gw) {
        let mut attempt = Attempt {
            gw,
            ex: &mut *ex,
            trace,
            watch: &watch,
            p,
            upstream: turn.upstream,
            keep,
        };
        let answer = answer(&mut attempt);
        calls += u32::from(answer.called());
        let again = route.after(gw, turn, &answer, trace, ex.response().is_started());
        last = Some(answer);
        if !again {
            break;
        }
    }
    let answer = last.unwrap_or_else(|| Answer::refused(route.unavailable(gw, p.model)));
    (answer, calls)
}

/// The answering step: token counting; embeddings; text completions; or generation by the built-in model, by a same-protocol upstream
/// (passthrough) or by another protocol's (translation).
fn answer(a: &mut Attempt) -> Answer {
    if a.p.endpoint.counts_tokens() {
        return count_tokens::serve(a);
    }
    if a.p.endpoint.embeds() {
        return embed::serve(a);
    }
    if a.p.endpoint.completes() {
        return text_completion::serve(a);
    }
    match a.upstream.kind.protocol() {
        None => builtin::serve(a),
        Some(p) if p == a.trace.protocol => passthrough::serve(a),
        Some(_) => translate::serve(a),
    }
}

/// Gives the client the error the request ended with when it has had no answer (a client that went away
/// gets nothing; after the shutdown deadline the error says so).
fn tell(gw: &Gateway, ex: &mut Exchange, trace: &Trace, mut out: Outcome) -> Outcome {
    out.shutdown = trace.cut_by_shutdown();
    if trace.client_gone() {
        // Whatever the upstream call ended with, nobody is listening.
        out.answer.client_left();
        return out;
    }
    let Some(e) = out.answer.owed_error().cloned() else {
        return out;
    };
    if e.status() == 401 {
        gw.metrics.unauthorized(crate::util::unix_now());
    }
    let e = if trace.cut_by_shutdown() {
        ApiError::shutting_down()
    } else {
        e
    };
    if !ex.response().is_started() {
        respond::error(ex.response(), trace, &e);
        out.answer.answered(e.status());
    }
    out.answer.fail(e);
    out
}
