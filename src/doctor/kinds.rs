//! What the doctor's steps share: what a failure is, what one request did, and how a transport error is
//! sorted. The protocols it speaks, and how their SDKs send and read, are their codecs' (`protocol::Codec`).

use std::io;
use std::time::Duration;

use super::text::clip;
use crate::protocol::Protocol;

/// The one short text of the minimal request. Never printed in the support report.
pub(super) const PROMPT: &str = "Reply with the word pong.";
/// The specification's client-side overall timeouts.
pub(super) const PLAIN_TIMEOUT: Duration = Duration::from_secs(60);
pub(super) const STREAM_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest error body or transport message kept as "the full error".
pub(super) const MAX_DETAIL: usize = 4000;

/// Why no HTTP answer came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Connect {
    Refused,
    HostNotFound,
    Tls,
    /// Closed without an answer, or an answer that is not HTTP.
    Closed,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// No HTTP answer.
    Connect(Connect),
    /// The overall timeout (60 s, or 180 s streaming) ran out.
    Timeout,
    /// An HTTP status other than 2xx.
    Status(u16),
    /// A 2xx answer without usable text (not JSON, no text, a failed status).
    Answer,
    /// A streaming request answered with something that is not an event stream.
    NotSse,
    /// An error event inside the stream.
    StreamError,
    /// Events the SDKs cannot parse (not JSON, wrong order, no `event:` line).
    StreamBad,
    /// The stream ended without its terminal event.
    StreamCut,
}

impl Kind {
    /// Failures only a stream can have.
    pub(crate) fn is_stream_only(self) -> bool {
        matches!(
            self,
            Kind::NotSse | Kind::StreamError | Kind::StreamBad | Kind::StreamCut
        )
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub kind: Kind,
    /// The full error: the answer body, the in-stream event, or the transport error.
    pub detail: String,
    /// `error.message` of an error body.
    pub message: Option<String>,
    /// `error.code` (OpenAI) or `error.type` (Anthropic) of an error body.
    pub code: Option<String>,
    pub retry_after: Option<String>,
    pub location: Option<String>,
}

impl Failure {
    pub(crate) fn new(kind: Kind, detail: impl Into<String>) -> Failure {
        Failure {
            kind,
            detail: clip(&detail.into(), MAX_DETAIL),
            message: None,
            code: None,
            retry_after: None,
            location: None,
        }
    }
}

/// What one request did.
#[derive(Clone, Debug)]
pub(crate) struct ProbeOutcome {
    pub proto: Protocol,
    pub stream: bool,
    /// An endpoint besides generation (`embeddings`, `completions`), probed in `proto`'s family.
    pub endpoint: Option<&'static str>,
    pub url: String,
    pub client_request_id: String,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    /// `x-request-id`, `request-id`, or `request_id` of an error body.
    pub request_id: Option<String>,
    /// Whether the answer echoed our `X-Client-Request-ID`.
    pub echoed: bool,
    pub headers_at: Option<Duration>,
    pub first_byte: Option<Duration>,
    pub first_text: Option<Duration>,
    pub total: Duration,
    pub text: String,
    /// Stream events read (comments and keepalives not counted).
    pub events: usize,
    pub failure: Option<Failure>,
    /// Observations that do not fail the step.
    pub notes: Vec<String>,
}

impl ProbeOutcome {
    /// A request to `url` that has not been answered yet: nothing received, nothing failed.
    pub(crate) fn new(
        proto: Protocol,
        stream: bool,
        url: String,
        client_request_id: &str,
    ) -> ProbeOutcome {
        ProbeOutcome {
            proto,
            stream,
            endpoint: None,
            url,
            client_request_id: client_request_id.to_string(),
            status: None,
            content_type: None,
            request_id: None,
            echoed: false,
            headers_at: None,
            first_byte: None,
            first_text: None,
            total: Duration::ZERO,
            text: String::new(),
            events: 0,
            failure: None,
            notes: Vec::new(),
        }
    }

    pub(crate) fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// What the step checked, as the report names it: the protocol, or the endpoint.
    pub(crate) fn label(&self) -> &'static str {
        self.endpoint.unwrap_or(self.proto.name)
    }

    /// A generation step of `proto`, not streamed.
    pub(crate) fn is_plain_of(&self, proto: Protocol) -> bool {
        self.proto == proto && !self.stream && self.endpoint.is_none()
    }
}

/// Sorts a transport error into what the user can act on.
pub(super) fn classify(e: ureq::Error) -> (Kind, String) {
    let detail = e.to_string();
    let kind = match &e {
        ureq::Error::Timeout(_) => Kind::Timeout,
        ureq::Error::HostNotFound => Kind::Connect(Connect::HostNotFound),
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => {
            Kind::Connect(Connect::Tls)
        }
        ureq::Error::Protocol(_) => Kind::Connect(Connect::Closed),
        ureq::Error::Io(io) => match io.kind() {
            io::ErrorKind::ConnectionRefused => Kind::Connect(Connect::Refused),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Kind::Timeout,
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe => Kind::Connect(Connect::Closed),
            _ => Kind::Connect(Connect::Other),
        },
        _ => Kind::Connect(Connect::Other),
    };
    (kind, detail)
}
