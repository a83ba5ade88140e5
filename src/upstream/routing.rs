//! Choosing among a model's upstreams and respecting their rate limits: how many requests each has in
//! flight, how fast it sends its first byte (a moving average), the smooth weighted round robin of
//! `weighted` models, and the cool-down of an upstream that answered 429 (no new request until the time
//! `policy.rs` gives passes, unless nothing else can be asked).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{Model, Route};

#[derive(Default)]
struct Up {
    in_flight: u64,
    /// Moving average of the time to the answer's head, in milliseconds.
    first_byte_ms: Option<f64>,
    cool_until: Option<Instant>,
}

/// Routing state of every upstream (and the round-robin state of every weighted model).
#[derive(Default)]
pub struct Routing {
    ups: Mutex<HashMap<String, Up>>,
    /// Per model: the smooth weighted round robin's current weights.
    wrr: Mutex<HashMap<String, Vec<i64>>>,
    /// Per upstream with several credentials: which of its deployments goes first next.
    turns: Mutex<HashMap<String, usize>>,
}

/// Counts a request in flight at an upstream until dropped.
pub struct Busy<'a> {
    routing: &'a Routing,
    upstream: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut ups = self.routing.lock();
        if let Some(u) = ups.get_mut(&self.upstream) {
            u.in_flight = u.in_flight.saturating_sub(1);
        }
    }
}

/// Changes the state of `upstream` (added if it has none: its name copied only then, not on every request).
fn update(ups: &mut HashMap<String, Up>, upstream: &str, change: impl FnOnce(&mut Up)) {
    match ups.get_mut(upstream) {
        Some(u) => change(u),
        None => change(ups.entry(upstream.to_string()).or_default()),
    }
}

/// What `GET /admin/models` and `/metrics` show of an upstream's routing state.
pub struct RouteView {
    /// Requests it has in flight from this instance.
    pub in_flight: u64,
    /// Moving average of the time to the answer's head, in milliseconds (None: no answer yet).
    pub first_byte_ms: Option<f64>,
    /// Unix ms until which it gets no new request (it answered 429).
    pub cooling_until_unix_ms: Option<u64>,
}

impl Routing {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Up>> {
        crate::util::lock(&self.ups)
    }

    /// A request starts at `upstream`.
    pub fn busy(&self, upstream: &str) -> Busy<'_> {
        update(&mut self.lock(), upstream, |u| u.in_flight += 1);
        Busy {
            routing: self,
            upstream: upstream.to_string(),
        }
    }

    /// The upstream's answer head came after `d`.
    pub fn first_byte(&self, upstream: &str, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        update(&mut self.lock(), upstream, |u| {
            u.first_byte_ms = Some(match u.first_byte_ms {
                None => ms,
                Some(avg) => avg * 0.8 + ms * 0.2,
            });
        });
    }

    /// The upstream answered 429: no new request for `wait`.
    pub fn cool(&self, upstream: &str, wait: Duration) {
        self.cool_at(upstream, wait, Instant::now());
    }

    fn cool_at(&self, upstream: &str, wait: Duration, now: Instant) {
        let until = now + wait;
        let mut ups = self.lock();
        let u = ups.entry(upstream.to_string()).or_default();
        u.cool_until = Some(u.cool_until.map_or(until, |t| t.max(until)));
    }

    /// How long the upstream still cools down, if it does.
    fn cooling_at(&self, upstream: &str, now: Instant) -> Option<Duration> {
        let ups = self.lock();
        let until = ups.get(upstream)?.cool_until?;
        (until > now).then(|| until - now)
    }

    /// The order to try `candidates` (the model's upstreams that may be tried, in configured order) in: by
    /// the model's route, then the cooling ones left out while another can be asked. When all cool down,
    /// only the one whose cool-down ends first is asked (a lone upstream keeps being asked: the client gets
    /// its 429 rather than an outage tollgate makes).
    pub fn order<'c, T: AsRef<str>>(&self, model: &Model, candidates: Vec<&'c T>) -> Vec<&'c T> {
        self.order_at(model, candidates, Instant::now())
    }

    fn order_at<'c, T: AsRef<str>>(
        &self,
        model: &Model,
        candidates: Vec<&'c T>,
        now: Instant,
    ) -> Vec<&'c T> {
        let ordered = match model.route {
            Route::Ordered => self.take_turns(candidates),
            Route::Weighted => self.weighted(model, candidates),
            Route::LeastBusy => self.least_busy(candidates),
        };
        let (warm, mut cooling): (Vec<_>, Vec<_>) = ordered
            .into_iter()
            .partition(|u| self.cooling_at(u.as_ref(), now).is_none());
        if !warm.is_empty() || cooling.is_empty() {
            return warm;
        }
        cooling.sort_by_key(|u| self.cooling_at(u.as_ref(), now));
        cooling.truncate(1);
        cooling
    }

    /// The deployments of one upstream (`name#1`, `name#2`: one per credential) take turns at their place
    /// in the order, so the load spreads over the credentials.
    fn take_turns<'c, T: AsRef<str>>(&self, candidates: Vec<&'c T>) -> Vec<&'c T> {
        let base = |u: &T| u.as_ref().split_once('#').map(|(b, _)| b.to_string());
        let mut turns = crate::util::lock(&self.turns);
        let mut out = Vec::with_capacity(candidates.len());
        let mut i = 0;
        while i < candidates.len() {
            let Some(b) = base(candidates[i]) else {
                out.push(candidates[i]);
                i += 1;
                continue;
            };
            let run = candidates[i..]
                .iter()
                .take_while(|u| base(u).as_deref() == Some(b.as_str()))
                .count();
            let turn = turns.entry(b).or_insert(0);
            let mut group = candidates[i..i + run].to_vec();
            group.rotate_left(*turn % run);
            *turn = turn.wrapping_add(1);
            out.extend(group);
            i += run;
        }
        out
    }

    /// Smooth weighted round robin: the first is chosen by weight (exact shares over time), the others
    /// follow by weight for failover.
    fn weighted<'c, T: AsRef<str>>(&self, model: &Model, candidates: Vec<&'c T>) -> Vec<&'c T> {
        let weight = |name: &str| -> i64 {
            model
                .upstreams
                .iter()
                .position(|u| u == name)
                .and_then(|i| model.weights.get(i))
                .map_or(1, |w| i64::from(*w))
        };
        let mut wrr = crate::util::lock(&self.wrr);
        let current = wrr
            .entry(model.name.clone())
            .or_insert_with(|| vec![0; model.upstreams.len()]);
        current.resize(model.upstreams.len(), 0);
        let index = |name: &str| model.upstreams.iter().position(|u| u == name);
        let total: i64 = candidates.iter().map(|u| weight(u.as_ref())).sum();
        let mut best: Option<(usize, i64)> = None;
        for (ci, u) in candidates.iter().enumerate() {
            let Some(i) = index(u.as_ref()) else { continue };
            current[i] += weight(u.as_ref());
            if best.is_none_or(|(_, w)| current[i] > w) {
                best = Some((ci, current[i]));
            }
        }
        let mut rest = candidates;
        let Some((ci, _)) = best else { return rest };
        if let Some(i) = index(rest[ci].as_ref()) {
            current[i] -= total;
        }
        let first = rest.remove(ci);
        rest.sort_by_key(|u| -weight(u.as_ref()));
        rest.insert(0, first);
        rest
    }

    /// Fewest requests in flight first; ties to the faster first byte (unknown counts as fast, so a new
    /// upstream gets tried).
    fn least_busy<'c, T: AsRef<str>>(&self, mut candidates: Vec<&'c T>) -> Vec<&'c T> {
        let ups = self.lock();
        let key = |name: &str| {
            ups.get(name).map_or((0, 0), |u| {
                (u.in_flight, u.first_byte_ms.map_or(0, |ms| ms as u64))
            })
        };
        candidates.sort_by_key(|u| key(u.as_ref()));
        candidates
    }

    /// The routing state of `upstream` now.
    pub fn view(&self, upstream: &str) -> RouteView {
        let now = Instant::now();
        let cooling = self.cooling_at(upstream, now);
        let ups = self.lock();
        let u = ups.get(upstream);
        RouteView {
            in_flight: u.map_or(0, |u| u.in_flight),
            first_byte_ms: u.and_then(|u| u.first_byte_ms),
            cooling_until_unix_ms: cooling
                .map(|d| crate::util::unix_millis() + d.as_millis() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn model(route: Route, upstreams: &[&str], weights: &[u32]) -> Model {
        let mut m = Config::embedded().models[0].clone();
        m.route = route;
        m.upstreams = upstreams.iter().map(|s| s.to_string()).collect();
        m.weights = weights.to_vec();
        m
    }

    #[test]
    fn weights_give_exact_shares_and_failover_order() {
        let r = Routing::default();
        let m = model(Route::Weighted, &["a", "b"], &[3, 1]);
        let (a, b) = ("a".to_string(), "b".to_string());
        let mut firsts = HashMap::new();
        for _ in 0..400 {
            let order = r.order(&m, vec![&a, &b]);
            assert_eq!(order.len(), 2, "the other is kept for failover");
            *firsts.entry(order[0].clone()).or_insert(0) += 1;
        }
        assert_eq!(firsts["a"], 300);
        assert_eq!(firsts["b"], 100);
    }

    #[test]
    fn a_cooling_upstream_waits_unless_nothing_else_can_be_asked() {
        let r = Routing::default();
        let m = model(Route::Ordered, &["a", "b"], &[]);
        let (a, b) = ("a".to_string(), "b".to_string());
        let now = Instant::now();
        r.cool_at("a", Duration::from_secs(30), now);
        assert_eq!(r.order_at(&m, vec![&a, &b], now), vec![&b]);
        // Both cooling: only the one that cools down first.
        r.cool_at("b", Duration::from_secs(10), now);
        assert_eq!(r.order_at(&m, vec![&a, &b], now), vec![&b]);
        // A lone upstream is always asked.
        assert_eq!(r.order_at(&m, vec![&a], now), vec![&a]);
        // After its cool-down it is asked again.
        let later = now + Duration::from_secs(31);
        assert_eq!(r.order_at(&m, vec![&a, &b], later), vec![&a, &b]);
    }

    #[test]
    fn least_busy_prefers_idle_then_fast() {
        let r = Routing::default();
        let m = model(Route::LeastBusy, &["slow", "fast"], &[]);
        let (slow, fast) = ("slow".to_string(), "fast".to_string());
        r.first_byte("slow", Duration::from_millis(300));
        r.first_byte("fast", Duration::from_millis(5));
        assert_eq!(r.order(&m, vec![&slow, &fast])[0], "fast");
        let _one = r.busy("fast");
        let _two = r.busy("fast");
        assert_eq!(r.order(&m, vec![&slow, &fast])[0], "slow");
        drop(_two);
        drop(_one);
        assert_eq!(r.order(&m, vec![&slow, &fast])[0], "fast");
    }
}
