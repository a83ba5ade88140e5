//! The base URL's shape: what a client was given, what is wrong with it, the root the endpoints hang off, and
//! the redacted form that may go into a report. Pure string work, no I/O. What each protocol's SDKs take as
//! their base URL is their codec's (`Codec::base_url_has_v1`, `sdk_path`), by vendor ([`families`]).

use crate::protocol::ALL;

/// How bad a finding is: an `Error` fails the shape step (exit code 1) although the requests are still
/// tried; a `Note` explains without failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Severity {
    Error,
    Note,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Finding {
    pub severity: Severity,
    pub text: String,
}

/// The result of looking at a base URL.
#[derive(Clone, Debug)]
pub(super) struct UrlShape {
    /// `scheme://host[:port][/prefix]` without a trailing `/v1`, credentials, query or fragment; the endpoints
    /// are `{root}/v1/...`. `None` when no request can be sent.
    pub root: Option<String>,
    /// The base URL as a client would use it: `scheme://host[:port][/path]` as given, without trailing
    /// slashes, credentials, query or fragment. SDKs append their paths to this (see `Codec::sdk_path`).
    pub base: Option<String>,
    /// The URL as given, without surrounding whitespace, credentials, query or fragment (each replaced by
    /// `***` when present): safe for a report.
    pub redacted: String,
    /// The host as written (lowercased), for transport-error hints.
    pub host: String,
    pub findings: Vec<Finding>,
}

impl UrlShape {
    pub(super) fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// The base URL the requests of `proto` go to: with `derive` (several families tested at once, from one
    /// base URL), the one its family of SDKs should be given (`{root}/v1` or `{root}`), so a healthy gateway
    /// passes; without, the base URL as given, as a client given it would use it (one family tested: its
    /// mistake shows as the client would see it). Not derived when the URL's shape has errors.
    pub(super) fn base_of(&self, proto: crate::protocol::Protocol, derive: bool) -> Option<String> {
        match &self.root {
            Some(r) if derive && !self.has_errors() => {
                let v1 = if proto.base_url_has_v1 { "/v1" } else { "" };
                Some(format!("{r}{v1}"))
            }
            _ => self.base.clone(),
        }
    }

    /// The base URL each family of SDKs should be given: `{root}/v1` or `{root}` (`Family::v1`).
    pub(super) fn base_for(&self, family: &Family) -> Option<String> {
        let v1 = if family.v1 { "/v1" } else { "" };
        self.root.as_ref().map(|r| format!("{r}{v1}"))
    }
}

/// The protocols whose SDKs take the same form of base URL: one vendor's.
pub(super) struct Family {
    /// `OpenAI`.
    pub vendor: &'static str,
    /// Its SDKs' base URL ends in `/v1`.
    pub v1: bool,
    /// The protocols' titles: `Chat Completions, Responses`.
    pub titles: String,
    /// What the SDKs append: `/v1/messages`.
    pub paths: String,
}

/// The protocols by their vendor's SDKs, in the registry's order.
pub(super) fn families() -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for p in ALL {
        match out.iter_mut().find(|f| f.vendor == p.vendor) {
            Some(f) => {
                f.titles = format!("{}, {}", f.titles, p.title);
                f.paths = format!("{}, {}", f.paths, p.sdk_path());
            }
            None => out.push(Family {
                vendor: p.vendor,
                v1: p.base_url_has_v1,
                titles: p.title.to_string(),
                paths: p.sdk_path().to_string(),
            }),
        }
    }
    out
}

/// `{root}/v1` for OpenAI clients (Chat Completions, Responses) and `{root}` for Anthropic clients
/// (Messages): the base URL each family of SDKs takes.
fn bases_for(root: &str) -> String {
    let each: Vec<String> = families()
        .iter()
        .map(|f| {
            let v1 = if f.v1 { "/v1" } else { "" };
            format!("`{root}{v1}` for {} clients ({})", f.vendor, f.titles)
        })
        .collect();
    each.join(" and ")
}

/// `OpenAI clients (Chat Completions, Responses)`, of the families with (`v1`) or without `/v1`.
fn clients(v1: bool) -> String {
    let each: Vec<String> = families()
        .iter()
        .filter(|f| f.v1 == v1)
        .map(|f| format!("{} clients ({})", f.vendor, f.titles))
        .collect();
    each.join(" and ")
}

/// Endpoint paths a base URL must not end with (the client appends them itself).
const ENDPOINT_SUFFIXES: &[&str] = &[
    "/chat/completions",
    "/completions",
    "/responses",
    "/messages/count_tokens",
    "/messages",
    "/models",
    "/embeddings",
];

/// Looks at a base URL. `in_container` adds a note when the host is the loopback address.
pub(super) fn analyze(input: &str, in_container: bool) -> UrlShape {
    let mut findings = Vec::new();
    let s = without_whitespace(input, &mut findings);
    let fail = |redacted: String, host: String, findings: Vec<Finding>| UrlShape {
        root: None,
        base: None,
        redacted,
        host,
        findings,
    };
    if s.is_empty() {
        error(&mut findings, "the base URL is empty.".to_string());
        return fail(String::new(), String::new(), findings);
    }
    let Some(u) = Parts::split(&s) else {
        error(
            &mut findings,
            format!(
                "the base URL {:?} has a malformed scheme: write `http://` or `https://` followed by the host.",
                redact_parts(&s)
            ),
        );
        return fail(redact_parts(&s), String::new(), findings);
    };
    let redacted = u.redacted(&s);
    let host = host_of(u.host_port).to_ascii_lowercase();
    let Some(scheme) = check_scheme(u.scheme.as_deref(), &host, &mut findings) else {
        return fail(redacted, host, findings);
    };
    if !check_authority(&u, &host, &mut findings) {
        return fail(redacted, host, findings);
    }
    let origin = format!("{scheme}://{}", u.host_port);
    let root_path = check_path(u.path, &origin, &mut findings);
    check_host(&host, &scheme, in_container, &mut findings);
    UrlShape {
        root: Some(format!("{origin}{root_path}")),
        base: Some(format!("{origin}{}", u.path.trim_end_matches('/'))),
        redacted,
        host,
        findings,
    }
}

fn error(findings: &mut Vec<Finding>, text: String) {
    findings.push(Finding {
        severity: Severity::Error,
        text,
    });
}

fn note(findings: &mut Vec<Finding>, text: String) {
    findings.push(Finding {
        severity: Severity::Note,
        text,
    });
}

/// The URL without surrounding or inner whitespace, each reported.
fn without_whitespace(input: &str, findings: &mut Vec<Finding>) -> String {
    let trimmed = input.trim();
    if trimmed.len() != input.len() {
        let where_ =
            if input.starts_with(char::is_whitespace) && input.ends_with(char::is_whitespace) {
                "leading and trailing"
            } else if input.starts_with(char::is_whitespace) {
                "leading"
            } else {
                "trailing"
            };
        error(
            findings,
            format!(
                "the base URL has {where_} whitespace ({}); a copied value or an environment variable with a \
                 trailing newline or space ends up in the client's URL. Remove it (the doctor tried without it).",
                describe_whitespace(input)
            ),
        );
    }
    let mut s: String = trimmed.to_string();
    if s.contains(char::is_whitespace) {
        error(
            findings,
            "the base URL contains whitespace inside it; URLs cannot contain spaces or line breaks. Remove \
             them (the doctor tried without them)."
                .to_string(),
        );
        s.retain(|c| !c.is_whitespace());
    }
    s
}

/// A URL split into its parts (no validation beyond finding them).
struct Parts<'a> {
    scheme: Option<String>,
    userinfo: Option<&'a str>,
    host_port: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    /// None when the scheme is malformed (`http:/host`, `https:host`).
    fn split(s: &'a str) -> Option<Parts<'a>> {
        let (scheme, rest) = match s.find("://") {
            Some(i) => (Some(s[..i].to_ascii_lowercase()), &s[i + 3..]),
            None => (None, s),
        };
        let lower = s.to_ascii_lowercase();
        if scheme.is_none() && (lower.starts_with("http:") || lower.starts_with("https:")) {
            return None;
        }
        let (before_fragment, fragment) = match rest.split_once('#') {
            Some((a, f)) => (a, Some(f)),
            None => (rest, None),
        };
        let (before_query, query) = match before_fragment.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (before_fragment, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i..]),
            None => (before_query, ""),
        };
        let (userinfo, host_port) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        Some(Parts {
            scheme,
            userinfo,
            host_port,
            path,
            query,
            fragment,
        })
    }

    /// The URL with credentials, query and fragment replaced by `***`.
    fn redacted(&self, s: &str) -> String {
        let mut r = String::new();
        if let Some(sc) = &self.scheme {
            r.push_str(&s[..sc.len()]);
            r.push_str("://");
        }
        if self.userinfo.is_some() {
            r.push_str("***@");
        }
        r.push_str(self.host_port);
        r.push_str(self.path);
        if self.query.is_some() {
            r.push_str("?***");
        }
        if self.fragment.is_some() {
            r.push_str("#***");
        }
        r
    }
}

/// The scheme to use: `http` or `https` as given, or assumed when missing (reported). None when it is
/// another scheme.
fn check_scheme(scheme: Option<&str>, host: &str, findings: &mut Vec<Finding>) -> Option<String> {
    match scheme {
        Some(sc) if sc == "http" || sc == "https" => Some(sc.to_string()),
        Some(sc) => {
            error(
                findings,
                format!(
                    "the scheme `{sc}://` is not HTTP: these protocols are served over `http://` or `https://`."
                ),
            );
            None
        }
        None => {
            let assumed = if looks_local(host) { "http" } else { "https" };
            error(
                findings,
                format!(
                    "the base URL has no scheme: write `http://` or `https://` in front of the host; SDKs refuse \
                     a URL without one (the doctor tried `{assumed}://`)."
                ),
            );
            Some(assumed.to_string())
        }
    }
}

/// Credentials, host, port, query and fragment. Returns false when no request can be sent.
fn check_authority(u: &Parts, host: &str, findings: &mut Vec<Finding>) -> bool {
    if u.userinfo.is_some() {
        error(
            findings,
            "the base URL contains credentials (`user:password@`): they end up in logs and shell history, and \
             some HTTP clients turn them into an `Authorization: Basic` header that replaces the API key (401). \
             Remove them and pass the key as the API key (the doctor tried without them)."
                .to_string(),
        );
    }
    if host.is_empty() {
        error(findings, "the base URL has no host name.".to_string());
        return false;
    }
    if let Some(port) = port_of(u.host_port) {
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            error(
                findings,
                format!("the port `{port}` is not a number from 1 to 65535."),
            );
            return false;
        }
    }
    if u.query.is_some() {
        error(
            findings,
            "the base URL has a query string (`?…`): OpenAI SDKs append the endpoint path after it (the request \
             goes to `/v1/?…chat/completions`, a 404), and gateways may refuse it. Remove it (the doctor tried \
             without it)."
                .to_string(),
        );
    }
    if u.fragment.is_some() {
        error(
            findings,
            "the base URL has a fragment (`#…`): it is never sent to the server, and clients that append paths \
             to the base URL put them after it. Remove it (the doctor tried without it)."
                .to_string(),
        );
    }
    true
}

/// The path: a doubled /v1, a full endpoint, or one of the two accepted forms. Returns the root path (the
/// part before a final `/v1`).
fn check_path<'p>(path: &'p str, origin: &str, findings: &mut Vec<Finding>) -> &'p str {
    let path_trimmed = path.trim_end_matches('/');
    let path_lower = path_trimmed.to_ascii_lowercase();
    let mut error = |text: String| error(findings, text);
    if path.contains("//") {
        error(
            "the base URL's path contains `//` (an empty segment); gateways route `//v1/...` differently from \
             `/v1/...`. Remove the extra slash."
                .to_string(),
        );
    }
    let root_path = path_trimmed
        .strip_suffix("/v1")
        .or_else(|| path_trimmed.strip_suffix("/V1"))
        .unwrap_or(path_trimmed);
    let fixed_root = fixed_root_path(&path_lower, path_trimmed);
    let fixed = format!("{origin}{fixed_root}");
    if has_doubled_v1(&path_lower) {
        error(format!(
            "the base URL has a doubled `/v1`: the client adds `/v1/...` to a base that already ends in `/v1`, \
             giving `/v1/v1/...` (404). Use {}.",
            bases_for(&fixed)
        ));
    } else if let Some(ep) = ENDPOINT_SUFFIXES
        .iter()
        .find(|ep| path_lower.ends_with(*ep))
    {
        error(format!(
            "the base URL contains a full endpoint path (`…{ep}`): clients append the endpoint themselves, so \
             the request goes to `…{ep}/…` (404). Use {}.",
            bases_for(&fixed)
        ));
    } else if path_lower.ends_with("/v1") {
        note(
            findings,
            format!(
                "the base URL ends in `/v1`: the form {} take; {} take `{origin}{root_path}` without it, \
                 because they add `{}` themselves.",
                clients(true),
                clients(false),
                families()
                    .iter()
                    .filter(|f| !f.v1)
                    .map(|f| f.paths.as_str())
                    .collect::<Vec<_>>()
                    .join("`, `")
            ),
        );
    } else {
        note(
            findings,
            format!(
                "the base URL has no `/v1`: the form {} take; {} need `{origin}{root_path}/v1`.",
                clients(false),
                clients(true)
            ),
        );
    }
    root_path
}

/// Hosts that work only by accident, or not from where the doctor runs, and plain HTTP to remote hosts.
fn check_host(host: &str, scheme: &str, in_container: bool, findings: &mut Vec<Finding>) {
    if host == "0.0.0.0" || host == "[::]" {
        note(
            findings,
            format!(
                "`{host}` is an address to listen on, not one to connect to; it happens to work on the same \
                 machine on Linux only. Use `127.0.0.1` locally, or the gateway's address from elsewhere."
            ),
        );
    } else if in_container && is_loopback(host) {
        note(
            findings,
            format!(
                "this runs in a container, where `{host}` is the container itself: if the gateway runs on the \
                 host or in another container, use that address instead (for example `host.docker.internal` \
                 or the service name)."
            ),
        );
    }
    if scheme == "http" && !looks_local(host) {
        note(
            findings,
            "plain `http://` to a non-local host: the key travels unencrypted, and providers that redirect to \
             `https://` answer a POST with a redirect clients do not follow."
                .to_string(),
        );
    }
}

/// The root path a misshapen path should have been: everything before a doubled `/v1` or an endpoint.
fn fixed_root_path(path_lower: &str, path: &str) -> String {
    let cut = if has_doubled_v1(path_lower) {
        path_lower.find("/v1/v1").unwrap_or(0)
    } else if let Some(ep) = ENDPOINT_SUFFIXES
        .iter()
        .find(|ep| path_lower.ends_with(*ep))
    {
        let without = &path_lower[..path_lower.len() - ep.len()];
        without.strip_suffix("/v1").unwrap_or(without).len()
    } else {
        path_lower.strip_suffix("/v1").unwrap_or(path_lower).len()
    };
    path[..cut].to_string()
}

/// A `/v1/v1` made of two whole segments (not `/v1/v10`).
fn has_doubled_v1(path_lower: &str) -> bool {
    path_lower.ends_with("/v1/v1") || path_lower.contains("/v1/v1/")
}

/// Names the whitespace characters at the ends of `s`, for a message.
fn describe_whitespace(s: &str) -> String {
    let mut names: Vec<&str> = Vec::new();
    for c in s
        .chars()
        .take_while(|c| c.is_whitespace())
        .chain(s.chars().rev().take_while(|c| c.is_whitespace()))
    {
        let name = match c {
            ' ' => "space",
            '\n' => "line feed",
            '\r' => "carriage return",
            '\t' => "tab",
            _ => "other whitespace",
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(", ")
}

/// The host part of `host[:port]` (IPv6 literals keep their brackets).
fn host_of(host_port: &str) -> &str {
    if host_port.starts_with('[') {
        return match host_port.find(']') {
            Some(i) => &host_port[..=i],
            None => host_port,
        };
    }
    match host_port.rsplit_once(':') {
        Some((h, _)) => h,
        None => host_port,
    }
}

/// The port part of `host[:port]`, if written.
fn port_of(host_port: &str) -> Option<&str> {
    if host_port.starts_with('[') {
        let i = host_port.find(']')?;
        return host_port[i + 1..].strip_prefix(':');
    }
    host_port.rsplit_once(':').map(|(_, p)| p)
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

/// Loopback, IP literals and single-label names: hosts that are usually reached over plain HTTP.
fn looks_local(host: &str) -> bool {
    is_loopback(host)
        || host == "0.0.0.0"
        || host.starts_with('[')
        || !host.contains('.')
        || host.chars().all(|c| c.is_ascii_digit() || c == '.')
        || host.ends_with(".local")
        || host.ends_with(".internal")
}

/// A URL (or anything URL-like) with credentials, query and fragment replaced by `***`: for proxy settings
/// and values that did not parse as a base URL.
pub(super) fn redact_parts(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let mut out = String::from(scheme);
    let (before_fragment, fragment) = match rest.split_once('#') {
        Some((a, _)) => (a, true),
        None => (rest, false),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((a, _)) => (a, true),
        None => (before_fragment, false),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => (&before_query[..i], &before_query[i..]),
        None => (before_query, ""),
    };
    match authority.rfind('@') {
        Some(i) => {
            out.push_str("***@");
            out.push_str(&authority[i + 1..]);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if query {
        out.push_str("?***");
    }
    if fragment {
        out.push_str("#***");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(s: &UrlShape) -> Vec<&str> {
        s.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.text.as_str())
            .collect()
    }

    #[test]
    fn both_accepted_forms_give_the_same_root() {
        for input in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1",
            "http://127.0.0.1:8080/v1/",
        ] {
            let s = analyze(input, false);
            assert!(!s.has_errors(), "{input}: {:?}", s.findings);
            assert_eq!(s.root.as_deref(), Some("http://127.0.0.1:8080"), "{input}");
            let bases: Vec<String> = families().iter().filter_map(|f| s.base_for(f)).collect();
            assert_eq!(
                bases,
                [
                    "http://127.0.0.1:8080/v1",
                    "http://127.0.0.1:8080",
                    "http://127.0.0.1:8080"
                ]
            );
        }
        // A path prefix is kept.
        let s = analyze("https://gw.example.com/llm/v1", false);
        assert!(!s.has_errors());
        assert_eq!(s.root.as_deref(), Some("https://gw.example.com/llm"));
    }

    #[test]
    fn notes_say_which_clients_take_which_form() {
        let with = analyze("http://h:1/v1", false);
        assert!(with.findings[0].text.contains("Anthropic clients"));
        assert!(with.findings[0].text.contains("`http://h:1` without it"));
        let without = analyze("http://h:1", false);
        assert!(without.findings[0].text.contains("need `http://h:1/v1`"));
    }

    #[test]
    fn doubled_v1_is_an_error_and_keeps_the_literal_root() {
        let s = analyze("http://127.0.0.1:8080/v1/v1", false);
        let e = errors(&s);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("doubled `/v1`"));
        assert!(e[0].contains("`http://127.0.0.1:8080/v1` for OpenAI clients"));
        assert!(e[0].contains("`http://127.0.0.1:8080` for Anthropic clients"));
        // The requests reproduce what a client would do: /v1/v1/chat/completions.
        assert_eq!(s.root.as_deref(), Some("http://127.0.0.1:8080/v1"));
    }

    #[test]
    fn full_endpoint_paths_are_errors() {
        for (input, ep) in [
            ("http://h:1/v1/chat/completions", "/chat/completions"),
            ("http://h:1/v1/chat/completions/", "/chat/completions"),
            ("http://h:1/v1/messages", "/messages"),
            ("http://h:1/v1/responses", "/responses"),
            (
                "https://api.example.com/chat/completions",
                "/chat/completions",
            ),
        ] {
            let s = analyze(input, false);
            let e = errors(&s);
            assert_eq!(e.len(), 1, "{input}: {e:?}");
            assert!(
                e[0].contains(&format!("full endpoint path (`…{ep}`)")),
                "{input}: {}",
                e[0]
            );
        }
        let s = analyze("http://h:1/v1/messages", false);
        assert!(errors(&s)[0].contains("`http://h:1` for Anthropic clients"));
    }

    #[test]
    fn missing_scheme_is_an_error_but_still_tried() {
        let s = analyze("localhost:8080/v1", false);
        assert!(errors(&s)[0].contains("no scheme"));
        assert_eq!(s.root.as_deref(), Some("http://localhost:8080"));
        let s = analyze("api.example.com/v1", false);
        assert_eq!(s.root.as_deref(), Some("https://api.example.com"));
        let s = analyze("http:/h:1", false);
        assert!(s.root.is_none());
        assert!(errors(&s)[0].contains("malformed scheme"));
        let s = analyze("ftp://h/v1", false);
        assert!(s.root.is_none());
    }

    #[test]
    fn whitespace_is_an_error_and_removed() {
        let s = analyze("http://h:1/v1\n", false);
        let e = errors(&s);
        assert!(e[0].contains("trailing whitespace (line feed)"), "{e:?}");
        assert_eq!(s.root.as_deref(), Some("http://h:1"));
        let s = analyze(" http://h:1/ v1", false);
        let e = errors(&s);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[1].contains("inside"));
        assert_eq!(s.root.as_deref(), Some("http://h:1"));
    }

    #[test]
    fn credentials_and_queries_are_errors_and_redacted() {
        let s = analyze("https://user:s3cret@gw.example.com/v1?key=abc#frag", false);
        let e = errors(&s);
        assert!(e.iter().any(|t| t.contains("credentials")), "{e:?}");
        assert!(e.iter().any(|t| t.contains("query string")), "{e:?}");
        assert!(e.iter().any(|t| t.contains("fragment")), "{e:?}");
        assert_eq!(s.root.as_deref(), Some("https://gw.example.com"));
        assert_eq!(s.redacted, "https://***@gw.example.com/v1?***#***");
        assert!(!format!("{s:?}").contains("s3cret"));
        assert!(!format!("{s:?}").contains("key=abc"));
    }

    #[test]
    fn bad_ports_and_hosts() {
        assert!(analyze("http://h:99999/v1", false).root.is_none());
        assert!(analyze("http://h:abc", false).root.is_none());
        assert!(analyze("http:///v1", false).root.is_none());
        let s = analyze("http://[::1]:8080/v1", false);
        assert_eq!(s.root.as_deref(), Some("http://[::1]:8080"));
        assert_eq!(s.host, "[::1]");
    }

    #[test]
    fn host_notes() {
        let s = analyze("http://0.0.0.0:8080", false);
        assert!(!s.has_errors());
        assert!(s.findings.iter().any(|f| f.text.contains("listen on")));
        let s = analyze("http://localhost:8080", true);
        assert!(!s.has_errors());
        assert!(s.findings.iter().any(|f| f.text.contains("container")));
        let s = analyze("http://localhost:8080", false);
        assert!(!s.findings.iter().any(|f| f.text.contains("container")));
        let s = analyze("http://gw.example.com/v1", false);
        assert!(s.findings.iter().any(|f| f.text.contains("unencrypted")));
        let s = analyze("http://10.0.0.5:8080/v1", false);
        assert!(!s.findings.iter().any(|f| f.text.contains("unencrypted")));
    }

    #[test]
    fn redact_parts_removes_userinfo_query_and_fragment() {
        assert_eq!(
            redact_parts("http://bob:pw@proxy.corp:3128"),
            "http://***@proxy.corp:3128"
        );
        assert_eq!(
            redact_parts("proxy.corp:3128/x?a=b"),
            "proxy.corp:3128/x?***"
        );
        assert_eq!(redact_parts("http://h/p#t"), "http://h/p#***");
        assert_eq!(redact_parts("http://h:1/v1"), "http://h:1/v1");
    }
}
