//! Balances and rate limits per key, behind two calls: `check_and_reserve` at admission (before any
//! upstream call) and `settle` when the request is done. The in-process implementation is the default; a
//! shared store can take its place for several instances without touching the request path.
//!
//! Balances: balance = credit − spent, and a request is admitted only while balance − reservations of the
//! key's requests in flight is above zero. Each admitted request reserves its worst case (estimated input
//! plus its output limit, at the model's prices), so concurrent requests can overspend a balance by at most
//! the worst-case cost of the requests admitted while it was still positive beyond their reservations: in
//! practice one request's worst case (plus any error in the input estimate).
//!
//! Rate limits (per key, from its group): requests per minute and tokens per minute over a sliding
//! 60-second window, and requests in flight. Tokens are estimated at admission and corrected with the real
//! usage when the request settles.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::budget::{Budget, Period, PeriodSpend};
use crate::config::Group;
use crate::money::Money;
use crate::protocol::{ApiError, ErrorKind, Origin};

const WINDOW: Duration = Duration::from_secs(60);

#[derive(Default)]
struct KeyState {
    spent: Money,
    /// Spend in the current day, week and month (for budgets).
    periods: PeriodSpend,
    /// When the key last made a request that settled (RFC 3339).
    last_used: Option<String>,
    reserved: Money,
    in_flight: u64,
    /// Admission times in the last minute.
    requests: VecDeque<Instant>,
    /// (time, tokens) charged in the last minute.
    tokens: VecDeque<(Instant, u64)>,
    /// The sum of `tokens`, kept as entries come and go.
    tokens_total: u64,
}

impl KeyState {
    fn prune(&mut self, now: Instant) {
        while self
            .requests
            .front()
            .is_some_and(|t| now.duration_since(*t) >= WINDOW)
        {
            self.requests.pop_front();
        }
        while self
            .tokens
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= WINDOW)
        {
            if let Some((_, n)) = self.tokens.pop_front() {
                self.tokens_total -= n;
            }
        }
    }

    fn tokens_in_window(&self) -> u64 {
        self.tokens_total
    }
}

/// What one admitted request holds until it settles. Dropped unsettled (a panic), it is released.
pub struct Reservation {
    accounts: Arc<Accounts>,
    key: String,
    cost: Money,
    tokens: u64,
    at: Instant,
    /// When it was admitted (Unix seconds): its cost counts in the budget periods of that moment.
    unix_at: u64,
    settled: bool,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Reservation({}, {} credits, {} tokens)",
            self.key, self.cost, self.tokens
        )
    }
}

impl Reservation {
    /// Ends the request: releases the reservation, charges the actual cost, and corrects its token count
    /// in the rate window to the real usage.
    pub fn settle(mut self, actual_cost: Money, actual_tokens: u64) {
        self.settled = true;
        self.accounts
            .settle_parts(&self, actual_cost, actual_tokens);
    }

    /// Releases the reservation without charging (the request never reached an upstream).
    pub fn release(self) {
        self.settle(Money::ZERO, 0);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            self.accounts.settle_parts(self, Money::ZERO, 0);
        }
    }
}

/// Rate-limit state to report in `x-ratelimit-*` headers.
#[derive(Debug, Clone, Default)]
pub struct RateInfo {
    pub headers: Vec<(String, String)>,
}

/// Balances and limits of every key.
pub struct Accounts {
    keys: Mutex<HashMap<String, KeyState>>,
}

/// What a request asks for at admission.
pub struct Ask<'a> {
    pub key: &'a str,
    /// The key's credit (None: unlimited).
    pub credit: Option<Money>,
    pub group: Option<&'a Group>,
    /// Tokens estimated for rate limiting (input plus requested output).
    pub tokens: u64,
    /// Worst-case cost to reserve against the balance.
    pub cost: Money,
    /// The spend budget in force (the key's, else its group's).
    pub budget: Option<Budget>,
    /// Now, in Unix seconds (budget periods are calendar periods in UTC).
    pub now: u64,
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

/// Whether a budget has room left in its current period: its amount minus what was spent in the period and
/// what requests in flight reserved. When not, the 429 names the budget and when it resets (`retry-after`).
fn budget_left(st: &mut KeyState, b: &Budget, now: u64) -> Result<(), ApiError> {
    st.periods.roll(now);
    let spent = st.periods.spent(b.period, now);
    if b.amount - spent - st.reserved > Money::ZERO {
        return Ok(());
    }
    let start = b.period.start_of(now);
    let resets = b.period.end_of(start);
    let err = ApiError::new(
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
    .with_code("insufficient_quota")
    .with_origin(Origin::Quota)
    .with_retry_after(resets.saturating_sub(now).max(1));
    Err(err)
}

impl Accounts {
    /// Starts from the spend replayed from the ledger: in all, and in the periods holding the replay time.
    pub fn new(
        spent: HashMap<String, Money>,
        periods: HashMap<String, PeriodSpend>,
        last_used: HashMap<String, String>,
    ) -> Accounts {
        let mut keys: HashMap<String, KeyState> = spent
            .into_iter()
            .map(|(k, s)| {
                (
                    k,
                    KeyState {
                        spent: s,
                        ..KeyState::default()
                    },
                )
            })
            .collect();
        for (k, p) in periods {
            keys.entry(k).or_default().periods = p;
        }
        for (k, t) in last_used {
            keys.entry(k).or_default().last_used = Some(t);
        }
        Accounts {
            keys: Mutex::new(keys),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyState>> {
        match self.keys.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Total spent by a key so far (settled requests).
    pub fn spent(&self, key: &str) -> Money {
        self.lock().get(key).map_or(Money::ZERO, |s| s.spent)
    }

    /// Notes that a key made a request now (one refused before it reserved anything).
    pub fn touch(&self, key: &str) {
        let now = crate::util::rfc3339_millis(crate::util::unix_millis());
        self.lock().entry(key.to_string()).or_default().last_used = Some(now);
    }

    /// When a key last made a request (one that settled, refusals included), RFC 3339.
    pub fn last_used(&self, key: &str) -> Option<String> {
        self.lock().get(key).and_then(|s| s.last_used.clone())
    }

    /// Spent by a key in the `period` that holds `now` (settled requests).
    pub fn period_spent(&self, key: &str, period: Period, now: u64) -> Money {
        self.lock()
            .get(key)
            .map_or(Money::ZERO, |s| s.periods.spent(period, now))
    }

    /// Admits a request or says why not (429 with `retry-after` and rate-limit headers), reserving its
    /// worst-case cost and its estimated tokens.
    pub fn check_and_reserve(
        self: &Arc<Self>,
        ask: &Ask,
    ) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
        let now = Instant::now();
        let mut keys = self.lock();
        if !keys.contains_key(ask.key) {
            keys.insert(ask.key.to_string(), KeyState::default());
        }
        let Some(st) = keys.get_mut(ask.key) else {
            return Err((ApiError::internal("accounts"), RateInfo::default()));
        };
        st.prune(now);
        let mut info = RateInfo::default();
        let (rpm, tpm, conc) = match ask.group {
            Some(g) => (g.rpm, g.tpm, g.max_concurrent),
            None => (None, None, None),
        };
        let mut refused: Option<(String, Duration)> = None;
        if let Some(limit) = rpm {
            let used = st.requests.len() as u64;
            let reset = st.requests.front().map_or(Duration::ZERO, |t| {
                WINDOW.saturating_sub(now.duration_since(*t))
            });
            info.headers
                .push(("x-ratelimit-limit-requests".into(), limit.to_string()));
            info.headers.push((
                "x-ratelimit-remaining-requests".into(),
                limit.saturating_sub(used + 1).to_string(),
            ));
            info.headers
                .push(("x-ratelimit-reset-requests".into(), reset_str(reset)));
            if used >= limit {
                refused = Some((
                    format!("the requests-per-minute limit of {limit} for this key"),
                    reset,
                ));
            }
        }
        if let Some(limit) = tpm {
            let used = st.tokens_in_window();
            // The earliest time enough tokens leave the window for this request to fit.
            let mut wait = Duration::ZERO;
            if used + ask.tokens > limit {
                let mut freed = 0;
                for (t, n) in &st.tokens {
                    freed += n;
                    if used - freed + ask.tokens <= limit {
                        wait = WINDOW.saturating_sub(now.duration_since(*t));
                        break;
                    }
                }
                if wait.is_zero() {
                    wait = WINDOW;
                }
            }
            let reset = st.tokens.front().map_or(Duration::ZERO, |(t, _)| {
                WINDOW.saturating_sub(now.duration_since(*t))
            });
            info.headers
                .push(("x-ratelimit-limit-tokens".into(), limit.to_string()));
            info.headers.push((
                "x-ratelimit-remaining-tokens".into(),
                limit.saturating_sub(used).to_string(),
            ));
            info.headers
                .push(("x-ratelimit-reset-tokens".into(), reset_str(reset)));
            if refused.is_none() && used + ask.tokens > limit {
                let what = if ask.tokens > limit {
                    format!(
                        "the tokens-per-minute limit of {limit} for this key (this request alone is estimated at {} tokens)",
                        ask.tokens
                    )
                } else {
                    format!("the tokens-per-minute limit of {limit} for this key")
                };
                refused = Some((what, wait));
            }
        }
        if let Some(limit) = conc {
            if refused.is_none() && st.in_flight >= limit {
                refused = Some((
                    format!("the limit of {limit} concurrent requests for this key"),
                    Duration::from_secs(1),
                ));
            }
        }
        if let Some((what, wait)) = refused {
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            let err = ApiError::new(
                429,
                ErrorKind::RateLimit,
                format!("Rate limit reached: {what}. Retry in {secs} s."),
            )
            .with_code("rate_limit_exceeded")
            .with_origin(Origin::RateLimit)
            .with_retry_after(secs);
            return Err((err, info));
        }
        if let Some(credit) = ask.credit {
            let available = credit - st.spent - st.reserved;
            if available <= Money::ZERO {
                let err = ApiError::new(
                    429,
                    ErrorKind::InsufficientQuota,
                    format!(
                        "You exceeded your current quota: this key's balance is used up (credit {credit}, spent {}). \
                         Check the balance in the console or ask the operator to top it up.",
                        st.spent
                    ),
                )
                .with_code("insufficient_quota")
                .with_origin(Origin::Quota);
                return Err((err, info));
            }
        }
        if let Some(b) = ask.budget {
            if let Err(err) = budget_left(st, &b, ask.now) {
                return Err((err, info));
            }
        }
        // The windows are kept only for keys with limits on them.
        if rpm.is_some() {
            st.requests.push_back(now);
        }
        if tpm.is_some() {
            st.tokens.push_back((now, ask.tokens));
            st.tokens_total += ask.tokens;
        }
        st.reserved += ask.cost;
        st.in_flight += 1;
        let res = Reservation {
            accounts: self.clone(),
            key: ask.key.to_string(),
            cost: ask.cost,
            tokens: ask.tokens,
            at: now,
            unix_at: ask.now,
            settled: false,
        };
        Ok((res, info))
    }

    fn settle_parts(&self, r: &Reservation, actual_cost: Money, actual_tokens: u64) {
        let (key, reserved, tokens, at) = (r.key.as_str(), r.cost, r.tokens, r.at);
        let mut keys = self.lock();
        let Some(st) = keys.get_mut(key) else { return };
        st.reserved = (st.reserved - reserved).max(Money::ZERO);
        st.spent += actual_cost;
        st.periods.add(r.unix_at, actual_cost);
        st.last_used = Some(crate::util::rfc3339_millis(crate::util::unix_millis()));
        st.in_flight = st.in_flight.saturating_sub(1);
        // Recent entries are at the back.
        if let Some(entry) = st
            .tokens
            .iter_mut()
            .rev()
            .find(|(t, n)| *t == at && *n == tokens)
        {
            entry.1 = actual_tokens;
            st.tokens_total = st.tokens_total - tokens + actual_tokens;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(rpm: Option<u64>, tpm: Option<u64>, conc: Option<u64>) -> Group {
        Group {
            name: "g".into(),
            models: vec!["*".into()],
            rpm,
            tpm,
            max_concurrent: conc,
            budget: None,
        }
    }

    fn m(v: f64) -> Money {
        Money::from_f64(v).unwrap()
    }

    fn ask<'a>(g: &'a Group, credit: Option<f64>, tokens: u64, cost: f64) -> Ask<'a> {
        Ask {
            key: "k",
            credit: credit.map(m),
            group: Some(g),
            tokens,
            cost: m(cost),
            budget: None,
            now: 0,
        }
    }

    /// A daily budget across midnight UTC, with the clock given (no sleeping).
    #[test]
    fn a_budget_resets_with_its_period() {
        let a = Arc::new(Accounts::new(
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        ));
        let g = group(None, None, None);
        let day1 = crate::util::parse_rfc3339("2026-11-24T23:59:00Z").unwrap();
        let budget = Budget::new(m(1.0), "daily").unwrap();
        let at = |now| Ask {
            budget: Some(budget),
            now,
            ..ask(&g, None, 1, 0.5)
        };
        let (r, _) = a.check_and_reserve(&at(day1)).unwrap();
        r.settle(m(1.0), 10);
        assert_eq!(a.period_spent("k", Period::Daily, day1), m(1.0));
        let (err, _) = a.check_and_reserve(&at(day1 + 30)).unwrap_err();
        assert_eq!(err.status(), 429);
        assert_eq!(err.code(), Some("insufficient_quota"));
        assert_eq!(err.retry_after(), Some(30), "until midnight");
        assert!(
            err.message().contains("daily budget of 1"),
            "{}",
            err.message()
        );
        assert!(
            err.message().contains("resets at 2026-11-25T00:00:00Z"),
            "{}",
            err.message()
        );
        // After midnight the new day's budget is whole again; the week still counts yesterday's spend.
        let day2 = day1 + 61;
        let (r, _) = a.check_and_reserve(&at(day2)).unwrap();
        r.settle(m(0.25), 10);
        assert_eq!(a.period_spent("k", Period::Daily, day2), m(0.25));
        assert_eq!(a.period_spent("k", Period::Weekly, day2), m(1.25));
        // Requests in flight count against the budget too.
        let (_held, _) = a
            .check_and_reserve(&Ask {
                cost: m(0.75),
                ..at(day2)
            })
            .unwrap();
        assert!(a.check_and_reserve(&at(day2)).is_err());
    }

    #[test]
    fn rpm_refuses_with_retry_after_and_names_the_limit() {
        let a = Arc::new(Accounts::new(
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        ));
        let g = group(Some(2), None, None);
        let (r1, info) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap();
        assert!(info
            .headers
            .iter()
            .any(|(k, v)| k == "x-ratelimit-remaining-requests" && v == "1"));
        let (r2, _) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap();
        let (err, info) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap_err();
        assert_eq!(err.status(), 429);
        assert!(err.message().contains("requests-per-minute limit of 2"));
        assert!((1..=60).contains(&err.retry_after().unwrap()));
        assert!(info
            .headers
            .iter()
            .any(|(k, _)| k == "x-ratelimit-reset-requests"));
        r1.settle(Money::ZERO, 1);
        r2.settle(Money::ZERO, 1);
    }

    #[test]
    fn tpm_is_corrected_by_real_usage() {
        let a = Arc::new(Accounts::new(
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        ));
        let g = group(None, Some(100), None);
        let (r, _) = a.check_and_reserve(&ask(&g, None, 90, 0.0)).unwrap();
        assert!(a.check_and_reserve(&ask(&g, None, 20, 0.0)).is_err());
        r.settle(Money::ZERO, 10); // it really used 10
        let (r, _) = a.check_and_reserve(&ask(&g, None, 20, 0.0)).unwrap();
        r.settle(Money::ZERO, 20);
    }

    #[test]
    fn concurrency_limit() {
        let a = Arc::new(Accounts::new(
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        ));
        let g = group(None, None, Some(1));
        let (r, _) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap();
        let (err, _) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap_err();
        assert!(err.message().contains("concurrent"));
        r.settle(Money::ZERO, 1);
        let (r, _) = a.check_and_reserve(&ask(&g, None, 1, 0.0)).unwrap();
        r.settle(Money::ZERO, 1);
    }

    #[test]
    fn balance_with_reservations_bounds_overspend() {
        let mut spent = HashMap::new();
        spent.insert("k".to_string(), m(9.0));
        let a = Arc::new(Accounts::new(spent, HashMap::new(), HashMap::new()));
        let g = group(None, None, None);
        // 1 credit left; each request reserves 0.6 worst case.
        let (r1, _) = a.check_and_reserve(&ask(&g, Some(10.0), 1, 0.6)).unwrap();
        let (r2, _) = a.check_and_reserve(&ask(&g, Some(10.0), 1, 0.6)).unwrap();
        let (err, _) = a
            .check_and_reserve(&ask(&g, Some(10.0), 1, 0.6))
            .unwrap_err();
        assert_eq!(err.code(), Some("insufficient_quota"));
        assert!(err.message().contains("balance"));
        r1.settle(m(0.5), 1);
        r2.settle(m(0.5), 1);
        assert_eq!(a.spent("k"), m(10.0));
        assert!(a.check_and_reserve(&ask(&g, Some(10.0), 1, 0.6)).is_err());
        let (r, _) = a.check_and_reserve(&ask(&g, Some(10.5), 1, 0.6)).unwrap();
        r.release();
    }
}
