//! Where a key stands at admission, and the one judgement made of it: the `x-ratelimit-*` headers and, when
//! the request is refused, the 429 that names the limit. Both account keepers fill in a [`Standing`] (the
//! in-process one in `access/accounts.rs`, the shared store's admission script through
//! `store/accounts.rs`), so a key gets the same headers and the same messages on one instance and on many.

use std::time::Duration;

use crate::budget::Budget;
use crate::money::Money;
use crate::protocol::{ApiError, Cause, ErrorKind, Origin};

/// Which check refused a request (checked in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every check passed: the request is admitted.
    Admitted,
    /// The key has used its group's requests-per-minute limit (`rpm`).
    Rpm,
    /// This request's estimated tokens would take the key over its group's tokens-per-minute limit (`tpm`).
    Tpm,
    /// The key already has its group's `max_concurrent` requests in flight.
    Concurrency,
    /// The key's credit is used up (spent plus reserved reaches it).
    Credit,
    /// The spend budget of the current period is used up (spent in the period plus reserved reaches it).
    Budget,
    /// The store holds the key revoked, deleted or not at all (another instance changed it a moment ago;
    /// this instance's copy of the keys has not caught up yet).
    Revoked,
    /// The store holds the key expired.
    Expired,
}

impl Verdict {
    /// The verdict the admission script returns as a number (an unknown one refuses: a script of another
    /// version never admits by mistake).
    pub fn from_code(code: i64) -> Verdict {
        match code {
            0 => Verdict::Admitted,
            1 => Verdict::Rpm,
            2 => Verdict::Tpm,
            3 => Verdict::Concurrency,
            4 => Verdict::Credit,
            5 => Verdict::Budget,
            6 => Verdict::Revoked,
            7 => Verdict::Expired,
            _ => Verdict::Revoked,
        }
    }
}

/// A key's numbers at the moment of admission (before this request is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Which check refused the request, or [`Verdict::Admitted`].
    pub verdict: Verdict,
    /// Requests admitted in the last minute.
    pub rpm_used: u64,
    /// How long until the oldest of those requests leaves the window.
    pub rpm_reset: Duration,
    /// Tokens charged in the last minute.
    pub tpm_used: u64,
    /// How long until the oldest of those tokens leave the window.
    pub tpm_reset: Duration,
    /// When refused for tokens: how long until enough leave the window for this request to fit.
    pub tpm_wait: Duration,
    /// Settled spend in all.
    pub spent: Money,
    /// Settled spend in the budget's current period.
    pub period_spent: Money,
}

/// The limits a request is held to (from its key's group) and what it asks for.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests per minute (the group's `rpm`; `None`: no limit).
    pub rpm: Option<u64>,
    /// Tokens per minute (the group's `tpm`; `None`: no limit).
    pub tpm: Option<u64>,
    /// Requests in flight at once (the group's `max_concurrent`; `None`: no limit).
    pub max_concurrent: Option<u64>,
    /// The key's credit (`None`: unlimited).
    pub credit: Option<Money>,
    /// The spend budget in force (the key's, else its group's).
    pub budget: Option<Budget>,
    /// Tokens estimated for the request (input plus requested output).
    pub tokens: u64,
    /// Now, in Unix seconds (budget periods are calendar periods in UTC).
    pub now: u64,
}

/// Rate-limit state to report in `x-ratelimit-*` headers.
#[derive(Debug, Clone, Default)]
pub struct RateInfo {
    /// The `x-ratelimit-*` headers (name, value) to add to the answer.
    pub headers: Vec<(String, String)>,
}

fn reset_str(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 {
        format!("{}m{}s", (s / 60.0) as u64, (s % 60.0).ceil() as u64)
    } else if s >= 1.0 {
        format!("{}s", s.ceil() as u64)
    } else {
        format!("{}ms", (s * 1000.0).ceil() as u64)
    }
}

/// The headers for a standing, and the refusal when its verdict is one.
pub fn judge(limits: &Limits, s: &Standing) -> Result<RateInfo, (ApiError, RateInfo)> {
    let mut info = RateInfo::default();
    if let Some(limit) = limits.rpm {
        info.headers
            .push(("x-ratelimit-limit-requests".into(), limit.to_string()));
        info.headers.push((
            "x-ratelimit-remaining-requests".into(),
            limit.saturating_sub(s.rpm_used + 1).to_string(),
        ));
        info.headers
            .push(("x-ratelimit-reset-requests".into(), reset_str(s.rpm_reset)));
    }
    if let Some(limit) = limits.tpm {
        info.headers
            .push(("x-ratelimit-limit-tokens".into(), limit.to_string()));
        info.headers.push((
            "x-ratelimit-remaining-tokens".into(),
            limit.saturating_sub(s.tpm_used).to_string(),
        ));
        info.headers
            .push(("x-ratelimit-reset-tokens".into(), reset_str(s.tpm_reset)));
    }
    let refused = match s.verdict {
        Verdict::Admitted => return Ok(info),
        Verdict::Revoked => {
            ApiError::unauthorized("This API key has been revoked. Ask the operator for a new key.")
        }
        Verdict::Expired => ApiError::unauthorized(
            "This API key has expired. Ask the operator to extend it or for a new key.",
        )
        .with_cause(Cause::KeyExpired),
        Verdict::Rpm => rate_error(
            format!(
                "the requests-per-minute limit of {} for this key",
                limits.rpm.unwrap_or(0)
            ),
            s.rpm_reset,
        ),
        Verdict::Tpm => {
            let limit = limits.tpm.unwrap_or(0);
            let what = if limits.tokens > limit {
                format!(
                    "the tokens-per-minute limit of {limit} for this key (this request alone is estimated at {} tokens)",
                    limits.tokens
                )
            } else {
                format!("the tokens-per-minute limit of {limit} for this key")
            };
            rate_error(what, s.tpm_wait)
        }
        Verdict::Concurrency => rate_error(
            format!(
                "the limit of {} concurrent requests for this key",
                limits.max_concurrent.unwrap_or(0)
            ),
            Duration::from_secs(1),
        ),
        Verdict::Credit => credit_error(limits.credit.unwrap_or(Money::ZERO), s.spent),
        Verdict::Budget => match limits.budget {
            Some(b) => budget_error(&b, s.period_spent, limits.now),
            None => ApiError::internal("budget verdict without a budget"),
        },
    };
    Err((refused, info))
}

fn rate_error(what: String, wait: Duration) -> ApiError {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    ApiError::new(
        429,
        ErrorKind::RateLimit,
        format!("Rate limit reached: {what}. Retry in {secs} s."),
    )
    .with_cause(Cause::RateLimitExceeded)
    .with_origin(Origin::RateLimit)
    .with_retry_after(secs)
}

fn credit_error(credit: Money, spent: Money) -> ApiError {
    ApiError::new(
        429,
        ErrorKind::InsufficientQuota,
        format!(
            "You exceeded your current quota: this key's balance is used up (credit {credit}, spent {spent}). \
             Check the balance in the console or ask the operator to top it up."
        ),
    )
    .with_cause(Cause::InsufficientQuota)
    .with_origin(Origin::Quota)
}

/// The 429 of a budget used up: it names the budget and when it resets (`retry-after`).
fn budget_error(b: &Budget, spent: Money, now: u64) -> ApiError {
    let start = b.period.start_of(now);
    let resets = b.period.end_of(start);
    ApiError::new(
        429,
        ErrorKind::InsufficientQuota,
        format!(
            "You exceeded your current quota: this key's {} budget of {} credits is used up ({} spent since {}). \
             It resets at {}.",
            b.period.name(),
            b.amount,
            spent,
            crate::util::rfc3339(start),
            crate::util::rfc3339(resets)
        ),
    )
    .with_cause(Cause::InsufficientQuota)
    .with_origin(Origin::Quota)
    .with_retry_after(resets.saturating_sub(now).max(1))
}
