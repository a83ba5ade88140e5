//! Choosing the upstream: a model's upstreams in order, healthy ones first, moving on only before the first
//! byte reached the client and only for failures another upstream may not have. Each attempt starts clean
//! and reports one verdict to its upstream's breaker.

use std::time::{Duration, Instant};

use super::attempt::{InFlight, Serve};
use super::gateway::Gateway;
use super::outcome::Outcome;
use super::prepared::Prepared;
use crate::config::{Model, Upstream};
use crate::protocol::ApiError;
use crate::upstream::breaker::{Admit, Policy, Standing};

/// Answers the request from the model's upstreams, through `serve`. Upstreams whose breaker is open (they
/// stopped answering) are skipped; upstreams ejected for answering with errors are tried after the healthy
/// ones, never refused. The last attempt's answer is kept in `out`.
pub fn dispatch(
    req: &mut InFlight,
    out: &mut Outcome,
    p: &mut Prepared,
    serve: Serve,
) -> Result<(), ApiError> {
    let (plan, mut skipped) = plan(req.gw, p)?;
    let mut last: Option<ApiError> = None;
    for (i, upstream) in plan.iter().copied().enumerate() {
        // Admitted just before it is tried: a probe granted here is reported below, or given back.
        let ticket = match req.gw.breakers.admit(&upstream.name) {
            Admit::Yes(t) => t,
            Admit::No(wait) => {
                skipped.push((upstream, wait));
                continue;
            }
        };
        let started = Instant::now();
        let busy = req.gw.routing.busy(&upstream.name);
        let mut attempt = req.attempt(p, upstream);
        let result = serve(&mut attempt);
        drop(busy);
        let mut answer = attempt.answer;
        if let Err(e) = &result {
            answer.fail(e.clone());
        }
        let cut = req.trace.client_gone() || req.trace.cut_by_shutdown();
        let policy = Policy {
            failures: upstream.breaker_failures,
            cooldown: upstream.breaker_cooldown,
        };
        req.gw.breakers.report(ticket, answer.verdict(cut), policy);
        if answer.upstream_failure().is_some() {
            req.gw.metrics.upstream_failed(&upstream.name);
        }
        cool_if_limited(req.gw, upstream, &answer);
        out.keep(answer);
        match result {
            Ok(()) => return Ok(()),
            Err(e)
                if i + 1 < plan.len()
                    && !req.ex.response().is_started()
                    && worth_another(&e)
                    && !cut =>
            {
                log::warn!(
                    "{}: upstream `{}` failed after {} ms ({} {}); trying the next one",
                    req.trace.request_id,
                    upstream.name,
                    started.elapsed().as_millis(),
                    e.status(),
                    e.operator_text()
                );
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| unavailable(req.gw, p.model, &skipped)))
}

type Skipped<'c> = Vec<(&'c Upstream, Duration)>;

/// The model's upstreams in the order they are tried (ready ones, then ejected ones), and those skipped
/// because their breaker is open, with how long until they may be tried.
fn plan<'c>(gw: &Gateway, p: &Prepared<'c>) -> Result<(Vec<&'c Upstream>, Skipped<'c>), ApiError> {
    let mut ready = Vec::new();
    let mut ejected = Vec::new();
    let mut skipped = Vec::new();
    for name in &p.model.upstreams {
        let Some(upstream) = p.config.upstream(name) else {
            return Err(ApiError::internal(format!(
                "model `{}` names an unknown upstream",
                p.model.name
            )));
        };
        match gw.breakers.standing(&upstream.name) {
            Standing::Ready => ready.push(upstream),
            Standing::Ejected => ejected.push(upstream),
            Standing::Skipped(wait) => skipped.push((upstream, wait)),
        }
    }
    // The route orders the healthy ones and leaves out those cooling down after a 429 (unless nothing else
    // may be asked); ejected ones come after, in the same way.
    let mut order = gw.routing.order(p.model, ready);
    if !ejected.is_empty() {
        order.extend(gw.routing.order(p.model, ejected));
    }
    Ok((order, skipped))
}

/// An upstream that answered 429 gets no new request until its `retry-after` passes.
fn cool_if_limited(gw: &Gateway, upstream: &Upstream, answer: &super::outcome::Answer) {
    if let Some(e) = answer
        .error
        .as_ref()
        .filter(|e| e.is_upstream() && e.status() == 429)
    {
        let wait = e.retry_after().map_or(
            crate::upstream::routing::DEFAULT_COOL_DOWN,
            Duration::from_secs,
        );
        log::info!(
            "upstream `{}` answered 429: no new requests to it for {} s",
            upstream.name,
            wait.as_secs()
        );
        gw.routing.cool(&upstream.name, wait);
    }
}

/// Failures worth trying the next upstream for: the upstream's own (unreachable, timed out, overloaded, 5xx,
/// 429), never the gateway's or a limit's.
fn worth_another(e: &ApiError) -> bool {
    e.is_upstream() && (e.status() == 429 || e.status() >= 500)
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
    .with_origin(crate::protocol::Origin::UpstreamSilent)
}
