//! Usage for the console and scripts: filtered records (JSON or CSV) and the overview (last hour and day,
//! a per-hour series, top keys and models by spend).

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::gateway::Gateway;
use crate::http::Exchange;
use crate::ledger::{CacheFilter, Filter, Record, Status, StatusFilter};
use crate::money::Money;
use crate::protocol::ApiError;
use crate::util::{rfc3339, unix_now};

/// A time bound from a query parameter, as an instant (Unix milliseconds): RFC 3339 with any offset, or Unix
/// seconds (the start of that second). Anything else is 400 naming the parameter.
fn time_param(ex: &Exchange, name: &str) -> Result<Option<i64>, ApiError> {
    let Some(v) = ex.request.query_param(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return match v.parse::<i64>().ok().and_then(|s| s.checked_mul(1000)) {
            Some(ms) => Ok(Some(ms)),
            None => Err(ApiError::invalid_param(
                name,
                format!("`{name}` is out of range"),
            )),
        };
    }
    match crate::util::parse_rfc3339_millis(&v) {
        Some(ms) => Ok(Some(ms)),
        None => Err(ApiError::invalid_param(
            name,
            format!(
                "`{name}` must be an RFC 3339 time (2026-11-22T10:00:00Z, or with an offset such as \
                 +02:00) or Unix seconds; got {v:?}"
            ),
        )),
    }
}

/// The filter in the query string.
fn filter(ex: &Exchange, default_limit: usize, max_limit: usize) -> Result<Filter, ApiError> {
    let q = |n: &str| ex.request.query_param(n).filter(|v| !v.is_empty());
    let status = match q("status") {
        None => None,
        Some(s) => Some(StatusFilter::parse(&s).ok_or_else(|| {
            ApiError::invalid_param(
                "status",
                "`status` must be a code (200), a class (4xx), client_closed or error",
            )
        })?),
    };
    let number = |n: &str, default: usize| -> Result<usize, ApiError> {
        match q(n) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| ApiError::invalid_param(n, format!("`{n}` must be a number"))),
        }
    };
    Ok(Filter {
        key: q("key"),
        model: q("model"),
        status,
        client_request_id: q("client_request_id"),
        request_id: q("request_id"),
        since: time_param(ex, "since")?,
        until: time_param(ex, "until")?,
        offset: number("offset", 0)?,
        limit: number("limit", default_limit)?.clamp(1, max_limit),
        search: q("q").map(|v| v.to_lowercase()),
        cache: match q("cache") {
            None => None,
            Some(c) => Some(CacheFilter::parse(&c).ok_or_else(|| {
                ApiError::invalid_param("cache", "`cache` must be hit, miss, bypass or not_hit")
            })?),
        },
    })
}

/// Records matching `f`, newest first: with a store, every instance's (from the shared usage stream); else,
/// or while the store does not answer, this instance's ledger.
fn query(gw: &Gateway, f: &Filter) -> Result<Vec<Record>, ApiError> {
    if let Some(store) = &gw.store {
        // This instance's own records first reach the stream, as the ledger's own query flushes first: a
        // client that has its answer finds its record here.
        if store.healthy() && !store.lost() {
            gw.ledger.flush();
            let _ = crate::store::shipper::catch_up(
                store,
                &gw.ledger,
                std::time::Duration::from_secs(2),
            );
        }
        match shared_query(store, f) {
            Ok(records) => return Ok(records),
            Err(e) => log::warn!(
                "store: usage read from this instance's ledger only, the store does not answer ({e})"
            ),
        }
    }
    gw.ledger
        .query(f)
        .map_err(|e| ApiError::internal(format!("cannot read the usage ledger: {e}")))
}

/// Records shipped within this long after they began are in order enough: a record this much older than
/// `since` ends the scan (as in the ledger's own scan).
const STREAM_MARGIN_MS: i64 = 6 * 3600 * 1000;

/// Records matching `f` from the shared usage stream, newest first (also `tollgate usage`'s, with a
/// `[store]`).
pub(crate) fn shared_query(
    store: &crate::store::Store,
    f: &Filter,
) -> Result<Vec<Record>, crate::store::StoreError> {
    let limit = if f.limit == 0 { 100 } else { f.limit };
    let cutoff = f.since.map(|t| t - STREAM_MARGIN_MS);
    let mut out = Vec::new();
    let mut skipped = 0;
    let mut before: Option<String> = None;
    loop {
        let page = store.usage_page(before.as_deref(), 1000)?;
        let Some((last, _)) = page.last() else {
            return Ok(out);
        };
        before = Some(last.clone());
        for (_, json) in &page {
            let Ok(r) = serde_json::from_str::<Record>(json) else {
                continue;
            };
            let at = crate::util::parse_rfc3339_millis(&r.ts);
            if cutoff.is_some_and(|c| at.is_some_and(|t| t < c)) {
                return Ok(out);
            }
            if !f.matches(&r) {
                continue;
            }
            if skipped < f.offset {
                skipped += 1;
                continue;
            }
            out.push(r);
            if out.len() >= limit {
                return Ok(out);
            }
        }
    }
}

/// `GET /admin/usage`: records newest first.
pub(crate) fn records(gw: &Gateway, ex: &Exchange) -> Result<Value, ApiError> {
    let mut f = filter(ex, 100, 10_000)?;
    // One more than asked tells whether there is a next page.
    let limit = f.limit;
    f.limit += 1;
    let mut data = query(gw, &f)?;
    let has_more = data.len() > limit;
    data.truncate(limit);
    // Totals of every record the filter matches, not only this page.
    let mut totals = Totals::default();
    let all = Filter {
        offset: 0,
        limit: usize::MAX,
        ..f
    };
    for r in query(gw, &all)? {
        totals.add(&r);
    }
    Ok(json!({"data": data, "has_more": has_more, "totals": totals.json()}))
}

/// `GET /admin/usage.csv`: the filtered records as CSV (up to 100,000).
pub(crate) fn csv(gw: &Gateway, ex: &Exchange) -> Result<String, ApiError> {
    let f = filter(ex, 100_000, 100_000)?;
    Ok(csv_of(query(gw, &f)?))
}

/// Records as CSV, with the header row (also `tollgate usage --csv`'s).
pub(crate) fn csv_of(records: Vec<Record>) -> String {
    let mut out = String::from(
        "ts,request_id,client_request_id,key,group,model,protocol,upstream,stream,status,input_tokens,\
         cached_input_tokens,cache_write_5m_tokens,cache_write_1h_tokens,output_tokens,reasoning_tokens,\
         tier_above_input_tokens,estimated,cost,latency_ms,error,reason,instance,cache,endpoint\n",
    );
    for r in records {
        let status = match r.status {
            Status::Http(c) => c.to_string(),
            Status::ClientClosed => "client_closed".into(),
            Status::Shutdown => "shutdown".into(),
        };
        let fields = [
            r.ts,
            r.request_id,
            r.client_request_id.unwrap_or_default(),
            r.key,
            r.group,
            r.model,
            r.protocol,
            r.upstream,
            r.stream.to_string(),
            status,
            r.input_tokens.to_string(),
            r.cached_input_tokens.to_string(),
            r.cache_write_5m_tokens.to_string(),
            r.cache_write_1h_tokens.to_string(),
            r.output_tokens.to_string(),
            r.reasoning_tokens.to_string(),
            r.tier_above_input_tokens
                .map(|t| t.to_string())
                .unwrap_or_default(),
            r.estimated.to_string(),
            format!("{}", r.cost),
            r.latency_ms.to_string(),
            r.error.unwrap_or_default(),
            r.reason.unwrap_or_default(),
            r.instance.unwrap_or_default(),
            r.cache.map_or("", |c| c.name()).to_string(),
            r.endpoint.unwrap_or_default(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// What starts a formula in a spreadsheet's cell: the ASCII signs, and the full-width ones East Asian
/// versions of Excel read alike.
const FORMULA_STARTS: [char; 10] = ['=', '+', '-', '@', '\t', '\r', '＝', '＋', '－', '＠'];

/// One CSV field: quoted when needed, and defused when a spreadsheet would read it as a formula. A `;` is
/// quoted too: where it is the list separator (German or French Excel), a field holding one would be split
/// into cells, the second of which could start a formula.
fn csv_field(s: &str) -> String {
    let mut v = s.to_string();
    if v.starts_with(FORMULA_STARTS) && v.parse::<f64>().is_err() {
        v.insert(0, '\'');
    }
    if v.contains([',', '"', '\n', '\r', ';']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}

#[derive(Default, Clone, Copy)]
struct Totals {
    requests: u64,
    tokens: u64,
    /// Tokens by kind, as the records count them: input (all), cache reads, 5-minute and 1-hour cache
    /// writes, output (all), reasoning.
    kinds: [u64; 6],
    cost: Money,
    errors: u64,
    /// Requests to models whose answers are cached, and those answered from the cache.
    cacheable: u64,
    hits: u64,
}

impl Totals {
    fn add(&mut self, r: &Record) {
        self.requests += 1;
        self.tokens = self
            .tokens
            .saturating_add(r.input_tokens.saturating_add(r.output_tokens));
        let kinds = [
            r.input_tokens,
            r.cached_input_tokens,
            r.cache_write_5m_tokens,
            r.cache_write_1h_tokens,
            r.output_tokens,
            r.reasoning_tokens,
        ];
        for (total, n) in self.kinds.iter_mut().zip(kinds) {
            *total = total.saturating_add(n);
        }
        self.cost += r.cost;
        if matches!(r.status, Status::Http(s) if s >= 400) || r.error.is_some() {
            self.errors += 1;
        }
        if let Some(c) = r.cache {
            self.cacheable += 1;
            self.hits += u64::from(c == crate::ledger::CacheUse::Hit);
        }
    }

    fn json(&self) -> Value {
        let rate = if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        };
        let [input, cached, w5m, w1h, output, reasoning] = self.kinds;
        // Of the requests to cached models, the share answered from the cache (null: none).
        let hit_rate = (self.cacheable > 0).then(|| self.hits as f64 / self.cacheable as f64);
        json!({"requests": self.requests, "tokens": self.tokens, "cost": self.cost, "errors": self.errors,
               "error_rate": rate, "input_tokens": input, "cached_input_tokens": cached,
               "cache_write_5m_tokens": w5m, "cache_write_1h_tokens": w1h, "output_tokens": output,
               "reasoning_tokens": reasoning, "cache_hits": self.hits, "cache_requests": self.cacheable,
               "cache_hit_rate": hit_rate})
    }
}

/// `GET /admin/overview[?range=24h|7d|30d][&key=NAME]`: totals for the last hour and the range, a series
/// over the range (hourly for 24h and 7d, daily for 30d), the top keys and models by spend, and requests
/// without a valid key in the last hour. With `key`, everything is that key's (its page in the console).
pub(crate) fn overview(gw: &Gateway, ex: &Exchange) -> Result<Value, ApiError> {
    let now = unix_now();
    let (span, bucket) = match ex.request.query_param("range").as_deref() {
        None | Some("24h") => (86_400, 3600),
        Some("7d") => (7 * 86_400, 3600),
        Some("30d") => (30 * 86_400, 86_400),
        Some(other) => {
            return Err(ApiError::invalid_param(
                "range",
                format!("range: expected 24h, 7d or 30d, got {other:?}"),
            ))
        }
    };
    let buckets_n = (span / bucket) as usize;
    let first_bucket = now - now % bucket - (buckets_n as u64 - 1) * bucket;
    let (range_ms, hour_ms) = (
        (now as i64 - span as i64) * 1000,
        (now as i64 - 3600) * 1000,
    );
    let mut last_hour = Totals::default();
    let mut in_range = Totals::default();
    let mut buckets = vec![Totals::default(); buckets_n];
    let mut keys: HashMap<String, Totals> = HashMap::new();
    let mut models: HashMap<String, Totals> = HashMap::new();
    let mut last_used: Option<String> = None;
    let f = Filter {
        since: Some(first_bucket.min(now - span) as i64 * 1000),
        key: ex.request.query_param("key").filter(|k| !k.is_empty()),
        limit: usize::MAX,
        ..Filter::default()
    };
    for r in query(gw, &f)? {
        let Some(ms) = crate::util::parse_rfc3339_millis(&r.ts) else {
            continue;
        };
        if last_used.as_deref().is_none_or(|l| r.ts.as_str() > l) {
            last_used = Some(r.ts.clone());
        }
        let t = ms.div_euclid(1000).max(0) as u64;
        if ms >= range_ms {
            in_range.add(&r);
            keys.entry(r.key.clone()).or_default().add(&r);
            models.entry(r.model.clone()).or_default().add(&r);
        }
        if ms >= hour_ms {
            last_hour.add(&r);
        }
        if t >= first_bucket {
            let i = ((t - first_bucket) / bucket) as usize;
            if i < buckets_n {
                buckets[i].add(&r);
            }
        }
    }
    let series: Vec<Value> = buckets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut j = t.json();
            j["hour"] = json!(rfc3339(first_bucket + i as u64 * bucket));
            j
        })
        .collect();
    Ok(json!({
        "now": rfc3339(now),
        "range": ex.request.query_param("range").unwrap_or_else(|| "24h".into()),
        "bucket_secs": bucket,
        "last_hour": last_hour.json(),
        "last_day": in_range.json(),
        "hourly": series,
        "top_keys": top(keys, "key"),
        "top_models": top(models, "model"),
        "last_used": last_used,
        // Requests without a valid key leave no record: the metrics count them.
        "unauthorized_last_hour": gw.metrics.unauthorized_last_hour(now),
        "currency": gw.config().currency,
        // Where the shared store is, for the operator only (`/readyz` does not say).
        "store": gw.store.as_ref().map(|s| json!({
            "at": s.describe(), "answers": s.healthy(), "lost": s.lost(), "error": s.last_error(),
        })),
    }))
}

/// The ledger's files and disk for `/admin/settings` (and the console's overview): size, files, the oldest
/// record, free space, the last checkpoint, and the settings that keep them.
pub(crate) fn ledger_files(gw: &Gateway) -> Value {
    let s = gw.ledger.stats();
    let o = &gw.config().ledger_files;
    let mb = crate::ledger::options::MB;
    json!({
        "bytes": s.bytes,
        "files": s.files,
        "compressed_files": s.compressed_files,
        "oldest_record": s.oldest_record,
        "free_disk_bytes": s.free_bytes,
        "low_disk": s.low_disk,
        "disk_warning": s.disk_warning(),
        "checkpoint": {"written": s.checkpoint_written, "records": s.checkpoint_records},
        "replayed_at_start": s.replayed_at_start,
        "max_file_mb": o.max_file_bytes as f64 / mb as f64,
        "retention_days": o.retention_days,
        "compress_after_days": o.compress_after_days,
        "min_free_disk_mb": o.min_free_disk_bytes / mb,
    })
}

/// The five with the most spend (then the most requests).
fn top(m: HashMap<String, Totals>, field: &str) -> Vec<Value> {
    let mut v: Vec<(String, Totals)> = m.into_iter().collect();
    v.sort_by(|a, b| {
        b.1.cost
            .cmp(&a.1.cost)
            .then(b.1.requests.cmp(&a.1.requests))
    });
    v.into_iter()
        .take(5)
        .map(|(name, t)| {
            let mut j = t.json();
            j[field] = json!(name);
            j
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_and_defused() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(csv_field("-0.5"), "-0.5");
        // A `;` list separator would split the field, and its second cell would be a formula.
        assert_eq!(
            csv_field("a;=cmd|' /c calc'!A0;b"),
            "\"a;=cmd|' /c calc'!A0;b\""
        );
        assert_eq!(csv_field("＝1+1"), "'＝1+1");
    }
}
