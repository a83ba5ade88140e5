//! Letting a worker give up on its upstream when its client goes away.
//!
//! A blocked read on an upstream socket cannot be interrupted from outside without touching sockets that
//! `ureq`'s pool may already have handed to another request. So cancellation is cooperative and stays on
//! the worker's own thread: the transport below waits for upstream input in slices of half a second and,
//! between slices, checks the cancel flag of the request its thread is serving (bound with [`bind`]). When
//! the watchdog has set it, the wait ends with an error, ureq drops that connection (it never returns to the
//! pool), and the worker is free. The real timeouts are unchanged: slices only split them.
//!
//! Direct TCP connections use the transport here ([`TcpTap`]) rather than ureq's own, which costs a few
//! system calls per call that a gateway pays on every request: its pooled-connection check switches the
//! socket to non-blocking and back around a read (three calls where one `MSG_PEEK | MSG_DONTWAIT` does), and
//! it sets the socket's timeouts afresh before each read and write as the deadline moves, and it sends a
//! request's head and body in two writes (two wake-ups of the upstream). `TcpTap` sets the read timeout to
//! the slice and changes it only for a last, shorter slice, and sends a head that announces a body together
//! with the body's first bytes.
//!
//! This uses ureq's `unversioned` transport API, so ureq is pinned to one minor version.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::net::TcpStream;
use ureq::unversioned::transport::time::Duration as UDuration;

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};

/// How long one wait for upstream input lasts before the cancel flag is looked at again (with the
/// watchdog's quarter-second tick, a worker is free within half a second of its client leaving).
const SLICE: Duration = Duration::from_millis(250);

/// The cancel flag of one request.
pub(crate) struct UpstreamSlot {
    cancelled: AtomicBool,
    /// Cancelled because the client left (not at the shutdown deadline): the upstream's answer may still be
    /// read for [`UpstreamSlot::drain`] from then on.
    left: AtomicBool,
    /// How long after the client left the upstream's answer is still read, in milliseconds (0: not at all).
    drain_ms: AtomicU64,
    /// When the client left, in milliseconds since `made`.
    left_at_ms: AtomicU64,
    made: Instant,
}

impl Default for UpstreamSlot {
    fn default() -> Self {
        UpstreamSlot {
            cancelled: AtomicBool::new(false),
            left: AtomicBool::new(false),
            drain_ms: AtomicU64::new(0),
            left_at_ms: AtomicU64::new(0),
            made: Instant::now(),
        }
    }
}

impl UpstreamSlot {
    /// Asks the thread serving this request to stop waiting on its upstream, at once.
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// The request's client left: the thread stops waiting on its upstream once the drain time allowed
    /// (if any) has passed, so what the upstream did can still be read to its usage report.
    pub(crate) fn client_left(&self) {
        let now = self.made.elapsed().as_millis() as u64;
        if !self.left.swap(true, Ordering::SeqCst) {
            self.left_at_ms.store(now, Ordering::SeqCst);
        }
    }

    /// Lets the upstream's answer be read for up to `grace` after the client leaves.
    pub(crate) fn drain(&self, grace: Duration) {
        self.drain_ms
            .store(grace.as_millis() as u64, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        if self.cancelled.load(Ordering::SeqCst) {
            return true;
        }
        if !self.left.load(Ordering::SeqCst) {
            return false;
        }
        let since = self.made.elapsed().as_millis() as u64;
        since.saturating_sub(self.left_at_ms.load(Ordering::SeqCst))
            >= self.drain_ms.load(Ordering::SeqCst)
    }
}

/// Lets the request this thread serves read its upstream's answer for up to `grace` after its client
/// leaves (see [`UpstreamSlot::drain`]).
pub(crate) fn drain_after_client_leaves(grace: Duration) {
    if let Some(slot) = bound() {
        slot.drain(grace);
    }
}

thread_local! {
    static BOUND: RefCell<Option<Arc<UpstreamSlot>>> = const { RefCell::new(None) };
    static ATTEMPT: std::cell::Cell<CallAttempt> = const { std::cell::Cell::new(CallAttempt::NEW) };
}

/// What one upstream call on this thread did at the transport level: whether it tried to open a new
/// connection, whether the whole request went out (the wait for the answer began), whether any byte came
/// back, whether a write failed, and whether the wait was given up because the request was cancelled. From
/// it the caller can tell a call the upstream cannot have taken (a reused connection closed before any byte
/// of the answer, or a failed write) from one it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallAttempt {
    pub connects: u32,
    pub sent: bool,
    pub input: bool,
    pub write_failed: bool,
    pub cancelled: bool,
}

impl CallAttempt {
    const NEW: CallAttempt = CallAttempt {
        connects: 0,
        sent: false,
        input: false,
        write_failed: false,
        cancelled: false,
    };

    /// The upstream cannot have received the whole request: a write failed, or a pooled connection (no
    /// new connection was tried) ended before any byte of the answer. Never a call given up because its
    /// request was cancelled: that one was sent, and sending it again would only give the upstream the
    /// same work twice.
    pub(crate) fn safe_to_retry(self) -> bool {
        !self.cancelled && (self.write_failed || (self.connects == 0 && !self.input))
    }
}

/// Starts recording a new upstream call on this thread.
pub(crate) fn begin_attempt() {
    ATTEMPT.with(|a| a.set(CallAttempt::NEW));
}

/// What the current upstream call on this thread did so far.
pub(crate) fn attempt() -> CallAttempt {
    ATTEMPT.with(|a| a.get())
}

fn note(f: impl FnOnce(&mut CallAttempt)) {
    ATTEMPT.with(|a| {
        let mut v = a.get();
        f(&mut v);
        a.set(v);
    });
}

/// Binds (or, with `None`, unbinds) the request this thread is serving.
pub(crate) fn bind(slot: Option<Arc<UpstreamSlot>>) {
    BOUND.with(|b| *b.borrow_mut() = slot);
}

fn bound() -> Option<Arc<UpstreamSlot>> {
    BOUND.with(|b| b.borrow().clone())
}

/// The TCP connector: direct connections get a [`TcpTap`]; a connection made earlier in the chain (through
/// a CONNECT proxy) is wrapped in a [`Tapped`]. Both wait for input in cancellable slices.
#[derive(Debug, Default)]
pub(crate) struct TapConnector;

impl<In: Transport> Connector<In> for TapConnector {
    type Out = Either<In, Either<Tapped, TcpTap>>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        note(|a| a.connects += 1);
        if let Some(proxied) = chained {
            return Ok(Some(Either::B(Either::A(Tapped {
                inner: Box::new(proxied),
            }))));
        }
        let stream = connect_any(details)?;
        if details.config.no_delay() {
            stream.set_nodelay(true)?;
        }
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(Either::B(TcpTap {
            stream,
            buffers,
            read_timeout: None,
            write_timeout: None,
            head: Vec::new(),
        }))))
    }
}

/// Connects to the first of the resolved addresses that answers, sharing the connect timeout among them.
fn connect_any(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    let budget = details.timeout.not_zero().map(|t| *t);
    let start = Instant::now();
    let count = details.addrs.len().max(1) as u32;
    let mut last = None;
    for (i, addr) in details.addrs.iter().enumerate() {
        let attempt = match budget {
            Some(b) => {
                let left = b.saturating_sub(start.elapsed());
                if left.is_zero() {
                    break;
                }
                let share = left / (count - i as u32).max(1);
                TcpStream::connect_timeout(addr, share.max(Duration::from_millis(10)))
            }
            None => TcpStream::connect(addr),
        };
        match attempt {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e)
            if matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) =>
        {
            Err(ureq::Error::Timeout(ureq::Timeout::Connect))
        }
        Some(e) => Err(ureq::Error::Io(e)),
        None if budget.is_some() => Err(ureq::Error::Timeout(ureq::Timeout::Connect)),
        None => Err(ureq::Error::Io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "no address to connect to",
        ))),
    }
}

/// A direct TCP connection to an upstream.
pub(crate) struct TcpTap {
    stream: TcpStream,
    buffers: LazyBuffers,
    /// The socket's current timeouts, so they are set only when they change.
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// A request head held back to go out in one write with its body.
    head: Vec<u8>,
}

/// `out` is a whole request head that announces a body of some length (and no `Expect`: nothing waits for
/// the upstream between head and body).
fn head_before_body(out: &[u8]) -> bool {
    if !out.ends_with(b"\r\n\r\n") || out.len() > 16 * 1024 {
        return false;
    }
    let mut length = false;
    for line in out.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"expect") {
            return false;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            length = !value.is_empty() && value != b"0";
        }
    }
    length
}

/// Writes `out`, after the held `head` if there is one (one system call for both).
fn write_out(stream: &TcpStream, head: &mut Vec<u8>, out: &[u8]) -> io::Result<()> {
    use std::io::{IoSlice, Write};
    if head.is_empty() {
        return (&*stream).write_all(out);
    }
    let held = std::mem::take(head);
    let (mut h, mut o) = (&held[..], out);
    while !h.is_empty() || !o.is_empty() {
        let n = match (&*stream).write_vectored(&[IoSlice::new(h), IoSlice::new(o)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let from_head = n.min(h.len());
        h = &h[from_head..];
        o = &o[n - from_head..];
    }
    Ok(())
}

impl fmt::Debug for TcpTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcpTap({:?})", self.stream.peer_addr().ok())
    }
}

/// `e` means the socket's timeout passed (or a non-blocking call found nothing).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl Transport for TcpTap {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let limit = timeout.not_zero().map(|t| *t);
        // Whole seconds above one second: the timeout is set again only when it moves by a second.
        let limit = limit.map(|t| match t.as_secs() {
            0 => t,
            s => Duration::from_secs(s),
        });
        if limit != self.write_timeout {
            self.stream.set_write_timeout(limit)?;
            self.write_timeout = limit;
        }
        let output = &self.buffers.output()[..amount];
        if self.head.is_empty() && head_before_body(output) {
            self.head.extend_from_slice(output);
            return Ok(());
        }
        match write_out(&self.stream, &mut self.head, output) {
            Ok(()) => Ok(()),
            Err(e) => {
                note(|a| a.write_failed = true);
                if timed_out(&e) {
                    Err(ureq::Error::Timeout(timeout.reason))
                } else {
                    Err(ureq::Error::Io(e))
                }
            }
        }
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        use std::io::Read;
        if !self.head.is_empty() {
            // A head held for a body that never came: it goes out now.
            let write = write_out(&self.stream, &mut self.head, &[]);
            write.map_err(|e| {
                note(|a| a.write_failed = true);
                ureq::Error::Io(e)
            })?;
        }
        // The answer is awaited only once the whole request went out.
        note(|a| a.sent = true);
        let slot = bound();
        let real = timeout.for_read();
        let budget: Duration = *real.after;
        let start = Instant::now();
        loop {
            if slot.as_ref().is_some_and(|s| s.is_cancelled()) {
                return Err(client_went_away());
            }
            let left = budget.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(ureq::Error::Timeout(real.reason));
            }
            let slice = Some(left.min(SLICE));
            if slice != self.read_timeout {
                self.stream.set_read_timeout(slice)?;
                self.read_timeout = slice;
            }
            let input = self.buffers.input_append_buf();
            match (&self.stream).read(input) {
                Ok(n) => {
                    self.buffers.input_appended(n);
                    if n > 0 {
                        note(|a| a.input = true);
                    }
                    return Ok(n > 0);
                }
                Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ureq::Error::Io(e)),
            }
        }
    }

    /// A pooled connection is usable when nothing is waiting on it: not closed by the upstream, and no stray
    /// bytes. One non-blocking peek.
    fn is_open(&mut self) -> bool {
        let mut byte = [0u8; 1];
        let peek = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(&self.stream, &mut byte, peek) {
            Ok(_) => false,
            Err(e) => timed_out(&e.into()),
        }
    }

    fn is_tls(&self) -> bool {
        false
    }
}

fn client_went_away() -> ureq::Error {
    note(|a| a.cancelled = true);
    ureq::Error::Io(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the client went away",
    ))
}

/// A transport made earlier in the chain (a CONNECT proxy's tunnel), whose waits for input give up when the
/// bound request is cancelled.
pub(crate) struct Tapped {
    inner: Box<dyn Transport>,
}

impl fmt::Debug for Tapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tapped({:?})", self.inner)
    }
}

impl Transport for Tapped {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let r = self.inner.transmit_output(amount, timeout);
        if r.is_err() {
            note(|a| a.write_failed = true);
        }
        r
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        note(|a| a.sent = true);
        let r = self.await_input_sliced(timeout);
        if matches!(r, Ok(true)) {
            note(|a| a.input = true);
        }
        r
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

impl Tapped {
    fn await_input_sliced(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let Some(slot) = bound() else {
            return self.inner.await_input(timeout);
        };
        // The wait's real budget, as the TCP transport would compute it.
        let real = timeout.for_read();
        let budget: Duration = *real.after;
        let start = Instant::now();
        loop {
            if slot.is_cancelled() {
                return Err(client_went_away());
            }
            let slice = budget.saturating_sub(start.elapsed()).min(SLICE);
            let t = NextTimeout {
                after: UDuration::Exact(slice),
                reason: real.reason,
                per_read: None,
                per_write: timeout.per_write,
            };
            match self.inner.await_input(t) {
                Err(ureq::Error::Timeout(_)) if start.elapsed() < budget => continue,
                other => return other,
            }
        }
    }
}
