//! Letting a worker give up on its upstream when its client goes away.
//!
//! A blocked read on an upstream socket cannot be interrupted from outside without touching sockets that
//! `ureq`'s pool may already have handed to another request. So cancellation is cooperative and stays on
//! the worker's own thread: the transport below waits for upstream input in slices of half a second and,
//! between slices, checks the cancel flag of the request its thread is serving (bound with [`bind`]). When
//! the watchdog has set it, the wait ends with an error, ureq drops that connection (it never returns to the
//! pool), and the worker is free. The real timeouts are unchanged: slices only split them.
//!
//! This uses ureq's `unversioned` transport API, so ureq is pinned to one minor version.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ureq::unversioned::transport::time::Duration as UDuration;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, NextTimeout, TcpConnector, Transport,
};

/// How long one wait for upstream input lasts before the cancel flag is looked at again (with the
/// watchdog's quarter-second tick, a worker is free within half a second of its client leaving).
const SLICE: Duration = Duration::from_millis(250);

/// The cancel flag of one request.
#[derive(Default)]
pub struct UpstreamSlot {
    cancelled: AtomicBool,
}

impl UpstreamSlot {
    /// Asks the thread serving this request to stop waiting on its upstream.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

thread_local! {
    static BOUND: RefCell<Option<Arc<UpstreamSlot>>> = const { RefCell::new(None) };
    static ATTEMPT: std::cell::Cell<Attempt> = const { std::cell::Cell::new(Attempt::NEW) };
}

/// What one upstream call on this thread did at the transport level: whether it tried to open a new
/// connection, whether any byte came back, and whether a write failed. From it the caller can tell a call
/// the upstream cannot have taken (a reused connection closed before any byte of the answer, or a failed
/// write) from one it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    pub connects: u32,
    pub input: bool,
    pub write_failed: bool,
}

impl Attempt {
    const NEW: Attempt = Attempt {
        connects: 0,
        input: false,
        write_failed: false,
    };

    /// The upstream cannot have received the whole request: a write failed, or a pooled connection (no
    /// new connection was tried) ended before any byte of the answer.
    pub fn safe_to_retry(self) -> bool {
        self.write_failed || (self.connects == 0 && !self.input)
    }
}

/// Starts recording a new upstream call on this thread.
pub fn begin_attempt() {
    ATTEMPT.with(|a| a.set(Attempt::NEW));
}

/// What the current upstream call on this thread did so far.
pub fn attempt() -> Attempt {
    ATTEMPT.with(|a| a.get())
}

fn note(f: impl FnOnce(&mut Attempt)) {
    ATTEMPT.with(|a| {
        let mut v = a.get();
        f(&mut v);
        a.set(v);
    });
}

/// Binds (or, with `None`, unbinds) the request this thread is serving.
pub fn bind(slot: Option<Arc<UpstreamSlot>>) {
    BOUND.with(|b| *b.borrow_mut() = slot);
}

fn bound() -> Option<Arc<UpstreamSlot>> {
    BOUND.with(|b| b.borrow().clone())
}

/// ureq's TCP connector, with transports that wait in cancellable slices.
#[derive(Debug, Default)]
pub struct TapConnector;

impl<In: Transport> Connector<In> for TapConnector {
    type Out = Either<In, Tapped>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        note(|a| a.connects += 1);
        if let Some(proxied) = chained {
            // A connection through a CONNECT proxy, made earlier in the chain: tapped the same way.
            return Ok(Some(Either::B(Tapped {
                inner: Box::new(proxied),
            })));
        }
        let connected: Option<Either<(), _>> = TcpConnector::default().connect(details, None)?;
        let Some(Either::B(tcp)) = connected else {
            return Ok(None);
        };
        Ok(Some(Either::B(Tapped {
            inner: Box::new(tcp),
        })))
    }
}

/// A TCP transport whose waits for input give up when the bound request is cancelled.
pub struct Tapped {
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
                return Err(ureq::Error::Io(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the client went away",
                )));
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
