//! A minimal HTTP/1.1 client for the benchmarks and the soak: keep-alive connections, Content-Length and
//! chunked bodies, and SSE streams read event by event with the time each event arrived.
//!
//! Timing: `Instant` for durations measured inside this process; wall-clock nanoseconds (`unix_nanos`) to
//! compare against the send time the fake upstream writes into each streamed event (`ts=…`), since both
//! processes share the machine's clock.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock time in nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// How a response body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// A response head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub framing: Framing,
    /// The server will close the connection after this response.
    pub close: bool,
    pub event_stream: bool,
    /// tollgate's own account of its overhead (`x-tollgate-overhead-ms`), when present.
    pub overhead_ms: Option<f64>,
    pub retry_after: Option<String>,
    pub client_request_id: Option<String>,
}

/// A complete non-streamed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub body: Vec<u8>,
}

/// One SSE event as it arrived.
pub struct Event<'a> {
    /// The event's bytes without the blank line that ends it.
    pub raw: &'a [u8],
    pub arrived: Instant,
    pub arrived_unix_ns: u64,
}

impl Event<'_> {
    /// The send time the fake upstream wrote into the event (`ts=<unix ns>`), if any.
    pub fn sent_unix_ns(&self) -> Option<u64> {
        let at = find(self.raw, b"ts=")? + 3;
        let mut n: u64 = 0;
        let mut digits = 0;
        for &b in &self.raw[at..] {
            if !b.is_ascii_digit() {
                break;
            }
            n = n * 10 + (b - b'0') as u64;
            digits += 1;
        }
        (digits > 0).then_some(n)
    }

    /// The stream's end marker: Chat `[DONE]`, Messages `message_stop`, Responses `response.completed`.
    pub fn is_end(&self) -> bool {
        find(self.raw, b"data: [DONE]").is_some()
            || find(self.raw, b"event: message_stop").is_some()
            || find(self.raw, b"event: response.completed").is_some()
    }

    /// An in-stream error event (Chat `data: {"error":…}`, Messages/Responses `event: error`).
    pub fn is_error(&self) -> bool {
        find(self.raw, b"data: {\"error\"").is_some() || find(self.raw, b"event: error").is_some()
    }
}

/// First position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let last_start = hay.len() - needle.len();
    let mut i = 0;
    while i <= last_start {
        match hay[i..=last_start].iter().position(|&b| b == first) {
            None => return None,
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return Some(i);
                }
                i += 1;
            }
        }
    }
    None
}

/// Parses a response head at the start of `buf`: `Ok(Some((length, status, minor version)))`, each header
/// passed to `header` (its name as sent, its value's bytes); `Ok(None)` while it is incomplete. The one
/// head parser of the tests' reader (`http::read_head`) and the load client.
pub fn parse_head(
    buf: &[u8],
    mut header: impl FnMut(&str, &[u8]),
) -> io::Result<Option<(usize, u16, u8)>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => {
            for h in resp.headers.iter() {
                header(h.name, h.value);
            }
            Ok(Some((n, resp.code.unwrap_or(0), resp.version.unwrap_or(1))))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad response head: {e}"),
        )),
    }
}

/// One keep-alive client connection.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    pos: usize,
    scratch: Box<[u8; 16 * 1024]>,
    /// When the last read returned data.
    last_read: Instant,
    last_read_unix_ns: u64,
    /// When the first byte of the current response arrived.
    pub first_byte: Option<Instant>,
}

impl Conn {
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(32 * 1024),
            pos: 0,
            scratch: Box::new([0u8; 16 * 1024]),
            last_read: Instant::now(),
            last_read_unix_ns: 0,
            first_byte: None,
        })
    }

    pub fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(t))
    }

    /// Sends request bytes; marks the start of a new response.
    pub fn send(&mut self, request: &[u8]) -> io::Result<()> {
        self.first_byte = None;
        self.stream.write_all(request)
    }

    fn fill(&mut self) -> io::Result<usize> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 16 * 1024 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        loop {
            match self.stream.read(&mut self.scratch[..]) {
                Ok(n) => {
                    if n > 0 {
                        self.last_read = Instant::now();
                        self.last_read_unix_ns = unix_nanos();
                        if self.first_byte.is_none() {
                            self.first_byte = Some(self.last_read);
                        }
                        self.buf.extend_from_slice(&self.scratch[..n]);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn fill_or_eof(&mut self, what: &str) -> io::Result<()> {
        if self.fill()? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("connection closed {what}"),
            ));
        }
        Ok(())
    }

    /// Reads a response head.
    pub fn read_head(&mut self) -> io::Result<Head> {
        loop {
            if self.pos < self.buf.len() {
                let mut framing = Framing::UntilClose;
                let mut close = false;
                let mut keep_alive = false;
                let mut event_stream = false;
                let mut overhead_ms = None;
                let mut retry_after = None;
                let mut client_request_id = None;
                let parsed = parse_head(&self.buf[self.pos..], |name, value| {
                    let v = std::str::from_utf8(value).unwrap_or("").trim();
                    if name.eq_ignore_ascii_case("content-length") {
                        if framing != Framing::Chunked {
                            framing = Framing::Length(v.parse().unwrap_or(0));
                        }
                    } else if name.eq_ignore_ascii_case("transfer-encoding") {
                        if v.to_ascii_lowercase().contains("chunked") {
                            framing = Framing::Chunked;
                        }
                    } else if name.eq_ignore_ascii_case("connection") {
                        let v = v.to_ascii_lowercase();
                        if v.contains("close") {
                            (close, keep_alive) = (true, false);
                        } else if v.contains("keep-alive") {
                            (close, keep_alive) = (false, true);
                        }
                    } else if name.eq_ignore_ascii_case("content-type") {
                        event_stream = v.starts_with("text/event-stream");
                    } else if name.eq_ignore_ascii_case("x-tollgate-overhead-ms") {
                        overhead_ms = v.parse().ok();
                    } else if name.eq_ignore_ascii_case("retry-after") {
                        retry_after = Some(v.to_string());
                    } else if name.eq_ignore_ascii_case("x-client-request-id") {
                        client_request_id = Some(v.to_string());
                    }
                })?;
                if let Some((n, status, version)) = parsed {
                    self.pos += n;
                    if status == 100 {
                        continue;
                    }
                    // HTTP/1.0 closes unless it says keep-alive.
                    let close = close || (version == 0 && !keep_alive);
                    if framing == Framing::UntilClose && (status == 204 || status == 304) {
                        framing = Framing::Length(0);
                    }
                    return Ok(Head {
                        status,
                        framing,
                        close,
                        event_stream,
                        overhead_ms,
                        retry_after,
                        client_request_id,
                    });
                }
            }
            self.fill_or_eof("before the response head")?;
        }
    }

    /// Passes each piece of the body to `f` as it arrives (chunked framing removed), with the arrival time
    /// of the read that brought it. Returning false from `f` stops reading (the connection is then unusable).
    pub fn body_pieces(
        &mut self,
        framing: Framing,
        mut f: impl FnMut(&[u8], Instant, u64) -> bool,
    ) -> io::Result<bool> {
        match framing {
            Framing::Length(mut left) => {
                while left > 0 {
                    if self.pos == self.buf.len() {
                        self.fill_or_eof("inside a body")?;
                    }
                    let take = left.min(self.buf.len() - self.pos);
                    let piece = &self.buf[self.pos..self.pos + take];
                    self.pos += take;
                    left -= take;
                    if !f(piece, self.last_read, self.last_read_unix_ns) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
            Framing::UntilClose => loop {
                if self.pos == self.buf.len() && self.fill()? == 0 {
                    return Ok(true);
                }
                let piece = &self.buf[self.pos..];
                self.pos = self.buf.len();
                if !f(piece, self.last_read, self.last_read_unix_ns) {
                    return Ok(false);
                }
            },
            Framing::Chunked => {
                loop {
                    // Chunk size line.
                    let line_end = loop {
                        if let Some(i) = find(&self.buf[self.pos..], b"\r\n") {
                            break i;
                        }
                        self.fill_or_eof("inside a chunked body")?;
                    };
                    let line =
                        std::str::from_utf8(&self.buf[self.pos..self.pos + line_end]).unwrap_or("");
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(hex, 16).map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("bad chunk size {hex:?}"),
                        )
                    })?;
                    self.pos += line_end + 2;
                    if size == 0 {
                        // Trailers up to an empty line.
                        loop {
                            let end = loop {
                                if let Some(i) = find(&self.buf[self.pos..], b"\r\n") {
                                    break i;
                                }
                                self.fill_or_eof("in the chunked trailer")?;
                            };
                            self.pos += end + 2;
                            if end == 0 {
                                return Ok(true);
                            }
                        }
                    }
                    let mut left = size;
                    while left > 0 {
                        if self.pos == self.buf.len() {
                            self.fill_or_eof("inside a chunk")?;
                        }
                        let take = left.min(self.buf.len() - self.pos);
                        let piece = &self.buf[self.pos..self.pos + take];
                        self.pos += take;
                        left -= take;
                        if !f(piece, self.last_read, self.last_read_unix_ns) {
                            return Ok(false);
                        }
                    }
                    while self.buf.len() - self.pos < 2 {
                        self.fill_or_eof("after a chunk")?;
                    }
                    if &self.buf[self.pos..self.pos + 2] != b"\r\n" {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "chunk not followed by CRLF",
                        ));
                    }
                    self.pos += 2;
                }
            }
        }
    }

    /// Reads a whole body.
    pub fn read_body(&mut self, framing: Framing) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        self.body_pieces(framing, |p, _, _| {
            body.extend_from_slice(p);
            true
        })?;
        Ok(body)
    }

    /// Sends a request and reads the whole response.
    pub fn roundtrip(&mut self, request: &[u8]) -> io::Result<Response> {
        self.send(request)?;
        let head = self.read_head()?;
        let body = self.read_body(head.framing)?;
        Ok(Response { head, body })
    }

    /// Reads an SSE body, calling `f` for each complete event. `f` returning false stops reading early
    /// (the connection must then be dropped). Returns whether the body was read to its end.
    pub fn read_events(
        &mut self,
        framing: Framing,
        mut f: impl FnMut(&Event) -> bool,
    ) -> io::Result<bool> {
        let mut pending: Vec<u8> = Vec::with_capacity(4096);
        let mut scan_from = 0usize;
        let mut stop = false;
        let completed = self.body_pieces(framing, |piece, arrived, unix_ns| {
            pending.extend_from_slice(piece);
            loop {
                let Some(i) = find(&pending[scan_from..], b"\n\n").map(|i| i + scan_from) else {
                    scan_from = pending.len().saturating_sub(1);
                    return true;
                };
                let ev = Event {
                    raw: &pending[..i],
                    arrived,
                    arrived_unix_ns: unix_ns,
                };
                let go_on = f(&ev);
                pending.drain(..i + 2);
                scan_from = 0;
                if !go_on {
                    stop = true;
                    return false;
                }
            }
        })?;
        Ok(completed && !stop)
    }
}

/// Builds a POST request with a JSON body.
pub fn post(host: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(k);
        r.push_str(": ");
        r.push_str(v);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.push_str(body);
    r.into_bytes()
}

/// Builds a GET request.
pub fn get(host: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n");
    for (k, v) in headers {
        r.push_str(k);
        r.push_str(": ");
        r.push_str(v);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}
