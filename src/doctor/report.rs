//! The facts a support request needs besides the steps (time, OS, container, proxy) and the support report
//! itself: plain text between two marker lines, with the key and the prompt removed.

use std::fmt::Write as _;
use std::path::Path;

use super::kinds::{ProbeOutcome, MAX_DETAIL, PROMPT};
use super::text::{clip, fmt_duration};
use crate::protocol::Protocol;

pub(super) const BEGIN: &str = "-----BEGIN TOLLGATE DOCTOR REPORT-----";
pub(super) const END: &str = "-----END TOLLGATE DOCTOR REPORT-----";

/// What is shown of a key: its first five characters and its length (`tg_3d…(43 chars)`); only the length
/// for short values, which five characters would give away.
pub(super) fn key_preview(key: &str) -> String {
    let n = key.chars().count();
    if n < 16 {
        return format!("…({n} chars)");
    }
    let head: String = key.chars().take(5).collect();
    format!("{head}…({n} chars)")
}

/// Removes secrets from text that is about to be printed: the key (as given and as sent) always, the prompt
/// in the report.
pub(super) struct Scrubber<'a> {
    /// The key as sent; shown as its preview wherever it (or `also`) appears.
    pub key: &'a str,
    /// The key as given, when it differs (whitespace, quotes, `Bearer `).
    pub also: &'a str,
    pub prompt: bool,
}

impl Scrubber<'_> {
    pub(super) fn clean(&self, text: &str) -> String {
        let mut out = text.to_string();
        let preview = key_preview(self.key);
        // The longer form first: the given key contains the sent one. A short "key" (a typo) would match
        // ordinary text; a real key is long.
        let (a, b) = if self.also.len() >= self.key.len() {
            (self.also, self.key)
        } else {
            (self.key, self.also)
        };
        for k in [a, b] {
            if k.len() >= 8 {
                out = out.replace(k, &preview);
            }
        }
        if self.prompt {
            out = out.replace(PROMPT, "[prompt removed]");
        }
        out
    }
}

/// `linux x86_64, Debian GNU/Linux 12 (bookworm)`.
pub(super) fn os_description() -> String {
    let base = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    let release = ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| pretty_name(&t));
    match release {
        Some(r) => format!("{base}, {r}"),
        None => base,
    }
}

/// `PRETTY_NAME` of an os-release file.
pub(super) fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.trim().strip_prefix("PRETTY_NAME=")?;
        let v = v.trim().trim_matches('"').trim_matches('\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// Why this looks like a container, or `None`.
pub(super) fn container_evidence() -> Option<String> {
    if Path::new("/.dockerenv").exists() {
        return Some("/.dockerenv exists".into());
    }
    if Path::new("/run/.containerenv").exists() {
        return Some("/run/.containerenv exists".into());
    }
    if let Some(w) = std::fs::read_to_string("/proc/1/cgroup")
        .ok()
        .and_then(|t| cgroup_container_word(&t))
    {
        return Some(format!("/proc/1/cgroup mentions {w}"));
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return Some("KUBERNETES_SERVICE_HOST is set".into());
    }
    None
}

/// The container runtime named in a `/proc/1/cgroup`.
pub(super) fn cgroup_container_word(cgroup: &str) -> Option<&'static str> {
    ["docker", "kubepods", "containerd", "lxc"]
        .into_iter()
        .find(|w| cgroup.contains(w))
}

/// The local UTC offset in seconds when it is known to be UTC (no `TZ`, or a UTC one, and `/etc/localtime`
/// absent or pointing at UTC); `None` otherwise: tollgate reads no zone files and runs no programs for it, so
/// the report then gives UTC times and says so.
pub(super) fn local_offset() -> Option<i64> {
    let utc_name = |n: &str| {
        let n = n.trim_start_matches(':');
        matches!(
            n,
            "" | "UTC"
                | "UTC0"
                | "Etc/UTC"
                | "Etc/UCT"
                | "UCT"
                | "Etc/Zulu"
                | "Zulu"
                | "GMT"
                | "Etc/GMT"
        )
    };
    if let Ok(tz) = std::env::var("TZ") {
        return utc_name(&tz).then_some(0);
    }
    match std::fs::read_link("/etc/localtime") {
        Ok(target) => {
            let t = target.to_string_lossy();
            let zone = t.rsplit("zoneinfo/").next().unwrap_or("");
            utc_name(zone).then_some(0)
        }
        Err(_) if !std::path::Path::new("/etc/localtime").exists() => Some(0),
        Err(_) => None,
    }
}

/// `2026-11-22 14:03 UTC`.
pub(super) fn utc_minute(unix: u64) -> String {
    format!("{} UTC", minute(unix))
}

/// `2026-11-22 15:03 (UTC+01:00)`, or a note that only UTC is known.
pub(super) fn local_minute(unix: u64, offset: Option<i64>) -> String {
    match offset {
        Some(off) => {
            let t = (unix as i64 + off).max(0) as u64;
            let sign = if off < 0 { '-' } else { '+' };
            let a = off.abs();
            format!(
                "{} (UTC{sign}{:02}:{:02})",
                minute(t),
                a / 3600,
                (a % 3600) / 60
            )
        }
        None => "not determined (tollgate does not read time-zone files): the times here are UTC"
            .to_string(),
    }
}

fn minute(unix: u64) -> String {
    // `2026-11-22T14:03:05Z` → `2026-11-22 14:03`.
    crate::util::rfc3339(unix)[..16].replacen('T', " ", 1)
}

/// The proxy the HTTP client takes from the environment (as the SDKs do), redacted.
pub(super) fn proxy_setting() -> String {
    let proxy = [
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
    ]
    .iter()
    .find_map(|n| {
        std::env::var(n)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| format!("{n}={}", super::url::redact_parts(v.trim())))
    });
    let no_proxy = ["NO_PROXY", "no_proxy"]
        .iter()
        .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()));
    match (proxy, no_proxy) {
        (Some(p), Some(n)) => format!("{p} (NO_PROXY={n})"),
        (Some(p), None) => p,
        (None, _) => "none".to_string(),
    }
}

/// Everything the report says.
pub(super) struct ReportFacts<'a> {
    pub started_unix: u64,
    pub local_offset: Option<i64>,
    pub os: String,
    pub container: Option<String>,
    pub proxy: String,
    /// The key as sent, and as given.
    pub key: &'a str,
    pub given_key: &'a str,
    pub model: &'a str,
    pub protocols: &'a [Protocol],
    /// The base URL with credentials, query and fragment replaced.
    pub redacted_url: &'a str,
    /// What step 1 found wrong with the base URL, the key or the model.
    pub setup_errors: &'a [String],
    pub outcomes: &'a [ProbeOutcome],
    /// The likely cause of each failed outcome, by index.
    pub causes: &'a [Option<String>],
    pub failed_steps: usize,
    pub total_steps: usize,
}

/// The support report, ready to paste.
pub(super) fn render(f: &ReportFacts) -> String {
    let scrub = Scrubber {
        key: f.key,
        also: f.given_key,
        prompt: true,
    };
    let mut r = String::new();
    let _ = writeln!(r, "{BEGIN}");
    facts_lines(&mut r, f);
    requests_lines(&mut r, f);
    plain_results_lines(&mut r, f);
    errors_lines(&mut r, f, &scrub);
    let _ = writeln!(
        r,
        "(The API key and the prompt are removed from this report.)"
    );
    let _ = writeln!(r, "{END}");
    r
}

/// `Label:        value` lines: time, client, machine, what was checked, and the verdict.
fn facts_lines(r: &mut String, f: &ReportFacts) {
    let mut line = |k: &str, v: &str| {
        let _ = writeln!(r, "{:<16}{}", format!("{k}:"), v);
    };
    line("Time (UTC)", &utc_minute(f.started_unix));
    line(
        "Time (local)",
        &local_minute(f.started_unix, f.local_offset),
    );
    line("Client", super::CLIENT);
    line("OS", &f.os);
    line(
        "Container",
        &match &f.container {
            Some(why) => format!("yes ({why})"),
            None => "no (none of /.dockerenv, /run/.containerenv, a container cgroup, KUBERNETES_SERVICE_HOST)"
                .to_string(),
        },
    );
    line("Proxy", &f.proxy);
    line("Base URL", &format!("{} (redacted)", f.redacted_url));
    line("Key", &key_preview(f.key));
    line("Model", f.model);
    line(
        "Protocols",
        &f.protocols
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", "),
    );
    line(
        "URL and key",
        if f.setup_errors.is_empty() {
            "OK"
        } else {
            "FAIL (see Errors)"
        },
    );
    line(
        "Result",
        &if f.failed_steps == 0 {
            format!("PASS (all {} steps passed)", f.total_steps)
        } else {
            format!(
                "FAIL ({} of {} steps failed)",
                f.failed_steps, f.total_steps
            )
        },
    );
}

/// One line per request: protocol, streaming, verdict, status, time and both request ids.
fn requests_lines(r: &mut String, f: &ReportFacts) {
    let _ = writeln!(r, "Requests:");
    for o in f.outcomes {
        let _ = writeln!(
            r,
            "  {:<9}  stream={:<5}  {}  {:<14}  {:>8}  request id {}  client request id {}",
            o.label(),
            o.stream,
            if o.passed() { "PASS" } else { "FAIL" },
            match o.status {
                Some(s) => format!("HTTP {s}"),
                None => "no answer".to_string(),
            },
            fmt_duration(o.total),
            o.request_id.as_deref().unwrap_or("none"),
            o.client_request_id
        );
    }
}

/// What each protocol's minimal non-streaming request gave.
fn plain_results_lines(r: &mut String, f: &ReportFacts) {
    let _ = writeln!(r, "Minimal request (non-streaming) results:");
    for p in f.protocols {
        let Some(o) = f.outcomes.iter().find(|o| o.is_plain_of(*p)) else {
            continue;
        };
        let result = match (&o.failure, o.status) {
            (None, Some(s)) => format!(
                "HTTP {s} with text ({} chars); the protocol path works",
                o.text.chars().count()
            ),
            (Some(_), Some(s)) => format!("HTTP {s}, failed (see Errors)"),
            (_, None) => "no HTTP answer (see Errors)".to_string(),
        };
        let _ = writeln!(r, "  {:<9}  {result}", p.name);
    }
}

/// Step 1's errors, then each failed request's error on one line with its likely cause; or `none`.
fn errors_lines(r: &mut String, f: &ReportFacts, scrub: &Scrubber) {
    if f.setup_errors.is_empty() && f.failed_steps == 0 {
        let _ = writeln!(r, "Errors:         none");
        return;
    }
    let _ = writeln!(r, "Errors:");
    for e in f.setup_errors {
        let _ = writeln!(r, "  {}", scrub.clean(e));
    }
    for (o, cause) in f.outcomes.iter().zip(f.causes) {
        let Some(fail) = &o.failure else { continue };
        let _ = writeln!(
            r,
            "  {} stream={}: {}",
            o.label(),
            o.stream,
            one_line(&scrub.clean(&clip(&fail.detail, MAX_DETAIL)))
        );
        if let Some(c) = cause {
            let _ = writeln!(r, "    likely cause: {}", scrub.clean(c));
        }
    }
}

/// Line breaks and tabs as spaces, so one error stays one line of the report.
fn one_line(s: &str) -> String {
    s.split(['\n', '\r', '\t'])
        .filter(|p| !p.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_previews_never_show_the_key() {
        let key = "tg_3dRk0123456789abcdefghijABCDEFGHIJ012345";
        assert_eq!(key_preview(key), "tg_3d…(43 chars)");
        assert_eq!(key_preview("short"), "…(5 chars)");
        let given = format!(" Bearer {key}\n");
        let s = Scrubber {
            key,
            also: &given,
            prompt: true,
        };
        let cleaned = s.clean(&format!(
            "bad key {key}; You said: {PROMPT}; as given:{given}."
        ));
        assert!(!cleaned.contains(key));
        assert!(!cleaned.contains(&key[3..]));
        assert!(!cleaned.contains(PROMPT));
        assert!(cleaned.contains("tg_3d…(43 chars)"));
        assert!(cleaned.contains("[prompt removed]"));
        // A tiny "key" is not scrubbed out of ordinary text.
        let s = Scrubber {
            key: "a",
            also: "a",
            prompt: false,
        };
        assert_eq!(s.clean("a cat"), "a cat");
    }

    #[test]
    fn os_release_and_cgroups() {
        let t = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            pretty_name(t).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(pretty_name("ID=alpine\n"), None);
        assert_eq!(
            cgroup_container_word("12:pids:/docker/3f2a\n"),
            Some("docker")
        );
        assert_eq!(
            cgroup_container_word("0::/kubepods.slice/kubepods-pod1"),
            Some("kubepods")
        );
        assert_eq!(cgroup_container_word("0::/init.scope\n"), None);
    }

    #[test]
    fn offsets_and_minutes() {
        // 2026-11-22T14:03:59Z
        let t = 1_795_356_239;
        assert_eq!(utc_minute(t), "2026-11-22 14:03 UTC");
        assert_eq!(local_minute(t, Some(3600)), "2026-11-22 15:03 (UTC+01:00)");
        assert_eq!(
            local_minute(t, Some(-19800)),
            "2026-11-22 08:33 (UTC-05:30)"
        );
        assert!(local_minute(t, None).starts_with("not determined"));
    }

    #[test]
    fn one_line_joins() {
        assert_eq!(one_line("a\n  b\r\n\tc"), "a b c");
    }
}
