//! `tollgate usage`: the usage records a script asks for, read from the ledger's files in the data directory
//! (or, with a `[store]`, from the shared usage stream), so it needs neither the admin token nor a running
//! server. The filters are the admin API's (`GET /admin/usage`): key, model, status, client request id,
//! request id, a time range; newest first. A table, or `--json` (`{"data": [records]}`, the fields of the
//! ledger's lines) or `--csv` (the columns of `GET /admin/usage.csv`).

use std::io::Write;

use super::args::UsageArgs;
use super::store::Place;
use crate::ledger::{Filter, Record, Status, StatusFilter};

/// A time bound: RFC 3339 (any offset) or Unix seconds, as Unix milliseconds.
fn time(flag: &str, v: Option<&str>) -> Result<Option<i64>, String> {
    let Some(v) = v else {
        return Ok(None);
    };
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v
            .parse::<i64>()
            .ok()
            .and_then(|s| s.checked_mul(1000))
            .map(Some)
            .ok_or_else(|| format!("--{flag}: out of range"));
    }
    crate::util::parse_rfc3339_millis(v).map(Some).ok_or_else(|| {
        format!("--{flag}: expected an RFC 3339 time (2026-11-22T10:00:00Z) or Unix seconds, got {v:?}")
    })
}

fn filter(a: &UsageArgs) -> Result<Filter, String> {
    let status = match a.status.as_deref() {
        None => None,
        Some(s) => Some(StatusFilter::parse(s).ok_or_else(|| {
            format!("--status: expected a status (200), a class (4xx), client_closed, shutdown or error; got {s:?}")
        })?),
    };
    Ok(Filter {
        key: a.key.clone(),
        model: a.model.clone(),
        status,
        client_request_id: a.client_request_id.clone(),
        request_id: a.request_id.clone(),
        since: time("since", a.since.as_deref())?,
        until: time("until", a.until.as_deref())?,
        limit: a.limit.unwrap_or(100),
        ..Filter::default()
    })
}

/// Runs `tollgate usage`; returns the exit code.
pub(super) fn run(a: UsageArgs) -> i32 {
    if a.json && a.csv {
        eprintln!("give --json or --csv, not both");
        return 2;
    }
    let f = match filter(&a) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let config = match super::load(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let read = match Place::open(&config) {
        Ok(Place::Dir(dir)) => crate::ledger::read(&dir, &f)
            .map_err(|e| format!("cannot read the usage ledger in {}: {e}", dir.display())),
        Ok(Place::Store(store)) => crate::console::usage::shared_query(&store, &f)
            .map_err(|e| format!("cannot read the usage stream of {}: {e}", store.describe())),
        Err(e) => Err(e),
    };
    let records = match read {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        let _ = writeln!(out, "{}", serde_json::json!({ "data": records }));
    } else if a.csv {
        let _ = write!(out, "{}", crate::console::usage::csv_of(records));
    } else {
        table(&mut out, &records);
    }
    0
}

fn table(out: &mut impl Write, records: &[Record]) {
    let _ = writeln!(
        out,
        "{:<24} {:<16} {:<20} {:<13} {:>9} {:>9} {:>12}  REQUEST ID",
        "TS", "KEY", "MODEL", "STATUS", "IN", "OUT", "COST"
    );
    for r in records {
        let status = match r.status {
            Status::Http(c) => c.to_string(),
            Status::ClientClosed => "client_closed".into(),
            Status::Shutdown => "shutdown".into(),
        };
        let _ = writeln!(
            out,
            "{:<24} {:<16} {:<20} {:<13} {:>9} {:>9} {:>12}  {}",
            r.ts,
            r.key,
            r.model,
            status,
            r.input_tokens,
            r.output_tokens,
            format!("{}", r.cost),
            r.request_id
        );
    }
}
