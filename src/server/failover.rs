//! Choosing the upstream: a model's upstreams in order ([`FailoverRoute`]: healthy ones first, moving on only before
//! the first byte reached the client), each admitted by its breaker just before it is tried ([`Turn`]); after
//! each attempt its ending is reported (the breaker's verdict, the metrics, the cool-down of a 429: as the
//! failover policy, `upstream::policy`, rules) and one question answered: move on to the next upstream?
//! Failover never answers a request itself: the pipeline (`generate.rs`) calls the answering step for each
//! turn it is given.

use std::time::{Duration, Instant};

use super::outcome::Answer;
use super::prepared::Prepared;
use crate::config::{Model, Upstream};
use crate::gateway::trace::Trace;
use crate::gateway::Gateway;
use crate::protocol::request::Endpoint;
use crate::protocol::ApiError;
use crate::upstream::breaker::{Admit, BreakerStanding, Policy, Ticket};
use crate::upstream::policy;
use crate::upstream::routing::Busy;

/// The upstreams of one request, in the order they are tried.
pub(super) struct FailoverRoute<'c> {
    order: Vec<&'c Upstream>,
    /// Where the next turn starts in `order`.
    next: usize,
    /// Upstreams skipped because their breaker is open, with how long until they may be tried.
    skipped: Skipped<'c>,
}

/// One try at one upstream: admitted by its breaker, counted busy while it runs.
pub(super) struct Turn<'g, 'c> {
    pub upstream: &'c Upstream,
    ticket: Ticket<'g>,
    busy: Busy<'g>,
    started: Instant,
    /// Its place in the route.
    at: usize,
}

impl<'c> FailoverRoute<'c> {
    /// The route of `p`'s model: ready upstreams, then ejected ones (see `upstream::breaker`); those whose
    /// breaker is open are skipped.
    pub(super) fn plan(gw: &Gateway, p: &Prepared<'c>) -> Result<FailoverRoute<'c>, ApiError> {
        let (order, skipped) = plan(gw, p)?;
        Ok(FailoverRoute {
            order,
            next: 0,
            skipped,
        })
    }

    /// The next upstream to try, admitted just before it is tried (a probe granted here is reported by
    /// [`Route::after`], or given back when the turn is dropped); upstreams whose breaker says no now are
    /// skipped.
    pub(super) fn next<'g>(&mut self, gw: &'g Gateway) -> Option<Turn<'g, 'c>> {
        while let Some(&upstream) = self.order.get(self.next) {
            let at = self.next;
            self.next += 1;
            match gw.breakers.admit(&upstream.name) {
                Admit::Yes(ticket) => {
                    return Some(Turn {
                        upstream,
                        ticket,
                        busy: gw.routing.busy(&upstream.name),
                        started: Instant::now(),
                        at,
                    })
                }
                Admit::No(wait) => self.skipped.push((upstream, wait)),
            }
        }
        None
    }

    /// Reports how `turn` ended (`answer`; `started`: the client's answer had begun) and says whether the
    /// request moves on to the next upstream: only while nothing reached the client, the request was not
    /// cut, another upstream is left, and the policy says another upstream may not fail the same way.
    pub(super) fn after(
        &self,
        gw: &Gateway,
        turn: Turn,
        answer: &Answer,
        trace: &Trace,
        started: bool,
    ) -> bool {
        let Turn {
            upstream,
            ticket,
            busy,
            started: began,
            at,
        } = turn;
        drop(busy);
        let cut = trace.client_gone() || trace.cut_by_shutdown();
        let ended = answer.ended(cut);
        let rule = policy::rule(ended);
        let health = Policy {
            failures: upstream.breaker_failures,
            cooldown: upstream.breaker_cooldown,
        };
        let verdict = policy::verdict(ended, answer.error());
        gw.breakers.report(ticket, verdict, health);
        if rule.failure {
            gw.metrics.upstream_failed(&upstream.name);
        }
        if let Some(e) = answer.error().filter(|_| rule.cools) {
            let wait = policy::cool_down(e);
            log::info!(
                "upstream `{}` answered 429: no new requests to it for {} s",
                upstream.name,
                wait.as_secs()
            );
            gw.routing.cool(&upstream.name, wait);
        }
        let e = answer.owed_error();
        let move_on = rule.move_on && !started && at + 1 < self.order.len();
        match e.filter(|_| move_on) {
            Some(e) => {
                log::warn!(
                    "{}: upstream `{}` failed after {} ms ({} {}); trying the next one",
                    trace.request_id,
                    upstream.name,
                    began.elapsed().as_millis(),
                    e.status(),
                    e.operator_text()
                );
                true
            }
            None => false,
        }
    }

    /// 503 when no upstream of the model may be tried now: each was skipped because it stopped answering.
    pub(super) fn unavailable(&self, gw: &Gateway, model: &Model) -> ApiError {
        unavailable(gw, model, &self.skipped)
    }
}

type Skipped<'c> = Vec<(&'c Upstream, Duration)>;

/// The model's upstreams in the order they are tried (ready ones, then ejected ones), and those skipped
/// because their breaker is open, with how long until they may be tried.
fn plan<'c>(gw: &Gateway, p: &Prepared<'c>) -> Result<(Vec<&'c Upstream>, Skipped<'c>), ApiError> {
    let mut ready = Vec::new();
    let mut ejected = Vec::new();
    let mut skipped = Vec::new();
    let mut all = Vec::with_capacity(p.model.upstreams.len());
    for name in &p.model.upstreams {
        let Some(upstream) = p.config.upstream(name) else {
            return Err(ApiError::internal(format!(
                "model `{}` names an unknown upstream",
                p.model.name
            )));
        };
        all.push(upstream);
    }
    // An embeddings or text completions request goes only to upstreams that have the endpoint; when none
    // has it, to all (the answering step tells the client which endpoint the model serves).
    if all.iter().any(|u| answers(p.endpoint, u)) {
        all.retain(|u| answers(p.endpoint, u));
    }
    for upstream in all {
        match gw.breakers.standing(&upstream.name) {
            BreakerStanding::Ready => ready.push(upstream),
            BreakerStanding::Ejected => ejected.push(upstream),
            BreakerStanding::Skipped(wait) => skipped.push((upstream, wait)),
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

/// Whether an upstream of `u`'s kind has `endpoint`: every kind generates and counts tokens; embeddings need
/// a vendor that has them (the mock does), text completions an OpenAI-compatible kind.
fn answers(endpoint: Endpoint, u: &Upstream) -> bool {
    match u.kind.protocol() {
        _ if endpoint.generates() || endpoint.counts_tokens() => true,
        None => endpoint.embeds(),
        Some(p) if endpoint.embeds() => p.embedder.is_some(),
        Some(p) => p.completions.is_some(),
    }
}

/// The 503 of [`Route::unavailable`].
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
    .with_cause(crate::protocol::Cause::UpstreamUnavailable)
    .with_origin(crate::protocol::Origin::UpstreamSilent)
}
