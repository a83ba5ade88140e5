//! The `/metrics` scrape: the counters and histograms of [`super::Metrics`], and gauges read from the
//! running gateway at the moment of the scrape.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::label;
use crate::gateway::Gateway;

/// The whole `/metrics` text: the counters and histograms, and gauges read at the moment of the scrape
/// (queue, connections, buffered request bodies, workers, the usage ledger's backlog, each configured upstream's breaker),
/// and the answer cache's counts.
pub(crate) fn scrape(gw: &Gateway) -> String {
    let config = gw.config();
    let mut gauges = vec![
        (
            "tollgate_queue_depth",
            "Requests waiting for a worker.",
            gw.state.queued.load(Ordering::Relaxed) as f64,
        ),
        (
            "tollgate_open_connections",
            "Client connections open.",
            gw.state.open_connections.load(Ordering::Relaxed) as f64,
        ),
        (
            "tollgate_in_flight_requests",
            "Requests handed to a worker and not yet answered.",
            gw.state.in_flight.load(Ordering::Relaxed) as f64,
        ),
        (
            "tollgate_buffered_body_bytes",
            "Request-body bytes held now across all connections (counted as they arrive; at most \
             max_buffered_body_bytes).",
            gw.state.buffered_body.load(Ordering::Relaxed) as f64,
        ),
        ("tollgate_workers", "Worker threads.", config.workers as f64),
        (
            "tollgate_ledger_backlog_records",
            "Usage records not yet written to the ledger file (kept in memory while its disk fails).",
            gw.ledger.backlog() as f64,
        ),
        (
            "tollgate_ledger_healthy",
            "1 while the usage ledger's last write and sync succeeded, 0 after a failure.",
            if gw.ledger.healthy() { 1.0 } else { 0.0 },
        ),
    ];
    gauges.extend(ledger_gauges(gw));
    let mut out = gw.metrics.render(
        &gauges,
        gw.state.rejected.load(Ordering::Relaxed) as u64,
        gw.state.streams.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_ledger_write_errors_total Failed writes or syncs of the usage ledger.\n\
         # TYPE tollgate_ledger_write_errors_total counter\ntollgate_ledger_write_errors_total {}",
        gw.ledger.write_errors()
    );
    let _ = writeln!(
        out,
        "# HELP tollgate_log_lines_dropped_total Log lines dropped because stderr could not keep up.\n\
         # TYPE tollgate_log_lines_dropped_total counter\ntollgate_log_lines_dropped_total {}",
        crate::logging::dropped_lines()
    );
    upstream_gauges(gw, &config, &mut out);
    cache_metrics(gw, &mut out);
    out
}

/// The answer cache, per model: hits, misses, bypasses, the bytes of its entries, evictions.
fn cache_metrics(gw: &Gateway, out: &mut String) {
    let stats = gw.cache.stats();
    type Read = fn(&crate::cache::ModelStats) -> u64;
    let series: [(&str, &str, &str, Read); 5] = [
        (
            "tollgate_cache_hits_total",
            "counter",
            "Requests answered from the answer cache, by model.",
            |s| s.hits,
        ),
        (
            "tollgate_cache_misses_total",
            "counter",
            "Requests to a cached model looked up and not found (or the store did not answer), by model.",
            |s| s.misses,
        ),
        (
            "tollgate_cache_bypasses_total",
            "counter",
            "Requests to a cached model not looked up (Cache-Control no-store or no-cache, a request the \
             cache does not keep, or refused at admission), by model.",
            |s| s.bypasses,
        ),
        (
            "tollgate_cache_bytes",
            "gauge",
            "Bytes of the model's cached answers (with a store: there, as this instance last learnt).",
            |s| s.bytes,
        ),
        (
            "tollgate_cache_evictions_total",
            "counter",
            "Cached answers removed to make room before they expired (cache_max_mb), by model.",
            |s| s.evictions,
        ),
    ];
    for (name, kind, help, read) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (model, s) in &stats {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", label(model), read(s));
        }
    }
}

/// Each configured upstream's breaker state and whether it is cooling down after a 429.
fn upstream_gauges(gw: &Gateway, config: &crate::config::Config, out: &mut String) {
    out.push_str(
        "# HELP tollgate_upstream_breaker Breaker state per upstream: 1 for the state it is in (closed; open: \
         it stopped answering and is skipped; probing: one request is checking it; ejected: it answers with \
         errors and is passed over while a sibling is healthy).\n# TYPE tollgate_upstream_breaker gauge\n",
    );
    for u in &config.upstreams {
        let view = gw.breakers.view(&u.name);
        for state in ["closed", "open", "probing", "ejected"] {
            let _ = writeln!(
                out,
                "tollgate_upstream_breaker{{upstream=\"{}\",state=\"{state}\"}} {}",
                label(&u.name),
                u8::from(view.state == state)
            );
        }
    }
    out.push_str(
        "# HELP tollgate_upstream_cooling 1 while an upstream gets no new requests after a 429 (until its \
         retry-after passes).\n# TYPE tollgate_upstream_cooling gauge\n",
    );
    for u in &config.upstreams {
        let cooling = gw.routing.view(&u.name).cooling_until_unix_ms.is_some();
        let _ = writeln!(
            out,
            "tollgate_upstream_cooling{{upstream=\"{}\"}} {}",
            label(&u.name),
            u8::from(cooling)
        );
    }
}

/// The usage ledger's files and the data disk (measured every 2 s by the ledger's keeper thread).
fn ledger_gauges(gw: &Gateway) -> [(&'static str, &'static str, f64); 6] {
    let files = gw.ledger.stats();
    let oldest = files
        .oldest_record
        .as_deref()
        .and_then(crate::util::parse_rfc3339_millis)
        .map_or(0.0, |ms| ms as f64 / 1000.0);
    [
        (
            "tollgate_ledger_bytes",
            "Bytes of every usage ledger file, rotated and compressed ones included (as on disk).",
            files.bytes as f64,
        ),
        (
            "tollgate_ledger_files",
            "Usage ledger files: the active one and those it rotated into.",
            files.files as f64,
        ),
        (
            "tollgate_ledger_oldest_record_timestamp_seconds",
            "When the oldest usage record kept began (Unix seconds; 0 while there is none).",
            oldest,
        ),
        (
            "tollgate_data_disk_free_bytes",
            "Free bytes on the data directory's disk (a WARN below min_free_disk_mb).",
            files.free_bytes.unwrap_or(0) as f64,
        ),
        (
            "tollgate_data_disk_low",
            "1 while free space on the data disk is under min_free_disk_mb.",
            if files.low_disk { 1.0 } else { 0.0 },
        ),
        (
            "tollgate_ledger_checkpoint_records",
            "Usage records the last checkpoint covers (a start replays only those after it).",
            files.checkpoint_records as f64,
        ),
    ]
}
