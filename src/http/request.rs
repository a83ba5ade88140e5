//! Parsing of HTTP/1.1 requests: the head (via `httparse`) and the body (Content-Length or chunked).
//!
//! Everything here is pure: it works on byte slices, so it can be fuzzed and unit-tested without sockets.
//! The connection loop (`server.rs`) feeds it bytes and enforces the time limits.

use std::fmt;

/// Size and count limits applied while parsing.
#[derive(Clone, Copy, Debug)]
pub struct ParseLimits {
    /// The largest request head, in bytes (default 64 KiB); beyond it, 431.
    pub max_head_bytes: usize,
    /// The most header fields a request may have (default 100; never more than 128); beyond it, 431.
    pub max_headers: usize,
    /// The largest request body, in bytes (default 32 MiB; the server passes the config's `max_body_bytes`);
    /// beyond it, 413.
    pub max_body_bytes: u64,
}

impl Default for ParseLimits {
    fn default() -> Self {
        ParseLimits {
            max_head_bytes: 64 * 1024,
            max_headers: 100,
            max_body_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A parsed HTTP request, header names lowercased.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// The method as sent (`GET`, `POST`).
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The query string without the `?` (empty when absent).
    pub query: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// The header fields in order, names lowercased.
    pub headers: Headers,
    /// The body: empty in a head just parsed, complete (a chunked one decoded) once read.
    pub body: Body,
    /// The connection may serve another request after this one: HTTP/1.1 without `Connection: close`, or
    /// HTTP/1.0 with `Connection: keep-alive`.
    pub keep_alive: bool,
}

/// A request's header fields, in order: names and values in one string (two allocations per request, not
/// two per field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    text: String,
    /// Each field's name from `.0` to `.1` and value from `.1` to `.2` in `text`.
    spans: Vec<(u32, u32, u32)>,
}

impl Headers {
    /// Room for `fields` fields of `bytes` bytes in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers {
            text: String::with_capacity(bytes),
            spans: Vec::with_capacity(fields),
        }
    }

    /// Adds a field (its name as given).
    pub fn push(&mut self, name: &str, value: &str) {
        let start = self.text.len() as u32;
        self.text.push_str(name);
        let mid = self.text.len() as u32;
        self.text.push_str(value);
        self.spans.push((start, mid, self.text.len() as u32));
    }

    /// Adds a field with its name in lower case.
    fn push_lowercased(&mut self, name: &str, value: &str) {
        let start = self.text.len();
        self.push(name, value);
        self.text[start..start + name.len()].make_ascii_lowercase();
    }

    /// The fields, `(name, value)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.spans.iter().map(|&(a, b, c)| {
            (
                &self.text[a as usize..b as usize],
                &self.text[b as usize..c as usize],
            )
        })
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(fields: I) -> Headers {
        let mut h = Headers::default();
        for (n, v) in fields {
            h.push(n.as_ref(), v.as_ref());
        }
        h
    }
}

/// A request body where it was received: the connection's receive buffer handed over whole (the head
/// before the body left in it, skipped), so a body that came in one piece is never copied; read it as a
/// byte slice. The buffer goes back to its connection for the next request ([`Body::into_buffer`]).
#[derive(Clone, Default)]
pub struct Body {
    buf: Vec<u8>,
    start: usize,
}

// The body's bytes only: what precedes them in the buffer is the request's head (its credentials too).
impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        **self == **other
    }
}

impl Eq for Body {}

impl Body {
    /// The body `buf[start..]` (what precedes it is not part of the body).
    pub fn within(buf: Vec<u8>, start: usize) -> Body {
        let start = start.min(buf.len());
        Body { buf, start }
    }

    /// The buffer the body is in, emptied, to be reused.
    pub fn into_buffer(self) -> Vec<u8> {
        let mut buf = self.buf;
        buf.clear();
        buf
    }

    /// The body's bytes, to append to (a body gathered piece by piece starts at the buffer's beginning).
    pub(super) fn gathering(&mut self) -> &mut Vec<u8> {
        debug_assert_eq!(self.start, 0);
        &mut self.buf
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

impl From<Vec<u8>> for Body {
    fn from(buf: Vec<u8>) -> Body {
        Body { buf, start: 0 }
    }
}

impl HttpRequest {
    /// The first value of a header (name is matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// All values of a header, in order.
    pub fn header_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The value of one query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (form_decode(k) == name).then(|| form_decode(v))
        })
    }
}

/// Decodes a query component as a form value (`application/x-www-form-urlencoded`): `+` is a space and
/// `%XX` escapes are decoded (`percent-encoding`); a malformed escape is kept as it is, as browsers do.
pub fn form_decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// Decodes one path segment: `%XX` escapes only (`+` stays `+`); a malformed escape or bytes that are not
/// UTF-8 are an error (the caller answers 400).
pub fn decode_path_segment(s: &str) -> Result<String, SegmentError> {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(SegmentError::MalformedEscape(s.to_string()));
        }
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| SegmentError::NotUtf8(s.to_string()))
}

/// Why a path segment (as sent) does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentError {
    /// A `%` not followed by two hex digits.
    MalformedEscape(String),
    /// Bytes that are not UTF-8 once decoded.
    NotUtf8(String),
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::MalformedEscape(s) => {
                write!(f, "malformed percent escape in the path segment {s:?}")
            }
            SegmentError::NotUtf8(s) => {
                write!(f, "the path segment {s:?} is not UTF-8 once decoded")
            }
        }
    }
}

impl std::error::Error for SegmentError {}

/// How the body of a request is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body (no `Content-Length`, or 0).
    None,
    /// A body of this many bytes (`Content-Length`).
    Length(u64),
    /// A `Transfer-Encoding: chunked` body, its length known only at its end.
    Chunked,
}

/// The head of a request, before its body is read.
#[derive(Debug)]
pub struct Head {
    pub request: HttpRequest,
    pub body: BodyKind,
    pub expect_continue: bool,
}

/// Why a request could not be read. Each maps to one response status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// Malformed request line, header or body framing: 400.
    BadRequest(String),
    /// Head larger than the limit, or too many headers: 431.
    HeadTooLarge(String),
    /// Body larger than the limit: 413.
    BodyTooLarge(u64),
    /// Transfer-Encoding other than chunked: 501.
    NotImplemented(String),
    /// HTTP version other than 1.0/1.1: 505.
    Version,
}

impl HttpError {
    /// The response status this error is answered with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::HeadTooLarge(_) => 431,
            HttpError::BodyTooLarge(_) => 413,
            HttpError::NotImplemented(_) => 501,
            HttpError::Version => 505,
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::BadRequest(m) => write!(f, "bad request: {m}"),
            HttpError::HeadTooLarge(m) => write!(f, "request header too large: {m}"),
            HttpError::BodyTooLarge(limit) => {
                write!(f, "request body too large: the limit is {limit} bytes")
            }
            HttpError::NotImplemented(m) => write!(f, "not implemented: {m}"),
            HttpError::Version => write!(f, "only HTTP/1.0 and HTTP/1.1 are supported"),
        }
    }
}

/// The most header fields a request may have, whatever `ParseLimits::max_headers` says.
const HEADER_SLOTS: usize = 128;

/// Tries to parse a request head from the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, or the head and the number of bytes it used.
pub fn parse_head(buf: &[u8], limits: &ParseLimits) -> Result<Option<(Head, usize)>, HttpError> {
    // On the stack and left uninitialised (a heap block per request costs more than the parse; initialised
    // slots would keep stack pages of every connection thread resident).
    let mut storage = [const { std::mem::MaybeUninit::<httparse::Header>::uninit() }; HEADER_SLOTS];
    let mut req = httparse::Request::new(&mut []);
    let slots = &mut storage[..limits.max_headers.min(HEADER_SLOTS)];
    let used = match req.parse_with_uninit_headers(buf, slots) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > limits.max_head_bytes {
                return Err(HttpError::HeadTooLarge(format!(
                    "more than {} bytes",
                    limits.max_head_bytes
                )));
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(HttpError::HeadTooLarge(format!(
                "more than {} header fields",
                limits.max_headers
            )))
        }
        Err(httparse::Error::Version) => return Err(HttpError::Version),
        Err(e) => return Err(HttpError::BadRequest(e.to_string())),
    };
    if used > limits.max_head_bytes {
        return Err(HttpError::HeadTooLarge(format!(
            "more than {} bytes",
            limits.max_head_bytes
        )));
    }
    let method = req.method.unwrap_or("GET").to_string();
    let target = req.path.unwrap_or("/");
    let version = req.version.unwrap_or(1);
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let bytes = req
        .headers
        .iter()
        .map(|h| h.name.len() + h.value.len())
        .sum();
    let mut headers = Headers::with_capacity(req.headers.len(), bytes);
    for h in req.headers.iter() {
        headers.push_lowercased(h.name, String::from_utf8_lossy(h.value).trim());
    }

    let Framing {
        content_length,
        chunked,
        connection_close,
        expect_continue,
    } = framing(&headers, version)?;
    let body = match (chunked, content_length) {
        (true, Some(_)) => {
            return Err(HttpError::BadRequest(
                "both Content-Length and Transfer-Encoding were sent".into(),
            ))
        }
        (true, None) => BodyKind::Chunked,
        (false, Some(0)) | (false, None) => BodyKind::None,
        (false, Some(n)) if n > limits.max_body_bytes => {
            return Err(HttpError::BodyTooLarge(limits.max_body_bytes))
        }
        (false, Some(n)) => BodyKind::Length(n),
    };
    let request = HttpRequest {
        method,
        path,
        query,
        version,
        headers,
        body: Body::default(),
        keep_alive: !connection_close,
    };
    Ok(Some((
        Head {
            request,
            body,
            expect_continue,
        },
        used,
    )))
}

/// What a request's headers say of its framing.
struct Framing {
    content_length: Option<u64>,
    chunked: bool,
    connection_close: bool,
    expect_continue: bool,
}

/// The body's framing and the connection's fate, from the headers of an HTTP/1.`version` request: one
/// Content-Length (digits only), or `Transfer-Encoding: chunked` alone; `Connection` tokens; `Expect`.
fn framing(headers: &Headers, version: u8) -> Result<Framing, HttpError> {
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encodings = 0;
    let mut connection_close = version == 0;
    let mut expect_continue = false;
    for (name, value) in headers.iter() {
        match name {
            "content-length" => {
                // RFC 9112: digits only (no sign, no spaces, no list).
                let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
                let n: u64 = digits
                    .then(|| value.parse().ok())
                    .flatten()
                    .ok_or_else(|| {
                        HttpError::BadRequest(format!("invalid Content-Length {value:?}"))
                    })?;
                if content_length.is_some_and(|old| old != n) {
                    return Err(HttpError::BadRequest(
                        "conflicting Content-Length headers".into(),
                    ));
                }
                content_length = Some(n);
            }
            "transfer-encoding" => {
                // Exactly `chunked`: any other coding (or a list: `gzip, chunked` would need the gzip undone)
                // is refused rather than half-read.
                transfer_encodings += 1;
                if value.eq_ignore_ascii_case("chunked") && transfer_encodings == 1 {
                    chunked = true;
                } else if value.split(',').all(|t| {
                    let t = t.trim();
                    !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                }) {
                    return Err(HttpError::NotImplemented(format!(
                        "Transfer-Encoding {value:?} (only `chunked` is supported)"
                    )));
                } else {
                    return Err(HttpError::BadRequest(format!(
                        "invalid Transfer-Encoding {value:?}"
                    )));
                }
            }
            "connection" => {
                for token in value.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        connection_close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") && version == 0 {
                        connection_close = false;
                    }
                }
            }
            "expect" if value.eq_ignore_ascii_case("100-continue") => expect_continue = true,
            _ => {}
        }
    }
    Ok(Framing {
        content_length,
        chunked,
        connection_close,
        expect_continue,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::chunked::{chunk_size, ChunkedDecoder};

    fn head(raw: &str) -> Result<Option<(Head, usize)>, HttpError> {
        parse_head(raw.as_bytes(), &ParseLimits::default())
    }

    #[test]
    fn parses_a_simple_post() {
        let raw = "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-Api-Key: k\r\n\r\nhello";
        let (h, used) = head(raw).unwrap().unwrap();
        assert_eq!(used, raw.len() - 5);
        assert_eq!(h.request.path, "/v1/messages");
        assert_eq!(h.request.query, "beta=true");
        assert_eq!(h.request.header("x-api-key"), Some("k"));
        assert_eq!(h.body, BodyKind::Length(5));
        assert!(h.request.keep_alive);
    }

    #[test]
    fn header_fields_keep_their_order_lowercased_names_and_trimmed_values() {
        let raw = "GET / HTTP/1.1\r\nX-A: 1\r\nHost:  h  \r\nx-a: two\r\nX-Empty:\r\n\r\n";
        let (h, _) = head(raw).unwrap().unwrap();
        let fields: Vec<(&str, &str)> = h.request.headers.iter().collect();
        assert_eq!(
            fields,
            [("x-a", "1"), ("host", "h"), ("x-a", "two"), ("x-empty", "")]
        );
        assert_eq!(h.request.header("X-A"), Some("1"));
        assert_eq!(
            h.request.header_all("x-a").collect::<Vec<_>>(),
            ["1", "two"]
        );
        assert_eq!(h.request.header("x-empty"), Some(""));
        assert_eq!(h.request.header("missing"), None);
    }

    #[test]
    fn a_body_within_its_buffer_is_only_its_bytes() {
        let raw = b"POST / HTTP/1.1\r\nAuthorization: Bearer secret\r\nContent-Length: 2\r\n\r\nhi"
            .to_vec();
        let body = Body::within(raw.clone(), raw.len() - 2);
        assert_eq!(&*body, b"hi");
        assert_eq!(body, Body::from(b"hi".to_vec()));
        assert!(!format!("{body:?}").contains("secret"));
        let buf = body.into_buffer();
        assert!(buf.is_empty() && buf.capacity() >= raw.len());
    }

    #[test]
    fn partial_head_needs_more() {
        assert!(head("POST / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
    }

    #[test]
    fn huge_content_length_is_413_before_any_body() {
        let err = head("POST / HTTP/1.1\r\nContent-Length: 50000000000\r\n\r\n").unwrap_err();
        assert_eq!(err.status(), 413);
    }

    #[test]
    fn smuggling_shapes_are_rejected() {
        let err =
            head("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap_err();
        assert_eq!(err.status(), 400);
        let err =
            head("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n").unwrap_err();
        assert_eq!(err.status(), 400);
        let err = head("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").unwrap_err();
        assert_eq!(err.status(), 400);
    }

    #[test]
    fn too_many_headers_is_431() {
        let mut raw = String::from("GET / HTTP/1.1\r\n");
        for i in 0..200 {
            raw.push_str(&format!("X-{i}: v\r\n"));
        }
        raw.push_str("\r\n");
        assert_eq!(head(&raw).unwrap_err().status(), 431);
    }

    #[test]
    fn oversized_partial_head_is_431() {
        let raw = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(70_000));
        assert_eq!(head(&raw).unwrap_err().status(), 431);
    }

    #[test]
    fn http10_closes_by_default() {
        let (h, _) = head("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.request.keep_alive);
        let (h, _) = head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.request.keep_alive);
        let (h, _) = head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.request.keep_alive);
    }

    #[test]
    fn chunked_body_decodes_across_splits() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        for split in 0..body.len() {
            let mut dec = ChunkedDecoder::default();
            let mut out = Vec::new();
            let mut pending = body[..split].to_vec();
            let (used, done) = dec.feed(&pending, &mut out, 1000).unwrap();
            assert!(!done || split >= body.len() - 4);
            pending.drain(..used);
            pending.extend_from_slice(&body[split..]);
            let (used, done) = dec.feed(&pending, &mut out, 1000).unwrap();
            assert!(done);
            assert_eq!(&pending[used..], b"NEXT");
            assert_eq!(out, b"hello world");
        }
    }

    /// A bare LF or CR inside a size line or a trailer (where a proxy in front might end the line, and
    /// read a different body) is refused, not read past.
    #[test]
    fn control_bytes_inside_chunk_lines_are_refused() {
        for body in [
            &b"2;\nxx\r\n45\r\n0\r\n\r\n"[..],
            b"2;a\rb\r\nxx\r\n0\r\n\r\n",
            b"2;a\x00\r\nxx\r\n0\r\n\r\n",
            b"0\r\nX\n\r\n\r\n",
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n: no name\r\n\r\n",
            b"0\r\nName: a\rb\r\n\r\n",
        ] {
            let mut out = Vec::new();
            let err = ChunkedDecoder::default()
                .feed(body, &mut out, 1000)
                .unwrap_err();
            assert_eq!(err.status(), 400, "{:?}", String::from_utf8_lossy(body));
        }
        let mut out = Vec::new();
        let ok = b"2;name=\"v\"\t\r\nxx\r\n0\r\nName: a\tb\r\n\r\n";
        assert_eq!(
            ChunkedDecoder::default().feed(ok, &mut out, 1000).unwrap(),
            (ok.len(), true)
        );
        assert_eq!(out, b"xx");
    }

    #[test]
    fn chunked_body_over_limit_is_413() {
        let mut dec = ChunkedDecoder::default();
        let mut out = Vec::new();
        let err = dec.feed(b"ffffffff\r\n", &mut out, 1000).unwrap_err();
        assert_eq!(err.status(), 413);
        let mut dec = ChunkedDecoder::default();
        assert_eq!(
            dec.feed(b"zz\r\n", &mut out, 1000).unwrap_err().status(),
            400
        );
    }

    #[test]
    fn query_params_decode() {
        let (h, _) = head("GET /a?key=a%20b&limit=5&x HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.request.query_param("key").as_deref(), Some("a b"));
        assert_eq!(h.request.query_param("limit").as_deref(), Some("5"));
        assert_eq!(h.request.query_param("x").as_deref(), Some(""));
        assert_eq!(h.request.query_param("y"), None);
        assert_eq!(form_decode("%zz%4"), "%zz%4");
        assert_eq!(form_decode("a+b%2Bc"), "a b+c");
        assert_eq!(decode_path_segment("m-chat+x").unwrap(), "m-chat+x");
        assert_eq!(decode_path_segment("a%2Fb%20c").unwrap(), "a/b c");
        for bad in ["%+1", "%4", "%zz", "%ff"] {
            assert!(decode_path_segment(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn framing_is_strict() {
        for cl in ["+5", " 5x", "5, 5", "0x5", "", "5 5", "-0"] {
            let raw = format!("POST / HTTP/1.1\r\nContent-Length: {cl}\r\n\r\n");
            assert_eq!(
                head(&raw).unwrap_err().status(),
                400,
                "Content-Length {cl:?}"
            );
        }
        for te in ["gzip, chunked", "chunked, chunked", "identity", "gzip"] {
            let raw = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert_eq!(
                head(&raw).unwrap_err().status(),
                501,
                "Transfer-Encoding {te:?}"
            );
        }
        let raw =
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(head(raw).is_err(), "two Transfer-Encoding headers");
        let raw = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked;x\r\n\r\n";
        assert_eq!(head(raw).unwrap_err().status(), 400);
        for line in [
            " 5\r\n", "5 \r\n", "\r\n", "+5\r\n", "0x5\r\n", "5\t\r\n", "g\r\n",
        ] {
            assert!(chunk_size(line.as_bytes()).is_err(), "chunk size {line:?}");
        }
        assert_eq!(chunk_size(b"1F\r\n").unwrap(), 31);
        assert_eq!(chunk_size(b"5;name=value\r\n").unwrap(), 5);
        assert_eq!(chunk_size(b"5 ;name\r\n").unwrap(), 5);
    }

    proptest::proptest! {
        /// Any body split into any chunks (with or without extensions), fed in any pieces, decodes to itself.
        #[test]
        fn chunked_bodies_round_trip(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
            cuts in proptest::collection::vec(1usize..80, 1..20),
            feed in 1usize..50,
            ext in proptest::bool::ANY,
        ) {
            let mut wire = Vec::new();
            let mut rest = &body[..];
            let mut i = 0;
            while !rest.is_empty() {
                let n = cuts[i % cuts.len()].min(rest.len());
                wire.extend_from_slice(format!("{n:X}{}\r\n", if ext { ";x=1" } else { "" }).as_bytes());
                wire.extend_from_slice(&rest[..n]);
                wire.extend_from_slice(b"\r\n");
                rest = &rest[n..];
                i += 1;
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut d = ChunkedDecoder::default();
            let mut out = Vec::new();
            let mut buf: Vec<u8> = Vec::new();
            let mut done = false;
            for piece in wire.chunks(feed) {
                buf.extend_from_slice(piece);
                let (used, finished) = d.feed(&buf, &mut out, 1 << 20).unwrap();
                buf.drain(..used);
                done = finished;
            }
            proptest::prop_assert!(done);
            proptest::prop_assert_eq!(out, body);
        }

        /// Any string encoded as a path segment decodes to itself (`+` included); hostile input never panics.
        #[test]
        fn path_segments_round_trip(text in "\\PC{0,30}", junk in "[%+0-9a-zA-Z]{0,12}") {
            let encoded = percent_encoding::utf8_percent_encode(&text, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
            proptest::prop_assert_eq!(decode_path_segment(&encoded).unwrap(), text.clone());
            let plus = format!("{text}+").replace('%', "%25");
            proptest::prop_assert_eq!(decode_path_segment(&plus).unwrap(), format!("{text}+"));
            let _ = decode_path_segment(&junk);
            let _ = form_decode(&junk);
        }

        /// Hostile size lines never panic and are refused unless they are hex digits.
        #[test]
        fn hostile_chunk_sizes_are_refused(line in "[ -~\t]{0,20}") {
            let mut raw = line.clone().into_bytes();
            raw.extend_from_slice(b"\r\n");
            let ok = chunk_size(&raw).is_ok();
            let size = line.split(';').next().unwrap_or("");
            let strict = !size.trim_end_matches([' ', '\t']).is_empty()
                && size.trim_end_matches([' ', '\t']).bytes().all(|b| b.is_ascii_hexdigit())
                && (line.contains(';') || !size.ends_with([' ', '\t']))
                && size.trim_end_matches([' ', '\t']).len() <= 16;
            if ok {
                proptest::prop_assert!(strict, "accepted {:?}", line);
            }
        }
    }
}
