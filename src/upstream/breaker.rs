//! Circuit breakers, one per upstream: after `breaker_failures` failures in a row (unreachable, timed out,
//! 5xx, a stream that broke) an upstream is skipped for `breaker_cooldown_secs`; then one request is let
//! through as a probe: success closes the breaker, failure opens it for another cool-down.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    consecutive: u32,
    open_until: Option<Instant>,
    probing: bool,
}

/// Whether an upstream may be tried now.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Open: skip it for this long.
    No(Duration),
}

#[derive(Default)]
pub struct Breakers {
    states: Mutex<HashMap<String, State>>,
}

impl Breakers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, State>> {
        match self.states.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Asks to try `upstream`. After the cool-down, the first caller gets to probe; others keep waiting
    /// until the probe's result is in.
    pub fn admit(&self, upstream: &str) -> Admit {
        let mut states = self.lock();
        let Some(st) = states.get_mut(upstream) else {
            return Admit::Yes;
        };
        match st.open_until {
            None => Admit::Yes,
            Some(until) => {
                let now = Instant::now();
                if now < until {
                    Admit::No(until - now)
                } else if st.probing {
                    Admit::No(Duration::from_secs(1))
                } else {
                    st.probing = true;
                    Admit::Yes
                }
            }
        }
    }

    pub fn success(&self, upstream: &str) {
        let mut states = self.lock();
        if let Some(st) = states.get_mut(upstream) {
            if st.open_until.is_some() {
                log::info!("upstream `{upstream}` answers again: breaker closed");
            }
            *st = State::default();
        }
    }

    /// The attempt said nothing about the upstream's health (the client left): a pending probe is given
    /// back, so the next request probes.
    pub fn inconclusive(&self, upstream: &str) {
        if let Some(st) = self.lock().get_mut(upstream) {
            st.probing = false;
        }
    }

    pub fn failure(&self, upstream: &str, threshold: u32, cooldown: Duration) {
        let mut states = self.lock();
        let st = states.entry(upstream.to_string()).or_default();
        st.consecutive += 1;
        if st.probing || st.consecutive >= threshold {
            if !st.probing {
                log::warn!(
                    "upstream `{upstream}` failed {} times in a row: skipped for {} s",
                    st.consecutive,
                    cooldown.as_secs()
                );
            }
            st.open_until = Some(Instant::now() + cooldown);
            st.probing = false;
        }
    }

    /// Seconds until `upstream` is tried again (None: closed).
    pub fn open_for(&self, upstream: &str) -> Option<u64> {
        let states = self.lock();
        let until = states.get(upstream)?.open_until?;
        Some(until.saturating_duration_since(Instant::now()).as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_and_probes_after_the_cooldown() {
        let b = Breakers::default();
        let cd = Duration::from_millis(30);
        for _ in 0..2 {
            assert_eq!(b.admit("u"), Admit::Yes);
            b.failure("u", 3, cd);
        }
        assert_eq!(b.admit("u"), Admit::Yes);
        b.failure("u", 3, cd);
        assert!(matches!(b.admit("u"), Admit::No(_)));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(b.admit("u"), Admit::Yes, "the probe");
        assert!(matches!(b.admit("u"), Admit::No(_)), "one probe at a time");
        b.failure("u", 3, cd);
        assert!(
            matches!(b.admit("u"), Admit::No(_)),
            "a failed probe reopens"
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(b.admit("u"), Admit::Yes);
        b.success("u");
        assert_eq!(b.admit("u"), Admit::Yes);
        assert_eq!(b.admit("u"), Admit::Yes);
    }
}
