//! The second stage of every request to a model: admission. The gateway is not past its shutdown deadline,
//! the ledger takes records, and the key's limits and balance allow the request's worst case: its estimated
//! input, the output limit its upstream requests will carry, its paid hosted features (reserved until the
//! request is settled, `accounting.rs`). Token counting is held to the rate and concurrency limits only (it
//! costs nothing against the balance).

use super::prepared::Prepared;
use crate::access::accounts::{Ask, RateInfo, Reservation};
use crate::config::Group;
use crate::gateway::Gateway;
use crate::money::Money;
use crate::protocol::{ApiError, Origin};

/// What admission decided, and the rate-limit headers every answer to the request carries.
pub(super) struct Admission {
    pub reservation: Result<Reservation, ApiError>,
    /// `x-ratelimit-*` (None: admission did not get as far as the key's limits).
    pub headers: Option<Vec<(String, String)>>,
}

/// Admits `p` (`id`: its request id) or refuses it, counting the refusal in the metrics. `hit`: it is
/// answered from the answer cache, so it is held to the key's request rate and concurrency only (it costs
/// nothing and uses no tokens).
pub(super) fn admit(gw: &Gateway, p: &Prepared, id: &str, hit: bool) -> Admission {
    if gw.watchdog.is_shut_down() {
        return refused(ApiError::shutting_down());
    }
    if !gw.ledger.accepting() {
        gw.metrics.count(&gw.metrics.ledger_refused);
        return refused(ApiError::ledger_unavailable(gw.ledger.backlog()));
    }
    let requests_only;
    let ask = if hit {
        // The group's limits without its token limit and budget.
        requests_only = p.config.group(&p.identity.group).map(|g| Group {
            tpm: None,
            budget: None,
            ..g.clone()
        });
        Ask {
            credit: None,
            group: requests_only.as_ref(),
            tokens: 0,
            cost: Money::ZERO,
            budget: None,
            ..ask(p, id)
        }
    } else {
        ask(p, id)
    };
    let admitted = p
        .asked
        .hosted
        .affordable(&gw.accounts, &p.identity, p.budget())
        .map_err(|e| (e, RateInfo::default()))
        .and_then(|()| gw.accounts.check_and_reserve(&ask));
    let (reservation, info) = match admitted {
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
    Admission {
        reservation,
        headers: Some(info.headers),
    }
}

fn refused(e: ApiError) -> Admission {
    Admission {
        reservation: Err(e),
        headers: None,
    }
}

/// What is reserved: the estimated input and the output limit its upstream requests carry, at the worst
/// case of the model's prices, plus the paid hosted features.
fn ask<'p>(p: &'p Prepared, id: &'p str) -> Ask<'p> {
    let input = p.input_estimate();
    let group = p.config.group(&p.identity.group);
    let key = &p.identity.name;
    let now = crate::util::unix_now();
    if p.endpoint.counts_tokens() {
        return Ask {
            key,
            id,
            credit: None,
            group,
            tokens: input,
            cost: Money::ZERO,
            budget: None,
            now,
        };
    }
    // The worst case: at the tier the estimated input falls in, every input token at the dearest input
    // kind (a request may write all of it to a cache).
    let worst = p.model.prices.worst_case(input, p.reserved_output(), now);
    let worst = p.asked.hosted.surcharged(worst);
    // Token counts saturate: a limit near 2^64 is a huge request, never a small one by wrap-around.
    let requested = p.requested_output.unwrap_or(0).saturating_mul(p.choices);
    Ask {
        key,
        id,
        credit: p.identity.credit,
        group,
        tokens: input.saturating_add(requested),
        cost: worst + p.asked.hosted.reserved(),
        budget: p.budget(),
        now,
    }
}
