//! Circuit breakers, one per upstream, built on one rule: an upstream that answers at all is alive, and
//! tollgate never refuses a request that the last upstream of its model could answer.
//!
//! Two kinds of failure are counted apart (each run resets on a success):
//! - **Silent**: the upstream did not answer (connection refused or failed, name not found, no response head
//!   before `first_byte_timeout`). After `breaker_failures` in a row the breaker *opens*: the upstream is
//!   skipped for `breaker_cooldown_secs`, because waiting on it would tie up workers other models need. After
//!   the cool-down one request at a time *probes* it (an answer of any kind closes the breaker; silence opens
//!   it again); while it is open or being probed and it is the model's last upstream, requests get 503 with
//!   `retry-after` naming the upstream and what failed.
//! - **Erroring**: the upstream answered, but with a 5xx, an error object, or a stream that broke midway.
//!   After `breaker_failures` in a row it is *ejected* for `breaker_cooldown_secs`: passed over while the model
//!   has another upstream that is not ejected or open, and still tried (last) when it has none. So a run of
//!   errors moves traffic to a healthy sibling but never takes a model offline by itself.
//!
//! An upstream is admitted just before it is tried ([`Breakers::admit`]); a probe that is granted but never
//! reported (the request ended first) is released when its [`Ticket`] is dropped, so a probe cannot stick.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How an attempt on an upstream went, as far as its health is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealthVerdict {
    /// It answered (any 2xx, or a client error such as 400): alive and well.
    Success,
    /// It answered 4xx for the request's own reasons (bad request, rate limit): alive; says nothing about
    /// errors.
    Alive,
    /// It answered with a server error or broke a stream midway (the text says what).
    Erroring(String),
    /// It did not answer at all (the text says what failed).
    Silent(String),
    /// Nothing was learnt (the client left, or the call was never made).
    Inconclusive,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Closed,
    /// Not answering: skipped until `until`; then one probe at a time.
    Open {
        until: Instant,
    },
    /// A probe is in flight.
    Probing,
    /// Answering with errors: passed over while a healthy sibling exists, until `until`.
    Ejected {
        until: Instant,
    },
}

#[derive(Debug)]
struct State {
    mode: Mode,
    silent: u32,
    erroring: u32,
    /// Why the breaker is not closed (the last failure's text).
    why: Option<String>,
    /// Wall-clock time (Unix ms) until which the upstream is skipped, for display.
    until_unix_ms: Option<u64>,
}

impl Default for State {
    fn default() -> Self {
        State {
            mode: Mode::Closed,
            silent: 0,
            erroring: 0,
            why: None,
            until_unix_ms: None,
        }
    }
}

/// Where an upstream stands when a request plans its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerStanding {
    /// Closed, or its cool-down is over (a probe may be due).
    Ready,
    /// Ejected for errors: tried after the ready ones only.
    Ejected,
    /// Open or being probed: skipped; the duration says when to come back.
    Skipped(Duration),
}

/// Whether an upstream may be tried now, asked just before trying it.
#[derive(Debug)]
pub(crate) enum Admit<'a> {
    Yes(Ticket<'a>),
    /// Open, or another request is probing it: skip it for about this long.
    No(Duration),
}

/// The right to try one upstream once. Report the outcome with [`Breakers::report`]; dropped unreported
/// (the request ended before the attempt said anything), a probe it carries is given back.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    upstream: String,
    probe: bool,
    reported: bool,
    breakers: &'a Breakers,
}

impl Ticket<'_> {
    /// Whether this attempt is the probe of an upstream whose cool-down just ended.
    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            self.breakers.release_probe(&self.upstream);
        }
    }
}

/// A snapshot of one breaker, for `/metrics`, `GET /admin/models` and the console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// `closed`, `open`, `probing` or `ejected`.
    pub state: &'static str,
    /// Unix ms until which it is skipped (open or ejected).
    pub until_unix_ms: Option<u64>,
    /// The failure that put it there.
    pub reason: Option<String>,
    /// Failures in a row of the kind that counts toward the current state.
    pub failures: u32,
}

/// Thresholds of one upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub failures: u32,
    pub cooldown: Duration,
}

#[derive(Debug)]
pub(crate) struct Breakers {
    states: Mutex<HashMap<String, State>>,
    /// An instant before any other this breaker set sees (a released probe's "cool-down over").
    epoch: Instant,
}

impl Default for Breakers {
    fn default() -> Self {
        Breakers {
            states: Mutex::default(),
            epoch: Instant::now(),
        }
    }
}

fn until_unix(d: Duration) -> u64 {
    crate::util::unix_millis() + d.as_millis() as u64
}

impl Breakers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        crate::util::lock(&self.states)
    }

    /// Where `upstream` stands now (no state changes).
    pub(crate) fn standing(&self, upstream: &str) -> BreakerStanding {
        self.standing_at(upstream, Instant::now())
    }

    fn standing_at(&self, upstream: &str, now: Instant) -> BreakerStanding {
        let states = self.lock();
        let Some(st) = states.get(upstream) else {
            return BreakerStanding::Ready;
        };
        match st.mode {
            Mode::Closed => BreakerStanding::Ready,
            Mode::Open { until } if now < until => BreakerStanding::Skipped(until - now),
            Mode::Open { .. } => BreakerStanding::Ready,
            Mode::Probing => BreakerStanding::Skipped(Duration::from_secs(1)),
            Mode::Ejected { until } if now < until => BreakerStanding::Ejected,
            Mode::Ejected { .. } => BreakerStanding::Ready,
        }
    }

    /// Asks to try `upstream` now. After an open breaker's cool-down the first caller gets the probe; others
    /// are told to wait until its result is in.
    pub(crate) fn admit(&self, upstream: &str) -> Admit<'_> {
        self.admit_at(upstream, Instant::now())
    }

    fn admit_at(&self, upstream: &str, now: Instant) -> Admit<'_> {
        let mut states = self.lock();
        let mut probe = false;
        if let Some(st) = states.get_mut(upstream) {
            match st.mode {
                Mode::Open { until } if now < until => return Admit::No(until - now),
                Mode::Open { .. } => {
                    st.mode = Mode::Probing;
                    probe = true;
                }
                Mode::Probing => return Admit::No(Duration::from_secs(1)),
                Mode::Closed | Mode::Ejected { .. } => {}
            }
        }
        Admit::Yes(Ticket {
            upstream: upstream.to_string(),
            probe,
            reported: false,
            breakers: self,
        })
    }

    fn release_probe(&self, upstream: &str) {
        if let Some(st) = self.lock().get_mut(upstream) {
            if st.mode == Mode::Probing {
                // Back to "cool-down over": the next request probes. (The earliest instant: whatever clock
                // the caller uses, the cool-down is over.)
                st.mode = Mode::Open { until: self.epoch };
            }
        }
    }

    /// Records how an attempt went.
    pub(crate) fn report(&self, ticket: Ticket<'_>, verdict: HealthVerdict, policy: Policy) {
        self.report_at(ticket, verdict, policy, Instant::now())
    }

    fn report_at(
        &self,
        mut ticket: Ticket<'_>,
        verdict: HealthVerdict,
        policy: Policy,
        now: Instant,
    ) {
        ticket.reported = true;
        let name = ticket.upstream.as_str();
        let mut states = self.lock();
        if !states.contains_key(name) {
            if matches!(
                verdict,
                HealthVerdict::Success | HealthVerdict::Alive | HealthVerdict::Inconclusive
            ) {
                return;
            }
            states.insert(name.to_string(), State::default());
        }
        let Some(st) = states.get_mut(name) else {
            return;
        };
        let was_probing = st.mode == Mode::Probing;
        let threshold = policy.failures.max(1);
        match verdict {
            HealthVerdict::Inconclusive => {
                if was_probing {
                    st.mode = Mode::Open { until: now };
                }
            }
            HealthVerdict::Success => {
                if st.mode != Mode::Closed {
                    log::info!("upstream `{name}` answers again: breaker closed");
                }
                *st = State::default();
            }
            HealthVerdict::Alive => {
                st.silent = 0;
                if was_probing || matches!(st.mode, Mode::Open { .. }) {
                    log::info!("upstream `{name}` answers again: breaker closed");
                    st.mode = Mode::Closed;
                    st.why = None;
                    st.until_unix_ms = None;
                }
            }
            HealthVerdict::Erroring(why) => {
                st.silent = 0;
                st.erroring += 1;
                let ejected_now = matches!(st.mode, Mode::Ejected { until } if now < until);
                if was_probing || matches!(st.mode, Mode::Open { .. }) {
                    // It answers: no longer open, whatever it answered.
                    log::info!("upstream `{name}` answers again (with an error): breaker closed");
                    st.mode = Mode::Closed;
                }
                if st.erroring >= threshold && !ejected_now {
                    log::warn!(
                        "upstream `{name}` answered with errors {} times in a row ({why}): passed over for {} s \
                         while its models have a healthy upstream",
                        st.erroring,
                        policy.cooldown.as_secs()
                    );
                    st.mode = Mode::Ejected {
                        until: now + policy.cooldown,
                    };
                    st.until_unix_ms = Some(until_unix(policy.cooldown));
                }
                st.why = Some(why);
            }
            HealthVerdict::Silent(why) => {
                st.silent += 1;
                if was_probing || st.silent >= threshold {
                    if was_probing {
                        log::warn!(
                            "upstream `{name}` still does not answer ({why}): skipped for another {} s",
                            policy.cooldown.as_secs()
                        );
                    } else {
                        log::warn!(
                            "upstream `{name}` did not answer {} times in a row ({why}): skipped for {} s, then \
                             probed by one request at a time",
                            st.silent,
                            policy.cooldown.as_secs()
                        );
                    }
                    st.mode = Mode::Open {
                        until: now + policy.cooldown,
                    };
                    st.until_unix_ms = Some(until_unix(policy.cooldown));
                }
                st.why = Some(why);
            }
        }
    }

    /// The breaker of `upstream` as the operator sees it.
    pub(crate) fn view(&self, upstream: &str) -> View {
        let states = self.lock();
        let Some(st) = states.get(upstream) else {
            return View {
                state: "closed",
                until_unix_ms: None,
                reason: None,
                failures: 0,
            };
        };
        let now = Instant::now();
        let (state, until, failures) = match st.mode {
            Mode::Closed => ("closed", None, st.silent.max(st.erroring)),
            Mode::Open { until } if now < until => ("open", st.until_unix_ms, st.silent),
            // Cool-down over: the next request probes it.
            Mode::Open { .. } => ("open", st.until_unix_ms, st.silent),
            Mode::Probing => ("probing", None, st.silent),
            Mode::Ejected { until } if now < until => ("ejected", st.until_unix_ms, st.erroring),
            Mode::Ejected { .. } => ("closed", None, st.erroring),
        };
        View {
            state,
            until_unix_ms: until,
            reason: if state == "closed" {
                None
            } else {
                st.why.clone()
            },
            failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ms: u64) -> Policy {
        Policy {
            failures: 3,
            cooldown: Duration::from_millis(ms),
        }
    }

    fn fail(b: &Breakers, v: HealthVerdict, p: Policy) {
        match b.admit("u") {
            Admit::Yes(t) => b.report(t, v, p),
            Admit::No(_) => panic!("not admitted"),
        }
    }

    #[test]
    fn silence_opens_after_the_threshold_and_probes_one_at_a_time() {
        let b = Breakers::default();
        let p = policy(30);
        for _ in 0..3 {
            fail(&b, HealthVerdict::Silent("connection refused".into()), p);
        }
        assert!(matches!(b.admit("u"), Admit::No(_)));
        assert_eq!(b.view("u").state, "open");
        assert_eq!(b.view("u").reason.as_deref(), Some("connection refused"));
        std::thread::sleep(Duration::from_millis(40));
        let Admit::Yes(probe) = b.admit("u") else {
            panic!("the probe")
        };
        assert!(probe.is_probe());
        assert!(matches!(b.admit("u"), Admit::No(_)), "one probe at a time");
        assert_eq!(b.view("u").state, "probing");
        b.report(probe, HealthVerdict::Silent("timed out".into()), p);
        assert!(
            matches!(b.admit("u"), Admit::No(_)),
            "a silent probe reopens"
        );
        std::thread::sleep(Duration::from_millis(40));
        let Admit::Yes(probe) = b.admit("u") else {
            panic!("the probe")
        };
        b.report(probe, HealthVerdict::Success, p);
        assert_eq!(b.view("u").state, "closed");
        assert!(matches!(b.admit("u"), Admit::Yes(_)));
    }

    #[test]
    fn an_unreported_probe_is_given_back() {
        let b = Breakers::default();
        let p = policy(0);
        for _ in 0..3 {
            fail(&b, HealthVerdict::Silent("refused".into()), p);
        }
        let Admit::Yes(probe) = b.admit("u") else {
            panic!("the probe")
        };
        drop(probe);
        let Admit::Yes(again) = b.admit("u") else {
            panic!("the probe was given back")
        };
        assert!(again.is_probe());
    }

    #[test]
    fn errors_eject_but_never_refuse() {
        let b = Breakers::default();
        let p = policy(60_000);
        for _ in 0..5 {
            fail(&b, HealthVerdict::Erroring("HTTP 500".into()), p);
        }
        assert_eq!(b.standing("u"), BreakerStanding::Ejected);
        assert_eq!(b.view("u").state, "ejected");
        assert!(
            matches!(b.admit("u"), Admit::Yes(_)),
            "an ejected upstream is still admitted"
        );
        fail(&b, HealthVerdict::Success, p);
        assert_eq!(b.standing("u"), BreakerStanding::Ready);
    }

    #[test]
    fn an_answer_of_any_kind_closes_an_open_breaker() {
        let b = Breakers::default();
        let p = policy(0);
        for _ in 0..3 {
            fail(&b, HealthVerdict::Silent("refused".into()), p);
        }
        let Admit::Yes(probe) = b.admit("u") else {
            panic!("the probe")
        };
        b.report(probe, HealthVerdict::Erroring("HTTP 503".into()), p);
        assert_eq!(b.view("u").state, "closed");
        assert!(matches!(b.admit("u"), Admit::Yes(_)));
    }

    #[test]
    fn a_fallbacks_probe_cannot_stick() {
        // Model [a, b]: both stop answering, both come back, `a` serves, then `a` dies: `b` serves.
        let b = Breakers::default();
        let p = Policy {
            failures: 1,
            cooldown: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        for u in ["a", "b"] {
            let Admit::Yes(t) = b.admit_at(u, t0) else {
                panic!()
            };
            b.report_at(t, HealthVerdict::Silent("refused".into()), p, t0);
        }
        let t1 = t0 + Duration::from_secs(11);
        // Both are ready again; the request tries `a` first (admitted just before it is tried) and it serves.
        assert_eq!(b.standing_at("a", t1), BreakerStanding::Ready);
        assert_eq!(b.standing_at("b", t1), BreakerStanding::Ready);
        let Admit::Yes(t) = b.admit_at("a", t1) else {
            panic!()
        };
        b.report_at(t, HealthVerdict::Success, p, t1);
        // `b` was never admitted, so it holds no probe: when `a` dies, `b` is admitted and serves.
        let t2 = t1 + Duration::from_secs(1);
        let Admit::Yes(t) = b.admit_at("a", t2) else {
            panic!()
        };
        b.report_at(t, HealthVerdict::Silent("refused".into()), p, t2);
        let Admit::Yes(t) = b.admit_at("b", t2) else {
            panic!("the fallback is stuck")
        };
        b.report_at(t, HealthVerdict::Success, p, t2);
        assert_eq!(b.standing_at("b", t2), BreakerStanding::Ready);
    }

    proptest::proptest! {
        /// Over any sequence of an upstream going down and up, requests arriving at random times, and
        /// requests that end before reporting, an upstream that answers is never refused for longer than its
        /// cool-down after it came back.
        #[test]
        fn an_answering_upstream_is_never_skipped_beyond_its_cooldown(
            steps in proptest::collection::vec((0u64..3000, proptest::bool::ANY, 0u8..10), 1..200),
            failures in 1u32..5,
        ) {
            let br = Breakers::default();
            let cooldown = Duration::from_millis(1000);
            let p = Policy { failures, cooldown };
            let mut now = Instant::now();
            let mut up = true;
            let mut up_since = now;
            for (dt, flip, action) in steps {
                now += Duration::from_millis(dt);
                if flip {
                    up = !up;
                    if up {
                        up_since = now;
                    }
                }
                match br.admit_at("u", now) {
                    Admit::No(wait) => {
                        proptest::prop_assert!(wait <= cooldown);
                        if up {
                            proptest::prop_assert!(
                                now.duration_since(up_since) <= cooldown,
                                "refused {:?} after it came back", now.duration_since(up_since)
                            );
                        }
                    }
                    Admit::Yes(ticket) => match action {
                        // The request ended before its attempt said anything.
                        0 => drop(ticket),
                        1 => br.report_at(ticket, HealthVerdict::Inconclusive, p, now),
                        2 if up => br.report_at(ticket, HealthVerdict::Erroring("HTTP 500".into()), p, now),
                        _ if up => br.report_at(ticket, HealthVerdict::Success, p, now),
                        _ => br.report_at(ticket, HealthVerdict::Silent("refused".into()), p, now),
                    },
                }
            }
        }
    }
}
