//! The watchdog: one thread that looks at every request in flight a few times a second.
//!
//! - A client that went away (its socket reads end-of-stream) gets its request cancelled: the worker, waiting
//!   on its upstream in half-second slices (see `upstream::tap`), drops that upstream connection and is free
//!   again within a second instead of waiting for the upstream to finish; the usage record says
//!   `client_closed`.
//! - A stream silent for `keepalive_secs` gets a keepalive, so proxies with idle timeouts don't cut it (the
//!   protocol's own, see `Protocol::keepalive`). Written through the lock the worker writes with, so chunks
//!   never interleave.
//!
//! A request is watched through the [`WatchGuard`] its worker holds and passes to whatever starts a stream.
//! The one per-thread binding left is the upstream cancel flag (`upstream::tap::bind`): the HTTP client's
//! transport, which reads it, is called by ureq with no way to hand it per-request state.

use std::net::TcpStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::http::SharedStream;
use crate::protocol::Protocol;
use crate::upstream::tap::{self, UpstreamSlot};

/// Why a request was cut short (the value of a request's cut flag, see [`Cut`]).
pub(crate) const CUT_NONE: u8 = 0;
pub(crate) const CUT_CLIENT_GONE: u8 = 1;
pub(crate) const CUT_SHUTDOWN: u8 = 2;

/// A request's cut flag: set by the watchdog when its client went away or the shutdown deadline passed, read
/// by the worker serving it.
pub(crate) type Cut = Arc<AtomicU8>;

/// One request being watched.
pub(crate) struct Watch {
    /// The request's id, for the log.
    id: String,
    client: Arc<TcpStream>,
    upstream: Arc<UpstreamSlot>,
    stream: Mutex<Option<(Arc<SharedStream>, &'static [u8])>>,
    cut: Cut,
}

impl Watch {
    /// Cuts the request for `reason`: its upstream wait ends and its stream takes no more keepalives.
    fn cut(&self, reason: u8) {
        // At the shutdown deadline nothing waits, a request draining after its client left included.
        if reason == CUT_SHUTDOWN {
            self.upstream.cancel();
        }
        if self
            .cut
            .compare_exchange(CUT_NONE, reason, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        if reason == CUT_CLIENT_GONE {
            if let Some((s, _)) = self.stream.lock().ok().and_then(|s| s.clone()) {
                s.close();
            }
            // The upstream's answer may still be read to its usage for the drain time its worker allowed.
            self.upstream.client_left();
            log::debug!("{}: the client left", self.id);
        }
    }
}

/// Keeps a request watched until dropped.
pub(crate) struct WatchGuard(Arc<Watch>);

impl WatchGuard {
    /// The request started streaming to its client on `stream`: it gets keepalives from now on.
    pub(crate) fn stream_started(&self, stream: Arc<SharedStream>, protocol: Protocol) {
        if let Ok(mut s) = self.0.stream.lock() {
            *s = Some((stream, protocol.keepalive));
        }
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        tap::bind(None);
    }
}

pub(crate) struct Watchdog {
    keepalive: Duration,
    watches: Mutex<Vec<Weak<Watch>>>,
    /// Set once the shutdown deadline has passed: requests that start from now on are cut at once.
    shutdown: std::sync::atomic::AtomicBool,
    /// Set once the server has stopped: the thread ends.
    stopped: std::sync::atomic::AtomicBool,
}

impl Watchdog {
    pub(crate) fn new(keepalive: Duration) -> Watchdog {
        Watchdog {
            keepalive,
            watches: Mutex::new(Vec::new()),
            shutdown: std::sync::atomic::AtomicBool::new(false),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Ends the watchdog's thread (after its current tick).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Watches the request `id` the current thread is handling, whose client is on `client`; `cut` is the
    /// request's flag. Upstream waits on this thread end when the watchdog cuts the request.
    pub(crate) fn watch(&self, id: &str, client: Arc<TcpStream>, cut: Cut) -> WatchGuard {
        let upstream = Arc::new(UpstreamSlot::default());
        if self.shutdown.load(Ordering::SeqCst) {
            let _ =
                cut.compare_exchange(CUT_NONE, CUT_SHUTDOWN, Ordering::SeqCst, Ordering::SeqCst);
            upstream.cancel();
        }
        let w = Arc::new(Watch {
            id: id.to_string(),
            client,
            upstream: upstream.clone(),
            stream: Mutex::new(None),
            cut,
        });
        tap::bind(Some(upstream));
        if let Ok(mut v) = self.watches.lock() {
            v.push(Arc::downgrade(&w));
        }
        WatchGuard(w)
    }

    /// The shutdown deadline has passed: cuts every request in flight (its upstream call ends, and the
    /// worker ends its answer with an error) and every request that starts from now on.
    pub(crate) fn cut_all_for_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let live: Vec<Arc<Watch>> = match self.watches.lock() {
            Ok(v) => v.iter().filter_map(Weak::upgrade).collect(),
            Err(_) => return,
        };
        for w in live {
            w.cut(CUT_SHUTDOWN);
        }
    }

    /// Whether the shutdown deadline has passed.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// One pass over the requests in flight.
    pub(crate) fn tick(&self) {
        let live: Vec<Arc<Watch>> = match self.watches.lock() {
            Ok(mut v) => {
                v.retain(|w| w.strong_count() > 0);
                v.iter().filter_map(Weak::upgrade).collect()
            }
            Err(_) => return,
        };
        for w in live {
            if w.cut.load(Ordering::SeqCst) != CUT_NONE {
                continue;
            }
            if client_gone(&w.client) {
                w.cut(CUT_CLIENT_GONE);
                continue;
            }
            let stream = w.stream.lock().ok().and_then(|s| s.clone());
            if let Some((s, payload)) = stream {
                s.ping_if_idle(self.keepalive, payload);
            }
        }
    }

    /// Ticks four times a second (or faster for very short keepalive intervals) until stopped.
    pub(crate) fn run(self: Arc<Self>) {
        let period = Duration::from_millis(250)
            .min(self.keepalive / 2)
            .max(Duration::from_millis(20));
        while !self.stopped.load(Ordering::SeqCst) {
            std::thread::sleep(period);
            self.tick();
        }
    }
}

/// Whether the client closed its side: a non-blocking peek (MSG_PEEK | MSG_DONTWAIT, which changes nothing
/// on the socket, unlike a read timeout or non-blocking mode the connection's other users would see) finds
/// end-of-stream or an error.
fn client_gone(sock: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    let peek = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    match rustix::net::recv(sock, &mut probe, peek) {
        Ok((0, _)) => true,
        Ok(_) => false,
        Err(e) => !matches!(e, rustix::io::Errno::AGAIN | rustix::io::Errno::INTR),
    }
}
