//! Prometheus metrics (`GET /metrics`, text format 0.0.4): requests by protocol, model and status; latency
//! histograms for the whole request, for the gateway's own overhead (total minus time waiting on the
//! upstream) and for time to first token of streams; tokens and cost by model; upstream errors; active
//! streams, queue depth, open connections and rejected requests.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::money::Money;

pub(crate) mod scrape;

/// Seconds; the upper bounds of the histogram buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
const OVERHEAD_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

struct Histogram {
    bounds: &'static [f64],
    /// One counter per bound, and a last one for values above every bound.
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// One consistent snapshot: every counter is read once, and the cumulative buckets, `+Inf` and
    /// `_count` are all computed from those reads (`+Inf` can never be below the last bucket).
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&counts) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let count: u64 = counts.iter().sum();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// One finished request, as the metrics see it.
pub(crate) struct Observation<'a> {
    pub protocol: &'a str,
    pub model: &'a str,
    pub status: &'a str,
    pub total: Duration,
    pub overhead: Duration,
    pub first_token: Option<Duration>,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_5m_tokens: u64,
    pub cache_write_1h_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost: Money,
    /// The long-context tier billed (its threshold).
    pub tier: Option<u64>,
}

/// The token kinds of `tollgate_tokens_total`, in the order of `ModelCounters::tokens`: `input` counts all
/// input, of which `cached_input` were cache reads and `cache_write_5m` / `cache_write_1h` cache writes by
/// lifetime; `output` all output, of which `reasoning` was reasoning (as the usage records count them).
const TOKEN_KINDS: [&str; 6] = [
    "input",
    "cached_input",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning",
];

/// Everything counted per model, found with one look-up that allocates nothing once the model is known.
#[derive(Default)]
struct ModelCounters {
    /// (protocol, status, requests): a handful per model, so a list.
    requests: Vec<(String, String, u64)>,
    tokens: [u64; 6],
    cost: Money,
    /// (tier threshold, requests billed at it).
    tiers: Vec<(u64, u64)>,
}

pub(crate) struct Metrics {
    models: Mutex<BTreeMap<String, ModelCounters>>,
    upstream_errors: Mutex<BTreeMap<String, u64>>,
    duration: Histogram,
    overhead: Histogram,
    first_token: Histogram,
    pub rate_limited: AtomicU64,
    pub quota_exhausted: AtomicU64,
    /// Requests refused because the usage ledger could not take more records.
    pub ledger_refused: AtomicU64,
    /// Requests refused because the shared store did not answer.
    pub store_refused: AtomicU64,
    /// Requests to the model endpoints without a valid key (401): they leave no usage record, so they are
    /// counted here, in all and per minute over the last hour.
    unauthorized_total: AtomicU64,
    unauthorized_minutes: Mutex<[(u64, u64); 60]>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            models: Mutex::default(),
            upstream_errors: Mutex::default(),
            duration: Histogram::new(&LATENCY_BUCKETS),
            overhead: Histogram::new(&OVERHEAD_BUCKETS),
            first_token: Histogram::new(&LATENCY_BUCKETS),
            rate_limited: AtomicU64::new(0),
            quota_exhausted: AtomicU64::new(0),
            ledger_refused: AtomicU64::new(0),
            store_refused: AtomicU64::new(0),
            unauthorized_total: AtomicU64::new(0),
            unauthorized_minutes: Mutex::new([(0, 0); 60]),
        }
    }
}

/// Label values are quoted strings: escape what the text format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    pub(crate) fn observe(&self, o: &Observation) {
        if let Ok(mut m) = self.models.lock() {
            if !m.contains_key(o.model) {
                m.insert(o.model.to_string(), ModelCounters::default());
            }
            if let Some(c) = m.get_mut(o.model) {
                match c
                    .requests
                    .iter_mut()
                    .find(|(p, s, _)| p == o.protocol && s == o.status)
                {
                    Some((_, _, n)) => *n += 1,
                    None => c
                        .requests
                        .push((o.protocol.to_string(), o.status.to_string(), 1)),
                }
                let counts = [
                    o.input_tokens,
                    o.cached_input_tokens,
                    o.cache_write_5m_tokens,
                    o.cache_write_1h_tokens,
                    o.output_tokens,
                    o.reasoning_tokens,
                ];
                for (total, n) in c.tokens.iter_mut().zip(counts) {
                    *total = total.saturating_add(n);
                }
                c.cost += o.cost;
                if let Some(t) = o.tier {
                    match c.tiers.iter_mut().find(|(a, _)| *a == t) {
                        Some((_, n)) => *n += 1,
                        None => c.tiers.push((t, 1)),
                    }
                }
            }
        }
        self.duration.observe(o.total);
        self.overhead.observe(o.overhead);
        if let Some(t) = o.first_token {
            self.first_token.observe(t);
        }
    }

    /// Counts a failed attempt at `upstream` (every attempt, also those failover moved on from).
    pub(crate) fn upstream_failed(&self, upstream: &str) {
        if let Ok(mut m) = self.upstream_errors.lock() {
            *m.entry(upstream.to_string()).or_default() += 1;
        }
    }

    /// Counts a request refused for a missing or invalid key, at `now` (Unix seconds).
    pub(crate) fn unauthorized(&self, now: u64) {
        self.unauthorized_total.fetch_add(1, Ordering::Relaxed);
        let minute = now / 60;
        if let Ok(mut m) = self.unauthorized_minutes.lock() {
            let slot = &mut m[(minute % 60) as usize];
            if slot.0 != minute {
                *slot = (minute, 0);
            }
            slot.1 += 1;
        }
    }

    /// Requests refused for a missing or invalid key in the hour up to `now` (Unix seconds).
    pub(crate) fn unauthorized_last_hour(&self, now: u64) -> u64 {
        let minute = now / 60;
        match self.unauthorized_minutes.lock() {
            Ok(m) => m
                .iter()
                .filter(|(at, _)| *at + 60 > minute && *at <= minute)
                .map(|(_, n)| n)
                .sum(),
            Err(_) => 0,
        }
    }

    /// Adds one to a counter of these metrics.
    pub(crate) fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The text exposition. `gauges` are (name, help, value) read at the moment of the scrape.
    pub(crate) fn render(
        &self,
        gauges: &[(&str, &str, f64)],
        rejected_overload: u64,
        active_streams: i64,
    ) -> String {
        let mut out = String::with_capacity(8192);
        self.render_models(&mut out);
        self.render_upstreams(&mut out);
        self.render_rejected(&mut out, rejected_overload);
        let _ = writeln!(out, "# HELP tollgate_active_streams Streams being answered now.\n# TYPE tollgate_active_streams gauge\ntollgate_active_streams {active_streams}");
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        out
    }

    /// Requests, latency histograms, tokens and cost, by model.
    fn render_models(&self, out: &mut String) {
        out.push_str("# HELP tollgate_requests_total Generation requests by client protocol, model and status.\n# TYPE tollgate_requests_total counter\n");
        let models = crate::util::lock(&self.models);
        for (model, c) in models.iter() {
            let mut requests: Vec<_> = c.requests.iter().collect();
            requests.sort();
            for (p, s, n) in requests {
                let _ = writeln!(
                    out,
                    "tollgate_requests_total{{protocol=\"{}\",model=\"{}\",status=\"{}\"}} {n}",
                    label(p),
                    label(model),
                    label(s)
                );
            }
        }
        self.render_histograms(out);
        out.push_str("# HELP tollgate_tokens_total Tokens by model and kind.\n# TYPE tollgate_tokens_total counter\n");
        for (model, c) in models
            .iter()
            .filter(|(_, c)| c.tokens.iter().any(|&n| n > 0))
        {
            for (kind, n) in TOKEN_KINDS.iter().zip(c.tokens) {
                let _ = writeln!(
                    out,
                    "tollgate_tokens_total{{model=\"{}\",kind=\"{kind}\"}} {n}",
                    label(model)
                );
            }
        }
        out.push_str("# HELP tollgate_tier_requests_total Requests billed at a long-context tier, by model and the tier's above_input_tokens.\n# TYPE tollgate_tier_requests_total counter\n");
        for (model, c) in models.iter() {
            for (above, n) in &c.tiers {
                let _ = writeln!(
                    out,
                    "tollgate_tier_requests_total{{model=\"{}\",above_input_tokens=\"{above}\"}} {n}",
                    label(model)
                );
            }
        }
        out.push_str("# HELP tollgate_cost_total Credits charged by model.\n# TYPE tollgate_cost_total counter\n");
        for (model, c) in models.iter().filter(|(_, c)| c.cost > Money::ZERO) {
            let _ = writeln!(
                out,
                "tollgate_cost_total{{model=\"{}\"}} {}",
                label(model),
                c.cost
            );
        }
    }

    fn render_histograms(&self, out: &mut String) {
        self.duration.render(
            out,
            "tollgate_request_duration_seconds",
            "Time from request received to last byte answered.",
        );
        self.overhead.render(
            out,
            "tollgate_overhead_seconds",
            "The gateway's own time: total minus time waiting on the upstream.",
        );
        self.first_token.render(
            out,
            "tollgate_time_to_first_token_seconds",
            "Streams: time from request received to the first generated token sent.",
        );
    }

    fn render_upstreams(&self, out: &mut String) {
        out.push_str("# HELP tollgate_upstream_errors_total Failed attempts (5xx, timeouts, unreachable, broken streams; not 429) by upstream.\n# TYPE tollgate_upstream_errors_total counter\n");
        if let Ok(m) = self.upstream_errors.lock() {
            for (u, n) in m.iter() {
                let _ = writeln!(
                    out,
                    "tollgate_upstream_errors_total{{upstream=\"{}\"}} {n}",
                    label(u)
                );
            }
        }
    }

    fn render_rejected(&self, out: &mut String, overload: u64) {
        out.push_str("# HELP tollgate_rejected_requests_total Requests refused before an upstream call, by reason.\n# TYPE tollgate_rejected_requests_total counter\n");
        let reasons = [
            ("overload", overload),
            ("rate_limit", self.rate_limited.load(Ordering::Relaxed)),
            ("quota", self.quota_exhausted.load(Ordering::Relaxed)),
            ("ledger", self.ledger_refused.load(Ordering::Relaxed)),
            ("store", self.store_refused.load(Ordering::Relaxed)),
        ];
        for (reason, n) in reasons {
            let _ = writeln!(
                out,
                "tollgate_rejected_requests_total{{reason=\"{reason}\"}} {n}"
            );
        }
        let now = crate::util::unix_now();
        let _ = writeln!(
            out,
            "# HELP tollgate_unauthorized_requests_total Requests without a valid API key (401; no usage record).\n\
             # TYPE tollgate_unauthorized_requests_total counter\ntollgate_unauthorized_requests_total {}\n\
             # HELP tollgate_unauthorized_requests_last_hour Requests without a valid API key in the last hour.\n\
             # TYPE tollgate_unauthorized_requests_last_hour gauge\ntollgate_unauthorized_requests_last_hour {}",
            self.unauthorized_total.load(Ordering::Relaxed),
            self.unauthorized_last_hour(now)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthorized_requests_are_counted_per_hour() {
        let m = Metrics::default();
        let t = 1_000_000 * 60;
        m.unauthorized(t);
        m.unauthorized(t + 30);
        m.unauthorized(t + 59 * 60);
        assert_eq!(m.unauthorized_last_hour(t + 59 * 60), 3);
        // An hour later the first minute has left the window.
        assert_eq!(m.unauthorized_last_hour(t + 60 * 60), 1);
        assert_eq!(m.unauthorized_last_hour(t + 200 * 60), 0);
        assert_eq!(m.unauthorized_total.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_histogram_scrape_is_one_snapshot() {
        let h = Histogram::new(&OVERHEAD_BUCKETS);
        for ms in [0u64, 1, 3, 700, 5000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        let value = |prefix: &str| -> u64 {
            out.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        assert_eq!(value("x_count "), 5);
        assert_eq!(value("x_bucket{le=\"+Inf\"} "), 5);
        assert_eq!(value("x_bucket{le=\"1\"} "), 4, "5 s is above every bound");
    }
}
