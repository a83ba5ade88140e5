//! The doctor's printed steps: a step's outcome, field by field, and the result line.

use std::io::Write;

use super::kinds::ProbeOutcome;
use super::report::Scrubber;
use super::text::{clip, fmt_duration};

/// The verdict line, and the heading of the support report below it.
pub(super) fn print_result(out: &mut impl Write, failed_steps: usize, total_steps: usize) {
    if failed_steps == 0 {
        let _ = writeln!(
            out,
            "Result: PASS: all {total_steps} steps passed. The protocol path works; the gateway's console \
             should show a usage record for each request id above."
        );
    } else {
        let _ = writeln!(
            out,
            "Result: FAIL: {failed_steps} of {total_steps} steps failed. Fix the first cause above, change one \
             setting at a time and run the doctor again."
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Support report (paste everything between the two marker lines into a support request):"
    );
}

/// One `label value` line, the values aligned (a label as long as the column still gets a space).
pub(super) fn field(out: &mut impl Write, label: &str, value: &str) {
    let _ = writeln!(out, "    {label:<11} {value}");
}

pub(super) fn print_outcome(
    out: &mut impl Write,
    o: &ProbeOutcome,
    cause: Option<&str>,
    scrub: &Scrubber,
) {
    let _ = writeln!(out, "{}", if o.passed() { "PASS" } else { "FAIL" });
    if !o.url.is_empty() {
        field(out, "request", &format!("POST {}", o.url));
    }
    let status = match o.status {
        Some(s) => {
            let reason = ureq::http::StatusCode::from_u16(s)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("");
            let mut v = format!("{s} {reason}").trim_end().to_string();
            if o.stream {
                v.push_str(&format!(
                    ", {}",
                    o.content_type.as_deref().unwrap_or("no content-type")
                ));
            }
            v
        }
        None => "none (no HTTP answer)".into(),
    };
    field(out, "status", &status);
    let mut latency = String::new();
    if let Some(h) = o.headers_at {
        latency.push_str(&format!("head after {}, ", fmt_duration(h)));
    }
    if o.stream {
        if let Some(b) = o.first_byte {
            latency.push_str(&format!("first byte after {}, ", fmt_duration(b)));
        }
        if let Some(t) = o.first_text {
            latency.push_str(&format!("first text after {}, ", fmt_duration(t)));
        }
    }
    latency.push_str(&format!("total {}", fmt_duration(o.total)));
    if o.stream && o.events > 0 {
        latency.push_str(&format!(
            " ({} events{})",
            o.events,
            if o.passed() {
                format!(", ended with `{}`", o.proto.stream_terminal)
            } else {
                String::new()
            }
        ));
    }
    field(out, "latency", &latency);
    let text = if o.text.is_empty() {
        "(none)".to_string()
    } else {
        format!("{:?}", clip(o.text.trim(), 300))
    };
    field(out, "text", &scrub.clean(&text));
    let rid = format!(
        "{} (X-Client-Request-ID {}{})",
        o.request_id.as_deref().unwrap_or("none received"),
        o.client_request_id,
        if o.echoed { ", echoed" } else { "" }
    );
    field(out, "request id", &rid);
    if let Some(f) = &o.failure {
        field(out, "error", &scrub.clean(&f.detail));
    }
    if let Some(c) = cause {
        field(out, "cause", &scrub.clean(c));
    }
    for n in &o.notes {
        field(out, "note", n);
    }
    let _ = writeln!(out);
}
