//! The one failover policy. How an attempt at an upstream ended ([`Ended`], sorted by [`classify`]) decides,
//! by one table ([`rule`]): whether the request may move on to the model's next upstream, whether the
//! upstream cools down (gets no new request for a while, `routing.rs`) and for how long ([`cool_down`]), what
//! its breaker is told (`breaker.rs`), and whether it counts as the upstream's failure for the metrics and
//! the availability stats. It also says when a call that failed on a stale pooled connection is sent again
//! ([`resend_stale`]). Failover, the breakers, the routes, the stats and the HTTP client ask it; none of them
//! decides these by itself.

use std::time::Duration;

use super::breaker::HealthVerdict;
use crate::protocol::{ApiError, Origin};

/// How an attempt at an upstream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It answered, and the answer completed.
    Answered,
    /// The client left or shutdown cut it: nothing is learnt.
    Cut,
    /// Not called, for the upstream's own reason (it has no credential): another upstream may be called.
    Uncalled,
    /// Not called, or called and answered, but the gateway ended the attempt itself (a limit, its state,
    /// input it could not use): not the upstream's doing. `called`: the upstream had answered by then.
    Gateway { called: bool },
    /// No answer at all (no response head): unreachable, refused, silent past its first-byte timeout.
    Silent,
    /// An answer with a server error (5xx), or one the gateway cannot use.
    ServerError,
    /// An answer that started and then broke (its stream cut, an error in it, past its output limit).
    Broke,
    /// 429: alive, and it asks to wait.
    Limited,
    /// Another error answer (4xx, an error object): alive; the request is at fault.
    Refused,
}

/// What the breaker is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// It answered.
    Success,
    /// It answered, with an error that says nothing of its health.
    Alive,
    /// It answered with a failure of its own.
    Erroring,
    /// It did not answer.
    Silent,
    /// Nothing is learnt.
    Nothing,
}

/// What an ending means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Another upstream may not fail the same way: the request moves on to the next one (if there is one
    /// and nothing reached the client yet).
    pub move_on: bool,
    /// The upstream gets no new request until its `retry-after` (see [`cool_down`]).
    pub cools: bool,
    /// What its breaker is told.
    pub health: Health,
    /// It counts as the upstream's failure (`tollgate_upstream_errors_total`, the availability stats).
    pub failure: bool,
}

/// The table.
pub(crate) fn rule(ended: Ended) -> Rule {
    use Health::*;
    // Each row: (move on, cools, what the breaker is told, a failure of the upstream's).
    let (move_on, cools, health, failure) = match ended {
        Ended::Answered => (false, false, Success, false),
        Ended::Cut => (false, false, Nothing, false),
        Ended::Uncalled => (true, false, Nothing, false),
        Ended::Gateway { called: false } => (false, false, Nothing, false),
        Ended::Gateway { called: true } => (false, false, Alive, false),
        Ended::Silent => (true, false, Silent, true),
        Ended::ServerError => (true, false, Erroring, true),
        Ended::Broke => (false, false, Erroring, true),
        Ended::Limited => (true, true, Alive, false),
        Ended::Refused => (false, false, Alive, false),
    };
    Rule {
        move_on,
        cools,
        health,
        failure,
    }
}

/// What is known of an attempt when it ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts<'a> {
    /// It reached its upstream (a request was sent, or the built-in model had it).
    pub called: bool,
    /// The client went away, or the request was cut (client gone, shutdown).
    pub cut: bool,
    /// The status of the answer as the client got it (200: the answer had started).
    pub status: u16,
    pub error: Option<&'a ApiError>,
}

/// How an attempt ended, from what is known of it.
pub(crate) fn classify(f: Facts) -> Ended {
    if f.cut {
        return Ended::Cut;
    }
    let Some(e) = f.error else {
        return if f.called {
            Ended::Answered
        } else {
            Ended::Cut
        };
    };
    if !e.is_upstream() {
        return Ended::Gateway { called: f.called };
    }
    if e.origin() == Origin::UpstreamSilent {
        return Ended::Silent;
    }
    match (f.called, f.status, e.status()) {
        (false, _, _) => Ended::Uncalled,
        (true, 200, _) => Ended::Broke,
        (true, _, 429) => Ended::Limited,
        (true, _, s) if s >= 500 => Ended::ServerError,
        _ => Ended::Refused,
    }
}

/// What the breaker is told of an attempt that ended so (with its error).
pub(crate) fn verdict(ended: Ended, error: Option<&ApiError>) -> HealthVerdict {
    let why = || error.map(|e| e.message().to_string()).unwrap_or_default();
    match rule(ended).health {
        Health::Success => HealthVerdict::Success,
        Health::Alive => HealthVerdict::Alive,
        Health::Erroring => HealthVerdict::Erroring(why()),
        Health::Silent => HealthVerdict::Silent(why()),
        Health::Nothing => HealthVerdict::Inconclusive,
    }
}

/// The cool-down of a 429 that named no `retry-after`.
pub(crate) const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(5);

/// How long an upstream that answered `error` (a 429) gets no new request: its `retry-after`, or
/// [`DEFAULT_COOL_DOWN`].
pub(crate) fn cool_down(error: &ApiError) -> Duration {
    error
        .retry_after()
        .map_or(DEFAULT_COOL_DOWN, Duration::from_secs)
}

/// Sends after the first that failed on a pooled connection the upstream had closed while it sat idle.
pub(crate) const STALE_RETRIES: u32 = 3;

/// Whether a call that failed with `e` is sent again (`tries`: sends again so far; `safe`: nothing of the
/// answer came back, so the upstream cannot have taken it, `tap::Attempt::safe_to_retry`): only a stale
/// pooled connection, never after a timeout, never when a new connection failed.
pub(crate) fn resend_stale(tries: u32, e: &ureq::Error, safe: bool) -> bool {
    let fresh_failure = matches!(
        e,
        ureq::Error::Timeout(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound
    );
    tries < STALE_RETRIES && !fresh_failure && safe
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(called: bool, status: u16, error: Option<&ApiError>) -> Facts<'_> {
        Facts {
            called,
            cut: false,
            status,
            error,
        }
    }

    #[test]
    fn each_ending_is_sorted() {
        let silent = ApiError::bad_gateway("unreachable").unanswered();
        assert_eq!(classify(facts(true, 502, Some(&silent))), Ended::Silent);
        let five = ApiError::from_upstream(500, b"{}", None);
        assert_eq!(classify(facts(true, 500, Some(&five))), Ended::ServerError);
        let broke = ApiError::bad_gateway("stream broke");
        assert_eq!(classify(facts(true, 200, Some(&broke))), Ended::Broke);
        let limited = ApiError::from_upstream(429, b"{}", Some(3));
        assert_eq!(classify(facts(true, 429, Some(&limited))), Ended::Limited);
        let bad = ApiError::from_upstream(400, b"{}", None);
        assert_eq!(classify(facts(true, 400, Some(&bad))), Ended::Refused);
        let ours = ApiError::record_not_synced();
        assert_eq!(
            classify(facts(true, 503, Some(&ours))),
            Ended::Gateway { called: true }
        );
        let no_key = ApiError::bad_gateway("no credential");
        assert_eq!(classify(facts(false, 502, Some(&no_key))), Ended::Uncalled);
        assert_eq!(classify(facts(true, 200, None)), Ended::Answered);
        let cut = Facts {
            cut: true,
            ..facts(true, 500, Some(&five))
        };
        assert_eq!(classify(cut), Ended::Cut);
    }

    #[test]
    fn the_table() {
        // Only the upstream's own failures move on; a 429 moves on too, and cools the upstream.
        for (e, moves) in [
            (Ended::Silent, true),
            (Ended::ServerError, true),
            (Ended::Limited, true),
            (Ended::Uncalled, true),
            (Ended::Refused, false),
            (Ended::Broke, false),
            (Ended::Gateway { called: true }, false),
            (Ended::Cut, false),
        ] {
            assert_eq!(rule(e).move_on, moves, "{e:?}");
        }
        assert!(rule(Ended::Limited).cools);
        assert!(!rule(Ended::ServerError).cools);
        // A 429 is no failure and keeps the breaker closed; silence and errors count.
        assert!(!rule(Ended::Limited).failure);
        assert!(rule(Ended::Broke).failure && rule(Ended::Silent).failure);
        let five = ApiError::from_upstream(500, b"{}", None);
        assert!(matches!(
            verdict(Ended::ServerError, Some(&five)),
            HealthVerdict::Erroring(_)
        ));
        assert!(matches!(
            verdict(Ended::Silent, None),
            HealthVerdict::Silent(_)
        ));
        assert_eq!(verdict(Ended::Limited, None), HealthVerdict::Alive);
        assert_eq!(verdict(Ended::Refused, None), HealthVerdict::Alive);
        assert_eq!(verdict(Ended::Cut, None), HealthVerdict::Inconclusive);
        assert_eq!(verdict(Ended::Uncalled, None), HealthVerdict::Inconclusive);
        assert_eq!(
            cool_down(&ApiError::from_upstream(429, b"{}", Some(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            cool_down(&ApiError::from_upstream(429, b"{}", None)),
            DEFAULT_COOL_DOWN
        );
    }

    #[test]
    fn only_a_stale_connection_is_sent_again() {
        let closed = ureq::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(resend_stale(0, &closed, true));
        assert!(!resend_stale(0, &closed, false), "an answer began");
        assert!(!resend_stale(STALE_RETRIES, &closed, true));
        assert!(!resend_stale(0, &ureq::Error::ConnectionFailed, true));
        assert!(!resend_stale(0, &ureq::Error::HostNotFound, true));
    }
}
