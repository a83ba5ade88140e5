//! Live availability of each model for the console: last success and last error (with time), recent
//! latency and error rate over the last requests, and on demand a probe of whether each upstream answers.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::{Config, Upstream, UpstreamKind};

const WINDOW: usize = 100;

#[derive(Default)]
struct ModelStats {
    last_success_ms: Option<u64>,
    last_error_ms: Option<u64>,
    last_error: Option<String>,
    /// (latency ms, failed) of the last requests.
    recent: VecDeque<(u64, bool)>,
}

/// Per-model counters, updated when a request that reached an upstream ends.
#[derive(Default)]
pub(crate) struct UsageStats {
    models: Mutex<HashMap<String, ModelStats>>,
    probes: Mutex<HashMap<String, (Instant, Value)>>,
}

impl UsageStats {
    pub(crate) fn observe(&self, model: &str, latency_ms: u64, failed: bool, error: Option<&str>) {
        self.observe_at(model, latency_ms, failed, error, crate::util::unix_millis());
    }

    /// Rebuilds the recent history from the usage ledger (oldest first), so availability survives a
    /// restart. Only records of requests that reached an upstream count, as at run time (not the answer
    /// cache's hits); a record's
    /// upstream failure is what the failover policy (`upstream::policy`) decided for it: 5xx, or an error
    /// after the answer started.
    pub(crate) fn replay(&self, records: &[crate::ledger::Record]) {
        use crate::ledger::Status;
        let hit = |r: &crate::ledger::Record| r.cache == Some(crate::ledger::CacheUse::Hit);
        for r in records.iter().filter(|r| !r.upstream.is_empty() && !hit(r)) {
            let Some(at) = crate::util::parse_rfc3339_millis(&r.ts) else {
                continue;
            };
            let failed = match r.status {
                Status::Http(s) => s >= 500 || (s == 200 && r.error.is_some()),
                Status::ClientClosed | Status::Shutdown => continue,
            };
            let at = (at.max(0) as u64).saturating_add(r.latency_ms);
            self.observe_at(&r.model, r.latency_ms, failed, r.error.as_deref(), at);
        }
    }

    fn observe_at(
        &self,
        model: &str,
        latency_ms: u64,
        failed: bool,
        error: Option<&str>,
        now: u64,
    ) {
        let mut m = crate::util::lock(&self.models);
        if !m.contains_key(model) {
            m.insert(model.to_string(), Default::default());
        }
        let Some(st) = m.get_mut(model) else {
            return;
        };
        if failed {
            st.last_error_ms = Some(now);
            st.last_error = error.map(|e| e.chars().take(300).collect());
        } else {
            st.last_success_ms = Some(now);
        }
        st.recent.push_back((latency_ms, failed));
        while st.recent.len() > WINDOW {
            st.recent.pop_front();
        }
    }

    /// The console's view of one model's recent health.
    pub(crate) fn model_json(&self, model: &str) -> Value {
        let m = crate::util::lock(&self.models);
        let Some(st) = m.get(model) else {
            return json!({"requests": 0, "last_success": null, "last_error": null, "last_error_message": null,
                          "latency_p50_ms": null, "latency_p95_ms": null, "error_rate": null});
        };
        let mut lat: Vec<u64> = st
            .recent
            .iter()
            .filter(|(_, f)| !f)
            .map(|(l, _)| *l)
            .collect();
        lat.sort_unstable();
        let pct = |p: f64| -> Option<u64> {
            (!lat.is_empty()).then(|| lat[((lat.len() - 1) as f64 * p).round() as usize])
        };
        let errors = st.recent.iter().filter(|(_, f)| *f).count();
        json!({
            "requests": st.recent.len(),
            "last_success": st.last_success_ms.map(crate::util::rfc3339_millis),
            "last_error": st.last_error_ms.map(crate::util::rfc3339_millis),
            "last_error_message": st.last_error,
            "latency_p50_ms": pct(0.5),
            "latency_p95_ms": pct(0.95),
            "error_rate": if st.recent.is_empty() { Value::Null } else { json!(errors as f64 / st.recent.len() as f64) },
        })
    }

    /// Whether each upstream answers now: a light GET of its model list (cached for 15 s), in parallel.
    pub(crate) fn probe_all(&self, agent: &ureq::Agent, config: &Config) -> HashMap<String, Value> {
        let mut out = HashMap::new();
        let mut todo: Vec<&Upstream> = Vec::new();
        {
            let cache = crate::util::lock(&self.probes);
            for u in &config.upstreams {
                match cache.get(&u.name) {
                    Some((at, v)) if at.elapsed() < Duration::from_secs(15) => {
                        out.insert(u.name.clone(), v.clone());
                    }
                    _ => todo.push(u),
                }
            }
        }
        let results: Vec<(String, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = todo
                .iter()
                .map(|u| {
                    let builder = std::thread::Builder::new().name("tollgate-probe".into());
                    let started = crate::logging::scoped(s, builder, move || {
                        (u.name.clone(), probe(agent, u))
                    });
                    (u, started)
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|(u, started)| match started {
                    Ok(h) => h.join().ok(),
                    Err(e) => Some((u.name.clone(), not_probed(&e))),
                })
                .collect()
        });
        let mut cache = crate::util::lock(&self.probes);
        for (name, v) in results {
            cache.insert(name.clone(), (Instant::now(), v.clone()));
            out.insert(name, v);
        }
        out
    }
}

/// An upstream whose probe thread could not be started: down as far as anyone can tell, and why.
fn not_probed(e: &std::io::Error) -> Value {
    let checked = crate::util::rfc3339_millis(crate::util::unix_millis());
    let detail = format!("could not start a thread to probe it: {e}");
    json!({"up": false, "status": null, "latency_ms": 0, "checked": checked, "detail": detail})
}

/// One probe: any HTTP answer below 500 means the upstream is there (401 would mean a wrong upstream key,
/// which is reported as such).
fn probe(agent: &ureq::Agent, u: &Upstream) -> Value {
    let checked = crate::util::rfc3339_millis(crate::util::unix_millis());
    if u.kind == UpstreamKind::Mock {
        return json!({"up": true, "status": null, "latency_ms": 0, "checked": checked, "detail": "built-in mock"});
    }
    let req =
        crate::upstream::http::with_credentials(agent.get(crate::upstream::http::models_url(u)), u);
    let started = Instant::now();
    let result = req
        .config()
        .timeout_global(Some(
            Duration::from_secs(3).min(u.connect_timeout + Duration::from_secs(2)),
        ))
        .build()
        .call();
    let ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let detail = match status {
                401 | 403 => "answers, but refuses the configured upstream key",
                s if s >= 500 => "answers with a server error",
                _ => "answers",
            };
            json!({"up": status < 500, "status": status, "latency_ms": ms, "checked": checked, "detail": detail})
        }
        Err(e) => {
            let detail = crate::upstream::http::map_error(
                &u.name,
                crate::upstream::http::host_of(&u.base_url),
                e,
            )
            .operator_text()
            .into_owned();
            json!({"up": false, "status": null, "latency_ms": ms, "checked": checked, "detail": detail})
        }
    }
}
