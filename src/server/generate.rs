//! The pipeline of every request to a model, generation and token counting alike: prepare (authenticate,
//! validate, find the model), admit (limits, balance, the ledger), answer through failover, and settle
//! (usage record, metrics, the log line). The answering step is the only one that differs by endpoint.

use super::accounting;
use super::attempt::{Attempt, InFlight, Serve};
use super::failover;
use super::gateway::Gateway;
use super::outcome::Outcome;
use super::prepared::{prepare, Prepared};
use super::respond;
use super::trace::Trace;
use super::{builtin, count_tokens, passthrough, report, translate};
use crate::access::accounts::Reservation;
use crate::config::UpstreamKind;
use crate::http::Exchange;
use crate::protocol::request::Endpoint;
use crate::protocol::{ApiError, Origin};

/// Handles one POST to a model endpoint.
pub fn handle(gw: &Gateway, ex: &mut Exchange, endpoint: Endpoint) {
    let config = gw.config();
    // The end of the answer waits until the usage record is queued (synced, in strict mode): a client that
    // has its answer finds its record in the admin API.
    ex.response().hold_end();
    let mut trace = Trace::new(ex, endpoint.protocol());
    trace.hold_tail = config.ledger_strict;
    let mut out = Outcome {
        unbilled: endpoint.counts_tokens(),
        ..Outcome::default()
    };
    let mut reservation = None;
    let result = prepare(gw, &config, ex, endpoint, &mut out).and_then(|mut p| {
        reservation = Some(admit(gw, &mut trace, &p)?);
        let watch = gw.watchdog.watch(ex.response().socket(), trace.cut.clone());
        let mut req = InFlight {
            gw,
            ex,
            trace: &trace,
            watch: &watch,
        };
        let result = failover::dispatch(&mut req, &mut out, &mut p, serve_for(endpoint));
        if trace.client_gone() {
            // The client went away; whatever the upstream call ended with, nobody is listening.
            out.answer.client_closed = true;
            return Ok(());
        }
        result
    });
    if let Err(e) = result {
        if e.status() == 401 {
            gw.metrics.unauthorized(crate::util::unix_now());
        }
        let e = if trace.cut_by_shutdown() {
            ApiError::shutting_down()
        } else {
            e
        };
        if !ex.response().is_started() {
            respond::error(ex.response(), &trace, &e);
            out.answer.status = e.status();
        }
        out.answer.fail(e);
    }
    out.shutdown = trace.cut_by_shutdown();
    let bill = accounting::record(gw, &config, ex, &trace, &mut out, reservation);
    // Metrics and the log line before the answer's last byte: a client that reads `/metrics` right after its
    // answer sees its request counted.
    report::observe(gw, &config, &trace, &out, &bill);
    report::log_line(ex, &trace, &out);
    let _ = ex.response().release_held();
}

/// Admission: the gateway is not past its shutdown deadline, the ledger takes records, and the key's
/// limits and balance allow the request's worst case (reserved until it is settled).
fn admit(gw: &Gateway, trace: &mut Trace, p: &Prepared) -> Result<Reservation, ApiError> {
    if gw.watchdog.is_shut_down() {
        return Err(ApiError::shutting_down());
    }
    if !gw.ledger.accepting() {
        gw.metrics.count(&gw.metrics.ledger_refused);
        return Err(ApiError::ledger_unavailable(gw.ledger.backlog()));
    }
    let budget = p
        .identity
        .budget
        .or(p.config.group(&p.identity.group).and_then(|g| g.budget));
    let admitted = p
        .hosted
        .affordable(&gw.accounts, &p.identity, budget)
        .map_err(|e| (e, Default::default()))
        .and_then(|()| accounting::admit(gw, p, &trace.request_id));
    let (admitted, info) = match admitted {
        Ok((res, info)) => (Ok(res), info),
        Err((e, info)) => {
            let counter = match e.origin() {
                Origin::Quota => &gw.metrics.quota_exhausted,
                Origin::RateLimit => &gw.metrics.rate_limited,
                _ => &gw.metrics.store_refused,
            };
            gw.metrics.count(counter);
            (Err(e), info)
        }
    };
    trace.extra = info.headers;
    admitted
}

/// How an attempt at an upstream is answered, by endpoint.
fn serve_for(endpoint: Endpoint) -> Serve {
    match endpoint {
        Endpoint::Generate(_) => generate,
        Endpoint::CountTokens(_) => count_tokens::serve,
    }
}

/// Generation: the built-in model, a same-protocol upstream (passthrough) or another protocol's
/// (translation).
fn generate(a: &mut Attempt) -> Result<(), ApiError> {
    match a.upstream.kind {
        UpstreamKind::Mock => builtin::serve(a),
        kind if kind.protocol() == Some(a.trace.protocol) => passthrough::serve(a),
        _ => translate::serve(a),
    }
}
