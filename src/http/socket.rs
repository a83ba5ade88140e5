//! Writes to a client's socket: whole, two buffers in vectored writes, or (a keepalive) never waiting, each
//! as `MSG_NOSIGNAL` so a client gone is an error and never a SIGPIPE; and the chunked body in progress that
//! the watchdog shares with its worker ([`SharedStream`]).

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::SendFlags;

/// A chunked response body that another thread may also write to (keepalive pings during long silences).
/// Every chunk is written whole under the lock, so chunks from both writers never interleave.
pub struct SharedStream {
    inner: Mutex<SharedInner>,
}

struct SharedInner {
    stream: Arc<TcpStream>,
    last_write: Instant,
    open: bool,
    /// The body is chunked (HTTP/1.1); an HTTP/1.0 stream's bytes are written as they are.
    chunked: bool,
}

impl SharedStream {
    /// The chunked (or, for HTTP/1.0, raw) body in progress on `stream`, shared.
    pub(super) fn new(stream: Arc<TcpStream>, chunked: bool) -> SharedStream {
        SharedStream {
            inner: Mutex::new(SharedInner {
                stream,
                last_write: Instant::now(),
                open: true,
                chunked,
            }),
        }
    }

    /// Writes `bytes` whole (the worker's chunk); a failed write ends the stream for every writer.
    pub(super) fn write(&self, bytes: &[u8]) -> io::Result<()> {
        match self.inner.lock() {
            Ok(mut g) if g.open => {
                let r = (&*g.stream).write_all(bytes);
                g.last_write = Instant::now();
                if r.is_err() {
                    g.open = false;
                }
                r
            }
            _ => Err(io::Error::new(io::ErrorKind::BrokenPipe, "client gone")),
        }
    }

    /// Ends the stream for every writer (the client is gone).
    pub fn close(&self) {
        if let Ok(mut g) = self.inner.lock() {
            g.open = false;
        }
    }

    /// Writes `chunk` if nothing was written for `idle`. Returns false once the stream is finished or
    /// broken (the caller can forget it). Never waits: not for the worker (which holding the lock is
    /// writing, so the stream is not idle) and not for a client that reads nothing (whose socket buffer is
    /// full, so a keepalive would be pointless); the caller serves many streams from one thread.
    pub fn ping_if_idle(&self, idle: Duration, chunk: &[u8]) -> bool {
        let mut g = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return true,
            Err(std::sync::TryLockError::Poisoned(_)) => return false,
        };
        if !g.open {
            return false;
        }
        if g.last_write.elapsed() >= idle {
            let framed = if g.chunked {
                frame_chunk(chunk)
            } else {
                chunk.to_vec()
            };
            let sent = match send_nonblocking(&g.stream, &framed) {
                Ok(0) => return true,
                // A write once begun must be finished, or the framing breaks: the rest (a few bytes at most,
                // since the buffer had room for the start) is written normally.
                Ok(n) => (&*g.stream).write_all(&framed[n..]),
                Err(e) => Err(e),
            };
            if sent.is_err() {
                g.open = false;
                return false;
            }
            g.last_write = Instant::now();
        }
        true
    }
}

/// One `send` that does not wait: `Ok(0)` when the socket buffer is full.
pub(super) fn send_nonblocking(stream: &TcpStream, data: &[u8]) -> io::Result<usize> {
    match rustix::net::send(stream, data, SendFlags::DONTWAIT | NO_SIGPIPE) {
        Ok(n) => Ok(n),
        Err(Errno::AGAIN | Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// `MSG_NOSIGNAL`: a write to a client that has gone away is an error, never a SIGPIPE, whatever the process
/// does with that signal. rustix names the flag everywhere but on Apple's systems, whose kernels take it too.
#[cfg(not(target_vendor = "apple"))]
const NO_SIGPIPE: SendFlags = SendFlags::NOSIGNAL;
#[cfg(target_vendor = "apple")]
const NO_SIGPIPE: SendFlags = SendFlags::from_bits_retain(libc::MSG_NOSIGNAL as u32);

/// Writes `a` then `b` whole, with as few vectored writes as the socket takes them in.
pub(super) fn write_all_two(stream: &TcpStream, a: &[u8], b: &[u8]) -> io::Result<()> {
    let mut parts = [io::IoSlice::new(a), io::IoSlice::new(b)];
    let mut left: &mut [io::IoSlice] = &mut parts;
    io::IoSlice::advance_slices(&mut left, 0);
    while !left.is_empty() {
        match send_vectored(stream, left) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One vectored write to a client, as `send` writes (`MSG_NOSIGNAL`): a client that has gone away is an
/// error, never a SIGPIPE, whatever the process does with that signal (`writev` has no such flag).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn send_vectored(stream: &TcpStream, parts: &[io::IoSlice]) -> io::Result<usize> {
    let mut no_control = rustix::net::SendAncillaryBuffer::default();
    Ok(rustix::net::sendmsg(
        stream,
        parts,
        &mut no_control,
        SendFlags::NOSIGNAL,
    )?)
}

/// One vectored write to a client (the standard library sets `SO_NOSIGPIPE` on these systems' sockets).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn send_vectored(mut stream: &TcpStream, parts: &[io::IoSlice]) -> io::Result<usize> {
    stream.write_vectored(parts)
}

fn frame_chunk(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(data.len() + 12);
    v.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}
