//! Writes HTTP/1.1 responses: whole bodies with Content-Length, or chunked streams flushed chunk by chunk.
//!
//! Every write goes straight to the socket in one `write_all` (head and body together, or one chunk with its
//! framing), so with `TCP_NODELAY` each SSE event leaves the machine the moment it is written. A failed write
//! is returned at once, so a worker relaying a stream learns immediately that its client is gone.

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::Arc;

use super::socket::{write_all_two, SharedStream};

/// The largest body buffer a connection keeps between responses.
const MAX_SPARE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    Streaming,
    Done,
    Broken,
}

/// Empties `v`, and lets its memory go when it grew past what a connection keeps between responses (a
/// large held answer would otherwise stay with the idle connection, in this buffer and the one it is
/// swapped with).
fn empty_keeping_little(v: &mut Vec<u8>) {
    if v.capacity() > MAX_SPARE {
        *v = Vec::new();
    } else {
        v.clear();
    }
}

/// Rewrites the data of a streamed body chunk by chunk before it is framed (a stream whose client reads it
/// in another form than the handler writes it): each chunk as a whole, and what closes the body.
pub trait Reframe: Send {
    /// The data `chunk` becomes (appended to `out`; possibly nothing).
    fn chunk(&mut self, chunk: &[u8], out: &mut Vec<u8>);
    /// What the body ends with (appended to `out`).
    fn end(&mut self, out: &mut Vec<u8>);
}

/// The writing half of one request/response exchange on a connection.
pub struct ResponseWriter {
    shared: Option<Arc<SharedStream>>,
    /// Shared (not duplicated) with the watchdog and the keepalive writer: no descriptor per request.
    stream: Arc<TcpStream>,
    state: State,
    keep_alive: bool,
    head_only: bool,
    status: u16,
    bytes_written: u64,
    buf: Vec<u8>,
    /// Hold the end of the response (a whole Content-Length response, or the last chunk) until the
    /// exchange is returned to its connection.
    hold: bool,
    /// Also hold every chunk written from now on (`hold_rest`), not only the last.
    holding_rest: bool,
    /// Framed bytes to write on release.
    held: Vec<u8>,
    /// A whole response's body, written after `held` on release (moved in by `send_owned`, not copied).
    held_body: Vec<u8>,
    /// A body buffer kept from the last response sent, for the next one ([`take_buffer`](Self::take_buffer)).
    spare: Vec<u8>,
    /// The unframed data of the chunks in `held` (what `withhold` hands back).
    held_data: Vec<u8>,
    /// The client spoke HTTP/1.0: a stream is sent without chunked framing and ends when the connection
    /// closes.
    http10: bool,
    /// The response in progress is a stream (chunked, or close-delimited for HTTP/1.0).
    chunked: bool,
    /// What the stream's chunks are rewritten with before they are framed, if anything.
    reframe: Option<Box<dyn Reframe>>,
}

/// What [`ResponseWriter::withhold`] took back from a held response.
#[derive(Debug, PartialEq, Eq)]
pub enum Withheld {
    /// Nothing was held back (or the response was already on the wire).
    Nothing,
    /// A whole Content-Length response: the writer is fresh again and can send another.
    Whole,
    /// The held tail of a stream (the data of its held chunks): the stream is open again for more chunks.
    Tail(Vec<u8>),
}

impl ResponseWriter {
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self::from_shared(Arc::new(stream))
    }

    /// A writer on a socket the connection also holds (to read from and to watch).
    pub(crate) fn from_shared(stream: Arc<TcpStream>) -> Self {
        ResponseWriter {
            shared: None,
            stream,
            state: State::Fresh,
            keep_alive: true,
            head_only: false,
            hold: false,
            holding_rest: false,
            held: Vec::new(),
            held_body: Vec::new(),
            spare: Vec::new(),
            held_data: Vec::new(),
            http10: false,
            chunked: false,
            reframe: None,
            status: 0,
            bytes_written: 0,
            buf: Vec::with_capacity(4096),
        }
    }

    /// Prepares the writer for the next request on the same connection.
    pub(crate) fn reset(&mut self, keep_alive: bool, head_only: bool) {
        self.reset_for(keep_alive, head_only, false);
    }

    /// [`reset`](Self::reset) for a request of the given HTTP version (`http10`: HTTP/1.0).
    pub(crate) fn reset_for(&mut self, keep_alive: bool, head_only: bool, http10: bool) {
        if let Some(shared) = self.shared.take() {
            shared.close();
        }
        self.state = State::Fresh;
        self.hold = false;
        self.holding_rest = false;
        self.held.clear();
        let body = std::mem::take(&mut self.held_body);
        self.keep_spare(body);
        self.held_data.clear();
        self.http10 = http10;
        self.chunked = false;
        self.reframe = None;
        self.keep_alive = keep_alive;
        self.head_only = head_only;
        self.status = 0;
        self.bytes_written = 0;
    }

    /// True once a status line has been written (a later error can no longer change the status).
    pub fn is_started(&self) -> bool {
        self.state != State::Fresh
    }

    /// The status that was sent, 0 if none yet.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Body bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Whether the connection can carry another request after this response.
    pub(crate) fn reusable(&self) -> bool {
        self.keep_alive && self.state == State::Done && self.held.is_empty()
    }

    /// Holds back the end of this response (the whole of a Content-Length response, or the terminal chunk
    /// of a chunked one) until the handler has returned the exchange: what the handler does after writing
    /// its answer (such as syncing a record to disk) then happens before the client sees the answer end.
    pub fn hold_end(&mut self) {
        if self.state == State::Fresh {
            self.hold = true;
        }
    }

    /// From now on, holds back every chunk written (not only the last) until release: what the handler does
    /// after the stream's last events are written can still replace them (see [`withhold`](Self::withhold)).
    /// Only in effect after `hold_end`.
    pub fn hold_rest(&mut self) {
        if self.hold && self.state == State::Streaming {
            self.holding_rest = true;
        }
    }

    /// Takes back what is held and not yet on the wire, so the handler can answer differently: a whole
    /// response (the writer is fresh again), or a stream's held tail (the stream stays open for more chunks).
    pub fn withhold(&mut self) -> Withheld {
        if self.held.is_empty() {
            return Withheld::Nothing;
        }
        empty_keeping_little(&mut self.held);
        let body = std::mem::take(&mut self.held_body);
        self.keep_spare(body);
        match self.state {
            State::Done
                if !self.holding_rest && self.held_data.is_empty() && !self.was_chunked() =>
            {
                self.state = State::Fresh;
                self.bytes_written = 0;
                Withheld::Whole
            }
            State::Done | State::Streaming => {
                self.state = State::Streaming;
                self.bytes_written -= self.held_data.len() as u64;
                Withheld::Tail(std::mem::take(&mut self.held_data))
            }
            _ => Withheld::Nothing,
        }
    }

    fn was_chunked(&self) -> bool {
        self.chunked
    }

    /// Writes what `hold_end` kept back (also done by the connection when the exchange is returned).
    pub fn release_held(&mut self) -> io::Result<()> {
        self.holding_rest = false;
        self.held_data.clear();
        if self.held.is_empty() {
            return Ok(());
        }
        let r = write_all_two(&self.stream, &self.held, &self.held_body);
        empty_keeping_little(&mut self.held);
        let body = std::mem::take(&mut self.held_body);
        self.keep_spare(body);
        if r.is_err() {
            self.state = State::Broken;
        }
        r
    }

    /// Makes this the last response on the connection (`Connection: close`).
    pub fn close_after(&mut self) {
        self.keep_alive = false;
    }

    fn write_head(&mut self, status: u16, headers: &[(&str, &str)], framing: Framing) {
        self.buf.clear();
        // Writing into a Vec cannot fail.
        let _ = write!(self.buf, "HTTP/1.1 {status} {}\r\n", reason(status));
        for (name, value) in headers {
            // Header injection guard: values come from config and upstreams too.
            if value.bytes().any(|b| b == b'\r' || b == b'\n') || name.is_empty() {
                continue;
            }
            self.buf.extend_from_slice(name.as_bytes());
            self.buf.extend_from_slice(b": ");
            self.buf.extend_from_slice(value.as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        }
        match framing {
            Framing::Length(n) => {
                let _ = write!(self.buf, "content-length: {n}\r\n");
            }
            Framing::Chunked if self.http10 => {
                // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
                self.keep_alive = false;
            }
            Framing::Chunked => self
                .buf
                .extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
        if !self.keep_alive {
            self.buf.extend_from_slice(b"connection: close\r\n");
        } else if self.http10 {
            // HTTP/1.0 closes after each answer unless it is told the connection stays.
            self.buf.extend_from_slice(b"connection: keep-alive\r\n");
        }
        self.buf.extend_from_slice(b"\r\n");
        self.status = status;
    }

    /// From now on no write waits for the client: what its socket buffer has no room for is dropped and the
    /// write fails. For an answer sent just before the connection closes by a thread that must never wait
    /// (the HTTP timer's 408): a client that reads nothing cannot hold it.
    pub(crate) fn never_wait(&mut self) {
        let _ = self.stream.set_nonblocking(true);
    }

    /// A second handle on the client's socket (for watching whether the client is still there).
    pub fn socket(&self) -> Arc<TcpStream> {
        self.stream.clone()
    }

    /// Shares the chunked body in progress so another thread can write keepalive chunks into it.
    pub fn share(&mut self) -> io::Result<Arc<SharedStream>> {
        if self.state != State::Streaming {
            return Err(io::Error::other("no chunked response in progress"));
        }
        if let Some(s) = &self.shared {
            return Ok(s.clone());
        }
        let shared = Arc::new(SharedStream::new(self.stream.clone(), !self.http10));
        self.shared = Some(shared.clone());
        Ok(shared)
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        let result = match &self.shared {
            Some(shared) => shared.write(&self.buf),
            None => (&*self.stream).write_all(&self.buf),
        };
        self.buf.clear();
        if result.is_err() {
            self.state = State::Broken;
        }
        result
    }

    /// Sends a complete response with a Content-Length body.
    pub fn send(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) -> io::Result<()> {
        if self.state != State::Fresh {
            return Err(io::Error::other("response already started"));
        }
        self.write_head(status, headers, Framing::Length(body.len()));
        let len = body.len() as u64;
        let body = if self.head_only { &[][..] } else { body };
        if self.hold {
            // The held bytes are the head's buffer (the one held before, emptied, becomes the next head's).
            self.buf.extend_from_slice(body);
            std::mem::swap(&mut self.held, &mut self.buf);
        } else {
            self.write_whole(body)?;
        }
        self.bytes_written = len;
        self.state = State::Done;
        Ok(())
    }

    /// [`send`](Self::send) of a body the writer may keep: held (when the end is held) without a copy, and
    /// kept afterwards as the buffer [`take_buffer`](Self::take_buffer) hands out for the next response.
    pub fn send_owned(
        &mut self,
        status: u16,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> io::Result<()> {
        if self.state != State::Fresh || !self.held.is_empty() {
            return self.send(status, headers, &body);
        }
        self.write_head(status, headers, Framing::Length(body.len()));
        let len = body.len() as u64;
        let body = if self.head_only {
            self.keep_spare(body);
            Vec::new()
        } else {
            body
        };
        if self.hold {
            std::mem::swap(&mut self.held, &mut self.buf);
            self.held_body = body;
        } else {
            let r = self.write_whole(&body);
            self.keep_spare(body);
            r?;
        }
        self.bytes_written = len;
        self.state = State::Done;
        Ok(())
    }

    /// An empty buffer to build a response body in (the last one sent through
    /// [`send_owned`](Self::send_owned), when there is one: a connection reuses it).
    pub fn take_buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.spare)
    }

    /// Keeps `buf` for the next response's body, unless a larger one is kept or it is large.
    fn keep_spare(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() > self.spare.capacity() && buf.capacity() <= MAX_SPARE {
            buf.clear();
            self.spare = buf;
        }
    }

    /// Writes the head in `buf` and then `body` (one vectored write where the socket takes both: the body is not
    /// copied behind the head).
    fn write_whole(&mut self, body: &[u8]) -> io::Result<()> {
        if self.shared.is_some() {
            self.buf.extend_from_slice(body);
            return self.flush_buf();
        }
        let r = write_all_two(&self.stream, &self.buf, body);
        self.buf.clear();
        if r.is_err() {
            self.state = State::Broken;
        }
        r
    }

    /// Starts a chunked response; send the body with [`write_chunk`](Self::write_chunk) and end it with
    /// [`finish`](Self::finish).
    pub fn start_chunked(&mut self, status: u16, headers: &[(&str, &str)]) -> io::Result<()> {
        if self.state != State::Fresh {
            return Err(io::Error::other("response already started"));
        }
        self.write_head(status, headers, Framing::Chunked);
        self.state = State::Streaming;
        self.chunked = true;
        self.flush_buf()
    }

    /// [`start_chunked`](Self::start_chunked), with every chunk rewritten by `reframe` before it is framed
    /// (and what it ends with written before the body's end).
    pub fn start_reframed(
        &mut self,
        status: u16,
        headers: &[(&str, &str)],
        reframe: Box<dyn Reframe>,
    ) -> io::Result<()> {
        self.start_chunked(status, headers)?;
        self.reframe = Some(reframe);
        Ok(())
    }

    /// Writes one chunk and pushes it to the socket. Empty data is ignored (it would end the body).
    pub fn write_chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if let Some(mut r) = self.reframe.take() {
            let mut out = Vec::with_capacity(data.len() + 8);
            r.chunk(data, &mut out);
            let written = self.write_framed(&out);
            self.reframe = Some(r);
            return written;
        }
        self.write_framed(data)
    }

    fn write_framed(&mut self, data: &[u8]) -> io::Result<()> {
        match self.state {
            State::Streaming => {}
            State::Broken => return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client gone")),
            _ => return Err(io::Error::other("no chunked response in progress")),
        }
        if data.is_empty() || self.head_only {
            return Ok(());
        }
        self.buf.clear();
        if !self.http10 {
            self.buf
                .extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        self.buf.extend_from_slice(data);
        if !self.http10 {
            self.buf.extend_from_slice(b"\r\n");
        }
        if self.holding_rest {
            self.held.append(&mut self.buf);
            self.held_data.extend_from_slice(data);
        } else {
            self.flush_buf()?;
        }
        self.bytes_written += data.len() as u64;
        Ok(())
    }

    /// Ends a chunked response.
    pub fn finish(&mut self) -> io::Result<()> {
        match self.state {
            State::Streaming => {}
            State::Done => return Ok(()),
            State::Broken => return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client gone")),
            State::Fresh => return Err(io::Error::other("no response in progress")),
        }
        // Kept: a stream whose held end is taken back (`withhold`) is reframed and ended again.
        if let Some(r) = self.reframe.as_mut() {
            let mut tail = Vec::new();
            r.end(&mut tail);
            self.write_framed(&tail)?;
        }
        if self.http10 || self.head_only {
            // Nothing ends an HTTP/1.0 stream but the connection closing (it is not kept alive).
        } else if self.hold {
            self.held.extend_from_slice(b"0\r\n\r\n");
        } else {
            self.buf.clear();
            self.buf.extend_from_slice(b"0\r\n\r\n");
            self.flush_buf()?;
        }
        if let Some(shared) = self.shared.take() {
            shared.close();
        }
        self.state = State::Done;
        Ok(())
    }

    /// Whether `TCP_NODELAY` is set on the socket (it is on every accepted socket).
    pub fn nodelay(&self) -> io::Result<bool> {
        self.stream.nodelay()
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

/// The reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        499 => "Client Closed Request",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        529 => "Overloaded",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::socket::send_nonblocking;
    use std::io::Read;
    use std::net::TcpListener;

    /// A writer on one end of a local connection, and a thread reading the other end until it closes.
    fn pair() -> (ResponseWriter, std::thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let mut client = TcpStream::connect(addr).unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).unwrap();
            got
        });
        let (stream, _) = listener.accept().unwrap();
        (ResponseWriter::new(stream), reader)
    }

    /// A writer that must never wait gives up at once on a client whose socket buffer is full.
    #[test]
    fn a_writer_that_never_waits_gives_up_on_a_full_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        stream.set_nonblocking(true).unwrap();
        let chunk = [b'x'; 64 * 1024];
        while send_nonblocking(&stream, &chunk).unwrap() > 0 {}
        stream.set_nonblocking(false).unwrap();
        let mut w = ResponseWriter::new(stream);
        w.never_wait();
        assert!(w.send(408, &[], b"request not received in time").is_err());
        drop(client);
    }

    /// A large answer held back and then written goes out whole, and the idle connection does not keep
    /// its memory (neither in the held buffer nor in the head buffer it is swapped with next).
    #[test]
    fn a_large_held_answer_leaves_no_large_buffer_behind() {
        let (mut w, reader) = pair();
        let big = vec![b'~'; 1 << 20];
        for round in 0..2 {
            w.reset(true, false);
            w.hold_end();
            w.send(200, &[("content-type", "text/plain")], &big)
                .unwrap();
            w.release_held().unwrap();
            assert!(
                w.held.capacity() <= MAX_SPARE,
                "round {round}: {}",
                w.held.capacity()
            );
            assert!(
                w.buf.capacity() <= MAX_SPARE,
                "round {round}: {}",
                w.buf.capacity()
            );
        }
        drop(w);
        let got = reader.join().unwrap();
        assert_eq!(got.iter().filter(|&&b| b == b'~').count(), 2 << 20);
        assert!(got.starts_with(b"HTTP/1.1 200"));
    }
}
