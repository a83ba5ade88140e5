//! The likely cause of a failed step: the specification's status table (its "Errors" section) and its
//! streaming symptoms, made specific where the answer allows.

use super::kinds::{self, Connect, Kind, ProbeOutcome};
use super::url::{self, UrlShape};
use crate::protocol::Protocol;

/// The likely cause of a failed step, from the specification's status table and stream symptoms.
pub(super) fn likely_cause(
    o: &ProbeOutcome,
    plain: Option<&ProbeOutcome>,
    shape: &UrlShape,
    model: &str,
    in_container: bool,
) -> String {
    let Some(f) = &o.failure else {
        return String::new();
    };
    if o.url.is_empty() {
        return "the base URL is unusable: fix it as step 1 says.".into();
    }
    let plain_passed = plain.is_some_and(ProbeOutcome::passed);
    // Failures only a stream can have, and those that are stream symptoms when the same request without
    // streaming worked.
    let stream_symptom = f.kind.is_stream_only()
        || (plain_passed
            && matches!(
                f.kind,
                Kind::Timeout | Kind::Answer | Kind::Connect(Connect::Closed)
            ));
    if o.stream && stream_symptom {
        return stream_cause(f.kind, plain_passed);
    }
    if let (Some(endpoint), Kind::Status(400 | 404)) = (o.endpoint, f.kind) {
        return format!(
            "the gateway refused the {endpoint} request for the model `{model}`: its message says why (most often \
             a model whose upstream has no {endpoint} endpoint, or a name the gateway does not know). Give a \
             model that serves {endpoint}."
        );
    }
    match f.kind {
        Kind::Connect(c) => connect_cause(c, o, shape, in_container),
        Kind::Timeout => format!(
            "no complete answer within the overall timeout of {} s: the gateway or its upstream is slow or \
             stuck, or a proxy holds the answer back. If it persists, contact support with the time and \
             request id.",
            if o.stream {
                kinds::STREAM_TIMEOUT
            } else {
                kinds::PLAIN_TIMEOUT
            }
            .as_secs()
        ),
        Kind::Answer => format!(
            "HTTP 2xx but not a usable {} answer: the base URL may point at a different service, or the \
             gateway cannot serve this model over this protocol (a reasoning model that spent the output \
             limit on thinking also answers without text).",
            o.proto.title
        ),
        Kind::Status(s) => status_cause(s, f, o.proto, shape, model),
        // Stream-only kinds on a non-streaming request cannot happen.
        _ => "see the error above.".into(),
    }
}

/// A streaming step's failure that points at the streaming path: SSE parsing, proxy buffering or idle
/// timeout (`plain_passed`: the same request without streaming worked).
fn stream_cause(kind: Kind, plain_passed: bool) -> String {
    let specific = match kind {
        Kind::NotSse => "The answer was not an event stream: the gateway or a proxy ignored \
                         `\"stream\": true` or rewrote the answer."
            .to_string(),
        Kind::StreamBad => "The events do not parse the way the official SDKs parse them (the error \
                            says which rule they break)."
            .to_string(),
        Kind::StreamError => "The gateway reported an error inside the stream (above); if its upstream \
                              broke mid-stream, the message says so."
            .to_string(),
        Kind::StreamCut => "The stream stopped without its end marker: a proxy or load balancer cutting \
                            long or idle responses, or the gateway or its upstream dropping the \
                            connection. If it always breaks after the same time, a client, gateway or \
                            corporate proxy timeout is the cause."
            .to_string(),
        Kind::Timeout => format!(
            "The stream did not finish within {} s: a buffering proxy holding the events back, or an \
             upstream that stalls (idle timeout).",
            kinds::STREAM_TIMEOUT.as_secs()
        ),
        Kind::Answer => "The stream carried no text although it ended normally: the gateway's stream \
                         translation or the SSE parsing loses it."
            .to_string(),
        _ => "The connection closed before the stream began: a proxy that refuses or cuts event streams."
            .to_string(),
    };
    if plain_passed {
        format!(
            "stream-only failure: the non-streaming request worked, so the streaming path is at fault: SSE \
             parsing, proxy buffering or idle timeout. {specific}"
        )
    } else {
        format!(
            "the non-streaming request failed too: fix its cause first (a stream failure alone would \
             point to SSE parsing, proxy buffering or idle timeout). {specific}"
        )
    }
}

/// No HTTP answer: what each way of failing to connect usually means.
fn connect_cause(c: Connect, o: &ProbeOutcome, shape: &UrlShape, in_container: bool) -> String {
    let loopback_hint =
        if in_container && (shape.host == "localhost" || shape.host.starts_with("127.")) {
            " Inside this container, 127.0.0.1 and localhost are the container itself."
        } else {
            ""
        };
    match c {
        Connect::Refused => format!(
            "nothing accepts connections at {}: check the host and port of the base URL and that the gateway \
             is running.{loopback_hint}",
            origin_of(&o.url)
        ),
        Connect::HostNotFound => format!(
            "the host name `{}` does not resolve: check its spelling, the DNS, and whether the name is only \
             valid inside another network or container.",
            shape.host
        ),
        Connect::Tls => "the TLS handshake failed: `https://` to a plain-HTTP port, or a certificate this \
                         system does not trust (a proxy intercepting TLS?)."
            .into(),
        Connect::Closed => "the connection closed without a valid HTTP answer: `http://` to an HTTPS port, \
                            the wrong port, or a proxy or load balancer cutting it."
            .into(),
        Connect::Other => {
            "the request could not be sent (see the error): check the base URL and the network.".into()
        }
    }
}

/// The specification's status table, made specific where the answer allows.
fn status_cause(
    s: u16,
    f: &kinds::Failure,
    proto: Protocol,
    shape: &UrlShape,
    model: &str,
) -> String {
    let message = f.message.as_deref().unwrap_or("");
    let code = f.code.as_deref().unwrap_or("");
    match s {
        300..=399 => format!(
            "{s}: the base address redirects{}: clients do not follow a redirect for POST. Use the address it \
             points to as the base URL (often `https://` instead of `http://`).",
            f.location
                .as_deref()
                .map(|l| format!(" to `{}`", url::redact_parts(l)))
                .unwrap_or_default()
        ),
        400 | 422 => format!(
            "{s}: wrong fields: the gateway refused the minimal request (Responses takes `input`, Chat \
             `messages`, Messages also `max_tokens`), so this endpoint or model may not support the {} \
             protocol. In a client, remove extra parameters.",
            proto.title
        ),
        401 => format!(
            "401: the key is incomplete, has spaces, or is not sent as `Authorization: Bearer <key>`{}; or the \
             base address is not effective and the request reached another service or provider. Fix the key \
             and the base address.",
            if sends_x_api_key(proto) {
                " (the doctor sent both `x-api-key` and `Authorization: Bearer`)"
            } else {
                ""
            }
        ),
        402 => "402: payment required: the account's balance or billing. Check the console balance.".into(),
        403 => format!(
            "403: the key is valid, but its group or the key may not use the model `{model}`. Change the key's \
             group or the model."
        ),
        // (A path that names the model, as Gemini's do, is not a model the gateway does not know.)
        404 if code == "model_not_found"
            || (code != "unknown_path" && !model.is_empty() && message.contains(model)) =>
        {
            format!(
            "404: the gateway does not know the model `{model}`: check the name against the console's model \
             list (a wrong path also gives 404: often a doubled `/v1` or a full endpoint in the base address)."
            )
        }
        404 | 405 => path_cause(s, proto, shape),
        408 => "408: the gateway did not receive the whole request in time: a slow link, or a proxy holding \
                the body."
            .into(),
        429 => format!(
            "429: {}. Back off with jitter and check the balance in the console{}.",
            if code == "insufficient_quota" {
                "the quota is exhausted (the key's balance is used up)"
            } else {
                "quota exhausted or rate limited"
            },
            retry_hint(f)
        ),
        500..=599 => format!(
            "{s}: a link fault behind the base address: {}{}. If several clients fail at once, contact \
             support with the request id.",
            match s {
                502 => "the gateway could not reach its upstream, or got an invalid answer from it",
                503 => "the gateway or its upstream is overloaded or unavailable",
                504 => "the gateway's upstream did not answer in time",
                529 => "the upstream is overloaded",
                _ => "the gateway or its upstream failed",
            },
            retry_hint(f)
        ),
        _ => format!("{s}: the gateway refused the request; see the error above."),
    }
}

/// Whether the doctor sends the key of `proto` in `x-api-key` too (as its SDK does).
fn sends_x_api_key(proto: Protocol) -> bool {
    let headers = proto.probe.client_headers("");
    headers
        .iter()
        .flatten()
        .any(|(name, _)| *name == "x-api-key")
}

/// A 404 or 405 that is not about the model: the base URL of the other SDK family, or a wrong path.
fn path_cause(s: u16, proto: Protocol, shape: &UrlShape) -> String {
    if !shape.has_errors() {
        if let Some(m) = family_mismatch(proto, shape) {
            return format!("{s}: {m}");
        }
    }
    format!(
        "{s}: wrong path: often a doubled `/v1` or a full endpoint path in the base address{}. Fix the \
         path: OpenAI clients take `<root>/v1`, Anthropic clients `<root>` without `/v1`.",
        if shape.has_errors() {
            " (step 1 names the problem in this one)"
        } else {
            ""
        }
    )
}

/// `; the gateway asks to retry after N s` when the answer had a `retry-after`.
fn retry_hint(f: &kinds::Failure) -> String {
    f.retry_after
        .as_deref()
        .map(|r| format!("; the gateway asks to retry after {r} s"))
        .unwrap_or_default()
}

/// `scheme://host:port` of a URL, for messages.
fn origin_of(u: &str) -> &str {
    let after = u.find("://").map_or(0, |i| i + 3);
    match u[after..].find('/') {
        Some(i) => &u[..after + i],
        None => u,
    }
}

/// A base URL of the other SDK family's form: OpenAI SDKs want `/v1` in it, Anthropic's do not. Says which
/// URL the SDK built and what to give it instead.
fn family_mismatch(proto: Protocol, shape: &UrlShape) -> Option<String> {
    let (base, root) = (shape.base.as_deref()?, shape.root.as_deref()?);
    let with_v1 = base.to_ascii_lowercase().ends_with("/v1");
    let (vendor, sdk, clients) = (proto.vendor, proto.sdk_path(), proto.clients);
    match (proto.base_url_has_v1, with_v1) {
        (false, true) => Some(format!(
            "{vendor} SDKs append `{sdk}` to their base URL, so this one makes `{base}{sdk}`{}. Give {clients} \
             `{root}` without `/v1`.",
            if sdk.starts_with("/v1/") {
                " (a doubled `/v1`)"
            } else {
                ""
            }
        )),
        (true, false) => Some(format!(
            "{vendor} SDKs append `{sdk}` to their base URL, so this one makes `{base}{sdk}` (no `/v1`). Give \
             {clients} `{root}/v1`."
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::not_sent;

    #[test]
    fn origins() {
        assert_eq!(origin_of("http://h:1/v1/chat/completions"), "http://h:1");
        assert_eq!(origin_of("http://h:1"), "http://h:1");
    }

    fn failure(kind: Kind) -> kinds::Failure {
        kinds::Failure {
            kind,
            detail: "x".into(),
            message: None,
            code: None,
            retry_after: None,
            location: None,
        }
    }

    #[test]
    fn status_causes_follow_the_table() {
        let shape = url::analyze("http://h:1/v1", false);
        let c = |s: u16| status_cause(s, &failure(Kind::Status(s)), Protocol::Chat, &shape, "m");
        assert!(c(401).contains("key") && c(401).contains("base address"));
        assert!(c(403).contains("group"));
        assert!(c(404).contains("path") && c(404).contains("doubled `/v1`"));
        assert!(c(429).contains("rate limited"));
        assert!(c(500).contains("upstream"));
        assert!(c(502).contains("upstream"));
        let mut f = failure(Kind::Status(404));
        f.code = Some("model_not_found".into());
        assert!(
            status_cause(404, &f, Protocol::Chat, &shape, "m").contains("does not know the model")
        );
        let mut f = failure(Kind::Status(301));
        f.location = Some("https://h/v1/chat/completions".into());
        assert!(
            status_cause(301, &f, Protocol::Chat, &shape, "m").contains("redirects to `https://h")
        );
    }

    #[test]
    fn stream_failures_after_a_passing_plain_request_are_stream_only() {
        let shape = url::analyze("http://h:1/v1", false);
        let mut plain = not_sent(Protocol::Chat, false, "c");
        plain.url = "http://h:1/v1/chat/completions".into();
        plain.failure = None;
        let mut o = plain.clone();
        o.stream = true;
        o.failure = Some(failure(Kind::StreamCut));
        let c = likely_cause(&o, Some(&plain), &shape, "m", false);
        assert!(c.starts_with("stream-only failure"), "{c}");
        assert!(c.contains("SSE parsing, proxy buffering or idle timeout"));
        plain.failure = Some(failure(Kind::Status(500)));
        let c = likely_cause(&o, Some(&plain), &shape, "m", false);
        assert!(c.starts_with("the non-streaming request failed too"), "{c}");
    }
}
