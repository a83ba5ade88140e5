//! Calls to real upstreams over HTTP with one shared `ureq` agent (keep-alive pool).
//!
//! This module knows URLs, credentials, headers and timeouts; it knows nothing of what the bodies mean.
//! Errors come back as [`ApiError`]s naming the upstream, never its URL's credentials or key.

use std::io::{BufReader, Read};
use std::time::Duration;

use ureq::http;

use super::tap;
use crate::config::Upstream;
use crate::protocol::sse::SseReader;
use crate::protocol::ApiError;

/// How long an idle upstream connection stays in the pool.
const IDLE_AGE: Duration = Duration::from_secs(4);

/// Largest non-streamed upstream body we read.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// Builds the agent all workers share: ureq's usual connector chain (CONNECT proxies, TCP, rustls) with
/// the TCP step tapped, so a worker can cut its upstream connection (see `tap`).
pub fn agent(max_idle: usize) -> ureq::Agent {
    use ureq::unversioned::transport::{ConnectProxyConnector, Connector, RustlsConnector};
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_idle_connections(max_idle.max(16))
        .max_idle_connections_per_host(max_idle.max(16))
        // Idle connections are kept for less than the usual server-side keep-alive limits (uvicorn, which
        // vLLM and many local servers run on, and Node close idle connections after 5 s), so the pool rarely
        // hands out one the upstream is about to close; the retry in `send_to` covers the race that is left.
        .max_idle_age(IDLE_AGE)
        .user_agent(concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .no_delay(true)
        // Small buffers: a thousand open streams each hold one connection.
        .input_buffer_size(16 * 1024)
        .output_buffer_size(8 * 1024)
        .build();
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(super::tap::TapConnector)
            .chain(RustlsConnector::default());
    ureq::Agent::with_parts(config, connector, CachingResolver::default())
}

/// Name resolution without a thread per request: IP-literal hosts (local model servers) need no lookup at
/// all, and names are looked up once per 30 seconds. (ureq's default resolver runs every lookup, even for a
/// pooled connection, on a new thread whenever a timeout is set, and tollgate always sets one.)
#[derive(Debug, Default)]
struct CachingResolver {
    inner: ureq::unversioned::resolver::DefaultResolver,
    cache: std::sync::Mutex<
        std::collections::HashMap<String, (std::time::Instant, ResolvedSocketAddrs)>,
    >,
}

use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};

const RESOLVE_TTL: Duration = Duration::from_secs(30);

impl Resolver for CachingResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return self.inner.resolve(uri, config, timeout);
        };
        let port = authority
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if let Ok(ip) = host.parse::<std::net::IpAddr>() {
            let mut addrs = self.empty();
            addrs.push(std::net::SocketAddr::new(ip, port));
            return Ok(addrs);
        }
        let key = format!("{scheme}://{host}:{port}");
        if let Ok(cache) = self.cache.lock() {
            if let Some((at, addrs)) = cache.get(&key) {
                if at.elapsed() < RESOLVE_TTL {
                    return Ok(addrs.clone());
                }
            }
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, (std::time::Instant::now(), addrs.clone()));
        }
        Ok(addrs)
    }
}

/// The URL of the generation endpoint of an upstream for a request to `model` (its protocol's path under
/// its base URL; protocols whose paths name the model and the stream put them there).
pub fn endpoint(upstream: &Upstream, model: &str, stream: bool) -> String {
    match upstream.kind.protocol() {
        Some(p) => format!(
            "{}{}",
            upstream.base_url,
            p.upstream_endpoint(model, stream)
        ),
        None => upstream.base_url.clone(),
    }
}

/// The upstream's legacy text completions endpoint, where its kind has one (the OpenAI-compatible kinds).
pub fn completions_endpoint(upstream: &Upstream) -> Option<String> {
    let c = upstream.kind.protocol()?.completions?;
    Some(format!("{}{}", upstream.base_url, c.upstream_path))
}

/// The upstream's embeddings endpoint for `model`, where its kind's vendor has embeddings.
pub fn embeddings_endpoint(upstream: &Upstream, model: &str) -> Option<String> {
    let e = upstream.kind.protocol()?.embedder?;
    Some(format!(
        "{}{}",
        upstream.base_url,
        e.upstream_embed_path(model)
    ))
}

/// The upstream's credential (and version) headers on a request to it, as its protocol sends them.
pub fn with_credentials<B>(
    mut req: ureq::RequestBuilder<B>,
    upstream: &Upstream,
) -> ureq::RequestBuilder<B> {
    let headers = upstream
        .kind
        .protocol()
        .map(|p| p.credentials(upstream.api_key.as_deref()));
    for (name, value) in headers.into_iter().flatten().flatten() {
        req = req.header(name, value.as_ref());
    }
    req
}

/// The URL of an upstream's model list (what the console's health probe asks for).
pub fn models_url(upstream: &Upstream) -> String {
    let path = upstream
        .kind
        .protocol()
        .map_or("/models", |p| p.models_path);
    format!("{}{path}", upstream.base_url)
}

/// An upstream's answer: its status and headers, and the body still to be read.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `content-type` header, lowercased (empty when absent).
    pub content_type: String,
    /// Seconds to wait before asking again: `retry-after`, else `retry-after-ms` rounded up (None: neither,
    /// or not a whole number).
    pub retry_after: Option<u64>,
    body: ureq::Body,
}

impl Reply {
    /// Whether the body is a server-sent event stream (`text/event-stream`).
    pub fn is_event_stream(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }

    /// Reads the whole body (bounded).
    pub fn read_all(self, upstream: &str) -> Result<Vec<u8>, ApiError> {
        self.read_into(upstream, Vec::new())
    }

    /// [`read_all`](Self::read_all) into `buf` (emptied first: a buffer reused from an earlier answer).
    pub fn read_into(mut self, upstream: &str, mut buf: Vec<u8>) -> Result<Vec<u8>, ApiError> {
        buf.clear();
        // Sized from Content-Length (up to 1 MiB) when there is one, so the body is read without regrowing.
        let expected = self.body.content_length().unwrap_or(0).min(1 << 20);
        buf.reserve(expected as usize);
        self.body
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .reader()
            .read_to_end(&mut buf)
            .map_err(|e| map_error(upstream, "", ureq::Error::from(e)))?;
        Ok(buf)
    }

    /// The body as a stream of SSE events.
    pub fn into_sse(self) -> SseReader<BufReader<impl Read>> {
        // Small: ureq already buffers the socket below; this one only splits lines.
        SseReader::new(BufReader::with_capacity(4 * 1024, self.body.into_reader()))
    }
}

/// Sends a POST to `url` of `upstream` with its credentials and timeouts.
pub fn send_to(
    agent: &ureq::Agent,
    upstream: &Upstream,
    url: &str,
    body: &[u8],
    stream: bool,
    passed: Option<&(&'static str, String)>,
) -> Result<Reply, ApiError> {
    let per_read = if stream {
        upstream.idle_timeout
    } else {
        upstream.first_byte_timeout
    };
    let make = || {
        let mut req = agent
            .post(url)
            .header("content-type", "application/json")
            .header(
                "accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            );
        req = with_credentials(req, upstream);
        if let Some((name, value)) = passed {
            req = req.header(*name, value.as_str());
        }
        req.config()
            .timeout_connect(Some(upstream.connect_timeout))
            .timeout_recv_response(Some(upstream.first_byte_timeout))
            .timeout_per_read(Some(per_read))
            .timeout_global(Some(upstream.total_timeout))
            .build()
    };
    // A pooled connection the upstream closed while it sat idle fails before any byte of the answer: the
    // upstream never took that request, so it is sent again (on another pooled connection or a new one), as
    // `policy::resend_stale` allows.
    let mut tries = 0;
    let resp = loop {
        tap::begin_attempt();
        match make().send(body) {
            Ok(r) => break r,
            Err(e) if super::policy::resend_stale(tries, &e, tap::attempt().safe_to_retry()) => {
                tries += 1;
                log::debug!(
                    "upstream `{}`: a reused connection was closed before the answer ({e}); sending again",
                    upstream.name
                );
            }
            Err(e) => return Err(map_error(&upstream.name, host_of(&upstream.base_url), e)),
        }
    };
    let status = resp.status().as_u16();
    let headers = resp.headers();
    let content_type = header_str(headers, "content-type").to_ascii_lowercase();
    let retry_after = header_str(headers, "retry-after")
        .trim()
        .parse::<u64>()
        .ok()
        .or_else(|| {
            header_str(headers, "retry-after-ms")
                .trim()
                .parse::<u64>()
                .ok()
                .map(|ms| ms.div_ceil(1000))
        });
    Ok(Reply {
        status,
        content_type,
        retry_after,
        body: resp.into_body(),
    })
}

fn header_str<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Turns a transport failure into the client-facing error: timeouts are 504, everything else 502. The
/// message names the upstream and the category (name not found, connection refused, TLS, timeout, reset);
/// the host (`host`, may be empty) goes into the operator's detail only, never to a client.
pub fn map_error(upstream: &str, host: &str, e: ureq::Error) -> ApiError {
    let at = if host.is_empty() {
        String::new()
    } else {
        format!("host {host}: ")
    };
    let (timeout, category, what) = categorize(&e);
    let msg = if timeout {
        format!("upstream `{upstream}` timed out: {category}")
    } else {
        format!("upstream `{upstream}` unreachable: {category}")
    };
    let err = match (timeout, &e) {
        (true, _) => ApiError::gateway_timeout(msg),
        (false, ureq::Error::BodyExceedsLimit(n)) => ApiError::bad_gateway(format!(
            "upstream `{upstream}` sent a body larger than {n} bytes"
        )),
        (false, _) => ApiError::bad_gateway(msg),
    };
    err.with_detail(format!("{at}{}", sanitize(&what)))
}

/// Whether a transport failure is a timeout, its category, and the transport's own words.
fn categorize(e: &ureq::Error) -> (bool, &'static str, String) {
    use std::io::ErrorKind as K;
    let text = e.to_string();
    let category = match e {
        ureq::Error::Timeout(ureq::Timeout::Connect) => return (true, "connecting", text),
        ureq::Error::Timeout(_) => return (true, "no answer in time", text),
        ureq::Error::HostNotFound => "name not found",
        ureq::Error::ConnectionFailed => "connection failed",
        ureq::Error::Tls(_) | ureq::Error::Pem(_) | ureq::Error::Rustls(_) => "TLS failed",
        ureq::Error::Io(io) => match io.kind() {
            K::TimedOut | K::WouldBlock => return (true, "no answer in time", text),
            K::ConnectionRefused => "connection refused",
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                "connection reset"
            }
            K::NotFound => "name not found",
            K::HostUnreachable | K::NetworkUnreachable | K::NetworkDown => "host unreachable",
            K::InvalidData if text.contains("certificate") || text.contains("TLS") => "TLS failed",
            // The system resolver's failures come as uncategorized errors with its own words.
            _ if is_name_error(&text) => "name not found",
            _ => "connection failed",
        },
        _ => "connection failed",
    };
    (false, category, text)
}

/// Whether a resolver failure's text says the name does not resolve (glibc, musl, macOS wordings).
fn is_name_error(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "lookup address",
        "name or service not known",
        "nodename nor servname",
        "temporary failure in name resolution",
        "no address associated",
        "name does not resolve",
    ]
    .iter()
    .any(|w| t.contains(w))
}

/// The host and port of an upstream's base URL, for the operator's detail of a failure.
pub fn host_of(base_url: &str) -> &str {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit('@').next().unwrap_or(authority)
}

/// Error texts from the HTTP client can quote URLs; strip any userinfo so credentials never leak.
fn sanitize(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for word in msg.split(' ') {
        if !out.is_empty() {
            out.push(' ');
        }
        match (word.find("://"), word.find('@')) {
            (Some(s), Some(at)) if at > s => {
                out.push_str(&word[..s + 3]);
                out.push_str(&word[at + 1..]);
            }
            _ => out.push_str(word),
        }
    }
    out
}

/// Classifies a mid-stream read failure.
pub fn stream_read_error(upstream: &str, e: &std::io::Error) -> ApiError {
    if let Some(ureq::Error::Timeout(t)) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
    {
        let what = match t {
            ureq::Timeout::Global => {
                "the call took longer than its total timeout (total_timeout_secs)"
            }
            _ => "it went silent mid-stream for longer than idle_timeout_secs",
        };
        return ApiError::gateway_timeout(format!("upstream `{upstream}` timed out: {what}"));
    }
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ApiError::gateway_timeout(
            format!("upstream `{upstream}` went silent mid-stream (idle timeout)"),
        ),
        _ => ApiError::bad_gateway(format!("upstream `{upstream}` stream broke: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_strips_userinfo() {
        assert_eq!(
            sanitize("bad url http://user:pw@host/x here"),
            "bad url http://host/x here"
        );
    }
}
