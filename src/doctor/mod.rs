//! `tollgate doctor`: the specification's diagnostic procedure (its "Errors" and "Diagnostic procedure"
//! sections) as a client, against any gateway that speaks Chat Completions, Responses or Messages (not only
//! tollgate).
//!
//! ```text
//! tollgate doctor --base-url URL --key KEY --model M [--protocol chat|responses|messages|all]
//! ```
//!
//! Steps: (1) the base URL's shape and the key's form, then per protocol (2) the minimal non-streaming
//! request (60 s overall timeout) and (3) the same request streamed (180 s). Each step prints its status,
//! latency, the text received and the request id; a failed one names its likely cause from the
//! specification's status table. A support report closes the output. Exit code: 0 when every step passed,
//! 1 when any failed (the shape step included), 2 for unusable arguments.
//!
//! Decisions where the issue left room:
//!
//! - **Base URL forms.** `http://host:port[/prefix]` and the same with `/v1` are both accepted: one trailing
//!   `/v1` is removed to get the root. Protocols of several families tested at once (the default, `all`):
//!   each goes to the base URL its family takes, derived from the root (`{root}/v1/chat/completions`,
//!   `{root}/v1/messages`, `{root}/v1beta/models/…`), so the obvious call passes a healthy gateway, and a
//!   note says which form each family takes. One family tested alone: the base URL as given, as its client
//!   would use it, so that client's mistake shows (a doubled `/v1`, 404).
//! - **Shape problems are errors or notes.** Errors fail the shape step (exit 1) but the requests are still
//!   sent whenever a URL can be derived, so the output shows what else is wrong: a doubled `/v1`, a full
//!   endpoint path inside the base URL, a missing scheme (tried with `http://` for local hosts, `https://`
//!   otherwise), whitespace (removed), credentials, a query string or a fragment (removed; OpenAI SDKs append
//!   the endpoint *after* a query, which gives 404), a `//` in the path. A doubled `/v1` and an endpoint path
//!   are *not* corrected: the requests go where a client configured that way would send them, so the 404 and
//!   the gateway's own hint appear too. Notes, which do not fail: which client family takes the given form,
//!   `0.0.0.0` as a destination, loopback while running in a container, plain HTTP to a remote host.
//!   An unsupported scheme, a malformed one, a missing host or a bad port: no request is sent.
//! - **The key's form** is checked like the URL: surrounding or inner whitespace, a `Bearer ` prefix or
//!   quotes pasted with it are errors (the specification's 401 causes); the requests are sent with the
//!   cleaned key, so the output tells whether the key itself is good.
//! - **Minimal requests**: the model plus "Reply with the word pong."; nothing else, except the
//!   `max_tokens` Messages requires (256: room for a model that thinks first, while one word needs a few
//!   tokens). No reasoning, tools, schema, `store` or stream options.
//! - **Credentials**: Chat and Responses send `Authorization: Bearer`. Messages sends the key both as
//!   `x-api-key` (the specification's primary form) and as `Authorization: Bearer` (the accepted
//!   alternative, and what the installed Anthropic SDK 2.12 actually sends for `api_key=`, while Claude Code
//!   and older SDKs use `x-api-key`): a gateway that accepts either form passes, and a 401 then means the key
//!   or the address, not the header style. Messages also sends `anthropic-version: 2023-06-01`.
//! - **Tracing**: every request carries `X-Client-Request-ID: doctor-<run>-<protocol>-<plain|stream>` (one
//!   random run id, so each request has its own id that can be looked up exactly, e.g. tollgate's
//!   `/admin/usage?client_request_id=…`). The request id is read from `x-request-id`, else `request-id`,
//!   else the error body's `request_id`.
//! - **Success** is the specification's: HTTP 2xx with text at the documented place. A 2xx without text
//!   fails the step. A stream passes only when it reaches its terminal event (`data: [DONE]`,
//!   `response.completed`, `message_stop`) with text; an error event (`data: {"error":…}`, `event: error`,
//!   `response.failed`, `response.incomplete`), events the official SDKs cannot parse (non-JSON data, a
//!   first event other than `response.created`/`message_start`, a Messages event without an `event:` line)
//!   or an end without the terminal event fail it. A stream failure after a passing non-streaming request
//!   gets the specification's stream-only cause (SSE parsing, proxy buffering or idle timeout). Events that
//!   all arrive at once after a long silence add a buffering note.
//! - **Timings**: time to the response head and total; for streams also time to the first body byte and
//!   to the first text.
//! - **Redirects** are not followed (SDKs do not follow them for POST); a 3xx names its `Location`.
//!   Proxies come from `ALL_PROXY`/`HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`, as for the SDKs, and the report
//!   names the one in effect (credentials removed).
//! - **Secrets**: the key is never printed, only `tg_3d…(43 chars)` (only the length for keys shorter
//!   than 16); any echo of it in an answer is replaced the same way. The support report also replaces the
//!   prompt and leaves out the received text (the mock model, for one, quotes the prompt back). The URL in
//!   the report has credentials, query and fragment replaced by `***`.
//! - **Local time**: tollgate reads no time-zone files and runs no programs for it: when the machine's zone
//!   is UTC (no `TZ` or a UTC one, `/etc/localtime` absent or UTC) the local time is the UTC time; otherwise
//!   the report says the local offset was not determined and gives UTC only.
//! - **Container detection**: `/.dockerenv`, `/run/.containerenv`, `docker|kubepods|containerd|lxc` in
//!   `/proc/1/cgroup`, or `KUBERNETES_SERVICE_HOST`; the report says which one matched.
//! - `--protocol` also takes a comma-separated list (`chat,messages`).
//! - **Other endpoints**, when asked, each with its own model (an embedding model is rarely the chat
//!   model): `--embed-model M` sends one embeddings request and passes when a vector comes back;
//!   `--completion-model M` one text completion (16 tokens) and passes when it has text. Both go where
//!   OpenAI's SDKs send them (`{base}/v1/embeddings`, `/v1/completions`), as Bearer.

mod answer;
mod args;
mod cause;
mod kinds;
mod print;
mod probe;
mod report;
mod stream;
mod text;
mod url;

use std::io::Write;

use crate::protocol::{Protocol, FALLBACK};
use args::{check_key, check_model, key_argument, parse_protocols, ArgError};
use kinds::{Connect, Kind, ProbeOutcome};
use print::{field, print_outcome, print_result};
use url::{Finding, Severity};

pub(crate) use args::DoctorArgs;

/// The client name and version the report and the `User-Agent` give.
pub(crate) const CLIENT: &str = concat!("tollgate-doctor/", env!("CARGO_PKG_VERSION"));

/// Runs the doctor; returns the exit code.
pub(crate) fn run(args: DoctorArgs) -> i32 {
    let (protocols, given_key) = match usable_arguments(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let started_unix = crate::util::unix_now();
    let container = report::container_evidence();
    // Container notes belong to a connection that failed (see `cause`), not to the URL's shape.
    let shape = url::analyze(&args.base_url, false);
    if shape.base.is_none() {
        for f in &shape.findings {
            eprintln!("--base-url: {}", f.text);
        }
        return 2;
    }
    let (key, key_findings) = check_key(&given_key);
    let (model, model_findings) = check_model(&args.model);
    let check = Check {
        protocols: &protocols,
        shape: &shape,
        key: &key,
        given_key: &given_key,
        model: &model,
        container,
        total_steps: 1 + 2 * protocols.len() + extras(&args).len(),
        extras: extras(&args),
        scrub: report::Scrubber {
            key: &key,
            also: &given_key,
            prompt: false,
        },
    };
    // With --json the steps are written nowhere as they go, and one document closes the run.
    let mut stdout = std::io::stdout().lock();
    let mut sink = std::io::sink();
    let mut out: &mut dyn Write = if args.json { &mut sink } else { &mut stdout };
    check.print_header(&mut out, args.config.as_deref());

    // Step 1: the base URL's shape and the key's and model's form.
    let mut setup: Vec<&Finding> = shape
        .findings
        .iter()
        .chain(&key_findings)
        .chain(&model_findings)
        .collect();
    // Errors first (a stable sort keeps each group's order).
    setup.sort_by_key(|f| f.severity != Severity::Error);
    let setup_failed = check.print_setup(&mut out, &setup);

    // Steps 2..: per protocol, the minimal request, then streamed.
    let (outcomes, causes) = check.requests(&mut out);

    let failed_requests = outcomes.iter().filter(|o| !o.passed()).count();
    let failed_steps = failed_requests + usize::from(setup_failed);
    print_result(&mut out, failed_steps, check.total_steps);
    let setup_errors: Vec<String> = setup
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.text.clone())
        .collect();
    let run = Run {
        started_unix,
        setup_errors: &setup_errors,
        outcomes: &outcomes,
        causes: &causes,
        failed_steps,
    };
    let report = check.report(&run);
    if args.json {
        let doc = check.json(&setup, &run, &report);
        let _ = writeln!(stdout, "{doc}");
    } else {
        let _ = write!(out, "{report}");
    }
    let _ = stdout.flush();
    if failed_steps == 0 {
        0
    } else {
        1
    }
}

/// The endpoints besides generation to probe, each with the model given for it.
fn extras(args: &DoctorArgs) -> Vec<(probe::Extra, String)> {
    let given = |m: &Option<String>| {
        m.as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
    };
    let mut out = Vec::new();
    if let Some(m) = given(&args.embed_model) {
        out.push((probe::Extra::Embeddings, m));
    }
    if let Some(m) = given(&args.completion_model) {
        out.push((probe::Extra::Completions, m));
    }
    out
}

/// The protocols to check and the key as given, or what makes the arguments unusable (exit code 2).
fn usable_arguments(args: &DoctorArgs) -> Result<(Vec<Protocol>, String), ArgError> {
    let protocols = parse_protocols(&args.protocol)?;
    let given_key = key_argument(args)?;
    if args.model.trim().is_empty() {
        return Err(ArgError::EmptyModel);
    }
    Ok((protocols, given_key))
}

/// What every step needs: what is checked, where, with what key and model.
struct Check<'a> {
    protocols: &'a [Protocol],
    shape: &'a url::UrlShape,
    /// The key and the model as sent (cleaned), and the key as given.
    key: &'a str,
    given_key: &'a str,
    model: &'a str,
    /// Why this looks like a container, if it does.
    container: Option<String>,
    total_steps: usize,
    /// The other endpoints to probe, each with its model (`--embed-model`, `--completion-model`).
    extras: Vec<(probe::Extra, String)>,
    /// Removes the key from what is printed.
    scrub: report::Scrubber<'a>,
}

/// What the steps gave, for the support report.
struct Run<'a> {
    started_unix: u64,
    setup_errors: &'a [String],
    outcomes: &'a [ProbeOutcome],
    causes: &'a [Option<String>],
    failed_steps: usize,
}

impl Check<'_> {
    /// The first lines: what is checked, where, and with what (`config`: a local tollgate's config file,
    /// whose data directory's permissions are checked too).
    fn print_header(&self, out: &mut impl Write, config: Option<&std::path::Path>) {
        let _ = writeln!(
            out,
            "{CLIENT}: the diagnostic procedure of the specification"
        );
        field(out, "base URL", &self.shape.redacted);
        field(out, "key", &report::key_preview(self.key));
        field(out, "model", self.model);
        if let Some(path) = config {
            match crate::config::Config::load(path) {
                Ok(c) => match crate::util::data_dir_exposure(&c.data_dir) {
                    Some(w) => field(out, "data dir", &format!("WARNING: {w}")),
                    None => field(out, "data dir", "private (not open to other users)"),
                },
                Err(e) => field(out, "config", &format!("cannot read: {e}")),
            }
        }
        field(
            out,
            "protocols",
            &self
                .protocols
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        );
        field(
            out,
            "local servers",
            &local_servers(self.shape.base.as_deref()),
        );
        let _ = writeln!(out);
    }

    /// The run as one JSON document (`--json`): the setup check, each step, the result, the support report.
    /// Keys are scrubbed as in the printed output.
    fn json(&self, setup: &[&Finding], run: &Run, report: &str) -> serde_json::Value {
        let ms = |d: Option<std::time::Duration>| d.map(|d| d.as_millis() as u64);
        let notes: Vec<String> = setup
            .iter()
            .filter(|f| f.severity != Severity::Error)
            .map(|f| self.scrub.clean(&f.text))
            .collect();
        let steps: Vec<serde_json::Value> = run
            .outcomes
            .iter()
            .zip(run.causes)
            .map(|(o, cause)| {
                serde_json::json!({
                    "protocol": o.proto.name,
                    "endpoint": o.endpoint,
                    "stream": o.stream,
                    "passed": o.passed(),
                    "url": o.url,
                    "status": o.status,
                    "request_id": o.request_id,
                    "client_request_id": o.client_request_id,
                    "head_ms": ms(o.headers_at),
                    "first_byte_ms": ms(o.first_byte),
                    "first_text_ms": ms(o.first_text),
                    "total_ms": o.total.as_millis() as u64,
                    "events": o.events,
                    "text": self.scrub.clean(&o.text),
                    "error": o.failure.as_ref().map(|f| self.scrub.clean(&f.detail)),
                    "cause": cause.as_deref().map(|c| self.scrub.clean(c)),
                    "notes": o.notes.iter().map(|n| self.scrub.clean(n)).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "ok": run.failed_steps == 0,
            "base_url": self.shape.redacted,
            "model": self.model,
            "protocols": self.protocols.iter().map(|p| p.name).collect::<Vec<_>>(),
            "setup": {
                "passed": run.setup_errors.is_empty(),
                "errors": run.setup_errors.iter().map(|e| self.scrub.clean(e)).collect::<Vec<_>>(),
                "notes": notes,
            },
            "steps": steps,
            "failed_steps": run.failed_steps,
            "total_steps": self.total_steps,
            "report": report,
        })
    }

    /// Whether each protocol's requests go to the base URL its family takes, derived from the one given:
    /// when protocols of several families are tested at once (the default, `--protocol all`), one base URL
    /// cannot be right for all of them, so it is taken as the gateway's address.
    fn derive(&self) -> bool {
        let first = self.protocols.first().map(|p| p.vendor);
        self.protocols.iter().any(|p| Some(p.vendor) != first)
    }

    /// Step 1: its verdict, the endpoints the requests go to, which client family takes which form, and
    /// each finding (`setup`: errors first). Returns whether the step failed.
    fn print_setup(&self, out: &mut impl Write, setup: &[&Finding]) -> bool {
        let failed = setup.iter().any(|f| f.severity == Severity::Error);
        let _ = writeln!(
            out,
            "[1/{}] Base URL and key: {}",
            self.total_steps,
            if failed { "FAIL" } else { "PASS" }
        );
        match &self.shape.base {
            Some(_) => {
                let eps: Vec<String> = self
                    .protocols
                    .iter()
                    .filter_map(|p| {
                        let base = self.shape.base_of(*p, self.derive())?;
                        Some(format!("{base}{}", p.sdk_path()))
                    })
                    .collect();
                field(out, "endpoints", &eps.join(", "));
                if !self.shape.has_errors() {
                    let take: Vec<String> = url::families()
                        .iter()
                        .filter_map(|f| {
                            let base = self.shape.base_for(f)?;
                            Some(format!("{} SDKs ({}) take {base}", f.vendor, f.titles))
                        })
                        .collect();
                    field(out, "clients", &take.join("; "));
                }
            }
            None => field(
                out,
                "endpoints",
                "none: no request can be sent to this base URL",
            ),
        }
        for f in setup {
            let label = match f.severity {
                Severity::Error => "error",
                Severity::Note => "note",
            };
            field(out, label, &self.scrub.clean(&f.text));
        }
        let _ = writeln!(out);
        failed
    }

    /// Steps 2..: per protocol, the minimal request, then the same streamed; each printed as it ends.
    /// Returns the outcomes and, for each, the likely cause of its failure.
    fn requests(&self, out: &mut impl Write) -> (Vec<ProbeOutcome>, Vec<Option<String>>) {
        let agent = probe::agent();
        let run_id = crate::util::random_base62(10);
        let mut outcomes: Vec<ProbeOutcome> = Vec::new();
        let mut causes: Vec<Option<String>> = Vec::new();
        let mut step = 1;
        for &proto in self.protocols {
            for stream in [false, true] {
                step += 1;
                let _ = write!(
                    out,
                    "[{step}/{}] {}, {}: ",
                    self.total_steps,
                    proto.title,
                    if stream { "streaming" } else { "non-streaming" }
                );
                let _ = out.flush();
                let client_id = format!(
                    "doctor-{run_id}-{}-{}",
                    proto.name,
                    if stream { "stream" } else { "plain" }
                );
                let o = match self.shape.base_of(proto, self.derive()) {
                    Some(base) => probe::run(
                        &agent, proto, &base, self.key, self.model, stream, &client_id,
                    ),
                    None => not_sent(proto, stream, &client_id),
                };
                let plain = outcomes.iter().find(|p| p.is_plain_of(proto));
                let cause = o.failure.as_ref().map(|_| {
                    let in_container = self.container.is_some();
                    cause::likely_cause(&o, plain, self.shape, self.model, in_container)
                });
                print_outcome(out, &o, cause.as_deref(), &self.scrub);
                outcomes.push(o);
                causes.push(cause);
            }
        }
        for (extra, model) in &self.extras {
            step += 1;
            let _ = write!(
                out,
                "[{step}/{}] {} ({}, model {model}): ",
                self.total_steps,
                extra.name(),
                FALLBACK.vendor,
            );
            let _ = out.flush();
            let client_id = format!("doctor-{run_id}-{}", extra.name());
            let o = match self.shape.base_of(FALLBACK, self.derive()) {
                Some(base) => {
                    probe::run_extra(&agent, FALLBACK, &base, self.key, model, *extra, &client_id)
                }
                None => not_sent(FALLBACK, false, &client_id),
            };
            let cause = o.failure.as_ref().map(|_| {
                let in_container = self.container.is_some();
                cause::likely_cause(&o, None, self.shape, model, in_container)
            });
            print_outcome(out, &o, cause.as_deref(), &self.scrub);
            outcomes.push(o);
            causes.push(cause);
        }
        (outcomes, causes)
    }

    /// The support report of this check.
    fn report(&self, run: &Run) -> String {
        report::render(&report::ReportFacts {
            started_unix: run.started_unix,
            local_offset: report::local_offset(),
            os: report::os_description(),
            container: self.container.clone(),
            proxy: report::proxy_setting(),
            key: self.key,
            given_key: self.given_key,
            model: self.model,
            protocols: self.protocols,
            redacted_url: &self.shape.redacted,
            setup_errors: run.setup_errors,
            outcomes: run.outcomes,
            causes: run.causes,
            failed_steps: run.failed_steps,
            total_steps: self.total_steps,
        })
    }
}

/// The OpenAI-compatible servers at the well-known local addresses (what tollgate's discovery finds with
/// no config), other than the one being checked.
fn local_servers(checked: Option<&str>) -> String {
    let agent = probe::agent();
    let found: Vec<String> = crate::config::WELL_KNOWN
        .iter()
        .filter(|u| checked.is_none_or(|c| !c.starts_with(&u[..u.len() - 3])))
        .filter_map(|u| {
            let models = crate::upstream::discovery::probe(&agent, u).ok()?;
            Some(format!(
                "{u} ({})",
                crate::util::plural(models.len(), "model")
            ))
        })
        .collect();
    if found.is_empty() {
        "none at the well-known local addresses".into()
    } else {
        found.join(", ")
    }
}

/// A step that could not be tried: no URL could be derived from the base URL.
pub(crate) fn not_sent(proto: Protocol, stream: bool, client_id: &str) -> ProbeOutcome {
    let mut o = ProbeOutcome::new(proto, stream, String::new(), client_id);
    o.failure = Some(kinds::Failure::new(
        Kind::Connect(Connect::Other),
        "not sent: the base URL gives no usable address (see step 1)",
    ));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ALL;

    #[test]
    fn protocols() {
        assert_eq!(parse_protocols("all").unwrap(), ALL.to_vec());
        assert_eq!(
            parse_protocols("Messages, chat").unwrap(),
            vec![Protocol::Messages, Protocol::Chat]
        );
        assert!(parse_protocols("grpc").is_err());
    }

    #[test]
    fn key_forms() {
        let (k, f) = check_key("sk-abc");
        assert_eq!((k.as_str(), f.len()), ("sk-abc", 0));
        let (k, f) = check_key(" Bearer sk-abc\n");
        assert_eq!(k, "sk-abc");
        assert_eq!(f.len(), 2);
        let (k, f) = check_key("\"sk-a bc\"");
        assert_eq!(k, "sk-abc");
        assert_eq!(f.len(), 2);
        let (_, f) = check_key("tg_abc");
        assert!(f[0].text.contains("has 6 characters"), "{:?}", f);
        let (_, f) = check_key("sk-ab\u{2013}c");
        assert!(f[0].text.contains("not plain ASCII"), "{:?}", f);
        let (m, f) = check_model(" mock");
        assert_eq!((m.as_str(), f.len()), ("mock", 1));
    }
}
