//! One open connection between requests: its socket, the bytes received and not yet used, and how far the
//! request in progress has come. Reading never blocks: a worker given a readable connection takes what the
//! kernel has ([`Conn::read_ready`]) and either has a complete request to serve or parks the connection in
//! the poller again, so a slow or partial request never occupies a worker.

#![allow(
    unsafe_code,
    reason = "receive counts the bytes recv wrote into the buffer's spare capacity (Vec::set_len)"
)]

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::net::RecvFlags;

use super::chunked::ChunkedDecoder;
use super::request::{parse_head, Body, BodyKind, HttpError, HttpRequest};
use super::response::ResponseWriter;
use super::shared::{Early, HttpConfig, Incoming, ServerState};

/// Bytes read from a socket at most per call.
const READ_CHUNK: usize = 16 * 1024;
/// After an error answer, what the client is still sending is read and thrown away for this long (so the
/// close does not become a reset that destroys the answer in flight), and at most this much.
pub(super) const LINGER: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 4 * 1024 * 1024;
/// A body's share of the server-wide budget grows in steps of this many bytes as it arrives.
const BODY_STEP: u64 = 64 * 1024;

pub(super) struct Conn {
    pub sock: Arc<TcpStream>,
    /// Lent to the exchange while a request is served.
    pub writer: Option<ResponseWriter>,
    pub peer: SocketAddr,
    /// Received and not used yet (a partial head, or the next pipelined request).
    pub buf: Vec<u8>,
    pub phase: Phase,
    /// When the connection is given up: idle too long, the request not complete in time, lingering over.
    pub deadline: Instant,
    /// Request-body bytes this connection holds of the server-wide budget.
    pub reserved: u64,
}

pub(super) enum Phase {
    /// Between requests, nothing received yet.
    Idle,
    /// Some bytes of a request head received.
    Head,
    /// The head is parsed; the body is arriving.
    Body(Box<Partial>),
    /// Answered with an error and shut for writing; reading what is left before closing.
    Linger { discarded: usize },
}

pub(super) struct Partial {
    request: HttpRequest,
    chunked: Option<ChunkedDecoder>,
    length: u64,
    /// Where the body begins in the connection's buffer (after its head; 0 for a chunked body, gathered
    /// apart).
    start: usize,
}

/// What a connection has, after reading what the kernel had.
pub(super) enum Step {
    /// A whole request, ready to serve.
    Request(HttpRequest),
    /// Not enough yet: park it in the poller.
    More,
    /// The client is gone, or closed between requests: close quietly.
    Closed,
    /// The request cannot be served: answer this (a 4xx or 503 the server renders, or the screen's
    /// answer), then linger and close.
    Refuse(Refusal),
}

pub(super) enum Refusal {
    Framing(Option<String>, HttpError),
    /// The screen's answer, and whether the request was a HEAD (its answer is then a head alone).
    Screened(Early, bool),
    OverBudget(Option<String>),
}

impl Conn {
    pub(super) fn new(stream: TcpStream, peer: SocketAddr, read_timeout: Duration) -> Conn {
        let sock = Arc::new(stream);
        Conn {
            writer: Some(ResponseWriter::from_shared(sock.clone())),
            sock,
            peer,
            buf: Vec::new(),
            phase: Phase::Idle,
            deadline: Instant::now() + read_timeout,
            reserved: 0,
        }
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Whether a request has begun (so a deadline passing is a 408, not a quiet close).
    pub(super) fn started(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Linger { .. })
    }

    /// Makes the connection wait for its next request (after an answer).
    pub(super) fn next_request(&mut self, read_timeout: Duration) {
        self.phase = Phase::Idle;
        self.deadline = Instant::now() + read_timeout;
        // An idle connection keeps a small buffer, not the largest request it ever carried.
        if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
            self.buf = Vec::new();
        }
    }

    /// Reads what the socket has and moves the request on. Uses bytes already buffered first (pipelining).
    pub(super) fn read_ready(&mut self, config: &HttpConfig, state: &ServerState) -> Step {
        loop {
            match self.advance(config, state) {
                Step::More => {}
                done => return done,
            }
            match self.receive() {
                Ok(0) => {
                    return match &self.phase {
                        Phase::Idle => Step::Closed,
                        Phase::Head => Step::Refuse(Refusal::Framing(
                            None,
                            HttpError::BadRequest("incomplete request".into()),
                        )),
                        Phase::Body(p) => Step::Refuse(Refusal::Framing(
                            Some(p.request.path.clone()),
                            HttpError::BadRequest(
                                match p.chunked {
                                    Some(_) => "incomplete chunked body",
                                    None => "body shorter than Content-Length",
                                }
                                .into(),
                            ),
                        )),
                        Phase::Linger { .. } => Step::Closed,
                    }
                }
                Ok(_) => {
                    if matches!(self.phase, Phase::Idle) {
                        // The request's deadline runs from its first byte.
                        self.phase = Phase::Head;
                        self.deadline = Instant::now() + config.read_timeout;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::More,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Closed,
            }
        }
    }

    /// Reads and throws away what a refused client is still sending; `Closed` once it is done or too much.
    pub(super) fn drain_lingering(&mut self) -> Step {
        loop {
            // Into the connection's own buffer (a large array on the stack would be touched by every worker).
            self.buf.clear();
            let n = match self.receive() {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::More,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Step::Closed,
            };
            self.buf.clear();
            let Phase::Linger { discarded } = &mut self.phase else {
                return Step::Closed;
            };
            *discarded += n;
            if n == 0 || *discarded >= LINGER_BYTES {
                return Step::Closed;
            }
        }
    }

    /// After an error answer: stop writing, and read what is still coming until `LINGER` has passed.
    pub(super) fn linger(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Write);
        self.phase = Phase::Linger { discarded: 0 };
        self.deadline = Instant::now() + LINGER;
    }

    /// One non-blocking read into the buffer's spare room (at most `4 * READ_CHUNK` bytes a call).
    fn receive(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        let spare = self.buf.spare_capacity_mut();
        let want = spare.len().min(READ_CHUNK * 4);
        let ((received, _), _) =
            rustix::net::recv(&*self.sock, &mut spare[..want], RecvFlags::DONTWAIT)?;
        let n = received.len();
        // SAFETY: `recv` returned the first `n` bytes of the spare capacity as initialised (`received`), so
        // the vector may count them. (rustix's safe `spare_capacity` buffer would read into the whole spare
        // capacity, not `want` bytes of it.)
        unsafe { self.buf.set_len(self.buf.len() + n) };
        Ok(n)
    }

    /// Uses what is buffered: parses the head, then gathers the body.
    fn advance(&mut self, config: &HttpConfig, state: &ServerState) -> Step {
        if matches!(self.phase, Phase::Idle | Phase::Head) {
            if self.buf.is_empty() {
                return Step::More;
            }
            if matches!(self.phase, Phase::Idle) {
                // Pipelined bytes: the request started when its predecessor ended.
                self.phase = Phase::Head;
                self.deadline = Instant::now() + config.read_timeout;
            }
            match self.head(config) {
                Ok(Some(step)) => return step,
                Ok(None) => {}
                Err(refusal) => return Step::Refuse(refusal),
            }
        }
        match self.body(config, state) {
            Ok(true) => match std::mem::replace(&mut self.phase, Phase::Head) {
                Phase::Body(p) => Step::Request(p.request),
                _ => Step::More,
            },
            Ok(false) => Step::More,
            Err(refusal) => Step::Refuse(refusal),
        }
    }

    /// Parses the head if it is complete: a request with no body is done; one with a body moves on to
    /// gathering it (`None`). A body of known length stays where it is received, after its head.
    fn head(&mut self, config: &HttpConfig) -> Result<Option<Step>, Refusal> {
        let (head, used) = match parse_head(&self.buf, &config.limits) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Ok(Some(Step::More)),
            Err(e) => return Err(Refusal::Framing(request_path(&self.buf), e)),
        };
        let in_place = matches!(head.body, BodyKind::Length(_));
        if !in_place {
            self.buf.drain(..used);
        }
        // Identity before memory: the screen decides from the head alone whether the body may be read; a
        // request it answers has nothing of its body read or reserved.
        if let Some(screen) = &config.screen {
            let incoming = Incoming {
                request: &head.request,
                peer: self.peer,
                has_body: head.body != BodyKind::None,
            };
            if let Some(early) = screen(&incoming) {
                return Err(Refusal::Screened(early, head.request.method == "HEAD"));
            }
        }
        let length = match head.body {
            BodyKind::None => return Ok(Some(Step::Request(head.request))),
            // A body larger than the whole budget could never be held.
            BodyKind::Length(n) if n > config.max_buffered_body_bytes => {
                return Err(Refusal::OverBudget(Some(head.request.path)));
            }
            BodyKind::Length(n) => n,
            BodyKind::Chunked => 0,
        };
        let start = if in_place { used } else { 0 };
        if head.expect_continue && self.buf.len() == start {
            let _ = (&*self.sock).write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        if in_place {
            // Room for the body as it arrives (up to 64 KiB ahead: the budget grows with what arrives).
            let missing = (start + length as usize).saturating_sub(self.buf.len());
            self.buf.reserve(missing.min(64 * 1024));
        }
        self.phase = Phase::Body(Box::new(Partial {
            request: head.request,
            chunked: (head.body == BodyKind::Chunked).then(ChunkedDecoder::default),
            length,
            start,
        }));
        Ok(None)
    }

    /// Gathers the body; true once it is complete (and in the request). A body of known length is
    /// received into the connection's buffer after its head, and the buffer becomes the request's body as
    /// it is (only bytes of a next request already received after it are moved out); a chunked one is
    /// decoded into a body of its own.
    fn body(&mut self, config: &HttpConfig, state: &ServerState) -> Result<bool, Refusal> {
        let Phase::Body(p) = &mut self.phase else {
            return Ok(false);
        };
        let (have, done) = match &mut p.chunked {
            None => {
                let have = (self.buf.len() - p.start).min(p.length as usize);
                (have, have as u64 >= p.length)
            }
            Some(decoder) => {
                let body = p.request.body.gathering();
                let (used, done) = decoder
                    .feed(&self.buf, body, config.limits.max_body_bytes)
                    .map_err(|e| Refusal::Framing(Some(p.request.path.clone()), e))?;
                self.buf.drain(..used);
                (body.len(), done)
            }
        };
        // The budget holds what has arrived, in 64 KiB steps (never beyond a declared length): a client that
        // announces a large body and sends nothing holds nothing.
        let have = have as u64;
        let mut want = have.div_ceil(BODY_STEP) * BODY_STEP;
        if p.chunked.is_none() {
            want = want.min(p.length);
        }
        if want > self.reserved {
            if !state.reserve_body(want - self.reserved, config.max_buffered_body_bytes) {
                return Err(Refusal::OverBudget(Some(p.request.path.clone())));
            }
            self.reserved = want;
        }
        if done && p.chunked.is_none() {
            let end = p.start + p.length as usize;
            // Pipelined bytes after the body stay with the connection (copied: they are rarely many).
            let next = self
                .buf
                .get(end..)
                .filter(|r| !r.is_empty())
                .map(<[u8]>::to_vec);
            self.buf.truncate(end);
            let whole = std::mem::replace(&mut self.buf, next.unwrap_or_default());
            p.request.body = Body::within(whole, p.start);
        }
        Ok(done)
    }

    /// Takes back the buffer a served request's body was in, as the buffer for receiving the next one
    /// (unless bytes of the next request are already in one, or it grew large).
    pub(super) fn recycle(&mut self, body: Body) {
        let buf = body.into_buffer();
        if self.buf.is_empty()
            && buf.capacity() > self.buf.capacity()
            && buf.capacity() <= 4 * READ_CHUNK
        {
            self.buf = buf;
        }
    }
}

/// The path of the request line at the start of `buf`, if it is readable (for shaping error answers).
fn request_path(buf: &[u8]) -> Option<String> {
    let line_end = buf.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&buf[..line_end]).ok()?;
    let target = line.split_whitespace().nth(1)?;
    Some(target.split('?').next().unwrap_or(target).to_string())
}
