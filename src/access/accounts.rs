//! Balances and rate limits per key, behind two calls: `check_and_reserve` at admission (before any
//! upstream call) and `settle` when the request is done. The in-process implementation is the default; with
//! a `[store]` the same rules run as atomic scripts in the shared Redis (`store/accounts.rs`), so the
//! request path does not know which it has.
//!
//! Balances: balance = credit − spent, and a request is admitted only while balance − reservations of the
//! key's requests in flight is above zero. Each admitted request reserves its worst case (estimated input
//! plus its output limit, at the model's prices), so concurrent requests can overspend a balance by at most
//! the worst-case cost of the requests admitted while it was still positive beyond their reservations: in
//! practice one request's worst case (plus any error in the input estimate). With a store the reservation
//! and the check are one atomic step on the server, so the same bound holds for all instances together; the
//! credit, the key's own budget, its expiry and whether it is revoked are then read there too, from the
//! key's record in force (`store/lua/admit.lua`), never from this instance's copy of the keys: a credit cut,
//! a budget changed, an expiry brought forward or a revocation on one instance holds on every other at its
//! next admission of the key. One case waits for the copy to follow (within a quarter of a second): a key
//! this instance holds to no credit or budget at all is not judged against one (its requests go upstream
//! with no output limit, and without any group limit they make no store call), so a first credit or budget
//! set on such a key elsewhere applies here from then.
//!
//! Rate limits (per key, from its group): requests per minute and tokens per minute over a sliding
//! 60-second window, and requests in flight. Tokens are estimated at admission and corrected with the real
//! usage when the request settles.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::budget::{Budget, Period, PeriodSpend};
use crate::config::Group;
use crate::money::Money;
use crate::protocol::{ApiError, Cause};

const WINDOW: Duration = Duration::from_secs(60);

#[derive(Default)]
struct KeyState {
    spent: Money,
    /// With a store: `spent` is the store's figure at the key's last admission (plus what this instance
    /// charged since), so the local fallback may judge the key's credit.
    spent_known: bool,
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
                self.tokens_total = self.tokens_total.saturating_sub(n);
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
    held: Held,
    settled: bool,
}

/// Where a reservation is kept.
enum Held {
    /// In this process's accounts.
    Local {
        cost: Money,
        tokens: u64,
        at: Instant,
        /// When it was admitted (Unix seconds): its cost counts in the budget periods of that moment.
        unix_at: u64,
    },
    /// In the shared store, under the request's id; `at`: when it was admitted (Unix seconds). With the
    /// local fallback, its worst case `cost` is also held in this process's accounts until it ends, so that
    /// admission without the store counts what this instance's requests still running may spend. `drawn`:
    /// admitted from this instance's allotment of the key (`store/allot/`), not by a call of its own.
    Shared {
        id: String,
        at: u64,
        cost: Money,
        drawn: bool,
    },
    /// Nothing held: a key with no limits, credit or budget (its record alone settles it).
    Nothing,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.held {
            Held::Local { cost, tokens, .. } => write!(
                f,
                "Reservation({}, {cost} credits, {tokens} tokens)",
                self.key
            ),
            Held::Shared { id, .. } => write!(f, "Reservation({}, shared {id})", self.key),
            Held::Nothing => write!(f, "Reservation({}, nothing held)", self.key),
        }
    }
}

impl Reservation {
    /// Ends the request: releases the reservation, charges the actual cost, and corrects its token count
    /// in the rate window to the real usage (with a store, in one atomic step there).
    pub fn settle(mut self, actual_cost: Money, actual_tokens: u64) {
        self.settled = true;
        self.accounts
            .settle_parts(&self, actual_cost, actual_tokens, true);
    }

    /// Releases the reservation without charging (the request never reached an upstream and leaves no
    /// record that would settle it).
    pub fn release(mut self) {
        self.settled = true;
        self.accounts.settle_parts(&self, Money::ZERO, 0, false);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.settled {
            self.accounts.settle_parts(self, Money::ZERO, 0, false);
        }
    }
}

pub use crate::standing::RateInfo;
use crate::standing::{judge, Limits, Standing, Verdict};

/// Balances and limits of every key.
pub struct Accounts {
    /// This process's own accounts: every key's without a store; with one, what admission falls back on
    /// while the store is down (`on_unavailable = "local"`).
    keys: Mutex<HashMap<String, KeyState>>,
    /// The shared store, when there is one.
    store: Option<Arc<crate::store::Store>>,
}

/// What a request asks for at admission.
pub struct Ask<'a> {
    /// The key's name (its accounts are kept under it, here and in a shared store).
    pub key: &'a str,
    /// The request's id (its reservation's name in a shared store).
    pub id: &'a str,
    /// The key's credit (None: unlimited).
    pub credit: Option<Money>,
    /// The key's group, whose `rpm`, `tpm` and `max_concurrent` limit the request (`None`: no limits).
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

impl Ask<'_> {
    fn limits(&self) -> Limits {
        let g = self.group;
        Limits {
            rpm: g.and_then(|g| g.rpm),
            tpm: g.and_then(|g| g.tpm),
            max_concurrent: g.and_then(|g| g.max_concurrent),
            credit: self.credit,
            budget: self.budget,
            tokens: self.tokens,
            now: self.now,
        }
    }
}

/// The 503 of a request refused because the shared store does not answer (`on_unavailable = "closed"`).
pub fn store_unavailable(store: &crate::store::Store) -> ApiError {
    ApiError::unavailable(format!(
        "The gateway's shared store ({}) is not answering, so this request cannot be checked against its key's \
         balance and limits; retry shortly.",
        store.describe()
    ))
    .with_cause(Cause::StoreUnavailable)
}

/// The 503 while the shared store has lost its data (no balance it holds can be trusted).
fn store_lost(store: &crate::store::Store) -> ApiError {
    ApiError::unavailable(format!(
        "The gateway's shared store ({}) has lost its data; requests are refused until the operator restores it \
         (tollgate store rebuild).",
        store.describe()
    ))
    .with_cause(Cause::StoreUnavailable)
}

impl KeyState {
    /// This key's standing for `ask`, by the same rules as the store's admission script.
    fn standing(&mut self, ask: &Ask, limits: &Limits, now: Instant) -> Standing {
        self.prune(now);
        let since = |t: &Instant| WINDOW.saturating_sub(now.duration_since(*t));
        let rpm_used = self.requests.len() as u64;
        let tpm_used = self.tokens_in_window();
        let mut tpm_wait = Duration::ZERO;
        if let Some(limit) = limits.tpm {
            if tpm_used.saturating_add(ask.tokens) > limit {
                // The earliest time enough tokens leave the window for this request to fit.
                let mut freed = 0u64;
                for (t, n) in &self.tokens {
                    freed = freed.saturating_add(*n);
                    if tpm_used.saturating_sub(freed).saturating_add(ask.tokens) <= limit {
                        tpm_wait = since(t);
                        break;
                    }
                }
                if tpm_wait.is_zero() {
                    tpm_wait = WINDOW;
                }
            }
        }
        let period_spent = ask.budget.map_or(Money::ZERO, |b| {
            self.periods.roll(ask.now);
            self.periods.spent(b.period, ask.now)
        });
        let verdict = if limits.rpm.is_some_and(|l| rpm_used >= l) {
            Verdict::Rpm
        } else if limits
            .tpm
            .is_some_and(|l| tpm_used.saturating_add(ask.tokens) > l)
        {
            Verdict::Tpm
        } else if limits.max_concurrent.is_some_and(|l| self.in_flight >= l) {
            Verdict::Concurrency
        } else if ask
            .credit
            .is_some_and(|c| c - self.spent - self.reserved <= Money::ZERO)
        {
            Verdict::Credit
        } else if ask
            .budget
            .is_some_and(|b| b.amount - period_spent - self.reserved <= Money::ZERO)
        {
            Verdict::Budget
        } else {
            Verdict::Admitted
        };
        Standing {
            verdict,
            rpm_used,
            rpm_reset: self.requests.front().map_or(Duration::ZERO, since),
            tpm_used,
            tpm_reset: self
                .tokens
                .front()
                .map_or(Duration::ZERO, |(t, _)| since(t)),
            tpm_wait,
            spent: self.spent,
            period_spent,
        }
    }
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
            store: None,
        }
    }

    /// Accounts kept in a shared store (balances and windows there; nothing replayed locally).
    pub fn shared(store: Arc<crate::store::Store>) -> Accounts {
        Accounts {
            keys: Mutex::new(HashMap::new()),
            store: Some(store),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeyState>> {
        crate::util::lock(&self.keys)
    }

    /// Total spent by a key so far (settled requests).
    pub fn spent(&self, key: &str) -> Money {
        if let Some(store) = self.store.as_ref() {
            if let Ok(b) = store.balance(key) {
                return b.spent;
            }
        }
        self.lock().get(key).map_or(Money::ZERO, |s| s.spent)
    }

    /// The spend and last use of many keys (one round trip with a store).
    pub fn balances(&self, names: &[String]) -> HashMap<String, (Money, Option<String>)> {
        if let Some(store) = self.store.as_ref() {
            if let Ok(b) = store.balances(names) {
                let local = self.lock();
                return b
                    .into_iter()
                    .map(|(k, v)| {
                        let mine = local.get(&k).and_then(|s| s.last_used.clone());
                        let last = match (mine, v.last_used) {
                            (Some(a), Some(b)) => Some(a.max(b)),
                            (a, b) => a.or(b),
                        };
                        (k, (v.spent, last))
                    })
                    .collect();
            }
        }
        let local = self.lock();
        names
            .iter()
            .map(|n| {
                let s = local.get(n);
                (
                    n.clone(),
                    (
                        s.map_or(Money::ZERO, |s| s.spent),
                        s.and_then(|s| s.last_used.clone()),
                    ),
                )
            })
            .collect()
    }

    /// Notes that a key made a request now (one refused before it reserved anything).
    pub fn touch(&self, key: &str) {
        let now = crate::util::rfc3339_millis(crate::util::unix_millis());
        self.lock().entry(key.to_string()).or_default().last_used = Some(now);
    }

    /// Spent by a key in the `period` that holds `now` (settled requests).
    pub fn period_spent(&self, key: &str, period: Period, now: u64) -> Money {
        if let Some(store) = self.store.as_ref() {
            if let Ok(m) = store.period_spent(key, period, now) {
                return m;
            }
        }
        self.lock()
            .get(key)
            .map_or(Money::ZERO, |s| s.periods.spent(period, now))
    }

    /// Admits a request or says why not (429 with `retry-after` and rate-limit headers), reserving its
    /// worst-case cost and its estimated tokens. With a store that does not answer: 503 naming it, or
    /// (`on_unavailable = "local"`) this instance's own accounts.
    pub fn check_and_reserve(
        self: &Arc<Self>,
        ask: &Ask,
    ) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
        let Some(store) = self.store.clone() else {
            return self.reserve_locally(ask);
        };
        let local_fallback =
            store.settings().on_unavailable == crate::config::store::OnUnavailable::Local;
        if store.lost() {
            return Err((store_lost(&store), RateInfo::default()));
        }
        if !store.healthy() {
            if local_fallback {
                return self.fallback(&store, ask);
            }
            return Err((store_unavailable(&store), RateInfo::default()));
        }
        let limits = ask.limits();
        let needs_store = limits.rpm.is_some()
            || limits.tpm.is_some()
            || limits.max_concurrent.is_some()
            || limits.credit.is_some()
            || limits.budget.is_some();
        if !needs_store {
            return Ok((self.reservation(ask, Held::Nothing), RateInfo::default()));
        }
        // The key's credit, own budget, expiry and state are the store's, not this instance's copy of the
        // key (a moment old when another instance just changed it); its group's limits are this config's.
        let group_budget = ask.group.and_then(|g| g.budget);
        // A busy key is admitted from this instance's slice of it when it has one (no round trip).
        let drawn = store.draw(ask.key, ask.id, ask.cost, &limits, group_budget);
        let is_drawn = matches!(drawn, Ok(Some(_)));
        let admitted = match drawn {
            Ok(Some(admission)) => Ok(admission),
            Ok(None) => store.admit(ask.key, ask.id, ask.cost, &limits, group_budget),
            Err(e) => Err(e),
        };
        match admitted {
            Ok(admission) => {
                let standing = admission.standing;
                // What the local fallback would start from if the store stops answering: the spend the store
                // counts, and this instance's requests in flight through the store (held until they end:
                // their cost reaches this spend at their end, and the store's at their settlement).
                let admitted = standing.verdict == crate::standing::Verdict::Admitted;
                if local_fallback {
                    let mut keys = self.lock();
                    let st = keys.entry(ask.key.to_string()).or_default();
                    // Never below what this instance counted itself: the store's figure may not have the
                    // costs of settlements still on their way to it.
                    st.spent = st.spent.max(standing.spent);
                    st.spent_known = true;
                    if admitted {
                        st.reserved += ask.cost;
                        st.in_flight += 1;
                    }
                }
                let limits = Limits {
                    credit: admission.credit,
                    budget: admission.budget,
                    ..limits
                };
                let held = Held::Shared {
                    id: ask.id.to_string(),
                    at: ask.now,
                    cost: ask.cost,
                    drawn: is_drawn,
                };
                // Made before the verdict is judged: a refusal's reservation (nothing held) is dropped.
                let reservation =
                    self.reservation(ask, if admitted { held } else { Held::Nothing });
                let info = judge(&limits, &standing)?;
                Ok((reservation, info))
            }
            Err(e) if local_fallback && e.unavailable => self.fallback(&store, ask),
            Err(e) => {
                if !e.unavailable {
                    log::error!("store: the admission script failed: {e}");
                }
                Err((store_unavailable(&store), RateInfo::default()))
            }
        }
    }

    fn reservation(self: &Arc<Self>, ask: &Ask, held: Held) -> Reservation {
        Reservation {
            accounts: self.clone(),
            key: ask.key.to_string(),
            held,
            settled: false,
        }
    }

    /// Admission while the store does not answer (`on_unavailable = "local"`): this instance's own limits,
    /// and for a key with a credit the spend the store last reported plus what this instance spent since.
    /// A key with a budget, or with a credit whose spend this instance never learnt, cannot be checked: 503.
    fn fallback(
        self: &Arc<Self>,
        store: &crate::store::Store,
        ask: &Ask,
    ) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
        let known = self.lock().get(ask.key).is_some_and(|s| s.spent_known);
        if ask.budget.is_some() || (ask.credit.is_some() && !known) {
            return Err((store_unavailable(store), RateInfo::default()));
        }
        self.reserve_locally(ask)
    }

    /// Admission against this process's own accounts.
    fn reserve_locally(
        self: &Arc<Self>,
        ask: &Ask,
    ) -> Result<(Reservation, RateInfo), (ApiError, RateInfo)> {
        let now = Instant::now();
        let limits = ask.limits();
        let mut keys = self.lock();
        let st = keys.entry(ask.key.to_string()).or_default();
        let standing = st.standing(ask, &limits, now);
        let info = judge(&limits, &standing)?;
        // The windows are kept only for keys with limits on them.
        if limits.rpm.is_some() {
            st.requests.push_back(now);
        }
        if limits.tpm.is_some() {
            st.tokens.push_back((now, ask.tokens));
            st.tokens_total = st.tokens_total.saturating_add(ask.tokens);
        }
        st.reserved += ask.cost;
        st.in_flight += 1;
        drop(keys);
        let held = Held::Local {
            cost: ask.cost,
            tokens: ask.tokens,
            at: now,
            unix_at: ask.now,
        };
        Ok((self.reservation(ask, held), info))
    }

    /// `charged`: the request ended with a usage record (settle), not without one (release).
    fn settle_parts(&self, r: &Reservation, actual_cost: Money, actual_tokens: u64, charged: bool) {
        let (reserved, tokens, at, unix_at) = match &r.held {
            Held::Nothing => return,
            Held::Shared {
                id,
                at,
                cost,
                drawn,
            } => {
                if let Some(store) = &self.store {
                    // A failure leaves the reservation to the request's record, which settles it when shipped
                    // (or, without a record, to its lease).
                    if *drawn {
                        store.end_drawn(id, charged.then_some((actual_cost, actual_tokens)));
                    } else if charged {
                        store.settle(&r.key, id, actual_cost, actual_tokens, *at);
                    } else {
                        let _ = store.release(&r.key, id);
                    }
                    if store.settings().on_unavailable == crate::config::store::OnUnavailable::Local
                    {
                        let mut keys = self.lock();
                        if let Some(st) = keys.get_mut(r.key.as_str()) {
                            st.reserved = (st.reserved - *cost).max(Money::ZERO);
                            st.in_flight = st.in_flight.saturating_sub(1);
                            if charged {
                                st.spent += actual_cost;
                                st.periods.add(*at, actual_cost);
                            }
                        }
                    }
                }
                return;
            }
            Held::Local {
                cost,
                tokens,
                at,
                unix_at,
            } => (*cost, *tokens, *at, *unix_at),
        };
        let mut keys = self.lock();
        let Some(st) = keys.get_mut(r.key.as_str()) else {
            return;
        };
        st.reserved = (st.reserved - reserved).max(Money::ZERO);
        st.spent += actual_cost;
        st.periods.add(unix_at, actual_cost);
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
            st.tokens_total = st
                .tokens_total
                .saturating_sub(tokens)
                .saturating_add(actual_tokens);
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
            id: "req_1",
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

    /// Token counts near 2^64 saturate: refused by tpm, never admitted by wrapping around; a settlement
    /// with a huge count neither panics nor frees the window.
    #[test]
    fn token_arithmetic_saturates() {
        let a = Arc::new(Accounts::new(
            HashMap::new(),
            HashMap::new(),
            HashMap::new(),
        ));
        let g = group(None, Some(1000), None);
        let (r, _) = a.check_and_reserve(&ask(&g, None, 10, 0.0)).unwrap();
        let (err, _) = a
            .check_and_reserve(&ask(&g, None, u64::MAX, 0.0))
            .unwrap_err();
        assert!(
            err.message().contains("tokens-per-minute"),
            "{}",
            err.message()
        );
        r.settle(Money::ZERO, u64::MAX);
        assert!(a.check_and_reserve(&ask(&g, None, 1, 0.0)).is_err());
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
